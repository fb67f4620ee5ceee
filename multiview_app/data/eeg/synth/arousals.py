"""Brief EEG arousals of the synthetic nights: an alpha / beta burst (posterior > central > frontal) on the
EEG sources and a chin-EMG burst, no stage change. The first ones come from the night's main random
stream, the rest (up to the published arousal index) from their own side stream."""

from __future__ import annotations

import numpy as np

from ..stages import EPOCH_SECONDS
from .parameters import (
    AROUSAL_ALPHA_UV,
    AROUSAL_BETA_UV,
    AROUSAL_MIN_SECONDS,
    AROUSAL_SECONDS,
    AROUSALS_PER_HOUR,
    EXTRA_AROUSALS_PER_HOUR,
    SIDE_STREAMS,
    SubjectTraits,
    W,
    side_stream,
)
from .waveforms import _band_noise

POSTERIOR_WEIGHTS = (0.5, 0.8, 1.0)
"""Region weights (frontal, central, occipital) of an arousal's alpha / beta burst."""


def _arousal_seconds(traits: SubjectTraits, rng: np.random.Generator) -> float:
    """One arousal's duration (s): ``uniform(1 - spread, 1 + spread)`` x the subject's mean, at least
    :data:`AROUSAL_MIN_SECONDS` (:data:`AROUSAL_SECONDS`)."""
    spread = AROUSAL_SECONDS["spread"]
    return max(AROUSAL_MIN_SECONDS, rng.uniform(1.0 - spread, 1.0 + spread) * traits.arousal_seconds)


def _arousal_onsets(
    stages: np.ndarray, traits: SubjectTraits, fs: float, rng: np.random.Generator, per_hour: float = AROUSALS_PER_HOUR
) -> list[tuple[int, int]]:
    """Brief arousals ``[(start sample, length), ...]`` inside sleep epochs (no stage change),
    ``per_hour`` x ``arousal_scale`` per hour of sleep; durations :data:`AROUSAL_SECONDS` around the
    subject's ``arousal_seconds``."""
    spe = int(EPOCH_SECONDS * fs)
    sleep = np.flatnonzero(stages != W)
    count = rng.poisson(per_hour * traits.arousal_scale * sleep.size * EPOCH_SECONDS / 3600.0)
    out = []
    for e in rng.choice(sleep, size=min(count, sleep.size), replace=False) if sleep.size else ():
        length = min(int(_arousal_seconds(traits, rng) * fs), spe - 1)
        out.append((int(e) * spe + int(rng.integers(0, spe - length)), length))
    return out


def _add_arousal(
    out: np.ndarray,
    emg: np.ndarray,
    start: int,
    length: int,
    posterior: np.ndarray,
    traits: SubjectTraits,
    fs: float,
    rng: np.random.Generator,
) -> None:
    """Add one arousal in place: an alpha + beta burst to the EEG ``out (c, n)`` (weights
    ``posterior (c,)``) and a chin-EMG burst to ``emg (n,)``, ``length`` samples from ``start``."""
    burst = (
        _band_noise(length, fs, (traits.alpha_hz - 1.5, traits.alpha_hz + 1.5), rng, 1)[0] * AROUSAL_ALPHA_UV
        + _band_noise(length, fs, (16.0, 30.0), rng, 1)[0] * AROUSAL_BETA_UV
    ) * np.hanning(length)
    out[:, start : start + length] += posterior[:, None] * burst[None] * traits.gain
    emg[start : start + length] += _band_noise(length, fs, (10.0, 45.0), rng, 1)[0] * 12.0 * np.hanning(length)


def add_arousals(
    out: np.ndarray,
    emg: np.ndarray,
    topography: np.ndarray,
    stages: np.ndarray,
    traits: SubjectTraits,
    fs: float,
    rng: np.random.Generator,
) -> list[tuple[int, int]]:
    """Add the night's spontaneous arousals in place to the EEG sources ``out (s, n)`` (region weights
    ``topography (s, 3)``) and ``emg (n,)``: :data:`AROUSALS_PER_HOUR` from ``rng``, then
    :data:`EXTRA_AROUSALS_PER_HOUR` from their side stream. Returns ``[(start sample, length), ...]``."""
    posterior = topography @ np.array(POSTERIOR_WEIGHTS)  # (s,)
    arousals = _arousal_onsets(stages, traits, fs, rng)
    for start, length in arousals:
        _add_arousal(out, emg, start, length, posterior, traits, fs, rng)
    extra_rng = side_stream(rng, SIDE_STREAMS["extra_arousals"])
    extra = _arousal_onsets(stages, traits, fs, extra_rng, per_hour=EXTRA_AROUSALS_PER_HOUR)
    for start, length in extra:
        _add_arousal(out, emg, start, length, posterior, traits, fs, extra_rng)
    return arousals + extra


def add_respiratory_arousals(
    out: np.ndarray,
    emg: np.ndarray,
    topography: np.ndarray,
    onsets_seconds: np.ndarray | None,
    traits: SubjectTraits,
    fs: float,
    rng: np.random.Generator,
) -> list[tuple[int, int]]:
    """Add an arousal in place (as :func:`add_arousals`: EEG sources ``out (s, n)``, ``emg (n,)``) starting at
    each of ``onsets_seconds (k,)`` (the ends of respiratory events), durations drawn as the spontaneous
    ones' from the ``respiratory_arousals`` side stream of ``rng``. Arousals run to the night's end at most;
    those starting outside the night, or cut below half :data:`AROUSAL_MIN_SECONDS` there, are skipped.
    None or empty: nothing drawn. Returns ``[(start sample, length)]``."""
    if onsets_seconds is None or len(onsets_seconds) == 0:
        return []
    own = side_stream(rng, SIDE_STREAMS["respiratory_arousals"])
    posterior = topography @ np.array(POSTERIOR_WEIGHTS)  # (s,)
    n = emg.size
    arousals = []
    for onset in np.sort(np.asarray(onsets_seconds, dtype=float)):
        start = int(round(onset * fs))
        length = min(int(_arousal_seconds(traits, own) * fs), n - start)
        if start < 0 or length < int(AROUSAL_MIN_SECONDS * fs) // 2:  # outside the night or too short to show
            continue
        _add_arousal(out, emg, start, length, posterior, traits, fs, own)
        arousals.append((start, length))
    return arousals
