"""Spectral baseline: relative band powers (delta, theta, alpha, sigma, beta) per channel."""

from __future__ import annotations

import numpy as np

from ..data.eeg.bands import BANDS, relative_band_powers

__all__ = ["BANDS", "bandpower_features", "bandpower_time_bins", "relative_band_powers"]


def bandpower_features(windows: np.ndarray, sfreq: float) -> np.ndarray:
    """Log relative band powers, flattened per window: ``(N, C, T) -> (N, C * 5)`` float32."""
    rel = relative_band_powers(windows, sfreq)
    return np.log(np.maximum(rel, 1e-8)).reshape(len(windows), -1).astype(np.float32)


def bandpower_time_bins(windows: np.ndarray, sfreq: float, bins: int) -> np.ndarray:
    """Log relative band powers of ``bins`` equal time bins per channel, the band-power input of the
    paper classifier: ``(N, C, T) -> (N, C, bins * 5)`` float32."""
    n, c, t = windows.shape
    usable = (t // bins) * bins
    binned = windows[..., :usable].reshape(n, c * bins, usable // bins)
    rel = relative_band_powers(binned, sfreq)  # (N, C * bins, 5)
    return np.log(np.maximum(rel, 1e-8)).reshape(n, c, bins * len(BANDS)).astype(np.float32)
