"""Sleep staging from frozen features of each modality alone, of each leave-one-out subset and of all
together, few-shot (``s`` windows per class, the few-shot protocol's draws and inner-CV choice of C) and
with every training label; balanced accuracy, macro-F1, Cohen's kappa and macro AUROC (one-vs-rest,
SleepFM's metric), each with its BCa interval over test subjects, and the reference row (all modalities)
minus every other row per subject (``eval.protocols.stats``). The same table, on the fused embedding of
the modalities present (:func:`missing_modality_rows`), gives staging with each modality removed at
inference (:func:`evaluate_missing_modalities`)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from sklearn.metrics import cohen_kappa_score
from threadpoolctl import threadpool_limits

from ..protocols.probe import fit_linear_classifier
from ..protocols.staging import C_GRID, per_subject_balanced_accuracy, select_by_inner_cv, shot_draw, staging_metrics
from ..protocols.stats import paired_summary, unit_means
from .data import EvalWindows, check_features, require, subject_folds, trainable
from .metrics import macro_auroc, subject_cell

ALL = "all"
"""Row of every modality's features concatenated."""

FUSED = "fused"
"""Suffix of the missing-modality rows (the fused embedding of the modalities present)."""

STAGING_METRICS = ("balanced_accuracy", "macro_f1", "kappa", "kappa_4class", "macro_auroc")
"""Columns of the staging table (balanced accuracy per subject is also the paired unit)."""
FOUR_CLASS = np.array([0, 1, 1, 2, 3])
"""Stage code (W, N1, N2, N3, REM) -> the 4 classes of cardiorespiratory staging (wake, light, deep, REM),
the scale of the published ECG-only kappas."""


def four_class_kappa(y: np.ndarray, pred: np.ndarray) -> float:
    """Cohen's kappa of 5-stage labels and predictions ``(t,)`` merged to wake / light (N1 + N2) / deep / REM."""
    return float(cohen_kappa_score(FOUR_CLASS[y], FOUR_CLASS[pred]))


def modality_subsets(modalities: list[str]) -> dict[str, list[str]]:
    """Rows of the staging table: each modality alone, each leave-one-out subset (``all - m``) and all.
    One modality gives one row; two give each alone and all (a leave-one-out subset is one alone)."""
    rows = {m: [m] for m in modalities}
    if len(modalities) > 2:
        rows.update({f"{ALL} - {m}": [o for o in modalities if o != m] for m in modalities})
    if len(modalities) > 1:
        rows[ALL] = list(modalities)
    return rows


def subset_features(features: dict[str, np.ndarray], subsets: dict[str, list[str]]) -> dict[str, np.ndarray]:
    """Row name -> its modalities' features ``(n, d_m)`` concatenated ``(n, sum d_m)``; ``ValueError``
    naming a modality that has no features."""
    missing = sorted({m for mods in subsets.values() for m in mods} - set(features))
    if missing:
        raise ValueError(f"modality subsets: no features for {missing}; have {sorted(features)}")
    return {name: np.concatenate([features[m] for m in mods], axis=1) for name, mods in subsets.items()}


def fused(vectors: list[np.ndarray]) -> np.ndarray:
    """The fused embedding ``(n, d)`` of per-modality vectors ``[(n, d), ...]``: the mean of their
    L2-normalized rows, not renormalized (the rule of ``models.modal_embed.fuse``)."""
    stacked = np.stack([np.asarray(v, dtype=np.float64) for v in vectors], axis=1)  # (n, k, d)
    norms = np.maximum(np.linalg.norm(stacked, axis=-1, keepdims=True), 1e-12)
    return (stacked / norms).mean(axis=1)


def missing_modality_rows(features: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Rows of the missing-modalities table: the fused embedding ``(n, d)`` of every modality
    (``all (fused)``) and, for each modality ``m``, of the others (``all - m (fused)``): what inference
    gives a night without ``m``. ``ValueError`` for fewer than 2 modalities or unequal widths."""
    widths = {m: np.shape(x)[1] for m, x in features.items()}
    if len(features) < 2 or len(set(widths.values())) > 1:
        raise ValueError(f"missing modalities: need >= 2 modalities of one width to fuse; got {widths}")
    rows = {f"{ALL} ({FUSED})": fused(list(features.values()))}
    rows.update({f"{ALL} - {m} ({FUSED})": fused([x for o, x in features.items() if o != m]) for m in features})
    return rows


def _fit(row: Any, train: np.ndarray, y: np.ndarray, test: np.ndarray, C: float | None, seed: int):
    """Predictions ``(t,)``, probabilities ``(t, k)`` and classes ``(k,)`` of windows ``test (t,)`` from
    windows ``train (m,)`` labelled ``y (m,)``: a standardized logistic regression on the feature row
    ``(n, d)`` (C given, or chosen by the few-shot protocol's inner CV), or a trainable row's own fit."""
    if trainable(row):
        proba, classes = row.fit_predict(train, y, test, seed)
        return classes[np.argmax(proba, axis=1)], proba, classes
    x = row[train]
    value = C if C is not None else select_by_inner_cv("logreg", C_GRID, x, y, seed)[0]
    model = fit_linear_classifier(x, y, C=value, seed=seed)
    return model.predict(row[test]), model.predict_proba(row[test]), model.classes_


def _per_subject_f1(y: np.ndarray, pred: np.ndarray, subjects: np.ndarray) -> dict[str, float]:
    return {str(s): staging_metrics(y[subjects == s], pred[subjects == s])["macro_f1"] for s in np.unique(subjects)}


def _fit_record(y: np.ndarray, pred: np.ndarray, proba: np.ndarray, classes: np.ndarray, subjects: np.ndarray):
    """One fit's metrics over its test windows and per test subject."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # kappa of a subject with one stage and one prediction: NaN, left out
        kappa = {str(s): float(cohen_kappa_score(y[subjects == s], pred[subjects == s])) for s in np.unique(subjects)}
        kappa4 = {str(s): four_class_kappa(y[subjects == s], pred[subjects == s]) for s in np.unique(subjects)}
        overall = staging_metrics(y, pred)
        return {
            "balanced_accuracy": overall["balanced_accuracy"],
            "macro_f1": overall["macro_f1"],
            "kappa": float(cohen_kappa_score(y, pred)),
            "kappa_4class": four_class_kappa(y, pred),
            "macro_auroc": macro_auroc(y, proba, classes),
            "per_subject": {
                "balanced_accuracy": per_subject_balanced_accuracy(y, pred, subjects),
                "macro_f1": _per_subject_f1(y, pred, subjects),
                "kappa": kappa,
                "kappa_4class": kappa4,
                "macro_auroc": {
                    str(s): macro_auroc(y[subjects == s], proba[subjects == s], classes) for s in np.unique(subjects)
                },
            },
        }


def _setting_fits(
    rows: dict[str, Any], windows: EvalWindows, shots: int | None, seeds: int, folds: int | None, C: float | None
) -> dict[str, list[dict[str, Any]]]:
    """Every row's fits (fold x seed; all labels: one per fold) of one setting (``shots`` per class, or
    ``None``: every label); the same draws for every row."""
    fits: dict[str, list[dict[str, Any]]] = {name: [] for name in rows}
    scored = windows.stages >= 0
    for test_subjects in subject_folds(windows.subjects[scored], folds):
        test = np.flatnonzero(scored & np.isin(windows.subjects, test_subjects))
        train = np.flatnonzero(scored & ~np.isin(windows.subjects, test_subjects))
        y_train, y_test = windows.stages[train], windows.stages[test]
        for seed in range(seeds if shots is not None else 1):
            index = shot_draw(y_train, shots, seed)[0] if shots is not None else np.arange(y_train.size)
            for name, x in rows.items():
                pred, proba, classes = _fit(x, train[index], y_train[index], test, C, seed)
                fits[name].append(_fit_record(y_test, pred, proba, classes, windows.subjects[test]))
    return fits


def _summary(fits: list[dict[str, Any]], resamples: int | None) -> dict[str, Any]:
    """A row's cells: per metric the mean over fits and the BCa interval over subjects."""
    return {
        metric: subject_cell(
            float(np.nanmean([f[metric] for f in fits])),
            [(s, v) for f in fits for s, v in f["per_subject"][metric].items()],
            resamples,
        )
        for metric in STAGING_METRICS
    }


def _paired(fits: dict[str, list[dict[str, Any]]], reference: str) -> dict[str, dict[str, Any]]:
    """``reference`` minus every other row, per subject balanced accuracy (fits sharing a subject averaged)."""
    if reference not in fits:
        return {}
    out = {}
    for name, theirs in fits.items():
        if name != reference:
            pairs = [
                (s, v - b["per_subject"]["balanced_accuracy"][s])
                for a, b in zip(fits[reference], theirs)
                for s, v in a["per_subject"]["balanced_accuracy"].items()
            ]
            out[name] = paired_summary(unit_means(pairs))
    return out


def evaluate_staging(
    rows: dict[str, Any],
    windows: EvalWindows,
    *,
    shots: int = 50,
    seeds: int = 3,
    folds: int | None = None,
    C: float | None = None,
    reference: str = ALL,
    resamples: int | None = None,
) -> dict[str, Any]:
    """Staging table of the feature sets ``rows`` (name -> ``(n, d)``; :func:`subset_features` makes the
    modality rows, any named set such as a handcrafted baseline or random-init embeddings may join; a
    :class:`~.data.TrainableRow`, such as an end-to-end model, is trained per fold on the same windows).

    Subject folds (``folds``; ``None``: leave one subject out) hold out test subjects; per fold, ``shots``
    windows per class (``seeds`` draws, :func:`~..protocols.staging.shot_draw`) or every training window
    fit a standardized logistic regression (``C=None``: chosen by the few-shot protocol's inner CV).
    Returns ``{"task", "dataset", "settings": {setting: {"rows": {row: {metric: cell}}, "paired": {row:
    paired_summary}}}}`` with settings ``few-shot s=<shots>`` and ``all labels``; a cell is
    :func:`~.metrics.subject_cell` (value = mean over fits, interval over subjects)."""
    require("staging", windows)
    rows = check_features(rows, windows)
    settings = {}
    with threadpool_limits(1):
        for label, s in ((f"few-shot s={shots}", shots), ("all labels", None)):
            fits = _setting_fits(rows, windows, s, seeds, folds, C)
            settings[label] = {
                "rows": {name: _summary(f, resamples) for name, f in fits.items()},
                "paired": _paired(fits, reference),
                "fits": len(next(iter(fits.values()))),
            }
    return {"task": "staging", "dataset": windows.dataset, "reference": reference, "settings": settings}


def evaluate_missing_modalities(
    features: dict[str, np.ndarray], windows: EvalWindows, **options: Any
) -> dict[str, Any]:
    """Staging with each modality removed at inference: :func:`missing_modality_rows` of per-modality
    embeddings ``{modality: (n, d)}`` through :func:`evaluate_staging` (``options``: its keywords), with
    ``all (fused)`` as the reference of the per-subject paired differences. The result's task is
    ``missing_modalities``."""
    rows = missing_modality_rows(check_features(features, windows))
    result = evaluate_staging(rows, windows, reference=f"{ALL} ({FUSED})", **options)
    return {**result, "task": "missing_modalities"}
