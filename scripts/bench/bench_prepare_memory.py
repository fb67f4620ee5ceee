"""Peak memory of ``mvapp data prepare --modalities`` against the number of whole-PSG nights.

``prepare`` holds one recording at a time, so its peak resident memory must not grow with the number of
nights: the goal is peak(40 nights) <= 1.1 x peak(5 nights). Writes PhysioNet-2018-format nights with all
13 signals at 200 Hz (six EEG derivations, E1-M2, Chin1-Chin2, ABD, CHEST, AIRFLOW, SaO2 in %, ECG in mV;
stage notes and events: ``mvapp data synth-psg --signals psg``), then prepares the first N of them in a fresh subprocess per N (peak RSS from
``resource.getrusage``), and prints one table row per N with the cache size per night::

    python scripts/bench/bench_prepare_memory.py --nights 5 40 --hours 8 --work runs/bench_prepare_memory
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from multiview_app.data.eeg.synth import synth_psg

PREPARE = """
import json, resource, sys, time
from multiview_app.data.eeg.cache import prepare
from multiview_app.data.eeg.preprocess import PrepareOptions
options = PrepareOptions(channels=["F3-M2", "F4-M1", "C3-M2", "C4-M1", "O1-M2", "O2-M1"])
start = time.perf_counter()
summary = prepare("physionet2018", sys.argv[1], sys.argv[2], options, progress=False, modalities=sys.argv[3])
seconds = time.perf_counter() - start
peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"prepared": len(summary["prepared"]), "peak_mib": peak_mib, "seconds": seconds}))
"""


def measure(source: Path, out: Path, modalities: str) -> dict:
    """Prepare ``source`` into a new ``out`` in a fresh Python process; its peak RSS (MiB) and time."""
    done = subprocess.run(
        [sys.executable, "-c", PREPARE, str(source), str(out), modalities], check=True, capture_output=True, text=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def cache_bytes(out: Path) -> dict[str, int]:
    """Bytes of each group's window files in cache ``out`` (summed over recordings)."""
    sizes: dict[str, int] = {}
    for path in (out / "windows").rglob("*.npy"):
        sizes[path.stem] = sizes.get(path.stem, 0) + path.stat().st_size
    return sizes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", type=int, nargs="+", default=[5, 40], help="numbers of nights to prepare")
    parser.add_argument("--hours", type=float, default=8.0, help="length of each synthetic night")
    parser.add_argument("--modalities", default="six", help="--modalities of prepare")
    parser.add_argument("--work", type=Path, default=Path("runs/bench_prepare_memory"), help="nights and caches")
    parser.add_argument("--quick", action="store_true", help="smoke sizes: 1 and 2 nights of 20 min")
    args = parser.parse_args(argv)
    if args.quick:
        args.nights, args.hours = [1, 2], 1 / 3
    nights = args.work / "nights"
    started = time.perf_counter()
    if len(list(nights.glob("*.hea"))) < max(args.nights):
        synth_psg(nights, max(args.nights), 1, "physionet2018", args.hours, signals="psg", progress=False, workers=2)
    records = sorted(path.stem for path in nights.glob("*.hea"))
    print(f"{max(args.nights)} nights of {args.hours:g} h ready in {time.perf_counter() - started:.0f} s")
    print("| nights | peak RSS (MiB) | prepare (s) | cache per night (MiB) |")
    print("|---:|---:|---:|---:|")
    for count in args.nights:
        source = args.work / f"source-{count}"
        source.mkdir(parents=True, exist_ok=True)
        for file in (file for record in records[:count] for file in nights.glob(f"{record}[.-]*")):
            if not (source / file.name).exists():
                (source / file.name).symlink_to(file.resolve())
        out = args.work / f"cache-{count}-{time.time_ns()}"
        result = measure(source, out, args.modalities)
        sizes = cache_bytes(out)
        per_night = sum(sizes.values()) / max(result["prepared"], 1) / 2**20
        print(f"| {count} | {result['peak_mib']:.0f} | {result['seconds']:.0f} | {per_night:.1f} |")
        print(
            f"  per group, MiB per night: {', '.join(f'{g} {b / count / 2**20:.1f}' for g, b in sorted(sizes.items()))}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
