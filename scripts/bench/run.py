"""Run one benchmark suite: every script of the suite in its own process, one after the other; each prints its
Markdown table and the machine line (``common.py``).

    python scripts/bench/run.py --list                 # the suites and their scripts
    python scripts/bench/run.py losses                 # loss head vs paper pseudocode, lightly, open_clip; memory
    python scripts/bench/run.py m3g --quick            # M3G vs its references (smoke sizes where a script has them)
    python scripts/bench/run.py data --out runs/bench  # scripts that write files put them under OUT/<script>/
    python scripts/bench/run.py train --write-docs     # also each script's tables into docs/benchmarks.md

``--write-docs [PAGE]``: every script that succeeds gets its printed Markdown tables, the command and the machine written
between its two marker lines in docs/benchmarks.md (``<!-- bench:SCRIPT -->`` ... ``<!-- /bench:SCRIPT -->``,
``common.py``); nothing else on the page changes. Single scripts keep their own options: ``python scripts/bench/<script>.py --help``. Exit status: 0 when every
script succeeded, else 1 (the failed scripts are named).
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from common import DOCS, host_line, markdown_tables, section_body, write_docs_section

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Bench:
    """One run of a script in a suite: its file stem, what it answers, the options it needs and the key of its
    section in docs/benchmarks.md (default: the file stem; a script run with several setups has one per setup)."""

    script: str
    answers: str
    needs_out: bool = False  # the script requires --out FOLDER
    has_quick: bool = False  # the script has a --quick smoke mode
    args: tuple[str, ...] = field(default=())
    section: str = ""

    @property
    def key(self) -> str:
        """The marker key of its docs section (``<!-- bench:KEY -->``)."""
        return self.section or self.script


SUITES: dict[str, list[Bench]] = {
    "losses": [
        Bench(
            "bench_losses", "loss head fwd+bwd vs the papers' pseudocode and lightly; the chunked path", has_quick=True
        ),
        Bench("bench_clip", "image-text InfoNCE vs open_clip's ClipLoss; tokenization cost", has_quick=True),
        Bench("bench_mveb_memory", "MVEB chunked vs dense: peak memory and time at large n*k", needs_out=True),
    ],
    "m3g": [
        Bench("bench_m3g", "M3G vs the materialized reference (ott-jax with --with-ott)", has_quick=True),
        Bench(
            "bench_m3g_cpu",
            "M3G on CPU: numba kernels vs the eager and compiled sweep blocks per (n, k), the numba dispatch table's ratios",
            needs_out=True,
        ),
        Bench(
            "bench_m3g",
            "MM-Sinkhorn warm start / Anderson / diagonal init inside training",
            args=("--in-training",),
            section="bench_m3g_warm",
        ),
    ],
    "train": [
        Bench("bench_train", "training step rate and its data / encoder / loss split"),
        Bench("bench_knn_monitor", "kNN monitor overhead in the training loop"),
        Bench("bench_tune", "per-trial overhead of mvapp tune, trials per hour"),
        Bench(
            "bench_m3g_cpu",
            "torch's default threads vs the project's choice beside a busy process",
            needs_out=True,
            args=("--contention",),
            section="bench_cpu_contention",
        ),
        Bench("bench_cli_startup", "mvapp --help start-up vs import torch"),
        Bench(
            "bench_train",
            "PSG modalities as views: training step vs the EEG demo's step (goal <= 1.5x)",
            args=("--setup", "psg-modalities"),
            section="bench_psg_modalities",
        ),
    ],
    "data": [
        Bench("bench_augment", "batched image augmentation vs a per-image torchvision loop"),
        Bench("bench_eeg", "EEG prepare vs braindecode's pipeline; loader throughput"),
        Bench("bench_eeg_encoders", "parameters and training steps/s of every EEG encoder, ratio vs conv"),
        Bench(
            "bench_train",
            "where the EEG demo's time goes; torch threads; eval batch size",
            args=("--setup", "eeg-demo"),
            section="bench_eeg_demo",
        ),
        Bench(
            "bench_prepare_memory",
            "peak RSS of prepare --modalities at 5 vs 40 whole-PSG nights; cache size per night",
            has_quick=True,
        ),
        Bench("bench_domains", "domain-tuple loader vs the training step"),
        Bench("bench_export", "mvapp export throughput and peak memory"),
    ],
    "gpu": [
        Bench(
            "bench_gpu",
            "on a GPU: M3G per solver loop vs ott-jax on fresh embeddings, kernels and host syncs "
            "per call, EEG demo steps/s, peak memory",
            needs_out=True,
            has_quick=True,
        ),
    ],
}


def command(bench: Bench, quick: bool, out: Path | None) -> list[str]:
    """The argv that runs ``bench`` with this interpreter."""
    script = HERE / f"{bench.script}.py"
    shown = script.relative_to(Path.cwd()) if script.is_relative_to(Path.cwd()) else script
    argv = [sys.executable, str(shown), *bench.args]
    if quick and bench.has_quick:
        argv.append("--quick")
    if bench.needs_out:
        argv += ["--out", str((out or Path("runs") / "bench") / bench.key)]
    return argv


def run_script(argv_run: list[str]) -> tuple[int, str]:
    """Run one script, its output streamed to this terminal as it comes: ``(exit status, what it printed)``."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with subprocess.Popen(argv_run, stdout=subprocess.PIPE, text=True, env=env) as process:
        assert process.stdout is not None
        printed = []
        for line in process.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            printed.append(line)
    return process.returncode, "".join(printed)


def write_tables(bench: Bench, shown: str, printed: str, docs: Path) -> bool:
    """``printed``'s tables into ``bench``'s marked section of ``docs``; False (with a line on stderr) when the
    script printed no table or the page lacks its markers."""
    machine = next((line.strip() for line in printed.splitlines() if " usable CPUs, load " in line), host_line())
    try:
        write_docs_section(bench.key, section_body(shown, machine, markdown_tables(printed)), docs)
    except ValueError as error:
        print(f"{bench.key}: docs not written: {error}", file=sys.stderr)
        return False
    print(f"wrote the {bench.key} tables into {docs}")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("suite", nargs="?", choices=[*SUITES, "all"], help="the suite to run")
    parser.add_argument("--list", action="store_true", help="print the suites and their scripts, run nothing")
    parser.add_argument("--quick", action="store_true", help="smoke sizes for the scripts that have them")
    parser.add_argument("--out", type=Path, help="folder for the scripts that write files (default runs/bench)")
    parser.add_argument(
        "--write-docs",
        nargs="?",
        const=DOCS,
        type=Path,
        metavar="PAGE",
        help=f"write each script's tables between its markers in PAGE (without PAGE: {DOCS.relative_to(DOCS.parents[1])})",
    )
    args = parser.parse_args(argv)
    if args.list or args.suite is None:
        for name, benches in SUITES.items():
            print(f"{name}:")
            for bench in benches:
                print(f"  {bench.key:<22} {bench.answers}")
        return 0 if args.list else 2
    names = list(SUITES) if args.suite == "all" else [args.suite]
    failed = []
    for name in names:
        for bench in SUITES[name]:
            argv_run = command(bench, args.quick, args.out)
            shown = " ".join(["python", *(shlex.quote(a) for a in argv_run[1:])])
            print(f"\n## {name}: {bench.key} — {bench.answers}\n$ {shown}", flush=True)
            status, printed = run_script(argv_run)
            if status != 0 or (args.write_docs and not write_tables(bench, shown, printed, args.write_docs)):
                failed.append(bench.key)
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
