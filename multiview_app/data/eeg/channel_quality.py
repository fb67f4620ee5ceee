"""Flat and saturated channels: found when a recording is read, reported, and left out (never used silently).

A channel is **flat** when it carries (almost) no signal: its robust spread is below ``FLAT_SPREAD`` of its
unit, or more than ``FLAT_SHARE`` of it repeats one value (a disconnected SpO2 sensor reads 0 all night).
It is **saturated** when more than ``SATURATED_SHARE`` of its samples sit at the extremes of what the file
can store (EDF's digital range clipped at int16, or the physical range its header states).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

FLAT_SPREAD = {"uV": 0.5, "mV": 1e-3, "%": 0.05, "arbitrary": 0.0}
"""Spread (IQR / 1.349) below which a channel counts as flat, by unit (an EEG below 0.5 uV is an empty lead)."""

FLAT_SHARE = 0.9
"""A channel whose most common value covers more than this share of its samples is flat."""

SATURATED_SHARE = 0.05
"""A channel with more than this share of its samples at its storable extremes is saturated."""

OUT_OF_RANGE_SHARE = 0.5
"""A channel with a valid range (SpO2: 50-100 %) and more than this share of samples outside it is unusable."""

Problem = Literal["flat", "saturated", "out_of_range"]


@dataclass(frozen=True)
class ChannelQuality:
    """Why a channel is left out (``problem``), with the figure that decided it."""

    label: str
    problem: Problem | None
    detail: str

    @property
    def usable(self) -> bool:
        return self.problem is None


def _mode_share(values: np.ndarray) -> float:
    """Share of the most common value among ``values (n,)`` (rounded to 6 significant digits)."""
    if values.size == 0:
        return 1.0
    _, counts = np.unique(np.round(values, 6), return_counts=True)
    return float(counts.max() / values.size)


def assess_channel(
    label: str,
    signal: np.ndarray,
    unit: str = "uV",
    limits: tuple[float, float] | None = None,
    valid_range: tuple[float, float] | None = None,
) -> ChannelQuality:
    """Flat / saturated / out-of-range verdict for one channel.

    ``signal (n,)`` in ``unit``; ``limits`` the lowest and highest value the file can hold for it
    (physical units), when known; ``valid_range`` the physiological range of its modality group (SpO2:
    50-100 %), when it has one. NaN samples are ignored.
    """
    finite = np.asarray(signal, dtype=np.float64)
    finite = finite[np.isfinite(finite)]
    if finite.size == 0:
        return ChannelQuality(label, "flat", "no finite sample")
    q25, q75 = np.percentile(finite, [25, 75])
    spread = (q75 - q25) / 1.349
    floor = FLAT_SPREAD.get(unit, 0.0)
    if spread <= floor and finite.std() <= max(floor, 1e-12):
        return ChannelQuality(label, "flat", f"spread {spread:.3g} {unit} <= {floor:g}")
    share = _mode_share(finite[:: max(1, finite.size // 200_000)])
    if share > FLAT_SHARE:
        return ChannelQuality(label, "flat", f"{share:.0%} of samples repeat one value")
    if valid_range is not None:
        outside = float(np.mean((finite < valid_range[0]) | (finite > valid_range[1])))
        if outside > OUT_OF_RANGE_SHARE:
            return ChannelQuality(
                label, "out_of_range", f"{outside:.0%} of samples outside {valid_range[0]:g}-{valid_range[1]:g} {unit}"
            )
    if limits is not None:
        low, high = limits
        tolerance = 1e-6 * max(abs(high - low), 1e-12)
        at_limit = float(np.mean((finite <= low + tolerance) | (finite >= high - tolerance)))
        if at_limit > SATURATED_SHARE:
            return ChannelQuality(label, "saturated", f"{at_limit:.0%} of samples at the range [{low:g}, {high:g}]")
    return ChannelQuality(label, None, "ok")


def edf_storable_limits(
    physical: tuple[float, float], digital: tuple[float, float], bits: int = 16
) -> tuple[float, float]:
    """Physical values of the extremes an EDF (``bits`` = 16) or BDF (24) sample can hold.

    When a header's digital range exceeds the integer type (a known defect of some exports), the
    stored samples clip at the type's limits, which map to values inside the stated physical range.
    """
    (p_min, p_max), (d_min, d_max) = physical, digital
    type_low, type_high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    gain = (p_max - p_min) / (d_max - d_min) if d_max != d_min else 1.0
    low, high = max(d_min, type_low), min(d_max, type_high)
    return p_min + (low - d_min) * gain, p_min + (high - d_min) * gain
