"""The brain side of a synthetic night (:func:`synth_night`): EEG background rhythms and transients per
stage on the EEG sources, eye movements (EOG, ocular leakage into frontal EEG), chin EMG, brief
arousals, bipolar derivations formed from their electrodes, then artifacts and noise per derivation."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.signal import oaconvolve

from ..stages import EPOCH_SECONDS
from .arousals import add_arousals, add_respiratory_arousals
from .artifacts import Artifacts, add_artifacts
from .hypnogram import eyes_closed_epochs, night_hypnogram
from .parameters import (
    BIPOLAR_DERIVATIONS,
    EEG_TOPOGRAPHY,
    ELECTRODE_TOPOGRAPHY,
    EMG_AMPLITUDE,
    EMG_CHANNELS,
    EOG_CHANNELS,
    EOG_EVENTS,
    EOG_GAZE_SENSITIVITY,
    PHASIC_REM_SHARE,
    PINK_NOISE_UV,
    REM,
    RHYTHM_EPOCH_JITTER,
    RHYTHM_GAIN_OF,
    RHYTHMS,
    SECOND_EOG,
    SIDE_STREAMS,
    SLOW_WAVE_STAGES,
    TRANSIENTS,
    SubjectTraits,
    side_stream,
)
from .waveforms import (
    _band_noise,
    _correlated,
    _envelope,
    _event_train,
    _per_epoch,
    _pink_noise,
    _templates,
    spatial_correlation,
)


@dataclass
class SyntheticNight:
    """One synthetic night: signals (uV) per channel at ``fs`` and the true per-epoch stages."""

    signals: dict[str, np.ndarray]
    fs: float
    stages: np.ndarray
    meta: dict = field(default_factory=dict)


@dataclass
class EyeMovements:
    """A night's eye movements: ``eog (n,)`` the ocular potential leaking into frontal EEG, ``gaze`` the
    shared (conjugate) "horizontal" / "vertical" traces ``(n,)``, ``events`` onset samples and ``signs``
    drawn directions per movement type, ``phasic_epochs (e,)`` phasic REM epochs."""

    eog: np.ndarray
    gaze: dict[str, np.ndarray]
    events: dict[str, np.ndarray]
    signs: dict[str, np.ndarray]
    phasic_epochs: np.ndarray


def eeg_sources(derivations: list[str]) -> list[str]:
    """The generated sources of ``derivations``: a referential derivation itself, a bipolar one's two
    electrodes (:data:`BIPOLAR_DERIVATIONS`), each once, in order of first use."""
    sources: list[str] = []
    for name in derivations:
        for source in BIPOLAR_DERIVATIONS.get(name, (name,)):
            if source not in sources:
                sources.append(source)
    return sources


def derivation_matrix(sources: list[str], derivations: list[str]) -> np.ndarray:
    """``(c, s)`` float32 map from sources to derivations: 1 for a referential derivation's own row,
    +1 / -1 for a bipolar derivation's first / second electrode."""
    matrix = np.zeros((len(derivations), len(sources)), dtype=np.float32)
    for row, name in enumerate(derivations):
        if name in BIPOLAR_DERIVATIONS:
            first, second = BIPOLAR_DERIVATIONS[name]
            matrix[row, sources.index(first)], matrix[row, sources.index(second)] = 1.0, -1.0
        else:
            matrix[row, sources.index(name)] = 1.0
    return matrix


def check_channels(channels: list[str]) -> None:
    """Raise naming every channel of ``channels`` the generator has no model for."""
    known_eog = list(EOG_CHANNELS) + [SECOND_EOG]
    unknown = [c for c in channels if c not in EEG_TOPOGRAPHY and c not in known_eog and c not in EMG_CHANNELS]
    if unknown:
        raise ValueError(
            f"synth-psg: no synthetic model for channel(s) {unknown}; known: "
            f"{sorted(EEG_TOPOGRAPHY) + known_eog + list(EMG_CHANNELS)}"
        )


def _background_rhythms(
    sources: list[str],
    topography: np.ndarray,
    stages: np.ndarray,
    closed: np.ndarray,
    traits: SubjectTraits,
    fs: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """The :data:`RHYTHMS` of every source: ``(s, n)`` float32 uV, band noises and per-epoch amplitude
    jitter spatially correlated (:func:`spatial_correlation`); ``topography (s, 3)`` region weights."""
    n_epochs, count = stages.size, len(sources)
    n = int(n_epochs * EPOCH_SECONDS * fs)
    mixing = np.linalg.cholesky(spatial_correlation(sources) + 1e-9 * np.eye(count)) if count else np.zeros((0, 0))
    out = np.zeros((count, n), dtype=np.float32)
    for name, rhythm in RHYTHMS.items():
        band = rhythm.band if name != "alpha" else (traits.alpha_hz + rhythm.band[0], traits.alpha_hz + rhythm.band[1])
        mixed = _correlated(mixing, _band_noise(n, fs, band, rng, count, rhythm.slope, soft=True))  # (s, n)
        channel_jitter = np.exp(RHYTHM_EPOCH_JITTER * _correlated(mixing, rng.standard_normal((count, n_epochs))))
        delta = name in ("delta", "delta_background")  # the subject's age-like delta amplitude: both parts
        scale = traits.band_gain[RHYTHM_GAIN_OF.get(name, name)] * (traits.delta_scale if delta else 1.0)
        amp = _per_epoch(rhythm.amplitude, stages, closed, name)[None] * channel_jitter * scale  # (s, e)
        if name == "delta" and traits.slow_wave_scale != 1.0:  # the cohort's effect: slow waves, not background
            amp = amp * np.where(np.isin(stages, SLOW_WAVE_STAGES), traits.slow_wave_scale, 1.0)[None]
        gains = topography @ np.asarray(rhythm.topography) / np.asarray(rhythm.topography).max()
        for c in range(count):
            out[c] += gains[c] * _envelope(amp[c], n, fs) * mixed[c]
    return out


def _add_transients(
    out: np.ndarray,
    topography: np.ndarray,
    stages: np.ndarray,
    templates: dict[str, np.ndarray],
    traits: SubjectTraits,
    fs: float,
    rng: np.random.Generator,
) -> dict[str, np.ndarray]:
    """Add the :data:`TRANSIENTS` (spindles, K-complexes, vertex waves, sawtooth waves) in place to the
    sources ``out (s, n)``. Returns their onset samples (template start) per transient."""
    n = out.shape[1]
    events: dict[str, np.ndarray] = {}
    for name, transient in TRANSIENTS.items():
        train = _event_train(np.asarray(transient.rate_per_min)[stages] * traits.band_gain[name], n, fs, rng)
        events[name] = np.flatnonzero(train)
        if name == "spindle":  # durations 0.5-2 s: three widths
            width = rng.integers(0, 3, size=n)
            wave = sum(oaconvolve(train * (width == i), templates[f"spindle{i}"])[:n] for i in range(3))
        else:
            wave = oaconvolve(train, templates[name])[:n]
        gains = topography @ np.asarray(transient.topography) / max(transient.topography)
        out += gains[:, None] * (wave * transient.amplitude)[None] * rng.lognormal(0.0, 0.15, size=(len(out), 1))
    return events


def _eye_movements(
    stages: np.ndarray,
    closed: np.ndarray,
    templates: dict[str, np.ndarray],
    n: int,
    fs: float,
    rng: np.random.Generator,
) -> EyeMovements:
    """Blinks, slow rolling and rapid eye movements (:data:`EOG_EVENTS`; saccades in phasic-REM bursts) of
    ``n`` samples; blinks move the gaze up (Bell's phenomenon), the others horizontally."""
    eog = np.zeros(n)
    gaze = {"horizontal": np.zeros(n), "vertical": np.zeros(n)}  # shared by both eyes (conjugate)
    events: dict[str, np.ndarray] = {}
    signs: dict[str, np.ndarray] = {}
    phasic_epochs = (rng.random(stages.size) < PHASIC_REM_SHARE) & (stages == REM)
    phasic = np.where(phasic_epochs, 0.8 / PHASIC_REM_SHARE, 0.2)  # (e,) REM bursts; mean rate ~kept
    for name, rates in EOG_EVENTS.items():
        per_epoch = _per_epoch(rates, stages, closed, name)
        if name == "saccade":  # rapid eye movements come in bursts (phasic REM); same mean rate
            per_epoch = np.where(stages == REM, per_epoch * phasic, per_epoch)
        train = _event_train(per_epoch, n, fs, rng) * rng.choice([-1.0, 1.0], size=n)
        events[name] = np.flatnonzero(train)
        signs[name] = np.sign(train[events[name]])
        movement = oaconvolve(train, templates[name])[:n] * (120.0 if name == "blink" else 80.0)
        eog += movement  # the ocular potential that leaks into frontal EEG
        if name == "blink":  # the eyes roll up during a blink, whatever the drawn sign
            gaze["vertical"] += np.abs(movement)
        else:  # saccades / rapid and slow rolling eye movements: horizontal, drawn direction
            gaze["horizontal"] += movement
    return EyeMovements(eog, gaze, events, signs, phasic_epochs)


def _chin_emg(stages: np.ndarray, closed: np.ndarray, n: int, fs: float, rng: np.random.Generator) -> np.ndarray:
    """Chin EMG ``(n,)``: 10-45 Hz noise with a per-stage (:data:`EMG_AMPLITUDE`), jittered envelope."""
    envelope = _per_epoch(EMG_AMPLITUDE, stages, closed, "emg") * rng.lognormal(0.0, 0.35, size=stages.size)
    return _band_noise(n, fs, (10.0, 45.0), rng, 1)[0] * _envelope(envelope, n, fs)


def _eog_noise(n: int, fs: float, rng: np.random.Generator) -> np.ndarray:
    """Electrode drift (random walk, 1-s knots) and white noise of an extra EOG derivation ``(n,)``."""
    walk = np.cumsum(rng.standard_normal(n // int(fs) + 2)) * 2.0
    return np.interp(np.arange(n) / fs, np.arange(walk.size), walk) + 5.0 * rng.standard_normal(n)


def _channel_signals(
    channels: list[str],
    eeg: np.ndarray,
    derivations: list[str],
    emg: np.ndarray,
    eyes: EyeMovements,
    artifacts: Artifacts,
    traits: SubjectTraits,
    fs: float,
    rng: np.random.Generator,
) -> dict[str, np.ndarray]:
    """Every channel ``(n,)`` in uV times its ``channel_gain``: EEG ``derivations`` (rows of ``eeg (c,
    n)``), EOG derivations from the gaze (:data:`EOG_GAZE_SENSITIVITY`) plus what they share (movement
    bursts, frontal EEG) and their own drift and noise, chin EMG plus white noise (``emg (n,)``, in place)."""
    n = emg.size
    eog_common = artifacts.ocular + 0.3 * (eeg[0] if len(derivations) else 0.0)  # in phase on every EOG
    eog_noise = artifacts.drift[-2] + 5.0 * rng.standard_normal(n)  # the written derivation's drift and noise
    emg += 2.0 * rng.standard_normal(n)
    eog_derivations = [c for c in channels if c in EOG_GAZE_SENSITIVITY]
    second = side_stream(rng, SIDE_STREAMS["second_eog"]) if len(eog_derivations) > 1 else None
    signals: dict[str, np.ndarray] = {}
    for c in channels:
        if c in EEG_TOPOGRAPHY:
            signals[c] = eeg[derivations.index(c)] * traits.channel_gain.get(c, 1.0)
        elif c in EOG_GAZE_SENSITIVITY:
            horizontal, vertical = EOG_GAZE_SENSITIVITY[c]
            noise = eog_noise if c == eog_derivations[0] else _eog_noise(n, fs, second)
            signals[c] = (
                horizontal * eyes.gaze["horizontal"] + vertical * eyes.gaze["vertical"] + eog_common + noise
            ) * traits.channel_gain.get(c, 1.0)
        else:
            signals[c] = emg * traits.channel_gain.get(c, 1.0)
    return signals


def _night_meta(
    closed: np.ndarray,
    events: dict[str, np.ndarray],
    eyes: EyeMovements,
    arousals: dict[str, list[tuple[int, int]]],
    artifacts: Artifacts,
    mains_hz: float | None,
) -> dict:
    """:attr:`SyntheticNight.meta` (keys listed in :func:`synth_night`) from what the night's parts drew."""
    return {
        "eyes_closed": closed,
        "phasic_rem": eyes.phasic_epochs,
        **arousals,
        "sweat_episodes": artifacts.sweat,
        "movement_epochs": artifacts.movement_epochs,
        "movements": artifacts.movements,
        "pops": artifacts.pops,
        "events": {**events, **eyes.events},
        "eye_movement_signs": eyes.signs,
        "mains_hz": mains_hz,
    }


def synth_night(
    channels: list[str],
    hours: float,
    fs: float,
    traits: SubjectTraits,
    rng: np.random.Generator,
    compress: int = 1,
    mains_hz: float = 50.0,
    stages: np.ndarray | None = None,
    arousal_onsets: np.ndarray | None = None,
) -> SyntheticNight:
    """Generate one night: every channel ``(n,)`` in uV with ``n = epochs * 30 s * fs``.

    ``hours``-long night's hypnogram, or with ``compress > 1`` a shorter excerpt with its stage
    proportions (:func:`full_night_excerpt`); ``stages (e,)``: this hypnogram instead (``hours`` and
    ``compress`` ignored; e.g. wake padding). ``arousal_onsets (k,)`` (seconds): an EEG arousal and a
    chin-EMG burst start at each (the ends of respiratory events; own random stream; None: none).
    Physiology (rhythms and their jitter, spatially correlated by :func:`spatial_correlation`;
    transients; ocular leakage; arousals) is generated on the EEG sources,
    bipolar derivations (:data:`BIPOLAR_DERIVATIONS`) are their electrodes' difference, then artifacts and
    noise (line noise at ``mains_hz``, omitted above 0.45 ``fs``) are added per derivation. Wake epochs are
    eyes open or closed (:func:`eyes_closed_epochs`). ``meta``: ``eyes_closed (e,)``, ``phasic_rem (e,)``,
    ``arousals [(start, length)]`` (spontaneous), ``respiratory_arousals`` (at ``arousal_onsets``, same form),
    ``sweat_episodes``, ``movement_epochs``, ``movements [(start, length)]``, ``pops [(channel, start, step
    uV)]``, ``events`` (onset samples per transient and eye movement), ``eye_movement_signs`` (saccades / slow
    rolls: +1 rightward; blinks always move the eyes up), ``mains_hz`` (None when omitted)."""
    if stages is None:
        stages = night_hypnogram(hours, compress, traits, rng)
    check_channels(channels)
    n = int(stages.size * EPOCH_SECONDS * fs)
    closed = eyes_closed_epochs(stages, traits, rng)
    derivations = [c for c in channels if c in EEG_TOPOGRAPHY]
    sources = eeg_sources(derivations)  # physiology on the sources, artifacts on the derivations
    topography = np.array([{**EEG_TOPOGRAPHY, **ELECTRODE_TOPOGRAPHY}[c] for c in sources]).reshape(len(sources), 3)
    templates = _templates(fs, traits)
    out = _background_rhythms(sources, topography, stages, closed, traits, fs, rng)
    events = _add_transients(out, topography, stages, templates, traits, fs, rng)
    out += PINK_NOISE_UV * _pink_noise(n, fs, rng, len(sources))
    out *= traits.gain
    eyes = _eye_movements(stages, closed, templates, n, fs, rng)
    out += 0.12 * topography[:, 0][:, None] * eyes.eog[None]  # ocular leakage into frontal EEG
    emg = _chin_emg(stages, closed, n, fs, rng)
    spontaneous = add_arousals(out, emg, topography, stages, traits, fs, rng)
    respiratory = add_respiratory_arousals(out, emg, topography, arousal_onsets, traits, fs, rng)
    out = derivation_matrix(sources, derivations) @ out  # (c, s) @ (s, n): bipolar derivations as differences
    artifacts = add_artifacts(out, emg, derivations, stages, traits, fs, mains_hz, rng)
    signals = _channel_signals(channels, out, derivations, emg, eyes, artifacts, traits, fs, rng)
    arousals = {"arousals": spontaneous, "respiratory_arousals": respiratory}
    meta = _night_meta(closed, events, eyes, arousals, artifacts, mains_hz if mains_hz < 0.45 * fs else None)
    return SyntheticNight(signals=signals, fs=fs, stages=stages, meta=meta)
