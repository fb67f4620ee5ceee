"""Realism of synthetic EEG, both ways: a classifier fitted on one source's epochs (e.g. real DREAMS)
stages another's (synthetic), and the reverse; and the same classifier's ceiling on
real data alone: fitted on all recordings but one, it stages the held-out one (leave one group out)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..data.eeg.stages import STAGES
from .bandpower import bandpower_features
from .protocols.probe import fit_linear_classifier
from .protocols.staging import balanced_sample, staging_metrics


def _features(
    epochs: np.ndarray, labels: np.ndarray, sfreq: float, classes: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Band-power features ``(e', 5)`` and labels ``(e',)`` of the epochs ``(e, T)`` whose label is in
    ``classes``, and the boolean mask ``(e,)`` that picked them."""
    keep = np.isin(labels, classes)
    return bandpower_features(epochs[keep][:, None, :].astype(np.float32), sfreq), labels[keep], keep


def _fit_balanced(x: np.ndarray, y: np.ndarray, classes: tuple[int, ...], seed: int) -> tuple[Any, dict[str, int]]:
    """The realism classifier: standardized logistic regression (C = 1, no tuning) on a class-balanced
    draw of ``x (e, f)`` / ``y (e,)`` (as many per class as the rarest of ``classes`` has, draw
    ``default_rng(seed)``). Returns the fitted model and the epochs drawn per class name."""
    rarest = int(min((y == c).sum() for c in classes))
    if rarest == 0:
        raise ValueError(f"realism classifier: a class of {[STAGES[c] for c in classes]} has no training epoch")
    index, drawn = balanced_sample(y, rarest, np.random.default_rng(seed))
    return fit_linear_classifier(x[index], y[index], seed=seed), drawn


def cross_staging(
    train: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    sfreq: float,
    classes: tuple[int, ...] = (0, 1, 2, 3),
    seed: int = 0,
    predictions: bool = False,
) -> dict[str, Any]:
    """Realism check: a classifier fitted on one source's epochs stages another's. ``train`` / ``test``:
    ``(epochs (e, T) uV, labels (e,))``; features: log relative band powers (``eval.bandpower``);
    classifier: standardized multinomial logistic regression (C = 1, no tuning) on a class-balanced draw
    of the training epochs of ``classes`` (as many per class as the rarest has). Returns the test
    metrics of ``eval.sleep_staging.staging_metrics`` (kappa, balanced accuracy, per-class F1) on every
    test epoch of ``classes``, and the epochs per class used on each side."""
    x_train, y_train, _ = _features(*train, sfreq, classes)
    x_test, y_test, _ = _features(*test, sfreq, classes)
    model, drawn = _fit_balanced(x_train, y_train, classes, seed)
    predicted = model.predict(x_test)
    return {
        **staging_metrics(y_test, predicted),
        "train_per_class": drawn,
        "test_per_class": {STAGES[c]: int((y_test == c).sum()) for c in classes},
        **({"predicted": predicted} if predictions else {}),
    }


def leave_one_group_out_staging(
    epochs: np.ndarray,
    labels: np.ndarray,
    groups: np.ndarray,
    sfreq: float,
    classes: tuple[int, ...] = (0, 1, 2, 3),
    seed: int = 0,
    predictions: bool = False,
) -> dict[str, Any]:
    """The ceiling of :func:`cross_staging`'s classifier on one source: for each group (e.g. each real
    recording) the same classifier, fitted on a class-balanced draw of the other groups' epochs, stages
    that group's epochs. ``epochs (e, T)`` uV, ``labels (e,)``, ``groups (e,)`` (any hashable values).

    Returns ``pooled`` (``staging_metrics`` of every held-out prediction together), ``per_group``
    (``{str(group): metrics + test_per_class + train_per_class}``, groups in sorted order),
    ``skipped_groups`` (groups without a test epoch of ``classes``: not staged) and ``test_per_class``
    of the pooled predictions; ``predictions``: also ``predicted``, the pooled ``(true labels, predicted
    labels, groups)`` (each ``(e',)``, held-out groups in sorted order). A fold whose other groups lack a class raises ``ValueError`` naming it."""
    epochs, labels, groups = np.asarray(epochs), np.asarray(labels), np.asarray(groups)
    if not epochs.shape[0] == labels.shape[0] == groups.shape[0]:
        raise ValueError(
            f"leave_one_group_out_staging: epochs {epochs.shape}, labels {labels.shape} and groups "
            f"{groups.shape} must have the same first dimension"
        )
    x, y, keep = _features(epochs, labels, sfreq, classes)
    g = groups[keep]
    y_true, y_pred, y_group, per_group, skipped = [], [], [], {}, []
    for group in sorted(set(groups.tolist())):
        test = g == group
        if not test.any():
            skipped.append(str(group))
            continue
        try:
            model, drawn = _fit_balanced(x[~test], y[~test], classes, seed)
        except ValueError as err:
            raise ValueError(f"held-out group {group!r}: {err}") from None
        predicted = model.predict(x[test])
        y_true.append(y[test])
        y_pred.append(predicted)
        y_group.append(g[test])
        per_group[str(group)] = {
            **staging_metrics(y[test], predicted),
            "train_per_class": drawn,
            "test_per_class": {STAGES[c]: int((y[test] == c).sum()) for c in classes},
        }
    if not per_group:
        raise ValueError(f"leave_one_group_out_staging: no group holds an epoch of {[STAGES[c] for c in classes]}")
    pooled_true, pooled_pred = np.concatenate(y_true), np.concatenate(y_pred)
    return {
        "pooled": staging_metrics(pooled_true, pooled_pred),
        "per_group": per_group,
        "skipped_groups": skipped,
        "seed": seed,
        "test_per_class": {STAGES[c]: int((pooled_true == c).sum()) for c in classes},
        **({"predicted": (pooled_true, pooled_pred, np.concatenate(y_group))} if predictions else {}),
    }
