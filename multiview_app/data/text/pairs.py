"""Image-text pair adapters: ``pairs_csv`` (open_clip's CSV/TSV convention) and ``pairs_hf``
(Hugging Face ``datasets``, local files only).

Every item is ``{"x": uint8 (3, S, S), "captions": str, "label": int, "index": int, "source": str}``;
``captions`` holds the image's captions joined by ``"\\n"`` (one or more; every caption is
whitespace-normalized, so it never contains a newline), so that ``default_collate`` gives a list of
n strings. ``modality = "image_text"`` (the ``pairs`` view policy turns items into image and text views).

Bad input is skipped and counted in ``adapter.report`` (and warned about): rows with an empty
caption, images without any caption, unreadable / missing image files (error above
``max_bad_fraction``). Wrong column names and non-UTF-8 CSV files are one clear error.
"""

from __future__ import annotations

import csv
import io
import os
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from pydantic import Field
from torch.utils.data import Dataset

from ..adapters import ADAPTERS, DataAdapter
from ..hf_local import load_local_splits
from ..images.adapters import ImageDataset, ImageOptions, decode_images, stratified_split, subset

#: Separator of the captions of one item in ``item["captions"]``.
CAPTION_SEPARATOR = "\n"


def clean_caption(text: str) -> str:
    """Whitespace-normalized caption (runs of spaces / tabs / newlines -> one space, stripped)."""
    return " ".join(str(text).split())


def split_captions(joined: str) -> list[str]:
    """Inverse of joining with :data:`CAPTION_SEPARATOR`."""
    return joined.split(CAPTION_SEPARATOR)


class PairDataset(Dataset):
    """An image dataset plus the captions of every image: item = image item + ``captions``."""

    def __init__(self, images: ImageDataset, captions: Sequence[str]) -> None:
        if len(images) != len(captions):
            raise ValueError(f"{len(images)} images but {len(captions)} caption entries")
        self.images = images
        self.captions = list(captions)

    @property
    def labels(self) -> torch.Tensor:
        return self.images.labels

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> dict[str, Any]:
        item = self.images[i]
        item["captions"] = self.captions[i]
        return item


@dataclass
class PairCollector:
    """Groups (image, caption) rows by image; counts what was skipped."""

    what: str
    order: list[str] = field(default_factory=list)
    captions: dict[str, list[str]] = field(default_factory=dict)
    labels: dict[str, int] = field(default_factory=dict)
    openers: dict[str, Callable[[], Image.Image]] = field(default_factory=dict)
    report: dict[str, int] = field(default_factory=lambda: {"rows": 0, "empty_captions": 0})

    def add(self, source: str, caption: Any, label: int, open_fn: Callable[[], Image.Image]) -> None:
        """One row; ``caption`` may be a string or a list of strings (several captions)."""
        self.report["rows"] += 1
        if source not in self.captions:
            self.order.append(source)
            self.captions[source] = []
            self.labels[source] = label
            self.openers[source] = open_fn
        texts = caption if isinstance(caption, (list, tuple)) else [caption]
        for text in texts:
            cleaned = clean_caption(text) if text is not None else ""
            if cleaned:
                self.captions[source].append(cleaned)
            else:
                self.report["empty_captions"] += 1

    def decode(
        self, load_size: int, max_bad_fraction: float, preload: bool = True
    ) -> tuple[PairDataset, dict[str, int]]:
        """Decode the images (skip + count unreadable / missing ones) -> dataset and report."""
        keep = [s for s in self.order if self.captions[s]]
        report = dict(self.report, images_without_caption=len(self.order) - len(keep))
        if not keep:
            raise ValueError(f"{self.what}: no image has a non-empty caption ({report['rows']} rows read)")
        entries = [(s, self.labels[s], self.openers[s]) for s in keep]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the combined warning below says it all
            images = decode_images(entries, len(entries), load_size, self.what, max_bad_fraction, preload=preload)
        report["unreadable_images"] = len(entries) - len(images)
        report["images"] = len(images)
        report["captions"] = sum(len(self.captions[s]) for s in images.sources)
        dataset = PairDataset(images, [CAPTION_SEPARATOR.join(self.captions[s]) for s in images.sources])
        skipped = {
            k: v
            for k, v in report.items()
            if k in ("empty_captions", "images_without_caption", "unreadable_images") and v
        }
        if skipped:
            warnings.warn(
                f"{self.what}: skipped " + ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in skipped.items()),
                stacklevel=3,
            )
        return dataset, report


def subset_pairs(ds: PairDataset, indices: np.ndarray) -> PairDataset:
    """Rows ``indices`` of a pair dataset (``index`` renumbered)."""
    return PairDataset(subset(ds.images, indices), [ds.captions[i] for i in indices.tolist()])


class PairOptions(ImageOptions):
    """Options shared by the pair adapters."""

    max_bad_fraction: float = Field(
        0.05, ge=0.0, le=1.0, description="largest tolerated share of unreadable / missing images"
    )


class PairAdapter(DataAdapter):
    """Base of the pair adapters: splits ``("train", "test")``, ``report`` of skipped input."""

    modality = "image_text"

    def __init__(self, options: PairOptions) -> None:
        super().__init__(options)
        self.splits = ("train", "test")
        self.report: dict[str, dict[str, int]] = {}

    def _set_splits(self, train: PairDataset, test: PairDataset) -> None:
        self._split_cache = {"train": train, "test": test}

    def _split_fixed(self, full: PairDataset) -> None:
        """Fixed stratified split of images (seed 0); all captions of an image stay with it."""
        train_idx, test_idx = stratified_split(full.labels.numpy(), self.options.test_fraction, seed=0)
        self._set_splits(subset_pairs(full, train_idx), subset_pairs(full, test_idx))


def _open_file(path: Path) -> Callable[[], Image.Image]:
    return lambda: Image.open(path)


def _label_ids(values: Iterable[str]) -> tuple[list[str], dict[str, int]]:
    names = sorted(set(values))
    return names, {name: i for i, name in enumerate(names)}


# --------------------------------------------------------------------------------------------
# pairs_csv: open_clip's CSV / TSV convention (--csv-img-key filepath --csv-caption-key title)
# --------------------------------------------------------------------------------------------
def read_csv_rows(path: Path, separator: str, required: Sequence[str]) -> list[dict[str, str]]:
    """Rows of a UTF-8 CSV / TSV as dicts; errors name the file, the line and the available columns."""
    if not path.is_file():
        raise ValueError(f"pairs CSV '{path}' does not exist (data.options.csv)")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise ValueError(
            f"pairs CSV '{path}' is not UTF-8 text: byte {err.start} (line {line}) is {raw[err.start : err.start + 1]!r}"
        ) from None
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=separator)
    columns = reader.fieldnames or []
    missing = [c for c in required if c not in columns]
    if missing:
        shown = ", ".join(repr(c) for c in columns) or "(none: empty file)"
        raise ValueError(
            f"pairs CSV '{path}': no column {', '.join(repr(c) for c in missing)}; available columns: {shown} "
            f"(separator {separator!r}; set data.options.img_key / caption_key / label_key / separator)"
        )
    return list(reader)


@ADAPTERS.register("pairs_csv")
class PairsCSVAdapter(PairAdapter):
    """Image paths + captions in a CSV / TSV (open_clip's defaults: tab separator, columns
    ``filepath`` and ``title``). Rows repeating an image path add captions to it. Relative paths are
    resolved against ``root`` (default: the CSV's folder). Uses ``test_csv`` as the test split when
    given, else a fixed stratified split of the images (by ``label_key`` when set)."""

    class Options(PairOptions):
        csv: str = Field(..., description="CSV / TSV file with an image-path and a caption column")
        test_csv: str | None = Field(None, description="optional CSV of the test split (same columns)")
        img_key: str = "filepath"
        caption_key: str = "title"
        label_key: str | None = Field(None, description="optional class column (for zero-shot evaluation)")
        separator: str = Field("\t", min_length=1, max_length=1)
        root: str | None = Field(None, description="folder relative image paths start from (default: the CSV's folder)")
        preload: bool = Field(True, description="decode all images now (else verify now, decode on access)")

    def __init__(self, options: Options) -> None:
        super().__init__(options)
        paths = {"train": Path(os.path.expanduser(options.csv))}
        if options.test_csv:
            paths["test"] = Path(os.path.expanduser(options.test_csv))
        required = [options.img_key, options.caption_key] + ([options.label_key] if options.label_key else [])
        rows = {split: read_csv_rows(path, options.separator, required) for split, path in paths.items()}
        label_of: dict[str, int] = {}
        if options.label_key:
            self.class_names, label_of = _label_ids(r[options.label_key] for rs in rows.values() for r in rs)
        datasets: dict[str, PairDataset] = {}
        for split, path in paths.items():
            root = Path(os.path.expanduser(options.root)) if options.root else path.parent
            collector = PairCollector(f"pairs CSV '{path}'")
            for row in rows[split]:
                image_path = root / (row[options.img_key] or "")
                label = label_of[row[options.label_key]] if options.label_key else -1
                collector.add(str(image_path), row[options.caption_key], label, _open_file(image_path))
            datasets[split], self.report[split] = collector.decode(
                options.load_size, options.max_bad_fraction, options.preload
            )
        if "test" in datasets:
            self._set_splits(datasets["train"], datasets["test"])
        else:
            self._split_fixed(datasets["train"])


# --------------------------------------------------------------------------------------------
# pairs_hf: a saved datasets folder (save_to_disk) or an imagefolder with captions in metadata
# --------------------------------------------------------------------------------------------
@ADAPTERS.register("pairs_hf")
class PairsHFAdapter(PairAdapter):
    """Hugging Face ``datasets`` with an image and a text column, from local files only: a folder
    written by ``save_to_disk`` (``load_from_disk``) or an ``imagefolder`` folder whose
    ``metadata.csv`` / ``metadata.jsonl`` holds the captions. The text column may hold a string or a
    list of strings (several captions). Uses the ``test`` split when present, else the fixed split."""

    class Options(PairOptions):
        path: str = Field(..., description="save_to_disk folder, or an imagefolder with metadata.{csv,jsonl}")
        image_column: str = "image"
        text_column: str = "text"
        label_column: str | None = None
        cache_dir: str | None = None

    def __init__(self, options: Options) -> None:
        super().__init__(options)
        path = Path(os.path.expanduser(options.path))
        if not path.is_dir():
            raise ValueError(f"pairs_hf path '{path}' is not a folder (data.options.path)")
        splits = load_local_splits(
            path,
            adapter="pairs_hf",
            image_column=options.image_column,
            cache_dir=options.cache_dir,
            save_to_disk=True,
            expected="a save_to_disk folder or an imagefolder with metadata.csv / metadata.jsonl",
        )
        columns = splits["train"].column_names
        wanted = [options.image_column, options.text_column] + ([options.label_column] if options.label_column else [])
        missing = [c for c in wanted if c not in columns]
        if missing:
            raise ValueError(
                f"pairs_hf '{path}': no column {', '.join(repr(c) for c in missing)}; available columns: "
                f"{', '.join(repr(c) for c in columns)} (set data.options.image_column / text_column / label_column)"
            )
        label_of: dict[Any, int] = {}
        if options.label_column:
            feature = splits["train"].features[options.label_column]
            if hasattr(feature, "names"):
                self.class_names = list(feature.names)
                label_of = {i: i for i in range(len(self.class_names))}
            else:
                self.class_names, label_of = _label_ids(
                    str(v) for ds in splits.values() for v in ds[options.label_column]
                )
        datasets = {}
        for split in ("train", "test"):
            if split in splits:
                datasets[split], self.report[split] = self._collect(
                    splits[split], f"pairs_hf '{path}' [{split}]", label_of
                )
        if "test" in datasets:
            self._set_splits(datasets["train"], datasets["test"])
        else:
            self._split_fixed(datasets["train"])

    def _collect(self, ds: Any, what: str, label_of: dict[Any, int]) -> tuple[PairDataset, dict[str, int]]:
        o = self.options
        collector = PairCollector(what)
        for row_number, row in enumerate(ds):
            image = row[o.image_column]
            if isinstance(image, dict):  # datasets.Image(decode=False): bytes and/or path
                data, source = image.get("bytes"), image.get("path") or what
                if data is not None:  # embedded bytes: one image per row (file names may repeat)
                    source = f"{source}#row{row_number}"

                    def open_fn(d=data) -> Image.Image:
                        return Image.open(io.BytesIO(d))
                else:
                    open_fn = _open_file(Path(image["path"]))
            elif isinstance(image, str):
                source, open_fn = image, _open_file(Path(image))
            else:
                raise ValueError(
                    f"{what}: column {o.image_column!r} holds {type(image).__name__}; expected an image or a path"
                )
            label = -1
            if o.label_column:
                value = row[o.label_column]
                label = label_of[value] if value in label_of else label_of[str(value)]
            collector.add(source, row[o.text_column], label, open_fn)
        return collector.decode(o.load_size, o.max_bad_fraction)


__all__ = [
    "CAPTION_SEPARATOR",
    "PairAdapter",
    "PairCollector",
    "PairDataset",
    "PairsCSVAdapter",
    "PairsHFAdapter",
    "clean_caption",
    "split_captions",
]
