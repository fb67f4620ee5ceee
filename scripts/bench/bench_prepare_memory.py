"""Peak memory of ``mvapp data prepare --modalities`` against the number of whole-PSG nights.

``prepare`` holds one recording at a time, so its peak resident memory must not grow with the number of
nights: the goal is peak(40 nights) <= 1.1 x peak(5 nights). Writes PhysioNet-2018-format nights with all
13 signals at 200 Hz (six EEG derivations, E1-M2, Chin1-Chin2, ABD, CHEST, AIRFLOW, SaO2 in %, ECG in mV;
stage notes in ``.arousal``), then prepares the first N of them in a fresh subprocess per N (peak RSS from
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

import numpy as np

SIGNALS = {  # PhysioNet 2018 order: label -> (unit, kind of synthetic signal)
    "F3-M2": ("uV", "eeg"),
    "F4-M1": ("uV", "eeg"),
    "C3-M2": ("uV", "eeg"),
    "C4-M1": ("uV", "eeg"),
    "O1-M2": ("uV", "eeg"),
    "O2-M1": ("uV", "eeg"),
    "E1-M2": ("uV", "eog"),
    "Chin1-Chin2": ("uV", "emg"),
    "ABD": ("NU", "resp"),
    "CHEST": ("NU", "resp"),
    "AIRFLOW": ("NU", "resp"),
    "SaO2": ("%", "spo2"),
    "ECG": ("mV", "ecg"),
}
RANGES = {"eeg": 1000.0, "eog": 1000.0, "emg": 1000.0, "resp": 10.0, "spo2": 110.0, "ecg": 10.0}
"""Physical range +-R of each kind of signal in the written header (fixed ADC gains, as a recorder has:
a signal at +-R sits at the limits of the 16-bit format, i.e. is saturated)."""
STAGE_NOTES = ("W", "N1", "N2", "N3", "R")
EPOCH = 30.0


def synthetic_signal(kind: str, stages: np.ndarray, fs: float, rng: np.random.Generator) -> np.ndarray:
    """One channel ``(n,)`` of ``stages`` 30-s epochs at ``fs``: EEG whose amplitude follows the stage,
    EOG / EMG noise, breathing at 0.25 Hz, SaO2 around 96 %, ECG pulses at 1.1 Hz."""
    n = int(stages.size * EPOCH * fs)
    t = np.arange(n) / fs
    per_sample = np.repeat(stages, int(EPOCH * fs))
    if kind == "eeg":
        return (10.0 + 15.0 * per_sample) * np.sin(2 * np.pi * (10.0 - 2.0 * per_sample) * t) + rng.normal(0, 5, n)
    if kind in ("eog", "emg"):
        return rng.normal(0, 20.0 if kind == "eog" else 8.0, n)
    if kind == "resp":
        return np.sin(2 * np.pi * 0.25 * t + rng.uniform(0, np.pi)) + rng.normal(0, 0.05, n)
    if kind == "spo2":
        return np.round(96.0 + np.sin(2 * np.pi * t / 600.0) + rng.normal(0, 0.3, n))
    return 1.0 * (np.sin(2 * np.pi * 1.1 * t) > 0.97) + rng.normal(0, 0.02, n)  # ecg in mV


def write_psg_night(
    folder: Path,
    record: str,
    minutes: float,
    seed: int,
    fs: float = 200.0,
    edit: dict[str, np.ndarray] | None = None,
    rename: dict[str, str] | None = None,
) -> Path:
    """A WFDB record ``folder/record`` (``.hea``, ``.dat``, ``.arousal`` with a stage note per epoch) of
    ``minutes`` with the 13 PhysioNet 2018 signals; ``edit``: label -> replacement samples (a flat or a
    switched-off channel); ``rename``: label -> label written in the header. Returns the record path."""
    import wfdb

    rng = np.random.default_rng(seed)
    stages = np.minimum(np.arange(int(minutes * 60 / EPOCH)) // 4 % 6, 4)  # W N1 N2 N3 R R, 2 min each
    signals = {label: synthetic_signal(kind, stages, fs, rng) for label, (_, kind) in SIGNALS.items()}
    signals.update(edit or {})
    names = [(rename or {}).get(label, label) for label in SIGNALS]
    folder.mkdir(parents=True, exist_ok=True)
    ranges = [RANGES[kind] for _, kind in SIGNALS.values()]
    gains = [32767.0 / r for r in ranges]
    digital = np.empty((signals["F3-M2"].size, len(SIGNALS)), dtype="<i2")  # 16-bit interleaved, as wrsamp writes
    for column, (x, gain) in enumerate(zip(signals.values(), gains)):
        digital[:, column] = np.clip(np.round(x * gain), -32767, 32767)
    digital.tofile(folder / f"{record}.dat")
    wfdb.Record(
        record_name=record,
        n_sig=len(SIGNALS),
        fs=fs,
        sig_len=digital.shape[0],
        file_name=[f"{record}.dat"] * len(SIGNALS),
        fmt=["16"] * len(SIGNALS),
        adc_gain=gains,
        baseline=[0] * len(SIGNALS),
        units=[unit for unit, _ in SIGNALS.values()],
        sig_name=names,
        adc_res=[16] * len(SIGNALS),
        adc_zero=[0] * len(SIGNALS),
        init_value=[int(v) for v in digital[0]],
        checksum=[int(v) for v in digital.sum(axis=0, dtype=np.int64) % 65536],
        block_size=[0] * len(SIGNALS),
        comments=[f"subject: S{seed:04d}"],
    ).wrheader(write_dir=str(folder))
    change = np.flatnonzero(np.r_[True, stages[1:] != stages[:-1]])
    samples = (change * EPOCH * fs).astype(np.int64)
    wfdb.wrann(
        record,
        "arousal",
        samples,
        symbol=["+" if s == 0 else '"' for s in samples],
        aux_note=[STAGE_NOTES[stages[i]] for i in change],
        write_dir=str(folder),
    )
    return folder / record


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
    for i in range(max(args.nights)):
        if not (nights / f"tr{i:02d}" / f"tr00-{i:04d}.hea").exists():
            write_psg_night(nights / f"tr{i:02d}", f"tr00-{i:04d}", args.hours * 60, seed=i)
    print(f"{max(args.nights)} nights of {args.hours:g} h ready in {time.perf_counter() - started:.0f} s")
    print("| nights | peak RSS (MiB) | prepare (s) | cache per night (MiB) |")
    print("|---:|---:|---:|---:|")
    for count in args.nights:
        source = args.work / f"source-{count}"
        source.mkdir(parents=True, exist_ok=True)
        for i in range(count):
            (source / f"tr{i:02d}").mkdir(exist_ok=True)
            for file in (nights / f"tr{i:02d}").iterdir():
                link = source / f"tr{i:02d}" / file.name
                if not link.exists():
                    link.symlink_to(file.resolve())
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
