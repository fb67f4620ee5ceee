"""The one bootstrap helper (eval/stats.py): per-unit means, the percentile CI against a brute-force
enumeration, n = units."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from multiview_app.eval.protocols.stats import bootstrap_ci, ci_text, paired_summary, unit_means


def test_bootstrap_ci_matches_the_exact_bootstrap_distribution_of_a_tiny_sample() -> None:
    values = [0.10, -0.02, 0.05, 0.20]
    # every one of the 4^4 equally likely resamples, enumerated: the exact bootstrap distribution of the mean
    means = np.sort([np.mean(draw) for draw in itertools.product(values, repeat=len(values))])
    exact = np.quantile(means, [0.025, 0.975])
    low, high = bootstrap_ci(values, resamples=200_000, seed=1)
    assert low == pytest.approx(exact[0], abs=0.006) and high == pytest.approx(exact[1], abs=0.006)
    assert bootstrap_ci(values) == bootstrap_ci(values)  # seeded: the same interval every time
    assert bootstrap_ci([0.3]) == (0.3, 0.3)
    with pytest.raises(ValueError, match="no unit"):
        bootstrap_ci([])


def test_units_are_averaged_before_the_bootstrap_and_n_counts_units_not_fits() -> None:
    fits = [("A", 0.1), ("A", 0.3), ("A", 0.2), ("B", -0.1), ("C", 0.05), ("C", 0.15)]  # 6 fits, 3 subjects
    per_unit = unit_means(fits)
    assert per_unit == pytest.approx({"A": 0.2, "B": -0.1, "C": 0.1})
    summary = paired_summary(per_unit)
    assert summary["n"] == 3 and summary["ahead"] == 2 and summary["behind"] == 1
    assert summary["mean"] == pytest.approx(np.mean([0.2, -0.1, 0.1]))
    assert (summary["ci_low"], summary["ci_high"]) == bootstrap_ci([0.2, -0.1, 0.1])
    assert summary["ci_low"] <= summary["mean"] <= summary["ci_high"]
    assert ci_text(summary).endswith("2/3 subjects ahead")
