"""How often the 95 % interval covers the true mean at the sizes of the sleep tables (n = 4 in-domain subjects,
n = 10 cross-dataset subjects): a documented figure (docs/results.md), recomputed here with fixed seeds.

The test does not assert a coverage level (that would be an assertion on randomness); it asserts that the
figure printed in the docs is the one this simulation gives, so the page cannot go stale.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from multiview_app.eval.protocols.stats import bootstrap_ci

REPETITIONS = 400
RESAMPLES = 2000
DOCS = Path(__file__).resolve().parents[1] / "docs" / "results.md"


def _percentile_ci(x: np.ndarray, rng: np.random.Generator) -> tuple[float, float]:
    means = x[rng.integers(0, x.size, (RESAMPLES, x.size))].mean(axis=1)
    low, high = np.quantile(means, [0.025, 0.975])
    return float(low), float(high)


def coverage(n: int, seed: int = 0) -> dict[str, float]:
    """Share of ``REPETITIONS`` samples of n per-subject differences (skewed: a gamma(2) shifted to mean 0.01,
    scale 0.02, like per-subject balanced-accuracy gaps) whose interval holds the true mean 0.01."""
    rng = np.random.default_rng([seed, n])
    hits = {"BCa": 0, "percentile": 0}
    for rep in range(REPETITIONS):
        x = 0.01 + 0.02 * (rng.gamma(2.0, 1.0, n) - 2.0) / np.sqrt(2.0)
        for name, (low, high) in (
            ("BCa", bootstrap_ci(x, resamples=RESAMPLES, seed=rep)),
            ("percentile", _percentile_ci(x, np.random.default_rng(rep))),
        ):
            hits[name] += low <= 0.01 <= high
    return {name: count / REPETITIONS for name, count in hits.items()}


def test_documented_coverage_figure_is_what_the_simulation_gives() -> None:
    figures = {n: coverage(n) for n in (4, 10)}
    for n, cover in figures.items():
        print(f"n = {n}: BCa {cover['BCa']:.3f}, percentile {cover['percentile']:.3f}")
    text = DOCS.read_text()
    for n, cover in figures.items():
        line = f"| {n} | {cover['BCa']:.3f} | {cover['percentile']:.3f} |"
        assert line in text, f"docs/results.md: the coverage table's row for n = {n} should read {line}"
    assert re.search(r"coverage.*400 simulated", text, re.S)
