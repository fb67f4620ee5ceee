"""A small prepared EEG window cache written directly (no readers), shared by the EEG and tune tests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from multiview_app.data.eeg.cache import CACHE_FORMAT

CHANNELS = ["F3-M2", "C3-M2", "O1-M2", "O2-M1"]


def fake_cache(folder: Path, subjects: int = 4, windows: int = 6) -> Path:
    """A valid cache of ``subjects`` subjects (subject s, recording r<s>) with ``windows`` windows
    ``(len(CHANNELS), 3000)`` each; labels cycle 0..4; the first sample of every channel is s."""
    (folder / "windows").mkdir(parents=True)
    recordings = []
    for s in range(subjects):
        data = np.random.default_rng(s).standard_normal((windows, len(CHANNELS), 3000)).astype(np.float32)
        data[:, :, 0] = s  # marks the subject in the first sample of every channel
        np.save(folder / "windows" / f"r{s}.npy", data)
        labels = [i % 5 for i in range(windows)]
        recordings.append(
            {
                "recording": f"r{s}",
                "subject": f"S{s}",
                "file": f"windows/r{s}.npy",
                "n_windows": windows,
                "labels": labels,
                "epochs": list(range(windows)),
                "sources": [],
                "counts": {},
            }
        )
    manifest = {
        "format": CACHE_FORMAT,
        "dataset": "physionet2018",
        "options": {},
        "dtype": "float32",
        "channels": CHANNELS,
        "sfreq": 100.0,
        "window_seconds": 30.0,
        "stages": ["W", "N1", "N2", "N3", "REM"],
        "recordings": recordings,
        "duplicates": [],
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def write_dreams_excerpt(
    folder: Path,
    name: str,
    sfreq: float,
    labels5: list[int],
    derivation: str = "C3-A1",
    extra_samples: int = 0,
    seed: int = 0,
) -> tuple[Path, Path]:
    """A DREAMS-format excerpt (``<name>.txt``: ``[derivation]`` then one microvolt sample per line, 5 s
    per label of ``labels5`` plus ``extra_samples``; ``Hypnogram_<name>.txt``) with a 10-Hz rhythm whose
    amplitude follows the label (so windows differ). Returns (signal file, hypnogram)."""
    folder.mkdir(parents=True, exist_ok=True)
    per_label = int(round(5 * sfreq))
    amplitude = np.repeat(np.asarray(labels5, dtype=np.float64) + 3.0, per_label)
    amplitude = np.concatenate([amplitude, np.full(extra_samples, 3.0)])
    t = np.arange(amplitude.size) / sfreq
    rng = np.random.default_rng(seed)
    samples = amplitude * np.sin(2 * np.pi * 10 * t) + rng.standard_normal(amplitude.size)
    signal = folder / f"{name}.txt"
    signal.write_text(f"[{derivation}]\n" + "".join(f"{x:11.4f}\n" for x in samples))
    hypnogram = folder / f"Hypnogram_{name}.txt"
    hypnogram.write_text("[Hypnogram]\n" + "".join(f"{v}\n" for v in labels5))
    return signal, hypnogram


def write_sha256sums(folder: Path, names: list[str]) -> Path:
    """``SHA256SUMS`` of ``names`` in ``folder`` (``<hex>  <name>`` lines, as sha256sum writes) and of the
    hypnogram beside each listed excerpt (the card's sums of the real hypnograms would refuse these)."""
    import hashlib

    hypnograms = [f"Hypnogram_{Path(n).stem}.txt" for n in names if Path(n).stem.startswith("excerpt")]
    names = [*names, *dict.fromkeys(h for h in hypnograms if (folder / h).is_file() and h not in names)]
    lines = [f"{hashlib.sha256((folder / n).read_bytes()).hexdigest()}  {n}\n" for n in names]
    path = folder / "SHA256SUMS"
    path.write_text("".join(lines))
    return path


REAL_PSG_ENV = "MVAPP_REAL_PSG"
"""Environment variable naming the folder with the real recordings (``dreams-spindles/``,
``sleep-edf-hypnograms/``); default ``<repository>/../shared/real-psg``."""


def real_psg(subfolder: str) -> Path:
    """``$MVAPP_REAL_PSG/<subfolder>`` (default ``<repository>/../shared/real-psg``); skips the test, naming
    the path, when absent (a fresh clone has no real data; it is never copied into the repository)."""
    import os

    import pytest

    root = Path(os.environ.get(REAL_PSG_ENV) or Path(__file__).resolve().parents[1].parent / "shared" / "real-psg")
    path = root / subfolder
    if not path.is_dir():
        pytest.skip(f"real recordings absent: {path} not found (set {REAL_PSG_ENV} to the folder holding {subfolder}/)")
    return path


# ----------------------------------------------------------------------------- whole-PSG nights, signal by signal

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
