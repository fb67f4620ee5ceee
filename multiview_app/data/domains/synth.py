"""``mvapp data synth-domains``: six image domains of scikit-learn's real handwritten digits.

Writes a DomainNet-layout folder ``<out>/<domain>/<class>/<i>.jpg`` plus the split files
``<out>/<domain>_train.txt`` / ``<out>/<domain>_test.txt`` (lines ``domain/class/file.jpg label``),
so that the ``domainnet`` adapter reads it exactly like the real data.

Every domain renders the same 1,797 digits (10 classes) differently; the train/test split is by
digit (one stratified split shared by all domains), so a digit in the held-out domain's test split is
in no domain's train split. Domains (:data:`DIGIT_DOMAINS`):

- ``clean``: dark strokes on white paper;
- ``inverted``: white strokes on black (scikit-learn's own polarity);
- ``sketch``: the digit's outline only (gradient magnitude), thin dark lines on light paper;
- ``texture``: thick (dilated) strokes on a random striped / noisy texture;
- ``color``: random foreground and background colours per image plus Gaussian noise;
- ``warped``: random rotation (+-35 degrees) and a smooth elastic deformation.

Each image's randomness comes from ``numpy.random.default_rng([seed, domain id, digit index])``,
so the folder is a deterministic function of ``seed`` (byte-identical JPEGs for one Pillow version).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from scipy import ndimage

from ..catalog import get_card
from ..images.adapters import stratified_split

DIGIT_DOMAINS: tuple[str, ...] = tuple(get_card("digit-domains").domains)  # from datasets/digit-domains.yaml
#: Side of the written JPEGs (the adapter resizes to its ``load_size``).
RENDER_SIZE: int = 40
JPEG_QUALITY: int = 92


def _upsample(digit: np.ndarray, size: int) -> np.ndarray:
    """8x8 digit (0..16) -> ``(size, size)`` float in [0, 1], cubic zoom with a 2-px-ish margin."""
    inner = size - size // 5
    zoomed = ndimage.zoom(digit / 16.0, inner / digit.shape[0], order=3)
    out = np.zeros((size, size))
    off = (size - zoomed.shape[0]) // 2
    out[off : off + zoomed.shape[0], off : off + zoomed.shape[1]] = zoomed
    return np.clip(out, 0.0, 1.0)


def _gray(ink: np.ndarray, fg: float, bg: float) -> np.ndarray:
    value = bg + (fg - bg) * ink
    return np.repeat(value[..., None], 3, axis=2)


def render_clean(ink: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return _gray(ink, 0.05, 0.97)


def render_inverted(ink: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return _gray(ink, 1.0, 0.0)


def render_sketch(ink: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    smooth = ndimage.gaussian_filter(ink, 0.6)
    edges = np.hypot(ndimage.sobel(smooth, 0), ndimage.sobel(smooth, 1))
    edges = np.clip(edges / (edges.max() + 1e-8) * 1.6, 0.0, 1.0)
    paper = 0.92 + 0.05 * rng.standard_normal(ink.shape).clip(-1, 1)
    return _gray(edges, 0.15, 1.0) * (paper[..., None] / 0.97)


def render_texture(ink: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    thick = ndimage.grey_dilation(ink, size=(4, 4))
    yy, xx = np.mgrid[: ink.shape[0], : ink.shape[1]]
    angle, period = rng.uniform(0, np.pi), rng.uniform(3.0, 7.0)
    stripes = 0.5 + 0.5 * np.sin((xx * np.cos(angle) + yy * np.sin(angle)) * 2 * np.pi / period)
    texture = 0.35 + 0.35 * stripes + 0.15 * rng.standard_normal(ink.shape)
    tint = rng.uniform(0.6, 1.0, size=3)
    background = np.clip(texture[..., None] * tint, 0.0, 1.0)
    ink_color = rng.uniform(0.0, 0.25, size=3)
    alpha = np.clip(thick * 1.5, 0.0, 1.0)[..., None]
    return background * (1 - alpha) + ink_color * alpha


def render_color(ink: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    fg = rng.uniform(0.0, 1.0, size=3)
    bg = rng.uniform(0.0, 1.0, size=3)
    while np.abs(fg - bg).sum() < 0.9:  # keep the digit visible
        bg = rng.uniform(0.0, 1.0, size=3)
    image = bg + (fg - bg) * ink[..., None]
    return image + 0.12 * rng.standard_normal(image.shape)


def render_warped(ink: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    rotated = ndimage.rotate(ink, rng.uniform(-35, 35), reshape=False, order=1, mode="constant")
    size = ink.shape[0]
    dx = ndimage.gaussian_filter(rng.uniform(-1, 1, (size, size)), 4.0) * size * 0.9
    dy = ndimage.gaussian_filter(rng.uniform(-1, 1, (size, size)), 4.0) * size * 0.9
    yy, xx = np.mgrid[:size, :size]
    warped = ndimage.map_coordinates(rotated, [yy + dy, xx + dx], order=1, mode="constant")
    return _gray(warped, 0.1, 0.85)


RENDERERS: dict[str, Callable[[np.ndarray, np.random.Generator], np.ndarray]] = {
    "clean": render_clean,
    "inverted": render_inverted,
    "sketch": render_sketch,
    "texture": render_texture,
    "color": render_color,
    "warped": render_warped,
}


def render_digit(digit: np.ndarray, domain: str, rng: np.random.Generator, size: int = RENDER_SIZE) -> np.ndarray:
    """One 8x8 digit (values 0..16) rendered in ``domain`` -> uint8 ``(size, size, 3)``."""
    if domain not in RENDERERS:
        raise ValueError(f"unknown digit domain '{domain}'; valid: {', '.join(RENDERERS)}")
    image = RENDERERS[domain](_upsample(digit, size), rng)
    return (np.clip(image, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)


def synth_domains(
    out: str | Path,
    *,
    seed: int = 0,
    domains: tuple[str, ...] = DIGIT_DOMAINS,
    test_fraction: float = 0.2,
    size: int = RENDER_SIZE,
    limit: int | None = None,
) -> dict[str, int]:
    """Write the digit domains to ``out`` (see module docstring); returns ``{domain: images}``.

    ``limit`` keeps the first ``limit`` digits (tiny fixtures for tests). Existing files are
    overwritten; split files are written atomically after the images.
    """
    from PIL import Image
    from sklearn.datasets import load_digits

    from ...console import progress
    from ...fileio import atomic_write_text

    unknown = [d for d in domains if d not in RENDERERS]
    if unknown:
        raise ValueError(f"unknown digit domain(s) {', '.join(unknown)}; valid: {', '.join(RENDERERS)}")
    digits = load_digits()
    images, labels = digits.images, digits.target
    if limit is not None:
        images, labels = images[:limit], labels[:limit]
    _, test_idx = stratified_split(labels, test_fraction, seed=seed)
    in_test = np.zeros(len(labels), dtype=bool)
    in_test[test_idx] = True
    out = Path(out)
    counts: dict[str, int] = {}
    domain_ids = {name: j for j, name in enumerate(RENDERERS)}  # stable whatever subset is written
    for domain in domains:
        lines: dict[str, list[str]] = {"train": [], "test": []}
        for i in progress(range(len(labels)), desc=f"synth {domain}", leave=False):
            label = int(labels[i])
            rel = f"{domain}/{label}/{domain}_{i:04d}.jpg"
            path = out / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            rng = np.random.default_rng([seed, domain_ids[domain], i])
            Image.fromarray(render_digit(images[i], domain, rng, size)).save(path, quality=JPEG_QUALITY)
            lines["test" if in_test[i] else "train"].append(f"{rel} {label}")
        for split, rows in lines.items():
            atomic_write_text(out / f"{domain}_{split}.txt", "\n".join(rows) + "\n")
        counts[domain] = len(labels)
    return counts


__all__ = ["DIGIT_DOMAINS", "RENDERERS", "render_digit", "synth_domains"]
