"""Embedded image-text default: scikit-learn's real digits with generated captions.

Every digit is rendered once (seeded): white ink on black, or ``inverted`` (black on white) for 30%
of the images, and turned by 90 degrees for 20%; the stroke is ``thick`` / ``thin`` / ``regular`` by
its ink mass relative to the digit's class (terciles). Three captions describe the digit and its
rendering, e.g. ``"a thick handwritten seven, inverted"``.

:func:`write_digit_pairs` writes the set as a TSV + image folder (``pairs.tsv``, ``images/``) and as
tar shards (``shards/``); the ``digit_captions`` adapter writes it once into ``cache_dir`` and then
reads it back through the real readers (``pairs_csv`` or ``pairs_wds``).
"""
from __future__ import annotations

import csv
import io
import os
import shutil
import tempfile
from pathlib import Path
from typing import Literal

import numpy as np
from PIL import Image
from pydantic import Field

from ..adapters import ADAPTERS
from .pairs import PairAdapter, PairOptions, PairsCSVAdapter
from .shards import PairsWebDatasetAdapter, ShardSample, write_shards

DIGIT_WORDS: tuple[str, ...] = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
#: Files of a complete written set (the marker is written last).
DONE_MARKER = "COMPLETE"
DEFAULT_CACHE = "~/.cache/multiview_app/digit_captions"


def stroke_words(images: np.ndarray, labels: np.ndarray) -> list[str]:
    """``thin`` / ``regular`` / ``thick`` per image: ink mass tercile within its class. ``images (N, H, W)``."""
    mass = images.reshape(len(images), -1).sum(axis=1)
    words = ["regular"] * len(images)
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        low, high = np.quantile(mass[members], [1 / 3, 2 / 3])
        for i in members:
            words[i] = "thin" if mass[i] <= low else "thick" if mass[i] > high else "regular"
    return words


def digit_captions(label: int, stroke: str, inverted: bool, rotated: bool) -> list[str]:
    """The three captions of one rendered digit."""
    word = DIGIT_WORDS[label]
    rendering = (", inverted" if inverted else "") + (", rotated" if rotated else "")
    colours = "black ink on white" if inverted else "white ink on black"
    turn = "turned sideways" if rotated else "upright"
    return [
        f"a {stroke} handwritten {word}{rendering}",
        f"the digit {label} written with a {stroke} stroke in {colours}, {turn}",
        f"a small picture of the number {word}",
    ]


def render_digits(size: int = 32, seed: int = 0) -> tuple[np.ndarray, np.ndarray, list[list[str]]]:
    """Rendered uint8 images ``(N, size, size)``, labels ``(N,)`` and three captions per image."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    pixels = (digits.images * (255.0 / 16.0)).round().clip(0, 255).astype(np.uint8)  # (N, 8, 8)
    labels = digits.target.astype(np.int64)
    rng = np.random.default_rng(seed)
    inverted = rng.random(len(labels)) < 0.3
    rotated = rng.random(len(labels)) < 0.2
    strokes = stroke_words(pixels.astype(np.float64), labels)
    images, captions = [], []
    for i in range(len(labels)):
        img = Image.fromarray(pixels[i]).resize((size, size), Image.BILINEAR)
        arr = np.asarray(img)
        if rotated[i]:
            arr = np.rot90(arr)
        if inverted[i]:
            arr = 255 - arr
        images.append(np.ascontiguousarray(arr))
        captions.append(digit_captions(int(labels[i]), strokes[i], bool(inverted[i]), bool(rotated[i])))
    return np.stack(images), labels, captions


def _png(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


def write_digit_pairs(out_dir: str | Path, size: int = 32, samples_per_shard: int = 500, seed: int = 0) -> Path:
    """Write ``out_dir/{images/, pairs.tsv, shards/}`` (one TSV row per caption; columns
    ``filepath``, ``title``, ``label`` = the digit), built in a temp folder and renamed into place. Returns ``out_dir``."""
    out_dir = Path(out_dir).expanduser()
    if (out_dir / DONE_MARKER).is_file():
        return out_dir
    images, labels, captions = render_digits(size, seed)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}."))
    try:
        (tmp / "images").mkdir()
        samples = []
        with open(tmp / "pairs.tsv", "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh, delimiter="\t")
            writer.writerow(["filepath", "title", "label"])
            for i, (arr, label, caps) in enumerate(zip(images, labels, captions)):
                name = f"digit_{i:05d}"
                data = _png(arr)
                (tmp / "images" / f"{name}.png").write_bytes(data)
                for caption in caps:
                    writer.writerow([f"images/{name}.png", caption, int(label)])
                samples.append(ShardSample(name, data, caps, int(label)))
        write_shards(samples, tmp / "shards", samples_per_shard, prefix="digits")
        (tmp / DONE_MARKER).write_text("ok\n")
        if out_dir.exists():  # an incomplete earlier attempt
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


@ADAPTERS.register("digit_captions")
class DigitCaptionsAdapter(PairAdapter):
    """The embedded image-text default (module docstring): writes the rendered digits with captions
    to ``cache_dir`` once, then reads them with ``pairs_csv`` (``format: csv``) or ``pairs_wds``
    (``format: wds``). ``class_names`` are the number words (zero-shot prompts)."""

    class Options(PairOptions):
        format: Literal["csv", "wds"] = "csv"
        cache_dir: str = Field(DEFAULT_CACHE, description="where the rendered set is written (once)")
        render_size: int = Field(32, ge=8, le=256, description="side of the written PNGs")

    def __init__(self, options: Options) -> None:
        super().__init__(options)
        folder = Path(options.cache_dir).expanduser() / f"size{options.render_size}"
        write_digit_pairs(folder, options.render_size)
        common = {"load_size": options.load_size, "test_fraction": options.test_fraction,
                  "max_bad_fraction": options.max_bad_fraction}
        if options.format == "csv":
            inner: PairAdapter = PairsCSVAdapter(PairsCSVAdapter.Options(csv=str(folder / "pairs.tsv"), label_key="label", **common))
            if inner.class_names != [str(d) for d in range(10)]:
                raise ValueError(f"{folder / 'pairs.tsv'}: label column holds {inner.class_names}, expected 0..9")
        else:
            inner = PairsWebDatasetAdapter(PairsWebDatasetAdapter.Options(
                shards=str(folder / "shards" / "*.tar"), class_names=list(DIGIT_WORDS), **common))
        self.class_names = list(DIGIT_WORDS)  # both readers give labels 0..9 in digit order
        self.report = inner.report
        self._split_cache = {"train": inner.split("train"), "test": inner.split("test")}
        self.folder = folder


__all__ = ["DIGIT_WORDS", "DigitCaptionsAdapter", "digit_captions", "render_digits", "stroke_words", "write_digit_pairs"]
