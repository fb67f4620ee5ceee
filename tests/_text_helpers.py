"""Small image-text fixtures: a TSV + image folder and tar shards of the first rendered digits."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
from PIL import Image

from multiview_app.data.text.captions import render_digits
from multiview_app.data.text.shards import ShardSample, write_shards

_RENDERED: tuple[np.ndarray, np.ndarray, list[list[str]]] | None = None
#: the open_clip text tower at test size
TINY_TEXT = {
    "name": "open_clip",
    "embed_dim": 24,
    "text_cfg": {"context_length": 12, "width": 32, "heads": 2, "layers": 1},
}


def rendered() -> tuple[np.ndarray, np.ndarray, list[list[str]]]:
    """``render_digits(16)`` once per test session."""
    global _RENDERED
    if _RENDERED is None:
        _RENDERED = render_digits(size=16, seed=0)
    return _RENDERED


def png_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


def write_pair_folder(root: Path, count: int = 60, separator: str = "\t") -> Path:
    """``root/images/*.png`` + ``root/pairs.tsv`` (columns filepath, title, label; 3 rows per image)."""
    images, labels, captions = rendered()
    (root / "images").mkdir(parents=True, exist_ok=True)
    path = root / "pairs.tsv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, delimiter=separator)
        writer.writerow(["filepath", "title", "label"])
        for i in range(count):
            (root / "images" / f"d{i:04d}.png").write_bytes(png_bytes(images[i]))
            for caption in captions[i]:
                writer.writerow([f"images/d{i:04d}.png", caption, int(labels[i])])
    return path


def shard_samples(count: int = 60, start: int = 0) -> list[ShardSample]:
    images, labels, captions = rendered()
    return [
        ShardSample(f"d{i:04d}", png_bytes(images[i]), captions[i], int(labels[i])) for i in range(start, start + count)
    ]


def write_pair_shards(folder: Path, count: int = 60, per_shard: int = 20) -> list[Path]:
    return write_shards(shard_samples(count), folder, per_shard, prefix="t")
