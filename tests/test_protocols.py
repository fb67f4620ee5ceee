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
    assert {"knn", "linear-probe", "few-shot-staging", "retrieval"} <= set(PROTOCOLS.names())
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


def _staging_features(seed: int) -> tuple[dict[str, dict[str, np.ndarray]], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y_train, y_test = rng.integers(0, 5, 300), rng.integers(0, 5, 120)
    informative = {
        "train": np.eye(5)[y_train] * 2 + rng.normal(size=(300, 5)),
        "test": np.eye(5)[y_test] * 2 + rng.normal(size=(120, 5)),
    }
    return {"trained": informative}, y_train, y_test


def test_few_shot_staging_confusion_is_pooled_over_the_seeds_fits() -> None:
    """The confusion counts are the sum over seeds of each fit's confusion matrix at the largest s
    (recomputed here by fitting each seed's draw by hand), not one seed's."""
    from sklearn.metrics import confusion_matrix

    from multiview_app.eval.protocols.probe import fit_linear_classifier
    from multiview_app.eval.protocols.staging import row_normalized, shot_draw

    features, y_train, y_test = _staging_features(0)
    out = get_protocol("few-shot-staging")(features, y_train, y_test, (3, 10), seeds=3, C=1.0)
    json.dumps({k: v for k, v in out.items() if k != "predictions"})
    expected = np.zeros((5, 5), dtype=np.int64)
    for seed in range(3):
        index, _ = shot_draw(y_train, 10, seed)
        model = fit_linear_classifier(features["trained"]["train"][index], y_train[index], C=1.0, seed=seed)
        predicted = model.predict(features["trained"]["test"])
        expected += confusion_matrix(y_test, predicted, labels=range(5))
        if seed == 0:
            np.testing.assert_array_equal(out["predictions"]["trained"], predicted)
    np.testing.assert_array_equal(np.asarray(out["confusion"]["trained"]), expected)
    assert int(np.sum(out["confusion"]["trained"])) == 3 * y_test.size
    normalized = row_normalized(out["confusion"]["trained"])
    np.testing.assert_allclose(normalized.sum(axis=1), 1.0)
    np.testing.assert_allclose(row_normalized([[0, 0], [1, 3]]), [[0, 0], [0.25, 0.75]])


def test_retrieval_protocol_recall_and_zero_shot() -> None:
    import torch
    import torch.nn.functional as F

    images = F.normalize(torch.eye(3, 4) + 0.01, dim=-1)
    texts = torch.cat([images, images[[1, 0, 2]]])  # captions 0-2 match images 0-2, 3-5 are shuffled
    owner = torch.tensor([0, 1, 2, 1, 0, 2])
    prompts = images[:, None, :].repeat(1, 2, 1)  # (3 classes, 2 prompts, d)
    scores = get_protocol("retrieval")(images, texts, owner, labels=torch.tensor([0, 1, -1]), prompt_embeddings=prompts)
    assert scores["i2t_R@1"] == 1.0 and scores["t2i_R@1"] == 1.0 and scores["zero_shot_acc"] == 1.0
    assert set(scores) == {"i2t_R@1", "i2t_R@5", "i2t_R@10", "t2i_R@1", "t2i_R@5", "t2i_R@10", "zero_shot_acc"}
    assert "zero_shot_acc" not in get_protocol("retrieval")(images, texts, owner)


def test_evaluators_declare_their_name_once() -> None:
    """Every registered evaluator subclasses eval.Evaluator, is registered under its declared name, and
    its output stem ``kind`` is that name with ``_`` (derived, not written a second time)."""
    from multiview_app.eval import EVALUATORS, Evaluator, register_evaluator

    for name in EVALUATORS.names():
        cls = EVALUATORS.get(name)
        assert issubclass(cls, Evaluator) and cls.name == name and cls.kind == name.replace("-", "_")
        assert "kind" not in vars(cls) or cls.kind == name.replace("-", "_")

    class Unnamed(Evaluator):
        def run(self, run_dir, args):  # type: ignore[override]
            return {}

    with pytest.raises(TypeError, match="declares its name"):
        register_evaluator(Unnamed)

    class Named(Unnamed):
        name = "a-b"

    assert Named.kind == "a_b"
