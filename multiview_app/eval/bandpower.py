"""Spectral baseline: relative band powers (delta, theta, alpha, sigma, beta) per channel."""
from __future__ import annotations

import numpy as np
from scipy.signal import welch

from ..data.eeg.preprocess import DEFAULT_BAND

BANDS: dict[str, tuple[float, float]] = {
    "delta": (0.5, 4.0),
    "theta": (4.0, 8.0),
    "alpha": (8.0, 12.0),
    "sigma": (12.0, 16.0),
    "beta": (16.0, 30.0),
}
"""Band edges in Hz (lower inclusive, upper exclusive)."""


def relative_band_powers(windows: np.ndarray, sfreq: float) -> np.ndarray:
    """Welch (2-s segments) band powers divided by the total over ``DEFAULT_BAND`` (0.5-30 Hz, the
    band of prepared windows): ``(N, C, T) -> (N, C, 5)``."""
    if windows.ndim != 3:
        raise ValueError(f"expected windows (N, C, T), got shape {windows.shape}")
    nperseg = min(windows.shape[-1], int(round(2 * sfreq)))
    freqs, psd = welch(windows, fs=sfreq, nperseg=nperseg, axis=-1)  # (N, C, F)
    powers = np.stack([psd[..., (freqs >= lo) & (freqs < hi)].sum(axis=-1) for lo, hi in BANDS.values()], axis=-1)
    total = psd[..., (freqs >= DEFAULT_BAND[0]) & (freqs < DEFAULT_BAND[1])].sum(axis=-1, keepdims=True)
    return powers / np.maximum(total, 1e-12)


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
