"""MVEB: value vs brute force, Stein linear system, bandwidth rule, beta = 0, gradient only through z."""
from __future__ import annotations

import pytest
import torch

import reference_losses as ref
from multiview_app.losses import build_loss
from multiview_app.losses.mveb import stein_score, vmf_bandwidth


def embeddings(n: int, k: int, d: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(n, 1, d, generator=g, dtype=torch.float64)
    return base + 0.9 * torch.randn(n, k, d, generator=g, dtype=torch.float64)


def unit(z: torch.Tensor) -> torch.Tensor:
    return z / z.norm(dim=-1, keepdim=True)


@pytest.mark.parametrize("k", [2, 3, 5])
def test_matches_bruteforce_reference(k: int) -> None:
    z = embeddings(6, k, 4, seed=k)
    loss = build_loss("mveb", beta=0.5, eta=0.05)
    value = loss(z).item()
    assert value == pytest.approx(ref.mveb(z, beta=0.5, eta=0.05), rel=1e-8)
    u = unit(z)
    pairs = [(a, b) for a in range(k) for b in range(a + 1, k)]
    alignment = sum((u[:, a] * u[:, b]).sum(-1).mean().item() for a, b in pairs) / len(pairs)
    assert loss.last_stats["alignment"] == pytest.approx(alignment, rel=1e-12)
    assert value == pytest.approx(-alignment + 0.5 * loss.last_stats["entropy_surrogate"], rel=1e-10)
    bandwidths = [ref.bandwidth(u[:, a]) for a in range(k)]
    assert loss.last_stats["bandwidth"] == pytest.approx(sum(bandwidths) / k, rel=1e-12)


@pytest.mark.parametrize("eta", [0.01, 1.0])
def test_stein_estimate_solves_linear_system(eta: float) -> None:
    x = unit(embeddings(7, 1, 5, seed=3)[:, 0])
    kernel, g, delta = ref.stein_pieces(x)
    score, bandwidth = stein_score(x, eta)
    assert bandwidth.item() == pytest.approx(delta, rel=1e-12)
    residual = (kernel + eta * torch.eye(7, dtype=torch.float64)) @ score + g
    assert residual.abs().max().item() < 1e-8 * g.abs().max().item()
    assert not score.requires_grad


def test_stein_estimate_float32_input_keeps_dtype_and_accuracy() -> None:
    x = unit(embeddings(16, 1, 8, seed=4)[:, 0])
    s64, _ = stein_score(x, 0.01)
    s32, _ = stein_score(x.float(), 0.01)
    assert s32.dtype == torch.float32
    torch.testing.assert_close(s32.double(), s64, rtol=1e-3, atol=1e-3 * s64.abs().max().item())


def test_bandwidth_is_median_pairwise_cosine_distance() -> None:
    # 4 unit vectors in the plane at angles 0, 60, 120, 180 deg: distances 1 - cos
    angles = torch.tensor([0.0, 60.0, 120.0, 180.0], dtype=torch.float64).deg2rad()
    x = torch.stack([angles.cos(), angles.sin()], dim=1)
    # pairs: 60 (x3), 120 (x2), 180 (x1) -> distances 0.5, 0.5, 0.5, 1.5, 1.5, 2 -> median (0.5 + 1.5) / 2
    assert vmf_bandwidth(x).item() == pytest.approx(1.0)
    assert ref.bandwidth(x) == pytest.approx(1.0)


def test_bandwidth_floor() -> None:
    x = unit(torch.ones(5, 3, dtype=torch.float64) + 1e-3 * embeddings(5, 1, 3, seed=1)[:, 0])
    assert vmf_bandwidth(x).item() == 0.1
    loss = build_loss("mveb")
    loss(x[:, None, :].repeat(1, 2, 1))
    assert loss.last_stats["bandwidth"] == pytest.approx(0.1)


def test_beta_zero_is_pure_alignment() -> None:
    z = embeddings(5, 3, 4, seed=6)
    x = z.clone().requires_grad_()
    value = build_loss("mveb", beta=0.0)(x)
    value.backward()
    y = z.clone().requires_grad_()
    u = unit(y)
    expected = -torch.stack([(u[:, a] * u[:, b]).sum(-1).mean() for a, b in [(0, 1), (0, 2), (1, 2)]]).mean()
    expected.backward()
    assert value.item() == pytest.approx(expected.item(), rel=1e-12)
    torch.testing.assert_close(x.grad, y.grad, rtol=1e-10, atol=1e-12)


def test_gradient_flows_only_through_z_with_score_detached() -> None:
    n, k, beta = 6, 3, 0.7
    z = embeddings(n, k, 4, seed=8)
    x = z.clone().requires_grad_()
    build_loss("mveb", beta=beta)(x).backward()
    # the same objective with the score as a constant computed by the brute-force reference
    u0 = unit(z)
    scores = []
    for a in range(k):
        kernel, g, _ = ref.stein_pieces(u0[:, a])
        scores.append(-torch.linalg.solve(kernel + 0.01 * torch.eye(n, dtype=torch.float64), g))
    score = torch.stack(scores, dim=1)
    y = z.clone().requires_grad_()
    u = unit(y)
    pairs = [(a, b) for a in range(k) for b in range(a + 1, k)]
    alignment = torch.stack([(u[:, a] * u[:, b]).sum(-1).mean() for a, b in pairs]).mean()
    (-alignment + beta * (score * u).sum(-1).mean()).backward()
    torch.testing.assert_close(x.grad, y.grad, rtol=1e-7, atol=1e-10)


def test_float32_close_to_float64() -> None:
    z = embeddings(32, 2, 16, seed=9)
    loss = build_loss("mveb")
    v32 = loss(z.float())
    assert v32.dtype == torch.float32 and torch.isfinite(v32)
    assert v32.item() == pytest.approx(loss(z).item(), rel=1e-4, abs=1e-5)


@pytest.mark.parametrize("params, word", [({"beta": -0.1}, "beta"), ({"eta": 0.0}, "eta"), ({"beta": "x"}, "beta")])
def test_bad_parameters(params: dict, word: str) -> None:
    with pytest.raises(ValueError, match=f"mveb.*{word}"):
        build_loss("mveb", **params)
