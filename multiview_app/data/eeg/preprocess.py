"""Recording -> standardized 30-s windows: resample, band-pass, window, drop bad windows (counted)."""
from __future__ import annotations

from collections import Counter
from fractions import Fraction

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator
from scipy.signal import butter, resample_poly, sosfiltfilt

from .recording import Recording
from .stages import EPOCH_SECONDS, UNSCORED


DROP_REASONS = ("excluded", "unscored", "wake_cropped", "nan", "flat")
"""Why an epoch does not become a cached window (each counted per recording)."""


class PrepareOptions(BaseModel):
    """How recordings become cached windows (stored in the manifest; a cache keeps one set)."""

    model_config = ConfigDict(extra="forbid")

    channels: list[str] = Field(min_length=1)
    sfreq: float = Field(100.0, gt=0)
    l_freq: float | None = Field(0.3, ge=0, description="band-pass low edge (Hz); None: no high-pass")
    h_freq: float | None = Field(35.0, gt=0, description="band-pass high edge (Hz); None: no low-pass")
    crop_wake_minutes: float | None = Field(30.0, ge=0, description="wake kept before first / after last sleep")
    flat_ratio: float = Field(1e-3, gt=0, description="window flat if its std < ratio x the channel's median std")

    @model_validator(mode="after")
    def _check_band(self) -> "PrepareOptions":
        if self.h_freq is not None and self.h_freq >= self.sfreq / 2:
            raise ValueError(f"h_freq={self.h_freq} must be below the Nyquist frequency {self.sfreq / 2}")
        if self.l_freq is not None and self.h_freq is not None and self.l_freq >= self.h_freq:
            raise ValueError(f"l_freq={self.l_freq} must be below h_freq={self.h_freq}")
        return self

    @property
    def window_samples(self) -> int:
        return int(round(EPOCH_SECONDS * self.sfreq))


def resample(signal: np.ndarray, from_hz: float, to_hz: float) -> np.ndarray:
    """Polyphase resampling ``(n,) -> (n * to/from,)`` (identity when rates match)."""
    if np.isclose(from_hz, to_hz):
        return signal
    ratio = Fraction(to_hz / from_hz).limit_denominator(1000)
    return resample_poly(signal, ratio.numerator, ratio.denominator)


def bandpass(signals: np.ndarray, sfreq: float, l_freq: float | None, h_freq: float | None) -> np.ndarray:
    """Zero-phase 4th-order Butterworth along the last axis (high-, low- or band-pass)."""
    if l_freq is None and h_freq is None:
        return signals
    if l_freq and h_freq:
        sos = butter(4, [l_freq, h_freq], btype="bandpass", fs=sfreq, output="sos")
    elif h_freq:
        sos = butter(4, h_freq, btype="lowpass", fs=sfreq, output="sos")
    else:
        sos = butter(4, l_freq, btype="highpass", fs=sfreq, output="sos")
    return sosfiltfilt(sos, signals, axis=-1)


def wake_crop_mask(labels: np.ndarray, keep_minutes: float | None) -> np.ndarray:
    """``(E,)`` bool: epochs within ``keep_minutes`` of the first/last sleep epoch (all if None/no sleep)."""
    keep = np.ones(labels.size, dtype=bool)
    sleep = np.flatnonzero((labels >= 1))
    if keep_minutes is None or sleep.size == 0:
        return keep
    margin = int(round(keep_minutes * 60 / EPOCH_SECONDS))
    keep[: max(sleep[0] - margin, 0)] = False
    keep[sleep[-1] + margin + 1:] = False
    return keep


def make_windows(recording: Recording, options: PrepareOptions) -> tuple[np.ndarray, np.ndarray, np.ndarray, Counter]:
    """Cut a recording into standardized windows.

    Returns ``windows (w, c, T)`` float32 (per-window per-channel zero mean, unit std),
    ``labels (w,)`` int64 in 0..4, ``epochs (w,)`` epoch index from the recording start, and the
    counts of dropped epochs by reason (``excluded``, ``unscored``, ``wake_cropped``, ``nan``, ``flat``).
    """
    counts: Counter = Counter()
    window = options.window_samples
    labels = recording.epoch_labels
    resampled, nan_epochs = [], np.zeros(labels.size, dtype=bool)
    for name, signal, fs in zip(recording.channel_names, recording.signals, recording.sfreqs):
        bad = ~np.isfinite(signal)
        if bad.any():
            per_epoch = int(round(EPOCH_SECONDS * fs))
            bad_epochs = np.unique(np.flatnonzero(bad) // per_epoch)
            nan_epochs[bad_epochs[bad_epochs < labels.size]] = True
            signal = np.where(bad, 0.0, signal)
        if not np.isclose(fs, options.sfreq):
            counts["resampled_channels"] += 1
        resampled.append(resample(signal, fs, options.sfreq))
    n_epochs = min(labels.size, min(len(s) for s in resampled) // window)
    data = np.stack([s[: n_epochs * window] for s in resampled])  # (c, n)
    data = bandpass(data, options.sfreq, options.l_freq, options.h_freq)
    windows = data.reshape(data.shape[0], n_epochs, window).transpose(1, 0, 2)  # (E, c, T)
    labels, nan_epochs = labels[:n_epochs], nan_epochs[:n_epochs]

    keep = labels >= 0
    counts["excluded"] += int((labels == -1).sum())
    counts["unscored"] += int((labels == UNSCORED).sum())
    cropped = ~wake_crop_mask(labels, options.crop_wake_minutes) & keep
    counts["wake_cropped"] += int(cropped.sum())
    keep &= ~cropped
    counts["nan"] += int((nan_epochs & keep).sum())
    keep &= ~nan_epochs
    std = windows.std(axis=-1)  # (E, c)
    reference = np.median(std[keep], axis=0) if keep.any() else np.ones(std.shape[1])
    flat = (std < options.flat_ratio * reference[None, :]).any(axis=1) | (std == 0).any(axis=1)
    counts["flat"] += int((flat & keep).sum())
    keep &= ~flat
    epochs = np.flatnonzero(keep)
    kept = windows[epochs]
    mean = kept.mean(axis=-1, keepdims=True)
    kept = (kept - mean) / std[epochs][:, :, None]
    return kept.astype(np.float32), labels[epochs].astype(np.int64), epochs.astype(np.int64), counts
