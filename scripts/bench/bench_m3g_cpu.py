"""M3G on CPU: the numba k = 3 kernels vs the compiled sweep blocks, per (n, k), in one process.

The table :data:`multiview_app.losses.m3g_fast.NUMBA_ON_CPU` (which CPU sizes the numba kernels take instead of
the blocks) is decided from this script's ratio: numba is kept only where it is >= 1.5x faster. For each
(n, k) the same float32 embeddings (d = 64; a shared direction per item plus per-view noise) go through
``build_loss("m3g")`` forward + backward on the compiled blocks (``MVAPP_M3G_FUSED=0``, torch.compile on) and,
for k = 3 (the only k with numba kernels), on the numba path (routed there for the measurement whatever the
table says), interleaved: one untimed call each (the blocks' first call, compile included, is reported),
then ``--repeats`` timed calls per input seed. Rows: plain Alg. 1 (zero start) and the EEG demo's solver
settings (Anderson 16, diagonal start; k = 3 runs plain sweeps from the diagonal start on both paths).
Columns: median milliseconds, **numba speed-up** = block ms / numba ms (median of per-input ratios; > 1:
numba faster), whether the table routes the size to numba, the blocks' first call, sweeps, value difference.

    python scripts/bench/bench_m3g_cpu.py --out bench_out [--sizes 32x3 64x3 96x3 16x6] [--repeats 3] [--inputs 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch

from multiview_app.bench import command_line, machine_line, markdown_table, ratio, time_call
from multiview_app.losses import build_loss, m3g_fast

SIZES = ["32x3", "64x3", "96x3", "16x6"]
SETTINGS = {
    "plain": {},
    "demo (anderson 16, diagonal)": {"anderson": 16, "init_potentials": "diagonal"},
}
SWITCH = "MVAPP_M3G_FUSED"


def synthetic(n: int, k: int, d: int = 64, seed: int = 0, noise: float = 1.0) -> torch.Tensor:
    """Float32 ``(n, k, d)``: a shared direction per item plus per-view noise."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 1, d, generator=g) + noise * torch.randn(n, k, d, generator=g)


def run(loss: torch.nn.Module, x: torch.Tensor) -> tuple[float, float]:
    """Forward + backward once; ``(value, sweeps)``."""
    leaf = x.clone().requires_grad_()
    out = loss(leaf)
    out.backward()
    return out.item(), loss.last_stats["iterations"]


def compare(n: int, k: int, inputs: list[torch.Tensor], params: dict, repeats: int) -> dict:
    """Interleaved timings of the compiled blocks and (k = 3) the numba kernels over ``inputs``."""
    paths = ["block", "numba"] if k in m3g_fast.NUMBA_ON_CPU else ["block"]
    losses = {path: build_loss("m3g", epsilon=0.2, tol=1e-3, max_iter=300, **params) for path in paths}
    times: dict[str, list[float]] = {path: [] for path in paths}
    sweeps: dict[str, list[float]] = {path: [] for path in paths}
    values: dict[str, list[float]] = {path: [] for path in paths}
    first_call = None
    table = m3g_fast.NUMBA_ON_CPU.get(k)
    if table is not None:  # the numba path measured at this n whatever the table says
        m3g_fast.NUMBA_ON_CPU[k] = (max(n, table[0]), table[1])
    try:
        for x in inputs:
            for path in paths:
                os.environ[SWITCH] = "1" if path == "numba" else "0"
                start = time.perf_counter()
                value, count = run(losses[path], x)  # untimed (the blocks' first call compiles)
                if path == "block" and first_call is None:
                    first_call = time.perf_counter() - start
                times[path].append(time_call(lambda: run(losses[path], x), repeat=repeats, warmup=0).median)  # noqa: B023
                sweeps[path].append(count)
                values[path].append(value)
    finally:
        os.environ.pop(SWITCH, None)
        if table is not None:
            m3g_fast.NUMBA_ON_CPU[k] = table
    out = {
        "block_ms": statistics.median(times["block"]) * 1e3,
        "first_call_s": first_call,
        "block_sweeps": statistics.mean(sweeps["block"]),
    }
    if "numba" in paths:
        out["numba_ms"] = statistics.median(times["numba"]) * 1e3
        out["speedup"] = statistics.median(b / a for a, b in zip(times["numba"], times["block"]))
        out["numba_sweeps"] = statistics.mean(sweeps["numba"])
        out["diff"] = max(abs(a - b) for a, b in zip(values["numba"], values["block"]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for bench_m3g_cpu.md")
    parser.add_argument("--sizes", nargs="+", default=SIZES, help="n x k, e.g. 16x6")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--inputs", type=int, default=2, help="synthetic input seeds per size")
    args = parser.parse_args()
    torch.set_num_threads(1)  # the project's choice on <= 2 usable CPUs (multiview_app/threads.py)
    os.environ.setdefault("MVAPP_M3G_COMPILE", "1")
    rows = []
    for size in args.sizes:
        n, k = (int(part) for part in size.lower().split("x"))
        inputs = [synthetic(n, k, seed=seed) for seed in range(args.inputs)]
        routed = k in m3g_fast.NUMBA_ON_CPU and n <= m3g_fast.NUMBA_ON_CPU[k][0]
        for setting, params in SETTINGS.items():
            result = compare(n, k, inputs, params, args.repeats)
            has_numba = "numba_ms" in result
            rows.append(
                [
                    f"{n}x{k}",
                    setting,
                    f"{result['numba_ms']:.3g}" if has_numba else "- (no kernel)",
                    f"{result['block_ms']:.3g}",
                    ratio(result["speedup"], 1.0) if has_numba else "-",
                    "numba" if routed else "blocks",
                    f"{result['first_call_s']:.0f}",
                    f"{result['numba_sweeps']:.1f} / {result['block_sweeps']:.1f}"
                    if has_numba
                    else f"- / {result['block_sweeps']:.1f}",
                    f"{result['diff']:.1e}" if has_numba else "-",
                ]
            )
            print(" | ".join(rows[-1]), flush=True)
    headers = [
        "n x k",
        "solver settings",
        "numba ms",
        "compiled block ms",
        "numba speed-up (block / numba)",
        "routed to",
        "block first call s",
        "sweeps numba / block",
        "max |value diff|",
    ]
    report = f"{markdown_table(headers, rows)}\n\n{machine_line()}\n\n`{command_line()}`\n"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench_m3g_cpu.md").write_text(report)
    print(report)


if __name__ == "__main__":
    main()
