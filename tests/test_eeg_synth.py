"""Generator honesty: published stage proportions, spatially decaying channel correlations, night
structure, per-stage spectra and signatures, subject-level variation (reference values: reference.py)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.signal import butter, sosfiltfilt, welch

from multiview_app.data.eeg.night_structure import runs, wake_nrem_rem_transitions_per_hour
from multiview_app.data.eeg.preprocess import wake_crop_mask
from multiview_app.data.eeg.reference import (
    BANDS,
    DREAMS_CENTRAL_BAND_RMS_UV,
    DREAMS_CENTRAL_RELATIVE_POWER_IQR,
    FPZ_CZ_RELATIVE_POWER_RANGES,
    SLEEP_EDF_SC_CONTINUITY,
    SLEEP_EDF_SC_EPOCHS,
    SLEEP_EDF_SC_REAL_NIGHT_STRUCTURE,
    SPINDLE_PER_MIN_N2,
    STAGE_TRANSITIONS_PER_HOUR,
)
from multiview_app.data.eeg.signal_stats import detect_spindles
from multiview_app.data.eeg.stages import PHYSIONET2018_EEG
from multiview_app.data.eeg.synth import (
    SubjectTraits,
    full_night_excerpt,
    spatial_correlation,
    synth_hypnogram,
    synth_night,
)

PUBLISHED_SC_EPOCHS = np.array(list(SLEEP_EDF_SC_EPOCHS.values()))


@pytest.mark.parametrize("compress", [1, 3])
def test_full_nights_and_excerpts_keep_published_stage_proportions(compress):
    totals = np.zeros(5)
    for subject in range(20):
        traits = SubjectTraits.sample(np.random.default_rng([0, subject]))
        stages = full_night_excerpt(synth_hypnogram(9 * 120, traits, np.random.default_rng([0, subject, 1])), compress)
        totals += np.bincount(stages[wake_crop_mask(stages, 30.0)], minlength=5)
    shares = totals / totals.sum()
    published = PUBLISHED_SC_EPOCHS / PUBLISHED_SC_EPOCHS.sum()
    np.testing.assert_allclose(shares, published, atol=0.025)  # every stage within 2.5 points
    if compress == 3:
        assert 330 < totals.sum() / 20 < 390  # ~3 h per night instead of ~9 h


def test_channel_correlations_decay_with_distance_and_nothing_is_shared_identically():
    traits = SubjectTraits.sample(np.random.default_rng(3))
    traits.latency_minutes = 5.0
    night = synth_night(list(PHYSIONET2018_EEG), 0.5, 100.0, traits, np.random.default_rng(3))
    sos = butter(4, [0.5, 30.0], btype="bandpass", fs=100.0, output="sos")
    x = sosfiltfilt(sos, np.stack([night.signals[c] for c in PHYSIONET2018_EEG]), axis=-1)
    corr = np.corrcoef(x)
    index = {c: i for i, c in enumerate(PHYSIONET2018_EEG)}
    near = corr[index["F3-M2"], index["C3-M2"]]
    far = corr[index["F3-M2"], index["O2-M1"]]
    assert near > far + 0.15
    assert corr[index["O1-M2"], index["O2-M1"]] > corr[index["O1-M2"], index["F4-M1"]]
    assert corr[~np.eye(6, dtype=bool)].max() < 0.9
    # per-epoch amplitude jitter is not common to all channels: the log power ratio of a near and a
    # far channel varies from epoch to epoch
    power = (x.reshape(6, -1, 3000) ** 2).mean(-1)
    ratio = np.log(power[index["F3-M2"]] / power[index["O2-M1"]])
    assert ratio.std() > 0.15
    model = spatial_correlation(list(PHYSIONET2018_EEG))
    assert (
        model[index["F3-M2"], index["C3-M2"]]
        > model[index["F3-M2"], index["F4-M1"]]
        > model[index["F3-M2"], index["O2-M1"]]
    )


# ----------------------------------------------------------------------------- night structure


def _rem_periods(stages: np.ndarray, gap_epochs: int = 30) -> list[tuple[int, int]]:
    """REM periods: REM epochs separated by < 15 min of other stages belong to one period (the usual
    NREM-REM cycle definition); (first, last) epoch of each."""
    periods: list[list[int]] = []
    for i in np.flatnonzero(stages == 4):
        if periods and i - periods[-1][1] <= gap_epochs:
            periods[-1][1] = i
        else:
            periods.append([i, i])
    return [(a, b) for a, b in periods]


def test_semi_markov_night_structure():
    nights = [
        synth_hypnogram(9 * 120, SubjectTraits.sample(np.random.default_rng([0, s])), np.random.default_rng([0, s, 1]))
        for s in range(20)
    ]
    first_rem, last_rem, n3_thirds = [], [], np.zeros(3)
    bouts: dict[int, list[int]] = {k: [] for k in range(5)}
    brief_awakenings, sleep_hours, transition_rates = 0, 0.0, []
    for stages in nights:
        sleep = np.flatnonzero(stages != 0)
        assert sleep[0] >= 70 and stages.size - 1 - sleep[-1] >= 70  # >= 35 min wake before and after (SC files)
        periods = _rem_periods(stages)
        assert 4 <= len(periods) <= 6, len(periods)  # 4-6 NREM-REM cycles
        first_rem.append(periods[0][1] - periods[0][0] + 1)
        last_rem.append(np.mean([b - a + 1 for a, b in periods[-2:]]))
        third = (sleep[-1] - sleep[0]) // 3
        n3_thirds += [(stages[sleep[0] + i * third : sleep[0] + (i + 1) * third] == 3).sum() for i in range(3)]
        stage, length, start = runs(stages[sleep[0] : sleep[-1] + 1])
        for k in range(5):
            bouts[k] += length[stage == k].tolist()
        brief_awakenings += int(((stage == 0) & (length <= 2)).sum())
        sleep_hours += (sleep[-1] - sleep[0]) / 120
        transition_rates.append(wake_nrem_rem_transitions_per_hour(stages))
    assert n3_thirds[0] > 3 * n3_thirds[2] and n3_thirds[0] + n3_thirds[1] > 0.85 * n3_thirds.sum()  # N3 early
    assert np.mean(last_rem) > 2 * np.mean(first_rem)  # REM periods lengthen across the night
    assert np.mean(np.asarray(last_rem) > np.asarray(first_rem)) >= 0.9
    # bouts as in the 20 real Sleep-EDF SC nights (issue 25 item 3; the former assertions, "N2-REM bouts
    # > 3x the N1 mean" and "one-epoch N3 / REM bouts far rarer than in a Markov chain", were assumptions
    # the real nights refute: real N3 bouts are one epoch in 47 % of cases, N3 / N1 mean 2.6x)
    real = SLEEP_EDF_SC_REAL_NIGHT_STRUCTURE["bouts"]
    for k, name in enumerate(["W", "N1", "N2", "N3", "REM"]):
        lengths = np.asarray(bouts[k]) / 2  # minutes
        assert abs(np.mean(lengths) / real[name]["mean_minutes"] - 1) < 0.35, (name, np.mean(lengths))
        assert abs(np.mean(lengths == 0.5) - real[name]["one_epoch_share"]) < 0.15, (name, np.mean(lengths == 0.5))
    assert np.mean(np.asarray(bouts[3]) == 1) > 3 * 0.5 / np.mean(bouts[3])  # N3 flickers: far from semi-Markov
    assert 1.0 <= brief_awakenings / sleep_hours <= 8.0  # brief awakenings (<= 1 min) per hour of sleep
    # sleep continuity: W / NREM / REM transitions per hour of sleep; healthy nights sit in the calmest
    # quartile of the (older, community) SHHS cohort, below its cut-off, and the median night inside the
    # interquartile range of the Sleep-EDF SC nights themselves
    cutoff = STAGE_TRANSITIONS_PER_HOUR["shhs_lowest_quartile_below"]
    low, high = SLEEP_EDF_SC_CONTINUITY["transitions_per_hour"]["iqr"]
    assert low <= np.median(transition_rates) <= high, transition_rates
    assert np.mean(np.asarray(transition_rates) < cutoff) >= 0.75, transition_rates


# ----------------------------------------------------------------------------- signals

SIGNAL_CHANNELS = ["EEG Fpz-Cz", "EEG Pz-Oz", "C3-M2", "EOG horizontal", "EMG submental"]


@pytest.fixture(scope="module")
def nights():
    """Three subjects' 9-h nights as 4x compressed excerpts at 100 Hz (~2.3 h each)."""
    out = []
    for s in range(3):
        traits = SubjectTraits.sample(np.random.default_rng([0, s]))
        out.append(synth_night(SIGNAL_CHANNELS, 9, 100.0, traits, np.random.default_rng([0, s, 0, 1]), compress=4))
    return out


def _epochs(signal: np.ndarray, fs: float = 100.0) -> np.ndarray:
    return signal.reshape(-1, int(30 * fs))


def _band(signal: np.ndarray, low: float, high: float, fs: float = 100.0) -> np.ndarray:
    return sosfiltfilt(butter(4, [low, high], btype="bandpass", fs=fs, output="sos"), signal)


def test_per_stage_relative_band_powers_within_ranges(nights):
    from multiview_app.eval.bandpower import relative_band_powers

    stages = np.concatenate([n.stages for n in nights])
    rel = np.concatenate(
        [relative_band_powers(_epochs(_band(n.signals["EEG Fpz-Cz"], 0.5, 30.0))[:, None], 100.0)[:, 0] for n in nights]
    )  # (e, 5)
    for k, name in enumerate(["W", "N1", "N2", "N3", "REM"]):
        median = np.median(rel[stages == k], axis=0)
        for band, value, (low, high) in zip(BANDS, median, FPZ_CZ_RELATIVE_POWER_RANGES[name]):
            assert low <= value <= high, f"{name} {band}: {value:.3f} not in [{low}, {high}]"
    sigma = [np.median(rel[stages == k, 3]) for k in range(5)]
    assert sigma[2] > max(sigma[1], sigma[3], sigma[4])  # spindles: sigma peaks in N2


def test_central_derivation_matches_the_real_dreams_central_lead(nights):
    """C3-M2 per stage (W, N1, N2, N3) against the real DREAMS central epochs (issue 25 item 3): median
    relative band powers within the real interquartile range widened by half its width, and median
    in-band rms within 35 % of the real median (3 subjects here, 6 in the compare script) (the figures the generator's amplitudes were set to)."""
    from multiview_app.data.eeg.bands import band_powers

    stages = np.concatenate([n.stages for n in nights])
    powers, total = map(
        np.concatenate,
        zip(*[band_powers(_epochs(_band(n.signals["C3-M2"], 0.5, 30.0))[:, None], 100.0) for n in nights]),
    )
    relative, rms = (powers / total)[:, 0], powers[:, 0]
    for k, name in enumerate(["W", "N1", "N2", "N3"]):
        median = np.median(relative[stages == k], axis=0)
        for band, value, (low, high) in zip(BANDS, median, DREAMS_CENTRAL_RELATIVE_POWER_IQR[name]):
            margin = 0.5 * (high - low)
            assert low - margin <= value <= high + margin, f"{name} {band}: {value:.3f} vs real IQR [{low}, {high}]"
        band_rms = np.sqrt(np.median(rms[stages == k], axis=0))
        np.testing.assert_allclose(band_rms, DREAMS_CENTRAL_BAND_RMS_UV[name], rtol=0.35, err_msg=name)


def test_stage_signatures_rem_n1_wake(nights):
    from multiview_app.eval.bandpower import relative_band_powers

    stages = np.concatenate([n.stages for n in nights])
    closed = np.concatenate([n.meta["eyes_closed"] for n in nights])
    emg = np.concatenate([np.sqrt((_epochs(n.signals["EMG submental"]) ** 2).mean(1)) for n in nights])
    median = lambda values, mask: float(np.median(values[mask]))  # noqa: E731
    assert median(emg, stages == 4) < median(emg, stages == 2) < median(emg, stages == 0)  # REM atonia, wake tone
    # eye movements: fast deflections (rapid eye movements, saccades) in REM; slow rolling ones in N1
    eog = [n.signals["EOG horizontal"] for n in nights]
    fast = np.concatenate(
        [(np.abs(np.diff(_band(e, 0.3, 15.0), append=0.0)) * 100 > 1200).reshape(-1, 3000).sum(1) for e in eog]
    )
    slow = np.concatenate([_epochs(_band(e, 0.2, 1.0)).std(1) for e in eog])
    assert fast[stages == 4].mean() > 3 * fast[stages == 2].mean()
    phasic = np.concatenate([n.meta["phasic_rem"] for n in nights])
    assert fast[phasic].mean() > 3 * fast[(stages == 4) & ~phasic].mean()  # bursts: phasic vs tonic REM
    assert median(slow, stages == 1) > 1.5 * median(slow, stages == 2) and median(slow, stages == 1) > median(
        slow, stages == 0
    )
    # posterior alpha: eyes closed >> eyes open; N1 alpha dropout
    alpha = np.concatenate(
        [
            relative_band_powers(_epochs(_band(n.signals["EEG Pz-Oz"], 0.5, 30.0))[:, None], 100.0)[:, 0, 2]
            for n in nights
        ]
    )
    wake = stages == 0
    assert median(alpha, wake & closed) > 2.5 * median(alpha, wake & ~closed)
    assert median(alpha, stages == 1) < 0.5 * median(alpha, wake & closed)
    assert 0.2 < closed[wake].mean() < 0.8
    # spindles (11-16 Hz bursts of 0.5-3 s on C3): N2 density within the published detector density
    # (mean +- SD), few in REM
    density = np.zeros(5)
    for n in nights:
        onsets, _ = detect_spindles(n.signals["C3-M2"], 100.0, n.stages)  # envelope > 3 x N2 median, 0.5-3 s
        density += np.bincount(n.stages[np.round(onsets * 100).astype(int) // 3000], minlength=5)
    density /= np.bincount(stages, minlength=5) / 2  # per minute
    mean, sd = SPINDLE_PER_MIN_N2["mean"], SPINDLE_PER_MIN_N2["sd"]
    assert mean - sd <= density[2] <= mean + sd and density[4] < 0.25 * density[2], density


def test_subjects_differ_more_than_nights_of_one_subject():
    """Subject-level traits (age-like delta amplitude, alpha peak, gains, noise): between-subject
    variance of per-night N2/N3 delta power and posterior alpha frequency exceeds the within-subject one."""
    delta, peak = np.zeros((4, 2)), np.zeros((4, 2))
    for s in range(4):
        traits = SubjectTraits.sample(np.random.default_rng([5, s]))
        for night in range(2):
            data = synth_night(
                ["EEG Fpz-Cz", "EEG Pz-Oz"], 4, 100.0, traits, np.random.default_rng([5, s, night]), compress=4
            )
            x = _epochs(_band(data.signals["EEG Fpz-Cz"], 0.5, 4.0))
            delta[s, night] = np.log(np.median(x[np.isin(data.stages, [2, 3])].var(1)))
            wake = _epochs(data.signals["EEG Pz-Oz"])[data.stages == 0]
            freqs, spectrum = welch(wake, fs=100.0, nperseg=400, axis=-1)
            spectrum = spectrum.mean(0)
            band = (freqs >= 7.0) & (freqs <= 13.0)
            peak[s, night] = (freqs[band] * spectrum[band]).sum() / spectrum[band].sum()  # alpha centroid
    for values in (delta, peak):
        between = values.mean(1).var()
        within = ((values - values.mean(1, keepdims=True)) ** 2).mean()
        assert between > 2 * within, values


def test_sleep_edf_sc_cohort_traits_follow_the_published_directions() -> None:
    """Issue 26 item 4: the SC cohort draws an age in the SC range and a sex, then less N3 and smaller slow
    waves, longer and likelier awakenings and more arousals with age, the SC recorders' noise floor and
    artifact rate; the young-adult cohort (PhysioNet-format nights) keeps the base traits; an unknown
    cohort is one error naming it and the valid ones."""
    from multiview_app.data.eeg import synth
    from multiview_app.data.eeg.reference import SLEEP_EDF_SC_SUBJECTS

    def base(subject: int) -> SubjectTraits:
        return SubjectTraits.sample(np.random.default_rng([0, subject]))

    with pytest.raises(ValueError, match="unknown cohort 'elderly'.*young-adult, sleep-edf-sc"):
        base(0).with_cohort("elderly", np.random.default_rng(0))
    assert base(0).with_cohort("young-adult", np.random.default_rng(1)) == base(0)
    low, high = SLEEP_EDF_SC_SUBJECTS["age_range"]
    ages, n3, delta, awakening, arousal = [], [], [], [], []
    for subject in range(200):
        before = base(subject)
        after = base(subject).with_cohort("sleep-edf-sc", np.random.default_rng([0, subject, synth.COHORT_STREAM]))
        assert low <= after.age_years <= high and after.sex in ("F", "M")
        assert synth.SC_WHITE_NOISE_UV[0] <= after.white_noise_uv <= synth.SC_WHITE_NOISE_UV[1]
        assert after.artifact_scale == pytest.approx(before.artifact_scale * synth.SC_ARTIFACT_SCALE)
        assert after.alpha_hz == before.alpha_hz and after.cycle_minutes == before.cycle_minutes  # base kept
        assert after.awakening_prob >= before.awakening_prob
        ages.append(after.age_years)
        n3.append(after.n3_scale / before.n3_scale)
        assert after.delta_scale == before.delta_scale  # the age effect is on the NREM slow waves only
        delta.append(after.slow_wave_scale / synth.SC_AGE_EFFECTS["delta_by_sex"][after.sex])
        awakening.append(after.awakening_scale / before.awakening_scale)
        arousal.append(after.arousal_scale / before.arousal_scale)
    order = np.argsort(ages)
    for name, ratio, sign in (
        ("n3", n3, -1),
        ("delta", delta, -1),
        ("awakening", awakening, 1),
        ("arousal", arousal, 1),
    ):
        by_age = np.asarray(ratio)[order]
        assert np.all(sign * np.diff(by_age) >= -1e-12), name  # monotone in age
        assert sign * (by_age[-1] - by_age[0]) > 0.2, name  # and a real effect over 25-101 y
    assert min(n3) >= synth.SC_AGE_EFFECTS["n3_floor"] - 1e-12
    # the sexes drawn at the SC study's female share (40 of 74, Mourtazaev et al. 1995)
    sexes = [
        base(s).with_cohort("sleep-edf-sc", np.random.default_rng([0, s, synth.COHORT_STREAM])).sex for s in range(200)
    ]
    assert abs(sexes.count("F") / 200 - synth.SC_FEMALE_SHARE) < 0.1


def _central_delta_power(traits: SubjectTraits, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """C3-M2 0.5-3.5 Hz power per epoch ``(e,)`` and the stages ``(e,)`` of a compressed night."""
    night = synth_night(["C3-M2"], 9, 100.0, traits, np.random.default_rng([seed, 1]), compress=6)
    return _epochs(_band(night.signals["C3-M2"], 0.5, 3.5)).var(axis=1), night.stages


def test_cohort_age_effect_shrinks_nrem_slow_waves_and_leaves_wake_and_n1_delta() -> None:
    """The SC cohort's age / sex effect (``slow_wave_scale``) acts on the N2 / N3 delta rhythm only: the
    same night drawn with the scale halved has about a quarter of the N3 delta power and the same W / N1
    delta power (wake and N1 delta are not the slow waves the SC study measured)."""
    from multiview_app.data.eeg import synth

    traits = SubjectTraits.sample(np.random.default_rng([9, 0]))
    full, stages = _central_delta_power(traits, 9)
    traits.slow_wave_scale = 0.5
    half, same_stages = _central_delta_power(traits, 9)
    assert np.array_equal(stages, same_stages)
    slow = np.isin(stages, synth.SLOW_WAVE_STAGES)
    near_slow = slow | np.r_[False, slow[:-1]] | np.r_[slow[1:], False]  # the envelope interpolates between epochs
    ratio = half / full
    for stage in (synth.W, synth.N1):
        chosen = ~near_slow & (stages == stage)
        assert chosen.sum() >= 3, synth.STAGES[stage]
        np.testing.assert_allclose(ratio[chosen], 1.0, rtol=1e-3)
    n3 = (stages == synth.N3) & np.r_[False, stages[:-1] == synth.N3] & np.r_[stages[1:] == synth.N3, False]
    assert n3.sum() >= 5 and 0.2 < np.median(ratio[n3]) < 0.4  # amplitude 0.5: power ~0.25 (+ other sources)


def test_cohort_age_effect_keeps_an_n1_sized_nrem_delta_background() -> None:
    """The age / sex effect scales the slow waves above the N2 / N3 delta background
    (``RHYTHMS["delta_background"]``), not the background: with no slow waves at all (scale 0) N2 and N3
    keep at least N1's delta power, so delta stays ordered N1 <= N2 <= N3 in the oldest subjects (with
    the whole N2 delta scaled, older men's N2 had less delta than their N1)."""
    from multiview_app.data.eeg import synth

    traits = SubjectTraits.sample(np.random.default_rng([9, 0]))
    traits.slow_wave_scale = 0.0
    power, stages = _central_delta_power(traits, 9)
    before, after = np.r_[-1, stages[:-1]], np.r_[stages[1:], -1]  # the envelope interpolates between epochs
    chosen = {
        synth.N1: (stages == synth.N1)
        & ~np.isin(before, synth.SLOW_WAVE_STAGES)
        & ~np.isin(after, synth.SLOW_WAVE_STAGES),
        **{s: (stages == s) & (before == s) & (after == s) for s in synth.SLOW_WAVE_STAGES},
    }
    assert all(c.sum() >= 3 for c in chosen.values()), {s: int(c.sum()) for s, c in chosen.items()}
    median = {s: np.median(power[c]) for s, c in chosen.items()}
    assert median[synth.N2] > 0.8 * median[synth.N1] and median[synth.N3] > 0.8 * median[synth.N1]


def test_sleep_edf_cohort_wake_and_n1_match_the_real_dreams_central_lead() -> None:
    """Sleep-EDF-format (SC cohort) nights: C3-M2 median relative band power of W and N1 within the real
    DREAMS central interquartile range widened by half its width (as the young-adult test above); the SC
    noise floor and all-stage delta loss of the first SC cohort left N1 beta at 0.086 and delta at 0.39
    (real IQR 0.024-0.048 and 0.53-0.77)."""
    from multiview_app.data.eeg import synth
    from multiview_app.eval.bandpower import relative_band_powers

    rel, stages = [], []
    for s in range(3):
        traits = SubjectTraits.sample(np.random.default_rng([0, s])).with_cohort(
            "sleep-edf-sc", np.random.default_rng([0, s, synth.COHORT_STREAM])
        )
        night = synth_night(["C3-M2"], 9, 100.0, traits, np.random.default_rng([0, s, 2]), compress=6)
        rel.append(relative_band_powers(_epochs(_band(night.signals["C3-M2"], 0.5, 30.0))[:, None], 100.0)[:, 0])
        stages.append(night.stages)
    rel, stages = np.concatenate(rel), np.concatenate(stages)
    for k, name in ((synth.W, "W"), (synth.N1, "N1")):
        median = np.median(rel[stages == k], axis=0)
        for band, value, (low, high) in zip(BANDS, median, DREAMS_CENTRAL_RELATIVE_POWER_IQR[name]):
            margin = 0.5 * (high - low)
            assert low - margin <= value <= high + margin, f"{name} {band}: {value:.3f} vs real IQR [{low}, {high}]"
