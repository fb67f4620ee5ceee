"""Image adapters: ``digits`` (embedded default), ``image_folder`` and ``hf_imagefolder``.

Every item is ``{"x": uint8 (3, S, S), "label": int, "index": int, "source": str}`` where
``S = options.load_size`` (images are resized at decode time so that they collate), ``index`` is
the item's position in its split and ``source`` identifies the original image (file path, or
``digits:<i>`` for scikit-learn's digits).

Splits are ``("train", "test")``. When the source has no test split, a fixed stratified split is
drawn with :func:`stratified_split` (seed 0, ``test_fraction`` of every class, default 0.2).
``val_fraction > 0`` adds a ``val`` split: a fixed stratified part of train (seed 1, that share of
every class of train), which then no longer trains; hyperparameter search scores on it.
"""

from __future__ import annotations

import io
import os
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, UnidentifiedImageError
from pydantic import Field
from torch.utils.data import Dataset

from ...console import progress
from ..adapters import ADAPTERS, AdapterOptions, DataAdapter
from ..hf_local import load_local_splits

IMAGE_EXTENSIONS: tuple[str, ...] = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")
#: Seed of the stratified train/val split (the train/test split uses seed 0).
VAL_SEED: int = 1
#: How many skipped paths a warning / error lists.
SHOW_FIRST: int = 5


# --------------------------------------------------------------------------------------------
# shared pieces
# --------------------------------------------------------------------------------------------
class ImageTensorDataset(Dataset):
    """In-memory images ``(N, 3, S, S)`` uint8 with labels ``(N,)`` and one source string each."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, sources: Sequence[str]) -> None:
        if images.dtype != torch.uint8 or images.dim() != 4 or images.shape[1] != 3:
            raise ValueError(f"expected uint8 images (N, 3, S, S), got {images.dtype} {tuple(images.shape)}")
        if not (len(images) == len(labels) == len(sources)):
            raise ValueError(f"{len(images)} images, {len(labels)} labels, {len(sources)} sources")
        self.images = images
        self.labels = labels.long()
        self.sources = list(sources)

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"x": self.images[i], "label": int(self.labels[i]), "index": int(i), "source": self.sources[i]}


class LazyImageFileDataset(Dataset):
    """Image files decoded on access to uint8 ``(3, S, S)`` (for folders too big to preload).

    Files were checked once at scan time (``PIL.Image.verify``); one that fails to decode later
    raises a ``ValueError`` naming it (never a silently substituted item).
    """

    def __init__(self, paths: Sequence[str], labels: torch.Tensor, load_size: int) -> None:
        if len(paths) != len(labels):
            raise ValueError(f"{len(paths)} paths, {len(labels)} labels")
        self.sources = list(paths)
        self.labels = labels.long()
        self.load_size = load_size

    def __len__(self) -> int:
        return len(self.sources)

    def __getitem__(self, i: int) -> dict[str, Any]:
        path = self.sources[i]
        try:
            with Image.open(path) as img:
                x = to_uint8_rgb(img, self.load_size)
        except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as err:
            raise ValueError(
                f"image '{path}' passed the scan but cannot be decoded: {type(err).__name__}: {err}"
            ) from None
        return {"x": x, "label": int(self.labels[i]), "index": int(i), "source": path}


def stratified_split(labels: np.ndarray, test_fraction: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Fixed stratified split: ``round(test_fraction * n_c)`` items of every class ``c`` go to test.

    Returns sorted ``(train_indices, test_indices)``; deterministic for a given ``seed``.
    """
    rng = np.random.default_rng(seed)
    train, test = [], []
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        members = members[rng.permutation(len(members))]
        n_test = int(round(test_fraction * len(members)))
        test.append(members[:n_test])
        train.append(members[n_test:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


def to_uint8_rgb(img: Image.Image, load_size: int) -> torch.Tensor:
    """PIL image -> uint8 ``(3, load_size, load_size)`` (RGB, bilinear resize to a square)."""
    img = img.convert("RGB")
    if img.size != (load_size, load_size):
        img = img.resize((load_size, load_size), Image.BILINEAR)
    arr = np.asarray(img, dtype=np.uint8)
    return torch.from_numpy(arr.copy()).permute(2, 0, 1).contiguous()


@dataclass
class DecodeReport:
    """Outcome of decoding a list of images: kept tensors / labels / sources and skipped paths."""

    images: list[torch.Tensor]
    labels: list[int]
    sources: list[str]
    skipped: list[str]


def report_skipped(skipped: Sequence[str], n_all: int, what: str, max_bad_fraction: float) -> None:
    """Skip-and-count policy for unreadable images: ``ValueError`` when the skipped share exceeds
    ``max_bad_fraction`` or nothing was readable, else a warning with the count and the first ones."""
    n_bad = len(skipped)
    first = ", ".join(skipped[:SHOW_FIRST])
    if n_all and n_bad / n_all > max_bad_fraction:
        raise ValueError(
            f"{what}: {n_bad} of {n_all} images are unreadable ({n_bad / n_all:.1%} > "
            f"data.options.max_bad_fraction={max_bad_fraction}); first: {first}"
        )
    if n_bad >= n_all:
        raise ValueError(f"{what}: no readable images")
    if n_bad:
        warnings.warn(f"{what}: skipped {n_bad} of {n_all} unreadable images; first: {first}", stacklevel=3)


def decode_images(
    entries: Iterable[tuple[str, int, Callable[[], Image.Image]]],
    total: int,
    load_size: int,
    what: str,
    max_bad_fraction: float,
    preload: bool = True,
) -> ImageTensorDataset | LazyImageFileDataset:
    """Decode ``(source, label, open_fn)`` entries; unreadable images are skipped and counted.

    ``preload=True``: every image is decoded now and kept in memory (:class:`ImageTensorDataset`).
    ``preload=False``: images are only verified now (``PIL`` ``verify``) and decoded on access
    (:class:`LazyImageFileDataset`; ``source`` must then be the file path).
    Warns with the count and the first paths when anything was skipped; raises ``ValueError``
    when the skipped fraction exceeds ``max_bad_fraction`` or nothing could be read.
    """
    report = DecodeReport([], [], [], [])
    verb = "decoding" if preload else "checking"
    for source, label, open_fn in progress(
        entries, total=total, desc=f"{verb} {what}", leave=False, disable=total < 2000
    ):
        try:
            with open_fn() as img:
                if preload:
                    img.load()
                    report.images.append(to_uint8_rgb(img, load_size))
                else:
                    img.verify()
        except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as err:
            report.skipped.append(f"{source} ({type(err).__name__})")
            continue
        report.labels.append(label)
        report.sources.append(source)
    report_skipped(report.skipped, len(report.skipped) + len(report.labels), what, max_bad_fraction)
    labels = torch.tensor(report.labels)
    if not preload:
        return LazyImageFileDataset(report.sources, labels, load_size)
    return ImageTensorDataset(torch.stack(report.images), labels, report.sources)


ImageDataset = ImageTensorDataset | LazyImageFileDataset


def subset(ds: ImageDataset, indices: np.ndarray) -> ImageDataset:
    """Rows ``indices`` of ``ds`` as a new dataset (``index`` renumbered within the subset)."""
    idx = torch.as_tensor(indices, dtype=torch.long)
    sources = [ds.sources[i] for i in indices.tolist()]
    if isinstance(ds, LazyImageFileDataset):
        return LazyImageFileDataset(sources, ds.labels[idx], ds.load_size)
    return ImageTensorDataset(ds.images[idx], ds.labels[idx], sources)


class ImageOptions(AdapterOptions):
    """Options shared by the image adapters."""

    load_size: int = Field(32, ge=8, le=1024, description="side S of the square uint8 items (3, S, S)")
    test_fraction: float = Field(
        0.2, gt=0.0, lt=1.0, description="per-class test share of the fixed stratified split (seed 0)"
    )
    val_fraction: float = Field(
        0.0, ge=0.0, lt=1.0, description="per-class share of train held out as the 'val' split (seed 1; 0: none)"
    )


class SplitImageAdapter(DataAdapter):
    """Image adapter holding one :class:`ImageTensorDataset` (or lazy file dataset) per split."""

    modality = "image"

    def __init__(self, options: ImageOptions) -> None:
        super().__init__(options)
        self.splits = ("train", "test")

    def _set_splits(self, train: ImageDataset, test: ImageDataset) -> None:
        self._split_cache = {"train": train, "test": test}
        if self.options.val_fraction > 0:
            fit_idx, val_idx = stratified_split(train.labels.numpy(), self.options.val_fraction, seed=VAL_SEED)
            if len(val_idx) == 0 or len(fit_idx) == 0:
                raise ValueError(
                    f"data.options.val_fraction={self.options.val_fraction}: leaves {len(fit_idx)} train and "
                    f"{len(val_idx)} val items of {len(train)}; choose a share that keeps both non-empty"
                )
            self._split_cache = {"train": subset(train, fit_idx), "val": subset(train, val_idx), "test": test}
            self.splits = ("train", "val", "test")

    def _split_fixed(self, full: ImageDataset) -> None:
        train_idx, test_idx = stratified_split(full.labels.numpy(), self.options.test_fraction, seed=0)
        self._set_splits(subset(full, train_idx), subset(full, test_idx))


# --------------------------------------------------------------------------------------------
# digits: scikit-learn's bundled handwritten digits (1,797 real 8x8 images, 10 classes)
# --------------------------------------------------------------------------------------------
@ADAPTERS.register("digits")
class DigitsAdapter(SplitImageAdapter):
    """scikit-learn's bundled digits (no network), up-sampled to ``load_size`` and replicated to RGB.

    Pixel values 0..16 are scaled to 0..255; bilinear up-sampling; fixed stratified split with
    seed 0 and ``test_fraction`` (default 0.2 -> 1,438 train / 359 test: round(0.2 n_c) per class).
    """

    class Options(ImageOptions):
        pass

    def __init__(self, options: Options) -> None:
        super().__init__(options)
        from sklearn.datasets import load_digits

        digits = load_digits()
        self.class_names = [str(c) for c in range(10)]
        pixels = torch.as_tensor(digits.images, dtype=torch.float32)[:, None] * (255.0 / 16.0)
        size = options.load_size
        pixels = F.interpolate(pixels, size=(size, size), mode="bilinear", align_corners=False)
        images = pixels.round().clamp(0, 255).to(torch.uint8).expand(-1, 3, -1, -1).contiguous()
        labels = torch.as_tensor(digits.target, dtype=torch.long)
        full = ImageTensorDataset(images, labels, [f"digits:{i}" for i in range(len(labels))])
        self._split_fixed(full)


# --------------------------------------------------------------------------------------------
# image_folder: root/<class>/<image>, optionally root/{train,test}/<class>/<image>
# --------------------------------------------------------------------------------------------
def scan_class_folders(root: Path, extensions: Sequence[str]) -> dict[str, list[Path]]:
    """``{class name: sorted image paths}`` of ``root/<class>/<image>``; errors name ``root``."""
    if not root.exists():
        raise ValueError(f"image folder '{root}' does not exist (data.options.root)")
    if not root.is_dir():
        raise ValueError(f"image folder '{root}' is not a directory (data.options.root)")
    classes: dict[str, list[Path]] = {}
    for class_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        files = sorted(p for p in class_dir.rglob("*") if p.is_file() and p.suffix.lower() in extensions)
        if files:
            classes[class_dir.name] = files
    if not classes:
        raise ValueError(
            f"image folder '{root}' has no images: expected {root}/<class>/<image> with extensions "
            f"{', '.join(extensions)}"
        )
    return classes


def _open_path(path: Path) -> Callable[[], Image.Image]:
    return lambda: Image.open(path)


@ADAPTERS.register("image_folder")
class ImageFolderAdapter(SplitImageAdapter):
    """Images in ``root/<class>/<image>``; uses ``root/train`` and ``root/test`` when both exist.

    By default all images are decoded once at construction (resized to ``load_size``) and kept
    in memory; with ``preload: false`` they are only verified then and decoded on access (for
    folders too large for memory). Unreadable images are skipped and counted (error above
    ``max_bad_fraction``).
    """

    class Options(ImageOptions):
        root: str = Field(..., description="folder with <class>/<image> (or train/ and test/ subfolders)")
        max_bad_fraction: float = Field(
            0.05, ge=0.0, le=1.0, description="largest tolerated share of unreadable images"
        )
        extensions: list[str] = Field(default_factory=lambda: list(IMAGE_EXTENSIONS))
        preload: bool = Field(True, description="decode all images into memory now (else verify now, decode on access)")

    def __init__(self, options: Options) -> None:
        super().__init__(options)
        root = Path(os.path.expanduser(options.root))
        extensions = tuple(e.lower() if e.startswith(".") else f".{e.lower()}" for e in options.extensions)
        if (root / "train").is_dir() and (root / "test").is_dir():
            train_classes = scan_class_folders(root / "train", extensions)
            test_classes = scan_class_folders(root / "test", extensions)
            unknown = sorted(set(test_classes) - set(train_classes))
            if unknown:
                raise ValueError(f"image folder '{root}/test' has classes missing from train: {', '.join(unknown)}")
            self.class_names = sorted(train_classes)
            self._set_splits(self._decode(train_classes, f"{root}/train"), self._decode(test_classes, f"{root}/test"))
        else:
            classes = scan_class_folders(root, extensions)
            self.class_names = sorted(classes)
            self._split_fixed(self._decode(classes, str(root)))

    def _decode(self, classes: dict[str, list[Path]], what: str) -> ImageDataset:
        label_of = {name: i for i, name in enumerate(self.class_names)}
        entries = [(str(p), label_of[c], _open_path(p)) for c, paths in classes.items() for p in paths]
        return decode_images(
            entries,
            len(entries),
            self.options.load_size,
            f"image folder '{what}'",
            self.options.max_bad_fraction,
            preload=self.options.preload,
        )


# --------------------------------------------------------------------------------------------
# hf_imagefolder: datasets.load_dataset("imagefolder", data_dir=...), offline-safe
# --------------------------------------------------------------------------------------------
@ADAPTERS.register("hf_imagefolder")
class HFImageFolderAdapter(SplitImageAdapter):
    """A local folder read through Hugging Face ``datasets``' ``imagefolder`` builder.

    ``imagefolder`` is a builder packaged inside ``datasets`` and ``data_dir`` is local, so nothing
    is fetched from the Hub (works with ``HF_HUB_OFFLINE=1``, which the tests set). Images are
    decoded by the same skip-and-count routine as ``image_folder``.
    Uses the builder's ``test`` split when present, else the fixed stratified split.
    """

    class Options(ImageOptions):
        data_dir: str = Field(..., description="folder given to load_dataset('imagefolder', data_dir=...)")
        max_bad_fraction: float = Field(0.05, ge=0.0, le=1.0)
        cache_dir: str | None = Field(None, description="datasets cache folder (default: HF_DATASETS_CACHE)")

    def __init__(self, options: Options) -> None:
        super().__init__(options)
        data_dir = Path(os.path.expanduser(options.data_dir))
        if not data_dir.is_dir():
            raise ValueError(f"hf_imagefolder data_dir '{data_dir}' does not exist (data.options.data_dir)")
        splits = load_local_splits(
            data_dir,
            adapter="hf_imagefolder",
            cache_dir=options.cache_dir,
            expected="a local imagefolder layout <split>/<class>/<image> or <class>/<image>",
        )
        if "image" not in splits["train"].column_names:
            raise ValueError(f"hf_imagefolder '{data_dir}': no 'image' column (got {splits['train'].column_names})")
        features = splits["train"].features
        if "label" in features and hasattr(features["label"], "names"):
            self.class_names = list(features["label"].names)
        train = self._decode(splits["train"], f"{data_dir} [train]")
        if "test" in splits:
            self._set_splits(train, self._decode(splits["test"], f"{data_dir} [test]"))
        else:
            self._split_fixed(train)

    def _decode(self, ds: Any, what: str) -> ImageTensorDataset:
        has_label = "label" in ds.column_names

        def entries() -> Iterable[tuple[str, int, Callable[[], Image.Image]]]:
            for row in ds:
                image = row["image"]
                source = image.get("path") or f"{what}#{len(image.get('bytes') or b'')}b"
                label = int(row["label"]) if has_label else -1
                data = image.get("bytes")
                if data is not None:
                    yield source, label, (lambda d=data: Image.open(io.BytesIO(d)))
                else:
                    yield source, label, _open_path(Path(image["path"]))

        return decode_images(
            entries(), len(ds), self.options.load_size, f"hf_imagefolder '{what}'", self.options.max_bad_fraction
        )


__all__ = [
    "DigitsAdapter",
    "HFImageFolderAdapter",
    "ImageFolderAdapter",
    "ImageTensorDataset",
    "LazyImageFileDataset",
    "decode_images",
    "report_skipped",
    "stratified_split",
]
