"""Webdataset-style tar shards of image-text pairs: writer, indexed reader (``pairs_wds``) and a
streaming reader with per-process shard splitting.

A sample is the consecutive tar members sharing a key (the member name up to the first ``.`` of
its base name): ``<key>.{png,jpg,jpeg,webp}`` (the image), ``<key>.txt`` (captions, one per line,
UTF-8) and optionally ``<key>.cls`` (integer class). Incomplete samples (no image or no caption, a
non-UTF-8 caption, or a shard that ends mid-sample) are skipped and counted.
"""

from __future__ import annotations

import glob
import io
import os
import tarfile
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from pydantic import Field
from torch.utils.data import get_worker_info

from ..adapters import ADAPTERS
from ..images.adapters import to_uint8_rgb
from ..streaming import StreamingDataset, StreamPosition
from .pairs import CAPTION_SEPARATOR, PairAdapter, PairCollector, PairDataset, PairOptions, clean_caption

SHARD_IMAGE_EXTENSIONS: tuple[str, ...] = ("png", "jpg", "jpeg", "webp")


@dataclass
class ShardSample:
    """One sample of a shard: image bytes, caption lines, class (-1 if none)."""

    key: str
    image: bytes
    captions: list[str]
    label: int = -1


@dataclass
class ShardReport:
    """What reading shards skipped."""

    samples: int = 0
    incomplete: int = 0  # no image or no caption
    non_utf8: int = 0
    unreadable: int = 0  # images that cannot be decoded (stream only; the indexed reader counts its own)
    truncated_shards: list[str] = field(default_factory=list)  # shards that end mid-sample

    def as_dict(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "incomplete_samples": self.incomplete,
            "non_utf8_captions": self.non_utf8,
            "unreadable_images": self.unreadable,
            "truncated_shards": len(self.truncated_shards),
        }


def sample_key(member_name: str) -> tuple[str, str]:
    """``dir/abc.seg.png`` -> (``dir/abc``, ``seg.png``): key and extension (webdataset rule)."""
    folder, _, base = member_name.rpartition("/")
    stem, _, ext = base.partition(".")
    return (f"{folder}/{stem}" if folder else stem), ext.lower()


def _finish(key: str, parts: dict[str, bytes], report: ShardReport) -> ShardSample | None:
    image = next((parts[e] for e in SHARD_IMAGE_EXTENSIONS if e in parts), None)
    if image is None or "txt" not in parts:
        report.incomplete += 1
        return None
    try:
        text = parts["txt"].decode("utf-8")
    except UnicodeDecodeError:
        report.non_utf8 += 1
        return None
    captions = [c for c in (clean_caption(line) for line in text.splitlines()) if c]
    label = -1
    if "cls" in parts:
        try:
            label = int(parts["cls"].decode("ascii").strip())
        except (UnicodeDecodeError, ValueError):
            report.incomplete += 1
            return None
    report.samples += 1
    return ShardSample(key, image, captions, label)


def _ends_cleanly(path: str | Path, offset: int) -> bool:
    """Whether an uncompressed tar has its end-of-archive marker (two zero blocks) at ``offset``."""
    with open(path, "rb") as fh:
        if fh.read(2) in (b"\x1f\x8b", b"BZ", b"\xfd7"):  # compressed: the decompressor detects truncation
            return True
        fh.seek(offset)
        marker = fh.read(1024)
    return len(marker) == 1024 and not any(marker)


def iter_shard(path: str | Path, report: ShardReport) -> Iterator[ShardSample]:
    """Samples of one tar shard, in order. A shard that ends mid-sample (cut data, cut header or no
    end-of-archive marker) is recorded in ``report.truncated_shards`` and its last, possibly partial,
    sample is counted as incomplete (never raised, never silently used)."""
    key, parts = None, {}
    truncated = None
    try:
        with tarfile.open(str(path), mode="r:*") as tar:
            for member in tar:
                if not member.isfile():
                    continue
                this_key, ext = sample_key(member.name)
                if this_key != key and key is not None:
                    sample = _finish(key, parts, report)
                    if sample is not None:
                        yield sample
                    parts = {}
                key = this_key
                handle = tar.extractfile(member)
                parts[ext] = handle.read() if handle is not None else b""
                if len(parts[ext]) != member.size:
                    raise tarfile.ReadError(f"member {member.name} ends after {len(parts[ext])} of {member.size} bytes")
            if not _ends_cleanly(path, tar.offset):
                truncated = "no end-of-archive marker after the last complete member"
    except (tarfile.ReadError, EOFError, OSError) as err:
        truncated = str(err)
    if truncated is not None:
        report.truncated_shards.append(f"{path} ({truncated})")
        if key is not None:
            report.incomplete += 1
        return
    if key is not None:
        sample = _finish(key, parts, report)
        if sample is not None:
            yield sample


def expand_shards(spec: str | Sequence[str]) -> list[str]:
    """Shard paths from a glob, a brace-free list, or one path; error when nothing matches."""
    patterns = [spec] if isinstance(spec, str) else list(spec)
    paths: list[str] = []
    for pattern in patterns:
        pattern = os.path.expanduser(pattern)
        found = sorted(glob.glob(pattern)) if any(ch in pattern for ch in "*?[") else [pattern]
        for path in found:
            if not Path(path).is_file():
                raise ValueError(f"shard '{path}' does not exist (data.options.shards)")
        paths.extend(found)
    if not paths:
        raise ValueError(f"no shard matches {spec!r} (data.options.shards)")
    return paths


def shards_for_process(shards: Sequence[str], rank: int, world: int) -> list[str]:
    """Shards ``rank, rank + world, ...`` of the list: every shard read by exactly one process.
    Raises ``ValueError`` when there are fewer shards than processes."""
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"bad process index rank={rank} for world={world}")
    if len(shards) < world:
        raise ValueError(f"{len(shards)} shards for {world} processes: every process needs at least one shard")
    return list(shards[rank::world])


def process_index() -> tuple[int, int]:
    """``(rank, world)`` of this process: the initialised ``torch.distributed`` group, else
    Accelerate's state / torchrun's environment (``(0, 1)`` when single)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return int(dist.get_rank()), int(dist.get_world_size())
    try:
        from accelerate import PartialState

        state = PartialState()
        return int(state.process_index), int(state.num_processes)
    except Exception:  # accelerate not initialised: environment of torchrun
        return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


class ShardPairStream(StreamingDataset):
    """Streams pair items from tar shards without indexing them, for data too large to hold at once.

    Epoch ``e``: the shard list (shuffled by ``(seed, e)`` when ``shuffle_shards``) is split over
    processes (``[rank::world]``) and then over this process's DataLoader workers
    (``[worker::num_workers]``), so the processes and workers read disjoint shards that together
    cover every sample once per epoch. A worker reads its shards in order through a shuffle buffer
    of ``shuffle_buffer`` samples (seeded by ``(seed, e, rank, worker)``; 0 = shard order), drained
    at the end of each epoch, so all of a worker's epoch-``e`` items come before its epoch ``e + 1``
    ones. ``epochs`` passes (``None``: endless; the trainer counts steps). Images are decoded when an
    item is yielded; unreadable images and incomplete samples are skipped and counted
    (``report`` in single-process use; a worker warns at the end of an epoch that skipped anything).

    Items are the pair adapters' items plus :data:`~multiview_app.data.streaming.STREAM_KEYS`: the
    worker id, its epoch and the item's 0-based offset within that worker's epoch (``index`` = offset). :meth:`resume_from` makes each worker skip
    (without decoding) the items it had yielded before, replaying its epoch's shard reads and shuffle
    buffer, so a resumed stream continues exactly where the recorded position left it.
    """

    def __init__(
        self,
        shards: Sequence[str],
        load_size: int,
        rank: int | None = None,
        world: int | None = None,
        *,
        seed: int = 0,
        shuffle_shards: bool = False,
        shuffle_buffer: int = 0,
        epochs: int | None = 1,
    ) -> None:
        if rank is None or world is None:
            rank, world = process_index()
        self.all_shards = list(shards)
        self.shards = shards_for_process(self.all_shards, rank, world)  # epoch 0 without shuffling
        self.rank, self.world = rank, world
        self.load_size = load_size
        self.seed, self.shuffle_shards, self.shuffle_buffer, self.epochs = seed, shuffle_shards, shuffle_buffer, epochs
        self.report = ShardReport()
        self.start: dict[int, StreamPosition] = {}
        self.batches_done = 0

    def check_workers(self, num_workers: int) -> None:
        """Every DataLoader worker of every process needs at least one shard in every epoch."""
        readers = self.world * max(1, num_workers)
        if len(self.all_shards) < readers:
            raise ValueError(
                f"{len(self.all_shards)} shards for {self.world} process(es) x {max(1, num_workers)} DataLoader "
                f"worker(s): every worker needs at least one shard (write more, smaller shards or lower train.num_workers)"
            )

    def resume_from(self, positions: dict[int, StreamPosition], batches_done: int = 0) -> None:
        self.start, self.batches_done = dict(positions), batches_done

    def epoch_shards(self, epoch: int, worker: int = 0, num_workers: int = 1) -> list[str]:
        """The shards worker ``worker`` of this process reads in ``epoch``."""
        order = list(self.all_shards)
        if self.shuffle_shards:
            perm = np.random.default_rng([self.seed, epoch]).permutation(len(order))
            order = [order[i] for i in perm]
        return order[self.rank :: self.world][worker::num_workers]

    def _samples(self, epoch: int, worker: int, num_workers: int) -> Iterator[tuple[str, ShardSample]]:
        """``(shard, sample)`` of one worker's epoch in stream order (after the shuffle buffer)."""
        rng = np.random.default_rng([self.seed, epoch, self.rank, worker])
        buffer: list[tuple[str, ShardSample]] = []
        for path in self.epoch_shards(epoch, worker, num_workers):
            for sample in iter_shard(path, self.report):
                if not sample.captions:
                    self.report.incomplete += 1
                    continue
                buffer.append((path, sample))
                if len(buffer) > self.shuffle_buffer:
                    j = int(rng.integers(len(buffer))) if self.shuffle_buffer else 0
                    buffer[j], buffer[-1] = buffer[-1], buffer[j]
                    yield buffer.pop()
        while buffer:
            j = int(rng.integers(len(buffer))) if self.shuffle_buffer else 0
            buffer[j], buffer[-1] = buffer[-1], buffer[j]
            yield buffer.pop()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = get_worker_info()
        worker, num_workers = (0, 1) if info is None else (info.id, info.num_workers)
        worker = (worker + self.batches_done) % num_workers  # logical worker (StreamingDataset.resume_from)
        self.check_workers(num_workers)
        start = self.start.get(worker, StreamPosition())
        epoch = start.epoch
        while self.epochs is None or epoch < self.epochs:
            skip = start.offset if epoch == start.epoch else 0
            yielded = 0
            before = self.report.as_dict()
            # offset = place in this worker's epoch sequence (unreadable images included, so a replay
            # that skips without decoding stays aligned)
            for offset, (path, sample) in enumerate(self._samples(epoch, worker, num_workers)):
                if offset < skip:  # replay of a resumed epoch: already consumed, not decoded
                    continue
                try:
                    with Image.open(io.BytesIO(sample.image)) as img:
                        x = to_uint8_rgb(img, self.load_size)
                except (OSError, ValueError, Image.DecompressionBombError):
                    self.report.unreadable += 1
                    continue
                yield {
                    "x": x,
                    "captions": CAPTION_SEPARATOR.join(sample.captions),
                    "label": sample.label,
                    "index": offset,
                    "source": f"{path}:{sample.key}",
                    "stream_worker": worker,
                    "stream_epoch": epoch,
                    "stream_offset": offset,
                }
                yielded += 1
            if yielded == 0 and skip == 0:
                raise ValueError(
                    f"process {self.rank} worker {worker}: no readable sample in the shards of epoch {epoch} "
                    f"({', '.join(self.epoch_shards(epoch, worker, num_workers))})"
                )
            after = self.report.as_dict()
            skipped = ("incomplete_samples", "non_utf8_captions", "unreadable_images", "truncated_shards")
            if info is not None and any(after[key] != before[key] for key in skipped):
                warnings.warn(
                    f"shard stream (process {self.rank} worker {worker}, epoch {epoch}): skipped "
                    f"{after['incomplete_samples'] - before['incomplete_samples']} incomplete samples, "
                    f"{after['non_utf8_captions'] - before['non_utf8_captions']} non-UTF-8 captions, "
                    f"{after['unreadable_images'] - before['unreadable_images']} unreadable images",
                    stacklevel=2,
                )
            epoch += 1


def write_shards(
    samples: Iterable[ShardSample], out_dir: str | Path, samples_per_shard: int = 1000, prefix: str = "pairs"
) -> list[Path]:
    """Write ``<prefix>-000000.tar, ...`` (each written to a temp name, then renamed)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    tar, count, tmp = None, 0, None

    def close() -> None:
        if tar is not None:
            tar.close()
            final = out_dir / f"{prefix}-{len(written):06d}.tar"
            os.replace(tmp, final)
            written.append(final)

    def add(name: str, data: bytes) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(data), 0o644, 0
        tar.addfile(info, io.BytesIO(data))

    for sample in samples:
        if tar is None or count == samples_per_shard:
            close()
            tmp = out_dir / f".{prefix}-{len(written):06d}.tar.tmp"
            tar, count = tarfile.open(tmp, "w"), 0
        add(f"{sample.key}.png", sample.image)
        add(f"{sample.key}.txt", "\n".join(sample.captions).encode("utf-8"))
        if sample.label >= 0:
            add(f"{sample.key}.cls", str(sample.label).encode("ascii"))
        count += 1
    close()
    return written


@ADAPTERS.register("pairs_wds")
class PairsWebDatasetAdapter(PairAdapter):
    """Image-text pairs from tar shards (``key.png``/``.jpg`` + ``key.txt`` [+ ``key.cls``]); every
    line of ``key.txt`` is one caption. Images are decoded into memory, or with ``stream: true`` the
    train split is a :class:`ShardPairStream` (shards split over processes and DataLoader workers,
    shuffle buffer, nothing indexed or held; needs ``test_shards``, which are decoded into memory).
    Test split: ``test_shards`` when given, else the fixed stratified split. ``class_names`` gives
    names to the ``.cls`` integers (for zero-shot evaluation)."""

    class Options(PairOptions):
        shards: str | list[str] = Field(..., description="glob or list of .tar shards")
        test_shards: str | list[str] | None = None
        class_names: list[str] = Field(default_factory=list)
        stream: bool = Field(False, description="stream the train shards (per-process / per-worker shard split)")
        shuffle_buffer: int = Field(
            1000, ge=0, description="stream: samples in each worker's shuffle buffer (0 = shard order)"
        )
        shuffle_shards: bool = Field(
            True, description="stream: shuffle the shard list every epoch (seeded by train.seed)"
        )

    def __init__(self, options: Options) -> None:
        super().__init__(options)
        self.class_names = list(options.class_names)
        if options.stream and not options.test_shards:
            raise ValueError(
                "pairs_wds with stream: true needs test_shards (data.options.test_shards): the fixed "
                "train/test split would index every train sample"
            )
        specs = (
            {"test": options.test_shards}
            if options.stream
            else {"train": options.shards} | ({"test": options.test_shards} if options.test_shards else {})
        )
        datasets = {split: self._read_indexed(split, spec) for split, spec in specs.items()}
        labels = torch.cat([d.labels for d in datasets.values()])
        if not self.class_names and bool((labels >= 0).any()):
            self.class_names = [str(c) for c in range(int(labels.max()) + 1)]
        if options.stream:
            stream = ShardPairStream(
                expand_shards(options.shards),
                options.load_size,
                shuffle_shards=options.shuffle_shards,
                shuffle_buffer=options.shuffle_buffer,
                epochs=None,
            )
            self._set_splits(stream, datasets["test"])  # type: ignore[arg-type]
        elif "test" in datasets:
            self._set_splits(datasets["train"], datasets["test"])
        else:
            self._split_fixed(datasets["train"])

    def _read_indexed(self, split: str, spec: str | list[str]) -> PairDataset:
        """All samples of the shards ``spec`` decoded into memory (skips counted in ``report[split]``)."""
        shards = expand_shards(spec)
        what = f"shards {spec!r}"
        report = ShardReport()
        collector = PairCollector(what)
        for path in shards:
            for sample in iter_shard(path, report):
                data = sample.image
                source = f"{path}:{sample.key}"
                collector.add(source, sample.captions or [""], sample.label, lambda d=data: Image.open(io.BytesIO(d)))
        if report.truncated_shards or report.incomplete or report.non_utf8:
            warnings.warn(
                f"{what}: skipped {report.incomplete} incomplete samples and {report.non_utf8} non-UTF-8 captions; "
                f"{len(report.truncated_shards)} shard(s) end mid-sample"
                + (f", first: {report.truncated_shards[0]}" if report.truncated_shards else ""),
                stacklevel=3,
            )
        if not collector.order:
            raise ValueError(f"{what}: no complete sample (key.png/.jpg + key.txt) in {len(shards)} shard(s)")
        dataset, pair_report = collector.decode(self.options.load_size, self.options.max_bad_fraction)
        self.report[split] = report.as_dict() | pair_report
        return dataset


__all__ = [
    "PairsWebDatasetAdapter",
    "ShardPairStream",
    "ShardReport",
    "ShardSample",
    "expand_shards",
    "iter_shard",
    "process_index",
    "sample_key",
    "shards_for_process",
    "write_shards",
]
