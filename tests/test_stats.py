"""The one statistics helper (eval/protocols/stats.py): per-unit means, the BCa interval, the exact sign-flip
test against a brute-force enumeration, n = units."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from multiview_app.eval.protocols.stats import (
    bootstrap_ci,
    ci_text,
    paired_summary,
    sign_flip_p,
    smallest_sign_flip_p,
    unit_means,
)


def test_bca_interval_of_a_symmetric_sample_is_close_to_the_exact_bootstrap_percentiles() -> None:
    values = [0.10, -0.02, 0.05, 0.20, 0.07, 0.12]
    # every one of the 6^6 equally likely resamples, enumerated: the exact bootstrap distribution of the mean
    means = np.sort([np.mean(draw) for draw in itertools.product(values, repeat=len(values))])
    exact = np.quantile(means, [0.025, 0.975])
    low, high = bootstrap_ci(values, resamples=50_000, seed=1)
    assert low == pytest.approx(exact[0], abs=0.02) and high == pytest.approx(exact[1], abs=0.02)
    assert low < np.mean(values) < high
    assert bootstrap_ci(values) == bootstrap_ci(values)  # seeded: the same interval every time
    assert bootstrap_ci([0.3]) == (0.3, 0.3)
    assert bootstrap_ci([0.3, 0.3, 0.3]) == (0.3, 0.3)
    with pytest.raises(ValueError, match="no unit"):
        bootstrap_ci([])


def _brute_force_sign_flip_p(values: list[float]) -> float:
    observed = abs(np.mean(values))
    flips = [abs(np.mean(np.array(signs) * values)) for signs in itertools.product([1, -1], repeat=len(values))]
    return float(np.mean([f >= observed - 1e-12 for f in flips]))


@pytest.mark.parametrize(
    "values", [[0.1, 0.02, 0.05, 0.2], [0.1, -0.02, 0.05, 0.2], [0.3, -0.1, 0.2, 0.05, 0.4, -0.05]]
)
def test_sign_flip_p_is_the_exact_enumeration(values: list[float]) -> None:
    assert sign_flip_p(values) == pytest.approx(_brute_force_sign_flip_p(values))


def test_smallest_sign_flip_p_at_four_units_is_one_eighth() -> None:
    assert smallest_sign_flip_p(4) == 0.125
    assert sign_flip_p([0.1, 0.2, 0.3, 0.4]) == pytest.approx(0.125)  # all four ahead: still p = 0.125


def test_units_are_averaged_before_the_bootstrap_and_n_counts_units_not_fits() -> None:
    fits = [("A", 0.1), ("A", 0.3), ("A", 0.2), ("B", -0.1), ("C", 0.05), ("C", 0.15)]  # 6 fits, 3 subjects
    per_unit = unit_means(fits)
    assert per_unit == pytest.approx({"A": 0.2, "B": -0.1, "C": 0.1})
    summary = paired_summary(per_unit)
    assert summary["n"] == 3 and summary["ahead"] == 2 and summary["behind"] == 1
    assert summary["mean"] == pytest.approx(np.mean([0.2, -0.1, 0.1]))
    assert (summary["ci_low"], summary["ci_high"]) == pytest.approx(bootstrap_ci([0.2, -0.1, 0.1]))
    assert summary["ci_low"] <= summary["mean"] <= summary["ci_high"]
    assert summary["p"] == pytest.approx(_brute_force_sign_flip_p([0.2, -0.1, 0.1]))
    assert ci_text(summary).endswith("2/3 subjects ahead")
