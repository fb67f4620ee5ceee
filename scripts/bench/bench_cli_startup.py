"""Start-up time of ``mvapp --help`` / ``--version`` (no torch import) against references measured the
same way in fresh processes: the bare interpreter, ``import torch`` and ``mvapp config show`` (which
needs the registries, hence torch), and ``config show`` with torchvision imported eagerly (what every
``mvapp`` process paid before torchvision was imported only where an image transform needs it).

Usage: ``python scripts/bench/bench_cli_startup.py --repeats 7``. Prints a markdown table (median wall
seconds of fresh ``python`` processes, interleaved) and the ratios to the ``import torch`` row.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = {
    "python -c pass (interpreter)": ["-c", "pass"],
    "mvapp --version": ["-m", "multiview_app.cli", "--version"],
    "mvapp --help": ["-m", "multiview_app.cli", "--help"],
    "python -c 'import torch'": ["-c", "import torch"],
    "mvapp config show (imports torch)": [
        "-m",
        "multiview_app.cli",
        "config",
        "show",
        "--config",
        str(ROOT / "configs" / "digits_m3g.yaml"),
    ],
    # the same command with torchvision imported first, as every mvapp process did before the image
    # augmentations imported it lazily (torchvision.ops pulls in torch._dynamo)
    "mvapp config show + eager torchvision (before)": [
        "-c",
        "import sys, torchvision.transforms.v2.functional, torchvision.ops; from multiview_app.cli import main; "
        f"sys.exit(main(['config', 'show', '--config', {str(ROOT / 'configs' / 'digits_m3g.yaml')!r}]))",
    ],
}


def wall(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, *args], check=True, capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for argv in COMMANDS.values():  # warm the file cache once
        wall(argv)
    for _ in range(args.repeats):
        for name, argv in COMMANDS.items():
            times[name].append(wall(argv))
    torch_median = statistics.median(times["python -c 'import torch'"])
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; median of {args.repeats} fresh processes")
    print("| command | median s | min s | / import torch |")
    print("|---|---|---|---|")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"| {name} | {median:.3f} | {min(values):.3f} | {median / torch_median:.2f} |")
    before = statistics.median(times["mvapp config show + eager torchvision (before)"])
    after = statistics.median(times["mvapp config show (imports torch)"])
    print(f"config show: eager torchvision / lazy = {before / after:.2f} ({before - after:.2f} s saved per process)")


if __name__ == "__main__":
    main()
