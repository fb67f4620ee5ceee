"""Per-stage physiology table (multiview_app/eval/physiology.py) on a short synthetic night."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from multiview_app.data.eeg.cardioresp import cardio_traits, synth_cardiorespiratory
from multiview_app.eval.physiology import PUBLISHED_RANGES, format_table, physiology_table, stage_bouts

pytest.importorskip("neurokit2")


def test_stage_bouts_keep_long_runs_only() -> None:
    stages = np.array([0] * 10 + [2] * 9 + [3] * 12 + [-1] * 20 + [4] * 10)
    assert stage_bouts(stages, min_minutes=5.0) == [(0, 0.0, 300.0), (3, 570.0, 930.0), (4, 1530.0, 1830.0)]


def test_physiology_table_on_a_synthetic_night() -> None:
    stages = np.array([0] * 10 + [2] * 12 + [3] * 12 + [4] * 12)  # 5-6 min bouts, 23 min
    traits = dataclasses.replace(cardio_traits(np.random.default_rng(2), "young-adult"), ahi=0.0, ahi_class="none")
    night = synth_cardiorespiratory(stages, 100.0, stages.size * 30.0, traits, np.random.default_rng(4))
    rows = physiology_table(night.signals, 100.0, stages, night.events)
    by_key = {(row.stage, row.measure): row for row in rows}
    for stage in ("W", "N2", "N3", "REM"):
        for measure in ("heart_rate_bpm", "rmssd_ms", "lf_hf", "breathing_rate_per_min", "spo2_baseline_percent"):
            row = by_key[(stage, measure)]
            assert np.isfinite(row.value) and row.source == PUBLISHED_RANGES[measure][stage].source
            assert row.flag in ("", "LOW", "HIGH")
    assert by_key[("W", "heart_rate_bpm")].value > by_key[("N3", "heart_rate_bpm")].value
    assert by_key[("N3", "lf_hf")].value < by_key[("W", "lf_hf")].value
    for measure in ("breathing_rate_per_min", "spo2_baseline_percent", "events_per_hour"):
        assert all(row.flag == "" for row in rows if row.measure == measure), format_table(rows)
    assert "REM" in format_table(rows)
