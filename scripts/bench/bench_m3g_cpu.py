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

``--contention`` (docs/benchmarks.md, "CPU under contention"): CPU loss calls and EEG training steps on a quiet vs
a contended CPU, torch's default intra-op threads vs the project's choice (multiview_app/threads.py), and M3G
against ott-jax under the same load. The competing load is started by this script: ``--load`` Python busy loops
in subprocesses (one contended condition per count given), pinned to this process's CPUs, running only during
the contended rounds. Cases: M3G forward + backward (float32, epsilon 0.2, tol 1e-3, d = 64, L2-normalized
embeddings, the same tensors for every variant) at ``--sizes`` (default 64x4 16x6 128x3), ``--calls`` timed
calls (default 5), and one optimizer step of the EEG demo's model and loss (``bench_train.py --setup eeg-demo``:
conv width 32, M3G k = 6, n = 16, Anderson 16). Rounds alternate quiet / contended (``--rounds`` of each); each
cell is the median over rounds of each round's median. With ``--with-ott`` every condition also times ott-jax's
``MMSinkhorn`` fwd+bwd on the same embeddings (``ott_m3g.py`` in its venv; one XLA thread when the project
runs one torch thread) and prints the ott-jax / project ratio per condition with its change from the quiet
ratio (goal: within 1.5x). Writes ``OUT/contention.md`` and ``.json``. Run it with ``OMP_NUM_THREADS`` unset, or
the "default" column is not torch's default.

    env -u OMP_NUM_THREADS python scripts/bench/bench_m3g_cpu.py --contention --out OUT [--load 1 2 --calls 5 --steps 3]
        [--with-ott --ott-venv /path/to/venv]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from common import command_line, embeddings, machine_line, markdown_table, parse_sizes, time_call
from ott_m3g import OTT_VENV, ensure_ott_venv, run_ott

from multiview_app.losses import _compile, build_loss, m3g
from multiview_app.threads import choose_threads

SIZES = ((32, 3), (64, 3), (96, 3), (16, 6), (16, 4), (32, 4), (64, 4), (128, 4), (32, 6))
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


# --------------------------------------------------------------------------- under contention

M3G_SHAPES: tuple[tuple[int, int], ...] = ((64, 4), (16, 6), (128, 3))
# a busy loop that ends when this benchmark does (its parent changes), even if the benchmark is killed
BUSY_LOOP = (
    "import os\nparent = os.getppid()\nwhile os.getppid() == parent:\n    for _ in range(1_000_000):\n        pass\n"
)


class CompetingLoad:
    """``count`` busy-loop subprocesses pinned to this process's CPUs while the ``with`` block runs."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.processes: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> CompetingLoad:
        cpus = os.sched_getaffinity(0)
        for _ in range(self.count):
            process = subprocess.Popen([sys.executable, "-c", BUSY_LOOP], stdin=subprocess.DEVNULL)
            os.sched_setaffinity(process.pid, cpus)
            self.processes.append(process)
        time.sleep(0.5)  # the loops are spinning before the first timed call
        return self

    def __exit__(self, *exc: object) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            process.wait(timeout=10)
        self.processes.clear()


def m3g_inputs(n: int, k: int, d: int = 64) -> torch.Tensor:
    """Fixed L2-normalized ``(n, k, d)`` float32 embeddings (seed 0)."""
    return torch.nn.functional.normalize(embeddings(n, k, d, signal=0), dim=-1)


def m3g_call(n: int, k: int, d: int = 64) -> Callable[[], None]:
    """One M3G forward + backward on :func:`m3g_inputs`."""
    base = m3g_inputs(n, k, d)
    loss_fn = build_loss("m3g", epsilon=0.2, tol=1e-3)

    def call() -> None:
        z = base.clone().requires_grad_(True)
        loss_fn(z).backward()

    return call


def with_threads(count: int, fn: Callable[[], float]) -> float:
    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        return fn()
    finally:
        torch.set_num_threads(previous)


class OttTimer:
    """ott-jax's M3G fwd+bwd per (n, k) in the ott venv, on the embeddings of :func:`m3g_inputs`."""

    def __init__(self, venv: Path, out: Path, threads: int, repeat: int) -> None:
        python = ensure_ott_venv(venv)
        if python.startswith("!"):
            raise SystemExit(f"--with-ott: {python[1:]}")
        self.python, self.threads, self.repeat, self.folder = python, threads, repeat, out / "ott_inputs"
        self.folder.mkdir(parents=True, exist_ok=True)

    def seconds(self, n: int, k: int) -> float:
        """Median seconds of ``repeat`` timed calls after jit and one warm-up (in one subprocess)."""
        path = self.folder / f"z_{n}_{k}.npy"
        np.save(path, m3g_inputs(n, k).numpy())
        found = run_ott(self.python, path, 0.2, self.repeat, 60.0, self.threads, 900.0)
        if "error" in found:
            raise SystemExit(f"ott-jax at (n={n}, k={k}): {found['error']}")
        return found["time"]


def ratio_table(seconds: dict, ott: dict, conditions: list[str]) -> str:
    """ott-jax / project per M3G case, torch thread variant and condition, and the quiet ratio over each
    contended one (goal: <= 1.5)."""
    rows = []
    for case, by_condition in ott.items():
        theirs = {c: statistics.median(by_condition[c]) for c in conditions}
        for variant, by_variant in seconds[case].items():
            ours = {c: statistics.median(by_variant[c]) for c in conditions}
            ratios = {c: theirs[c] / ours[c] for c in conditions}
            cells = [
                f"{ratios[c]:.2f}x" + ("" if c == "quiet" else f" ({ratios['quiet'] / ratios[c]:.2f})")
                for c in conditions
            ]
            rows.append([case, variant, *(f"{ours[c] * 1e3:.1f} / {theirs[c] * 1e3:.1f}" for c in conditions), *cells])
    headers = ["case", "project threads", *(f"{c}: project / ott-jax ms" for c in conditions)]
    headers += [f"{c}: ott-jax / project" + ("" if c == "quiet" else " (quiet ratio / this)") for c in conditions]
    return markdown_table(headers, rows)


def contention(args: argparse.Namespace) -> None:
    """Time the cases quiet and beside ``--load`` busy processes, per thread variant; write OUT/contention.md / .json."""
    if os.environ.get("OMP_NUM_THREADS"):
        print(f"note: OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']} is set; the 'default' column uses it", flush=True)
    default_threads = torch.get_num_threads()
    chosen = choose_threads("auto", env={})  # the project's auto choice on this machine (no overrides)
    project = f"project auto ({chosen.count} thread{'s' if chosen.count != 1 else ''})"
    variants = {f"torch default ({default_threads} threads)": default_threads, project: chosen.count}
    if args.only_project:
        variants = {project: chosen.count}
    cases: dict[str, Callable[[], float]] = {}
    for n, k in args.sizes:
        call = m3g_call(n, k)
        cases[f"M3G fwd+bwd (n={n}, k={k})"] = lambda call=call: time_call(call, repeat=args.calls, warmup=1).median
    if not args.no_eeg:
        from bench_train import step_seconds  # the EEG demo's model and training step

        eeg_batch = torch.randn(16, 6, 3000, generator=torch.Generator().manual_seed(0))
        cases["EEG demo training step (n=16, k=6)"] = lambda: step_seconds(
            torch.get_num_threads(), args.steps, eeg_batch
        )
    ott = None
    if args.with_ott:
        ott = OttTimer(args.ott_venv, args.out, chosen.count, args.calls)
    conditions = ["quiet", *(f"{load} busy" for load in args.load)]
    seconds, ott_seconds = measure(args, cases, variants, conditions, ott)
    rows = []
    for case, by_variant in seconds.items():
        for variant, by_condition in by_variant.items():
            med = {c: statistics.median(by_condition[c]) for c in conditions}
            contended = [f"{med[c] * 1e3:.1f} ({med[c] / med['quiet']:.2f}x)" for c in conditions[1:]]
            rows.append([case, variant, f"{med['quiet'] * 1e3:.1f}", *contended])
    headers = ["case", "threads", "quiet ms", *(f"{c} ms (/ quiet)" for c in conditions[1:])]
    text = "\n".join([markdown_table(headers, rows), ""])
    if ott_seconds:
        text += "\n".join([ratio_table(seconds, ott_seconds, conditions), ""])
    text += "\n".join([f"load average at the end: {os.getloadavg()[0]:.1f}", machine_line(), command_line()])
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "contention.md").write_text(text + "\n")
    report = {"variants": variants, "load": args.load, "machine": machine_line(), "command": command_line()}
    (args.out / "contention.json").write_text(json.dumps({**report, "seconds": seconds, "ott": ott_seconds}, indent=1))


def measure(
    args: argparse.Namespace,
    cases: dict[str, Callable[[], float]],
    variants: dict[str, int],
    conditions: list[str],
    ott: OttTimer | None,
) -> tuple[dict, dict]:
    """``seconds[case][variant][condition]`` and ``ott[case][condition]``: one median per round."""
    seconds = {case: {variant: {c: [] for c in conditions} for variant in variants} for case in cases}
    ott_seconds = {f"M3G fwd+bwd (n={n}, k={k})": {c: [] for c in conditions} for n, k in args.sizes} if ott else {}
    print(machine_line(), flush=True)
    for round_index in range(args.rounds):
        for condition, load in zip(conditions, [0, *args.load]):
            with CompetingLoad(load):
                for case, fn in cases.items():
                    for variant, count in variants.items():
                        value = with_threads(count, fn)
                        seconds[case][variant][condition].append(value)
                        print(
                            f"round {round_index + 1} {condition:7s} {case} {variant}: {value * 1e3:.1f} ms", flush=True
                        )
                for n, k in args.sizes if ott else ():
                    value = ott.seconds(n, k)
                    ott_seconds[f"M3G fwd+bwd (n={n}, k={k})"][condition].append(value)
                    print(
                        f"round {round_index + 1} {condition:7s} ott-jax (n={n}, k={k}): {value * 1e3:.1f} ms",
                        flush=True,
                    )
    return seconds, ott_seconds


def parse_args() -> argparse.Namespace:
    """The options of the table and of ``--contention``; ``--sizes`` / ``--calls`` defaults depend on the mode."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for bench_m3g_cpu.md (contention.md)")
    parser.add_argument(
        "--sizes", nargs="+", default=None, help=f"n x k, e.g. 16x6 (default: {' '.join(f'{n}x{k}' for n, k in SIZES)})"
    )
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--paths", nargs="+", default=list(PATHS), choices=list(PATHS))
    parser.add_argument("--calls", type=int, default=None, help="timed calls per path (fresh inputs each; default 15)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed calls per path after the first")
    parser.add_argument("--cold", action="store_true", help="inductor compiles into a fresh cache folder")
    group = parser.add_argument_group("under contention (--contention)")
    group.add_argument("--contention", action="store_true", help="quiet vs beside busy processes (see above)")
    group.add_argument("--load", type=int, nargs="+", default=[1], help="busy processes per contended condition")
    group.add_argument("--steps", type=int, default=3, help="timed EEG training steps per round (median)")
    group.add_argument("--rounds", type=int, default=2, help="quiet and contended rounds, alternating")
    group.add_argument("--no-eeg", action="store_true", help="skip the EEG training step case")
    group.add_argument(
        "--only-project",
        action="store_true",
        help="time the project's choice only (torch's default is 5-100x slower on a loaded machine)",
    )
    group.add_argument("--with-ott", action="store_true", help="also time ott-jax's MMSinkhorn (its own venv)")
    group.add_argument("--ott-venv", type=Path, default=OTT_VENV, help="venv with jax + ott-jax (ott_m3g.py's default)")
    args = parser.parse_args()
    args.sizes = parse_sizes(args.sizes) if args.sizes else list(M3G_SHAPES if args.contention else SIZES)
    args.calls = args.calls or (5 if args.contention else 15)
    if min(args.load) < 1 or args.calls < 1 or args.steps < 1 or args.rounds < 1:
        parser.error("--load, --calls, --steps and --rounds must be >= 1")
    return args


def main() -> None:
    args = parse_args()
    if args.contention:
        contention(args)
        return
    numba_table(args)


def numba_table(args: argparse.Namespace) -> None:
    """The numba / eager / compiled table per size and solver setting, written to ``OUT/bench_m3g_cpu.md``."""
    torch.set_num_threads(1)  # the project's choice on <= 2 usable CPUs (multiview_app/threads.py)
    if args.cold:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench_m3g_cpu_inductor_")
    rows = []
    switch = _compile.SWITCH
    try:
        for n, k in args.sizes:
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
