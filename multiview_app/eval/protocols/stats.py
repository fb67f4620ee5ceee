"""Paired differences by their independent unit: a BCa bootstrap interval and an exact sign-flip test.

The unit of a claim is what was sampled independently: a test subject (or DREAMS excerpt) for sleep
staging, a held-out domain x pretraining seed for domain generalization. Several fits that share a unit
(subject folds x few-shot draws, pretraining runs) are not independent: :func:`unit_means` first averages
them per unit, and :func:`bootstrap_ci` / :func:`sign_flip_p` / :func:`paired_summary` then resample or
flip the units, never the fits.
This is the one implementation every table uses (staging, DREAMS transfer, domain generalization).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any

import numpy as np

RESAMPLES = 10_000
"""Bootstrap resamples of the units (BCa interval)."""
LEVEL = 0.95
"""Coverage of the interval."""
SEED = 0
"""Seed of the bootstrap and of the sign-flip draws: the same values give the same interval and p."""
EXACT_FLIPS_UP_TO = 16
"""Up to this many units the sign-flip test enumerates all 2^n sign patterns (exact p); above, it draws
``RESAMPLES`` of them."""


def unit_means(pairs: Iterable[tuple[Hashable, float]]) -> dict[Hashable, float]:
    """``[(unit, value), ...]`` (one per fit; a unit may repeat) -> ``{unit: mean of its values}`` in the
    order units first appear."""
    sums: dict[Hashable, list[float]] = {}
    for unit, value in pairs:
        sums.setdefault(unit, []).append(float(value))
    return {unit: float(np.mean(values)) for unit, values in sums.items()}


def _units(values: Iterable[float], caller: str) -> np.ndarray:
    x = np.asarray(list(values), dtype=np.float64)
    if x.size == 0:
        raise ValueError(f"{caller}: no unit to resample")
    return x


def bootstrap_ci(
    values: Iterable[float], *, resamples: int = RESAMPLES, level: float = LEVEL, seed: int = SEED
) -> tuple[float, float]:
    """Bias-corrected and accelerated (BCa) bootstrap interval of the mean of ``values (n,)`` (one value
    per independent unit; ``scipy.stats.bootstrap``, ``resamples`` draws, ``numpy.random.default_rng(seed)``).
    BCa corrects the percentile interval's bias and skew, which under-covers at the small n of sleep tables
    (4-10 subjects). n = 1, or n equal values, gives ``(v, v)``; n = 0 a ValueError."""
    from scipy.stats import bootstrap

    # units have no order, and float noise below 1e-10 is not a difference: the same set, the same interval
    x = np.sort(np.round(_units(values, "bootstrap_ci"), 10))
    if not 0.0 < level < 1.0 or resamples < 1:
        raise ValueError(f"bootstrap_ci: need 0 < level < 1 and resamples >= 1, got {level}, {resamples}")
    if x.size == 1 or np.ptp(x) == 0.0:
        return float(x[0]), float(x[0])
    result = bootstrap(
        (x,),
        np.mean,
        n_resamples=resamples,
        confidence_level=level,
        method="BCa",
        random_state=np.random.default_rng(seed),
        vectorized=True,
    )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def sign_flip_p(values: Iterable[float], *, resamples: int = RESAMPLES, seed: int = SEED) -> float:
    """Two-sided paired sign-flip test of mean(``values``) = 0 (``scipy.stats.permutation_test``): exact over
    all ``2^n`` sign patterns up to :data:`EXACT_FLIPS_UP_TO` units. Its smallest possible p is
    ``2 / 2^n`` (0.125 at n = 4), so a small table cannot reach p < 0.05 whatever the effect."""
    from scipy.stats import permutation_test

    x = _units(values, "sign_flip_p")
    if x.size == 1 or np.all(x == 0.0):
        return 1.0  # one unit: both sign patterns are as extreme as the observed mean
    result = permutation_test(
        (x,),
        lambda sample, axis=-1: np.mean(sample, axis=axis),
        permutation_type="samples",
        n_resamples=np.inf if x.size <= EXACT_FLIPS_UP_TO else resamples,
        alternative="two-sided",
        vectorized=True,
        random_state=np.random.default_rng(seed),
    )
    return float(result.pvalue)


def seeds_subjects_ci(
    scores: np.ndarray, *, resamples: int = RESAMPLES, level: float = LEVEL, seed: int = SEED
) -> tuple[float, float]:
    """Two-stage bootstrap interval of the mean of ``scores (S, N)``: S pretraining seeds x N test subjects,
    each cell one seed's score on one subject (its fits averaged first). Every resample draws S seeds with
    replacement, then N subjects with replacement, and takes the mean of the crossed cells, so the interval
    covers both the pretraining run and the test subjects; percentile interval (BCa has no two-stage form).
    With S = 1 it is the subject bootstrap alone; equal cells give ``(v, v)``."""
    x = np.asarray(scores, dtype=np.float64)
    if x.ndim != 2 or 0 in x.shape or not np.isfinite(x).all():
        raise ValueError(f"seeds_subjects_ci: expected finite scores (seeds, subjects), got shape {x.shape}")
    if not 0.0 < level < 1.0 or resamples < 1:
        raise ValueError(f"seeds_subjects_ci: need 0 < level < 1 and resamples >= 1, got {level}, {resamples}")
    if np.ptp(x) == 0.0:
        return float(x[0, 0]), float(x[0, 0])
    rng = np.random.default_rng(seed)
    n_seeds, n_subjects = x.shape
    seed_draws = rng.integers(0, n_seeds, size=(resamples, n_seeds))
    subject_draws = rng.integers(0, n_subjects, size=(resamples, n_subjects))
    # mean over the crossed cells x[s_i, u_j] = mean_i mean_j: gather rows, then columns, per resample
    rows = x[seed_draws]  # (B, S, N)
    means = np.take_along_axis(rows, subject_draws[:, None, :].repeat(n_seeds, axis=1), axis=2).mean(axis=(1, 2))
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return float(low), float(high)


def smallest_sign_flip_p(n: int) -> float:
    """The smallest two-sided sign-flip p with ``n`` units: ``2 / 2^n`` (all units on one side)."""
    return min(1.0, 2.0 / 2.0**n)


def paired_summary(per_unit: dict[Hashable, float], **bootstrap: Any) -> dict[str, Any]:
    """One difference per unit ``{unit: a - b}`` -> ``{mean, ci_low, ci_high, p, ahead, behind, n, units}``:
    the mean over units, its BCa :func:`bootstrap_ci`, the exact sign-flip p (:func:`sign_flip_p`), how
    many units are above / below zero, n = the number of units (never of fits) and the per-unit values
    (JSON-ready: units as strings)."""
    values = list(per_unit.values())
    low, high = bootstrap_ci(values, **bootstrap)
    return {
        "mean": float(np.mean(values)),
        "ci_low": low,
        "ci_high": high,
        "p": sign_flip_p(values, seed=bootstrap.get("seed", SEED)),
        "ahead": int(sum(v > 0 for v in values)),
        "behind": int(sum(v < 0 for v in values)),
        "n": len(values),
        "units": {str(u): float(v) for u, v in per_unit.items()},
    }


def ci_text(cell: dict[str, Any], unit: str = "subjects") -> str:
    """``+0.012 [-0.004, +0.030] p = 0.25, 5/8 subjects ahead``: mean, 95 % BCa interval, sign-flip p (when
    the cell has one), units ahead of n."""
    p = f" p = {cell['p']:.3g}," if "p" in cell else ""
    return (
        f"{cell['mean']:+.3f} [{cell['ci_low']:+.3f}, {cell['ci_high']:+.3f}]{p} "
        f"{cell['ahead']}/{cell['n']} {unit} ahead"
    )


__all__ = [
    "LEVEL",
    "RESAMPLES",
    "SEED",
    "bootstrap_ci",
    "ci_text",
    "paired_summary",
    "seeds_subjects_ci",
    "sign_flip_p",
    "smallest_sign_flip_p",
    "unit_means",
]
