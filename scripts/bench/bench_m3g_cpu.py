"""M3G on CPU, k > 3: the compiled sweeps (losses/sinkhorn_fast.py) vs the general torch path, one process.

For each (n, k) the same float32 embeddings (d = 64; a shared direction per item plus per-view noise) go
through ``build_loss("m3g")`` forward + backward with ``MVAPP_M3G_FUSED=1`` (compiled) and ``=0``
(general), interleaved (``--repeats`` rounds of one timed call each, after one warm-up call that also
compiles the kernels). Rows: the EEG demo's solver settings (epsilon 0.2, tol 1e-3, Anderson 16,
diagonal start) and plain Alg. 1 (zero start, no Anderson). Columns: median milliseconds, the ratio
general / compiled (> 1: compiled faster), the sweeps of both (equal unless round-off moves the stopping
rule across tol) and the largest value difference.

``--embeddings FILE``: instead of synthetic inputs, a tensor ``(steps, n, k, d)`` saved with
``torch.save`` (e.g. the raw embeddings of demo training steps); every ``--stride``-th step is timed.

    .venv/bin/python scripts/bench/bench_m3g_cpu.py --out bench_out [--repeats 7] [--sizes 16x6 16x5 32x4 64x4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch

from multiview_app.bench import command_line, machine_line, markdown_table, ratio, time_call
from multiview_app.losses import build_loss

SIZES = ["16x6", "16x5", "32x4", "64x4"]
SETTINGS = {
    "demo (anderson 16, diagonal)": {"anderson": 16, "init_potentials": "diagonal"},
    "plain": {},
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


def compare(inputs: list[torch.Tensor], params: dict, repeats: int, block: bool = False) -> dict:
    """Interleaved timings of the compiled and the general path over ``inputs`` (``block``: also the
    device loop's torch.compile'd sweep blocks, key ``"block"``, with its first call's seconds)."""
    loss = build_loss("m3g", epsilon=0.2, tol=1e-3, max_iter=300, **params)
    block_loss = build_loss("m3g", epsilon=0.2, tol=1e-3, max_iter=300, solver_loop="device", **params)
    switches = ("1", "0", "block") if block else ("1", "0")
    times: dict[str, list[float]] = {switch: [] for switch in switches}
    sweeps: dict[str, list[float]] = {switch: [] for switch in switches}
    values: dict[str, list[float]] = {switch: [] for switch in switches}
    first_call = []
    for x in inputs:
        for switch in switches:
            os.environ[SWITCH] = "0" if switch == "block" else switch
            use = block_loss if switch == "block" else loss
            start = time.perf_counter()
            value, count = run(use, x)  # warm-up (and the first call's compile)
            if switch == "block":
                first_call.append(time.perf_counter() - start)
            times[switch].append(time_call(lambda: run(use, x), repeat=repeats, warmup=0).median)  # noqa: B023
            sweeps[switch].append(count)
            values[switch].append(value)
    os.environ.pop(SWITCH, None)
    if block:
        return {
            "block_ms": statistics.median(times["block"]) * 1e3,
            "fastest_host_ms": min(statistics.median(times["1"]), statistics.median(times["0"])) * 1e3,
            "block_ratio": statistics.median(min(a, b) / c for a, b, c in zip(times["1"], times["0"], times["block"])),
            "numba_over_block": statistics.median(c / a for a, c in zip(times["1"], times["block"])),
            "first_call_s": first_call[0],
            "block_sweeps": statistics.mean(sweeps["block"]),
            "block_diff": max(abs(a - b) for a, b in zip(values["block"], values["0"])),
        }
    return {
        "fused_ms": statistics.median(times["1"]) * 1e3,
        "general_ms": statistics.median(times["0"]) * 1e3,
        "ratio": statistics.median(a / b for a, b in zip(times["0"], times["1"])),
        "sweeps": (statistics.mean(sweeps["1"]), statistics.mean(sweeps["0"])),
        "same_sweeps": sweeps["1"] == sweeps["0"],
        "max_diff": max(abs(a - b) for a, b in zip(values["1"], values["0"])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for bench_m3g_cpu.md")
    parser.add_argument("--sizes", nargs="+", default=SIZES, help="n x k, e.g. 16x6")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--inputs", type=int, default=3, help="synthetic input seeds per size")
    parser.add_argument("--embeddings", type=Path, help="(steps, n, k, d) raw embeddings saved with torch.save")
    parser.add_argument("--stride", type=int, default=10, help="with --embeddings: every stride-th step")
    parser.add_argument(
        "--block",
        action="store_true",
        help="instead: the device loop's compiled sweep blocks vs the fastest host path (numba or general)",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)  # the project's choice on <= 2 usable CPUs (multiview_app/threads.py)
    cases: list[tuple[str, list[torch.Tensor]]] = []
    if args.embeddings is not None:
        steps = torch.load(args.embeddings, weights_only=True).float()
        if steps.dim() != 4:
            raise SystemExit(f"--embeddings {args.embeddings}: expected (steps, n, k, d), got {tuple(steps.shape)}")
        _, n, k, _ = steps.shape
        cases.append((f"{n}x{k} ({args.embeddings.name}, every {args.stride}th step)", list(steps[:: args.stride])))
    else:
        for size in args.sizes:
            n, k = (int(part) for part in size.lower().split("x"))
            cases.append((f"{n}x{k}", [synthetic(n, k, seed=seed) for seed in range(args.inputs)]))
    if args.block:
        block_table(cases, args)
        return
    rows = []
    for label, inputs in cases:
        for setting, params in SETTINGS.items():
            result = compare(inputs, params, args.repeats)
            rows.append(
                [
                    label,
                    setting,
                    f"{result['general_ms']:.3g}",
                    f"{result['fused_ms']:.3g}",
                    ratio(result["ratio"], 1.0),
                    "{:.1f} / {:.1f}".format(*result["sweeps"]),
                    "yes" if result["same_sweeps"] else "no",
                    f"{result['max_diff']:.1e}",
                ]
            )
            print(" | ".join(rows[-1]), flush=True)
    table = markdown_table(
        [
            "n x k",
            "solver",
            "general ms",
            "compiled ms",
            "general / compiled",
            "sweeps (compiled / general)",
            "same sweeps",
            "max |value diff|",
        ],
        rows,
    )
    report = f"{table}\n\n{machine_line()}\n\n`{command_line()}`\n"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench_m3g_cpu.md").write_text(report)
    print(report)


def block_table(cases: list[tuple[str, list[torch.Tensor]]], args: argparse.Namespace) -> None:
    """``--block``: the compiled sweep blocks (``solver_loop="device"``, torch.compile) vs the fastest host path."""
    rows = []
    for label, inputs in cases:
        for setting, params in SETTINGS.items():
            result = compare(inputs, params, args.repeats, block=True)
            rows.append(
                [
                    label,
                    setting,
                    f"{result['fastest_host_ms']:.3g}",
                    f"{result['block_ms']:.3g}",
                    ratio(result["block_ratio"], 1.0),
                    ratio(result["numba_over_block"], 1.0),
                    f"{result['first_call_s']:.0f}",
                    f"{result['block_sweeps']:.1f}",
                    f"{result['block_diff']:.1e}",
                ]
            )
            print(" | ".join(rows[-1]), flush=True)
    headers = [
        "n x k",
        "solver",
        "fastest host ms",
        "compiled block ms",
        "fastest host / block",
        "block / numba",
        "block first call s",
        "block sweeps",
        "max |value diff|",
    ]
    report = f"{markdown_table(headers, rows)}\n\n{machine_line()}\n\n`{command_line()}`\n"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench_m3g_cpu_block.md").write_text(report)
    print(report)


if __name__ == "__main__":
    main()
