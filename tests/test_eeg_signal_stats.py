"""Per-stage signal statistics (``data/eeg/signal_stats.py``) on signals whose answers are known, the
DREAMS spindle-scoring reader, and ``scripts/compare_eeg_signals.py`` on the real DREAMS excerpts
(skipped, naming the path, when ``$MVAPP_REAL_PSG`` is absent): output shape and ranges, not values."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from multiview_app.data.eeg.dreams import read_spindle_scoring
from multiview_app.data.eeg.signal_stats import events_per_minute_in_stage, stage_epochs, stage_signal_stats
from multiview_app.data.eeg.stages import STAGES
from multiview_app.eval.bandpower import BANDS

from _eeg_helpers import REAL_PSG_ENV, real_psg

ROOT = Path(__file__).resolve().parents[1]


def test_a_rhythm_lands_in_its_band_with_its_amplitude() -> None:
    """Epochs of a 10-Hz (alpha) 20-uV sine labelled N2 and a 2-Hz (delta) 50-uV sine labelled N3, at
    200 Hz: after resampling to 100 Hz and the 0.5-30 Hz band-pass, alpha / delta carry ~all the power
    and the amplitudes are those of the sines (SD = amplitude / sqrt 2)."""
    fs = 200.0
    t = np.arange(int(4 * 30 * fs)) / fs
    signal = np.where(t < 60, 20 * np.sin(2 * np.pi * 10 * t), 50 * np.sin(2 * np.pi * 2 * t))
    labels = np.array([2, 2, 3, -1])
    epochs, kept = stage_epochs(signal, fs, labels)
    assert epochs.shape == (3, 3000) and kept.tolist() == [2, 2, 3]
    stats = stage_signal_stats(epochs, kept, 100.0)
    assert stats["N2"]["epochs"] == 2 and stats["W"] == {"epochs": 0}
    assert stats["N2"]["relative_power"]["alpha"][1] > 0.95 and stats["N3"]["relative_power"]["delta"][1] > 0.95
    assert set(stats["N2"]["relative_power"]) == set(BANDS)
    assert 0.9 * 20 < stats["N2"]["amplitude_uv"]["p99"] <= 20.0  # 10 Hz at 100 Hz: the samples miss the crests
    assert stats["N2"]["amplitude_uv"]["p1"] == pytest.approx(-stats["N2"]["amplitude_uv"]["p99"], rel=0.01)
    assert stats["N2"]["epoch_sd_uv_median"] == pytest.approx(20 / np.sqrt(2), rel=0.05)
    assert stats["N3"]["epoch_sd_uv_median"] == pytest.approx(50 / np.sqrt(2), rel=0.05)


def test_events_per_stage_minute_by_hand() -> None:
    labels = np.array([2, 2, 0, 2, 3])
    count, minutes = events_per_minute_in_stage(np.array([1.0, 29.9, 30.0, 65.0, 95.0, 200.0]), labels, 2)
    assert (count, minutes) == (4, 1.5)  # 1.0, 29.9 (epoch 0), 30.0 (epoch 1), 95.0 (epoch 3); 200 s is past the end


def test_spindle_scoring_reader(tmp_path: Path) -> None:
    path = tmp_path / "Visual_scoring1_excerpt1.txt"
    path.write_text("[vis1_Spindles/C3-A1]\n  282.2400\t    0.7200\n  311.7200\t    1.5400\n")
    onsets, durations = read_spindle_scoring(path)
    assert onsets.tolist() == [282.24, 311.72] and durations.tolist() == [0.72, 1.54]
    path.write_text("[vis1_Spindles/C3-A1]\n  282.2400\n")
    with pytest.raises(ValueError, match=r"Visual_scoring1_excerpt1.txt: line 2: '282.2400', expected '<onset s> <duration s>'"):
        read_spindle_scoring(path)


def test_compare_eeg_signals_script_on_the_real_excerpts(tmp_path: Path) -> None:
    folder = real_psg("dreams-spindles")
    env = {**os.environ, REAL_PSG_ENV: str(folder.parent)}
    subprocess.run([sys.executable, str(ROOT / "scripts" / "compare_eeg_signals.py"), "--out", str(tmp_path),
                    "--subjects", "1"], check=True, env=env, capture_output=True, text=True)
    summary = json.loads((tmp_path / "eeg_signals.json").read_text())
    real = summary["stats"]["real"]
    assert {s: real[s]["epochs"] for s in STAGES} == {"W": 54, "N1": 46, "N2": 288, "N3": 87, "REM": 5}  # the cache's
    for name in ("real", "synthetic"):
        for stage in ("N2", "N3"):
            stats = summary["stats"][name][stage]
            medians = [stats["relative_power"][band][1] for band in BANDS]
            assert all(0.0 <= m <= 1.0 for m in medians) and 0.8 < sum(medians) < 1.1  # medians of shares: near 1, not exactly
            low, mid, high = stats["relative_power"]["delta"]
            assert low <= mid <= high
            assert 1.0 < stats["epoch_sd_uv_median"] < 200.0  # microvolts, not volts
    assert real["N3"]["relative_power"]["delta"][1] > real["N2"]["relative_power"]["delta"][1]  # slow waves in N3
    spindles = summary["real_n2_spindles"]
    assert spindles["expert 1"]["excerpts"] == 8 and spindles["expert 2"]["excerpts"] == 6
    assert all(0.2 < d["per_minute"] < 10.0 for d in spindles.values())
    assert "relative sigma power" in (tmp_path / "eeg_signals.md").read_text()
