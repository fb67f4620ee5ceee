"""The loss-head API contract: names, bad-input errors, dtypes, last_stats (issue 2)."""

from __future__ import annotations

import math

import pytest
import torch

from multiview_app.losses import MultiViewLoss, available_losses, build_loss, loss_parameters

# the losses of this module set (m3g has its own tests) and the last_stats keys each promises
STATS = {
    "infonce_pwe": {"loss"},
    "infonce_ave": {"loss"},
    "byol_pwe": {"loss"},
    "byol_ave": {"loss"},
    "pvc_geometric": {"loss", "mi_lower_bound"},
    "pvc_arithmetic": {"loss", "mi_lower_bound"},
    "pvc_sufficient": {"loss", "mi_lower_bound"},
    "aggnce": {"loss"},
    "flatnce": {"loss", "ess", "tau", "infonce"},
    "mveb": {"loss", "alignment", "entropy_surrogate", "bandwidth"},
}
NAMES = list(STATS)


def test_available_losses_lists_every_name() -> None:
    names = available_losses()
    assert names == sorted(names)
    assert set(NAMES) <= set(names)


def test_defaults_are_part_of_the_contract() -> None:
    for name in ["pvc_geometric", "pvc_arithmetic", "pvc_sufficient", "aggnce"]:
        assert loss_parameters(name) == {"tau": 0.1, "chunked": None}
    for name in ["infonce_pwe", "infonce_ave"]:  # + CLIP-style learnable temperature
        assert loss_parameters(name) == {
            "tau": 0.1,
            "chunked": None,
            "learnable_temperature": False,
            "max_logit_scale": 100.0,
        }
    assert loss_parameters("byol_pwe") == {} and loss_parameters("byol_ave") == {}
    assert loss_parameters("flatnce")["tau"] == 0.1
    assert loss_parameters("flatnce")["ess_target"] is None and loss_parameters("flatnce")["chunked"] is None
    assert loss_parameters("mveb") == {"beta": 0.01, "eta": 0.01, "chunked": None}


def test_unknown_loss_lists_valid_names() -> None:
    with pytest.raises(ValueError, match="unknown loss 'nope'.*pvc_geometric"):
        build_loss("nope")


def test_unknown_parameter_lists_valid_ones() -> None:
    with pytest.raises(ValueError, match="temperature.*valid: tau=0.1"):
        build_loss("pvc_geometric", temperature=0.1)
    with pytest.raises(ValueError, match="beta=0.01, eta=0.01"):
        build_loss("mveb", tau=0.1)


@pytest.mark.parametrize(
    "name", ["infonce_pwe", "infonce_ave", "pvc_geometric", "pvc_arithmetic", "pvc_sufficient", "aggnce", "flatnce"]
)
@pytest.mark.parametrize("tau", [0.0, -1.0, math.inf, math.nan, "warm"])
def test_bad_temperature(name: str, tau: object) -> None:
    with pytest.raises(ValueError, match=f"loss '{name}': parameter tau"):
        build_loss(name, tau=tau)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    "shape, message",
    [((4, 8), "3-D"), ((2, 3, 2, 4), "3-D"), ((1, 3, 4), "n >= 2"), ((4, 1, 4), "k >= 2"), ((4, 3, 0), "d >= 1")],
)
def test_bad_shapes(name: str, shape: tuple[int, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_loss(name)(torch.randn(shape))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_non_finite_input(name: str, bad: float) -> None:
    z = torch.randn(4, 3, 5)
    z[1, 2, 3] = bad
    with pytest.raises(ValueError, match="non-finite"):
        build_loss(name)(z)


def test_not_a_tensor() -> None:
    with pytest.raises(ValueError, match="torch.Tensor"):
        build_loss("aggnce")([[[1.0]]])


@pytest.mark.parametrize("name", NAMES)
def test_dtypes_and_last_stats(name: str) -> None:
    g = torch.Generator().manual_seed(0)
    z = torch.randn(6, 3, 8, generator=g)
    loss = build_loss(name)
    assert isinstance(loss, MultiViewLoss) and loss.name == name
    reference = loss(z.double())
    assert reference.dtype == torch.float64 and reference.dim() == 0
    assert set(loss.last_stats) >= STATS[name]
    assert all(isinstance(v, float) and math.isfinite(v) for v in loss.last_stats.values())
    assert loss.last_stats["loss"] == pytest.approx(reference.item())
    for half in (torch.float16, torch.bfloat16):
        value = loss(z.to(half))
        assert value.dtype == torch.float32, half  # computed in float32, not in half
        # the only error left is the rounding of the half input itself
        assert value.item() == pytest.approx(loss(z.to(half).double()).item(), rel=1e-4, abs=1e-4)
    assert loss(z).dtype == torch.float32


@pytest.mark.parametrize("name", NAMES)
def test_backward_reaches_half_input(name: str) -> None:
    z = torch.randn(5, 2, 4).to(torch.bfloat16).requires_grad_()
    build_loss(name)(z).backward()
    assert z.grad is not None and z.grad.dtype == torch.bfloat16 and torch.isfinite(z.grad.float()).all()


def test_gather_flags() -> None:
    assert build_loss("pvc_geometric").gather_across_processes is True
    assert build_loss("flatnce").gather_across_processes is True
    assert build_loss("byol_pwe").gather_across_processes is False
