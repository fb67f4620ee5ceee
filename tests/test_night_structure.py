"""Night-structure statistics (``data/eeg/night_structure.py``) on a night whose numbers are worked out
by hand, and ``mvapp experiment synth-check night-structure`` on the 20 real Sleep-EDF hypnograms (skipped, naming
the path, when ``$MVAPP_REAL_PSG`` is absent): output shape and ranges, not values."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _eeg_helpers import real_psg

from multiview_app.cli import main
from multiview_app.data.eeg.night_structure import compare_nights, comparison_rows, night_metrics
from multiview_app.data.eeg.stages import STAGES


def _night() -> np.ndarray:
    """80 W, N1 2, N3 12, N2 26, REM 4, W 2, one excluded epoch, N2 10, 80 W."""
    parts = [(0, 80), (1, 2), (3, 12), (2, 26), (4, 4), (0, 2), (-1, 1), (2, 10), (0, 80)]
    return np.concatenate([np.full(n, code) for code, n in parts]).astype(np.int64)


def test_night_metrics_by_hand() -> None:
    metrics = night_metrics(_night())
    # the crop keeps 60 wake epochs on each side; the excluded epoch is removed: 176 epochs
    expected_counts = {"W": 60 + 2 + 60, "N1": 2, "N2": 36, "N3": 12, "REM": 4}
    assert metrics["shares"] == pytest.approx({k: v / 176 for k, v in expected_counts.items()})
    assert metrics["sleep_hours"] == pytest.approx(54 / 120)  # 56-epoch sleep period, 2 of them wake
    assert metrics["transitions_per_hour"] == pytest.approx(3 / (54 / 120))  # N2->REM, REM->W, W->N2
    assert metrics["rem_latency_minutes"] == 20.0 and metrics["persistent_sleep_minutes"] == 0.0
    assert metrics["n3_minutes_first_third"] == 6.0 and metrics["n3_minutes_last_third"] == 0.0
    assert metrics["bouts"] == {"W": [1.0], "N1": [1.0], "N2": [13.0, 5.0], "N3": [6.0], "REM": [2.0]}
    uncropped = night_metrics(_night(), crop_wake_minutes=None)
    assert uncropped["shares"]["W"] == pytest.approx((80 + 2 + 80) / 216)


def test_night_without_sleep_is_refused() -> None:
    with pytest.raises(ValueError, match="no sleep epoch"):
        night_metrics(np.zeros(100, dtype=np.int64))


def test_identical_sets_compare_equal() -> None:
    night = _night()
    summary = compare_nights({"a": [night, night[::-1].copy()], "b": [night, night[::-1].copy()]})
    assert summary["sets"]["a"] == summary["sets"]["b"] and summary["epochs"]["a"]["N2"] == 72
    assert all(ks["statistic"] == 0.0 for ks in summary["bout_ks"].values())
    headers, rows = comparison_rows(summary)
    assert headers[-1] == "a vs b" and all(len(row) == len(headers) for row in rows)


def test_synth_check_night_structure_on_the_real_hypnograms(tmp_path: Path) -> None:
    folder = real_psg("sleep-edf-hypnograms")
    command = ["experiment", "synth-check", "night-structure", "--out", str(tmp_path), "--real-psg", str(folder.parent)]
    assert main([*command, "--nights", "4"]) == 0
    summary = json.loads((tmp_path / "night_structure.json").read_text())
    assert summary["nights"] == {"synthetic": 4, "real": 20} and len(summary["real_files"]) == 20
    for name in ("synthetic", "real"):
        shares = summary["sets"][name]["shares"]
        assert sum(shares[s]["mean"] for s in STAGES) == pytest.approx(1.0)
        assert 0.25 < shares["N2"]["mean"] < 0.65 and 0.0 < shares["N3"]["mean"] < 0.35  # a sleep night, not noise
        assert 1.0 < summary["sets"][name]["transitions_per_hour"]["mean"] < 20.0
        assert 3.0 < summary["sets"][name]["sleep_hours"]["mean"] < 11.0
        first, last = summary["sets"][name]["n3_minutes_first_third"], summary["sets"][name]["n3_minutes_last_third"]
        assert first["mean"] > last["mean"]  # N3 early in the night, in both
    assert summary["sets"]["real"]["shares"]["W"]["n"] == 20
    assert set(summary["bout_ks"]) == set(STAGES)
    assert all(0.0 <= ks["statistic"] <= 1.0 and 0.0 <= ks["pvalue"] <= 1.0 for ks in summary["bout_ks"].values())
    assert sum(summary["epochs"]["real"].values()) > 15000  # ~20 cropped nights of ~9-10 h
    table = (tmp_path / "night_structure.md").read_text()
    assert "share N3" in table and "KS" in table and "synth-check night-structure" in table
