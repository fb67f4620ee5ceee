"""CPU loss calls and EEG training steps on a quiet vs a contended CPU, torch's default intra-op threads vs the
project's choice (multiview_app/threads.py); docs/benchmarks.md "CPU under contention".

    python scripts/bench/bench_cpu_contention.py --out runs/bench_cpu_contention [--load 1 --repeat 5 --steps 3]

The competing load is started by this script: ``--load`` Python busy loops in subprocesses, pinned to this
process's CPUs (``os.sched_setaffinity``), running only during the contended rounds. Cases: M3G forward +
backward (float32, epsilon 0.2, tol 1e-3, d = 64, L2-normalized embeddings, the same tensors for every variant)
at (n, k) = (64, 4), (16, 6), (128, 3), and one optimizer step of the EEG demo's model and loss
(``scripts/bench/bench_eeg_demo.py``: conv width 32, M3G k = 6, n = 16, Anderson 16). Rounds alternate
quiet / contended (``--rounds`` of each); each cell is the median over rounds of each round's median.
Prints a Markdown table (contended / quiet ratio per variant; goal: <= 1.5x for the project's choice) and writes it
with a JSON copy to ``--out``. Run it with ``OMP_NUM_THREADS`` unset, or the "default" column is not torch's default.
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

import torch

from multiview_app.bench import command_line, machine_line, markdown_table, time_call
from multiview_app.losses import build_loss
from multiview_app.threads import choose_threads

M3G_SHAPES: tuple[tuple[int, int], ...] = ((64, 4), (16, 6), (128, 3))
# a busy loop that ends when this benchmark does (its parent changes), even if the benchmark is killed
BUSY_LOOP = (
    "import os\nparent = os.getppid()\nwhile os.getppid() == parent:\n    for _ in range(1_000_000):\n        pass\n"
)


def _eeg_demo_bench() -> ModuleType:
    """``scripts/bench/bench_eeg_demo.py`` (the demo model and its training step), loaded from beside this file."""
    spec = importlib.util.spec_from_file_location("bench_eeg_demo", Path(__file__).with_name("bench_eeg_demo.py"))
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


def m3g_call(n: int, k: int, d: int = 64) -> Callable[[], None]:
    """One M3G forward + backward on fixed ``(n, k, d)`` embeddings (seed 0)."""
    generator = torch.Generator().manual_seed(0)
    base = torch.nn.functional.normalize(torch.randn(n, k, d, generator=generator), dim=-1)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for contention.md and contention.json")
    parser.add_argument("--load", type=int, default=1, help="competing busy processes in the contended rounds")
    parser.add_argument("--repeat", type=int, default=5, help="timed M3G calls per round (median)")
    parser.add_argument("--steps", type=int, default=3, help="timed EEG training steps per round (median)")
    parser.add_argument("--rounds", type=int, default=2, help="quiet and contended rounds, alternating")
    parser.add_argument(
        "--only-project",
        action="store_true",
        help="time the project's choice only (torch's default is 5-100x slower on a loaded machine)",
    )
    args = parser.parse_args()
    if args.load < 1 or args.repeat < 1 or args.steps < 1 or args.rounds < 1:
        raise SystemExit("--load, --repeat, --steps and --rounds must be >= 1")
    if os.environ.get("OMP_NUM_THREADS"):
        print(f"note: OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']} is set; the 'default' column uses it", flush=True)
    default_threads = torch.get_num_threads()
    chosen = choose_threads("auto", env={})  # the project's auto choice on this machine (no overrides)
    variants = {
        f"torch default ({default_threads} threads)": default_threads,
        f"project auto ({chosen.count} thread{'s' if chosen.count != 1 else ''})": chosen.count,
    }
    if args.only_project:
        variants = {name: count for name, count in variants.items() if name.startswith("project")}
    eeg = _eeg_demo_bench()
    eeg_batch = torch.randn(16, 6, 3000, generator=torch.Generator().manual_seed(0))
    cases: dict[str, Callable[[], float]] = {}
    for n, k in M3G_SHAPES:
        call = m3g_call(n, k)
        cases[f"M3G fwd+bwd (n={n}, k={k})"] = lambda call=call: time_call(call, repeat=args.repeat, warmup=1).median
    cases["EEG demo training step (n=16, k=6)"] = lambda: eeg.step_seconds(
        torch.get_num_threads(), args.steps, eeg_batch
    )
    # seconds[case][variant][condition] -> one median per round
    seconds: dict[str, dict[str, dict[str, list[float]]]] = {
        case: {variant: {"quiet": [], "contended": []} for variant in variants} for case in cases
    }
    print(machine_line(), flush=True)
    print(f"{chosen.header()}; competing load: {args.load} busy process(es) on the same CPUs", flush=True)
    for round_index in range(args.rounds):
        for condition in ("quiet", "contended"):
            load = CompetingLoad(args.load) if condition == "contended" else None
            if load is not None:
                load.__enter__()
            try:
                for case, fn in cases.items():
                    for variant, count in variants.items():
                        value = with_threads(count, fn)
                        seconds[case][variant][condition].append(value)
                        print(
                            f"round {round_index + 1} {condition:9s} {case} {variant}: {value * 1e3:.1f} ms", flush=True
                        )
            finally:
                if load is not None:
                    load.__exit__()
    rows = []
    for case, by_variant in seconds.items():
        for variant, by_condition in by_variant.items():
            quiet, contended = (statistics.median(by_condition[c]) for c in ("quiet", "contended"))
            rows.append([case, variant, f"{quiet * 1e3:.1f}", f"{contended * 1e3:.1f}", f"{contended / quiet:.2f}x"])
    table = markdown_table(
        ["case", "threads", "quiet ms", f"contended ms ({args.load} busy)", "contended / quiet"], rows
    )
    text = "\n".join([table, "", machine_line(), command_line()])
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "contention.md").write_text(text + "\n")
    (args.out / "contention.json").write_text(
        json.dumps(
            {
                "variants": variants,
                "load": args.load,
                "machine": machine_line(),
                "command": command_line(),
                "seconds": seconds,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
