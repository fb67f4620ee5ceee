"""Training throughput on CPU and the share of step time in data / encoder / loss.

    .venv/bin/python scripts/bench_train.py [--config configs/digits_infonce_pwe.yaml] [--steps 20]

Runs the real trainer (Trainer.fit, no checkpoints, no eval) for 2 x --steps steps and reads the
second log window from metrics.jsonl (the first one holds the warm-up). Reference in the same
process: a bare loop over one pre-made ViewBatch (embed -> loss -> backward -> AdamW), i.e. the
encoder + loss cost without the data pipeline and trainer bookkeeping. Prints a Markdown table.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from multiview_app.config import load_config  # noqa: E402
from multiview_app.data.adapters import build_adapter  # noqa: E402
from multiview_app.data.views import build_view_policy, items_per_batch  # noqa: E402
from multiview_app.losses import build_loss  # noqa: E402
from multiview_app.models import build_model  # noqa: E402
from multiview_app.train.metrics import read_metrics  # noqa: E402
from multiview_app.train.run_io import model_spec  # noqa: E402
from multiview_app.train.trainer import train  # noqa: E402


def bare_loop(cfg, steps: int) -> float:
    """items/s of embed + loss + backward + AdamW on one fixed batch (no data pipeline)."""
    adapter = build_adapter(cfg.data.adapter, cfg.data.options)
    policy = build_view_policy(cfg.views.policy, cfg.views.k, cfg.views.options, adapter)
    items = items_per_batch(cfg.views.batch_mode, cfg.train.batch_size, cfg.views.k)
    ds = adapter.split("train")
    raw = torch.utils.data.default_collate([ds[i] for i in range(items)])
    batch = policy.train_views(raw, torch.Generator().manual_seed(0))
    model = build_model(**model_spec(cfg))
    loss_fn = build_loss(cfg.loss.name, **cfg.loss.params)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.optim.lr)
    for i in range(steps + 2):
        if i == 2:
            start = time.perf_counter()
        loss = loss_fn(model.embed(batch))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return steps * items / (time.perf_counter() - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "digits_infonce_pwe.yaml"))
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(
            args.config,
            [f"train.max_steps={2 * args.steps}", f"train.log_every={args.steps}", "train.checkpoint_every=0",
             "eval.linear_probe=false", f"output.runs_dir={tmp}"],
            name="bench",
        )
        train(cfg)
        record = read_metrics(Path(tmp) / "bench" / "metrics.jsonl")[-1]
    reference = bare_loop(cfg, args.steps)
    shares = {p: record[f"time/{p}"] for p in ("data", "forward", "loss", "backward", "optim")}
    items = items_per_batch(cfg.views.batch_mode, cfg.train.batch_size, cfg.views.k)
    print(f"config {Path(args.config).name}: {items} items x {cfg.views.k} views per step, "
          f"{torch.get_num_threads()} torch threads, {args.steps} measured steps\n")
    print("| measurement | value |")
    print("|---|---|")
    print(f"| trainer throughput (items/s) | {record['items_per_s']:.1f} |")
    print(f"| bare embed+loss+backward+AdamW loop (items/s, reference) | {reference:.1f} |")
    print(f"| trainer / reference | {record['items_per_s'] / reference:.2f} |")
    print(f"| step time (s) | {record['step_time_s']:.3f} |")
    for phase, share in shares.items():
        print(f"| share of step: {phase} | {share:.1%} |")
    encoder = shares["forward"] + shares["backward"]
    print(f"| share of step: encoder (forward + backward) | {encoder:.1%} |")
    print(f"| share of step: data + loss (goal < 20%) | {shares['data'] + shares['loss']:.1%} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
