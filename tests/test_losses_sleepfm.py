"""SleepFM's leave-one-out and pairwise losses against float64 loop references of their formulas."""

from __future__ import annotations

import pytest
import reference_losses as ref
import torch

from multiview_app.losses import build_loss

REFERENCES = {"sleepfm_loo": ref.sleepfm_loo, "sleepfm_pairwise": ref.sleepfm_pairwise}


def embeddings(n: int, k: int, d: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, k, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("name", list(REFERENCES))
@pytest.mark.parametrize("k", [2, 3, 5])
def test_matches_float64_reference(name: str, k: int) -> None:
    z = embeddings(6, k, 4, seed=k)
    assert build_loss(name)(z).item() == pytest.approx(REFERENCES[name](z), rel=1e-10)


@pytest.mark.parametrize("name", list(REFERENCES))
def test_matches_reference_at_a_learned_scale(name: str) -> None:
    z = embeddings(5, 3, 4, seed=1)
    loss = build_loss(name, init_log_scale=1.3).double()
    assert loss(z).item() == pytest.approx(REFERENCES[name](z, t=loss.log_scale.item()), rel=1e-10)
    assert loss.last_stats["logit_scale"] == pytest.approx(torch.tensor(1.3).exp().item(), rel=1e-6)


@pytest.mark.parametrize("name", list(REFERENCES))
def test_gradcheck_embeddings_and_scale(name: str) -> None:
    z = embeddings(3, 3, 3, seed=5).requires_grad_()
    loss = build_loss(name, init_log_scale=0.5).double()
    assert torch.autograd.gradcheck(loss, (z,), eps=1e-6, atol=1e-7)

    def at_scale(t: float) -> float:
        with torch.no_grad():
            loss.log_scale.fill_(t)
            return loss(z).item()

    (grad,) = torch.autograd.grad(loss(z.detach()), loss.log_scale)
    step = 1e-6
    numeric = (at_scale(0.5 + step) - at_scale(0.5 - step)) / (2 * step)
    assert grad.item() == pytest.approx(numeric, rel=1e-6)


def test_k2_leave_one_out_equals_pairwise() -> None:
    z = embeddings(7, 2, 5, seed=3)
    assert build_loss("sleepfm_loo")(z).item() == pytest.approx(build_loss("sleepfm_pairwise")(z).item(), rel=1e-12)


def test_loo_and_pairwise_differ_for_k_above_2() -> None:
    z = embeddings(7, 4, 5, seed=3)
    assert abs(build_loss("sleepfm_loo")(z).item() - build_loss("sleepfm_pairwise")(z).item()) > 1e-3


def test_leave_one_out_mean_is_not_renormalized() -> None:
    """Against infonce_ave's renormalized mean: a renormalized reference differs from the loss."""
    z = embeddings(6, 3, 4, seed=2)
    unit = z / z.norm(dim=-1, keepdim=True)
    rest = (unit.sum(1, keepdim=True) - unit) / 2
    renormalized = rest / rest.norm(dim=-1, keepdim=True)
    logits = torch.einsum("imd,jmd->mij", unit, renormalized)
    target = torch.arange(6)
    wrong = (
        sum(
            torch.nn.functional.cross_entropy(logits[m], target)
            + torch.nn.functional.cross_entropy(logits[m].T, target)
            for m in range(3)
        )
        / 6
    )
    assert abs(build_loss("sleepfm_loo")(z).item() - wrong.item()) > 1e-4


@pytest.mark.parametrize("name", list(REFERENCES))
def test_scale_is_clamped_at_zero(name: str) -> None:
    z = embeddings(5, 3, 4, seed=4)
    loss = build_loss(name).double()
    with torch.no_grad():
        loss.log_scale.fill_(-2.0)  # e.g. an optimizer step below the bound
    assert loss(z).item() == pytest.approx(REFERENCES[name](z, t=0.0), rel=1e-10)
    assert loss.log_scale.item() == 0.0  # the parameter itself is clamped
    with pytest.raises(ValueError, match="init_log_scale"):
        build_loss(name, init_log_scale=-1.0)


@pytest.mark.parametrize("name", list(REFERENCES))
def test_scale_is_a_parameter_the_optimizer_moves(name: str) -> None:
    """The trainer hands every ``requires_grad`` parameter of the loss to AdamW (train/trainer.py)."""
    loss = build_loss(name)
    params = [p for p in loss.parameters() if p.requires_grad]
    assert [id(p) for p in params] == [id(loss.log_scale)] and loss.log_scale.item() == 0.0
    optimizer = torch.optim.AdamW(params, lr=0.1, weight_decay=0.0)
    z = embeddings(8, 3, 4, seed=6).float()
    z = torch.cat([z[:, :1]] * 3, dim=1) + 0.01 * z  # aligned views: a larger scale lowers the loss
    for _ in range(3):
        optimizer.zero_grad()
        loss(z).backward()
        optimizer.step()
    assert loss.log_scale.item() > 0.2
    assert "log_scale" in loss.state_dict()  # checkpointed with the loss state
