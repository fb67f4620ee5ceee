"""Batched image augmentation with per-sample randomness (the papers' SimCLR / BYOL stacks).

A ``torchvision.transforms.v2`` transform applied to a batch tensor draws ONE parameter set for
the whole batch, which would make every item's view identical up to content - useless for
contrastive learning. Here every sample draws its own parameters from a ``torch.Generator``
(drawn and kept on the generator's device: a CUDA generator keeps them on the GPU, a CPU generator
makes the views independent of the images' device) and the ops are applied batched on the images'
device, each matching ``torchvision.transforms.v2.functional`` on a single sample. Off the CPU nothing
reads a parameter back into Python (per-sample choices are ``torch.where`` masks over the whole batch,
:func:`gathers_rows`), so building a view on a GPU never waits for it:

=================  ==========================================================================
op                 batched implementation
=================  ==========================================================================
resized crop       per-sample boxes, bilinear (the papers use bicubic): ``grid_sample`` on a
                   per-sample grid (= ``TF.resized_crop(antialias=False)``) when enlarging;
                   ``torchvision.ops.roi_align`` (box-filter antialias) when shrinking
horizontal flip    mask + ``flip(-1)``
color jitter       per-sample brightness / contrast / saturation factors and hue shift, in a
                   per-sample random order (like ``ColorJitter``); hue via batched RGB<->HSV
grayscale          mask + ITU-R 601 luma (``rgb_to_grayscale``)
gaussian blur      grouped ``conv2d`` with per-sample separable kernels, reflect padding
solarize           mask + ``where(x >= 0.5, 1 - x, x)``
normalize          ImageNet mean (0.485, 0.456, 0.406), std (0.229, 0.224, 0.225)
=================  ==========================================================================

Stacks (:data:`STACKS`): ``simclr`` (poly-view App. F.1, color_jitter_strength 1, = M3G
Pseudocode 1 ``simclr``), ``byol_global1`` / ``byol_global2`` (M3G Pseudocode 1) and ``test``
(resize to ``image_size / 0.875``, center crop, normalize). The blur kernel is 23 px at 224 px
and scales with the image size: ``odd(0.1 * image_size)`` (3 px at 32 px).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, fields, replace

import torch
import torch.nn.functional as F

from ...registry import Registry

IMAGENET_MEAN: tuple[float, float, float] = (0.485, 0.456, 0.406)
IMAGENET_STD: tuple[float, float, float] = (0.229, 0.224, 0.225)
#: Luma weights of ``torchvision``'s ``rgb_to_grayscale``.
GRAY_WEIGHTS: tuple[float, float, float] = (0.2989, 0.587, 0.114)
#: Number of color-jitter ops (brightness, contrast, saturation, hue).
N_JITTER_OPS: int = 4


@dataclass(frozen=True)
class StackSpec:
    """Probabilities and strengths of one augmentation stack (torchvision semantics)."""

    crop_scale: tuple[float, float] = (0.08, 1.0)
    crop_ratio: tuple[float, float] = (3 / 4, 4 / 3)
    flip_p: float = 0.5
    jitter_p: float = 0.8
    brightness: float = 0.4
    contrast: float = 0.4
    saturation: float = 0.2
    hue: float = 0.1
    grayscale_p: float = 0.2
    blur_p: float = 0.0
    blur_sigma: tuple[float, float] = (0.1, 2.0)
    solarize_p: float = 0.0
    solarize_threshold: float = 0.5
    train: bool = True


STACKS: Registry[StackSpec] = Registry("augmentation stack")
STACKS.register("byol_global1")(StackSpec(blur_p=1.0, solarize_p=0.0))
STACKS.register("byol_global2")(StackSpec(blur_p=0.1, solarize_p=0.2))
STACKS.register("simclr")(StackSpec(brightness=0.8, contrast=0.8, saturation=0.8, hue=0.2, blur_p=0.5))
STACKS.register("test")(StackSpec(train=False))
#: Small images such as 32-px digits: crops keep at least half the image, no mirror flip (digits are
#: not mirror-symmetric), no hue shift; what the digit-domain adaptation targets use by default.
STACKS.register("mild")(StackSpec(crop_scale=(0.5, 1.0), flip_p=0.0, hue=0.0))

#: M3G's maximal image stack (Sec. 4 / App. A); views use ``M3G_STACKS[:k]``.
M3G_STACKS: tuple[str, ...] = ("byol_global1", "byol_global2", "simclr", "byol_global1")
#: Test stack: resize to ``image_size / TEST_CROP_FRACTION`` then center-crop ``image_size``.
TEST_CROP_FRACTION: float = 0.875


def blur_kernel_size(image_size: int) -> int:
    """Odd blur kernel ~10% of the image side (BYOL: 23 at 224)."""
    return max(3, int(0.1 * image_size) // 2 * 2 + 1)


@dataclass
class AugmentParams:
    """Per-sample parameters of one stack for n images (on the generator's device).

    boxes ``(n, 4)`` crop x1, y1, x2, y2 in pixels; flip, jitter, gray, blur, solarize ``(n,)``
    bool masks; brightness, contrast, saturation ``(n,)`` factors; hue ``(n,)`` shift in
    [-0.5, 0.5]; order ``(n, 4)`` permutation of the jitter ops; sigma ``(n,)`` blur sigmas.
    """

    boxes: torch.Tensor
    flip: torch.Tensor
    jitter: torch.Tensor
    brightness: torch.Tensor
    contrast: torch.Tensor
    saturation: torch.Tensor
    hue: torch.Tensor
    order: torch.Tensor
    gray: torch.Tensor
    blur: torch.Tensor
    sigma: torch.Tensor
    solarize: torch.Tensor

    def select(self, index: int) -> AugmentParams:
        """Parameters of sample ``index`` only (n = 1), for tests and debugging."""
        return AugmentParams(**{f.name: getattr(self, f.name)[index : index + 1] for f in fields(self)})


def _rand(*shape: int, generator: torch.Generator | None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """U[0, 1) numbers from ``generator``, drawn and left on its device (CPU or CUDA; the CPU without one)."""
    device = generator.device if generator is not None else torch.device("cpu")
    return torch.rand(*shape, generator=generator, device=device, dtype=dtype)


def _uniform(n: int, low: float, high: float, generator: torch.Generator | None) -> torch.Tensor:
    return _rand(n, generator=generator, dtype=torch.float64) * (high - low) + low


def _bernoulli(n: int, p: float, generator: torch.Generator | None) -> torch.Tensor:
    return _rand(n, generator=generator) < p


def sample_crop_boxes(
    n: int,
    height: int,
    width: int,
    scale: tuple[float, float],
    ratio: tuple[float, float],
    generator: torch.Generator | None,
    attempts: int = 10,
) -> torch.Tensor:
    """Per-sample ``RandomResizedCrop`` boxes ``(n, 4)`` (x1, y1, x2, y2), torchvision's algorithm.

    Up to ``attempts`` draws of area/log-aspect per sample; the first that fits wins; samples
    without a fit get torchvision's fallback (central crop with the aspect clamped to ``ratio``).
    """
    area = height * width
    target_area = area * _uniform(n * attempts, scale[0], scale[1], generator).view(n, attempts)
    log_ratio = _uniform(n * attempts, math.log(ratio[0]), math.log(ratio[1]), generator).view(n, attempts)
    aspect = torch.exp(log_ratio)
    w = torch.sqrt(target_area * aspect).round()
    h = torch.sqrt(target_area / aspect).round()
    fits = (w > 0) & (h > 0) & (w <= width) & (h <= height)
    first = torch.where(fits.any(1), fits.float().argmax(1), torch.zeros_like(fits[:, 0], dtype=torch.long))
    w = w.gather(1, first[:, None]).squeeze(1)
    h = h.gather(1, first[:, None]).squeeze(1)
    # fallback (no fitting attempt): whole image with aspect clamped to ratio, centered
    in_ratio = width / height
    if in_ratio < min(ratio):
        fw, fh = width, int(round(width / min(ratio)))
    elif in_ratio > max(ratio):
        fw, fh = int(round(height * max(ratio))), height
    else:
        fw, fh = width, height
    ok = fits.any(1)
    w = torch.where(ok, w, torch.full_like(w, fw))
    h = torch.where(ok, h, torch.full_like(h, fh))
    # integer offsets like torch.randint(0, H - h + 1): floor(u * (H - h + 1))
    top = torch.floor(_rand(n, generator=generator, dtype=torch.float64) * (height - h + 1))
    left = torch.floor(_rand(n, generator=generator, dtype=torch.float64) * (width - w + 1))
    top = torch.where(ok, top, torch.full_like(top, (height - fh) // 2))
    left = torch.where(ok, left, torch.full_like(left, (width - fw) // 2))
    return torch.stack([left, top, left + w, top + h], dim=1).float()


def sample_params(spec: StackSpec, n: int, height: int, width: int, generator: torch.Generator | None) -> AugmentParams:
    """Draw every per-sample parameter of ``spec`` for ``n`` images of ``height x width``.

    All parameters are always drawn (even for ops with p = 0) so that the random stream does not
    depend on probabilities; masks decide what is applied.
    """
    boxes = sample_crop_boxes(n, height, width, spec.crop_scale, spec.crop_ratio, generator)
    flip = _bernoulli(n, spec.flip_p, generator)
    jitter = _bernoulli(n, spec.jitter_p, generator)
    brightness = _uniform(n, max(0.0, 1 - spec.brightness), 1 + spec.brightness, generator).float()
    contrast = _uniform(n, max(0.0, 1 - spec.contrast), 1 + spec.contrast, generator).float()
    saturation = _uniform(n, max(0.0, 1 - spec.saturation), 1 + spec.saturation, generator).float()
    hue = _uniform(n, -spec.hue, spec.hue, generator).float()
    order = torch.argsort(_rand(n, N_JITTER_OPS, generator=generator), dim=1)
    gray = _bernoulli(n, spec.grayscale_p, generator)
    blur = _bernoulli(n, spec.blur_p, generator)
    sigma = _uniform(n, spec.blur_sigma[0], spec.blur_sigma[1], generator).float()
    solarize = _bernoulli(n, spec.solarize_p, generator)
    return AugmentParams(boxes, flip, jitter, brightness, contrast, saturation, hue, order, gray, blur, sigma, solarize)


# --------------------------------------------------------------------------------------------
# batched ops on float images (n, 3, H, W) in [0, 1]; factors are (n,) tensors
# --------------------------------------------------------------------------------------------
def _per_sample(values: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return values.to(device=x.device, dtype=x.dtype).view(-1, 1, 1, 1)


def _where(mask: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.where(mask.to(a.device).view(-1, 1, 1, 1), a, b)


def grayscale(x: torch.Tensor) -> torch.Tensor:
    """Luma ``(n, 1, H, W)`` of RGB ``x`` (same weights as ``TF.rgb_to_grayscale``)."""
    r, g, b = x.unbind(dim=-3)
    return (r * GRAY_WEIGHTS[0] + g * GRAY_WEIGHTS[1] + b * GRAY_WEIGHTS[2]).unsqueeze(-3)


def _blend(x: torch.Tensor, other: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    f = _per_sample(factor, x)
    return (f * x + (1 - f) * other).clamp(0, 1)


def adjust_brightness(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    return (x * _per_sample(factor, x)).clamp(0, 1)


def adjust_contrast(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    return _blend(x, grayscale(x).mean(dim=(-3, -2, -1), keepdim=True), factor)


def adjust_saturation(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    return _blend(x, grayscale(x), factor)


def rgb_to_hsv(x: torch.Tensor) -> torch.Tensor:
    """Batched RGB -> HSV (all channels in [0, 1]), same formulas as torchvision."""
    r, g, b = x.unbind(dim=-3)
    maxc, _ = x.max(dim=-3)
    minc = x.min(dim=-3).values
    eqc = maxc == minc
    cr = maxc - minc
    ones = torch.ones_like(maxc)
    s = cr / torch.where(eqc, ones, maxc)
    cr_divisor = torch.where(eqc, ones, cr)
    rc = (maxc - r) / cr_divisor
    gc = (maxc - g) / cr_divisor
    bc = (maxc - b) / cr_divisor
    hr = (maxc == r) * (bc - gc)
    hg = ((maxc == g) & (maxc != r)) * (2.0 + rc - bc)
    hb = ((maxc != g) & (maxc != r)) * (4.0 + gc - rc)
    h = torch.fmod((hr + hg + hb) / 6.0 + 1.0, 1.0)
    return torch.stack((h, s, maxc), dim=-3)


def hsv_to_rgb(x: torch.Tensor) -> torch.Tensor:
    """Batched HSV -> RGB, inverse of :func:`rgb_to_hsv` (closed form, no per-sector gather).

    Channel ``c = v - v * s * clamp(min(m, 4 - m), 0, 1)`` with ``m = (o + 6 h) mod 6`` and
    offset ``o`` = 5, 3, 1 for R, G, B - algebraically the six-sector formula torchvision uses.
    """
    h, s, v = x.unbind(dim=-3)
    h6 = (h * 6.0).unsqueeze(-3)
    offsets = torch.arange(5.0, 0.0, -2.0, device=x.device, dtype=x.dtype).view(3, 1, 1)  # 5, 3, 1: made on the device
    m = torch.remainder(offsets + h6, 6.0)
    ramp = torch.minimum(m, 4.0 - m).clamp(0.0, 1.0)
    v, s = v.unsqueeze(-3), s.unsqueeze(-3)
    return v - v * s * ramp


def adjust_hue(x: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    hsv = rgb_to_hsv(x)
    h = torch.remainder(hsv[:, 0] + _per_sample(shift, x)[:, 0], 1.0)
    return hsv_to_rgb(torch.stack((h, hsv[:, 1], hsv[:, 2]), dim=1))


def solarize(x: torch.Tensor, threshold: float) -> torch.Tensor:
    return torch.where(x >= threshold, 1.0 - x, x)


def gaussian_blur(x: torch.Tensor, kernel_size: int, sigma: torch.Tensor) -> torch.Tensor:
    """Blur every image with its own sigma: separable kernels via grouped conv, reflect padding."""
    n, c, h, w = x.shape
    half = (kernel_size - 1) * 0.5
    grid = torch.linspace(-half, half, kernel_size, device=x.device, dtype=x.dtype)
    s = sigma.to(device=x.device, dtype=x.dtype).view(n, 1)
    kernel = torch.softmax(-0.5 * (grid / s) ** 2, dim=1)  # (n, K) normalized gaussians
    kernel = (
        kernel[:, None].expand(n, c, kernel_size).reshape(n * c, kernel_size)
    )  # (n*c, K): image i's kernel per channel
    pad = kernel_size // 2
    y = F.pad(x.reshape(1, n * c, h, w), (pad, pad, pad, pad), mode="reflect")
    y = F.conv2d(y, kernel.view(n * c, 1, 1, kernel_size), groups=n * c)
    y = F.conv2d(y, kernel.view(n * c, 1, kernel_size, 1), groups=n * c)
    return y.view(n, c, h, w)


def _crop_grid(boxes: torch.Tensor, size: int, height: int, width: int) -> torch.Tensor:
    """``grid_sample`` grid ``(n, size, size, 2)`` reproducing ``TF.resized_crop`` (bilinear, no antialias).

    Output pixel ``j`` samples the box at ``left + (j + 0.5) * w / size - 0.5``, clamped to the
    box's first/last pixel - the coordinates ``F.interpolate(align_corners=False)`` uses on the crop.
    """
    left, top, right, bottom = boxes.unbind(dim=1)
    steps = torch.arange(size, dtype=boxes.dtype, device=boxes.device) + 0.5

    def coords(start: torch.Tensor, stop: torch.Tensor, extent: int) -> torch.Tensor:
        pos = start[:, None] + steps[None] * ((stop - start) / size)[:, None] - 0.5
        pos = torch.maximum(torch.minimum(pos, (stop - 1)[:, None]), start[:, None])
        return pos * (2.0 / max(extent - 1, 1)) - 1.0  # align_corners=True normalization

    gx, gy = coords(left, right, width), coords(top, bottom, height)  # (n, size) each
    n = boxes.shape[0]
    return torch.stack((gx[:, None, :].expand(n, size, size), gy[:, :, None].expand(n, size, size)), dim=-1)


def resized_crop(x: torch.Tensor, boxes: torch.Tensor, size: int) -> torch.Tensor:
    """Crop ``boxes (n, 4)`` (x1, y1, x2, y2 pixels) of each image ``(n, C, H, W)`` -> ``(n, C, size, size)``.

    Bilinear. Boxes not larger than ``size`` (enlarging, the usual case for small images) use
    ``grid_sample`` and equal ``TF.resized_crop(..., antialias=False)``. Boxes larger than ``size``
    in either side (shrinking) use ``roi_align`` with ``sampling_ratio=0``, which averages
    ``ceil(box / size)^2`` samples per output pixel - a box-filter antialias (torchvision's
    default antialias uses a triangle filter; close, not identical); the shrinking boxes are picked as
    :func:`gathers_rows` says. Images no larger than ``size`` cannot have a shrinking box.
    """
    n, _, height, width = x.shape
    boxes = boxes.to(device=x.device, dtype=x.dtype)
    out = F.grid_sample(
        x, _crop_grid(boxes, size, height, width), mode="bilinear", padding_mode="border", align_corners=True
    )
    if height <= size and width <= size:
        return out
    from torchvision.ops import roi_align  # torchvision (and torch._dynamo with it) is imported when needed only

    shrink = ((boxes[:, 2] - boxes[:, 0]) > size) | ((boxes[:, 3] - boxes[:, 1]) > size)
    if gathers_rows(x.device):
        rows = torch.nonzero(shrink).flatten()
        if len(rows):
            rois = torch.cat([torch.arange(len(rows), device=x.device, dtype=x.dtype)[:, None], boxes[rows]], dim=1)
            out[rows] = roi_align(
                x[rows], rois, output_size=(size, size), spatial_scale=1.0, sampling_ratio=0, aligned=True
            )
        return out
    rois = torch.cat([torch.arange(n, device=x.device, dtype=x.dtype)[:, None], boxes], dim=1)
    shrunk = roi_align(x, rois, output_size=(size, size), spatial_scale=1.0, sampling_ratio=0, aligned=True)
    return _where(shrink, shrunk, out)


def gathers_rows(device: torch.device) -> bool:
    """How per-sample choices are applied on ``device``: on the CPU the chosen rows are gathered and
    the op runs on them only (reading which rows costs nothing there); on any other device the op runs
    on every row and ``torch.where`` keeps it where chosen, so nothing is read back to the host. Both
    give the same values (tests/test_augment.py)."""
    return device.type == "cpu"


def _color_jitter(x: torch.Tensor, p: AugmentParams) -> torch.Tensor:
    """Brightness / contrast / saturation / hue in each sample's own random order (samples with
    ``jitter`` false unchanged); each op is per-image, applied to the samples that take it at each of
    the four slots (:func:`gathers_rows`)."""
    ops = (
        lambda v, rows: adjust_brightness(v, p.brightness[rows]),
        lambda v, rows: adjust_contrast(v, p.contrast[rows]),
        lambda v, rows: adjust_saturation(v, p.saturation[rows]),
        lambda v, rows: adjust_hue(v, p.hue[rows]),
    )
    active = p.jitter.to(x.device)
    order = p.order.to(x.device)
    gather = gathers_rows(x.device)
    out = x.clone() if gather else x
    for slot in range(N_JITTER_OPS):
        applied = out
        for op_id, op in enumerate(ops):
            chosen = active & (order[:, slot] == op_id)
            if gather:  # rows of one slot are disjoint: each op reads rows no other op of the slot wrote
                rows = torch.nonzero(chosen).flatten()
                if len(rows):
                    out[rows] = op(out[rows], rows.to(p.brightness.device))
            else:
                applied = _where(chosen, op(out, slice(None)), applied)
        out = out if gather else applied
    return out


@functools.cache
def _per_channel(values: tuple[float, ...], device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """``(C, 1, 1)`` constants on ``device``, made once per device and dtype (a tensor built from a Python
    list on a GPU is a blocking host-to-device copy)."""
    return torch.tensor(values, dtype=dtype).to(device).view(-1, 1, 1)


def normalize(x: torch.Tensor) -> torch.Tensor:
    """ImageNet mean/std normalization of ``(n, 3, H, W)`` floats in [0, 1]: ``(x - mean) / std``, the
    values of ``TF.normalize`` with the constants cached on the device."""
    return (x - _per_channel(IMAGENET_MEAN, x.device, x.dtype)) / _per_channel(IMAGENET_STD, x.device, x.dtype)


def to_float(images: torch.Tensor) -> torch.Tensor:
    """uint8 ``(n, 3, H, W)`` -> float32 in [0, 1] (floats pass through)."""
    return images.float().div_(255.0) if images.dtype == torch.uint8 else images.float()


def apply_params(
    x: torch.Tensor, spec: StackSpec, params: AugmentParams, image_size: int, normalize_output: bool = True
) -> torch.Tensor:
    """Apply ``params`` of ``spec`` to float images ``(n, 3, H, W)`` in [0, 1] -> ``(n, 3, S, S)``.

    Per-sample masks select what each image gets; an op whose probability in ``spec`` is 0 (so its
    mask is all false) is skipped, decided from ``spec`` without reading the masks."""
    x = resized_crop(x, params.boxes, image_size)
    x = _where(params.flip, x.flip(-1), x)
    if spec.jitter_p > 0:
        x = _color_jitter(x, params)
    x = _where(params.gray, grayscale(x).expand_as(x), x)
    if spec.blur_p > 0:
        x = _where(params.blur, gaussian_blur(x, blur_kernel_size(image_size), params.sigma), x)
    if spec.solarize_p > 0:
        x = _where(params.solarize, solarize(x, spec.solarize_threshold), x)
    return normalize(x) if normalize_output else x


def test_transform(images: torch.Tensor, image_size: int, normalize_output: bool = True) -> torch.Tensor:
    """Deterministic eval view: resize to ``image_size / 0.875``, center crop, normalize."""
    import torchvision.transforms.v2.functional as TF  # imported when needed: seconds per process otherwise

    x = to_float(images)
    resize_to = int(round(image_size / TEST_CROP_FRACTION))
    x = TF.resize(x, [resize_to, resize_to], antialias=True)
    x = TF.center_crop(x, [image_size, image_size])
    return normalize(x) if normalize_output else x


def customized(
    spec: StackSpec, crop_scale: tuple[float, float] | None = None, jitter_strength: float = 1.0
) -> StackSpec:
    """``spec`` with another crop scale range and/or color-jitter strengths scaled by ``jitter_strength``
    (poly-view App. F.3 varies both; 1.0 = the paper's stack)."""
    return replace(
        spec,
        crop_scale=tuple(crop_scale) if crop_scale is not None else spec.crop_scale,
        brightness=spec.brightness * jitter_strength,
        contrast=spec.contrast * jitter_strength,
        saturation=spec.saturation * jitter_strength,
        hue=min(0.5, spec.hue * jitter_strength),
    )


def augment(
    images: torch.Tensor, stack: str | StackSpec, image_size: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """One view of every image: ``(n, 3, H, W)`` uint8/float -> normalized ``(n, 3, S, S)`` float32.

    ``stack`` is a name in :data:`STACKS` (or a :class:`StackSpec`); each sample draws its own
    parameters from ``generator``.
    """
    spec = STACKS.get(stack) if isinstance(stack, str) else stack
    if not spec.train:
        return test_transform(images, image_size)
    x = to_float(images)
    params = sample_params(spec, x.shape[0], x.shape[-2], x.shape[-1], generator)
    return apply_params(x, spec, params, image_size)


__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "M3G_STACKS",
    "STACKS",
    "AugmentParams",
    "StackSpec",
    "apply_params",
    "augment",
    "blur_kernel_size",
    "customized",
    "sample_params",
    "test_transform",
]
