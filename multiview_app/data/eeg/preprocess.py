"""Recording -> standardized 30-s windows: resample, band-pass, window, drop bad windows (counted)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator
from scipy.signal import butter, resample_poly, sosfilt, sosfiltfilt

from .recording import Recording
from .stages import EPOCH_SECONDS, UNSCORED

DEFAULT_BAND = (0.5, 30.0)
"""Default band-pass (Hz) of prepared windows; the band-power baseline sums power over the same band,
so encoder and baseline see the same frequencies (the 30-35 Hz muscle band is out for both)."""

MICROVOLTS_PER_UNIT = 25.0
"""``scaling="microvolts"``: prepared windows are in units of this many microvolts (about the standard
deviation of adult sleep EEG), so an AASM slow wave (> 75 uV peak to peak) is > 3 units in every recording."""

DROP_REASONS = ("excluded", "unscored", "wake_cropped", "nan", "flat")
"""Why an epoch does not become a cached window (each counted per recording)."""


class PrepareOptions(BaseModel):
    """How recordings become cached windows (stored in the manifest; a cache keeps one set)."""

    model_config = ConfigDict(extra="forbid")

    channels: list[str] = Field(min_length=1)
    sfreq: float = Field(100.0, gt=0)
    l_freq: float | None = Field(DEFAULT_BAND[0], ge=0, description="band-pass low edge (Hz); None: no high-pass")
    h_freq: float | None = Field(
        DEFAULT_BAND[1],
        gt=0,
        description="band-pass high edge (Hz); None: no low-pass "
        "(0.5-30 Hz: the band the band-power baseline sums over, so both see the same band)",
    )
    crop_wake_minutes: float | None = Field(30.0, ge=0, description="wake kept before first / after last sleep")
    flat_ratio: float = Field(1e-3, gt=0, description="window flat if its std < ratio x the channel's median std")
    scaling: Literal["window", "recording", "microvolts"] = Field(
        "recording",
        description="window: per-window per-channel z-score; recording: per-channel median and "
        "IQR/1.349 of the recording's kept windows (keeps amplitude differences, e.g. N3 delta); "
        "microvolts: per-channel median removed, in units of MICROVOLTS_PER_UNIT (25 uV; "
        "keeps absolute amplitude across recordings)",
    )

    @model_validator(mode="after")
    def _check_band(self) -> PrepareOptions:
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
    """Zero-phase 4th-order Butterworth along the last axis (high-, low- or band-pass), computed in
    the dtype of ``signals`` (float32 is ~5x faster than float64 and ample for EEG)."""
    if l_freq is None and h_freq is None:
        return signals
    if l_freq and h_freq:
        sos = butter(4, [l_freq, h_freq], btype="bandpass", fs=sfreq, output="sos")
    elif h_freq:
        sos = butter(4, h_freq, btype="lowpass", fs=sfreq, output="sos")
    else:
        sos = butter(4, l_freq, btype="highpass", fs=sfreq, output="sos")
    return sosfiltfilt(sos.astype(signals.dtype), signals, axis=-1)


def highpass_settling_seconds(sfreq: float, l_freq: float, tol: float = 1e-3) -> float:
    """Seconds until the 4th-order Butterworth high-pass at ``l_freq`` has settled: the length after
    which the slow part it removes (impulse minus impulse response) keeps less than ``tol`` of its
    energy (about 4 s at 0.3 Hz, 2.5 s at 0.5 Hz). A recording shorter than this cannot be high-passed
    without its whole length being edge effect."""
    sos = butter(4, l_freq, btype="highpass", fs=sfreq, output="sos")
    n = int(np.ceil(200.0 / l_freq * sfreq))  # 200 periods: far beyond any settling of a 4th-order filter
    impulse = np.zeros(n)
    impulse[0] = 1.0
    energy = np.cumsum((impulse - sosfilt(sos, impulse)) ** 2)
    return float(np.searchsorted(energy, (1.0 - tol) * energy[-1]) + 1) / sfreq


def check_highpass_length(recording: str, n_samples: int, sfreq: float, l_freq: float | None) -> None:
    """Raise one ``ValueError`` naming ``recording`` when its ``n_samples`` are fewer than the high-pass
    at ``l_freq`` needs to settle (:func:`highpass_settling_seconds`)."""
    if not l_freq:
        return
    needed = highpass_settling_seconds(sfreq, l_freq)
    if n_samples / sfreq < needed:
        raise ValueError(
            f"recording {recording}: {n_samples / sfreq:g} s of signal to filter is shorter than the "
            f"{l_freq:g} Hz high-pass needs to settle ({needed:.0f} s); use a higher --l-freq, "
            "'none', or a longer recording"
        )


def robust_scale(windows: np.ndarray) -> np.ndarray:
    """``(w, c, T)`` -> same shape: per channel, minus the median and divided by IQR / 1.349 (the
    std of a Gaussian) of all the recording's samples; one scale per recording and channel, so a
    window twice as large as another stays twice as large."""
    flat = windows.transpose(1, 0, 2).reshape(windows.shape[1], -1)  # (c, w * T)
    low, median, high = np.percentile(flat, [25, 50, 75], axis=1)
    scale = np.maximum((high - low) / 1.349, 1e-12)
    return ((windows - median[None, :, None]) / scale[None, :, None]).astype(np.float32)


def wake_crop_mask(labels: np.ndarray, keep_minutes: float | None) -> np.ndarray:
    """``(E,)`` bool: epochs within ``keep_minutes`` of the first/last sleep epoch (all if None/no sleep)."""
    keep = np.ones(labels.size, dtype=bool)
    sleep = np.flatnonzero(labels >= 1)
    if keep_minutes is None or sleep.size == 0:
        return keep
    margin = int(round(keep_minutes * 60 / EPOCH_SECONDS))
    keep[: max(sleep[0] - margin, 0)] = False
    keep[sleep[-1] + margin + 1 :] = False
    return keep


@dataclass
class EpochPlan:
    """Which 30-s epochs of a recording can become windows, before looking at the signals.

    Attributes:
        labels: ``(E,)`` labels of the grid epochs every channel covers.
        span: the epochs filtered (the candidates plus up to 2 epochs margin each side).
        keep: ``(span epochs,)`` bool: scored and not wake-cropped.
        counts: ``excluded``, ``unscored``, ``wake_cropped`` epochs.
    """

    labels: np.ndarray
    span: slice
    keep: np.ndarray
    counts: Counter


def grid_offsets(recording: Recording, sfreqs: list[float]) -> list[int]:
    """Sample of epoch 0's start in each channel of rate ``sfreqs`` (the grid starts at ``grid_start_seconds``)."""
    return [int(round(recording.grid_start_seconds * fs)) for fs in sfreqs]


def plan_epochs(
    recording: Recording, signals: list[np.ndarray], sfreqs: list[float], crop_wake_minutes: float | None
) -> EpochPlan:
    """The :class:`EpochPlan` of ``recording`` for the channels ``signals`` ``[(n_c,)]`` at ``sfreqs``."""
    counts: Counter = Counter()
    labels = recording.epoch_labels
    offsets = grid_offsets(recording, sfreqs)
    n_epochs = min(
        [labels.size]
        + [int((len(x) - offset) // (EPOCH_SECONDS * fs)) for x, fs, offset in zip(signals, sfreqs, offsets)]
    )
    labels = labels[:n_epochs]
    # Only the span of epochs that can be kept is filtered (real Sleep-EDF nights are ~22 h of which
    # ~9 h survive wake cropping), plus a 60-s margin on each side against filter edge effects.
    candidates = np.flatnonzero((labels >= 0) & wake_crop_mask(labels, crop_wake_minutes))
    first, stop = (int(candidates[0]), int(candidates[-1]) + 1) if candidates.size else (0, 0)
    margin = min(2, first), min(2, n_epochs - stop)
    span = slice(first - margin[0], stop + margin[1])
    keep = labels >= 0
    counts["excluded"] += int((labels == -1).sum())
    counts["unscored"] += int((labels == UNSCORED).sum())
    cropped = ~wake_crop_mask(labels, crop_wake_minutes) & keep
    counts["wake_cropped"] += int(cropped.sum())
    return EpochPlan(labels, span, (keep & ~cropped)[span], counts)  # every candidate lies inside the span


def span_windows(
    recording: Recording,
    signals: list[np.ndarray],
    sfreqs: list[float],
    span: slice,
    sfreq: float,
    band: tuple[float | None, float | None],
) -> tuple[np.ndarray, np.ndarray, int]:
    """The ``span`` epochs of channels ``signals`` ``[(n_c,)]`` (rates ``sfreqs``) resampled to ``sfreq``
    and band-passed (``band``: low, high edge): ``windows (span epochs, c, T)`` float32, ``nan (span
    epochs,)`` bool (a non-finite sample, set to 0 before filtering) and the number of resampled channels."""
    window = int(round(EPOCH_SECONDS * sfreq))
    resampled, nan_epochs, n_resampled = [], np.zeros(span.stop - span.start, dtype=bool), 0
    for signal, fs, offset in zip(signals, sfreqs, grid_offsets(recording, sfreqs)):
        per_epoch = int(round(EPOCH_SECONDS * fs))
        signal = np.asarray(signal[offset + span.start * per_epoch : offset + span.stop * per_epoch], dtype=np.float32)
        bad = ~np.isfinite(signal)
        if bad.any():
            nan_epochs[np.unique(np.flatnonzero(bad) // per_epoch)] = True
            signal = np.where(bad, np.float32(0.0), signal)
        n_resampled += int(not np.isclose(fs, sfreq))
        resampled.append(resample(signal, fs, sfreq).astype(np.float32))
    n_span = span.stop - span.start
    data = np.stack([s[: n_span * window] for s in resampled])  # (c, n)
    if n_span:
        check_highpass_length(recording.recording, data.shape[-1], sfreq, band[0])
        data = bandpass(data, sfreq, *band)
    return data.reshape(data.shape[0], n_span, window).transpose(1, 0, 2), nan_epochs, n_resampled


def flat_windows(windows: np.ndarray, keep: np.ndarray, ratio: float) -> tuple[np.ndarray, np.ndarray]:
    """``windows (w, c, T)`` -> ``(flat (w,), std (w, c))``: a window is flat when a channel's std is
    0 or below ``ratio`` x that channel's median std over the ``keep (w,)`` windows."""
    std = windows.std(axis=-1)  # (w, c)
    reference = np.median(std[keep], axis=0) if keep.any() else np.ones(std.shape[1], dtype=np.float32)
    return (std < ratio * reference[None, :]).any(axis=1) | (std == 0).any(axis=1), std


def scale_windows(
    kept: np.ndarray, std: np.ndarray, scaling: str, offset: float = 0.0, scale: float = 1.0
) -> np.ndarray:
    """Scale ``kept (w, c, T)`` (``std (w, c)``: their stds): ``window`` per-window z-score;
    ``recording`` / ``robust`` :func:`robust_scale`; ``microvolts`` median removed, units of
    :data:`MICROVOLTS_PER_UNIT`; ``affine`` ``(x - offset) / scale``; ``none`` as they are."""
    if scaling == "window":
        return (kept - kept.mean(axis=-1, keepdims=True)) / std[:, :, None]
    if not kept.size or scaling == "none":
        return kept
    if scaling == "microvolts":
        median = np.median(kept.transpose(1, 0, 2).reshape(kept.shape[1], -1), axis=1)  # (c,)
        return (kept - median[None, :, None]) / np.float32(MICROVOLTS_PER_UNIT)
    if scaling == "affine":
        return (kept - np.float32(offset)) / np.float32(scale)
    return robust_scale(kept)


def make_windows(recording: Recording, options: PrepareOptions) -> tuple[np.ndarray, np.ndarray, np.ndarray, Counter]:
    """Cut a recording into standardized windows.

    Returns ``windows (w, c, T)`` float32 (by default per-channel robust scaling over the recording, see
    :func:`robust_scale`; with ``scaling="window"``, per-window per-channel zero mean, unit std; with
    ``scaling="microvolts"``, the recording's per-channel median removed, in units of :data:`MICROVOLTS_PER_UNIT`),
    ``labels (w,)`` int64 in 0..4, ``epochs (w,)`` epoch index from the recording start, and the
    counts of dropped epochs by reason (``excluded``, ``unscored``, ``wake_cropped``, ``nan``, ``flat``).
    """
    plan = plan_epochs(recording, recording.signals, recording.sfreqs, options.crop_wake_minutes)
    windows, nan_epochs, n_resampled = span_windows(
        recording, recording.signals, recording.sfreqs, plan.span, options.sfreq, (options.l_freq, options.h_freq)
    )
    counts: Counter = Counter({"resampled_channels": n_resampled} if n_resampled else {})
    counts.update(plan.counts)
    keep = plan.keep
    counts["nan"] += int((nan_epochs & keep).sum())
    keep &= ~nan_epochs
    flat, std = flat_windows(windows, keep, options.flat_ratio)
    counts["flat"] += int((flat & keep).sum())
    keep &= ~flat
    local = np.flatnonzero(keep)
    kept = scale_windows(windows[local], std[local], options.scaling)
    epochs = local + plan.span.start
    return kept.astype(np.float32), plan.labels[epochs].astype(np.int64), epochs.astype(np.int64), counts
