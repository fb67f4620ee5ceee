"""Per-stage signal statistics (``data/eeg/signal_stats.py``) on signals whose answers are known, the
DREAMS spindle-scoring reader, and ``mvapp experiment synth-check signals`` on the real DREAMS excerpts
(skipped, naming the path, when ``$MVAPP_REAL_PSG`` is absent): output shape and ranges, not values."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _eeg_helpers import real_psg

from multiview_app.cli import main
from multiview_app.data.eeg.dreams import read_spindle_scoring
from multiview_app.data.eeg.signal_stats import (
    detect_spindles,
    events_per_minute_in_stage,
    match_events,
    stage_epochs,
    stage_signal_stats,
)
from multiview_app.data.eeg.stages import STAGES
from multiview_app.eval.bandpower import BANDS
from multiview_app.eval.realism import cross_staging, leave_one_group_out_staging


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


def test_spindle_detector_finds_bursts_where_they_are() -> None:
    """1-s 13-Hz bursts (30 uV) at known onsets on 5-uV noise, 4 N2 epochs at 100 Hz: each found once,
    onset and duration within 0.2 s; a 4-s burst (longer than a spindle) is not."""
    fs, rng = 100.0, np.random.default_rng(0)
    x = 5 * rng.standard_normal(int(4 * 30 * fs))
    truth = [10.0, 31.5, 57.0, 80.2]
    for onset in truth:
        t = np.arange(int(fs)) / fs
        x[int(onset * fs) : int(onset * fs) + int(fs)] += 30 * np.sin(2 * np.pi * 13 * t) * np.hanning(int(fs)) ** 0.25
    x[int(100 * fs) : int(104 * fs)] += 30 * np.sin(2 * np.pi * 13 * np.arange(int(4 * fs)) / fs)
    onsets, durations = detect_spindles(x, fs, np.array([2, 2, 2, 2]))
    np.testing.assert_allclose(onsets, truth, atol=0.2)
    np.testing.assert_allclose(durations, 1.0, atol=0.2)
    with pytest.raises(ValueError, match="no epoch of stage N2"):
        detect_spindles(x, fs, np.array([0, 0, 0, 0]))


def test_match_events_by_overlap() -> None:
    detected = (np.array([1.0, 5.0, 9.0]), np.array([1.0, 1.0, 1.0]))  # [1, 2], [5, 6], [9, 10]
    reference = (np.array([1.5, 6.5, 9.5, 20.0]), np.array([1.0, 1.0, 0.2, 1.0]))  # [1.5, 2.5], [6.5, 7.5], ...
    assert match_events(detected, reference) == {
        "reference": 4,
        "detected": 3,
        "found": 2,
        "right": 2,
        "sensitivity": 0.5,
        "precision": 2 / 3,
    }


def _rhythm_epochs(seed: int, per_class: int) -> tuple[np.ndarray, np.ndarray]:
    """Epochs whose stage is the frequency of their rhythm (W 10 Hz, N1 6 Hz, N2 13 Hz, N3 2 Hz) on noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(3000) / 100.0
    labels = np.repeat(np.arange(4), per_class)
    hz = np.array([10.0, 6.0, 13.0, 2.0])[labels]
    epochs = 20 * np.sin(2 * np.pi * hz[:, None] * t + rng.uniform(0, 6.3, (labels.size, 1)))
    return epochs + 10 * rng.standard_normal(epochs.shape), labels


def test_cross_staging_of_two_sources_with_the_same_stages() -> None:
    result = cross_staging(_rhythm_epochs(0, 30), _rhythm_epochs(1, 20), 100.0)
    assert result["kappa"] > 0.9 and result["train_per_class"] == {"W": 30, "N1": 30, "N2": 30, "N3": 30}
    assert result["test_per_class"] == {"W": 20, "N1": 20, "N2": 20, "N3": 20}
    shuffled = _rhythm_epochs(1, 20)
    result = cross_staging(_rhythm_epochs(0, 30), (shuffled[0], (shuffled[1] + 1) % 4), 100.0)
    assert result["kappa"] < 0.0  # stages renamed on the test side: worse than chance
    epochs, labels = _rhythm_epochs(0, 10)
    with pytest.raises(ValueError, match="has no training epoch"):
        cross_staging((epochs[labels != 1], labels[labels != 1]), (epochs, labels), 100.0)
    # predictions (opt-in): one label per test epoch of the classes, in test order, agreeing with the metrics
    test = _rhythm_epochs(1, 20)
    keep = test[1] != 3
    with_predictions = cross_staging(_rhythm_epochs(0, 30), test, 100.0, classes=(0, 1, 2), predictions=True)
    assert "predicted" not in cross_staging(_rhythm_epochs(0, 30), test, 100.0, classes=(0, 1, 2))
    predicted = with_predictions["predicted"]
    assert predicted.shape == (keep.sum(),)
    assert with_predictions["accuracy"] == pytest.approx(float((predicted == test[1][keep]).mean()))


def test_leave_one_group_out_holds_each_group_out_of_its_own_fit() -> None:
    """Groups of 5, 10 and 20 epochs per stage (W/N1/N2/N3 as four rhythms) and a fourth group of 8 per stage whose
    stages are renamed: each fold's balanced training draw is the rarest class of the *other* groups (so the held-out
    group is never in its fit), the three consistent groups are staged almost perfectly, the renamed one worse than
    chance, and the pooled counts are every epoch once. A group without an epoch of the classes is skipped."""
    parts = [_rhythm_epochs(seed, n) for seed, n in ((0, 5), (1, 10), (2, 20), (3, 8))]
    parts[3] = (parts[3][0], (parts[3][1] + 1) % 4)  # group "d": stages renamed
    rem = (np.zeros((3, 3000)), np.full(3, 4))  # group "e": REM only, not among the classes
    epochs = np.concatenate([p[0] for p in parts] + [rem[0]])
    labels = np.concatenate([p[1] for p in parts] + [rem[1]])
    groups = np.concatenate([np.full(p[1].size, g) for g, p in zip("abcd", parts)] + [np.full(3, "e")])
    result = leave_one_group_out_staging(epochs, labels, groups, 100.0)
    assert list(result["per_group"]) == ["a", "b", "c", "d"] and result["skipped_groups"] == ["e"]
    others = {"a": 10 + 20 + 8, "b": 5 + 20 + 8, "c": 5 + 10 + 8, "d": 5 + 10 + 20}  # per class, groups not held out
    for group, n in others.items():
        assert result["per_group"][group]["train_per_class"] == dict.fromkeys(["W", "N1", "N2", "N3"], n)
    assert [result["per_group"][g]["test_per_class"]["N2"] for g in "abcd"] == [5, 10, 20, 8]
    assert all(result["per_group"][g]["kappa"] > 0.9 for g in "abc") and result["per_group"]["d"]["kappa"] < 0.0
    assert result["test_per_class"] == dict.fromkeys(["W", "N1", "N2", "N3"], 43)
    assert 0.0 < result["pooled"]["kappa"] < min(result["per_group"][g]["kappa"] for g in "abc")
    true, predicted, held_out = leave_one_group_out_staging(epochs, labels, groups, 100.0, predictions=True)[
        "predicted"
    ]
    assert list(dict.fromkeys(held_out.tolist())) == ["a", "b", "c", "d"] and true.size == predicted.size == 4 * 43
    for g in "abcd":  # each group's predictions are its fold's
        mine = held_out == g
        assert result["per_group"][g]["accuracy"] == pytest.approx(float((predicted[mine] == true[mine]).mean()))
    with pytest.raises(ValueError, match="held-out group 'a': realism classifier: a class of .* has no training epoch"):
        keep = ~((groups != "a") & (labels == 1))  # N1 only in group "a"
        leave_one_group_out_staging(epochs[keep], labels[keep], groups[keep], 100.0)
    with pytest.raises(ValueError, match="same first dimension"):
        leave_one_group_out_staging(epochs, labels, groups[:-1], 100.0)


def test_spindle_scoring_reader(tmp_path: Path) -> None:
    path = tmp_path / "Visual_scoring1_excerpt1.txt"
    path.write_text("[vis1_Spindles/C3-A1]\n  282.2400\t    0.7200\n  311.7200\t    1.5400\n")
    onsets, durations = read_spindle_scoring(path)
    assert onsets.tolist() == [282.24, 311.72] and durations.tolist() == [0.72, 1.54]
    path.write_text("[vis1_Spindles/C3-A1]\n  282.2400\n")
    with pytest.raises(
        ValueError, match=r"Visual_scoring1_excerpt1.txt: line 2: '282.2400', expected '<onset s> <duration s>'"
    ):
        read_spindle_scoring(path)


def test_synth_check_signals_on_the_real_excerpts(tmp_path: Path) -> None:
    folder = real_psg("dreams-spindles")
    command = ["experiment", "synth-check", "signals", "--out", str(tmp_path), "--real-psg", str(folder.parent)]
    assert main([*command, "--subjects", "1"]) == 0
    summary = json.loads((tmp_path / "eeg_signals.json").read_text())
    real = summary["stats"]["real"]
    assert {s: real[s]["epochs"] for s in STAGES} == {"W": 54, "N1": 46, "N2": 288, "N3": 87, "REM": 5}  # the cache's
    for name in ("real", "synthetic"):
        for stage in ("N2", "N3"):
            stats = summary["stats"][name][stage]
            medians = [stats["relative_power"][band][1] for band in BANDS]
            assert (
                all(0.0 <= m <= 1.0 for m in medians) and 0.8 < sum(medians) < 1.1
            )  # medians of shares: near 1, not exactly
            low, mid, high = stats["relative_power"]["delta"]
            assert low <= mid <= high
            assert 1.0 < stats["epoch_sd_uv_median"] < 200.0  # microvolts, not volts
    assert real["N3"]["relative_power"]["delta"][1] > real["N2"]["relative_power"]["delta"][1]  # slow waves in N3
    spindles = summary["real_n2_spindles"]
    assert spindles["expert 1"]["excerpts"] == 8 and spindles["expert 2"]["excerpts"] == 6
    assert all(0.2 < d["per_minute"] < 10.0 for d in spindles.values())
    agreement = summary["project_detector_vs"]
    assert set(agreement) == {
        "project detector vs expert 1",
        "project detector vs expert 2",
        "project detector vs DREAMS automatic detector",
        "expert 2 vs expert 1",
    }
    for counts in agreement.values():
        assert 0 <= counts["found"] <= counts["reference"] and 0 <= counts["right"] <= counts["detected"]
        assert 0.0 <= counts["sensitivity"] <= 1.0 and 0.0 <= counts["precision"] <= 1.0
    realism = summary["realism"]
    assert set(realism) == {"trained on real, stages synthetic", "trained on synthetic, stages real"}
    assert realism["trained on synthetic, stages real"]["test_per_class"] == {"W": 54, "N1": 46, "N2": 288, "N3": 87}
    assert realism["trained on real, stages synthetic"]["train_per_class"] == {"W": 46, "N1": 46, "N2": 46, "N3": 46}
    assert all(-1.0 <= r["kappa"] <= 1.0 and 0.0 <= r["balanced_accuracy"] <= 1.0 for r in realism.values())
    ceiling = summary["real_ceiling"]  # the classifier's leave-one-real-excerpt-out ceiling, 3 draw seeds
    assert len(ceiling["draws"]) == 3 and len(ceiling["pooled_kappa_per_draw"]) == 3
    for draw in ceiling["draws"]:
        assert sorted(draw["per_group"]) == [f"excerpt{i}" for i in range(1, 9)] and draw["skipped_groups"] == []
        assert draw["test_per_class"] == {"W": 54, "N1": 46, "N2": 288, "N3": 87}  # every real epoch held out once
        assert all(
            -1.0 <= g["kappa"] <= 1.0 and 0.0 <= g["balanced_accuracy"] <= 1.0 for g in draw["per_group"].values()
        )
        assert -1.0 <= draw["pooled"]["kappa"] <= 1.0
    assert ceiling["row"]["name"] == "trained on the other real excerpts, stages the held-out one (ceiling)"
    assert "(ceiling)" in (tmp_path / "eeg_signals.md").read_text()
    assert "relative sigma power" in (tmp_path / "eeg_signals.md").read_text()


def test_band_rms_is_the_amplitude_of_a_rhythm_in_its_band() -> None:
    """A 20-uV 10-Hz sine plus a 6-uV 2-Hz sine: in-band rms ~ amplitude / sqrt 2 in alpha and delta,
    ~0 in beta (the absolute counterpart of the relative powers)."""
    t = np.arange(3 * 3000) / 100.0
    x = 20 * np.sin(2 * np.pi * 10 * t) + 6 * np.sin(2 * np.pi * 2 * t)
    stats = stage_signal_stats(x.reshape(3, 3000), np.array([2, 2, 2]), 100.0)
    rms = stats["N2"]["band_rms_uv_median"]
    assert rms["alpha"] == pytest.approx(20 / np.sqrt(2), rel=0.05)
    assert rms["delta"] == pytest.approx(6 / np.sqrt(2), rel=0.05)
    assert rms["beta"] < 0.5
