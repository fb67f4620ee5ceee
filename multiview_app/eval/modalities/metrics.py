"""Scores shared by the modality evaluators: macro AUROC one-vs-rest, the binary event metrics, and a
metric's cell for the tables (the value over every test window, and its BCa interval over subjects)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any

import numpy as np
from sklearn.metrics import average_precision_score, roc_auc_score

from ..protocols.stats import bootstrap_ci, unit_means


def macro_auroc(y: np.ndarray, proba: np.ndarray, classes: np.ndarray) -> float:
    """Mean one-vs-rest AUROC over the classes that ``y (n,)`` holds with both positives and negatives;
    ``proba (n, k)`` scores the classifier's ``classes (k,)``. A class absent from ``classes`` scores 0
    for every window (AUROC 0.5). NaN when no class is scorable (one class in ``y``)."""
    present = np.unique(y)
    if present.size < 2:
        return float("nan")
    column = {int(c): i for i, c in enumerate(classes)}
    scores = []
    for cls in present:
        score = proba[:, column[int(cls)]] if int(cls) in column else np.zeros(len(y))
        scores.append(roc_auc_score(y == cls, score))
    return float(np.mean(scores))


def binary_metrics(y: np.ndarray, score: np.ndarray) -> dict[str, float]:
    """``{"auroc", "auprc", "prevalence"}`` of scores ``(n,)`` for 0 / 1 labels ``y (n,)`` (AUPRC: average
    precision, the PhysioNet 2018 challenge's area under precision-recall); NaN AUROC / AUPRC for one class."""
    y = np.asarray(y).astype(bool)
    if y.all() or not y.any():
        return {"auroc": float("nan"), "auprc": float("nan"), "prevalence": float(y.mean()) if y.size else 0.0}
    return {
        "auroc": float(roc_auc_score(y, score)),
        "auprc": float(average_precision_score(y, score)),
        "prevalence": float(y.mean()),
    }


def subject_cell(
    value: float, per_unit: Iterable[tuple[Hashable, float]], resamples: int | None = None
) -> dict[str, Any]:
    """A table cell: ``value`` (over every test window) and ``{subject_mean, ci_low, ci_high, n}``: the mean
    over units and its BCa interval (``eval.protocols.stats.bootstrap_ci``), fits sharing a unit averaged
    first; NaN unit values (a subject without both classes) are left out, and n counts the units kept."""
    units = {u: v for u, v in unit_means(per_unit).items() if np.isfinite(v)}
    cell: dict[str, Any] = {"value": float(value), "n": len(units), "units": {str(u): v for u, v in units.items()}}
    if units:
        kwargs = {"resamples": resamples} if resamples else {}
        cell["subject_mean"] = float(np.mean(list(units.values())))
        cell["ci_low"], cell["ci_high"] = bootstrap_ci(list(units.values()), **kwargs)
    else:
        cell["subject_mean"] = cell["ci_low"] = cell["ci_high"] = float("nan")
    return cell


def per_unit(
    metric: Callable[[np.ndarray, np.ndarray], float], y: np.ndarray, score: np.ndarray, units: np.ndarray
) -> list[tuple[str, float]]:
    """``[(unit, metric(y[unit], score[unit])), ...]`` for every distinct unit of ``units (n,)``."""
    return [(str(u), float(metric(y[units == u], score[units == u]))) for u in np.unique(units)]
