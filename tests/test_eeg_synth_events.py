"""Synthetic PSG events found in the generated signals (K-complexes, vertex waves, conjugate eye
movements, artifacts at their configured rates and annotated places), SC-length Sleep-EDF files,
and the demo's EEG windows pinned (generator changes must not move them unnoticed)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
from scipy.signal import butter, find_peaks, sosfiltfilt

from multiview_app.data.eeg import synth
from multiview_app.data.eeg.reference import (
    AROUSAL_DURATION_SECONDS,
    AROUSAL_INDEX_PER_HOUR,
    DREAMS_CENTRAL_N2_BLIND_75UV_PER_MIN,
    K_COMPLEX_PER_MIN_N2,
)
from multiview_app.data.eeg.synth import (
    AROUSALS_PER_HOUR,
    ARTIFACT_PROB,
    EPOCHS_PER_POP,
    EXTRA_AROUSALS_PER_HOUR,
    SWEAT_PER_1000_EPOCHS,
    TRANSIENTS,
    SubjectTraits,
    Transient,
    default_record_hours,
    synth_night,
)

FS = 100.0
SPE = int(30 * FS)  # samples per epoch
CHANNELS = ["F3-M2", "C3-M2", "O1-M2", "E1-M2", "E2-M1", "EOG horizontal", "Chin1-Chin2"]
SUBJECTS = (0, 2)


def _night(
    subject: int,
    channels: list[str] = CHANNELS,
    fs: float = FS,
    hours: float = 9,
    compress: int = 4,
    mains_hz: float = 50.0,
) -> tuple[synth.SyntheticNight, SubjectTraits]:
    traits = SubjectTraits.sample(np.random.default_rng([0, subject]))
    night = synth_night(
        channels, hours, fs, traits, np.random.default_rng([0, subject, 0, 1]), compress=compress, mains_hz=mains_hz
    )
    return night, traits


@pytest.fixture(scope="module")
def nights():
    """Two subjects' 9-h nights as 4x compressed excerpts (~2 h each) at 100 Hz."""
    return [_night(s) for s in SUBJECTS]


@pytest.fixture(scope="module")
def nights_without_k_complexes_and_vertex_waves():
    """The fixture's nights with K-complex and vertex-wave amplitudes set to 0 (every random draw as
    in the fixture above, so only those waves are missing)."""
    saved = {name: TRANSIENTS[name] for name in ("k_complex", "vertex")}
    try:
        for name, transient in saved.items():
            TRANSIENTS[name] = Transient(transient.rate_per_min, 0.0, transient.topography)
        return [_night(s) for s in SUBJECTS]
    finally:
        TRANSIENTS.update(saved)


@pytest.fixture(scope="module")
def night_without_k_complexes_and_vertex_waves(nights_without_k_complexes_and_vertex_waves):
    """Subject 0's night without K-complexes and vertex waves."""
    return nights_without_k_complexes_and_vertex_waves[0]


def _band(x: np.ndarray, low: float, high: float, fs: float = FS) -> np.ndarray:
    return sosfiltfilt(butter(2, [low, high], btype="bandpass", fs=fs, output="sos"), x)


def _segments(x: np.ndarray, onsets: np.ndarray, length: int) -> np.ndarray:
    """``(events, length)`` segments starting at ``onsets``, each minus its mean."""
    segs = np.stack([x[o : o + length] for o in onsets])
    return segs - segs.mean(axis=1, keepdims=True)


def _fitted_peak_to_peak(x: np.ndarray, onsets: np.ndarray, template: np.ndarray) -> np.ndarray:
    """Per event: least-squares amplitude of the (mean-removed) template in the signal, as uV peak
    to peak ``(events,)`` (the background enters as noise; a missing wave gives ~0)."""
    shape = template - template.mean()
    return _segments(x, onsets, template.size) @ shape / (shape @ shape) * np.ptp(template)


def _events(night: synth.SyntheticNight, name: str, length: int, stages: tuple[int, ...] | None = None) -> np.ndarray:
    onsets = night.meta["events"][name]
    onsets = onsets[onsets + length < night.stages.size * SPE]
    return onsets if stages is None else onsets[np.isin(night.stages[onsets // SPE], stages)]


def _poisson_close(observed: float, expected: float) -> bool:
    return abs(observed - expected) <= 3 * np.sqrt(expected) + 2


# ----------------------------------------------------------------------------- K-complexes, vertex waves


def test_k_complexes_biphasic_high_amplitude_in_n2_n3_at_the_configured_density(
    nights, night_without_k_complexes_and_vertex_waves
):
    per_channel: dict[str, list[np.ndarray]] = {c: [] for c in ("F3-M2", "C3-M2", "O1-M2")}
    erp = []
    for night, traits in nights:
        template = synth._templates(FS, traits)["k_complex"]
        onsets = _events(night, "k_complex", template.size)
        assert set(np.unique(night.stages[onsets // SPE])) <= {2, 3}  # none in W, N1, REM
        n2 = _events(night, "k_complex", template.size, stages=(2,))
        minutes = (night.stages == 2).sum() / 2
        configured = TRANSIENTS["k_complex"].rate_per_min[2] * traits.band_gain["k_complex"]
        low, high = K_COMPLEX_PER_MIN_N2["range"]  # published per-subject range
        assert low <= configured <= high
        assert _poisson_close(n2.size, configured * minutes)
        for c in per_channel:
            per_channel[c].append(_fitted_peak_to_peak(night.signals[c], n2, template))
        erp.append(_segments(night.signals["F3-M2"], n2, int(2.0 * FS)))
    median = {c: float(np.median(np.concatenate(v))) for c, v in per_channel.items()}
    assert max(median["F3-M2"], median["C3-M2"]) >= 75.0, median  # high amplitude (> 75 uV peak to peak)
    assert median["F3-M2"] > 1.3 * median["O1-M2"], median  # frontal-central, not occipital
    average = np.concatenate(erp).mean(axis=0)  # event-locked average: negative, then positive
    trough, peak = int(np.argmin(average)), int(np.argmax(average))
    assert 0.2 <= trough / FS <= 0.5 and 0.6 <= peak / FS <= 1.2 and average[trough] < 0 < average[peak]
    wave = np.flatnonzero((average < 0.5 * average[trough]) | (average > 0.5 * average[peak]))
    assert 0.5 <= (wave[-1] - wave[0]) / FS <= 1.5  # duration of the biphasic wave
    # the same night without K-complexes: nothing at the annotated onsets
    night, traits = night_without_k_complexes_and_vertex_waves
    template = synth._templates(FS, traits)["k_complex"]
    n2 = _events(night, "k_complex", template.size, stages=(2,))
    assert abs(np.median(_fitted_peak_to_peak(night.signals["F3-M2"], n2, template))) < 20.0
    assert np.ptp(_segments(night.signals["F3-M2"], n2, int(2.0 * FS)).mean(axis=0)) < 25.0


def blind_k_complex_detections(x: np.ndarray, fs: float = FS, threshold_uv: float = 75.0) -> np.ndarray:
    """A detector that knows nothing of the annotations: troughs of the 0.3-4 Hz band-passed signal
    (at least 1 s apart) followed within 1 s by a peak >= ``threshold_uv`` above them; sample
    indices of those troughs ``(detections,)``."""
    slow = _band(x, 0.3, 4.0, fs)
    troughs, _ = find_peaks(-slow, distance=int(fs))
    troughs = troughs[troughs + int(fs) <= slow.size]
    rise = np.array([slow[t : t + int(fs)].max() - slow[t] for t in troughs])
    return troughs[rise >= threshold_uv] if troughs.size else troughs


def _n2_away_from_n3_and_artifacts(night: synth.SyntheticNight) -> np.ndarray:
    """``(e,)`` bool: N2 epochs with no N3 neighbour (rhythm amplitudes ramp linearly between epoch
    centres, so half of an N2 epoch next to N3 carries N3-level delta) and no annotated movement,
    electrode pop or sweat episode."""
    stages = night.stages
    keep = stages == 2
    keep[1:] &= stages[:-1] != 3
    keep[:-1] &= stages[1:] != 3
    keep[night.meta["movement_epochs"]] = False
    for _, start, _ in night.meta["pops"]:
        keep[start // SPE] = False
    for start, length in night.meta["sweat_episodes"]:
        keep[start // SPE : (start + length) // SPE + 1] = False
    return keep


def test_k_complexes_stand_out_from_the_n2_background_for_a_blind_detector(
    nights, nights_without_k_complexes_and_vertex_waves
):
    """AASM: a K-complex is a well-delineated negative-positive wave standing out from the background.
    A blind detector (trough, then a peak >= 75 uV within 1 s, on F3) in N2 away from N3 and artifacts
    finds the K-complexes on top of the background's slow waves: removing them removes about the
    configured K-complex rate of detections. The detector's total rate is the real one: on the real
    DREAMS central N2 (away from N3) it fires 5.4 / min (``reference.DREAMS_CENTRAL_N2_BLIND_75UV_PER_MIN``),
    so the former claim "the N2 background alone rarely reaches 75 uV" (an assumption) was refuted by
    real data (issue 25 item 3) and is no longer asserted."""
    counts, minutes, configured = np.zeros(2), 0.0, 0.0
    for (night, traits), (bare, _) in zip(nights, nights_without_k_complexes_and_vertex_waves):
        keep = _n2_away_from_n3_and_artifacts(night)
        assert np.array_equal(keep, _n2_away_from_n3_and_artifacts(bare))  # same draws, same epochs
        for i, x in enumerate((night.signals["F3-M2"], bare.signals["F3-M2"])):
            counts[i] += keep[blind_k_complex_detections(x) // SPE].sum()
        epoch_minutes = keep.sum() / 2
        minutes += epoch_minutes
        configured += TRANSIENTS["k_complex"].rate_per_min[2] * traits.band_gain["k_complex"] * epoch_minutes
    with_kc, without_kc, configured = counts[0] / minutes, counts[1] / minutes, configured / minutes
    assert minutes > 60, minutes
    assert 0.5 * configured <= with_kc - without_kc <= 1.5 * configured, (with_kc, without_kc, configured)
    real = DREAMS_CENTRAL_N2_BLIND_75UV_PER_MIN
    assert 0.5 * real <= with_kc <= 1.5 * real, (with_kc, real)


def test_vertex_waves_sharp_negative_central_in_n1(nights, night_without_k_complexes_and_vertex_waves):
    fitted: dict[str, list[np.ndarray]] = {c: [] for c in ("F3-M2", "C3-M2", "O1-M2")}
    erp = []
    for night, traits in nights:
        template = synth._templates(FS, traits)["vertex"]  # negative first: fitted size > 0 when present
        n1 = _events(night, "vertex", template.size, stages=(1,))
        minutes = (night.stages == 1).sum() / 2
        assert _poisson_close(n1.size, TRANSIENTS["vertex"].rate_per_min[1] * traits.band_gain["vertex"] * minutes)
        onsets = _events(night, "vertex", template.size)  # all vertex waves (N1 and the few elsewhere)
        for c in fitted:
            fitted[c].append(_fitted_peak_to_peak(night.signals[c], onsets, template))
        erp.append(_segments(_band(night.signals["C3-M2"], 1.0, 30.0), onsets, int(0.5 * FS)))
    median = {c: float(np.median(np.concatenate(v))) for c, v in fitted.items()}
    assert median["C3-M2"] > max(median["F3-M2"], median["O1-M2"]) and median["C3-M2"] > 20.0, median
    average = np.concatenate(erp).mean(axis=0)
    trough = int(np.argmin(average))
    assert 0.1 <= trough / FS <= 0.3 and average[trough] < -10.0
    below = np.flatnonzero(average < 0.5 * average[trough])
    assert (below[-1] - below[0] + 1) / FS < 0.2  # sharp: under 200 ms at half amplitude
    night, traits = night_without_k_complexes_and_vertex_waves
    template = synth._templates(FS, traits)["vertex"]
    onsets = _events(night, "vertex", template.size)
    assert abs(np.median(_fitted_peak_to_peak(night.signals["C3-M2"], onsets, template))) < 0.3 * median["C3-M2"]


# ----------------------------------------------------------------------------- conjugate eye movements


def _isolated(onsets: np.ndarray, others: np.ndarray, gap: int) -> np.ndarray:
    """Mask of ``onsets`` with no other eye-movement onset within ``gap`` samples."""
    others = np.sort(others)
    left = np.searchsorted(others, onsets - gap)
    right = np.searchsorted(others, onsets + gap, side="right")
    return (right - left) == 1  # only itself


def test_rem_eye_movements_are_sharp_conjugate_deflections_with_montage_polarity(nights):
    deflection = {c: [] for c in ("E1-M2", "E2-M1", "EOG horizontal")}
    signs, rise, slow_rise = [], [], []
    for night, _ in nights:
        every = np.concatenate([night.meta["events"][k] for k in ("saccade", "slow_roll", "blink")])
        onsets, sign = night.meta["events"]["saccade"], night.meta["eye_movement_signs"]["saccade"]
        keep = (night.stages[onsets // SPE] == 4) & _isolated(onsets, every, int(1.0 * FS))
        keep &= (onsets > 10) & (onsets + int(FS) < night.stages.size * SPE)
        for start, length in night.meta["movements"]:  # a movement burst reaches every derivation in phase
            keep &= ~((onsets + int(FS) > start) & (onsets - int(FS) < start + length))
        onsets, sign = onsets[keep], sign[keep]
        for c in deflection:  # rapid eye movements: the derivation's step 80 ms after onset
            x = night.signals[c]
            deflection[c].append(x[onsets + 8] - x[onsets - 2])
        signs.append(sign)
        aligned = _segments(night.signals["E1-M2"], onsets - 10, int(0.5 * FS)) * -sign[:, None]
        rise.append(aligned.mean(axis=0))
        rolls = night.meta["events"]["slow_roll"]
        roll_sign = night.meta["eye_movement_signs"]["slow_roll"]
        keep = (night.stages[rolls // SPE] == 1) & (rolls + int(3 * FS) < night.stages.size * SPE)
        slow_rise.append((_segments(night.signals["E1-M2"], rolls[keep], int(3 * FS)) * -roll_sign[keep, None]).mean(0))
    sign = np.concatenate(signs)
    d = {c: np.concatenate(v) for c, v in deflection.items()}
    assert sign.size >= 30
    # polarity of the montage: rightward gaze -> E1 (left, below) negative, E2 (right, above) positive
    assert np.mean(np.sign(d["E1-M2"]) == -sign) >= 0.9 and np.mean(np.sign(d["E2-M1"]) == sign) >= 0.9
    assert np.mean(np.sign(d["EOG horizontal"]) == sign) >= 0.9
    # conjugate: both eyes move together, so E1-M2 and E2-M1 deflect out of phase by the same amount,
    # and the bipolar horizontal derivation sees both eyes' dipoles (twice a canthus electrode)
    assert np.corrcoef(d["E1-M2"], d["E2-M1"])[0, 1] < -0.8
    assert 1.6 < np.median(np.abs(d["EOG horizontal"])) / np.median(np.abs(d["E2-M1"])) < 2.4
    assert np.median(np.abs(d["E1-M2"])) > 40.0

    # sharp: 10 -> 90 % of the (sign-aligned, averaged) deflection in < 100 ms; slow rolling eye
    # movements of N1 take > 500 ms
    def rise_seconds(trace: np.ndarray, start: int) -> float:
        trace = trace - trace[:start].mean()
        top = trace.max()
        return (np.argmax(trace >= 0.9 * top) - np.argmax(trace >= 0.1 * top)) / FS

    assert rise_seconds(np.mean(rise, axis=0), 10) < 0.1
    assert rise_seconds(np.mean(slow_rise, axis=0), 1) > 0.5
    # EEG reaches both EOG derivations in phase: without eye movements (N2) they correlate positively
    for night, _ in nights:
        n2 = np.repeat(night.stages == 2, SPE)
        e1, e2 = (_band(night.signals[c], 0.3, 15.0)[n2] for c in ("E1-M2", "E2-M1"))
        assert np.corrcoef(e1, e2)[0, 1] > 0.5


def test_writers_keep_one_eog_derivation_as_the_real_formats():
    assert synth.PHYSIONET_SYNTH_CHANNELS.count("E1-M2") == 1 and synth.SECOND_EOG not in synth.PHYSIONET_SYNTH_CHANNELS
    assert [c for c in synth.SLEEP_EDF_SYNTH_CHANNELS if "EOG" in c] == ["EOG horizontal"]


# ----------------------------------------------------------------------------- artifacts


def test_movement_artifacts_land_in_their_annotated_places(nights):
    loud_annotated = []  # pooled over the nights (a 2-h excerpt may hold a single, quiet movement)
    for night, _ in nights:
        emg = night.signals["Chin1-Chin2"]
        epoch_rms = np.sqrt((emg.reshape(-1, SPE) ** 2).mean(axis=1))
        stage_median = np.array([np.median(epoch_rms[night.stages == k]) for k in range(5)])
        moved = np.zeros(night.stages.size, dtype=bool)
        for start, length in night.meta["movements"]:
            window = np.sqrt((emg[start : start + length] ** 2).mean())
            assert window > 3 * stage_median[night.stages[start // SPE]]
            moved[start // SPE] = True
        loud = epoch_rms > 4 * stage_median[night.stages]  # blind: epochs with very loud chin EMG
        loud_annotated += moved[loud].tolist()
        assert len(night.meta["movements"]) == len(night.meta["movement_epochs"])
    assert loud_annotated and np.mean(loud_annotated) >= 0.9  # are the annotated movements


def test_artifact_rates_are_realized():
    """12 subjects' full 9-h nights at 20 Hz (one EEG channel; cheap): realized movement / pop /
    sweat counts against the configured rates (``ARTIFACT_PROB`` per epoch and stage x the subject's
    ``artifact_scale``, ``EPOCHS_PER_POP``, ``SWEAT_PER_1000_EPOCHS``); the arousal index against the
    configured and the published one; realized arousal durations against the published mean +- SD."""
    fs = 20.0
    observed, expected, hours = np.zeros(4), np.zeros(4), 0.0
    arousal_index, arousal_seconds = [], []
    for subject in range(12):
        traits = SubjectTraits.sample(np.random.default_rng([7, subject]))
        night = synth_night(["C3-M2", "Chin1-Chin2"], 9, fs, traits, np.random.default_rng([7, subject, 0, 1]))
        stages, n_epochs = night.stages, night.stages.size
        hours += n_epochs / 120
        sleep_hours = (stages != 0).sum() / 120
        observed += [
            len(night.meta["movements"]),
            len(night.meta["pops"]),
            len(night.meta["sweat_episodes"]),
            len(night.meta["arousals"]),
        ]
        expected += [
            np.minimum(np.asarray(ARTIFACT_PROB)[stages] * traits.artifact_scale, 1.0).sum(),
            n_epochs / EPOCHS_PER_POP,
            SWEAT_PER_1000_EPOCHS * traits.artifact_scale * n_epochs / 1000.0,
            (AROUSALS_PER_HOUR + EXTRA_AROUSALS_PER_HOUR) * traits.arousal_scale * sleep_hours,
        ]
        arousal_index.append(len(night.meta["arousals"]) / sleep_hours / traits.arousal_scale)
        seconds = np.array([length for _, length in night.meta["arousals"]]) / fs
        assert seconds.min() >= 3.0 and seconds.max() < 30.0  # AASM minimum; inside one epoch
        arousal_seconds.append(seconds.mean())
    for obs, exp in zip(observed, expected):
        assert _poisson_close(obs, exp), (observed, expected)
    assert 0.4 < observed[1] / hours < 0.8  # electrode pops: 0.6 per hour configured
    assert 2.0 < observed[0] / hours < 8.0  # movement bursts per hour (mostly in wake)
    # arousal index of a subject with arousal_scale 1: the published 20-39-year value
    assert AROUSALS_PER_HOUR + EXTRA_AROUSALS_PER_HOUR == pytest.approx(AROUSAL_INDEX_PER_HOUR["20-39 y"])
    assert abs(np.median(arousal_index) / AROUSAL_INDEX_PER_HOUR["20-39 y"] - 1) < 0.2, arousal_index
    # arousal duration: the subjects' realized mean durations have the published mean +- SD (14.9 +- 2.3 s,
    # read as the spread of per-subject means): mean within 3 standard errors, SD within a factor 1.6
    mean, sd = AROUSAL_DURATION_SECONDS["mean"], AROUSAL_DURATION_SECONDS["sd"]
    assert abs(np.mean(arousal_seconds) - mean) < 3 * sd / np.sqrt(len(arousal_seconds)), arousal_seconds
    assert sd / 1.6 < np.std(arousal_seconds, ddof=1) < 1.6 * sd, arousal_seconds


def test_pops_and_sweat_land_in_their_annotated_places(monkeypatch):
    """With the pop and sweat rates raised (so one short night has many), each pop is a step of the
    annotated size in its channel only, and each sweat episode raises the 0.1-0.5 Hz power there."""
    monkeypatch.setattr(synth.artifacts, "EPOCHS_PER_POP", 4.0)  # the module that draws pops and sweat
    monkeypatch.setattr(synth.artifacts, "SWEAT_PER_1000_EPOCHS", 15.0)
    traits = SubjectTraits.sample(np.random.default_rng([7, 0]))
    channels = ["F3-M2", "O2-M1"]
    night = synth_night(channels, 2, FS, traits, np.random.default_rng([7, 0, 0, 1]))
    errors, largest = [], []
    for channel, start, step in night.meta["pops"]:
        if abs(step) > 30 and 50 < start < night.stages.size * SPE - 50:
            x, other = night.signals[channel], night.signals[channels[1 - channels.index(channel)]]
            jump = (x[start] - x[start - 1]) / traits.channel_gain[channel]
            errors.append(abs(jump - step) / abs(step))
            nearby = np.abs(np.diff(x[start - 50 : start + 50]))
            largest.append(np.argmax(nearby) == 49 and abs(other[start] - other[start - 1]) < 0.5 * abs(jump))
    assert len(errors) >= 10 and np.median(errors) < 0.25 and np.mean(largest) >= 0.9, (errors, largest)
    slow = _band(night.signals["F3-M2"], 0.1, 0.5)
    assert len(night.meta["sweat_episodes"]) >= 2
    anywhere = np.zeros(slow.size, dtype=bool)
    for start, length in night.meta["sweat_episodes"]:
        anywhere[start : start + length] = True
    quiet = slow[~anywhere].std()  # no sweat episode there
    ratios = np.array([slow[start : start + length].std() / quiet for start, length in night.meta["sweat_episodes"]])
    assert np.median(ratios) > 2.0 and np.mean(ratios > 1.2) >= 0.75, ratios


def test_line_noise_amplitude_is_the_subjects_mains_amplitude():
    fs, mains = 200.0, 60.0
    for subject in range(2):
        night, traits = _night(subject, ["O1-M2", "C4-M1"], fs=fs, hours=0.5, compress=1, mains_hz=mains)
        t = np.arange(night.stages.size * 30 * int(fs)) / fs
        for c in ("O1-M2", "C4-M1"):
            amplitude = 2 * abs(np.mean(night.signals[c] * np.exp(-2j * np.pi * mains * t)))
            assert amplitude == pytest.approx(traits.mains_uv * traits.channel_gain[c], rel=0.05, abs=0.05)
    night, _ = _night(0, ["O1-M2"], fs=100.0, hours=0.5, compress=1, mains_hz=50.0)
    assert night.meta["mains_hz"] is None  # 50 Hz is not representable at 100 Hz: omitted, and said so


# ----------------------------------------------------------------------------- SC-length files, pinned windows


def _prepared(tmp_path, fmt: str, **synth_kwargs) -> tuple[list[dict], list[np.ndarray]]:
    from multiview_app.data.eeg.cache import prepare
    from multiview_app.data.eeg.preprocess import PrepareOptions
    from multiview_app.data.eeg.stages import PHYSIONET2018_EEG

    raw, cache = tmp_path / f"raw_{fmt}", tmp_path / f"cache_{fmt}"
    synth.synth_psg(raw, fmt=fmt, progress=False, **synth_kwargs)
    channels = list(PHYSIONET2018_EEG) if fmt == "physionet2018" else ["EEG Fpz-Cz", "EEG Pz-Oz"]
    prepare(fmt, raw, cache, PrepareOptions(channels=channels))
    records = sorted(json.loads((cache / "manifest.json").read_text())["recordings"], key=lambda r: r["recording"])
    return records, [np.load(cache / r["file"]) for r in records]


def test_sc_length_recordings_are_cropped_back_to_the_same_windows(tmp_path):
    import edfio

    night, night_windows = _prepared(tmp_path / "night", "sleep-edf", subjects=1, nights=1, hours=6, record_hours=0)
    padded, padded_windows = _prepared(tmp_path / "padded", "sleep-edf", subjects=1, nights=1, hours=6, record_hours=8)
    pad_before = int(round(synth.SC_PADDING_BEFORE * (8 - 6) * 120))
    edf = edfio.read_edf(next((tmp_path / "padded" / "raw_sleep-edf").glob("*PSG.edf")))
    assert edf.duration == 8 * 3600
    assert np.array_equal(night_windows[0], padded_windows[0])  # the reader's crop removes all padding
    assert night[0]["labels"] == padded[0]["labels"]
    assert np.array_equal(np.asarray(padded[0]["epochs"]), np.asarray(night[0]["epochs"]) + pad_before)
    cropped = lambda r: r["counts"]["dropped_wake_cropped"] + r["counts"]["dropped_excluded"]  # noqa: E731
    assert cropped(padded[0]) - cropped(night[0]) == (8 - 6) * 120
    # defaults: SC-length 20-h files for full Sleep-EDF nights only
    assert default_record_hours("sleep-edf", 9, 1) == 20.0
    assert default_record_hours("sleep-edf", 9, 3) is None and default_record_hours("sleep-edf", 2, 1) is None
    assert default_record_hours("physionet2018", 9, 1) is None
    with pytest.raises(ValueError, match="record-hours"):
        synth.synth_psg(tmp_path / "x", 1, 1, "physionet2018", hours=1, record_hours=20, progress=False)


@pytest.mark.parametrize("fmt", ["physionet2018", "sleep-edf"])
def test_synth_psg_with_workers_writes_the_same_files(tmp_path: Path, fmt: str) -> None:
    """``workers=2`` (the demo's PhysioNet-format synthesis) writes byte-identical files, listed in the same order."""
    kwargs = {"subjects": 3, "nights": 1, "fmt": fmt, "hours": 0.5, "seed": 5, "progress": False}
    one = synth.synth_psg(tmp_path / "one", workers=1, **kwargs)
    two = synth.synth_psg(tmp_path / "two", workers=2, **kwargs)
    assert [p.name for p in one] == [p.name for p in two] and len(one) >= 3
    for a, b in zip(one, two):
        assert a.read_bytes() == b.read_bytes(), a.name
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == sorted(p.name for p in (tmp_path / "two").iterdir())
    with pytest.raises(ValueError, match="--workers must be positive"):
        synth.synth_psg(tmp_path / "x", workers=0, **kwargs)


PINNED_KEYS = [  # synth-psg arguments (format, hours, compress, seed) of the pinned windows
    ("sleep-edf", 1.5, 1, 0),
    ("sleep-edf", 9.0, 3, 1000),  # the demo's Sleep-EDF settings, 1 subject
    ("physionet2018", 9.0, 6, 0),
]
PINNED_FILE = Path(__file__).with_name("pinned_eeg_windows.json")
"""Fingerprints of the prepared windows per key (:func:`window_fingerprint`). Rewrite on purpose with
``MVAPP_WRITE_PINS=1 pytest tests/test_eeg_synth_events.py -k pinned`` after a deliberate generator
change, and say why in the commit. History (as SHA-256 byte digests, first 16 hex, before issue 28
replaced them by fingerprints): (1) the published arousal index (EXTRA_AROUSALS_PER_HOUR); before it
(and with EXTRA_AROUSALS_PER_HOUR = 0): a4d3e3b088e844b5, 509f415cb2e32780, e1fb9e03d7e6b210.
(2) Published arousal durations, a calmer hypnogram (W / NREM / REM transitions), a quiet N2
background with larger K-complexes (docs/eeg.md, "What changed for the demo's EEG windows"); before
it: a5ca8764cb43573f, 9ba6a7614197df9c, 1a9c77f755ef39a0; after it: 324b4cf0c3539947,
67af9dec30b0a599, 91d9673bd1f30264 (on an AVX2 machine: byte digests of filtered float32 windows
differ between CPUs, see :data:`PIN_TOLERANCE`). (3) Wake / N1 against the real DREAMS epochs (fingerprints
rewritten): the SC cohort's age / sex effect on the N2 / N3 slow waves only, the SC noise floor equal to the
base cohort's, arousal bursts 3 / 2 uV alpha / beta (were 6 / 4), wake beta alike with eyes open and
closed and a smaller alpha contrast (``synth.EYES_OPEN`` / ``EYES_CLOSED``); all three keys move. (4) Generator 4
(fingerprints rewritten): an N2 / N3 delta background the SC age / sex effect leaves alone
(``RHYTHMS["delta_background"]``), N1 sleep alpha 2.1 uV and 6 slow rolls per minute, REM interrupted by N2 as
in the real SC hypnograms (``hypnogram.INTERRUPTION``); the new rhythm's draws move every key. (5) Not a generator
change: ``prepare``'s default scaling became ``recording`` (per-recording robust scaling, chosen on validation
subjects for the demo's encoder, docs/eeg.md), so the windows are no longer z-scored per window; every key
moves, the labels stay."""

# Windows per segment of the per-window profiles (1 h of 30-s windows).
PIN_SEGMENT = 120
# Tolerance per statistic of a fingerprint: |value - pinned| <= tol * (1 + |pinned|) (windows are
# standardized, values in units of a window's std). Measured (scripts in the issue-28 report, this
# machine): the same code with other SIMD paths (NPY_DISABLE_CPU_FEATURES=X86_V3,
# OPENBLAS_CORETYPE=Prescott, ATEN_CPU_CAPABILITY=default) writes EDF files whose 16-bit samples
# differ by one step here and there (the float signal lands on the other side of a rounding edge),
# which moved the statistics by at most: quantiles 1.6e-5, skew 3.6e-6, kurtosis 2.7e-6,
# corr 4.1e-7, line_length 1.1e-7. Each tolerance is 10-20x that (that run used <= 0.08 of every
# tolerance). Generator changes (scratch runs with one synth constant scaled, same seeds), largest
# |change| / tolerance over the three keys' statistics: PINK_NOISE_UV x 1.01 (global): 150-270 per key;
# AROUSAL_ALPHA_UV x 1.01 (only arousal windows): 4.4-11 (line_length), 5-25 (corr) per key;
# AROUSAL_ALPHA_UV x 1.001: 1.3-2.5 in two keys, 0.54 in the third (below the EDF resolution).
PIN_TOLERANCE = {"quantiles": 2e-4, "skew": 5e-5, "kurtosis": 5e-5, "corr": 5e-6, "line_length": 2e-6}


def window_fingerprint(records: list[dict], windows: list[np.ndarray]) -> list[dict]:
    """Per recording: ``shape``, ``dtype`` and ``labels`` digest (exact), and per channel of the
    ``(n, c, t)`` float32 windows (statistics in float64; windows are standardized, so values are in
    units of a window's std): ``quantiles`` (1, 10, 50, 90, 99 %) of all samples, and the profiles
    ``line_length`` (mean ``|x[t+1] - x[t]|``: frequency content), ``skew`` (mean ``x^3``), ``kurtosis``
    (mean ``x^4``) and ``corr`` (with the next channel): each window's value averaged over each
    :data:`PIN_SEGMENT` consecutive windows, so a change confined to a few windows shows in its hour.
    Rounded to 9 significant digits."""
    out = []
    for record, w in zip(records, windows):
        x = w.astype(np.float64)
        n, c, _ = x.shape
        per_window = {
            "line_length": np.abs(np.diff(x, axis=2)).mean(axis=2),
            "skew": (x**3).mean(axis=2),
            "kurtosis": (x**4).mean(axis=2),
            "corr": (x * np.roll(x, -1, axis=1)).mean(axis=2),
        }  # each (n, c)
        segments = range(0, n, PIN_SEGMENT)
        round9 = lambda a: [float(f"{v:.9g}") for v in np.asarray(a).ravel()]  # noqa: E731
        channels = []
        for ch in range(c):
            entry = {"quantiles": round9(np.quantile(x[:, ch], [0.01, 0.1, 0.5, 0.9, 0.99]))}
            for name, values in per_window.items():
                entry[name] = round9([values[s : s + PIN_SEGMENT, ch].mean() for s in segments])
            channels.append(entry)
        out.append(
            {
                "recording": record["recording"],
                "shape": list(w.shape),
                "dtype": str(w.dtype),
                "labels_sha256": hashlib.sha256(np.asarray(record["labels"], dtype=np.int64).tobytes()).hexdigest()[
                    :16
                ],
                "channels": channels,
            }
        )
    return out


def assert_fingerprints_match(actual: list[dict], pinned: list[dict]) -> None:
    """Exact on recordings, shapes, dtypes, label digests; numbers within ``tol * (1 + |pinned|)``,
    ``tol`` = :data:`PIN_TOLERANCE` of the statistic (one message naming recording, channel, statistic)."""
    assert [r["recording"] for r in actual] == [r["recording"] for r in pinned]
    for got, want in zip(actual, pinned):
        name = want["recording"]
        assert (got["shape"], got["dtype"]) == (want["shape"], want["dtype"]), f"{name}: windows' shape / dtype moved"
        assert got["labels_sha256"] == want["labels_sha256"], f"{name}: labels moved"
        for ch, (g, p) in enumerate(zip(got["channels"], want["channels"])):
            assert g.keys() == p.keys(), f"{name}, channel {ch}: fingerprint fields differ"
            for key in p:
                tol = PIN_TOLERANCE[key]
                np.testing.assert_allclose(
                    g[key], p[key], rtol=tol, atol=tol, err_msg=f"{name}, channel {ch}: {key} moved"
                )


@pytest.mark.parametrize("key", PINNED_KEYS)
def test_demo_eeg_windows_are_pinned(tmp_path, key):
    """The prepared windows of the demo's EEG channels (PhysioNet 2018: the six derivations;
    Sleep-EDF: Fpz-Cz, Pz-Oz) for fixed synth-psg arguments: a generator change that moves them
    fails here and must update the pins on purpose (other work measures on these windows).

    Labels, shapes and dtypes are pinned exactly; the float32 values through statistics with a
    stated tolerance per statistic (:data:`PIN_TOLERANCE`, ~10x the spread between two numeric
    environments, far below what a 1 % generator change moves), not their bytes: the synthesized
    signals differ in their last bits between CPUs (vector instructions), which flips single 16-bit
    EDF samples, and a byte digest of the windows failed on other machines.
    """
    fmt, hours, compress, seed = key
    records, windows = _prepared(tmp_path, fmt, subjects=1, nights=1, hours=hours, compress=compress, seed=seed)
    actual = window_fingerprint(records, windows)
    label = "/".join(str(v) for v in key)
    pins = json.loads(PINNED_FILE.read_text()) if PINNED_FILE.exists() else {}
    if os.environ.get("MVAPP_WRITE_PINS") == "1":
        pins[label] = actual
        PINNED_FILE.write_text(json.dumps(pins, indent=1) + "\n")
    assert label in pins, f"no pinned fingerprint for {label} in {PINNED_FILE.name} (MVAPP_WRITE_PINS=1 writes it)"
    assert_fingerprints_match(actual, pins[label])
