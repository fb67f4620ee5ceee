#!/usr/bin/env python
"""Image-text benchmarks (CPU; forward + backward, median wall time).

Sections (``--section``; default ``all``):

* ``loss``: k = 2 image-text InfoNCE (``infonce_pwe`` with a fixed temperature and with the learnable
  logit scale) vs open_clip's ``ClipLoss`` on the same normalized features and the same logit scale.
  Values must agree (same definition: symmetric cross-entropy of the image->text and text->image
  logits). Goal: ratio <= 1.0.
* ``tokens``: tokenizing a batch of captions with open_clip's tokenizer (every call), with
  ``CaptionTokenizer`` cold (first epoch) and warm (cached ids), vs one training step of the CPU
  image-text model (configs/pairs_digits_base.yaml, k = 3): text must not dominate the step.

Every row is measured in this process on the same inputs; ratios are vs the reference of the row.

    python scripts/bench/bench_clip.py            # full tables
    python scripts/bench/bench_clip.py --quick    # smoke run
    python scripts/bench/bench_clip.py --section loss --threads 1 --repeats 101 --statistic min   # loaded machine
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]

from common import interleaved  # noqa: E402

from multiview_app.losses import build_loss  # noqa: E402


def bench_loss(sizes: list[tuple[int, int]], repeats: int, stat: str) -> None:
    from open_clip.loss import ClipLoss

    tau = 0.07
    print(
        "| n | d | ClipLoss (ms) | infonce_pwe fixed tau (ms) | ratio | infonce_pwe learnable (ms) | ratio | max abs diff |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, d in sizes:
        gen = torch.Generator().manual_seed(0)
        image = F.normalize(torch.randn(n, d, generator=gen), dim=-1)
        text = F.normalize(torch.randn(n, d, generator=gen), dim=-1)
        clip = ClipLoss()
        fixed = build_loss("infonce_pwe", tau=tau)
        learn = build_loss("infonce_pwe", tau=tau, learnable_temperature=True)
        scale = torch.tensor(1.0 / tau)

        def run_clip() -> torch.Tensor:
            a, b = image.clone().requires_grad_(), text.clone().requires_grad_()
            loss = clip(a, b, scale)
            loss.backward()
            return loss

        def run_ours(loss_fn: torch.nn.Module) -> Callable[[], torch.Tensor]:
            def run() -> torch.Tensor:
                a, b = image.clone().requires_grad_(), text.clone().requires_grad_()
                loss = loss_fn(torch.stack([a, b], dim=1))  # (n, 2, d)
                loss.backward()
                return loss

            return run

        c = float(run_clip().detach())
        diff = max(abs(c - float(run_ours(fixed)().detach())), abs(c - float(run_ours(learn)().detach())))
        timings = interleaved([run_clip, run_ours(fixed), run_ours(learn)], repeat=repeats)
        t_clip, t_fixed, t_learn = (timing.of(stat) for timing in timings)
        print(
            f"| {n} | {d} | {t_clip * 1e3:.2f} | {t_fixed * 1e3:.2f} | {t_fixed / t_clip:.2f} | "
            f"{t_learn * 1e3:.2f} | {t_learn / t_clip:.2f} | {diff:.1e} |",
            flush=True,
        )


def bench_tokens(batch: int, repeats: int, stat: str) -> None:
    import open_clip
    from torch.utils.data import default_collate

    from multiview_app.config import load_config
    from multiview_app.data.adapters import build_adapter
    from multiview_app.data.text.pairs import split_captions
    from multiview_app.data.text.tokenize import build_tokenizer
    from multiview_app.data.views import build_view_policy
    from multiview_app.losses import build_loss as make_loss
    from multiview_app.train.run_io import build_model_from_spec, model_spec

    cfg = load_config(ROOT / "configs" / "pairs_infonce_pwe.yaml", [f"train.batch_size={batch}"])
    adapter = build_adapter(cfg.data.adapter, cfg.data.options)
    policy = build_view_policy(cfg.views.policy, cfg.views.k, cfg.views.options, adapter)
    model = build_model_from_spec(model_spec(cfg))
    loss_fn = make_loss(cfg.loss.name, **cfg.loss.params)
    optimizer = torch.optim.AdamW(list(model.parameters()) + list(loss_fn.parameters()), lr=1e-3)
    train = adapter.split("train")
    raw = default_collate([train[i] for i in range(batch)])
    captions = [split_captions(c)[0] for c in raw["captions"]]
    length = policy.tokenizer.context_length
    reference = open_clip.get_tokenizer("ViT-B-32")
    warm = build_tokenizer("open_clip", length)
    warm(captions)

    def cold() -> torch.Tensor:
        return build_tokenizer("open_clip", length)(captions)  # fresh cache (the BPE tables are shared)

    def step() -> None:
        batch_views = policy.train_views(raw, torch.Generator().manual_seed(0))
        loss = loss_fn(model.embed(batch_views))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    names = [
        "open_clip tokenizer (every call)",
        "CaptionTokenizer, cold cache",
        "CaptionTokenizer, warm cache",
        "training step (views + forward + backward + AdamW)",
    ]
    fns = [lambda: reference(captions, context_length=length), cold, lambda: warm(captions), step]
    times = [timing.of(stat) for timing in interleaved(fns, repeat=repeats)]
    t_step = times[-1]
    rows = list(zip(names, times))
    print(f"| what ({batch} captions, context {length}) | time (ms) | share of the step |")
    print("|---|---:|---:|")
    for name, t in rows:
        print(f"| {name} | {t * 1e3:.2f} | {t / t_step:.1%} |", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--section", choices=["all", "loss", "tokens"], default="all")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats per row (default 15, quick 3)")
    parser.add_argument(
        "--statistic",
        choices=["median", "min"],
        default="median",
        help="summary of the repeats (min: least disturbed repeat, for a loaded machine)",
    )
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.threads:
        torch.set_num_threads(args.threads)
    repeats = args.repeats or (3 if args.quick else 15)
    if args.section in ("all", "loss"):
        sizes = [(128, 64)] if args.quick else [(256, 128), (1024, 256), (2048, 512)]
        bench_loss(sizes, repeats, args.statistic)
        print()
    if args.section in ("all", "tokens"):
        bench_tokens(16 if args.quick else 64, repeats, args.statistic)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
