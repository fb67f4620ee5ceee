"""Per-window event detection from frozen features (apnea / hypopnea, arousal) and the per-night
apnea-hypopnea index it implies.

A standardized logistic regression per subject fold scores every held-out window (windows whose target
is ``-1``, the arousals the challenge did not score, are neither trained on nor scored). AUROC and AUPRC
(average precision, the PhysioNet 2018 challenge's metric) are taken over every held-out window, with
their BCa interval over subjects. The AHI of a night is its windows predicted positive per hour of
scored sleep, calibrated per fold by a straight line fitted on the training nights (true AHI against
their raw index, each training night scored by a classifier fitted without its subject, as a test night
is), then compared with the true AHI: Spearman correlation and severity-class accuracy.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.stats import spearmanr
from threadpoolctl import threadpool_limits

from ...data.eeg.events import APNEA_HYPOPNEA, severity
from ...data.eeg.stages import EPOCH_SECONDS
from ..protocols.probe import fit_linear_classifier
from .data import EvalWindows, UnsupportedEvaluation, check_features, require, subject_folds, trainable
from .metrics import binary_metrics, subject_cell

EVENT_C = 1.0
"""C of the event classifiers (standardized logistic regression)."""


def _threshold(score: np.ndarray, prevalence: float) -> float:
    """The score between the ``k``-th and ``k + 1``-th highest training scores ``(m,)``, ``k`` the
    training windows scored positive, so the raw index counts as many windows as were scored positive
    (a probability of 0.5 marks none when events are rare)."""
    ranked = np.sort(score)[::-1]
    k = int(round(prevalence * ranked.size))
    if k <= 0 or k >= ranked.size:
        return float(ranked[0]) if k <= 0 else float(ranked[-1]) - 1.0
    return float(0.5 * (ranked[k - 1] + ranked[k]))


def _raw_index(windows: EvalWindows, positive: np.ndarray, nights: np.ndarray) -> np.ndarray:
    """Windows predicted positive during sleep (N1-REM) per hour of scored sleep of each night ``(k,)``."""
    sleep = windows.stages >= 1
    return np.array([(positive & sleep & (windows.nights == n)).sum() / windows.sleep_hours[n] for n in nights])


def calibrate(raw: np.ndarray, true: np.ndarray) -> tuple[float, float]:
    """Slope and intercept of the least-squares line ``true ~ slope * raw + intercept`` over training
    nights ``(k,)``; with fewer than 2 distinct raw values, slope 0 and the mean true index."""
    if np.unique(raw).size < 2:
        return 0.0, float(np.mean(true))
    slope, intercept = np.polyfit(raw, true, 1)
    return float(slope), float(intercept)


def _fold_scores(x: Any, target: np.ndarray, train: np.ndarray, seed: int = 0) -> tuple[np.ndarray, float]:
    """Scores ``(n,)`` of every window by the classifier fitted on the scored ``train`` windows (a feature
    row ``(n, d)``: logistic regression; a trainable row: its own fit), and the threshold matching the
    training prevalence."""
    fit = train & (target >= 0)
    if trainable(x):
        proba, classes = x.fit_predict(np.flatnonzero(fit), target[fit], np.arange(target.size), seed)
    else:
        model = fit_linear_classifier(x[fit], target[fit], C=EVENT_C, seed=seed)
        proba, classes = model.predict_proba(x), model.classes_
    score = proba[:, list(classes).index(1)]
    return score, _threshold(score[fit], float(target[fit].mean()))


def _held_out_raw(x: np.ndarray, windows: EvalWindows, target: np.ndarray, train: np.ndarray) -> dict[str, float]:
    """Raw index of every training night, each scored by a classifier fitted on the other training subjects
    (so the calibration line maps held-out raw indices, as the test nights' are); a subject whose removal
    leaves one class, or a fold with one training subject, is scored by the fold's own classifier."""
    raw: dict[str, float] = {}
    subjects = np.unique(windows.subjects[train])
    for subject in subjects:
        held = train & (windows.subjects == subject)
        rest = train & ~held & (target >= 0)
        fit_on = rest if subjects.size > 1 and np.unique(target[rest]).size == 2 else train
        score, threshold = _fold_scores(x, target, fit_on)
        nights = np.unique(windows.nights[held])
        raw.update(zip(nights.tolist(), _raw_index(windows, score > threshold, nights).tolist()))
    return raw


def _ahi_fold(
    x: np.ndarray, windows: EvalWindows, target: np.ndarray, fold: tuple[np.ndarray, float], test: np.ndarray
):
    """Calibrated AHI of the fold's test nights (``fold``: its scores ``(n,)`` and threshold): ``{night:
    (true, predicted)}`` and the line, fitted on the training nights' held-out raw indices."""
    raw = _held_out_raw(x, windows, target, ~test)
    slope, intercept = calibrate(np.array(list(raw.values())), np.array([windows.night_ahi[n] for n in raw]))
    test_nights = np.unique(windows.nights[test])
    predicted = np.maximum(slope * _raw_index(windows, fold[0] > fold[1], test_nights) + intercept, 0.0)
    return {str(n): (float(windows.night_ahi[n]), float(p)) for n, p in zip(test_nights, predicted)}, (slope, intercept)


def _ahi_summary(nights: dict[str, tuple[float, float]], resamples: int | None) -> dict[str, Any]:
    """Spearman correlation of true and predicted AHI over nights, and severity-class accuracy with its
    interval over nights."""
    true, predicted = np.array(list(nights.values())).T
    correct = [(n, float(severity(t) == severity(p))) for n, (t, p) in nights.items()]
    rho = spearmanr(true, predicted).statistic if len(nights) > 2 and np.ptp(predicted) > 0 else float("nan")
    return {
        "spearman": float(rho),
        "severity_accuracy": subject_cell(float(np.mean([c for _, c in correct])), correct, resamples),
        "nights": {n: {"true": t, "predicted": p} for n, (t, p) in nights.items()},
    }


def _row(
    x: Any, windows: EvalWindows, target: str, folds: int | None, with_ahi: bool, resamples: int | None
) -> dict[str, Any]:
    """One feature set's out-of-fold scores -> its cells (and AHI per night when ``with_ahi``; never for a
    trainable row, whose calibration would train it again per training subject)."""
    with_ahi = with_ahi and not trainable(x)
    y = windows.targets[target]
    score, nights, lines = np.full(len(windows), np.nan), {}, []
    for test_subjects in subject_folds(windows.subjects, folds):
        test = np.isin(windows.subjects, test_subjects)
        if np.unique(y[~test & (y >= 0)]).size < 2:
            raise UnsupportedEvaluation(
                f"{windows.dataset} cannot support the '{target}' evaluation with these folds: without test "
                f"subjects {test_subjects.tolist()} the training windows hold one class only; use fewer folds or more subjects"
            )
        fold_score, threshold = _fold_scores(x, y, ~test)
        score[test] = fold_score[test]
        if with_ahi:
            fold_nights, line = _ahi_fold(x, windows, y, (fold_score, threshold), test)
            nights.update(fold_nights)
            lines.append(line)
    scored = y >= 0
    pooled = binary_metrics(y[scored], score[scored])
    row: dict[str, Any] = {"prevalence": pooled["prevalence"], "windows": int(scored.sum())}
    for metric in ("auroc", "auprc"):
        per_subject = [
            (s, binary_metrics(y[scored & (windows.subjects == s)], score[scored & (windows.subjects == s)])[metric])
            for s in np.unique(windows.subjects)
        ]
        row[metric] = subject_cell(pooled[metric], per_subject, resamples)
    if with_ahi:
        row["ahi"] = {**_ahi_summary(nights, resamples), "calibration": lines}
    return row


def evaluate_events(
    rows: dict[str, Any],
    windows: EvalWindows,
    target: str = APNEA_HYPOPNEA,
    *,
    folds: int | None = None,
    ahi: bool | None = None,
    resamples: int | None = None,
) -> dict[str, Any]:
    """Event table of the feature sets ``rows`` (name -> ``(n, d)``; e.g. every modality, brain + heart +
    muscle, the airflow-amplitude baseline; a :class:`~.data.TrainableRow` is trained per fold, without
    AHI) for ``target`` (``apnea_hypopnea`` or ``arousal``).

    ``folds``: subject folds (``None``: leave one subject out). ``ahi``: also the per-night AHI (default:
    for ``apnea_hypopnea`` when the windows carry a true AHI per night). :class:`~.data.UnsupportedEvaluation`
    names the dataset and what it lacks (no scored events, one class only, no AHI when asked).
    Returns ``{"task", "dataset", "rows": {row: {"auroc", "auprc": cell, "prevalence", "windows"[, "ahi"]}}}``.
    """
    require(target, windows)
    if ahi is None:
        ahi = target == APNEA_HYPOPNEA and bool(windows.night_ahi)
    if ahi:
        require("ahi", windows)
    rows = check_features(rows, windows)
    with threadpool_limits(1):
        table = {name: _row(x, windows, target, folds, ahi, resamples) for name, x in rows.items()}
    return {"task": target, "dataset": windows.dataset, "rows": table, "epoch_seconds": EPOCH_SECONDS}
