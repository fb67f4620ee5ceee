"""Synthetic cardiorespiratory night (multiview_app/data/eeg/cardioresp.py, sdb_events.py): beats found by
NeuroKit2 where the generator put them, per-stage heart rate / RR variability / breathing ordering, AASM
event rules (airflow drops, effort, desaturation after the event, arousals), realised AHI and determinism."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest

from multiview_app.data.eeg.cardioresp import CardioRespNight, CardioTraits, cardio_traits, synth_cardiorespiratory

nk = pytest.importorskip("neurokit2")

W, N1, N2, N3, REM = range(5)


def _traits(ahi: float, resolution: float = 1.0, seed: int = 0) -> CardioTraits:
    """Young-adult traits with the given AHI and oximeter resolution."""
    base = cardio_traits(np.random.default_rng(seed), "young-adult")
    ahi_class = "none" if ahi < 5 else "mild" if ahi < 15 else "moderate" if ahi < 30 else "severe"
    return dataclasses.replace(base, ahi=ahi, ahi_class=ahi_class, oximeter_resolution=resolution)


def _hypnogram(bouts: list[tuple[int, float]]) -> np.ndarray:
    """Per-epoch stages from ``(stage, minutes)`` bouts."""
    return np.concatenate([np.full(int(minutes * 2), stage) for stage, minutes in bouts])


def _night(bouts: list[tuple[int, float]], traits: CardioTraits, fs: float, seed: int = 1):
    stages = _hypnogram(bouts)
    night = synth_cardiorespiratory(stages, fs, stages.size * 30.0, traits, np.random.default_rng(seed))
    return stages, night


def _stage_mask(stages: np.ndarray, times: np.ndarray, stage: int, skip_s: float = 60.0) -> np.ndarray:
    """Which ``times`` lie in epochs of ``stage`` at least ``skip_s`` after the bout began (steady state)."""
    epoch = np.clip((times // 30).astype(int), 0, stages.size - 1)
    changed = np.flatnonzero(np.diff(stages, prepend=-9) != 0)
    bout_start = changed[np.searchsorted(changed, epoch, side="right") - 1] * 30.0
    return (stages[epoch] == stage) & (times - bout_start >= skip_s)


def test_ecg_beats_found_by_neurokit() -> None:
    stages, night = _night([(W, 3), (N1, 2), (N2, 6), (N3, 4), (REM, 4), (W, 1)], _traits(20.0), fs=200.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, info = nk.ecg_peaks(night.signals["ECG"], sampling_rate=200)
    found = np.asarray(info["ECG_R_Peaks"]) / 200.0
    truth = night.beat_times
    after = np.clip(np.searchsorted(truth, found), 1, truth.size - 1)
    gap = np.minimum(np.abs(found - truth[after - 1]), np.abs(found - truth[after]))  # to the nearest true beat
    hits = int((gap <= 0.05).sum())
    f1 = 2 * hits / (found.size + truth.size)
    assert f1 >= 0.99, (f1, found.size, truth.size)
    r_heights = night.signals["ECG"][np.round(truth * 200).astype(int)]
    assert 0.5 < float(np.median(r_heights)) < 2.0  # R ~ 1 mV


@pytest.fixture(scope="module")
def quiet_night() -> tuple[np.ndarray, CardioRespNight]:
    """50 min, 10-min bouts of each stage, no sleep-disordered breathing, 100 Hz."""
    bouts = [(W, 10), (N1, 6), (N2, 10), (N3, 10), (N2, 2), (REM, 10), (W, 2)]
    return _night(bouts, _traits(0.0), fs=100.0)


def test_heart_rate_and_rr_variability_by_stage(quiet_night) -> None:
    stages, night = quiet_night
    beats = night.beat_times
    rr = np.diff(beats)
    heart_rate, rr_sd = {}, {}
    for stage in (W, N1, N2, N3, REM):
        inside = _stage_mask(stages, beats[1:], stage)
        heart_rate[stage] = 60.0 / rr[inside].mean()
        rr_sd[stage] = rr[inside].std()
    assert heart_rate[W] > heart_rate[REM] > heart_rate[N2] > heart_rate[N3], heart_rate
    assert rr_sd[N3] == min(rr_sd.values()), rr_sd


def test_breathing_rate_and_ventilation_by_stage(quiet_night) -> None:
    stages, night = quiet_night
    fs = 100
    effort = night.signals["CHEST"] + night.signals["ABD"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cleaned = nk.rsp_clean(effort, sampling_rate=fs)
        breaths_per_min = nk.rsp_rate(cleaned, troughs=nk.rsp_peaks(cleaned, sampling_rate=fs)[1], sampling_rate=fs)
    times = np.arange(effort.size) / fs
    ventilation = {}
    for stage in (W, N1, N2, N3, REM):
        inside = _stage_mask(stages, times, stage)
        rate = float(breaths_per_min[inside].mean())
        assert 12.0 <= rate <= 20.0, (stage, rate)
        ventilation[stage] = float(np.abs(night.signals["AIRFLOW"][inside]).mean())
    nrem = np.mean([ventilation[N2], ventilation[N3]])
    assert ventilation[W] > nrem > ventilation[REM], ventilation
    assert 0.75 < ventilation[REM] / ventilation[W] < 0.95  # Douglas 1982: 6.46 / 7.66 = 0.84


@pytest.fixture(scope="module")
def apnea_night() -> tuple[np.ndarray, CardioRespNight, CardioTraits]:
    """3.5 h of cycling sleep with severe sleep-disordered breathing, 50 Hz, 0.1 % oximeter."""
    cycle = [(N1, 2), (N2, 20), (N3, 15), (N2, 10), (REM, 15), (W, 2)]
    traits = dataclasses.replace(_traits(40.0, resolution=0.1), central_share=0.3)
    stages, night = _night([(W, 5)] + cycle * 3, traits, fs=50.0, seed=7)
    return stages, night, traits


def _window(signal: np.ndarray, fs: float, start: float, stop: float) -> np.ndarray:
    return signal[int(round(start * fs)) : int(round(stop * fs))]


def test_apneas_and_hypopneas_follow_aasm_rules(apnea_night) -> None:
    stages, night, _ = apnea_night
    fs, flow = 50.0, night.signals["AIRFLOW"]
    assert night.events and len(night.arousal_onsets) == len(night.events)
    for (onset, duration, label), arousal in zip(night.events, night.arousal_onsets):
        assert duration >= 10.0
        assert all(1 <= stages[int(t // 30)] <= 4 for t in (onset, onset + duration))  # only in sleep
        assert 0.0 <= arousal - (onset + duration) <= 3.0  # each event ends with an arousal
        baseline = np.percentile(np.abs(_window(flow, fs, onset - 120, onset)), 95)
        peak = np.abs(_window(flow, fs, onset + 0.5, onset + duration - 0.5)).max()
        if label == "arousal_rera":  # flow only flattened (no apnea / hypopnea), effort rising
            assert peak > 0.5 * baseline, (onset, peak / baseline)
            continue
        limit = 0.3 if label == "resp_hypopnea" else 0.9  # AASM: >= 30 % / >= 90 % drop
        assert peak <= (1.0 - limit) * baseline, (label, onset, peak / baseline)
    labels = {label for _, _, label in night.events}
    assert {"resp_obstructiveapnea", "resp_centralapnea", "resp_hypopnea", "arousal_rera"} <= labels


def test_effort_obstructive_paradoxical_central_absent(apnea_night) -> None:
    _, night, _ = apnea_night
    fs, chest, abd = 50.0, night.signals["CHEST"], night.signals["ABD"]
    checked = {"resp_obstructiveapnea": 0, "resp_centralapnea": 0, "resp_mixedapnea": 0}
    for onset, duration, label in night.events:
        before = _window(chest + abd, fs, onset - 30, onset)
        if label == "resp_obstructiveapnea":
            inside_chest, inside_abd = (
                _window(chest, fs, onset + 4, onset + duration),
                _window(abd, fs, onset + 4, onset + duration),
            )
            assert np.corrcoef(inside_chest, inside_abd)[0, 1] < -0.5  # out of phase
            assert inside_abd.std() > 0.3 * before.std()  # effort continues
        elif label == "resp_centralapnea":
            assert _window(chest + abd, fs, onset + 1, onset + duration - 1).std() < 0.15 * before.std()
        elif label == "resp_mixedapnea":  # central first quarter, effort back in the last quarter
            assert _window(chest + abd, fs, onset + 0.5, onset + 0.25 * duration).std() < 0.15 * before.std()
            assert _window(abd, fs, onset + 0.75 * duration, onset + duration).std() > 0.3 * before.std()
        else:
            continue
        checked[label] += 1
    assert min(checked.values()) >= 1, checked


def test_desaturation_follows_the_event(apnea_night) -> None:
    _, night, traits = apnea_night
    fs, spo2 = 50.0, night.signals["SaO2"]
    assert 50.0 <= spo2.min() and spo2.max() <= 100.0
    onsets = np.array([onset for onset, _, _ in night.events] + [np.inf])
    ends = np.array([-np.inf] + [onset + duration for onset, duration, _ in night.events])
    deep = 0
    for index, (onset, duration, label) in enumerate(night.events):
        end = onset + duration
        stop = min(end + traits.circulation_delay_s + 15.0, onsets[index + 1] + traits.circulation_delay_s)
        falls_from = onset + traits.circulation_delay_s  # earlier dips belong to the previous event
        own = _window(spo2, fs, falls_from, stop)
        drop = float(_window(spo2, fs, onset, falls_from + 1.0).max() - own.min())
        isolated = onset - ends[index] >= 30.0 and stop - end > traits.circulation_delay_s
        if label.endswith("apnea") and duration >= 15 and isolated:  # 15 s x 0.26 %/s ~ 4 %
            assert drop >= 3.0, (label, onset, duration, drop)
        if drop >= 3.0:
            nadir = falls_from + np.argmin(own) / fs
            assert end + 0.5 * traits.circulation_delay_s < nadir < end + traits.circulation_delay_s + 5, (label, onset)
            deep += 1
    assert deep >= 0.3 * len(night.events)


def test_realised_ahi_close_to_trait(apnea_night) -> None:
    stages, night, traits = apnea_night
    sleep_hours = float(((stages >= 1) & (stages <= 4)).sum()) * 30.0 / 3600.0
    apneas_hypopneas = sum(label.startswith("resp_") for _, _, label in night.events)
    assert abs(apneas_hypopneas / sleep_hours - traits.ahi) <= 0.1 * traits.ahi
    reras = sum(label == "arousal_rera" for _, _, label in night.events)
    assert abs(reras / sleep_hours - traits.rera_index) <= 0.2 * traits.rera_index + 1.0


def test_cohort_traits() -> None:
    young = [cardio_traits(np.random.default_rng(seed), "young-adult") for seed in range(200)]
    older = [cardio_traits(np.random.default_rng(seed), "sleep-edf-sc") for seed in range(200)]
    assert np.mean([t.ahi for t in older]) > 2 * np.mean([t.ahi for t in young])
    for traits in young + older:
        assert 94.0 <= traits.spo2_baseline <= 98.0
        bounds = {"none": (0, 5), "mild": (5, 15), "moderate": (15, 30), "severe": (30, 1e9)}[traits.ahi_class]
        assert bounds[0] <= traits.ahi < bounds[1]
    with pytest.raises(ValueError):
        cardio_traits(np.random.default_rng(0), "children")


@pytest.mark.parametrize("fs", [50.0, 100.0])
def test_deterministic_and_rates(fs: float) -> None:
    stages = _hypnogram([(W, 1), (N2, 3), (REM, 2)])
    traits = _traits(30.0)
    first = synth_cardiorespiratory(stages, fs, 175.0, traits, np.random.default_rng(5))
    second = synth_cardiorespiratory(stages, fs, 175.0, traits, np.random.default_rng(5))
    other = synth_cardiorespiratory(stages, fs, 175.0, traits, np.random.default_rng(6))
    for name, values in first.signals.items():
        assert values.shape == (int(175 * fs),) and np.isfinite(values).all()
        np.testing.assert_array_equal(values, second.signals[name])
    np.testing.assert_array_equal(first.beat_times, second.beat_times)
    assert first.events == second.events
    assert not np.array_equal(first.signals["ECG"], other.signals["ECG"])


def test_unscored_epochs_and_time_past_the_hypnogram_hold_no_events() -> None:
    stages = np.concatenate([_hypnogram([(N2, 4)]), [-1, -1], _hypnogram([(N2, 3)])])  # -1: excluded epochs
    night = synth_cardiorespiratory(stages, 50.0, 500.0, _traits(60.0), np.random.default_rng(0))
    assert night.signals["SaO2"].shape == (25000,)
    assert night.events
    for onset, duration, _ in night.events:
        assert onset + duration <= 450.0 and not (onset < 300.0 and onset + duration > 240.0)
