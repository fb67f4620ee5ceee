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
        recordings.append({"recording": f"r{s}", "subject": f"S{s}", "file": f"windows/r{s}.npy", "n_windows": windows,
                           "labels": labels, "epochs": list(range(windows)), "sources": [], "counts": {}})
    manifest = {"format": CACHE_FORMAT, "dataset": "physionet2018", "options": {}, "dtype": "float32",
                "channels": CHANNELS, "sfreq": 100.0, "window_seconds": 30.0, "stages": ["W", "N1", "N2", "N3", "REM"],
                "recordings": recordings, "duplicates": []}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder
