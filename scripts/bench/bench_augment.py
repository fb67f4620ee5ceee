"""Benchmark: batched per-sample augmentation vs a per-sample torchvision.transforms.v2 loop.

Usage: ``python scripts/bench/bench_augment.py [--n 128] [--size 32] [--repeats 5] [--threads 1]``

Both paths produce one view per image with independent random parameters (the reference is
the only way torchvision v2 gives per-sample randomness: one ``Compose`` call per image).
Prints a markdown table (ms per batch, images/s, ratio vs the reference), plus the share of each
op inside the batched path, and the time of a small_cnn forward+backward on the same views for
context.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
import torchvision.transforms.v2 as T
from common import time_call
from torch.utils.data import default_collate

from multiview_app.data.adapters import build_adapter
from multiview_app.data.images import augment as A
from multiview_app.models import build_model


def timeit(fn: Callable[[], object], repeats: int) -> float:
    """Median seconds of ``fn`` over ``repeats`` runs (after one warm-up)."""
    return time_call(fn, repeat=repeats, warmup=1).median


def torchvision_stack(stack: str, size: int) -> T.Compose:
    """The same stack as torchvision v2 transforms (bilinear crop, like the batched path)."""
    s = A.STACKS.get(stack)
    k = A.blur_kernel_size(size)
    ops: list[T.Transform] = [
        T.RandomResizedCrop(size, scale=s.crop_scale, ratio=s.crop_ratio, antialias=False),
        T.RandomHorizontalFlip(s.flip_p),
        T.RandomApply([T.ColorJitter(s.brightness, s.contrast, s.saturation, s.hue)], p=s.jitter_p),
        T.RandomGrayscale(s.grayscale_p),
        T.RandomApply([T.GaussianBlur(k, sigma=s.blur_sigma)], p=s.blur_p),
        T.RandomSolarize(s.solarize_threshold, p=s.solarize_p),
        T.Normalize(list(A.IMAGENET_MEAN), list(A.IMAGENET_STD)),
    ]
    return T.Compose(ops)


def op_shares(x: torch.Tensor, stack: str, size: int, repeats: int) -> dict[str, float]:
    """Seconds per op of the batched path, with every op applied to the whole batch."""
    spec = A.STACKS.get(stack)
    p = A.sample_params(spec, x.shape[0], x.shape[-2], x.shape[-1], torch.Generator().manual_seed(0))
    p.jitter[:] = True
    cropped = A.resized_crop(x, p.boxes, size)
    return {
        "sample params": timeit(lambda: A.sample_params(spec, x.shape[0], x.shape[-2], x.shape[-1], None), repeats),
        "resized crop (grid_sample / roi_align)": timeit(lambda: A.resized_crop(x, p.boxes, size), repeats),
        "color jitter (4 ops)": timeit(lambda: A._color_jitter(cropped, p), repeats),
        "  of which hue": timeit(lambda: A.adjust_hue(cropped, p.hue), repeats),
        "gaussian blur": timeit(lambda: A.gaussian_blur(cropped, A.blur_kernel_size(size), p.sigma), repeats),
        "normalize": timeit(lambda: A.normalize(cropped), repeats),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=128, help="images per batch")
    parser.add_argument("--size", type=int, default=32, help="view size (digits load_size = size)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    adapter = build_adapter("digits", {"load_size": args.size})
    ds = adapter.split("train")
    raw = default_collate([ds[i] for i in range(args.n)])
    images = raw["x"]
    x = A.to_float(images)

    print(f"n={args.n} images of {args.size}px, threads={args.threads}, median of {args.repeats}\n")
    print("| stack | torchvision v2 per-sample loop (ms) | batched per-sample (ms) | speed-up | batched images/s |")
    print("|---|---|---|---|---|")
    for stack in ("simclr", "byol_global1", "byol_global2"):
        reference = torchvision_stack(stack, args.size)
        t_ref = timeit(lambda: torch.stack([reference(img) for img in x]), args.repeats)
        gen = torch.Generator().manual_seed(0)
        t_ours = timeit(lambda: A.augment(images, stack, args.size, gen), args.repeats)
        print(f"| {stack} | {t_ref * 1e3:.1f} | {t_ours * 1e3:.1f} | {t_ref / t_ours:.1f}x | {args.n / t_ours:,.0f} |")

    print("\nBatched path, per op (simclr, every op applied to all images):\n")
    print("| op | ms |")
    print("|---|---|")
    for name, seconds in op_shares(x, "simclr", args.size, args.repeats).items():
        print(f"| {name} | {seconds * 1e3:.2f} |")

    model = build_model(
        {"image": {"name": "small_cnn", "width": 32, "num_features": 128}}, {"hidden_dim": 256, "out_dim": 64}
    )
    gen = torch.Generator().manual_seed(0)
    views = [A.augment(images, "simclr", args.size, gen) for _ in range(2)]
    from multiview_app.data.batch import ViewBatch

    batch = ViewBatch(views, ["image"] * 2, ["simclr"] * 2)

    def step() -> None:
        model.zero_grad()
        model.embed(batch).sum().backward()

    t_aug = timeit(lambda: [A.augment(images, "simclr", args.size, gen) for _ in range(2)], args.repeats)
    t_model = timeit(step, args.repeats)
    print(
        f"\nContext (k=2 views of {args.n} items): augmentation {t_aug * 1e3:.1f} ms vs small_cnn "
        f"forward+backward {t_model * 1e3:.1f} ms -> augmentation = {t_aug / (t_aug + t_model):.1%} of the two"
    )


if __name__ == "__main__":
    main()
