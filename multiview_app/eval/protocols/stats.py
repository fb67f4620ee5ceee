"""Paired differences by their independent unit, with a bootstrap confidence interval.

The unit of a claim is what was sampled independently: a test subject (or DREAMS excerpt) for sleep
staging, a held-out domain x pretraining seed for domain generalization. Several fits that share a unit
(subject folds x few-shot draws, pretraining runs) are not independent: :func:`unit_means` first averages
them per unit, and :func:`bootstrap_ci` / :func:`paired_summary` then resample the units, never the fits.
This is the one implementation every table uses (staging, DREAMS transfer, domain generalization).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any

import numpy as np

RESAMPLES = 10_000
"""Bootstrap resamples of the units (percentile interval)."""
LEVEL = 0.95
"""Coverage of the interval."""
SEED = 0
"""Seed of the bootstrap draws: the same values give the same interval."""


def unit_means(pairs: Iterable[tuple[Hashable, float]]) -> dict[Hashable, float]:
    """``[(unit, value), ...]`` (one per fit; a unit may repeat) -> ``{unit: mean of its values}`` in the
    order units first appear."""
    sums: dict[Hashable, list[float]] = {}
    for unit, value in pairs:
        sums.setdefault(unit, []).append(float(value))
    return {unit: float(np.mean(values)) for unit, values in sums.items()}


def bootstrap_ci(
    values: Iterable[float], *, resamples: int = RESAMPLES, level: float = LEVEL, seed: int = SEED
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values (n,)`` (one value per independent unit):
    ``resamples`` draws of n units with replacement (``numpy.random.default_rng(seed)``), the
    ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of their means. n = 1 gives ``(v, v)``;
    n = 0 a ValueError."""
    x = np.asarray(list(values), dtype=np.float64)
    if x.size == 0:
        raise ValueError("bootstrap_ci: no unit to resample")
    if not 0.0 < level < 1.0 or resamples < 1:
        raise ValueError(f"bootstrap_ci: need 0 < level < 1 and resamples >= 1, got {level}, {resamples}")
    draws = np.random.default_rng(seed).integers(0, x.size, size=(resamples, x.size))
    means = x[draws].mean(axis=1)
    low, high = np.quantile(means, [(1.0 - level) / 2.0, (1.0 + level) / 2.0])
    return float(low), float(high)


def paired_summary(per_unit: dict[Hashable, float], **bootstrap: Any) -> dict[str, Any]:
    """One difference per unit ``{unit: a - b}`` -> ``{mean, ci_low, ci_high, ahead, behind, n, units}``:
    the mean over units, its :func:`bootstrap_ci`, how many units are above / below zero, n = the number
    of units (never of fits) and the per-unit values (JSON-ready: units as strings)."""
    values = list(per_unit.values())
    low, high = bootstrap_ci(values, **bootstrap)
    return {
        "mean": float(np.mean(values)),
        "ci_low": low,
        "ci_high": high,
        "ahead": int(sum(v > 0 for v in values)),
        "behind": int(sum(v < 0 for v in values)),
        "n": len(values),
        "units": {str(u): float(v) for u, v in per_unit.items()},
    }


def ci_text(cell: dict[str, Any], unit: str = "subjects") -> str:
    """``+0.012 [-0.004, +0.030] 5/8 subjects ahead``: mean, 95 % interval, units ahead of n."""
    return (
        f"{cell['mean']:+.3f} [{cell['ci_low']:+.3f}, {cell['ci_high']:+.3f}] {cell['ahead']}/{cell['n']} {unit} ahead"
    )


__all__ = ["LEVEL", "RESAMPLES", "SEED", "bootstrap_ci", "ci_text", "paired_summary", "unit_means"]
