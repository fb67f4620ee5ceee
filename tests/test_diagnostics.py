"""Training diagnostics (train/diagnostics.py): each formula against a brute-force float64 loop,
and the trainer's metrics.jsonl / diagnostics.json carrying them."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from _train_helpers import tiny_config

from multiview_app.losses import build_loss
from multiview_app.losses.flatnce import batch_ess
from multiview_app.train.diagnostics import (
    alignment,
    effective_rank,
    embedding_diagnostics,
    grad_norm,
    pvc_mi_lower_bound,
    summarize_metrics,
    uniformity,
)
from multiview_app.train.metrics import read_metrics
from multiview_app.train.trainer import train


def _unit(n: int, k: int, d: int, seed: int = 0) -> torch.Tensor:
    z = torch.randn(n, k, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return z / z.norm(dim=-1, keepdim=True)


def test_effective_rank_matches_the_entropy_of_singular_values() -> None:
    x = torch.randn(40, 12, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    sigma = np.linalg.svd(x.numpy(), compute_uv=False)
    p = sigma / sigma.sum() + 1e-7
    assert effective_rank(x) == pytest.approx(math.exp(-(p * np.log(p)).sum()), rel=1e-10)
    # collapse: rank-one features -> ~1; isotropic -> close to d
    collapsed = torch.randn(40, 1, dtype=torch.float64) * torch.randn(1, 12, dtype=torch.float64)
    assert effective_rank(collapsed) == pytest.approx(1.0, abs=1e-3)
    assert effective_rank(torch.randn(4000, 12, dtype=torch.float64)) > 11.5


def test_alignment_and_uniformity_match_pair_loops() -> None:
    u = _unit(7, 3, 5)
    n, k, _ = u.shape
    align = [float((u[i, a] - u[i, b]).pow(2).sum()) for i in range(n) for a, b in itertools.permutations(range(k), 2)]
    assert alignment(u) == pytest.approx(sum(align) / len(align), rel=1e-12)
    per_view = []
    for a in range(k):
        terms = [math.exp(-2.0 * float((u[i, a] - u[j, a]).pow(2).sum())) for i in range(n) for j in range(n) if i != j]
        per_view.append(math.log(sum(terms) / len(terms)))
    assert uniformity(u) == pytest.approx(sum(per_view) / k, rel=1e-12)
    # perfectly aligned views: alignment 0
    same = u[:, :1].expand(n, k, -1)
    assert alignment(same) == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("tau", [0.5, 0.05])
def test_ess_matches_a_loop_over_anchors(tau: float) -> None:
    u = _unit(6, 3, 4, seed=2)
    n, k, _ = u.shape
    values = []
    for i, a in itertools.product(range(n), range(k)):
        logits = torch.tensor(
            [float(u[i, a] @ u[j, c]) / tau for j in range(n) for c in range(k) if j != i], dtype=torch.float64
        )
        w = torch.softmax(logits, dim=0)
        values.append(1.0 / (len(w) * float((w * w).sum())))
    assert batch_ess(u, tau) == pytest.approx(sum(values) / len(values), rel=1e-10)


def test_pvc_bound_matches_the_geometric_loop() -> None:
    u = _unit(5, 3, 4, seed=3)
    n, k, _ = u.shape
    tau = 0.3
    terms = []
    for i in range(n):
        for a, b in itertools.permutations(range(k), 2):
            pos = float(u[i, a] @ u[i, b]) / tau
            neg = [float(u[i, b] @ u[j, c]) / tau for j in range(n) for c in range(k) if j != i]
            terms.append(pos - math.log(math.exp(pos) + sum(math.exp(x) for x in neg)))
    expected = math.log(n * k - k + 1) + sum(terms) / len(terms)
    assert pvc_mi_lower_bound(u, tau) == pytest.approx(expected, rel=1e-10)
    loss = build_loss("pvc_geometric", tau=tau)
    loss(u)
    assert pvc_mi_lower_bound(u, tau) == pytest.approx(loss.last_stats["mi_lower_bound"], rel=1e-12)


def test_grad_norm_and_embedding_diagnostics_in_float32() -> None:
    layer = torch.nn.Linear(3, 2)
    layer(torch.randn(5, 3)).pow(2).sum().backward()
    expected = math.sqrt(sum(float(p.grad.double().pow(2).sum()) for p in layer.parameters()))
    assert grad_norm(layer.parameters()) == pytest.approx(expected, rel=1e-6)
    assert grad_norm(torch.nn.Linear(3, 2).parameters()) == 0.0
    z64 = _unit(8, 2, 6, seed=4) * 3.0
    d64, d32 = embedding_diagnostics(z64), embedding_diagnostics(z64.float())
    assert set(d64) == {"rankme", "alignment", "uniformity", "ess", "pvc_mi_lower_bound"}
    for key in d64:
        assert d32[key] == pytest.approx(d64[key], rel=1e-4, abs=1e-5)


def test_summary_counts_nonfinite_values() -> None:
    records = [
        {"step": 1, "diag/rankme": 3.0, "loss": 1.0},
        {"step": 2, "diag/rankme": float("nan")},
        {"step": 3, "diag/rankme": 2.0, "stats/ess": 0.5},
    ]
    summary = summarize_metrics(records)
    assert summary["diag/rankme"] == {
        "count": 2,
        "nonfinite": 1,
        "first": 3.0,
        "last": 2.0,
        "min": 2.0,
        "max": 3.0,
        "mean": 2.5,
    }
    assert "loss" not in summary and summary["stats/ess"]["count"] == 1


def test_trainer_logs_diagnostics_every_log_step_and_writes_the_summary(tmp_path: Path) -> None:
    cfg = tiny_config(tmp_path, "diag", train={"max_steps": 3, "log_every": 2})
    train(cfg)
    records = read_metrics(tmp_path / "diag" / "metrics.jsonl")
    assert [r["step"] for r in records] == [2, 3]
    for record in records:
        for key in ("rankme", "alignment", "uniformity", "ess", "pvc_mi_lower_bound", "grad_norm", "time_s"):
            assert math.isfinite(record[f"diag/{key}"]), key
        assert 1.0 <= record["diag/rankme"] <= 16.0 and record["diag/grad_norm"] > 0
    summary = json.loads((tmp_path / "diag" / "diagnostics.json").read_text())
    assert summary["diag/rankme"]["count"] == 2 and summary["diag/rankme"]["last"] == records[-1]["diag/rankme"]
    off = tiny_config(tmp_path, "nodiag", train={"max_steps": 2, "log_every": 1, "diagnostics": False})
    train(off)
    assert not any(k.startswith("diag/") for r in read_metrics(tmp_path / "nodiag" / "metrics.jsonl") for k in r)


def test_loss_temperature_follows_a_learnable_scale() -> None:
    from multiview_app.train.diagnostics import DEFAULT_TAU, loss_temperature

    assert loss_temperature(build_loss("pvc_geometric", tau=0.3)) == pytest.approx(0.3)
    assert loss_temperature(build_loss("m3g")) == DEFAULT_TAU
    learned = build_loss("infonce_pwe", tau=0.2, learnable_temperature=True)
    with torch.no_grad():
        learned.scale.logit_scale.fill_(math.log(10.0))
    assert loss_temperature(learned) == pytest.approx(0.1)


def test_collapse_is_flagged_from_the_last_uniformity_of_identical_but_not_spread_embeddings(tmp_path) -> None:
    from multiview_app.train.diagnostics import (
        COLLAPSED_UNIFORMITY,
        SUMMARY_FILE,
        collapse_warning,
        run_collapse,
        summarize_metrics,
    )

    torch.manual_seed(0)
    point = torch.randn(1, 1, 16)
    collapsed = point + 1e-3 * torch.randn(32, 3, 16)  # every item and view on one point
    spread = torch.randn(32, 3, 16)
    u_collapsed = embedding_diagnostics(collapsed)["uniformity"]
    u_spread = embedding_diagnostics(spread)["uniformity"]
    assert u_spread < COLLAPSED_UNIFORMITY < u_collapsed
    healthy = summarize_metrics([{"diag/uniformity": u_collapsed}, {"diag/uniformity": u_spread}])
    assert collapse_warning(healthy) is None  # the last log decides: this run left the plateau
    stuck = summarize_metrics([{"diag/uniformity": u_spread}, {"diag/uniformity": u_collapsed}])
    assert "projections collapsed" in collapse_warning(stuck) and f"{u_collapsed:.4f}" in collapse_warning(stuck)
    assert collapse_warning({}) is None  # a run without diagnostics says nothing
    (tmp_path / SUMMARY_FILE).write_text(json.dumps(stuck))
    assert run_collapse(tmp_path) == pytest.approx(u_collapsed)
    assert run_collapse(tmp_path / "missing") is None


@pytest.mark.parametrize(
    ("name", "params", "collapsed"),
    [
        ("m3g", {"epsilon": 0.4}, lambda n, k: 0.4 * (k - 1) * math.log(n)),
        ("m3g", {"epsilon": 0.2}, lambda n, k: 0.2 * (k - 1) * math.log(n)),
        ("pvc_geometric", {"tau": 0.05}, lambda n, k: math.log(n * k - k + 1)),
        ("sleepfm_loo", {}, lambda n, k: math.log(n)),
    ],
)
def test_the_loss_of_identical_embeddings_is_the_plateau_the_docs_name(name, params, collapsed) -> None:
    n, k = 16, 3
    z = torch.ones(n, k, 8, dtype=torch.float64)  # every item and view on one point
    assert float(build_loss(name, **params)(z).detach()) == pytest.approx(collapsed(n, k), rel=1e-5)
