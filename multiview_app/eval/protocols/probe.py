"""Linear probe and kNN on frozen features (standardized with train statistics): the ``linear-probe``
and ``knn`` protocols, and the classifiers every evaluator fits (linear-probe, sleep-staging,
domain-generalization)."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from . import PROTOCOLS


def _check(x: np.ndarray, y: np.ndarray, what: str) -> None:
    if x.ndim != 2 or y.ndim != 1 or len(x) != len(y):
        raise ValueError(f"{what}: expected features (N, f) and labels (N,), got {x.shape} and {y.shape}")
    if len(x) == 0:
        raise ValueError(f"{what}: no items")


def mean_std(values: list[float]) -> dict[str, float]:
    """``{"mean", "std"}`` (population std) of a list of scores."""
    return {"mean": float(np.mean(values)), "std": float(np.std(values))}


def fit_linear_classifier(
    x: np.ndarray, y: np.ndarray, C: float = 1.0, max_iter: int = 1000, seed: int = 0
) -> Pipeline:
    """Standardize (train statistics) + multinomial logistic regression on ``x (N, f)``, ``y (N,)``."""
    _check(x, y, "linear classifier")
    if len(np.unique(y)) < 2:
        raise ValueError(f"linear classifier: need >= 2 classes in the training labels, got {np.unique(y).tolist()}")
    clf = make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=max_iter, random_state=seed))
    return clf.fit(np.nan_to_num(x), y)


def fit_knn(x: np.ndarray, y: np.ndarray, k: int = 20) -> Pipeline:
    """Standardize + cosine kNN (distance-weighted) on ``x (N, f)``; ``k`` capped at N."""
    _check(x, y, "kNN")
    knn = KNeighborsClassifier(n_neighbors=min(k, len(x)), metric="cosine", weights="distance")
    return make_pipeline(StandardScaler(), knn).fit(np.nan_to_num(x), y)


def _accuracy(classifier: Pipeline, x_test: np.ndarray, y_test: np.ndarray) -> float:
    _check(x_test, y_test, "test split")
    return float((classifier.predict(np.nan_to_num(x_test)) == y_test).mean())


@PROTOCOLS.register("linear-probe")
def linear_probe(
    train_features: np.ndarray,
    train_labels: np.ndarray,
    test_features: np.ndarray,
    test_labels: np.ndarray,
    C: float = 1.0,
    max_iter: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """``{"accuracy"}`` on ``test_features (M, f)`` of :func:`fit_linear_classifier` fitted on
    ``train_features (N, f)`` / ``train_labels (N,)`` (one BLAS thread, see :func:`probe_accuracies`)."""
    with threadpool_limits(1):
        classifier = fit_linear_classifier(train_features, train_labels, C=C, max_iter=max_iter, seed=seed)
        return {"accuracy": _accuracy(classifier, test_features, test_labels)}


@PROTOCOLS.register("knn")
def knn(
    train_features: np.ndarray,
    train_labels: np.ndarray,
    test_features: np.ndarray,
    test_labels: np.ndarray,
    k: int = 20,
) -> dict[str, Any]:
    """``{"accuracy"}`` on ``test_features (M, f)`` of the standardized cosine kNN (distance-weighted,
    ``k`` capped at N) of ``train_features (N, f)`` / ``train_labels (N,)``; one BLAS thread."""
    with threadpool_limits(1):
        return {"accuracy": _accuracy(fit_knn(train_features, train_labels, k=k), test_features, test_labels)}


def probe_accuracies(
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_test: np.ndarray,
    y_test: np.ndarray,
    *,
    knn_k: int = 20,
    C: float = 1.0,
    max_iter: int = 1000,
) -> dict[str, float]:
    """``{"logreg_acc", "knn_acc"}`` on the test split (fractions in [0, 1]): the ``linear-probe`` and
    ``knn`` protocols on the same features.

    Runs with one BLAS thread: these small problems only oversubscribe the cores with more
    (logistic regression on 1,295 x 128 digits features: 12.8 s with the default threads vs 0.3 s
    with one on a loaded 2-core machine, see docs/benchmarks.md "Hyperparameter search")."""
    _check(x_test, y_test, "test split")
    return {
        "logreg_acc": PROTOCOLS.get("linear-probe")(x_train, y_train, x_test, y_test, C=C, max_iter=max_iter)[
            "accuracy"
        ],
        "knn_acc": PROTOCOLS.get("knn")(x_train, y_train, x_test, y_test, k=knn_k)["accuracy"],
    }


__all__ = ["fit_knn", "fit_linear_classifier", "knn", "linear_probe", "mean_std", "probe_accuracies"]
