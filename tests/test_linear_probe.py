"""Linear probe: probe utilities on synthetic features, view combination, feature extraction and the
evaluator on a tiny trained run (trained and random-init rows, eval/linear_probe.json)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _train_helpers import tiny_config

from multiview_app.eval import available_evaluators
from multiview_app.eval.features import combine_views, extract_features
from multiview_app.eval.linear_probe import run_linear_probe
from multiview_app.eval.protocols.probe import fit_linear_classifier, probe_accuracies
from multiview_app.train.run_io import load_run
from multiview_app.train.trainer import train


def _blobs(n: int, seed: int, shift: float) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    centers = np.eye(3, 8) * shift
    return (centers[y] + rng.normal(size=(n, 8)) * 1.0 + 100.0).astype(np.float32), y  # offset: needs standardizing


def test_probe_separable_vs_random_labels() -> None:
    x_tr, y_tr = _blobs(300, 0, shift=6.0)
    x_te, y_te = _blobs(200, 1, shift=6.0)
    good = probe_accuracies(x_tr, y_tr, x_te, y_te, knn_k=10)
    assert good["logreg_acc"] > 0.95 and good["knn_acc"] > 0.9
    rng = np.random.default_rng(2)
    chance = probe_accuracies(x_tr, rng.integers(0, 3, 300), x_te, rng.integers(0, 3, 200), knn_k=10)
    assert chance["logreg_acc"] < 0.5 and chance["knn_acc"] < 0.5
    with pytest.raises(ValueError, match="need >= 2 classes"):
        fit_linear_classifier(x_tr, np.zeros(300, dtype=int))
    with pytest.raises(ValueError, match=r"expected features \(N, f\)"):
        probe_accuracies(x_tr[:, :, None], y_tr, x_te, y_te)


def test_combine_views() -> None:
    f = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    assert np.allclose(combine_views(f, "mean"), f.mean(1))
    assert np.array_equal(combine_views(f, "first"), f[:, 0])
    assert combine_views(f, "concat").shape == (2, 12)
    with pytest.raises(ValueError, match=r"\(N, k, f\)"):
        combine_views(f[0], "mean")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    runs = tmp_path_factory.mktemp("runs")
    return train(tiny_config(runs, "probe", train={"max_steps": 3})).run_dir


def test_extract_features_shapes_and_labels(tiny_run: Path) -> None:
    from multiview_app.data.adapters import build_adapter
    from multiview_app.data.views import build_view_policy

    cfg, model = load_run(tiny_run)
    adapter = build_adapter(cfg.data.adapter, cfg.data.options)
    policy = build_view_policy(cfg.views.policy, cfg.views.k, cfg.views.options, adapter)
    feats, labels, meta = extract_features(model, adapter, policy, "test", batch_size=100, progress=False)
    n = len(adapter.split("test"))
    assert feats.shape == (n, 1, 16) and feats.dtype == np.float32 and np.isfinite(feats).all()
    assert labels.shape == (n,) and set(labels.tolist()) == set(range(10))
    assert len(meta["index"]) == n
    again, _, _ = extract_features(model, adapter, policy, "test", batch_size=37, progress=False)
    np.testing.assert_allclose(again, feats, rtol=1e-4, atol=1e-5)  # batch size does not matter (eval mode)


def test_linear_probe_reports_trained_and_random_init(tiny_run: Path) -> None:
    assert "linear-probe" in available_evaluators()
    result = run_linear_probe(tiny_run, knn_k=5, progress=False)
    saved = json.loads((tiny_run / "eval" / "linear_probe.json").read_text())
    assert saved == json.loads(json.dumps(result))
    assert set(result["results"]) == {"trained", "random_init"}
    for scores in result["results"].values():
        assert 0.3 < scores["logreg_acc"] <= 1.0 and 0.1 < scores["knn_acc"] <= 1.0  # 10 classes, chance 0.1
    assert result["results"]["trained"] != result["results"]["random_init"]
    from multiview_app.data.adapters import build_adapter

    n_test = len(build_adapter("digits", {"load_size": 16, "test_fraction": 0.5}).split("test"))
    assert result["items"]["test"] == n_test and result["feature_dim"] == 16
    assert result["gain"]["logreg_acc"] == pytest.approx(
        result["results"]["trained"]["logreg_acc"] - result["results"]["random_init"]["logreg_acc"]
    )
