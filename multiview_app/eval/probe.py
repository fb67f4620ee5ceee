"""Linear probe and kNN on frozen features (standardized with train statistics), reusable by
every evaluator (linear-probe, sleep-staging, ...)."""
from __future__ import annotations

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits


def _check(x: np.ndarray, y: np.ndarray, what: str) -> None:
    if x.ndim != 2 or y.ndim != 1 or len(x) != len(y):
        raise ValueError(f"{what}: expected features (N, f) and labels (N,), got {x.shape} and {y.shape}")
    if len(x) == 0:
        raise ValueError(f"{what}: no items")


def mean_std(values: list[float]) -> dict[str, float]:
    """``{"mean", "std"}`` (population std) of a list of scores."""
    return {"mean": float(np.mean(values)), "std": float(np.std(values))}


def fit_linear_classifier(x: np.ndarray, y: np.ndarray, C: float = 1.0, max_iter: int = 1000, seed: int = 0) -> Pipeline:
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


def probe_accuracies(
    x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray, *, knn_k: int = 20,
    C: float = 1.0, max_iter: int = 1000,
) -> dict[str, float]:
    """``{"logreg_acc", "knn_acc"}`` on the test split (fractions in [0, 1]).

    Runs with one BLAS thread: these small problems only oversubscribe the cores with more
    (logistic regression on 1,295 x 128 digits features: 12.8 s with the default threads vs 0.3 s
    with one on a loaded 2-core machine, see docs/benchmarks.md "Hyperparameter search")."""
    _check(x_test, y_test, "test split")
    with threadpool_limits(1):
        linear = fit_linear_classifier(x_train, y_train, C=C, max_iter=max_iter)
        knn = fit_knn(x_train, y_train, k=knn_k)
        x_test = np.nan_to_num(x_test)
        return {
            "logreg_acc": float((linear.predict(x_test) == y_test).mean()),
            "knn_acc": float((knn.predict(x_test) == y_test).mean()),
        }
