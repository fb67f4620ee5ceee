"""EEG encoders side by side in one process: parameters and CPU training steps/s of every registered
``eeg/*`` encoder on the demo's step (16 items x 6 channel views of 20-s crops at 100 Hz, encoder +
projector forward, a mean-square stand-in loss, backward, AdamW), as a ratio against the demo's
``eeg/conv`` (width 32, channel-agnostic). The loss head is left out: it costs the same for every encoder.

    OMP_NUM_THREADS=1 python scripts/bench/bench_eeg_encoders.py [--steps 20 --repeats 3 --threads 1]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch

from multiview_app.models import build_model

#: ``model.encoders.eeg`` of each encoder (the demo's conv and the braindecode encoders of the comparison).
ENCODERS: dict[str, dict[str, Any]] = {
    "conv": {"name": "conv", "width": 32, "out_dim": 64, "dropout": 0.0, "channel_mode": "agnostic"},
    "chambon2018": {"name": "chambon2018", "out_dim": 64},
    "attnsleep": {"name": "attnsleep", "out_dim": 64, "dropout": 0.0},
}
VIEWS = ["F3-M2", "F4-M1", "C3-M2", "C4-M1", "O1-M2", "O2-M1"]


def steps_per_second(model: torch.nn.Module, batch: int, samples: int, steps: int) -> float:
    """Training steps/s of ``model``'s EEG encoder + projector on ``(batch, samples)`` views (after 2 warm-up steps)."""
    from multiview_app.data.batch import ViewBatch

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(0)
    views = [torch.randn(batch, samples, generator=generator) for _ in VIEWS]
    item = ViewBatch(views=views, view_names=list(VIEWS), modalities=["eeg"] * len(VIEWS))
    model.train()
    start = 0.0
    for step in range(steps + 2):
        if step == 2:
            start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        model.embed(item).square().mean().backward()
        optimizer.step()
    return steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats; the best of each is kept")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=20.0, help="view length (the demo's crops: 20 s)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    models = {name: build_model({"eeg": spec}, {"hidden_dim": 256, "out_dim": 64}) for name, spec in ENCODERS.items()}
    best = {name: 0.0 for name in models}
    for _ in range(args.repeats):  # interleaved: a load change hits every encoder alike
        for name, model in models.items():
            best[name] = max(best[name], steps_per_second(model, args.batch, int(args.seconds * 100), args.steps))
    print(
        f"torch threads {args.threads}; batch {args.batch} x {len(VIEWS)} views x {args.seconds:g} s at 100 Hz; "
        f"best of {args.repeats} x {args.steps} steps"
    )
    print(f"{'encoder':12s} {'encoder params':>15s} {'steps/s':>9s} {'vs conv':>8s}")
    for name, model in models.items():
        params = sum(p.numel() for p in model.encoders["eeg"].parameters())
        print(f"{name:12s} {params:15,d} {best[name]:9.2f} {best[name] / best['conv']:8.2f}x")


if __name__ == "__main__":
    main()
