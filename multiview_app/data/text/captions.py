"""Embedded image-text default: scikit-learn's real digits with generated captions.

Every digit is rendered once (seeded): white ink on black, or ``inverted`` (black on white) for 30%
of the images, and turned by 90 degrees for 20%; the stroke is ``thick`` / ``thin`` / ``regular`` by
its ink mass relative to the digit's class (terciles). Three captions describe the digit and its
rendering, e.g. ``"a thick handwritten seven, inverted"``.

:func:`write_digit_pairs` writes the set as a TSV + image folder (``pairs.tsv``, ``images/``) and as
tar shards (``shards/``); the ``digit_captions`` adapter writes it once into ``cache_dir`` and then
reads it back through the real readers (``pairs_csv`` or ``pairs_wds``).

With ``domains_dir`` (a ``mvapp data synth-domains`` folder) the set is the digit-domain images
instead: :func:`write_domain_digit_pairs` captions every image with its digit, its stroke and its
domain's rendering (``"a thick handwritten seven, inverted"``, ``"... sketched as an outline"``),
keeps the domain folder's train / test split (by digit) and writes ``train.tsv`` / ``test.tsv`` +
``images/`` and ``shards/{train,test}-*.tar``.
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
import re
import shutil
import tempfile
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

import numpy as np
from PIL import Image
from pydantic import Field

from ...fileio import atomic_write_json
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


def _build_folder(out_dir: Path, build: Callable[[Path], None]) -> Path:
    """Run ``build(tmp)`` in a temp folder next to ``out_dir``, mark it complete and rename it into
    place (an earlier incomplete attempt is replaced); a finished folder is reused as it is."""
    if (out_dir / DONE_MARKER).is_file():
        return out_dir
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}."))
    try:
        build(tmp)
        (tmp / DONE_MARKER).write_text("ok\n")
        if out_dir.exists():  # an incomplete earlier attempt
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def write_digit_pairs(out_dir: str | Path, size: int = 32, samples_per_shard: int = 500, seed: int = 0) -> Path:
    """Write ``out_dir/{images/, pairs.tsv, shards/}`` (one TSV row per caption; columns
    ``filepath``, ``title``, ``label`` = the digit), built in a temp folder and renamed into place. Returns ``out_dir``."""

    def build(tmp: Path) -> None:
        images, labels, captions = render_digits(size, seed)
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

    return _build_folder(Path(out_dir).expanduser(), build)


# ------------------------------------------------------------------------- digit domains
#: How each ``synth-domains`` domain renders a digit: (short suffix, longer description).
DOMAIN_RENDERINGS: dict[str, tuple[str, str]] = {
    "clean": ("on white paper", "dark ink on white paper"),
    "inverted": ("inverted", "white ink on black"),
    "sketch": ("sketched as an outline", "thin dark outline strokes on light paper"),
    "texture": ("on a striped texture", "thick dark strokes on a striped, noisy texture"),
    "color": ("in colour", "random ink and background colours with noise"),
    "warped": ("rotated and warped", "a rotated, elastically warped stroke"),
}
_DOMAIN_FILE = re.compile(r"_(\d+)\.[A-Za-z]+$")  # synth-domains names: <domain>_<digit index>.jpg


def domain_digit_captions(label: int, stroke: str | None, domain: str) -> list[str]:
    """The three captions of one digit-domain image (``stroke`` None: the digit index is unknown)."""
    word = DIGIT_WORDS[label]
    short, long = DOMAIN_RENDERINGS[domain]
    thickness = f"{stroke} " if stroke else ""
    return [
        f"a {thickness}handwritten {word}, {short}",
        f"the digit {label} in {long}" + (f", {stroke} stroke" if stroke else ""),
        f"a {domain} picture of the number {word}",
    ]


def _domain_split_rows(domains_dir: Path, domains: Sequence[str]) -> dict[str, list[tuple[str, str, int]]]:
    """``{split: [(domain, relative path, label), ...]}`` from the ``<domain>_{train,test}.txt`` files."""
    rows: dict[str, list[tuple[str, str, int]]] = {"train": [], "test": []}
    for domain in domains:
        for split in rows:
            listing = domains_dir / f"{domain}_{split}.txt"
            for number, line in enumerate(listing.read_text(encoding="utf-8").splitlines(), 1):
                if not line.strip():
                    continue
                rel, _, label = line.strip().rpartition(" ")
                if not rel or not label.isdigit() or not 0 <= int(label) < len(DIGIT_WORDS):
                    raise ValueError(
                        f"{listing}:{number}: expected '<domain>/<class>/<file> <digit 0-9>', got {line.strip()!r}"
                    )
                rows[split].append((domain, rel, int(label)))
    return rows


def present_domains(domains_dir: str | Path, wanted: Sequence[str] | None = None) -> list[str]:
    """Domains of a ``synth-domains`` folder that have both split files (``wanted``: a subset, each
    of which must be present). Errors name the folder and what is missing."""
    root = Path(domains_dir).expanduser()
    if not root.is_dir():
        raise ValueError(
            f"digit-domain folder '{root}' does not exist (data.options.domains_dir; "
            "write it with `mvapp data synth-domains --out DIR`)"
        )
    found = [d for d in DOMAIN_RENDERINGS if all((root / f"{d}_{s}.txt").is_file() for s in ("train", "test"))]
    if wanted is None:
        if not found:
            raise ValueError(
                f"digit-domain folder '{root}' holds no <domain>_train.txt / <domain>_test.txt "
                f"for any of {', '.join(DOMAIN_RENDERINGS)}"
            )
        return found
    unknown = [d for d in wanted if d not in DOMAIN_RENDERINGS]
    if unknown:
        raise ValueError(
            f"unknown digit domain(s) {', '.join(unknown)} (data.options.domains); valid: {', '.join(DOMAIN_RENDERINGS)}"
        )
    missing = [d for d in wanted if d not in found]
    if missing:
        raise ValueError(
            f"digit-domain folder '{root}' lacks the split files of {', '.join(missing)} (data.options.domains)"
        )
    return list(wanted)


def domains_fingerprint(domains_dir: str | Path, domains: Sequence[str]) -> str:
    """Short hash of the chosen domains' split files (a changed folder gets a new cache entry)."""
    digest = hashlib.sha256()
    root = Path(domains_dir).expanduser()
    for domain in domains:
        for split in ("train", "test"):
            digest.update(f"{domain}_{split}\n".encode())
            digest.update((root / f"{domain}_{split}.txt").read_bytes())
    return digest.hexdigest()[:12]


def write_domain_digit_pairs(
    domains_dir: str | Path, out_dir: str | Path, domains: Sequence[str] | None = None, samples_per_shard: int = 500
) -> Path:
    """Caption the images of a ``synth-domains`` folder (see module docstring) into ``out_dir``:
    ``images/<domain>/<class>/<file>`` (hard links, else copies), ``train.tsv`` / ``test.tsv``
    (columns ``filepath``, ``title``, ``label``, ``domain``; one row per caption) and
    ``shards/{train,test}-NNNNNN.tar``, with the domain folder's split; ``manifest.json`` counts
    the images per split and domain and the listed files that were missing (skipped). Returns ``out_dir``."""
    from sklearn.datasets import load_digits

    root = Path(domains_dir).expanduser()
    chosen = present_domains(root, domains)

    def build(tmp: Path) -> None:
        digits = load_digits()
        strokes = stroke_words(digits.images, digits.target)
        counts: dict[str, dict[str, int]] = {}
        missing: list[str] = []
        for split, rows in _domain_split_rows(root, chosen).items():
            samples, per_domain = [], {d: 0 for d in chosen}
            with open(tmp / f"{split}.tsv", "w", newline="", encoding="utf-8") as fh:
                writer = csv.writer(fh, delimiter="\t")
                writer.writerow(["filepath", "title", "label", "domain"])
                for domain, rel, label in rows:
                    source, target = root / rel, tmp / "images" / rel
                    if not source.is_file():
                        missing.append(rel)
                        continue
                    target.parent.mkdir(parents=True, exist_ok=True)
                    try:
                        os.link(source, target)
                    except OSError:  # another file system, no hard links
                        shutil.copyfile(source, target)
                    match = _DOMAIN_FILE.search(rel)
                    index = int(match.group(1)) if match else -1
                    stroke = (
                        strokes[index] if 0 <= index < len(strokes) and int(digits.target[index]) == label else None
                    )
                    caps = domain_digit_captions(label, stroke, domain)
                    for caption in caps:
                        writer.writerow([f"images/{rel}", caption, label, domain])
                    key = rel.rsplit(".", 1)[0].replace("/", "_")
                    samples.append(ShardSample(key, source.read_bytes(), caps, label))
                    per_domain[domain] += 1
            if not samples:
                raise ValueError(f"digit-domain folder '{root}': no image of the {split} split exists")
            write_shards(samples, tmp / "shards", samples_per_shard, prefix=split)
            counts[split] = per_domain
        if missing:
            warnings.warn(
                f"digit-domain folder '{root}': skipped {len(missing)} listed image(s) that do not exist, "
                f"first: {missing[0]}",
                stacklevel=3,
            )
        atomic_write_json(
            tmp / "manifest.json",
            {"domains_dir": str(root), "domains": chosen, "images": counts, "missing_images": len(missing)},
        )

    return _build_folder(Path(out_dir).expanduser(), build)


@ADAPTERS.register("digit_captions")
class DigitCaptionsAdapter(PairAdapter):
    """The embedded image-text default (module docstring): writes the rendered digits with captions
    to ``cache_dir`` once, then reads them with ``pairs_csv`` (``format: csv``) or ``pairs_wds``
    (``format: wds``). With ``domains_dir`` the captioned digit-domain images (their own train / test
    split) are written and read the same way. ``class_names`` are the number words (zero-shot prompts)."""

    class Options(PairOptions):
        format: Literal["csv", "wds"] = "csv"
        cache_dir: str = Field(DEFAULT_CACHE, description="where the rendered set is written (once)")
        render_size: int = Field(32, ge=8, le=256, description="side of the written PNGs")
        domains_dir: str | None = Field(
            None, description="a `mvapp data synth-domains` folder: caption its images instead"
        )
        domains: list[str] | None = Field(
            None, description="with domains_dir: these domains only (default: all present)"
        )

    def __init__(self, options: Options) -> None:
        super().__init__(options)
        common = {
            "load_size": options.load_size,
            "test_fraction": options.test_fraction,
            "max_bad_fraction": options.max_bad_fraction,
        }
        if options.domains_dir is not None:
            chosen = present_domains(options.domains_dir, options.domains)
            folder = (
                Path(options.cache_dir).expanduser() / f"domains-{domains_fingerprint(options.domains_dir, chosen)}"
            )
            write_domain_digit_pairs(options.domains_dir, folder, chosen)
            csv_files = {"csv": str(folder / "train.tsv"), "test_csv": str(folder / "test.tsv")}
            shards = {
                "shards": str(folder / "shards" / "train-*.tar"),
                "test_shards": str(folder / "shards" / "test-*.tar"),
            }
        else:
            if options.domains is not None:
                raise ValueError("data.options.domains needs data.options.domains_dir (a synth-domains folder)")
            folder = Path(options.cache_dir).expanduser() / f"size{options.render_size}"
            write_digit_pairs(folder, options.render_size)
            csv_files = {"csv": str(folder / "pairs.tsv")}
            shards = {"shards": str(folder / "shards" / "*.tar")}
        if options.format == "csv":
            inner: PairAdapter = PairsCSVAdapter(PairsCSVAdapter.Options(label_key="label", **csv_files, **common))
            if inner.class_names != [str(d) for d in range(10)]:
                raise ValueError(f"{csv_files['csv']}: label column holds {inner.class_names}, expected 0..9")
        else:
            inner = PairsWebDatasetAdapter(
                PairsWebDatasetAdapter.Options(class_names=list(DIGIT_WORDS), **shards, **common)
            )
        self.class_names = list(DIGIT_WORDS)  # both readers give labels 0..9 in digit order
        self.report = inner.report
        self._split_cache = {"train": inner.split("train"), "test": inner.split("test")}
        self.folder = folder


__all__ = [
    "DIGIT_WORDS",
    "DOMAIN_RENDERINGS",
    "DigitCaptionsAdapter",
    "digit_captions",
    "domain_digit_captions",
    "present_domains",
    "render_digits",
    "stroke_words",
    "write_digit_pairs",
    "write_domain_digit_pairs",
]
