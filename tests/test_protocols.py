"""The protocol registry (eval/protocols): pure functions, arrays + options in, JSON-ready dicts out."""
from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.neighbors import KNeighborsClassifier

from multiview_app.eval.protocols import PROTOCOLS, get_protocol


def _blobs(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    x = rng.normal(size=(n, 6)) + 1.5 * np.eye(3, 6)[y] * np.array([1, 2, 3, 1, 1, 1])
    return x, y


def test_registry_names_the_protocols() -> None:
    assert {"knn", "linear-probe"} <= set(PROTOCOLS.names())
    with pytest.raises(ValueError, match="unknown protocol 'nope'; available: .*knn"):
        get_protocol("nope")


def test_knn_protocol_matches_a_hand_standardized_knn() -> None:
    x_train, y_train = _blobs(120, 0)
    x_test, y_test = _blobs(60, 1)
    result = get_protocol("knn")(x_train, y_train, x_test, y_test, k=7)
    mean, std = x_train.mean(0), x_train.std(0)
    reference = KNeighborsClassifier(7, metric="cosine", weights="distance").fit((x_train - mean) / std, y_train)
    expected = float((reference.predict((x_test - mean) / std) == y_test).mean())
    assert result == {"accuracy": pytest.approx(expected, abs=1e-12)}
    json.dumps(result)
    # k is capped at the number of training items
    assert 0.0 <= get_protocol("knn")(x_train[:5], y_train[:5], x_test, y_test)["accuracy"] <= 1.0


def test_linear_probe_protocol_matches_a_hand_standardized_logistic_regression() -> None:
    x_train, y_train = _blobs(120, 2)
    x_test, y_test = _blobs(60, 3)
    result = get_protocol("linear-probe")(x_train, y_train, x_test, y_test, C=0.5)
    mean, std = x_train.mean(0), x_train.std(0)
    reference = LogisticRegression(C=0.5, max_iter=1000, random_state=0).fit((x_train - mean) / std, y_train)
    expected = float((reference.predict((x_test - mean) / std) == y_test).mean())
    assert result["accuracy"] == pytest.approx(expected, abs=1e-12) and result["accuracy"] > 0.6


def test_probe_protocols_refuse_mismatched_shapes() -> None:
    x, y = _blobs(20, 4)
    with pytest.raises(ValueError, match="expected features"):
        get_protocol("knn")(x, y[:-1], x, y)
    with pytest.raises(ValueError, match="test split"):
        get_protocol("linear-probe")(x, y, x[:, :, None], y)
