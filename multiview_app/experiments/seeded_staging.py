"""Sleep-staging tables over several pretraining seeds: the interval covers the seeds and the test units.

One pretraining run moves the trained row by a few hundredths, so a headline row is the mean over S
pretraining seeds. Per row and s, each seed's fits (folds x few-shot draws) are averaged per test unit
(subject, or DREAMS excerpt) into a ``(S, N)`` matrix; its mean is the cell, its two-stage bootstrap
(:func:`~multiview_app.eval.protocols.stats.seeds_subjects_ci`: seeds, then units) the interval, and the
min-max of the per-seed means is what one pretraining run can give. Paired differences (the trained row
minus a baseline) are taken per seed and unit, with the same interval and the exact sign-flip p over the
units' means.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..eval.protocols.stats import seeds_subjects_ci, sign_flip_p, smallest_sign_flip_p, unit_means

ROW_LABELS = {
    "trained": "M3G-pretrained encoder",
    "random_init": "random-init encoder",
    "bandpower": "relative band power (5 bands)",
    "handcrafted": "handcrafted (50 features / channel)",
    "supervised_ceiling": "supervised ceiling (same encoder, stage labels)",
    "yasa": "YASA, pretrained on NSRR nights (zero-shot)",
}
"""The rows a headline table shows, in this order, with their labels (rows a result lacks are left out)."""
BASELINES = ("bandpower", "handcrafted", "supervised_ceiling", "yasa")
"""The rows the trained encoder is compared with per unit."""


def unit_matrix(results: Sequence[dict[str, Any]], row: str, shot: str) -> tuple[np.ndarray, list[str]]:
    """``(S, N)`` balanced accuracy of ``row`` at ``shot`` per pretraining seed (one result each) and test
    unit (its fits averaged first), with the units' names; every result must hold the same units."""
    per_seed = [
        unit_means(
            (u, score) for fit in result["results"][row][shot]["runs"] for u, score in fit["per_subject"].items()
        )
        for result in results
    ]
    units = sorted(per_seed[0])
    if any(sorted(means) != units for means in per_seed):
        raise ValueError(f"{row} s={shot}: the pretraining runs were staged on different units")
    return np.array([[means[u] for u in units] for means in per_seed]), units


def row_cell(scores: np.ndarray) -> dict[str, float]:
    """Summary of one ``(S, N)`` matrix: mean, seeds x units interval, min / max of the per-seed means."""
    low, high = seeds_subjects_ci(scores)
    per_seed = scores.mean(axis=1)
    return {
        "mean": float(scores.mean()),
        "ci_low": low,
        "ci_high": high,
        "seed_min": float(per_seed.min()),
        "seed_max": float(per_seed.max()),
    }


def paired_cell(trained: np.ndarray, other: np.ndarray) -> dict[str, Any]:
    """Trained minus ``other`` per seed and unit: mean, seeds x units interval, sign-flip p over the units'
    means (n units: the smallest possible p is 2 / 2^n), units ahead."""
    difference = trained - other
    low, high = seeds_subjects_ci(difference)
    per_unit = difference.mean(axis=0)
    return {
        "mean": float(difference.mean()),
        "ci_low": low,
        "ci_high": high,
        "p": sign_flip_p(per_unit),
        "ahead": int((per_unit > 0).sum()),
        "n": int(per_unit.size),
    }


def summarize(
    results: Sequence[dict[str, Any]],
    seeds: Sequence[int],
    rows: Sequence[str] = tuple(ROW_LABELS),
    paired: Sequence[str] = BASELINES,
) -> dict[str, Any]:
    """Per-seed staging results of one protocol -> ``{"seeds", "shots", "units", "rows", "paired"}``: every
    row of ``rows`` (in :data:`ROW_LABELS` order) present in all results, per s, as :func:`row_cell`; the trained
    row minus each row of ``paired`` present as :func:`paired_cell`."""
    if len(results) != len(seeds) or not results:
        raise ValueError(f"summarize: {len(results)} results for seeds {list(seeds)}")
    shots = [str(s) for s in results[0]["shots"]]
    present = [row for row in ROW_LABELS if all(row in r["results"] for r in results)]
    names = [row for row in present if row in rows or row in paired or row == "trained"]
    cells: dict[str, dict[str, Any]] = {row: {} for row in names if row in rows or row == "trained"}
    differences: dict[str, dict[str, Any]] = {row: {} for row in names if row in paired and row != "trained"}
    units: list[str] = []
    for shot in shots:
        matrices = {}
        for row in names:
            matrices[row], units = unit_matrix(results, row, shot)
            if row in cells:
                cells[row][shot] = row_cell(matrices[row])
        for row in differences:
            differences[row][shot] = paired_cell(matrices["trained"], matrices[row])
    return {
        "seeds": list(seeds),
        "shots": shots,
        "units": units,
        "capped_shots": sorted(set().union(*(r.get("capped_shots", []) for r in results))),
        "rows": cells,
        "paired": differences,
    }


def _row_text(cell: dict[str, float]) -> str:
    return f"{cell['mean']:.3f} [{cell['ci_low']:.3f}, {cell['ci_high']:.3f}]"


def _paired_text(cell: dict[str, Any]) -> str:
    return f"{cell['mean']:+.3f} [{cell['ci_low']:+.3f}, {cell['ci_high']:+.3f}] p {cell['p']:.2g}"


def markdown_table(summary: dict[str, Any], title: str, unit: str = "test subject", footer: str = "") -> str:
    """The table: one line per row (mean [95 % CI over seeds x units]), the min-max of the trained row's
    per-seed means, and the paired rows; s columns capped by the windows that exist carry ``*``; ``footer``
    ends the legend line (e.g. the command)."""
    shots, capped = summary["shots"], set(summary["capped_shots"])
    seeds = ", ".join(map(str, summary["seeds"]))
    n = len(summary["units"])
    head = f"| {title} | " + " | ".join(f"s = {s}{'*' if s in capped else ''}" for s in shots) + " |"
    lines = [head, "|---|" + "---|" * len(shots)]
    for row, cells in summary["rows"].items():
        lines.append(f"| {ROW_LABELS[row]} | " + " | ".join(_row_text(cells[s]) for s in shots) + " |")
        if row == "trained":
            spread = " | ".join(f"{cells[s]['seed_min']:.3f} – {cells[s]['seed_max']:.3f}" for s in shots)
            lines.append(f"| what one pretraining run gives: min – max over seeds {seeds} | {spread} |")
    for row, cells in summary["paired"].items():
        label = f"pretrained − {ROW_LABELS[row].split(' (')[0]} per {unit}, sign-flip p"
        lines.append(f"| {label} | " + " | ".join(_paired_text(cells[s]) for s in shots) + " |")
    legend = (
        f"Balanced accuracy, mean over pretraining seeds {seeds} x folds x few-shot draws [95 % CI over seeds x "
        f"{unit}s, two-stage bootstrap]; n = {n} {unit}s, smallest possible sign-flip p "
        f"{smallest_sign_flip_p(n):.2g}. {footer}"
    )
    return "\n".join([*lines, "", legend.strip()])


__all__ = ["BASELINES", "ROW_LABELS", "markdown_table", "paired_cell", "row_cell", "summarize", "unit_matrix"]
