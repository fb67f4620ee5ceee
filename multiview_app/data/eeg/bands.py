"""Relative EEG band powers (delta, theta, alpha, sigma, beta): the band definitions and the Welch
estimate shared by the band-power baseline (eval/bandpower.py) and the real-vs-synthetic signal
statistics (signal_stats.py)."""

from __future__ import annotations

import numpy as np
from scipy.signal import welch

from .preprocess import DEFAULT_BAND

BANDS: dict[str, tuple[float, float]] = {
    "delta": (0.5, 4.0),
    "theta": (4.0, 8.0),
    "alpha": (8.0, 12.0),
    "sigma": (12.0, 16.0),
    "beta": (16.0, 30.0),
}
"""Band edges in Hz (lower inclusive, upper exclusive)."""


def band_powers(windows: np.ndarray, sfreq: float) -> tuple[np.ndarray, np.ndarray]:
    """Welch (2-s segments) absolute band powers in (input unit)^2 and the total over ``DEFAULT_BAND``
    (0.5-30 Hz, the band of prepared windows): ``(N, C, T) -> ((N, C, 5), (N, C, 1))``."""
    if windows.ndim != 3:
        raise ValueError(f"expected windows (N, C, T), got shape {windows.shape}")
    nperseg = min(windows.shape[-1], int(round(2 * sfreq)))
    freqs, psd = welch(windows, fs=sfreq, nperseg=nperseg, axis=-1)  # (N, C, F), density per Hz
    step = freqs[1] - freqs[0]
    powers = np.stack([psd[..., (freqs >= lo) & (freqs < hi)].sum(axis=-1) for lo, hi in BANDS.values()], axis=-1)
    total = psd[..., (freqs >= DEFAULT_BAND[0]) & (freqs < DEFAULT_BAND[1])].sum(axis=-1, keepdims=True)
    return powers * step, total * step


def relative_band_powers(windows: np.ndarray, sfreq: float) -> np.ndarray:
    """Welch (2-s segments) band powers divided by the total over ``DEFAULT_BAND`` (0.5-30 Hz, the
    band of prepared windows): ``(N, C, T) -> (N, C, 5)``."""
    powers, total = band_powers(windows, sfreq)
    return powers / np.maximum(total, 1e-12)
