"""M3G on CPU: the numba backend vs the eager and the compiled sweep blocks, per (n, k), in one process.

The table :data:`multiview_app.losses.m3g.AUTO_NUMBA_ON_CPU` (which CPU sizes ``backend="auto"`` gives the numba
kernels instead of the blocks) is decided from this script's ratios. For each (n, k) and solver setting, every call gets fresh float32 embeddings
(d = 64; a shared direction per item plus per-view noise) and runs ``build_loss("m3g")`` forward + backward on
each path in turn, the order rotated from call to call (paired, alternating: a busy machine slows all paths
alike): ``backend="numba"``, and ``backend="blocks"`` run eagerly and compiled by torch.compile (the switch
:data:`multiview_app.losses._compile.SWITCH` set per call). Each path's first call is
untimed and reported (the compiled blocks' is inductor's compile: cold with ``--cold``, which points inductor at
a fresh cache folder; numba's loads its on-disk cache or compiles), then ``--warmup`` untimed calls (the block
sizes adapt), then ``--calls`` timed ones. Rows: plain Alg. 1 (zero start) and the EEG demo's solver settings
(Anderson 16, diagonal start; ``k = 3`` runs plain sweeps from the diagonal start on every path).
Columns: median milliseconds per path; speed-ups as medians of the per-call ratios (> 1: numba faster); the
first calls; sweeps; the largest value difference from the numba path; where the table routes the size.

    python scripts/bench/bench_m3g_cpu.py --out bench_out [--sizes 16x6 16x4 32x4] [--calls 15] [--cold]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
from common import command_line, embeddings, machine_line, markdown_table

from multiview_app.losses import _compile, build_loss, m3g

SIZES = ["32x3", "64x3", "96x3", "16x6", "16x4", "32x4", "64x4", "128x4", "32x6"]
SETTINGS = {
    "plain": {},
    "demo": {"anderson": 16, "init_potentials": "diagonal"},  # the EEG demo's solver settings
}
# path -> (backend, compile switch)
PATHS = {"numba": ("numba", "0"), "eager": ("blocks", "0"), "compiled": ("blocks", "1")}


def run(loss: torch.nn.Module, x: torch.Tensor, path: str) -> tuple[float, float, float]:
    """Forward + backward once on ``path``; ``(seconds, value, sweeps)``."""
    _compile.SWITCH = PATHS[path][1]
    leaf = x.clone().requires_grad_()
    start = time.perf_counter()
    out = loss(leaf)
    out.backward()
    seconds = time.perf_counter() - start
    return seconds, out.item(), loss.last_stats["iterations"]


def compare(n: int, k: int, params: dict, paths: list[str], calls: int, warmup: int) -> dict:
    """Paired timings of ``paths`` on fresh inputs, the order rotated per call."""
    losses = {
        path: build_loss("m3g", epsilon=0.2, tol=1e-3, max_iter=300, backend=PATHS[path][0], **params) for path in paths
    }
    seconds: dict[str, list[float]] = {path: [] for path in paths}
    sweeps: dict[str, list[float]] = {path: [] for path in paths}
    values: dict[str, list[float]] = {path: [] for path in paths}
    first: dict[str, float] = {}
    for call in range(1 + warmup + calls):
        x = embeddings(n, k, 64, seed=1000 * call + 7)
        shift = call % len(paths)
        for path in paths[shift:] + paths[:shift]:
            took, value, count = run(losses[path], x, path)
            if call == 0:
                first[path] = took
            elif call > warmup:
                seconds[path].append(took)
                sweeps[path].append(count)
                values[path].append(value)
    out: dict = {"first": first}
    for path in paths:
        out[f"{path}_ms"] = statistics.median(seconds[path]) * 1e3
        out[f"{path}_sweeps"] = statistics.mean(sweeps[path])
    for slow, fast in (("compiled", "numba"), ("eager", "numba"), ("eager", "compiled")):
        if slow in paths and fast in paths:
            out[f"{slow}/{fast}"] = statistics.median(s / f for s, f in zip(seconds[slow], seconds[fast]))
    if "numba" in paths:
        out["diff"] = max(
            abs(a - b) for path in paths if path != "numba" for a, b in zip(values[path], values["numba"])
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for bench_m3g_cpu.md")
    parser.add_argument("--sizes", nargs="+", default=SIZES, help="n x k, e.g. 16x6")
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--paths", nargs="+", default=list(PATHS), choices=list(PATHS))
    parser.add_argument("--calls", type=int, default=15, help="timed calls per path (fresh inputs each)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed calls per path after the first")
    parser.add_argument("--cold", action="store_true", help="inductor compiles into a fresh cache folder")
    args = parser.parse_args()
    torch.set_num_threads(1)  # the project's choice on <= 2 usable CPUs (multiview_app/threads.py)
    if args.cold:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench_m3g_cpu_inductor_")
    rows = []
    switch = _compile.SWITCH
    try:
        for size in args.sizes:
            n, k = (int(part) for part in size.lower().split("x"))
            routed = m3g.choose_backend("auto", "cv", "cpu", torch.float32, k, n)
            paths = [path for path in args.paths if path != "numba" or m3g.numba_available()]
            for setting in args.settings:
                result = compare(n, k, SETTINGS[setting], paths, args.calls, args.warmup)
                cell = {path: f"{result[f'{path}_ms']:.3g}" if path in paths else "-" for path in PATHS}
                speed = {
                    key: f"{result[key]:.2f}x" if key in result else "-"
                    for key in ("compiled/numba", "eager/numba", "eager/compiled")
                }
                first = {path: f"{result['first'][path]:.1f}" if path in paths else "-" for path in PATHS}
                rows.append(
                    [
                        f"{n}x{k}",
                        setting,
                        *cell.values(),
                        *speed.values(),
                        routed,
                        first["compiled"],
                        first["numba"],
                        " / ".join(f"{result[f'{path}_sweeps']:.1f}" if path in paths else "-" for path in PATHS),
                        f"{result['diff']:.1e}" if "diff" in result else "-",
                    ]
                )
                print(" | ".join(rows[-1]), flush=True)
    finally:
        _compile.SWITCH = switch
    headers = [
        "n x k",
        "solver settings",
        "numba ms",
        "eager block ms",
        "compiled block ms",
        "numba speed-up vs compiled",
        "numba speed-up vs eager",
        "compiled speed-up vs eager",
        "auto picks",
        f"compiled first call s ({'cold' if args.cold else 'inductor cache as found'})",
        "numba first call s",
        "sweeps numba / eager / compiled",
        "max |value diff| vs numba",
    ]
    report = f"{markdown_table(headers, rows)}\n\n{machine_line()}\n\n`{command_line()}`\n"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench_m3g_cpu.md").write_text(report)
    print(report)


if __name__ == "__main__":
    main()
