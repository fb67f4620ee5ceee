"""Hypnograms of the synthetic nights: semi-Markov NREM-REM cycles cut into gamma-distributed stage
bouts (:func:`synth_hypnogram`), compressed excerpts with the full night's stage proportions
(:func:`full_night_excerpt`) and the eyes-open / eyes-closed state of wake epochs
(:func:`eyes_closed_epochs`). Stages are per 30-s epoch, codes 0..4 = W, N1, N2, N3, REM."""

from __future__ import annotations

import numpy as np

from ..stages import EPOCH_SECONDS
from .parameters import N1, N2, N3, REM, SubjectTraits, W

EPOCHS_PER_MINUTE = 60.0 / EPOCH_SECONDS
N3_MINUTES = (38.0, 28.0, 15.0, 9.0)
"""N3 per NREM-REM cycle (minutes, times the subject's ``n3_scale``); none from cycle 5 on: slow-wave
sleep is concentrated in the first cycles (Carskadon & Dement, "Normal human sleep: an overview").
Cycles 3-4 raised from 12 / 5 min: the 20 real Sleep-EDF SC nights hold 9.8 ± 14 min
of N3 in the last third of the sleep period (synthetic was 4.4) and an N3 share of 0.149 (was 0.135;
``reference.SLEEP_EDF_SC_REAL_NIGHT_STRUCTURE``)."""
REM_MINUTES = (11.0, 19.0, 25.0, 30.0, 32.0, 34.0)
"""REM per cycle (minutes, times ``rem_scale``): REM periods lengthen across the night."""
BOUT_MINUTES = {N1: (2.5, 1.0), N2: (8.0, 1.0), N3: (5.0, 0.35), REM: (11.0, 1.0)}
"""Stage bouts inside a cycle segment: gamma-distributed durations (mean minutes, shape). Measured
against the 20 real Sleep-EDF SC hypnograms (``reference.SLEEP_EDF_SC_REAL_NIGHT_STRUCTURE``):
real bouts are short and skewed (median / mean minutes N2 2.5 / 5.3, N3 1 / 3.7, REM 5.5 / 7.5; 47 % of
real N3 bouts last one epoch: N3 flickers with N2), so shapes <= 1 replace the former shapes 1.5-2.5
(means 8 / 7 / 16 min), which gave N3 bouts of median 4.5 min (KS 0.56) and REM of 9.5 min (KS 0.28)."""
AWAKENING_MINUTES = (12.0, 1.5)
"""Awakenings at the end of a REM period: gamma-distributed duration (mean minutes, shape)."""
INTERRUPTION = {  # what interrupts a bout of each stage: (stage, probability) of the first interrupting epoch
    N1: ((W, 0.6), (N2, 0.4)),
    N2: ((W, 0.2), (N1, 0.8)),
    N3: ((N2, 0.95), (W, 0.05)),
    REM: ((W, 0.25), (N1, 0.55), (N2, 0.2)),
}
"""N3 is interrupted by N2 (95 %, was 85 %): in the real nights N3 alternates with N2 (one-epoch N3
bouts), and a wake interruption adds W/NREM/REM transitions the real nights do not have (6.0 / h).
REM is interrupted by N2 in 20 % (was never; N1 55 %, was 75 %): in the 20 real Sleep-EDF SC hypnograms
(after the readers' crop) a REM period is broken by 116 short runs of another stage between two REM
runs: N1 74 (128 epochs), N2 26, W 15, N3 1; the synthetic nights (20, seed 0) had N1 106 (231 epochs,
15 % of all N1 against the real 8 %), W 10, N2 none."""
INTERRUPTION_EPOCHS = {W: (1, 2), N1: (1, 3), N2: (1, 2)}
"""Length (epochs, inclusive range) of an interruption by each stage: N1 interruptions last 1-3 epochs
(were 1-2, like the others): real N1 bouts average 1.42 min (synthetic was 0.86) and the real N1 share
is 0.080 (was 0.059)."""


def _gamma_epochs(rng: np.random.Generator, mean_minutes: float, shape: float) -> int:
    """A gamma-distributed duration (mean ``mean_minutes``, ``shape``) in whole epochs, at least 1."""
    return max(1, int(round(rng.gamma(shape, mean_minutes / shape) * EPOCHS_PER_MINUTE)))


def _segment(stage: int, length: int, rng: np.random.Generator) -> list[int]:
    """``length`` epochs of ``stage`` split into gamma bouts separated by brief interruptions (a 1-2
    epoch awakening or lighter stage, then back): ``length`` labels."""
    out: list[int] = []
    while len(out) < length:
        out += [stage] * _gamma_epochs(rng, *BOUT_MINUTES[stage])
        if len(out) >= length:
            break
        choices, probs = zip(*INTERRUPTION[stage])
        first = int(rng.choice(choices, p=np.asarray(probs) / sum(probs)))
        low, high = INTERRUPTION_EPOCHS[first]
        out += [first] * int(rng.integers(low, high + 1))
        if first == W:  # an awakening is followed by light sleep before the stage resumes
            out += [N1] * int(rng.integers(0, 3))
    return out[:length]


def synth_hypnogram(n_epochs: int, traits: SubjectTraits, rng: np.random.Generator) -> np.ndarray:
    """Semi-Markov night: ``(n_epochs,)`` labels 0..4.

    Wake from the recording start through lights-off and sleep latency (``latency_minutes``), a
    W/N1 sleep-onset period, then NREM-REM cycles of ``cycle_minutes`` (times a per-cycle jitter):
    N1 entry, N2 descent, N3 (:data:`N3_MINUTES`, early cycles only), N2 ascent, REM
    (:data:`REM_MINUTES`, lengthening), and sometimes an awakening at the end of a REM period. Each
    segment is split into gamma-distributed stage bouts (:data:`BOUT_MINUTES`) separated by brief
    arousals (:data:`INTERRUPTION`). After the final awakening, wake until the recording ends
    (``final_wake_minutes``, at most a tenth of a short recording; the latency at most a sixth), as in
    Sleep-EDF SC files.
    """
    final_wake = max(2, min(int(traits.final_wake_minutes * EPOCHS_PER_MINUTE), n_epochs // 10))
    sleep_end = n_epochs - final_wake
    latency = min(int(traits.latency_minutes * EPOCHS_PER_MINUTE), max(2, n_epochs // 6))  # short recordings: short
    stages: list[int] = [W] * min(latency, sleep_end)
    # sleep onset: N1 with a brief return to wake
    stages += [N1] * _gamma_epochs(rng, 2.5, 2.0) + [W] * int(rng.integers(0, 3)) + [N1] * int(rng.integers(1, 4))
    cycle = 0
    while len(stages) < sleep_end:
        minutes = traits.cycle_minutes * float(rng.lognormal(0.0, 0.08))
        remaining = (sleep_end - len(stages)) / EPOCHS_PER_MINUTE
        if remaining < 1.5 * minutes:  # the last cycle fills the rest of the night (and ends in REM)
            minutes = remaining
        n3 = (N3_MINUTES[cycle] if cycle < len(N3_MINUTES) else 0.0) * traits.n3_scale
        rem = REM_MINUTES[min(cycle, len(REM_MINUTES) - 1)] * traits.rem_scale * float(rng.lognormal(0.0, 0.15))
        n1 = 0.0 if cycle == 0 else float(rng.gamma(2.0, 1.0))
        n2 = max(minutes - n3 - rem - n1, min(12.0, 0.5 * minutes))
        descent = n2 * (0.6 if n3 > 0 else 0.5)
        for stage, length in ((N1, n1), (N2, descent), (N3, n3), (N2, n2 - descent), (REM, rem)):
            epochs = int(round(length * EPOCHS_PER_MINUTE))
            if epochs > 0:
                stages += _segment(stage, epochs, rng)
        if rng.random() < traits.awakening_prob:  # awakening at the end of a REM period
            stages += [W] * _gamma_epochs(rng, AWAKENING_MINUTES[0] * traits.awakening_scale, AWAKENING_MINUTES[1])
        cycle += 1
    labels = np.full(n_epochs, W, dtype=np.int64)
    labels[:sleep_end] = np.asarray(stages[:sleep_end], dtype=np.int64)
    return labels


def night_hypnogram(hours: float, compress: int, traits: SubjectTraits, rng: np.random.Generator) -> np.ndarray:
    """The stages ``(e,)`` of a ``hours``-long night (:func:`synth_hypnogram`), or with ``compress > 1`` its
    excerpt (:func:`full_night_excerpt`): the hypnogram :func:`~.brain.synth_night` draws first."""
    return full_night_excerpt(synth_hypnogram(int(round(hours * 3600 / EPOCH_SECONDS)), traits, rng), compress)


def full_night_excerpt(stages: np.ndarray, compress: int, crop_wake_minutes: float = 30.0) -> np.ndarray:
    """A ``compress``-times shorter night with the stage proportions of the full night ``stages``
    as the readers crop it: the span the reader keeps (``crop_wake_minutes`` of wake around sleep)
    with every ``compress``-th epoch. ``compress = 1`` returns ``stages`` unchanged."""
    if compress <= 1:
        return stages
    from ..preprocess import wake_crop_mask

    kept = np.flatnonzero(wake_crop_mask(stages, crop_wake_minutes))
    return stages[kept[0] : kept[-1] + 1][::compress].copy()


def eyes_closed_epochs(stages: np.ndarray, traits: SubjectTraits, rng: np.random.Generator) -> np.ndarray:
    """``(e,)`` bool: wake epochs with eyes closed, in runs of gamma-distributed length (mean 3 min);
    the last 5 minutes before sleep onset are eyes closed. False outside wake."""
    closed = np.zeros(stages.size, dtype=bool)
    i = 0
    while i < stages.size:
        length = _gamma_epochs(rng, 3.0, 1.5)
        closed[i : i + length] = rng.random() < traits.eyes_closed_prob
        i += length
    sleep = np.flatnonzero(stages != W)
    if sleep.size:
        closed[max(0, sleep[0] - int(5 * EPOCHS_PER_MINUTE)) : sleep[0]] = True
    return closed & (stages == W)
