"""The ``domainnet`` adapter: image domains in the DomainNet layout, one domain held out.

Layout (the real DomainNet and ``mvapp data synth-domains`` alike)::

    <root>/<domain>/<class>/<image>            every domain has the same class folders
    <root>/<domain>_train.txt, <domain>_test.txt   optional; lines ``domain/class/file.jpg label``

Without split files a domain is split per class with :func:`stratified_split` (seed
``split_seed``, ``test_fraction`` = 0.2 as DomainBed's holdout fraction). Labels are the index of the
class folder name in the sorted class list shared by all domains (the numbers in split files must
be consistent with the folder names: one number per class).

Splits (``adapter.splits``) only cover the *seen* domains (every domain except ``holdout`` and the
adaptation target ``adapt``):

- ``"train"``: domain tuples for pretraining (the ``domains`` view policy). Item ``j`` is anchored at
  one seen-domain train image (class ``c``, ``len = sum of the seen train splits``); its ``x`` is
  uint8 ``(K, 3, S, S)``, one image of class ``c`` per seen domain (the anchor in its own domain, a
  partner drawn with ``numpy.random.default_rng([pair_seed, epoch, j])`` in the others). The
  trainer calls ``set_epoch(epoch)`` before every epoch, so the partners are drawn afresh every
  epoch (as the paper's per-batch draw: every item is in one batch per epoch), reproducibly, and a
  resumed run draws the partners of its epoch again.
- ``"test"``: the seen domains' test images, ``x`` uint8 ``(3, S, S)``.
- ``"<domain>/train"``, ``"<domain>/test"``: one seen domain's images.

With ``adapt: <domain>`` (domain adaptation) that domain is not a seen domain either, but its train
images join pretraining without labels, as ``adapt_views`` says:

- ``augment`` (default): ``"train"`` also holds :class:`TargetTuples` items (one target image repeated
  K times, i.e. K augmentation views of it under the ``domains`` policy, label -1), ``adapt_share`` of
  all items (mixed into batches by the trainer's uniform sampling);
- ``nearest``: ``"train"`` holds the source tuples only; the ``domains`` policy adds to every item one
  extra view, the target train image nearest to the item in the current embedding (see its docstring).

Its labels stay hidden (reading them raises) until :meth:`DomainNetAdapter.target_labels`; its test
split is not read before evaluation.

Training-domain validation (DomainBed's model selection): with ``val_fraction`` > 0 every domain's
train split is cut once more (stratified per class, seed ``split_seed + 1``): ``"<domain>/val"`` holds
``val_fraction`` of it and never enters pretraining (nor the supervised ERM baseline); ``"<domain>/train"``
is the rest. The evaluator selects checkpoints and the probe's ``C`` on the seen domains' ``val`` splits.

``pairing`` says how an item's k views are made: ``label`` (default, the M3G paper's construction) =
one image of the anchor's *class* from every seen domain, so pretraining is label-conditioned;
``none`` = the anchor image repeated k times (:class:`SingleImageTuples`): k augmentation views of one
image, no label used (set random ``views.options.stacks``, e.g. ``mild``).

The held-out domain is reached only through :meth:`DomainNetAdapter.domain_split` (the evaluator):
constructing the adapter and every split above list its folder name and its class-folder names
(to check class sets) but never read a split file or open an image of it.

Images are read and decoded by :func:`decode_file` (``torchvision.io``: libjpeg-turbo / libpng),
resized to ``load_size``; with ``preload`` (default) all images of a split are decoded once in
``decode_workers`` DataLoader workers (unreadable files skipped and counted, error above
``max_bad_fraction``), else each item is decoded on access in the training DataLoader's workers
(an unreadable file then raises naming it). Preloaded splits are kept in this process
(:data:`DECODED_SPLITS`, ``MVAPP_DECODE_CACHE_MB``), so a sweep that builds the adapter again for every
pretraining, ERM and evaluation decodes each split once; a file whose size or mtime changed is decoded again.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field, model_validator
from torch.utils.data import DataLoader, Dataset

from ..adapters import ADAPTERS, DataAdapter
from ..catalog import get_card
from ..images.adapters import IMAGE_EXTENSIONS, SHOW_FIRST, ImageOptions, report_skipped, stratified_split

DOMAINNET_DOMAINS: tuple[str, ...] = tuple(get_card("domainnet").domains)  # from datasets/domainnet.yaml
SPLITS: tuple[str, ...] = ("train", "test")
#: the splits of a domain with training-domain validation (``val_fraction`` > 0)
SPLITS_WITH_VAL: tuple[str, ...] = ("train", "val", "test")


def decode_file(path: str, load_size: int) -> torch.Tensor:
    """Read and decode one image file -> uint8 ``(3, load_size, load_size)`` (RGB, antialiased
    bilinear resize). The single place where image files are opened."""
    from torchvision.io import ImageReadMode, decode_image, read_file

    with warnings.catch_warnings():  # torchvision >= 0.29 flags its decoders as deprecated on every call
        warnings.simplefilter("ignore", DeprecationWarning)
        image = decode_image(read_file(path), mode=ImageReadMode.RGB)
    if tuple(image.shape[-2:]) != (load_size, load_size):
        resized = F.interpolate(
            image[None].float(), size=(load_size, load_size), mode="bilinear", antialias=True, align_corners=False
        )
        image = resized[0].round_().clamp_(0, 255).to(torch.uint8)
    return image


def decode_or_raise(path: str, load_size: int) -> torch.Tensor:
    """:func:`decode_file` with one clear error naming the file."""
    try:
        return decode_file(path, load_size)
    except (RuntimeError, OSError, ValueError) as err:
        raise ValueError(f"image '{path}' cannot be decoded: {type(err).__name__}: {err}") from None


@dataclass
class DomainFiles:
    """Image paths ``(N,)`` and labels ``(N,)`` of one split of one domain."""

    domain: str
    split: str
    paths: list[str]
    labels: np.ndarray


class DomainImages(Dataset):
    """One domain split: items ``{"x": uint8 (3, S, S), "label", "index", "domain", "source"}``.

    ``images`` (N, 3, S, S) when preloaded, else files decoded on access. ``hide_labels`` gives
    label -1 (the adaptation target: its labels are never read before evaluation).
    """

    def __init__(
        self, files: DomainFiles, load_size: int, images: torch.Tensor | None = None, hide_labels: bool = False
    ) -> None:
        self.domain, self.split = files.domain, files.split
        self.sources = list(files.paths)
        self._labels = torch.as_tensor(files.labels, dtype=torch.long)
        self.images = images
        self.load_size = load_size
        self.hide_labels = hide_labels

    def __len__(self) -> int:
        return len(self.sources)

    @property
    def labels(self) -> torch.Tensor:
        """Labels ``(N,)``; raises for a hidden-label (adaptation target) split."""
        if self.hide_labels:
            raise PermissionError(
                f"labels of domain '{self.domain}' ({self.split}) are hidden until evaluation (data.options.adapt)"
            )
        return self._labels

    def image(self, i: int) -> torch.Tensor:
        """uint8 ``(3, S, S)`` of item ``i``."""
        return self.images[i] if self.images is not None else decode_or_raise(self.sources[i], self.load_size)

    def __getitem__(self, i: int) -> dict[str, Any]:
        label = -1 if self.hide_labels else int(self._labels[i])
        return {"x": self.image(i), "label": label, "index": int(i), "domain": self.domain, "source": self.sources[i]}


class JoinedDomains(Dataset):
    """Several item datasets one after another (``index`` renumbered over the whole)."""

    def __init__(self, parts: list[Dataset]) -> None:
        self.parts = parts
        self.offsets = np.cumsum([0] + [len(p) for p in parts])

    def set_epoch(self, epoch: int) -> None:
        """Pass the epoch on to every part that draws per epoch."""
        for part in self.parts:
            if hasattr(part, "set_epoch"):
                part.set_epoch(epoch)

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def __getitem__(self, i: int) -> dict[str, Any]:
        part = int(np.searchsorted(self.offsets, i, side="right") - 1)
        item = self.parts[part][i - int(self.offsets[part])]
        item["index"] = int(i)
        return item


class DomainTuples(Dataset):
    """Pretraining items: one image of the anchor's class from every seen domain (module docstring).

    ``x`` uint8 ``(K, 3, S, S)`` in the order of ``parts`` (the seen domains). The partners of item
    ``j`` depend on ``(pair_seed, epoch, j)``; :meth:`set_epoch` (called by the trainer) redraws them.
    """

    def __init__(self, parts: list[DomainImages], num_classes: int, pair_seed: int = 0) -> None:
        self.parts = parts
        self.domains = [p.domain for p in parts]
        self.pair_seed = pair_seed
        self.epoch = 0
        self.offsets = np.cumsum([0] + [len(p) for p in parts])
        self.members = [[np.flatnonzero(p.labels.numpy() == c) for c in range(num_classes)] for p in parts]
        present = [set(p.labels.tolist()) for p in parts]
        classes = set().union(*present)
        lacking = [
            f"{p.domain}: {sorted(classes - have)[:SHOW_FIRST]}" for p, have in zip(parts, present) if classes - have
        ]
        if lacking:
            raise ValueError(
                "domain tuples need every class in every seen domain's train split; missing " + "; ".join(lacking)
            )

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def set_epoch(self, epoch: int) -> None:
        """Draw the partner images of ``epoch`` from now on (seeded by ``(pair_seed, epoch, j)``)."""
        self.epoch = int(epoch)

    def __getitem__(self, j: int) -> dict[str, Any]:
        anchor = int(np.searchsorted(self.offsets, j, side="right") - 1)
        local = j - int(self.offsets[anchor])
        label = int(self.parts[anchor].labels[local])
        rng = np.random.default_rng([self.pair_seed, self.epoch, j])
        images = []
        for d, part in enumerate(self.parts):
            members = self.members[d][label]
            images.append(part.image(local if d == anchor else int(members[rng.integers(len(members))])))
        return {"x": torch.stack(images), "label": label, "index": int(j), "domain": self.domains[anchor]}


class TargetTuples(Dataset):
    """Adaptation-target items for pretraining: ``count`` items cycling over the target's train images
    (order seeded by ``(pair_seed, epoch)``, redrawn by :meth:`set_epoch`, so a share smaller than the
    target still reaches all of its images over the epochs); ``x`` = the same image repeated ``K``
    times ``(K, 3, S, S)``, so the view policy turns it into K augmentation views of one image.
    Label -1 (labels are never read)."""

    def __init__(self, part: DomainImages, num_views: int, count: int, pair_seed: int = 0) -> None:
        self.part, self.num_views, self.count, self.pair_seed = part, num_views, count, pair_seed
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        """Order of the target images for ``epoch``."""
        self.order = np.random.default_rng([self.pair_seed, 1, int(epoch)]).permutation(len(self.part))

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, j: int) -> dict[str, Any]:
        image = self.part.image(int(self.order[j % len(self.order)]))
        return {
            "x": image.expand(self.num_views, -1, -1, -1).contiguous(),
            "label": -1,
            "index": int(j),
            "domain": self.part.domain,
        }


class SingleImageTuples(Dataset):
    """Label-free pretraining items (``pairing: none``): item ``j`` = image ``j`` of ``images`` repeated
    ``num_views`` times, ``x`` uint8 ``(K, 3, S, S)``, so the view policy makes K augmentation views of one
    image; no partner is drawn by class. The label is carried along (no loss reads it)."""

    def __init__(self, images: Dataset, num_views: int) -> None:
        self.images, self.num_views = images, num_views

    def __len__(self) -> int:
        return len(self.images)  # type: ignore[arg-type]

    def __getitem__(self, j: int) -> dict[str, Any]:
        item = self.images[j]
        return {
            "x": item["x"].expand(self.num_views, -1, -1, -1).contiguous(),
            "label": item["label"],
            "index": int(j),
            "domain": item["domain"],
        }


class _SafeDecode(Dataset):
    """``(position, image or None, error)`` per path (used to preload in DataLoader workers)."""

    def __init__(self, paths: list[str], load_size: int) -> None:
        self.paths, self.load_size = paths, load_size

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[int, torch.Tensor | None, str]:
        try:
            return i, decode_file(self.paths[i], self.load_size), ""
        except (RuntimeError, OSError, ValueError) as err:
            return i, None, type(err).__name__


def _first_items(batch: list[Any]) -> list[Any]:
    return batch


class DecodedSplitCache:
    """Decoded splits of this process, least recently used first out, within ``MVAPP_DECODE_CACHE_MB``
    (default 1024; 0 turns it off). Key: the load size and every file's path, size and mtime, so an
    edited, replaced or re-generated file is decoded again. The cached ``(N, 3, S, S)`` uint8 tensor is
    shared by every adapter that reads the split: nothing modifies it in place (views, collation and the
    evaluators' features all copy)."""

    def __init__(self) -> None:
        self._entries: OrderedDict[str, tuple[list[int], torch.Tensor, list[str]]] = OrderedDict()
        self.hits = 0

    @staticmethod
    def budget_bytes() -> int:
        text = os.environ.get("MVAPP_DECODE_CACHE_MB", "1024")
        try:
            megabytes = float(text)
        except ValueError:
            raise ValueError(f"MVAPP_DECODE_CACHE_MB={text!r}: expected a number of megabytes (0 = off)") from None
        return int(max(megabytes, 0.0) * 2**20)

    @staticmethod
    def key(paths: list[str], load_size: int) -> str:
        digest = hashlib.sha256(str(load_size).encode())
        for path in paths:
            try:
                stat = os.stat(path)
                digest.update(f"\n{path} {stat.st_size} {stat.st_mtime_ns}".encode())
            except OSError as err:  # a missing / unreadable entry: decoding skips and counts it
                digest.update(f"\n{path} {type(err).__name__}".encode())
        return digest.hexdigest()

    def get(self, key: str) -> tuple[list[int], torch.Tensor, list[str]] | None:
        found = self._entries.get(key)
        if found is not None:
            self._entries.move_to_end(key)
            self.hits += 1
        return found

    def put(self, key: str, keep: list[int], images: torch.Tensor, skipped: list[str]) -> None:
        budget = self.budget_bytes()
        size = images.numel() * images.element_size()
        if size > budget:
            return
        self._entries[key] = (keep, images, skipped)
        while sum(v[1].numel() * v[1].element_size() for v in self._entries.values()) > budget:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()
        self.hits = 0


#: the process-wide :class:`DecodedSplitCache` of :func:`preload_images`
DECODED_SPLITS = DecodedSplitCache()


def preload_images(
    files: DomainFiles, load_size: int, workers: int, max_bad_fraction: float
) -> tuple[DomainFiles, torch.Tensor]:
    """Decode every file of ``files`` (``workers`` DataLoader workers), or take them from
    :data:`DECODED_SPLITS`; unreadable ones are skipped and counted (``report_skipped``, on a cache hit
    too). Returns the kept files and their images uint8 ``(N, 3, S, S)``."""
    from ...console import progress

    what = f"domain '{files.domain}' ({files.split})"
    use_cache = DecodedSplitCache.budget_bytes() > 0
    key = DecodedSplitCache.key(files.paths, load_size) if use_cache else ""
    cached = DECODED_SPLITS.get(key) if use_cache else None
    if cached is not None:
        keep, stacked, skipped = cached
    else:
        # own generator: decoding must not advance the global torch RNG (model init after it stays seed-exact)
        loader = DataLoader(
            _SafeDecode(files.paths, load_size),
            batch_size=64,
            num_workers=workers,
            collate_fn=_first_items,
            generator=torch.Generator().manual_seed(0),
        )
        images: list[torch.Tensor | None] = [None] * len(files.paths)
        skipped = []
        for batch in progress(loader, desc=f"decoding {what}", leave=False, disable=len(files.paths) < 5000):
            for i, image, error in batch:
                if image is None:
                    skipped.append(f"{files.paths[i]} ({error})")
                images[i] = image
        keep = [i for i, image in enumerate(images) if image is not None]
        stacked = (
            torch.stack([images[i] for i in keep])
            if keep
            else torch.empty(0, 3, load_size, load_size, dtype=torch.uint8)
        )
    report_skipped(skipped, len(files.paths), what, max_bad_fraction)
    if use_cache and cached is None:
        DECODED_SPLITS.put(key, keep, stacked, skipped)
    kept = DomainFiles(files.domain, files.split, [files.paths[i] for i in keep], files.labels[keep])
    return kept, stacked


@ADAPTERS.register("domainnet")
class DomainNetAdapter(DataAdapter):
    """DomainNet-layout image domains (real DomainNet or ``mvapp data synth-domains``); see module docstring."""

    modality = "image"

    class Options(ImageOptions):
        root: str = Field(
            ..., description="folder with <domain>/<class>/<image> (+ optional <domain>_{train,test}.txt)"
        )
        domains: list[str] | None = Field(None, description="domains to use (default: every sub-folder of root)")
        holdout: str | None = Field(None, description="the unseen domain: never read before evaluation")
        adapt: str | None = Field(
            None, description="domain adaptation target: its train images join pretraining without labels"
        )
        adapt_share: float = Field(
            0.25, gt=0.0, lt=1.0, description="share of the pretraining items that are adaptation-target images"
        )
        adapt_views: Literal["augment", "nearest"] = Field(
            "augment",
            description="how target images enter pretraining: 'augment' = target items (k augmentation views of "
            "one image, adapt_share of the items); 'nearest' = one extra view per source item, the "
            "target image nearest to it in the current embedding (domains view policy)",
        )
        intersect_classes: bool = Field(False, description="use the classes common to all domains instead of failing")
        preload: bool = Field(True, description="decode every image of a split once into memory (else on access)")
        decode_workers: int = Field(2, ge=0, le=64, description="DataLoader workers that decode when preloading")
        max_bad_fraction: float = Field(
            0.01, ge=0.0, le=1.0, description="largest tolerated share of unreadable images"
        )
        split_seed: int = Field(0, description="seed of the per-domain stratified split when there are no split files")
        val_fraction: float = Field(
            0.0,
            ge=0.0,
            lt=1.0,
            description="training-domain validation: share of every domain's train split held out of pretraining "
            "as '<domain>/val' (stratified, seed split_seed + 1); 0 = no validation split",
        )
        pairing: Literal["label", "none"] = Field(
            "label",
            description="views of a pretraining item: 'label' = one image of the anchor's class per seen domain "
            "(label-conditioned, the M3G paper); 'none' = k augmentation views of the anchor image",
        )
        pair_seed: int = Field(0, description="seed of the partner images of the domain tuples")

        @model_validator(mode="after")
        def _distinct_targets(self) -> DomainNetAdapter.Options:
            if self.adapt is not None and self.adapt == self.holdout:
                raise ValueError(
                    f"holdout and adapt are both '{self.adapt}': a domain is either never seen (holdout) "
                    "or seen without labels (adapt)"
                )
            return self

    def __init__(self, options: Options) -> None:
        super().__init__(options)
        self.root = Path(os.path.expanduser(options.root))
        if not self.root.is_dir():
            raise ValueError(
                f"data.options.root '{self.root}' is not a folder; write the embedded digit domains with "
                f"`mvapp data synth-domains --out {self.root}` or point it at DomainNet"
            )
        self.domains = self._find_domains(options.domains)
        for key in ("holdout", "adapt"):
            value = getattr(options, key)
            if value is not None and value not in self.domains:
                raise ValueError(
                    f"data.options.{key} '{value}' is not a domain of '{self.root}' (domains: {', '.join(self.domains)})"
                )
        self.holdout: str | None = options.holdout
        self.adapt: str | None = options.adapt
        self.seen_domains = [d for d in self.domains if d not in (self.holdout, self.adapt)]
        if not self.seen_domains:
            raise ValueError(f"no seen domain left in '{self.root}' after holdout / adapt")
        self.class_names = self._shared_classes()
        self.label_of = {name: i for i, name in enumerate(self.class_names)}
        self.domain_splits = SPLITS_WITH_VAL if options.val_fraction > 0 else SPLITS
        self.splits = ("train", "test", *(f"{d}/{s}" for d in self.seen_domains for s in self.domain_splits))
        self._domain_cache: dict[tuple[str, str], DomainImages] = {}
        self._listed: dict[tuple[str, str], dict[str, DomainFiles]] = {}
        self._source_tuples: DomainTuples | None = None
        self.dropped: dict[str, int] = {}  # "<domain>/<split>" -> images of classes outside class_names

    # ------------------------------------------------------------------ layout
    def _find_domains(self, requested: list[str] | None) -> list[str]:
        if requested is not None:
            missing = [d for d in requested if not (self.root / d).is_dir()]
            if missing:
                raise ValueError(
                    f"domain folder(s) missing under '{self.root}': {', '.join(missing)} (data.options.domains)"
                )
            if len(set(requested)) != len(requested):
                raise ValueError(f"data.options.domains lists a domain twice: {requested}")
            return list(requested)
        found = sorted(p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
        if not found:
            raise ValueError(f"'{self.root}' has no domain folders (<root>/<domain>/<class>/<image>)")
        return found

    def _note_dropped(self, where: str, count: int) -> None:
        """Count (and warn about) images of classes outside the shared set (``intersect_classes``)."""
        if count:
            self.dropped[where] = count
            warnings.warn(
                f"domain split {where}: dropped {count} images of classes outside the "
                f"{len(self.class_names)} shared ones (data.options.intersect_classes)",
                stacklevel=3,
            )

    def _class_folders(self, domain: str) -> set[str]:
        return {p.name for p in (self.root / domain).iterdir() if p.is_dir() and not p.name.startswith(".")}

    def _shared_classes(self) -> list[str]:
        """Sorted class names common to every domain (folder names only; no image is opened)."""
        per_domain = {d: self._class_folders(d) for d in self.domains}
        union = set().union(*per_domain.values())
        common = set.intersection(*per_domain.values())
        if not common:
            raise ValueError(f"the domains of '{self.root}' share no class folder")
        if common != union and not self.options.intersect_classes:
            diffs = [f"{d} lacks {sorted(union - have)[:SHOW_FIRST]}" for d, have in per_domain.items() if union - have]
            raise ValueError(
                f"class folders differ across the domains of '{self.root}': {'; '.join(diffs)}; "
                "set data.options.intersect_classes: true to keep the common classes"
            )
        return sorted(common)

    def _scan(self, domain: str, split: str) -> DomainFiles:
        """Paths and labels of one split of ``domain`` (:meth:`_scan_listed`); with ``val_fraction`` the
        listed train split is cut into ``train`` and ``val`` (stratified, seed ``split_seed + 1``)."""
        if split == "test" or self.options.val_fraction == 0:
            return self._scan_listed(domain, split)
        full = self._scan_listed(domain, "train")
        train, val = stratified_split(full.labels, self.options.val_fraction, seed=self.options.split_seed + 1)
        keep = train if split == "train" else val
        return DomainFiles(domain, split, [full.paths[i] for i in keep], full.labels[keep])

    def _scan_listed(self, domain: str, split: str) -> DomainFiles:
        """Paths and labels of the ``train`` / ``test`` split of ``domain``: its split file when both
        exist (the other split's file is not read), else a stratified split of the listed class folders."""
        files = {s: self.root / f"{domain}_{s}.txt" for s in SPLITS}
        if all(f.is_file() for f in files.values()):
            return self._read_split_file(domain, split, files[split])
        if (domain, "*") not in self._listed:
            self._listed[(domain, "*")] = self._list_and_split(domain)
        return self._listed[(domain, "*")][split]

    def _list_and_split(self, domain: str) -> dict[str, DomainFiles]:
        paths, labels = [], []
        dropped = 0
        for name in sorted(self._class_folders(domain)):
            found = sorted(
                str(p)
                for p in (self.root / domain / name).rglob("*")
                if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS
            )
            if name not in self.label_of:
                dropped += len(found)
                continue
            paths += found
            labels += [self.label_of[name]] * len(found)
        self._note_dropped(f"{domain}/*", dropped)
        if not paths:
            raise ValueError(f"domain folder '{self.root / domain}' has no images")
        labels_arr = np.asarray(labels, dtype=np.int64)
        train, test = stratified_split(labels_arr, self.options.test_fraction, seed=self.options.split_seed)
        return {
            "train": DomainFiles(domain, "train", [paths[i] for i in train], labels_arr[train]),
            "test": DomainFiles(domain, "test", [paths[i] for i in test], labels_arr[test]),
        }

    def _read_split_file(self, domain: str, split: str, path: Path) -> DomainFiles:
        """Lines ``domain/class/file label``; errors name the file and line; missing images listed."""
        paths, labels, missing = [], [], []
        number_of: dict[str, int] = {}
        dropped = 0
        for line_no, line in enumerate(path.read_text().splitlines(), start=1):
            if not line.strip():
                continue
            parts = line.split()
            if len(parts) != 2 or not parts[1].lstrip("-").isdigit():
                raise ValueError(f"{path}:{line_no}: expected 'domain/class/file label', got {line.strip()!r}")
            rel, number = parts[0], int(parts[1])
            pieces = rel.split("/")
            if len(pieces) < 3 or pieces[0] != domain:
                raise ValueError(f"{path}:{line_no}: path '{rel}' is not '{domain}/<class>/<file>'")
            name = pieces[1]
            if number_of.setdefault(name, number) != number:
                raise ValueError(
                    f"{path}:{line_no}: class '{name}' has label {number} here but {number_of[name]} earlier"
                )
            if name not in self.label_of:
                dropped += 1
                continue
            full = self.root / rel
            if not full.is_file():
                missing.append(str(full))
                continue
            paths.append(str(full))
            labels.append(self.label_of[name])
        if missing:
            raise ValueError(
                f"{path} names {len(missing)} image(s) that do not exist; first: {', '.join(missing[:SHOW_FIRST])}"
            )
        if not paths:
            raise ValueError(f"{path} lists no image of the shared classes")
        self._note_dropped(f"{domain}/{split}", dropped)
        return DomainFiles(domain, split, paths, np.asarray(labels, dtype=np.int64))

    # ------------------------------------------------------------------ splits
    def domain_split(self, domain: str, split: str) -> DomainImages:
        """Images of one split of any domain, the held-out one included (evaluators only).

        The adaptation target's labels are hidden (-1); :meth:`target_labels` reads them."""
        if domain not in self.domains:
            raise ValueError(f"unknown domain '{domain}'; domains: {', '.join(self.domains)}")
        if split not in self.domain_splits:
            hint = " (set data.options.val_fraction for a validation split)" if split == "val" else ""
            raise ValueError(
                f"unknown split '{split}' of domain '{domain}'; splits: {', '.join(self.domain_splits)}{hint}"
            )
        key = (domain, split)
        if key not in self._domain_cache:
            files, images = self._scan(domain, split), None
            if self.options.preload:
                files, images = preload_images(
                    files, self.options.load_size, self.options.decode_workers, self.options.max_bad_fraction
                )
            self._domain_cache[key] = DomainImages(
                files, self.options.load_size, images, hide_labels=domain == self.adapt
            )
        return self._domain_cache[key]

    def target_labels(self, split: str) -> torch.Tensor:
        """Labels ``(N,)`` of the adaptation target's ``split`` (evaluation only)."""
        if self.adapt is None:
            raise ValueError("data.options.adapt is not set: there is no adaptation target")
        return self.domain_split(self.adapt, split)._labels

    def source_tuples(self) -> DomainTuples:
        """Domain tuples of the seen (labelled) domains only: the ``train`` split without target items."""
        if self._source_tuples is None:
            parts = [self.domain_split(d, "train") for d in self.seen_domains]
            self._source_tuples = DomainTuples(parts, self.num_classes, self.options.pair_seed)
        return self._source_tuples

    def _build_split(self, name: str) -> Dataset:
        if name == "train":
            source: Dataset
            if self.options.pairing == "none":
                source = SingleImageTuples(
                    JoinedDomains([self.domain_split(d, "train") for d in self.seen_domains]), len(self.seen_domains)
                )
            else:
                source = self.source_tuples()
            if self.adapt is None or self.options.adapt_views == "nearest":  # nearest: the view policy adds them
                return source
            share = self.options.adapt_share
            count = max(1, round(share / (1.0 - share) * len(source)))
            target = TargetTuples(
                self.domain_split(self.adapt, "train"), len(self.seen_domains), count, self.options.pair_seed
            )
            return JoinedDomains([source, target])
        if name == "test":
            return JoinedDomains([self.domain_split(d, "test") for d in self.seen_domains])
        domain, _, split = name.partition("/")
        return self.domain_split(domain, split)


__all__ = [
    "DECODED_SPLITS",
    "DOMAINNET_DOMAINS",
    "DecodedSplitCache",
    "DomainFiles",
    "DomainImages",
    "DomainNetAdapter",
    "DomainTuples",
    "JoinedDomains",
    "SingleImageTuples",
    "TargetTuples",
    "decode_file",
    "preload_images",
]
