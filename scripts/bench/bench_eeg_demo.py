"""Where the README demo's time goes, two CPU settings it relies on (docs/benchmarks.md, "EEG demo").

1. Training step of the demo model (channel-agnostic ``eeg/conv`` width 32, projector 256 -> 64,
   M3G k = 6, n = 16, epsilon 0.2, Anderson 16, diagonal start; forward + loss + backward + AdamW)
   with 1 vs 2 torch intra-op threads (the demo exports ``OMP_NUM_THREADS=1``).
2. Frozen-encoder feature extraction (what ``mvapp eval sleep-staging`` does per row) over the same
   windows in batches of 256 vs 16 windows x 6 channels (the evaluator's default is 16).

Every variant runs in this process on the same inputs, interleaved over ``--repeats`` rounds; the
table gives medians and the ratio to the reference row. The machine may be shared: say so next to
the numbers.

    python scripts/bench/bench_eeg_demo.py [--repeats 5 --steps 5 --windows 512]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from multiview_app.data.batch import ViewBatch
from multiview_app.losses import build_loss
from multiview_app.models import build_model


def demo_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(
        {"eeg": {"name": "conv", "width": 32, "out_dim": 64, "dropout": 0.0, "channel_mode": "agnostic"}},
        {"hidden_dim": 256, "out_dim": 64},
        None,
    )


def step_seconds(threads: int, steps: int, x: torch.Tensor) -> float:
    """Median seconds of one optimizer step on ``x (n, 6, T)`` with ``threads`` intra-op threads."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        model = demo_model().train()
        loss_fn = build_loss("m3g", epsilon=0.2, anderson=16, init_potentials="diagonal", max_iter=300)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        times = []
        for _ in range(steps):
            batch = ViewBatch(
                [x[:, c] for c in range(x.shape[1])],
                ["eeg"] * x.shape[1],
                [f"c{c}" for c in range(x.shape[1])],
                None,
                {},
            )
            start = time.perf_counter()
            loss = loss_fn(model.embed(batch))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            times.append(time.perf_counter() - start)
        return statistics.median(times)
    finally:
        torch.set_num_threads(previous)


@torch.no_grad()
def extraction_seconds(windows_per_batch: int, x: torch.Tensor) -> float:
    """Seconds to encode every channel of ``x (N, 6, T)`` in batches of ``windows_per_batch`` windows."""
    encoder = demo_model().encoders["eeg"].eval()
    start = time.perf_counter()
    for i in range(0, x.shape[0], windows_per_batch):
        chunk = x[i : i + windows_per_batch]
        encoder(chunk.reshape(-1, chunk.shape[-1]))
    return time.perf_counter() - start


def table(title: str, rows: dict[str, list[float]], reference: str) -> list[str]:
    ref = statistics.median(rows[reference])
    lines = [f"{title}", "| variant | median s | ratio to reference |", "|---|---|---|"]
    for name, values in rows.items():
        median = statistics.median(values)
        lines.append(f"| {name} | {median:.3f} | {median / ref:.2f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=5, help="training steps per round (median)")
    parser.add_argument("--windows", type=int, default=512, help="windows encoded per extraction round")
    args = parser.parse_args()
    generator = torch.Generator().manual_seed(0)
    batch = torch.randn(16, 6, 3000, generator=generator)
    windows = torch.randn(args.windows, 6, 3000, generator=generator)
    steps: dict[str, list[float]] = {"2 threads (reference)": [], "1 thread": []}
    extraction: dict[str, list[float]] = {"256 windows per batch (reference)": [], "16 windows per batch": []}
    for _ in range(args.repeats):
        steps["2 threads (reference)"].append(step_seconds(2, args.steps, batch))
        steps["1 thread"].append(step_seconds(1, args.steps, batch))
        with torch.no_grad():
            torch.set_num_threads(1)
            extraction["256 windows per batch (reference)"].append(extraction_seconds(256, windows))
            extraction["16 windows per batch"].append(extraction_seconds(16, windows))
    print("\n".join(table("training step, demo model (n = 16, k = 6)", steps, "2 threads (reference)")))
    print()
    print(
        "\n".join(
            table(
                f"feature extraction, {args.windows} windows x 6 channels, 1 thread",
                extraction,
                "256 windows per batch (reference)",
            )
        )
    )


if __name__ == "__main__":
    main()
