"""Per-stage signal statistics of one EEG derivation in microvolts: relative band power (the
band-power baseline's bands) and amplitude percentiles, for comparing the generator with real
recordings (``mvapp experiment synth-check signals``, docs/eeg.md); and spindle density from scorings."""

from __future__ import annotations

from typing import Any

import numpy as np

from .bands import BANDS, band_powers
from .preprocess import DEFAULT_BAND, bandpass, resample
from .stages import EPOCH_SECONDS, STAGES

AMPLITUDE_PERCENTILES = (1, 5, 25, 50, 75, 95, 99)
"""Percentiles of the band-passed samples (uV) reported per stage."""


def stage_epochs(
    signal: np.ndarray, fs: float, labels: np.ndarray, sfreq: float = 100.0, band: tuple[float, float] = DEFAULT_BAND
) -> tuple[np.ndarray, np.ndarray]:
    """One channel ``(n,)`` in uV -> the scored 30-s epochs ``(e, 30 * sfreq)`` in uV, resampled to
    ``sfreq`` and band-passed to ``band`` as prepared windows are (but not z-scored), and their labels
    ``(e,)`` (epochs labelled < 0 and epochs past the signal are left out)."""
    x = resample(np.asarray(signal, dtype=np.float64), fs, sfreq)
    x = bandpass(x, sfreq, *band)
    per_epoch = int(round(EPOCH_SECONDS * sfreq))
    n_epochs = min(labels.size, x.size // per_epoch)
    epochs = x[: n_epochs * per_epoch].reshape(n_epochs, per_epoch)
    keep = labels[:n_epochs] >= 0
    return epochs[keep], labels[:n_epochs][keep]


def stage_signal_stats(epochs: np.ndarray, labels: np.ndarray, sfreq: float) -> dict[str, Any]:
    """Per stage: ``epochs`` count, relative band power (25th / 50th / 75th percentile over epochs,
    ``eval.bandpower`` bands and total), amplitude percentiles of the samples, the median per-epoch
    standard deviation in uV and the median in-band rms (uV, square root of the median band power). ``epochs (e, T)``, ``labels (e,)``."""
    out: dict[str, Any] = {}
    for code, stage in enumerate(STAGES):
        chosen = epochs[labels == code]
        if not len(chosen):
            out[stage] = {"epochs": 0}
            continue
        powers, total = band_powers(chosen[:, None, :], sfreq)
        relative = (powers / np.maximum(total, 1e-12))[:, 0, :]  # (e, 5)
        out[stage] = {
            "epochs": int(len(chosen)),
            "relative_power": {
                band: [float(v) for v in np.percentile(relative[:, i], [25, 50, 75])] for i, band in enumerate(BANDS)
            },
            "amplitude_uv": {
                f"p{p}": float(v) for p, v in zip(AMPLITUDE_PERCENTILES, np.percentile(chosen, AMPLITUDE_PERCENTILES))
            },
            "epoch_sd_uv_median": float(np.median(chosen.std(axis=1))),
            "band_rms_uv_median": {band: float(np.sqrt(np.median(powers[:, 0, i]))) for i, band in enumerate(BANDS)},
        }
    return out


def events_per_minute_in_stage(onsets_seconds: np.ndarray, labels: np.ndarray, stage: int) -> tuple[int, float]:
    """Events (onsets in s from the epoch grid's start) falling in epochs labelled ``stage``, and the
    minutes of that stage: ``(count, minutes)``."""
    index = np.floor(np.asarray(onsets_seconds, dtype=np.float64) / EPOCH_SECONDS).astype(np.int64)
    inside = (index >= 0) & (index < labels.size)
    count = int((labels[index[inside]] == stage).sum())
    return count, float((labels == stage).sum() * EPOCH_SECONDS / 60.0)


SPINDLE_BAND = (11.0, 16.0)
"""Band (Hz) of the spindle detector."""


def detect_spindles(
    signal: np.ndarray,
    fs: float,
    stages: np.ndarray,
    threshold: float = 3.0,
    reference_stage: int = 2,
    smooth_seconds: float = 0.2,
    min_seconds: float = 0.5,
    max_seconds: float = 3.0,
) -> tuple[np.ndarray, np.ndarray]:
    """The project's spindle detector (the one ``tests/test_eeg_synth.py`` checks the generator with):
    ``signal (n,)`` band-passed to :data:`SPINDLE_BAND` (4th-order Butterworth, zero-phase), Hilbert
    envelope smoothed over ``smooth_seconds``, above ``threshold`` x the median envelope of the epochs
    labelled ``reference_stage`` (``stages (E,)``, 30-s epochs from the signal's start; samples past
    them are not a reference) for ``min_seconds`` to ``max_seconds``. Returns ``(onsets s, durations s)``."""
    from scipy.signal import hilbert

    x = np.asarray(signal, dtype=np.float64)
    envelope = np.abs(hilbert(bandpass(x, fs, *SPINDLE_BAND)))
    width = int(round(smooth_seconds * fs))
    envelope = np.convolve(envelope, np.ones(width) / width, mode="same")
    per_sample = np.full(x.size, -1, dtype=np.int64)
    covered = min(x.size, stages.size * int(round(EPOCH_SECONDS * fs)))
    per_sample[:covered] = np.repeat(stages, int(round(EPOCH_SECONDS * fs)))[:covered]
    reference = envelope[per_sample == reference_stage]
    if reference.size == 0:
        raise ValueError(f"detect_spindles: no epoch of stage {STAGES[reference_stage]} to set the threshold")
    above = np.r_[0, (envelope > threshold * np.median(reference)).astype(int), 0]
    on, off = np.flatnonzero(np.diff(above) == 1), np.flatnonzero(np.diff(above) == -1)
    keep = ((off - on) >= int(round(min_seconds * fs))) & ((off - on) <= int(round(max_seconds * fs)))
    return on[keep] / fs, (off - on)[keep] / fs


def match_events(detected: tuple[np.ndarray, np.ndarray], reference: tuple[np.ndarray, np.ndarray]) -> dict[str, float]:
    """Agreement of detected with reference events (each ``(onsets s, durations s)``) by overlap: a
    reference event is found when a detection overlaps it (sensitivity), a detection is right when it
    overlaps a reference event (precision)."""
    d_on, d_off = detected[0], detected[0] + detected[1]
    r_on, r_off = reference[0], reference[0] + reference[1]
    overlap = (d_on[:, None] < r_off[None, :]) & (r_on[None, :] < d_off[:, None])  # (detected, reference)
    found, right = int(overlap.any(axis=0).sum()), int(overlap.any(axis=1).sum())
    return {
        "reference": int(r_on.size),
        "detected": int(d_on.size),
        "found": found,
        "right": right,
        "sensitivity": found / r_on.size if r_on.size else float("nan"),
        "precision": right / d_on.size if d_on.size else float("nan"),
    }
