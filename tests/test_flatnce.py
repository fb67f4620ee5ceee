"""FlatNCE: value == matching InfoNCE, gradient == that of mean(exp(c - detach c)), ESS, tau scheduling."""

from __future__ import annotations

import pytest
import reference_losses as ref
import torch

from multiview_app.losses import build_loss


def embeddings(n: int, k: int, d: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(n, 1, d, generator=g, dtype=torch.float64)
    return (base + 0.8 * torch.randn(n, k, d, generator=g, dtype=torch.float64)) * 2.0


def grad_of(fn, z: torch.Tensor) -> torch.Tensor:
    x = z.clone().requires_grad_()
    (g,) = torch.autograd.grad(fn(x), x)
    return g


@pytest.mark.parametrize("k", [2, 3, 5])
def test_value_is_matching_infonce(k: int) -> None:
    z = embeddings(5, k, 4, seed=k)
    loss = build_loss("flatnce", tau=0.3)
    value = loss(z).item()
    assert value == pytest.approx(ref.flatnce_infonce(z, tau=0.3), rel=1e-10)
    # same anchors / positives / negatives as Eq. 14 geometric PVC averaged over ordered pairs
    assert value == pytest.approx(build_loss("pvc_geometric", tau=0.3)(z).item(), rel=1e-10)
    assert loss.last_stats["infonce"] == pytest.approx(value)
    assert loss.last_stats["tau"] == 0.3


@pytest.mark.parametrize("k", [2, 4])
def test_gradient_is_flat_surrogate_and_differs_from_infonce(k: int) -> None:
    z = embeddings(4, k, 3, seed=10 + k)
    flat = grad_of(build_loss("flatnce", tau=0.5), z)
    expected = grad_of(lambda x: ref.flatnce_surrogate(x, tau=0.5), z)
    infonce = grad_of(build_loss("pvc_geometric", tau=0.5), z)
    torch.testing.assert_close(flat, expected, rtol=1e-9, atol=1e-12)
    assert not torch.allclose(flat, infonce, rtol=1e-3, atol=1e-6)


@pytest.mark.parametrize("k", [2, 3])
def test_ess_matches_reference_and_range(k: int) -> None:
    z = embeddings(6, k, 5, seed=20 + k)
    loss = build_loss("flatnce", tau=0.2)
    loss(z)
    ess = loss.last_stats["ess"]
    assert ess == pytest.approx(ref.flatnce_ess(z, tau=0.2), rel=1e-10)
    assert 1.0 / ((6 - 1) * k) <= ess <= 1.0


def test_ess_is_one_for_uniform_negatives() -> None:
    # orthonormal items, identical views: every anchor sees equal logits (0) for all negatives
    n, k = 4, 3
    z = torch.eye(n, dtype=torch.float64)[:, None, :].repeat(1, k, 1)
    loss = build_loss("flatnce", tau=0.05)
    loss(z)
    assert loss.last_stats["ess"] == pytest.approx(1.0, rel=1e-12)


def test_ess_scheduling_drives_ess_to_target() -> None:
    z = embeddings(8, 2, 6, seed=1)
    target = 0.5
    loss = build_loss("flatnce", tau=0.1, ess_target=target, ess_rate=0.05)
    loss.train()
    taus, esses = [], []
    for _ in range(150):
        loss(z)
        taus.append(loss.last_stats["tau"])
        esses.append(loss.last_stats["ess"])
    assert taus[0] == 0.1 and len(set(taus)) > 1
    assert esses[0] < target  # tau = 0.1 is sharp here, so tau must grow
    assert taus[-1] > 0.1
    assert abs(esses[-1] - target) < 0.05
    # eval mode: no update
    loss.eval()
    frozen = loss.tau
    loss(z)
    loss(z)
    assert loss.tau == frozen


def test_scheduled_tau_in_state_dict() -> None:
    z = embeddings(5, 2, 4, seed=2)
    loss = build_loss("flatnce", ess_target=0.9)
    loss(z)
    assert loss.tau != 0.1
    fresh = build_loss("flatnce", ess_target=0.9)
    fresh.load_state_dict(loss.state_dict())
    assert fresh.tau == loss.tau


def test_without_target_tau_is_fixed() -> None:
    loss = build_loss("flatnce", tau=0.2)
    for seed in range(3):
        loss(embeddings(4, 2, 3, seed=seed))
    assert loss.tau == 0.2 and loss.last_stats["tau"] == 0.2


@pytest.mark.parametrize(
    "params, word",
    [
        ({"ess_target": 0.0}, "ess_target"),
        ({"ess_target": 1.5}, "ess_target"),
        ({"ess_rate": 1.0}, "ess_rate"),
        ({"ess_rate": -0.1}, "ess_rate"),
        ({"tau": 0.0}, "tau"),
    ],
)
def test_bad_parameters(params: dict, word: str) -> None:
    with pytest.raises(ValueError, match=f"flatnce.*{word}"):
        build_loss("flatnce", **params)
