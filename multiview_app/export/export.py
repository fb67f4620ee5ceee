"""Export a run's embeddings of a dataset split; load an export.

Flow: ``load_run`` (weights ``final`` / ``init`` / ``step_N``) -> adapter + view policy of the run
(data / views sections optionally replaced) -> the items of the split(s) are cut into shards of
contiguous item ranges -> every process streams its shards through
:func:`~multiview_app.eval.features.iter_feature_batches` (the evaluators' code path) into
:class:`~multiview_app.export.writer.ShardWriter` -> the main process merges the metadata and writes
``manifest.json`` last. Processes never pad: each takes whole shards of disjoint item ranges, so the
merged export has every item exactly once, in split order then item index.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any, Literal, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torch.utils.data import Subset, default_collate

from ..config import Config, ConfigError, apply_overrides, config_from_dict, deep_merge, read_yaml
from ..data.streaming import StreamingDataset
from ..eval.features import FEATURE_KINDS, FeatureBatch, FeatureKind, combine_views, iter_feature_batches
from ..fileio import atomic_write_json, sha256_file
from ..train.input_contract import check_run_input
from ..train.run_io import load_run, resolve_weights
from .options import ALL_SPLITS, DEFAULT_MAX_SHARD_MB, VIEW_MODES
from .writer import EMBEDDING_COLUMN, FILE_FORMATS, TMP_SUFFIX, FileFormat, ShardWriter, merge_parquet, shard_file

EXPORT_FORMAT = "multiview_app.export/1"
MANIFEST = "manifest.json"
PLAN = ".export-plan.json"
METADATA = "metadata.parquet"
Views = Literal["per-view", "mean", "concat"]
T = TypeVar("T")
#: What the name of a policy's evaluation view is, by policy class: the column of per-view rows that holds it
#: (the transform stack of an augmentation view, e.g. ``test``; the EEG channel); others: ``view_name``.
VIEW_COLUMNS: dict[str, str] = {"AugmentPolicy": "transform", "ChannelViews": "channel"}
VIEW_NAME_COLUMN = "view_name"
#: Metadata columns the export itself writes, with their types (adapter columns with the same name
#: get a ``meta_`` prefix; their types are inferred).
OWN_COLUMN_TYPES: dict[str, pa.DataType] = {
    "item_id": pa.string(),
    "split": pa.string(),
    "index": pa.int64(),
    **{column: pa.string() for column in sorted({*VIEW_COLUMNS.values(), VIEW_NAME_COLUMN})},
    "view_index": pa.int64(),
    "modality": pa.string(),
    "label": pa.int64(),
    "label_name": pa.string(),
}
OWN_COLUMNS = tuple(OWN_COLUMN_TYPES)


class ExportError(ValueError):
    """Invalid export request or output folder (the message names the argument / file)."""


# ----------------------------------------------------------------------------- plan


@dataclass
class Segment:
    """Items ``start:stop`` (positions within ``split``) of one shard."""

    split: str
    start: int
    stop: int


@dataclass
class Shard:
    """Items ``item_start:item_stop`` of the export (split order, then index) -> ``rows`` rows."""

    index: int
    item_start: int
    item_stop: int
    rows: int
    embeddings: str
    metadata: str | None
    segments: list[Segment] = field(default_factory=list)


def plan_shards(
    split_sizes: dict[str, int],
    rows_per_item: int,
    dim: int,
    world: int,
    max_shard_bytes: float,
    file_format: FileFormat,
) -> list[Shard]:
    """Cut the items of ``split_sizes`` (in order) into ``max(world, ceil(bytes / max_shard_bytes))``
    shards of near-equal contiguous item ranges (at most one shard per item)."""
    total = sum(split_sizes.values())
    if total == 0:
        raise ExportError(f"nothing to export: the split(s) {', '.join(split_sizes)} hold no items")
    total_bytes = total * rows_per_item * dim * 4
    count = min(total, max(world, math.ceil(total_bytes / max(max_shard_bytes, 1.0))))
    starts = np.cumsum([0, *split_sizes.values()])
    shards = []
    for s in range(count):
        lo, hi = s * total // count, (s + 1) * total // count
        segments = [
            Segment(name, int(max(lo, a) - a), int(min(hi, b) - a))
            for name, a, b in zip(split_sizes, starts[:-1], starts[1:])
            if max(lo, a) < min(hi, b)
        ]
        meta = f"metadata-{s:05d}-of-{count:05d}.parquet" if file_format == "npy" else None
        shards.append(
            Shard(s, lo, hi, (hi - lo) * rows_per_item, shard_file("embeddings", s, count, file_format), meta, segments)
        )
    return shards


# ----------------------------------------------------------------------------- processes


class Processes:
    """Rank / world of the launch (``torchrun`` / ``accelerate launch``; one process otherwise)."""

    def __init__(self) -> None:
        from accelerate import PartialState

        state = PartialState(cpu=not torch.cuda.is_available())  # CPU launches: gloo process group
        self.rank, self.world, self.device = state.process_index, state.num_processes, state.device
        self.is_main = state.is_main_process

    def all_ok(self, ok: bool) -> bool:
        """True when every process passes ``ok=True`` (a collective: every process must call it)."""
        if self.world == 1:
            return ok
        import torch.distributed as dist

        flag = torch.tensor([1 if ok else 0], device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        return bool(flag.item())

    def on_main(self, fn: Callable[[], T], what: str) -> T | None:
        """``fn()`` on the main process (None on the others), then :meth:`settle` (a collective)."""
        result, error = None, None
        if self.is_main:
            try:
                result = fn()
            except BaseException as exc:  # noqa: BLE001 - shared with the other processes, then re-raised
                error = exc
        self.settle(error, what)
        return result

    def settle(self, error: BaseException | None, what: str) -> None:
        """Agree on success; re-raise this process's error, or report another process's failure."""
        if not self.all_ok(error is None):
            if error is not None:
                raise error
            raise RuntimeError(f"{what} failed in another process (see its error above); no manifest written")


# ----------------------------------------------------------------------------- request


def config_hash(cfg: Config) -> str:
    """sha256 of the effective config (canonical JSON)."""
    return hashlib.sha256(json.dumps(cfg.to_dict(), sort_keys=True).encode()).hexdigest()


def data_config(cfg: Config, config_file: str | Path | None = None, overrides: Sequence[str] = ()) -> Config:
    """The run's config with its ``data`` / ``views`` sections updated from ``config_file`` (only those
    sections allowed) and dotted ``data.`` / ``views.`` overrides. A different ``data.adapter`` (or
    ``views.policy``) replaces the run's section instead of merging into it."""
    new: dict[str, Any] = {}
    if config_file is not None:
        new = read_yaml(config_file)
        other = sorted(set(new) - {"data", "views"})
        if other:
            raise ConfigError(f"{config_file}: export reads only the data and views sections, got {', '.join(other)}")
    bad = [o for o in overrides if not o.startswith(("data.", "views."))]
    if bad:
        raise ConfigError(f"override {bad[0]!r}: export accepts data.* and views.* overrides only")
    new = apply_overrides(new, list(overrides))
    raw = cfg.to_dict()
    for section, key in (("data", "adapter"), ("views", "policy")):
        given = new.get(section)
        if not given:
            continue
        if not isinstance(given, dict):
            raise ConfigError(f"{section}: expected a mapping, got {given!r}")
        replace = key in given and given[key] != raw[section][key]
        raw[section] = dict(given) if replace else deep_merge(raw[section], given)
    return config_from_dict(raw, check=True)


def _check_out(run_dir: Path, out_dir: Path) -> None:
    out, run = out_dir.resolve(), run_dir.resolve()
    checkpoints = run / "checkpoints"
    if out == run or out == checkpoints or checkpoints in out.parents:
        raise ExportError(
            f"--out {out_dir}: inside the run's folder {run_dir} / its checkpoints; choose another folder"
        )


def check_modality(model: torch.nn.Module, policy: Any, dataset: Any, adapter_name: str, whose: str = "") -> None:
    """The model must have an encoder for every modality of the eval views of one item (an
    ExportError naming them otherwise); multimodal adapters (e.g. image_text) pass when it has all."""
    encoders = list(getattr(model, "encoders", {}))
    views = policy.eval_views(default_collate([dataset[0]]))
    missing = sorted(set(views.modalities) - set(encoders))
    if encoders and missing:
        raise ExportError(
            f"data adapter '{adapter_name}' gives '{', '.join(missing)}' views but the model{whose} has "
            f"encoders for {', '.join(encoders)} only"
        )


def _split_sizes(adapter: Any, split: str, adapter_name: str) -> dict[str, int]:
    available = [*adapter.splits, ALL_SPLITS]
    if split not in available:
        raise ExportError(
            f"--split {split!r}: unknown for data adapter '{adapter_name}'; available: {', '.join(available)}"
        )
    names = list(adapter.splits) if split == ALL_SPLITS else [split]
    streamed = [name for name in names if isinstance(adapter.split(name), StreamingDataset)]
    if streamed:
        raise ExportError(
            f"--split {split!r}: split {', '.join(streamed)} of data adapter '{adapter_name}' is streamed "
            "(data.options.stream: true) and has no end; export another split or read it with stream: false"
        )
    return {name: len(adapter.split(name)) for name in names}


def _versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for package in ("multiview_app", "torch", "numpy", "pyarrow", "accelerate"):
        try:
            versions[package] = importlib_metadata.version(package)
        except importlib_metadata.PackageNotFoundError:
            versions[package] = "unknown"
    return versions


# ----------------------------------------------------------------------------- rows


def feature_rows(
    part: FeatureBatch,
    split: str,
    first_index: int,
    views: Views,
    normalize: bool,
    class_names: list[str],
    view_name_column: str = VIEW_NAME_COLUMN,
) -> tuple[np.ndarray, dict[str, list[Any]]]:
    """Rows ``(n * k, f)`` (per-view, item-major), ``(n, f)`` (mean) or ``(n, k * f)`` (concat) of a
    feature batch and their metadata columns (own columns first, then the adapter's); per-view rows name
    their view in ``view_name_column`` (:func:`view_column`)."""
    n, k, _ = part.features.shape
    index = list(range(first_index, first_index + n))
    labels = part.labels.tolist()
    columns: dict[str, list[Any]] = {
        "item_id": [f"{split}/{i}" for i in index],
        "split": [split] * n,
        "index": index,
    }
    item_columns: dict[str, list[Any]] = {
        "label": labels,
        "label_name": [class_names[y] if 0 <= y < len(class_names) else None for y in labels],
    }
    for key, values in part.meta.items():
        if key != "index":
            item_columns[f"meta_{key}" if key in OWN_COLUMNS else key] = values
    if views == "per-view":
        rows = part.features.reshape(n * k, -1)
        columns = {key: [v for v in values for _ in range(k)] for key, values in columns.items()}
        columns[view_name_column] = list(part.view_names) * n
        columns["view_index"] = list(range(k)) * n
        columns["modality"] = list(part.modalities) * n
        columns.update({key: [v for v in values for _ in range(k)] for key, values in item_columns.items()})
    else:
        rows = combine_views(part.features, views)
        columns["modality"] = ["+".join(dict.fromkeys(part.modalities))] * n
        columns.update(item_columns)
    if normalize:
        rows = rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
    return np.ascontiguousarray(rows, dtype=np.float32), columns


FUSED = "fused"
"""View and modality name of the fused row of a PSG modality export (mean of the normalized modalities)."""


def with_fused_modalities(part: FeatureBatch, names: list[str] | None) -> FeatureBatch:
    """A PSG modality run's feature batch as one view per configured modality ``names`` (NaN rows for the
    modalities an item lacks) plus the fused view (mean of the present modalities' L2-normalized features,
    :func:`~multiview_app.models.modal_embed.fuse`); other runs' batches unchanged (``names`` None)."""
    if names is None:
        return part
    from ..models.modal_embed import fuse

    n, _, width = part.features.shape
    features = np.full((n, len(names) + 1, width), np.nan, dtype=np.float32)
    for j, modality in enumerate(part.modalities):
        features[:, names.index(modality)] = part.features[:, j]
    features[:, -1] = fuse(torch.from_numpy(part.features)).numpy()
    views = [*names, FUSED]
    return FeatureBatch(features, part.labels, part.meta, views, views)


def fused_modalities(policy: Any, views: Views) -> list[str] | None:
    """The configured modalities of a PSG modality run (policy ``modalities``), else None; such a run exports
    ``--views per-view`` only (items differ in which modalities they have)."""
    specs = getattr(policy, "specs", None)
    if specs is None or getattr(policy, "modality", "") != "psg":
        return None
    if views != "per-view":
        raise ExportError(
            f"--views {views}: a PSG modality run exports one row per modality plus a fused row (--views per-view)"
        )
    return list(specs)


def view_column(policy: Any) -> str:
    """The metadata column naming each per-view row's view (:data:`VIEW_COLUMNS`)."""
    return VIEW_COLUMNS.get(type(policy).__name__, VIEW_NAME_COLUMN)


# ----------------------------------------------------------------------------- output folder


def _is_export_file(name: str) -> bool:
    return (
        name in (MANIFEST, PLAN, METADATA)
        or name.endswith(TMP_SUFFIX)
        or (name.startswith(("embeddings", "metadata-")) and name.endswith((".npy", ".parquet")))
    )


def _remove_tmp(out_dir: Path) -> None:
    for path in out_dir.glob(f".*{TMP_SUFFIX}"):
        path.unlink(missing_ok=True)


def prepare_out(out_dir: Path, plan: dict[str, Any], overwrite: bool) -> str:
    """Make ``out_dir`` ready for ``plan``; returns ``new``, ``resume`` or ``overwrite``.

    A folder with ``manifest.json`` (complete export) or foreign files is refused unless
    ``overwrite`` (which deletes export files only and refuses folders with other files); an
    unfinished export of the same plan is resumed (its temporary files are removed)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ExportError(f"--out {out_dir}: exists and is not a folder")
    out_dir.mkdir(parents=True, exist_ok=True)
    entries = sorted(p.name for p in out_dir.iterdir())
    mode = "new"
    if entries:
        previous = json.loads((out_dir / PLAN).read_text()) if (out_dir / PLAN).is_file() else None
        if overwrite:
            foreign = [name for name in entries if not _is_export_file(name)]
            if foreign:
                raise ExportError(
                    f"--out {out_dir}: --overwrite deletes export files only, but the folder also "
                    f"holds {', '.join(foreign[:5])}; choose an empty folder"
                )
            for name in entries:
                (out_dir / name).unlink()
            mode = "overwrite"
        elif (out_dir / MANIFEST).is_file():
            raise ExportError(f"--out {out_dir}: holds a complete export ({MANIFEST}); pass --overwrite to replace it")
        elif previous == plan:
            _remove_tmp(out_dir)
            return "resume"
        elif previous is not None:
            changed = sorted(k for k in set(plan) | set(previous) if plan.get(k) != previous.get(k))
            raise ExportError(
                f"--out {out_dir}: holds an unfinished export of a different request (differs in "
                f"{', '.join(changed)}); rerun that command to resume it or pass --overwrite"
            )
        else:
            raise ExportError(
                f"--out {out_dir}: not empty ({', '.join(entries[:5])}); pass --overwrite or choose an empty folder"
            )
    atomic_write_json(out_dir / PLAN, plan)
    return mode


def _shard_done(out_dir: Path, shard: Shard) -> bool:
    if not (out_dir / shard.embeddings).is_file():
        return False
    return shard.metadata is None or (out_dir / shard.metadata).is_file() or (out_dir / METADATA).is_file()


# ----------------------------------------------------------------------------- export: plan


@dataclass(frozen=True)
class Request:
    """The options of one export that shape its rows and files (as :func:`export_model` takes them)."""

    split: str
    features: FeatureKind
    views: Views
    normalize: bool
    file_format: FileFormat
    batch_size: int
    num_workers: int
    max_shard_mb: float

    def check(self) -> None:
        """An :class:`ExportError` naming the option whose value is not one of its choices."""
        for option, value, choices in (
            ("--features", self.features, FEATURE_KINDS),
            ("--views", self.views, VIEW_MODES),
            ("--format", self.file_format, FILE_FORMATS),
        ):
            if value not in choices:
                raise ExportError(f"{option}: expected one of {', '.join(choices)}, got {value!r}")


@dataclass
class Job:
    """Everything every process of one export needs: the source (model, adapter, view policy, device), the
    request, the plan (written as ``.export-plan.json``, the manifest's base), its shards, the configured
    modalities of a PSG modality run (None otherwise) and whether the rows come out L2-normalized."""

    model: torch.nn.Module
    adapter: Any
    policy: Any
    device: str
    request: Request
    plan: dict[str, Any]
    shards: list[Shard]
    modality_names: list[str] | None
    normalized: bool


def _probe(
    model: torch.nn.Module, dataset: Any, policy: Any, device: str, features: FeatureKind, names: list[str] | None
) -> FeatureBatch:
    """The feature batch ``(1, k, f)`` of the first item of ``dataset``: eval views, widths, view names."""
    with closing(iter_feature_batches(model, Subset(dataset, [0]), policy, 1, device, features)) as it:
        return with_fused_modalities(next(it), names)


def plan_export(
    model: torch.nn.Module,
    adapter: Any,
    policy: Any,
    request: Request,
    sizes: dict[str, int],
    world: int,
    device: str,
    provenance: dict[str, Any] | None = None,
    adapter_name: str = "",
    whose: str = "",
) -> Job:
    """Check the model against the data (:func:`check_modality`), probe one item for the row width and cut
    the ``sizes`` items (``{split: items}``) into shards for ``world`` processes (:func:`plan_shards`)."""
    first_split = next((name for name, size in sizes.items() if size > 0), None)
    if first_split is None:
        raise ExportError(f"--split {request.split}: no items in {', '.join(sizes)}")
    check_modality(model, policy, adapter.split(first_split), adapter_name, whose)
    names = fused_modalities(policy, request.views)
    probe = _probe(model, adapter.split(first_split), policy, device, request.features, names)
    k, f = probe.features.shape[1:]
    rows_per_item = k if request.views == "per-view" else 1
    dim = f * k if request.views == "concat" else f
    max_bytes = request.max_shard_mb * 2**20
    shards = plan_shards(sizes, rows_per_item, dim, world, max_bytes, request.file_format)
    plan = {
        "format": EXPORT_FORMAT,
        **(provenance or {}),
        "split": request.split,
        "splits": sizes,
        "features": request.features,
        "views": request.views,
        "view_names": probe.view_names,
        "view_column": view_column(policy) if request.views == "per-view" else None,
        "modalities": probe.modalities,
        "normalize": request.normalize,
        "file_format": request.file_format,
        "dim": int(dim),
        "rows_per_item": rows_per_item,
        "shards": [[s.item_start, s.item_stop] for s in shards],
    }
    normalized = request.normalize or (request.features == "projector" and request.views == "per-view")
    return Job(model, adapter, policy, device, request, plan, shards, names, normalized)


# ----------------------------------------------------------------------------- export: write


def _segment_rows(job: Job, seg: Segment) -> Iterator[tuple[np.ndarray, dict[str, list[Any]]]]:
    """``(rows, metadata columns)`` of each feature batch of the items of one shard segment (:func:`feature_rows`)."""
    request = job.request
    position = seg.start
    dataset = Subset(job.adapter.split(seg.split), range(seg.start, seg.stop))
    for part in iter_feature_batches(
        job.model, dataset, job.policy, request.batch_size, job.device, request.features, request.num_workers
    ):
        part = with_fused_modalities(part, job.modality_names)
        rows, columns = feature_rows(
            part,
            seg.split,
            position,
            request.views,
            request.normalize,
            job.adapter.class_names,
            job.plan["view_column"],
        )
        yield rows, columns
        position += part.features.shape[0]


def _write_shard(job: Job, shard: Shard, out_dir: Path, bar: Any) -> int:
    """Write the embeddings (and npy metadata part) of ``shard``; returns the rows written."""
    written = 0
    meta_path = None if shard.metadata is None else out_dir / shard.metadata
    with ShardWriter(
        out_dir / shard.embeddings, meta_path, shard.rows, job.request.file_format, column_types=OWN_COLUMN_TYPES
    ) as writer:
        for seg in shard.segments:
            for rows, columns in _segment_rows(job, seg):
                try:
                    writer.append(rows, columns)
                except OSError as exc:
                    raise OSError(exc.errno, f"writing {out_dir / shard.embeddings}: {exc.strerror or exc}") from None
                written += len(rows)
                bar.update(len(rows))
        writer.commit()
    return written


def _write_shards(job: Job, out_dir: Path, procs: Processes, progress: bool) -> tuple[int, float]:
    """Write this process's unfinished shards (every ``world``-th from its rank); returns ``(rows, seconds)``
    after every process finished (an error in any of them is raised in all, :meth:`Processes.settle`)."""
    from ..console import progress as progress_display

    todo = [s for s in job.shards if s.index % procs.world == procs.rank and not _shard_done(out_dir, s)]
    bar = progress_display(
        total=sum(s.rows for s in todo),
        unit="row",
        unit_scale=True,
        desc=f"export {job.request.split}",
        disable=not (progress and procs.is_main),
        leave=False,
    )
    start, written, error = time.perf_counter(), 0, None
    try:
        for shard in todo:
            written += _write_shard(job, shard, out_dir, bar)
    except BaseException as exc:  # noqa: BLE001 - every process must reach settle()
        error = exc
    finally:
        bar.close()
    elapsed = time.perf_counter() - start
    procs.settle(error, "export")
    return written, elapsed


def _finalize(
    out_dir: Path, plan: dict[str, Any], shards: list[Shard], normalized: bool, world: int, mode: str
) -> dict[str, Any]:
    """Check every shard, merge the metadata parts (npy format) and build the manifest."""
    for shard in shards:
        path = out_dir / shard.embeddings
        if plan["file_format"] == "npy":
            rows = np.load(path, mmap_mode="r")
            shape = rows.shape
        else:
            shape = (pq.ParquetFile(path).metadata.num_rows, plan["dim"])
        if tuple(shape) != (shard.rows, plan["dim"]):
            raise ExportError(
                f"{path}: holds {tuple(shape)} rows x dim, the plan says {(shard.rows, plan['dim'])}; "
                "rerun with --overwrite"
            )
    if plan["file_format"] == "npy":
        parts = [out_dir / s.metadata for s in shards if s.metadata]
        if all(p.is_file() for p in parts):
            merged = (
                merge_parquet(parts, out_dir / METADATA)
                if len(parts) > 1
                else pq.ParquetFile(parts[0]).metadata.num_rows
            )
            if len(parts) == 1:
                os.replace(parts[0], out_dir / METADATA)
            if merged != sum(s.rows for s in shards):
                raise ExportError(f"{out_dir / METADATA}: {merged} rows, embeddings hold {sum(s.rows for s in shards)}")
            for part in parts:
                part.unlink(missing_ok=True)
        elif not (out_dir / METADATA).is_file():
            raise ExportError(
                f"{out_dir}: metadata parts missing ({', '.join(p.name for p in parts if not p.is_file())})"
            )
    schema_file = out_dir / (METADATA if plan["file_format"] == "npy" else shards[0].embeddings)
    columns = [c for c in pq.read_schema(schema_file).names if c != EMBEDDING_COLUMN]
    manifest = {key: value for key, value in plan.items() if key != "shards"}
    manifest.update(
        {
            "normalized": normalized,
            "dtype": "float32",
            "rows": sum(s.rows for s in shards),
            "items": sum(plan["splits"].values()),
            "shards": [{"file": s.embeddings, "rows": s.rows, "items": [s.item_start, s.item_stop]} for s in shards],
            "metadata_file": METADATA if plan["file_format"] == "npy" else None,
            "metadata_columns": columns,
            "processes": world,
            "resumed": mode == "resume",
            "versions": _versions(),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
    )
    return manifest


def _write_manifest(job: Job, out_dir: Path, world: int, mode: str, written: int, elapsed: float) -> dict[str, Any]:
    """Build the manifest (:func:`_finalize`) with the main process's timing, write it and drop the plan file."""
    manifest = _finalize(out_dir, job.plan, job.shards, job.normalized, world, mode)
    manifest["timing"] = {
        "rows_written_by_main": written,
        "seconds": round(elapsed, 3),
        "rows_per_s_main": round(written / elapsed, 1) if elapsed > 0 else None,
    }
    atomic_write_json(out_dir / MANIFEST, manifest)
    (out_dir / PLAN).unlink(missing_ok=True)
    return manifest


def export_model(
    model: torch.nn.Module,
    adapter: Any,
    policy: Any,
    out_dir: str | Path,
    *,
    split: str = ALL_SPLITS,
    features: FeatureKind = "encoder",
    views: Views = "per-view",
    normalize: bool = False,
    file_format: FileFormat = "npy",
    batch_size: int = 256,
    num_workers: int = 0,
    device: str | None = None,
    max_shard_mb: float = DEFAULT_MAX_SHARD_MB,
    overwrite: bool = False,
    progress: bool = True,
    provenance: dict[str, Any] | None = None,
    adapter_name: str | None = None,
    whose: str = "",
) -> dict[str, Any]:
    """Stream the embeddings of ``split`` (a split of ``adapter`` or ``all``) into ``out_dir``.

    Every process of a launch calls this with the same arguments; returns the manifest (also on
    non-main processes, read back after the main process wrote it). ``provenance`` (run, weights,
    config hash, ...) is recorded in the plan and the manifest. Rows are ``(items * k, f)`` per-view,
    ``(items, f)`` mean or ``(items, k * f)`` concat (:func:`feature_rows`).
    """
    request = Request(split, features, views, normalize, file_format, batch_size, num_workers, max_shard_mb)
    request.check()
    out_dir = Path(out_dir)
    adapter_name = adapter_name or type(adapter).__name__
    sizes = _split_sizes(adapter, split, adapter_name)
    procs = Processes()
    device = device or str(procs.device)
    job = plan_export(model, adapter, policy, request, sizes, procs.world, device, provenance, adapter_name, whose)
    mode = procs.on_main(lambda: prepare_out(out_dir, job.plan, overwrite), "preparing --out")
    written, elapsed = _write_shards(job, out_dir, procs, progress)
    manifest = procs.on_main(
        lambda: _write_manifest(job, out_dir, procs.world, mode, written, elapsed), "writing the manifest"
    )
    return manifest if procs.is_main else json.loads((out_dir / MANIFEST).read_text())


def run_provenance(
    run_dir: Path, weights: str, run_cfg: Config, cfg: Config, adapter: Any, input_differences: Any
) -> dict[str, Any]:
    """What an export of run ``run_dir`` records about its source: the run, its weights (file, sha256), the
    effective config's hash, the loss, the data and view policy (``cfg``, the run's ``run_cfg`` with the
    export's data / views), the classes and the input differences to the run's contract."""
    weight_file = resolve_weights(run_dir, weights)
    return {
        "run": str(run_dir.resolve()),
        "weights": weights,
        "weights_file": str(weight_file.relative_to(run_dir)),
        "weights_sha256": sha256_file(weight_file),
        "config_hash": config_hash(cfg),
        "loss": run_cfg.loss.name,
        "data": {"adapter": cfg.data.adapter, "options": cfg.data.options},
        "view_policy": {"policy": cfg.views.policy, "k": cfg.views.k, "options": cfg.views.options},
        "modality": adapter.modality,
        "class_names": list(adapter.class_names),
        "input_differences": input_differences,
    }


def export_embeddings(
    run_dir: str | Path,
    out_dir: str | Path,
    *,
    weights: str = "final",
    split: str = ALL_SPLITS,
    features: FeatureKind = "encoder",
    views: Views = "per-view",
    normalize: bool = False,
    file_format: FileFormat = "npy",
    config_file: str | Path | None = None,
    overrides: Sequence[str] = (),
    batch_size: int | None = None,
    num_workers: int = 0,
    device: str | None = None,
    max_shard_mb: float = DEFAULT_MAX_SHARD_MB,
    overwrite: bool = False,
    progress: bool = True,
    accept_input_differences: bool = False,
) -> dict[str, Any]:
    """Export the embeddings of run ``run_dir`` (``weights``: final, init or step_N) on ``split`` of the
    run's data (or the data of ``config_file`` / ``overrides``) to ``out_dir``; returns the manifest.

    Data that differ from the run's input contract (``input_contract.json``, EEG: rate, band, units,
    window, scaling) are refused naming each field unless ``accept_input_differences``; every
    difference (channels included) is recorded in the manifest's ``input_differences``."""
    from ..data.adapters import build_adapter
    from ..data.views import build_view_policy

    run_dir, out_dir = Path(run_dir), Path(out_dir)
    _check_out(run_dir, out_dir)
    run_cfg, model = load_run(run_dir, weights)
    cfg = data_config(run_cfg, config_file, overrides)
    adapter = build_adapter(cfg.data.adapter, cfg.data.options)
    policy = build_view_policy(cfg.views.policy, cfg.views.k, cfg.views.options, adapter)
    input_differences = check_run_input(run_dir, adapter, accept=accept_input_differences)
    return export_model(
        model,
        adapter,
        policy,
        out_dir,
        split=split,
        features=features,
        views=views,
        normalize=normalize,
        file_format=file_format,
        batch_size=batch_size or cfg.eval.batch_size,
        num_workers=num_workers,
        device=device,
        max_shard_mb=max_shard_mb,
        overwrite=overwrite,
        progress=progress,
        provenance=run_provenance(run_dir, weights, run_cfg, cfg, adapter, input_differences),
        adapter_name=cfg.data.adapter,
        whose=f" of run {run_dir}",
    )


# ----------------------------------------------------------------------------- load


class ShardedRows:
    """Read-only row concatenation of memory-mapped shards ``(rows, dim)``; indexing reads only the
    rows asked for, ``np.asarray`` materializes everything."""

    def __init__(self, shards: list[np.ndarray]) -> None:
        self.shards = shards
        self.offsets = np.cumsum([0, *(len(s) for s in shards)])
        self.shape = (int(self.offsets[-1]), int(shards[0].shape[1]))
        self.dtype = shards[0].dtype
        self.ndim = 2

    def __len__(self) -> int:
        return self.shape[0]

    def _rows(self, index: np.ndarray) -> np.ndarray:
        index = np.where(index < 0, index + len(self), index)
        if index.size and (index.min() < 0 or index.max() >= len(self)):
            raise IndexError(f"row index out of range for {len(self)} rows")
        shard = np.searchsorted(self.offsets, index, side="right") - 1
        out = np.empty((index.size, self.shape[1]), dtype=self.dtype)
        for s in np.unique(shard):
            mask = shard == s
            out[mask] = self.shards[s][index[mask] - self.offsets[s]]
        return out

    def __getitem__(self, key: Any) -> np.ndarray:
        rest: tuple[Any, ...] = ()
        if isinstance(key, tuple):
            key, rest = key[0], key[1:]
        if isinstance(key, (int, np.integer)):
            out = self._rows(np.array([key]))[0]
            return out[rest] if rest else out
        if isinstance(key, slice):
            rows = np.arange(len(self))[key]
        else:
            rows = np.arange(len(self))[np.asarray(key)]
        out = self._rows(rows)
        return out[(slice(None), *rest)] if rest else out

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = np.concatenate([np.asarray(s) for s in self.shards])
        return out.astype(dtype) if dtype is not None else out


def load_embeddings(out_dir: str | Path) -> tuple[np.ndarray | ShardedRows, pa.Table, dict[str, Any]]:
    """``(embeddings (rows, dim) float32, metadata table (row-aligned), manifest)`` of an export folder.

    ``npy`` exports are memory-mapped (one shard: an ``np.memmap``; several: :class:`ShardedRows`),
    so opening is instant at any size; ``parquet`` exports are read into memory.
    """
    out_dir = Path(out_dir)
    manifest_path = out_dir / MANIFEST
    if not manifest_path.is_file():
        hint = " (an unfinished export: rerun the export command to resume it)" if (out_dir / PLAN).is_file() else ""
        raise FileNotFoundError(f"{out_dir}: not a complete export (no {MANIFEST}){hint}")
    manifest = json.loads(manifest_path.read_text())
    if manifest.get("format") != EXPORT_FORMAT:
        raise ExportError(f"{manifest_path}: format {manifest.get('format')!r}, expected {EXPORT_FORMAT!r}")
    files = [out_dir / s["file"] for s in manifest["shards"]]
    if manifest["file_format"] == "npy":
        arrays = [np.load(path, mmap_mode="r") for path in files]
        for path, array, shard in zip(files, arrays, manifest["shards"]):
            if array.shape != (shard["rows"], manifest["dim"]):
                raise ExportError(f"{path}: shape {array.shape}, the manifest says {(shard['rows'], manifest['dim'])}")
        table = pq.read_table(out_dir / manifest["metadata_file"], memory_map=True)
        embeddings: np.ndarray | ShardedRows = arrays[0] if len(arrays) == 1 else ShardedRows(arrays)
    else:
        table = pa.concat_tables([pq.read_table(path, memory_map=True) for path in files])
        values = table.column(EMBEDDING_COLUMN).combine_chunks().flatten().to_numpy(zero_copy_only=False)
        embeddings = np.asarray(values, dtype=np.float32).reshape(table.num_rows, manifest["dim"])
        table = table.drop_columns([EMBEDDING_COLUMN])
    if table.num_rows != manifest["rows"]:
        raise ExportError(f"{out_dir}: metadata has {table.num_rows} rows, the manifest says {manifest['rows']}")
    return embeddings, table, manifest
