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
