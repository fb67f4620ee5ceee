"""Synthetic heart, breathing and oximetry coupled to a hypnogram, with sleep-disordered breathing.

Signals (each ``(n,)`` at ``fs``): ``ECG`` (mV) from a beat-time process (integral pulse frequency
modulation of an RR-interval process: stage-dependent heart rate, respiratory sinus arrhythmia locked to
the breathing phase, a ~0.1 Hz low-frequency band and slow drifts) with a Gaussian-sum PQRST template;
``CHEST`` / ``ABD`` (respiratory inductance belts, arbitrary units) and ``AIRFLOW`` (arbitrary units ~ L/s)
from a breathing-phase process with stage-dependent rate, tidal volume and regularity; ``SaO2`` (%) at the
subject's baseline with small normal dips, quantised like an oximeter. Respiratory events
(:mod:`.sdb_events`) act on them through slow control signals sampled at ``CTRL_HZ``. Sources and
certainty are stated next to each constant ("from memory" = not checked against any text).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import fft as sp_fft
from scipy.ndimage import uniform_filter1d
from scipy.signal import oaconvolve

from . import sdb_events
from .stages import EPOCH_SECONDS

W, N1, N2, N3, REM = range(5)
CTRL_HZ = 10.0
"""Rate of the slow control signals (heart rate, breathing rate, amplitudes, event modulations)."""
TRANSITION_SECONDS = 20.0
"""Stage-dependent levels change smoothly over this time at stage boundaries (assumption)."""

# ----------------------------------------------------------------------------- heart (per stage W, N1, N2, N3, REM)
HR_OFFSET_BPM = np.array([0.0, -2.0, -6.0, -8.0, -3.5])
"""Heart rate relative to quiet wake in bed: lowest in N3, REM between N2 and wake (Trinder J et al.,
"Autonomic activity during human sleep as a function of time and sleep stage", J Sleep Res 10:253-264,
2001; Cajochen C et al., "Heart rate dynamics during human sleep", Physiol Behav 1994; magnitudes from memory)."""
REM_ONSET_SURGE_BPM = 3.0
REM_ONSET_SURGE_TAU_S = 300.0
"""Rapid heart-rate rise at NREM -> REM transitions followed by a slow decline (Cajochen et al. 1994, retrieved
abstract; magnitude and time constant assumptions)."""
NIGHT_TREND_BPM_PER_HOUR = -0.4
"""Decline of heart rate across the night (Cajochen et al. 1994: declining trend over successive cycles;
magnitude assumption: ~3 bpm over 8 h)."""
HF_POWER_MS2 = np.array([400.0, 500.0, 700.0, 600.0, 400.0])
LF_HF_RATIO = np.array([0.8, 0.9, 0.5, 0.25, 0.65])
"""High-frequency (0.15-0.4 Hz, respiratory sinus arrhythmia) RR power and LF/HF ratio of a young adult:
vagal predominance rising through NREM (LF/HF falling from N1 to N3), LF/HF in REM close to wake (Bonnet MH,
Arand DL, "Heart rate variability: sleep stage, time of night, and arousal influences", Electroencephalogr
Clin Neurophysiol 102:390-396, 1997; Busek P et al., Physiol Res 54:369-376, 2005; values from memory). The
ratios here are of the generated LF and RSA components; NeuroKit2's ``hrv_frequency`` on the beats reads
~1.0 in W, ~1.3 in REM and ~0.5 in N3 (slow drifts and breathing-rate changes add LF power)."""
VLF_SD_MS = np.array([25.0, 20.0, 18.0, 10.0, 30.0])
"""Slow (< 0.04 Hz) RR fluctuation: N3 most regular, REM most erratic (assumption, consistent with the
sources above)."""
QRS_TEMPLATE = {  # wave: (centre s from R, width s, amplitude mV)
    "P": (-0.20, 0.025, 0.15),
    "Q": (-0.030, 0.010, -0.12),
    "R": (0.0, 0.010, 1.0),
    "S": (0.032, 0.011, -0.25),
    "T": (0.26, 0.045, 0.30),
}
"""Gaussian-sum PQRST (the idea of McSharry PE et al., "A dynamical model for generating synthetic
electrocardiogram signals", IEEE Trans Biomed Eng 50(3):289-294, 2003; our own parameters: PR ~ 0.16 s,
QRS ~ 0.08 s, QT ~ 0.38 s, R ~ 1 mV, T ~ 0.3 mV, textbook lead-II values from memory)."""
ECG_RESP_MODULATION = 0.06
"""R amplitude modulation by lung volume (ECG-derived respiration, Moody GB et al., Computers in Cardiology
1985; magnitude assumption)."""
ECG_NOISE_MV = 0.01
ECG_WANDER_MV = 0.05
"""White noise and baseline wander (breathing-locked plus slow drift) in mV (assumptions)."""

# ----------------------------------------------------------------------------- breathing
MINUTE_VENTILATION_L = np.array([7.66, 7.4, 7.18, 7.18, 6.46])
"""Minute ventilation (L/min): wake 7.66, NREM 7.18, REM 6.46 (Douglas NJ et al., "Respiration during sleep in
normal man", Thorax 37:840-844, 1982; retrieved abstract); N1 between wake and NREM (assumption)."""
RATE_FACTOR = np.array([1.0, 1.05, 1.07, 1.0, 1.155])
"""Breathing rate relative to wake: sleep breathing is more rapid and shallow (Douglas 1982), REM tidal volume
73 % of wake (Douglas 1982, retrieved) -> REM rate x 6.46 / 7.66 / 0.73 = 1.155; N3 slow and deep (assumption)."""
RATE_CV = np.array([0.10, 0.08, 0.06, 0.03, 0.18])
TIDAL_CV = np.array([0.15, 0.10, 0.08, 0.04, 0.22])
"""Slow breath-rate and breath-to-breath tidal-volume variability: N3 most regular, REM erratic (Gould GA et al.,
"Breathing pattern and eye movement density during REM sleep in humans", Am Rev Respir Dis 138:874, 1988;
values assumptions)."""
ABDOMEN_SHARE = np.array([0.54, 0.48, 0.42, 0.38, 0.56])
"""Abdominal contribution to tidal volume: awake 54 %, slow-wave sleep 38 %, REM 56 % (Stradling JR et al.,
"Changes in ventilation and its components in normal subjects during sleep", Thorax 40:364-370, 1985;
retrieved abstract); N1 / N2 interpolated (assumption)."""
INSPIRATORY_FRACTION = 0.42
"""Ti / Ttot (assumption, typical resting value)."""
SIGHS_PER_HOUR = np.array([12.0, 8.0, 6.0, 3.0, 6.0])
SIGH_GAIN = 1.2
"""Sighs (one breath ~ 2x tidal volume; Perez-Padilla R et al., "Sighs during sleep in adult humans", Sleep
6:234-243, 1983; rates and size from memory). Sighs also follow each awakening."""
MOVEMENT_SECONDS = (2.0, 8.0)
"""Movement artifact at each sleep -> wake transition (length range; assumption)."""
BELT_NOISE = 0.01
FLOW_NOISE = 0.004
"""White noise on the belts (x tidal volume) and on airflow (L/s) (assumptions)."""

# ----------------------------------------------------------------------------- oximetry
SPO2_STAGE_OFFSET = np.array([0.0, -0.3, -0.5, -0.8, -1.1])
"""Sleep lowers SpO2: awake 97.3, slow-wave 96.5, REM 96.2 % (Stradling et al. 1985, retrieved abstract)."""
SPO2_NORMAL_DIP_SD = 0.35
SPO2_NORMAL_DIP_MAX = 2.0
"""Slow normal fluctuations (SD, and the cap of their dips) in percentage points (assumption: normal dips <= 2 %)."""
OXIMETER_AVERAGING_S = 3.0
"""Oximeter averaging window (typical 3-5 s; manufacturer settings, no primary source retrieved)."""


@dataclass
class CardioTraits:
    """Per-subject cardiorespiratory traits (drawn by :func:`cardio_traits`)."""

    cohort: str
    resting_hr_bpm: float  # quiet wake in bed
    hrv_scale: float  # multiplies all RR fluctuations
    breathing_rate_bpm: float  # breaths/min in quiet wake
    tidal_scale: float  # multiplies the Douglas tidal volumes
    spo2_baseline: float  # % awake
    ahi_class: str  # "none" | "mild" | "moderate" | "severe"
    ahi: float  # apneas + hypopneas / hour of sleep
    rera_index: float  # respiratory-effort-related arousals / hour of sleep
    circulation_delay_s: float  # lung-to-finger circulation time
    desat_scale: float  # multiplies desaturation slopes
    central_share: float  # share of central among non-mixed apneas
    oximeter_resolution: float  # 1.0 or 0.1 %
    r_amplitude_mv: float  # R-wave height


AHI_CLASS_RANGE = {"none": (0.5, 5.0), "mild": (5.0, 15.0), "moderate": (15.0, 30.0), "severe": (30.0, 60.0)}
"""AHI per class (AASM: < 5, 5-15, 15-30, >= 30 /h); the upper cap of 60 /h is an assumption."""
COHORTS = {
    # class probabilities none/mild/moderate/severe, HR mean/sd, HRV scale, SpO2 range, circulation delay mean/sd
    "young-adult": ((0.82, 0.13, 0.04, 0.01), (64.0, 7.0), 1.0, (96.0, 98.0), (17.0, 2.0)),
    "sleep-edf-sc": ((0.30, 0.33, 0.22, 0.15), (66.0, 8.0), 0.6, (94.0, 97.0), (20.0, 3.0)),
}
"""Cohort parameters. SDB classes: young adults from Peppard PE et al., Am J Epidemiol 177:1006, 2013 (AHI >= 15
in 10 % of men and 3 % of women aged 30-49, retrieved; younger adults lower, assumption); the older Sleep-EDF SC
cohort (25-101 y) from HypnoLaus (Heinzer R et al., Lancet Respir Med 3:310-318, 2015: AHI >= 15 in 23.4 % of
women and 49.7 % of men aged 40-85, retrieved). HRV falls with age (Umetani K et al., J Am Coll Cardiol 31:593,
1998; the factor from memory). Circulation delay: lung-to-finger circulation time 18.5 s (95 % CI 17.2-19.7) in
OSA without heart failure, longer with age (Kwon Y et al., J Clin Sleep Med 10(7):759-765, 2014; retrieved)."""


BREATHING_RATE_WAKE = (14.5, 1.2, 12.5, 17.0)
"""Quiet-wake breathing rate (breaths/min): mean, SD, clip range; adult resting 12-20 /min, sleep stages
faster (``RATE_FACTOR``), so the range keeps every stage within 12-20 (assumption)."""
SUBJECT_SPREAD = {"hrv": 0.25, "tidal": 0.15, "desat": 0.2, "r_amplitude": 0.2}
"""Log-normal SDs of the per-subject scales (assumptions; no source)."""
RERA_PER_AHI = (0.2, 0.5)
RERA_BASE_PER_HOUR = (0.5, 3.0)
"""RERA index = U(RERA_BASE_PER_HOUR) + U(RERA_PER_AHI) x AHI (assumption: RERAs accompany obstructive SDB
and occur at a few per hour in normal sleepers; no source retrieved)."""
CENTRAL_SHARE_RANGE = (0.02, 0.15)
"""Share of central among apneas in (mostly obstructive) sleep-disordered breathing (assumption; central
sleep apnea proper is rare in the general population)."""
ONE_PERCENT_OXIMETER_SHARE = 0.7
"""Share of subjects recorded with a 1 %-resolution oximeter (PSG systems commonly store integer SpO2; the
rest 0.1 %; assumption)."""


def cardio_traits(rng: np.random.Generator, cohort: str) -> CardioTraits:
    """Draw one subject's traits for ``cohort`` ("young-adult" or "sleep-edf-sc": older, more SDB)."""
    if cohort not in COHORTS:
        raise ValueError(f"unknown cohort {cohort!r}; expected one of {sorted(COHORTS)}")
    class_probs, (hr_mean, hr_sd), hrv_scale, spo2_range, (delay_mean, delay_sd) = COHORTS[cohort]
    ahi_class = str(rng.choice(list(AHI_CLASS_RANGE), p=class_probs))
    ahi = float(rng.uniform(*AHI_CLASS_RANGE[ahi_class]))
    return CardioTraits(
        cohort=cohort,
        resting_hr_bpm=float(np.clip(rng.normal(hr_mean, hr_sd), 55.0, 85.0)),
        hrv_scale=float(hrv_scale * rng.lognormal(0.0, SUBJECT_SPREAD["hrv"])),
        breathing_rate_bpm=float(np.clip(rng.normal(*BREATHING_RATE_WAKE[:2]), *BREATHING_RATE_WAKE[2:])),
        tidal_scale=float(rng.lognormal(0.0, SUBJECT_SPREAD["tidal"])),
        spo2_baseline=float(rng.uniform(*spo2_range)),
        ahi_class=ahi_class,
        ahi=ahi,
        rera_index=float(rng.uniform(*RERA_BASE_PER_HOUR) + rng.uniform(*RERA_PER_AHI) * ahi),
        circulation_delay_s=float(np.clip(rng.normal(delay_mean, delay_sd), 12.0, 35.0)),
        desat_scale=float(rng.lognormal(0.0, SUBJECT_SPREAD["desat"])),
        central_share=float(rng.uniform(*CENTRAL_SHARE_RANGE)),
        oximeter_resolution=1.0 if rng.random() < ONE_PERCENT_OXIMETER_SHARE else 0.1,
        r_amplitude_mv=float(rng.lognormal(0.0, SUBJECT_SPREAD["r_amplitude"])),
    )


@dataclass
class CardioRespNight:
    """One night's cardiorespiratory signals and events."""

    signals: dict[str, np.ndarray]  # "ECG" (mV), "ABD", "CHEST", "AIRFLOW" (a.u.), "SaO2" (%), each (n,) at fs
    beat_times: np.ndarray  # R-peak times, seconds, (b,)
    events: list[tuple[float, float, str]]  # (onset s, duration s, PhysioNet 2018 .arousal label)
    arousal_onsets: np.ndarray  # seconds, (k,): EEG arousal + chin-EMG burst ending each respiratory event


# ----------------------------------------------------------------------------- helpers


def _band_limited(n: int, rate: float, band: tuple[float, float], rng: np.random.Generator) -> np.ndarray:
    """Unit-variance Gaussian noise ``(n,)`` at ``rate`` Hz with its power in ``band`` Hz (FFT mask)."""
    padded = sp_fft.next_fast_len(n, real=True)
    freqs = np.fft.rfftfreq(padded, 1.0 / rate)
    mask = (freqs >= band[0]) & (freqs <= band[1])
    spectrum = np.zeros(freqs.size, dtype=complex)
    spectrum[mask] = rng.standard_normal(int(mask.sum())) + 1j * rng.standard_normal(int(mask.sum()))
    noise = sp_fft.irfft(spectrum, n=padded)[:n]
    return noise / (noise.std() + 1e-12)


def _stage_track(stages: np.ndarray, n: int) -> np.ndarray:
    """Stage code per control sample ``(n,)``; unscored / excluded epochs and time past the hypnogram are wake."""
    epoch = np.minimum(np.arange(n) / CTRL_HZ // EPOCH_SECONDS, max(stages.size - 1, 0)).astype(int)
    track = np.asarray(stages, dtype=int)[epoch] if stages.size else np.zeros(n, dtype=int)
    track = np.where((track >= 0) & (track <= 4), track, W)
    track[np.arange(n) / CTRL_HZ >= stages.size * EPOCH_SECONDS] = W
    return track


def _smooth_level(track: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Per-stage ``table`` values along the stage ``track`` ``(n,)``, smoothed over ``TRANSITION_SECONDS``."""
    return uniform_filter1d(table[track].astype(float), size=int(TRANSITION_SECONDS * CTRL_HZ), mode="nearest")


def _onsets(track: np.ndarray, into: np.ndarray) -> np.ndarray:
    """Control-sample indices where the track enters a stage in ``into`` from any other stage."""
    inside = np.isin(track, into)
    return np.flatnonzero(inside[1:] & ~inside[:-1]) + 1


def _decaying_pulses(starts: np.ndarray, n: int, tau_s: float) -> np.ndarray:
    """Sum of unit exponential decays (time constant ``tau_s``) starting at control samples ``starts``: ``(n,)``."""
    train = np.zeros(n)
    train[starts] = 1.0
    kernel = np.exp(-np.arange(int(5 * tau_s * CTRL_HZ)) / (tau_s * CTRL_HZ))
    return oaconvolve(train, kernel)[:n]


# ----------------------------------------------------------------------------- breathing


def _breathing_controls(
    track: np.ndarray, traits: CardioTraits, recovery: np.ndarray, in_event: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Breathing phase (cycles) and tidal volume (L) per control sample, both ``(n,)``; ``recovery``: tidal
    multiplier after events, ``in_event``: where a respiratory event holds the drive (no sighs, no
    breath-to-breath tidal noise there, so the drop is measured against the pre-event breathing)."""
    n = track.size
    rate_factor = _smooth_level(track, RATE_FACTOR)
    rate_hz = traits.breathing_rate_bpm / 60.0 * rate_factor
    rate_hz = rate_hz * (1.0 + _smooth_level(track, RATE_CV) * _band_limited(n, CTRL_HZ, (0.003, 0.06), rng))
    phase = np.cumsum(rate_hz * (1.0 + 0.25 * (recovery - 1.0))) / CTRL_HZ
    minute_ventilation = _smooth_level(track, MINUTE_VENTILATION_L)
    tidal = traits.tidal_scale * minute_ventilation / (traits.breathing_rate_bpm * rate_factor)
    tidal_noise = _smooth_level(track, TIDAL_CV) * _band_limited(n, CTRL_HZ, (0.02, 0.3), rng)
    tidal = tidal * np.clip(1.0 + np.where(in_event, 0.0, tidal_noise), 0.3, 2.0)
    return phase, tidal * recovery * np.where(in_event, 1.0, _sigh_gain(track, phase, rng))


def _sigh_gain(track: np.ndarray, phase: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Tidal multiplier ``(n,)``: one breath of ``1 + SIGH_GAIN`` at random sighs and after each awakening."""
    n = track.size
    random_sighs = np.flatnonzero(rng.random(n) < SIGHS_PER_HOUR[track] / 3600.0 / CTRL_HZ)
    starts = np.concatenate([random_sighs, _onsets(track, np.array([W]))])
    breath = np.floor(phase).astype(int)
    gain = np.ones(n)
    sigh_breaths = np.isin(breath, breath[starts] + 1)
    gain[sigh_breaths] += SIGH_GAIN
    return uniform_filter1d(gain, size=int(CTRL_HZ), mode="nearest")


def _breath_shape(phase: np.ndarray) -> np.ndarray:
    """Lung volume above end-expiration as a fraction of the tidal volume, ``(n,)`` in [0, 1]: a raised-cosine
    inspiration over ``INSPIRATORY_FRACTION`` of the cycle and a raised-cosine expiration."""
    cycle = phase - np.floor(phase)
    expiring = (cycle - INSPIRATORY_FRACTION) / (1.0 - INSPIRATORY_FRACTION)
    angle = np.pi * np.where(cycle < INSPIRATORY_FRACTION, cycle / INSPIRATORY_FRACTION, 1.0 + expiring)
    return 0.5 - 0.5 * np.cos(angle)


def _movement(track: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Movement artifact waveform per control sample ``(n,)`` (unit-variance 0.3-3 Hz noise, zero outside):
    one burst of ``MOVEMENT_SECONDS`` at each sleep -> wake transition."""
    starts = _onsets(track, np.array([W]))
    stops = starts + (rng.uniform(*MOVEMENT_SECONDS, starts.size) * CTRL_HZ).astype(int)
    envelope = np.zeros(track.size + 1)
    np.add.at(envelope, starts, 1.0)
    np.add.at(envelope, np.minimum(stops, track.size), -1.0)
    return (np.cumsum(envelope)[:-1] > 0) * _band_limited(track.size, CTRL_HZ, (0.3, 3.0), rng)


def _to_samples(values: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Control-grid ``values`` ``(n_ctrl,)`` linearly interpolated at sample times ``t`` ``(n_fs,)``."""
    return np.interp(t, np.arange(values.size) / CTRL_HZ, values)


def _respiration(ctrl: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``CHEST``, ``ABD``, ``AIRFLOW`` and lung ``volume`` on the control grid ``(n_ctrl,)`` (smooth enough
    there: >= 25 points per breath) from the control signals ``phase``, ``tidal``, ``abdomen_share``,
    ``drive``, ``patency``, ``paradox`` and ``movement``. Airflow is the derivative of the breath shape times
    the tidal volume reaching the lungs (drive x patency); the rib cage moves against the abdomen as
    ``paradox`` goes to 1."""
    effort = ctrl["tidal"] * ctrl["drive"]
    shape = _breath_shape(ctrl["phase"]) - 0.5
    artifact = ctrl["movement"] * float(ctrl["tidal"].mean())
    chest = effort * (1.0 - ctrl["abdomen_share"]) * (1.0 - 2.0 * ctrl["paradox"]) * shape
    abdomen = effort * ctrl["abdomen_share"] * shape
    return {
        "CHEST": chest + artifact,
        "ABD": abdomen - 0.7 * artifact,
        "AIRFLOW": effort * ctrl["patency"] * np.gradient(shape, 1.0 / CTRL_HZ) + 0.5 * artifact,
        "volume": chest + abdomen,
    }


def _with_noise(signal: np.ndarray, t: np.ndarray, sd: float, rng: np.random.Generator) -> np.ndarray:
    """Control-grid ``signal`` ``(n_ctrl,)`` at sample times ``t`` ``(n_fs,)`` plus white noise of SD ``sd``."""
    return _to_samples(signal, t) + sd * rng.standard_normal(t.size, dtype=np.float32)


# ----------------------------------------------------------------------------- heart


def _rr_ms(track: np.ndarray, phase: np.ndarray, traits: CardioTraits, hr_change: np.ndarray, rng) -> np.ndarray:
    """RR interval (ms) per control sample ``(n,)``: stage heart rate, NREM -> REM surges, night trend and
    event responses, plus LF (0.04-0.15 Hz) noise, VLF drift and RSA (shorter RR during inspiration)."""
    n = track.size
    rem_surge = _decaying_pulses(_onsets(track, np.array([REM])), n, REM_ONSET_SURGE_TAU_S)
    heart_rate = (
        traits.resting_hr_bpm
        + _smooth_level(track, HR_OFFSET_BPM)
        + REM_ONSET_SURGE_BPM * np.minimum(rem_surge, 1.0)
        + NIGHT_TREND_BPM_PER_HOUR * np.arange(n) / (3600.0 * CTRL_HZ)
        + hr_change
    )
    hf_sd = np.sqrt(_smooth_level(track, HF_POWER_MS2)) * traits.hrv_scale
    lf_sd = np.sqrt(_smooth_level(track, HF_POWER_MS2 * LF_HF_RATIO)) * traits.hrv_scale
    vlf_sd = _smooth_level(track, VLF_SD_MS) * traits.hrv_scale
    rsa = np.sqrt(2.0) * hf_sd * np.sin(2.0 * np.pi * phase)
    lf = lf_sd * _band_limited(n, CTRL_HZ, (0.05, 0.14), rng)
    vlf = vlf_sd * _band_limited(n, CTRL_HZ, (0.003, 0.035), rng)
    return np.clip(60000.0 / np.clip(heart_rate, 35.0, 150.0) - rsa + lf + vlf, 350.0, 2000.0)


def _beat_times(rr_ms: np.ndarray, seconds: float, rng: np.random.Generator) -> np.ndarray:
    """R-peak times (s) ``(b,)``: integral pulse frequency modulation of the RR process, a beat where the
    integral of 1/RR crosses an integer (linear interpolation inside a control step)."""
    beats_done = rng.random() + np.concatenate([[0.0], np.cumsum(1000.0 / rr_ms) / CTRL_HZ])  # random start phase
    t_ctrl = np.arange(beats_done.size) / CTRL_HZ
    crossings = np.arange(np.ceil(beats_done[0]), np.floor(beats_done[-1]) + 1)
    times = np.interp(crossings, beats_done, t_ctrl)
    return times[times < seconds - 0.5]


def _qrs_template(fs: float, gain: float) -> tuple[np.ndarray, int]:
    """PQRST template ``(m,)`` in mV at ``fs`` and the index of its R peak."""
    before, after = 0.30, 0.55
    offsets = np.arange(-int(before * fs), int(after * fs) + 1) / fs
    wave = sum(a * np.exp(-0.5 * ((offsets - c) / w) ** 2) for c, w, a in QRS_TEMPLATE.values())
    return gain * np.asarray(wave), int(before * fs)


def _ecg(beats: np.ndarray, ctrl: dict[str, np.ndarray], t: np.ndarray, traits: CardioTraits, rng) -> np.ndarray:
    """ECG (mV) at sample times ``t`` ``(n_fs,)``: PQRST templates at the ``beats`` with the R amplitude
    modulated by the lung volume, baseline wander (breathing-locked and slow drift), movement artifacts
    and white noise (``ctrl``: control-grid ``volume`` and ``movement``, ``(n_ctrl,)``)."""
    fs = 1.0 / (t[1] - t[0])
    template, r_index = _qrs_template(fs, traits.r_amplitude_mv)
    relative_volume = ctrl["volume"] / (np.abs(ctrl["volume"]).max() + 1e-12)
    train = np.zeros(t.size)
    np.add.at(train, np.round(beats * fs).astype(int), 1.0 + ECG_RESP_MODULATION * _to_samples(relative_volume, beats))
    ecg = oaconvolve(train, template)[r_index : r_index + t.size]
    drift = _band_limited(relative_volume.size, CTRL_HZ, (0.01, 0.3), rng)
    slow = ECG_WANDER_MV * (relative_volume + drift) + 0.15 * ctrl["movement"]
    return ecg + _with_noise(slow, t, ECG_NOISE_MV, rng)


# ----------------------------------------------------------------------------- oximetry


def _oximetry(track: np.ndarray, deficit: np.ndarray, t: np.ndarray, traits: CardioTraits, rng) -> np.ndarray:
    """SpO2 (%) ``(n_fs,)``: baseline by stage, normal dips <= ``SPO2_NORMAL_DIP_MAX``, event deficits
    (``(n_ctrl,)``), oximeter averaging and quantisation to ``traits.oximeter_resolution``."""
    n = track.size
    normal = SPO2_NORMAL_DIP_SD * _band_limited(n, CTRL_HZ, (0.002, 0.03), rng)
    normal = np.clip(normal + _smooth_level(track, SPO2_STAGE_OFFSET), -SPO2_NORMAL_DIP_MAX, 0.5)
    saturation = np.minimum(traits.spo2_baseline + normal - deficit, 100.0)
    window = int(OXIMETER_AVERAGING_S * CTRL_HZ)  # trailing average, like a monitor
    saturation = uniform_filter1d(saturation, size=window, origin=(window - 1) // 2, mode="nearest")
    shown = np.round(np.clip(saturation, 50.0, 100.0) / traits.oximeter_resolution) * traits.oximeter_resolution
    return np.interp(t, np.arange(n) / CTRL_HZ, np.round(shown, 1), left=shown[0], right=shown[-1])


# ----------------------------------------------------------------------------- night


def synth_cardiorespiratory(
    stages: np.ndarray, fs: float, seconds: float, traits: CardioTraits, rng: np.random.Generator
) -> CardioRespNight:
    """ECG, CHEST, ABD, AIRFLOW and SaO2 ``(round(seconds * fs),)`` for per-30-s-epoch ``stages`` ``(e,)``
    (0 W .. 4 REM; other codes and time past the hypnogram count as wake), with the subject's
    sleep-disordered breathing, R-peak times and event / arousal annotations."""
    stages = np.asarray(stages, dtype=int)
    n_fs = int(round(seconds * fs))
    n_ctrl = int(np.ceil(seconds * CTRL_HZ)) + 2
    track = _stage_track(stages, n_ctrl)
    plan = sdb_events.plan_events(stages, seconds, traits, rng)
    airway = sdb_events.airway_controls(plan, n_ctrl, CTRL_HZ)
    recovery = sdb_events.recovery_gain(plan, n_ctrl, CTRL_HZ)
    in_event = (airway["patency"] < 1.0) | (airway["drive"] != 1.0)
    phase, tidal = _breathing_controls(track, traits, recovery, in_event, rng)
    t = np.arange(n_fs) / fs
    movement = _movement(track, rng)
    controls = {"phase": phase, "tidal": tidal, "abdomen_share": _smooth_level(track, ABDOMEN_SHARE), **airway}
    breathing = _respiration({**controls, "movement": movement})
    tidal_mean = float(tidal.mean())
    signals = {name: _with_noise(breathing[name], t, BELT_NOISE * tidal_mean, rng) for name in ("CHEST", "ABD")}
    signals["AIRFLOW"] = _with_noise(breathing["AIRFLOW"], t, FLOW_NOISE, rng)
    hr_change = sdb_events.heart_rate_change(plan, n_ctrl, CTRL_HZ)
    beats = _beat_times(_rr_ms(track, phase, traits, hr_change, rng), seconds, rng)
    signals["ECG"] = _ecg(beats, {"volume": breathing["volume"], "movement": movement}, t, traits, rng)
    deficit = sdb_events.desaturation(plan, traits, n_ctrl, CTRL_HZ)
    signals["SaO2"] = _oximetry(track, deficit, t, traits, rng)
    ordered = {name: signals[name].astype(np.float32) for name in ("ECG", "ABD", "CHEST", "AIRFLOW", "SaO2")}
    return CardioRespNight(ordered, beats, plan.labels(), plan.arousal.copy())
