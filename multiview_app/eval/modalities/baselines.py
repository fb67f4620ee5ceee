"""Per-window handcrafted features of each modality, from the field's libraries, computed on the modality
cache's windows (the rows the learned embeddings are compared with):

* brain: log relative band powers per channel (``eval.bandpower``);
* heart: heart rate, mean NN, SDNN and RMSSD from NeuroKit2's R peaks (``ecg_peaks``);
* breathing: breathing rate, breath amplitude and breath-interval regularity from NeuroKit2 (``rsp_clean``,
  ``rsp_peaks``, ``rsp_rate``, ``rsp_amplitude``) on the effort belts (CHEST + ABD);
* oximetry: SpO2 mean, minimum and drop below the night's baseline (median);
* airflow amplitude: log RMS of the airflow channel, and its drop (whole window and weakest 10 s)
  relative to the night's median, the apnea / hypopnea baseline.

A window where a library finds too few beats or breaths gets NaN; :func:`fill_failed` replaces them by
the column's median over the windows that succeeded and counts them (reported, never hidden).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np

from ..bandpower import bandpower_features
from ..physiology import breathing_effort, breaths, r_peaks

HEART_FEATURES = ("heart_rate_bpm", "mean_nn_ms", "sdnn_ms", "rmssd_ms")
BREATHING_FEATURES = ("breathing_rate_per_min", "breath_amplitude", "breath_interval_cv")
OXIMETRY_FEATURES = ("spo2_mean_percent", "spo2_min_percent", "spo2_drop_below_baseline")
AIRFLOW_FEATURES = ("airflow_log_rms", "airflow_drop", "airflow_weakest_10s_drop")

MIN_BEATS = 5
"""Fewest R peaks for a window's heart features (30 s at 10 bpm)."""
HEART_RATE_RANGE = (25.0, 220.0)
"""A window whose mean heart rate leaves this range (bpm) failed (a detector locked on noise)."""
MIN_BREATHS = 2
"""Fewest breath troughs for a window's breathing features."""
WEAKEST_SECONDS = 10.0
"""Length of the weakest airflow stretch (an apnea or hypopnea lasts at least 10 s)."""


def _heart_window(ecg: np.ndarray, fs: float) -> np.ndarray:
    """Heart features ``(4,)`` of one ECG window ``(T,)``, NaN when too few plausible beats are found."""
    peaks = r_peaks(ecg, fs)
    nn = np.diff(peaks) / fs * 1000.0
    if peaks.size < MIN_BEATS or not HEART_RATE_RANGE[0] <= 60000.0 / nn.mean() <= HEART_RATE_RANGE[1]:
        return np.full(len(HEART_FEATURES), np.nan)
    return np.array([60000.0 / nn.mean(), nn.mean(), nn.std(ddof=1), np.sqrt(np.mean(np.diff(nn) ** 2))])


def _breathing_window(effort: np.ndarray, fs: float) -> np.ndarray:
    """Breathing features ``(3,)`` of one effort window ``(T,)``, NaN when too few breaths are found."""
    import neurokit2 as nk

    cleaned, info = breaths(effort, fs)
    troughs, peaks = np.asarray(info["RSP_Troughs"]), np.asarray(info["RSP_Peaks"])
    if troughs.size < MIN_BREATHS or peaks.size < MIN_BREATHS:
        return np.full(len(BREATHING_FEATURES), np.nan)
    rate = nk.rsp_rate(cleaned, troughs=info, sampling_rate=int(round(fs)))
    amplitude = nk.rsp_amplitude(cleaned, info)
    intervals = np.diff(troughs) / fs
    regularity = intervals.std() / intervals.mean() if intervals.size > 1 else np.nan
    return np.array([np.nanmean(rate), np.nanmean(amplitude), regularity])


def per_window(windows: np.ndarray, fn: Callable[[np.ndarray], np.ndarray], width: int) -> np.ndarray:
    """``fn`` on each window of ``windows (n, ...)`` -> ``(n, width)``; a window whose library call raises
    gets NaN (counted by :func:`fill_failed`). NeuroKit2's warnings on short segments are silenced."""
    out = np.full((len(windows), width), np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, window in enumerate(windows):
            try:
                out[i] = fn(np.asarray(window, dtype=np.float64))
            except (ValueError, IndexError, ZeroDivisionError, FloatingPointError):
                continue
    return out


def fill_failed(features: np.ndarray) -> tuple[np.ndarray, int]:
    """``features (n, f)`` with NaN cells replaced by their column's median over finite windows (0 for an
    all-NaN column), and the number of windows that had a NaN."""
    failed = int((~np.isfinite(features)).any(axis=1).sum())
    finite = np.where(np.isfinite(features), features, np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an all-NaN column: its median is NaN, replaced by 0
        medians = np.nan_to_num(np.nanmedian(finite, axis=0))
    return np.where(np.isfinite(features), features, medians), failed


def brain_features(windows: np.ndarray, sfreq: float) -> np.ndarray:
    """Log relative band powers ``(n, C * 5)`` of brain windows ``(n, C, T)``."""
    return bandpower_features(np.asarray(windows), sfreq).astype(np.float64)


def heart_features(windows: np.ndarray, sfreq: float) -> np.ndarray:
    """:data:`HEART_FEATURES` ``(n, 4)`` of heart windows ``(n, C, T)`` (first channel), NaN where failed."""
    return per_window(np.asarray(windows)[:, 0], lambda ecg: _heart_window(ecg, sfreq), len(HEART_FEATURES))


def breathing_features(windows: np.ndarray, sfreq: float, channels: list[str]) -> np.ndarray:
    """:data:`BREATHING_FEATURES` ``(n, 3)`` of breathing windows ``(n, C, T)`` whose channels are named
    ``channels`` (effort: CHEST + ABD, else ABD / CHEST / AIRFLOW), NaN where failed."""

    def one(window: np.ndarray) -> np.ndarray:
        effort = breathing_effort(dict(zip(channels, window)))
        if effort is None:
            raise ValueError(f"breathing features: no ABD, CHEST or AIRFLOW among {channels}")
        return _breathing_window(effort, sfreq)

    if breathing_effort(dict.fromkeys(channels, np.zeros(1))) is None:
        raise ValueError(f"breathing features: no ABD, CHEST or AIRFLOW among the channels {channels}")
    return per_window(np.asarray(windows), one, len(BREATHING_FEATURES))


def oximetry_features(percent: np.ndarray, nights: np.ndarray) -> np.ndarray:
    """:data:`OXIMETRY_FEATURES` ``(n, 3)`` of SpO2 windows ``(n, T)`` in percent (NaN where invalid):
    mean, minimum and the night's baseline (median of its valid samples) minus the window's minimum."""
    out = np.full((len(percent), len(OXIMETRY_FEATURES)), np.nan)
    for night in np.unique(nights):
        rows = nights == night
        baseline = np.nanmedian(percent[rows]) if np.isfinite(percent[rows]).any() else np.nan
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an all-invalid window: NaN, counted by fill_failed
            low = np.nanmin(percent[rows], axis=1)
            out[rows] = np.stack([np.nanmean(percent[rows], axis=1), low, baseline - low], axis=1)
    return out


def airflow_features(airflow: np.ndarray, sfreq: float, nights: np.ndarray) -> np.ndarray:
    """:data:`AIRFLOW_FEATURES` ``(n, 3)`` of airflow windows ``(n, T)``: log RMS, log RMS minus the
    night's median log RMS, and the weakest :data:`WEAKEST_SECONDS` stretch's log RMS minus that median."""
    x = np.asarray(airflow, dtype=np.float64)
    log_rms = 0.5 * np.log(np.maximum(np.mean(x**2, axis=1), 1e-12))
    stretch = max(1, int(round(WEAKEST_SECONDS * sfreq)))
    usable = (x.shape[1] // stretch) * stretch
    pieces = x[:, :usable].reshape(len(x), -1, stretch)
    weakest = 0.5 * np.log(np.maximum(np.mean(pieces**2, axis=2).min(axis=1), 1e-12))
    medians = {night: np.median(log_rms[nights == night]) for night in np.unique(nights)}
    reference = np.array([medians[n] for n in nights])
    return np.stack([log_rms, log_rms - reference, weakest - reference], axis=1)
