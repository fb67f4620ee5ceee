"""Per-modality handcrafted baselines (``eval/modalities/baselines.py``, ``cache.py``): the feature maths on
arrays whose answer is known, and the features of a real tiny synthetic PSG night (``mvapp data synth-psg
--signals psg``, 30 min) prepared with ``--modalities six``."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import numpy as np
import pytest

from multiview_app.cli import main
from multiview_app.data.eeg.cache import load_manifest
from multiview_app.eval.modalities import UnsupportedEvaluation, cache_windows, evaluate_events, evaluate_staging
from multiview_app.eval.modalities.baselines import (
    airflow_features,
    fill_failed,
    heart_features,
    oximetry_features,
)
from multiview_app.eval.modalities.cache import cache_baselines


def test_oximetry_statistics_of_known_windows() -> None:
    percent = np.array([[96.0, 96.0, 96.0, 96.0], [96.0, 94.0, 92.0, 96.0], [97.0, 97.0, np.nan, 97.0]])
    features = oximetry_features(percent, np.array(["a", "a", "a"]))
    # the night's baseline is the median of its valid samples (96 %); a dip to 92 % drops 4 points
    np.testing.assert_allclose(features, [[96.0, 96.0, 0.0], [94.5, 92.0, 4.0], [97.0, 97.0, -1.0]])


def test_airflow_drop_marks_a_weak_stretch_relative_to_the_nights_median() -> None:
    rng = np.random.default_rng(0)
    breaths = np.sin(2 * np.pi * 0.25 * np.arange(300) / 10.0)
    windows = np.stack([breaths + 0.01 * rng.normal(size=300) for _ in range(5)])
    windows[2, 100:250] *= 0.1  # 15 s at a tenth of the amplitude: an apnea-like stretch
    features = airflow_features(windows, 10.0, np.zeros(5))
    assert features[2, 2] < np.log(0.2) and abs(features[0, 2]) < 0.2  # weakest 10 s vs the night's median
    assert features[2, 1] < features[0, 1]


def test_failed_windows_are_filled_with_the_column_median_and_counted() -> None:
    filled, failed = fill_failed(np.array([[1.0, 2.0], [np.nan, np.nan], [3.0, 4.0], [5.0, np.nan]]))
    assert failed == 2
    np.testing.assert_allclose(filled, [[1.0, 2.0], [3.0, 3.0], [3.0, 4.0], [5.0, 3.0]])
    noise = np.random.default_rng(0).normal(size=(2, 1, 6000)) * 1e-6
    flat = heart_features(np.concatenate([noise, np.zeros((1, 1, 6000))]), 200.0)
    assert fill_failed(flat)[1] >= 1  # no beats in a flat window: failed, counted, never a number made up


@pytest.fixture(scope="module")
def synthetic_psg_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One 30-min whole-PSG night written by ``mvapp data synth-psg`` and prepared with ``--modalities six``."""
    root = tmp_path_factory.mktemp("psg_baselines")
    commands = [
        ["data", "synth-psg", "--subjects", "1", "--format", "physionet2018", "--hours", "0.5", "--signals", "psg"],
        ["data", "prepare", "physionet2018", "--source", str(root / "src"), "--out", str(root / "cache")],
    ]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main([*commands[0], "--seed", "1", "--out", str(root / "src")]) == 0
        assert main([*commands[1], "--modalities", "six"]) == 0
    return root / "cache"


def test_baselines_of_a_synthetic_psg_night_are_physiological(synthetic_psg_cache: Path) -> None:
    windows, rows, info = cache_baselines(synthetic_psg_cache, groups=["brain", "heart", "breathing"])
    n = len(windows)
    assert n > 20 and windows.dataset == "physionet2018" and set(windows.targets) == {"apnea_hypopnea", "arousal"}
    heart = rows["HRV (heart)"]
    assert heart.shape == (n, 4) and info["failed"]["HRV (heart)"] <= n // 10
    assert np.all((heart[:, 0] > 35) & (heart[:, 0] < 110))  # heart rate, bpm
    assert np.all(heart[:, 3] > 0) and np.all(heart[:, 3] < 300)  # RMSSD, ms
    breathing = rows["breathing rate, amplitude, regularity"]
    assert np.median(breathing[:, 0]) == pytest.approx(15.0, abs=7.0)  # breaths per minute
    assert rows["band power (brain)"].shape == (n, 6 * 5) and rows["airflow amplitude"].shape == (n, 3)
    with pytest.raises(UnsupportedEvaluation, match=r"physionet2018 .*second subject"):
        evaluate_staging(rows, windows)


def test_spo2_statistics_of_a_synthetic_psg_night(synthetic_psg_cache: Path) -> None:
    record = load_manifest(synthetic_psg_cache)["recordings"][0]
    if "oximetry" in record["missing_modalities"]:
        pytest.skip(f"the synthetic night has no oximetry windows: {record['missing_modalities']['oximetry']}")
    windows, rows, _ = cache_baselines(synthetic_psg_cache, groups=["oximetry"])
    spo2 = rows["SpO2 statistics"]
    assert spo2.shape == (len(windows), 3)
    assert np.all((spo2[:, 0] >= 90) & (spo2[:, 0] <= 100))  # mean SpO2 in percent
    assert np.all(spo2[:, 1] <= spo2[:, 0] + 1e-9)


def test_a_cache_without_scored_events_cannot_give_breathing_events() -> None:
    """A Sleep-EDF modality cache's records carry no event fields (the dataset scores none): its windows have
    no targets, and asking for apnea / hypopnea detection names the dataset and what it lacks."""
    records = [
        {
            "recording": f"SC40{i}1E0",
            "subject": f"SC40{i}",
            "n_windows": 10,
            "labels": [0, 1, 2, 3, 4] * 2,
            "epochs": list(range(10)),
        }
        for i in range(2)
    ]
    windows = cache_windows({"dataset": "sleep-edf", "recordings": records}, records)
    assert windows.targets == {} and windows.night_ahi == {} and windows.sleep_hours["SC4001E0"] == 8 * 30 / 3600
    with pytest.raises(
        UnsupportedEvaluation, match=r"^sleep-edf cannot support the 'apnea_hypopnea' evaluation.*no events"
    ):
        evaluate_events({"band power": np.zeros((20, 5))}, windows)
