"""CPU loss calls and EEG training steps on a quiet vs a contended CPU, torch's default intra-op threads vs the
project's choice (multiview_app/threads.py), and M3G against ott-jax under the same load; docs/benchmarks.md "CPU
under contention".

    python scripts/bench/bench_cpu_contention.py --out runs/bench_cpu_contention [--load 1 2 --repeat 5 --steps 3]
        [--with-ott --ott-venv /path/to/venv]

The competing load is started by this script: ``--load`` Python busy loops in subprocesses (one contended condition
per count given), pinned to this process's CPUs (``os.sched_setaffinity``), running only during the contended
rounds. Cases: M3G forward + backward (float32, epsilon 0.2, tol 1e-3, d = 64, L2-normalized embeddings, the same
tensors for every variant) at ``--shapes`` (n, k), and one optimizer step of the EEG demo's model and loss
(``scripts/bench/bench_train.py --setup eeg-demo``: conv width 32, M3G k = 6, n = 16, Anderson 16). Rounds alternate quiet /
contended (``--rounds`` of each); each cell is the median over rounds of each round's median. With ``--with-ott``
every condition also times ott-jax's ``MMSinkhorn`` fwd+bwd on the same embeddings (a subprocess of the ott venv,
``scripts/bench/bench_m3g.py``'s script; one XLA thread when the project runs one torch thread) and prints the
ott-jax / project ratio per condition with its change from the quiet ratio (goal: within 1.5x).
Prints Markdown tables and writes them with a JSON copy to ``--out``. Run it with ``OMP_NUM_THREADS`` unset, or the
"default" column is not torch's default.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import torch
from common import command_line, embeddings, machine_line, markdown_table, time_call

from multiview_app.losses import build_loss
from multiview_app.threads import choose_threads

M3G_SHAPES: tuple[tuple[int, int], ...] = ((64, 4), (16, 6), (128, 3))
# a busy loop that ends when this benchmark does (its parent changes), even if the benchmark is killed
BUSY_LOOP = (
    "import os\nparent = os.getppid()\nwhile os.getppid() == parent:\n    for _ in range(1_000_000):\n        pass\n"
)


def _sibling(name: str) -> ModuleType:
    """``scripts/bench/<name>.py`` (e.g. the EEG demo's model and training step), loaded from beside this file."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
        self.bench = _sibling("bench_m3g")
        python = self.bench.ensure_ott_venv(venv)
        if python.startswith("!"):
            raise SystemExit(f"--with-ott: {python[1:]}")
        self.python, self.threads, self.repeat, self.folder = python, threads, repeat, out / "ott_inputs"
        self.folder.mkdir(parents=True, exist_ok=True)

    def seconds(self, n: int, k: int) -> float:
        """Median seconds of ``repeat`` timed calls after jit and one warm-up (in one subprocess)."""
        path = self.folder / f"z_{n}_{k}.npy"
        np.save(path, m3g_inputs(n, k).numpy())
        found = self.bench.run_ott(self.python, path, 0.2, self.repeat, 60.0, self.threads, 900.0)
        if "error" in found:
            raise SystemExit(f"ott-jax at (n={n}, k={k}): {found['error']}")
        return found["time"]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for contention.md and contention.json")
    parser.add_argument("--load", type=int, nargs="+", default=[1], help="busy processes per contended condition")
    parser.add_argument("--shapes", nargs="+", default=[f"{n}x{k}" for n, k in M3G_SHAPES], help="M3G n x k")
    parser.add_argument("--repeat", type=int, default=5, help="timed M3G calls per round (median)")
    parser.add_argument("--steps", type=int, default=3, help="timed EEG training steps per round (median)")
    parser.add_argument("--rounds", type=int, default=2, help="quiet and contended rounds, alternating")
    parser.add_argument("--no-eeg", action="store_true", help="skip the EEG training step case")
    parser.add_argument(
        "--only-project",
        action="store_true",
        help="time the project's choice only (torch's default is 5-100x slower on a loaded machine)",
    )
    parser.add_argument("--with-ott", action="store_true", help="also time ott-jax's MMSinkhorn (its own venv)")
    parser.add_argument("--ott-venv", type=Path, default=None, help="venv with jax + ott-jax (bench_m3g.py's default)")
    args = parser.parse_args()
    if min(args.load) < 1 or args.repeat < 1 or args.steps < 1 or args.rounds < 1:
        raise SystemExit("--load, --repeat, --steps and --rounds must be >= 1")
    args.shapes = [tuple(int(part) for part in shape.lower().split("x")) for shape in args.shapes]
    return args


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


def main() -> None:
    args = parse_args()
    if os.environ.get("OMP_NUM_THREADS"):
        print(f"note: OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']} is set; the 'default' column uses it", flush=True)
    default_threads = torch.get_num_threads()
    chosen = choose_threads("auto", env={})  # the project's auto choice on this machine (no overrides)
    project = f"project auto ({chosen.count} thread{'s' if chosen.count != 1 else ''})"
    variants = {f"torch default ({default_threads} threads)": default_threads, project: chosen.count}
    if args.only_project:
        variants = {project: chosen.count}
    cases: dict[str, Callable[[], float]] = {}
    for n, k in args.shapes:
        call = m3g_call(n, k)
        cases[f"M3G fwd+bwd (n={n}, k={k})"] = lambda call=call: time_call(call, repeat=args.repeat, warmup=1).median
    if not args.no_eeg:
        eeg, eeg_batch = (
            _sibling("bench_train"),
            torch.randn(16, 6, 3000, generator=torch.Generator().manual_seed(0)),
        )
        cases["EEG demo training step (n=16, k=6)"] = lambda: eeg.step_seconds(
            torch.get_num_threads(), args.steps, eeg_batch
        )
    ott = None
    if args.with_ott:
        venv = args.ott_venv or _sibling("bench_m3g").OTT_VENV
        ott = OttTimer(venv, args.out, chosen.count, args.repeat)
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
    ott_seconds = {f"M3G fwd+bwd (n={n}, k={k})": {c: [] for c in conditions} for n, k in args.shapes} if ott else {}
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
                for n, k in args.shapes if ott else ():
                    value = ott.seconds(n, k)
                    ott_seconds[f"M3G fwd+bwd (n={n}, k={k})"][condition].append(value)
                    print(
                        f"round {round_index + 1} {condition:7s} ott-jax (n={n}, k={k}): {value * 1e3:.1f} ms",
                        flush=True,
                    )
    return seconds, ott_seconds


if __name__ == "__main__":
    main()
