"""Gather-with-grad across 2 gloo CPU processes == 1 process on the full batch (loss and gradients)."""
from __future__ import annotations

import os
import tempfile

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from multiview_app.losses import build_loss
from multiview_app.train.distributed import gather_with_grad, gradient_scale, world_size

N_PER_PROC, K, D_IN, D_OUT, WORLD = 6, 3, 5, 4, 2


def _data() -> torch.Tensor:
    """Full batch ``(WORLD * N_PER_PROC, K, D_IN)``, float64 for exact comparisons."""
    return torch.randn(WORLD * N_PER_PROC, K, D_IN, generator=torch.Generator().manual_seed(1), dtype=torch.float64)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Linear(D_IN, D_OUT).double()


def _reference(loss_name: str) -> tuple[float, torch.Tensor]:
    """One process: loss and weight gradient on the full batch."""
    model = _model()
    loss = build_loss(loss_name)(model(_data()))
    loss.backward()
    return float(loss.detach()), model.weight.grad.clone()


def _worker(rank: int, store: str, loss_name: str, out: dict) -> None:
    """One process: the gathered and the per-process variant, results into ``out[(gather, rank)]``."""
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    try:
        for gather in (True, False):
            model = DDP(_model())
            x = _data()[rank * N_PER_PROC : (rank + 1) * N_PER_PROC]
            z = model(x)
            z_all = gather_with_grad(z) if gather else z
            loss = build_loss(loss_name)(z_all)
            (loss * gradient_scale(gather)).backward()
            out[(gather, rank)] = (float(loss.detach()), model.module.weight.grad.clone(), world_size(), tuple(z_all.shape))
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def two_process_results() -> dict:
    """Spawn WORLD gloo processes once (file:// rendezvous, no ports) and collect their results."""
    with tempfile.TemporaryDirectory() as tmp, mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_worker, args=(os.path.join(tmp, "store"), "infonce_pwe", out), nprocs=WORLD, join=True)
        return dict(out)


@pytest.mark.slow
def test_gathered_loss_and_gradients_equal_single_process_full_batch(two_process_results: dict) -> None:
    ref_loss, ref_grad = _reference("infonce_pwe")
    for rank in range(WORLD):
        loss, grad, world, shape = two_process_results[(True, rank)]
        assert world == WORLD
        assert shape == (WORLD * N_PER_PROC, K, D_OUT)
        assert loss == pytest.approx(ref_loss, rel=1e-12)
        torch.testing.assert_close(grad, ref_grad, rtol=1e-10, atol=1e-12)


@pytest.mark.slow
def test_without_gather_gradients_are_mean_of_per_process_losses(two_process_results: dict) -> None:
    """Per-process objectives (gather_across_processes=False, e.g. M3G): DDP averages local gradients."""
    data = _data()
    grads, losses = [], []
    for rank in range(WORLD):
        model = _model()
        loss = build_loss("infonce_pwe")(model(data[rank * N_PER_PROC : (rank + 1) * N_PER_PROC]))
        loss.backward()
        grads.append(model.weight.grad.clone())
        losses.append(float(loss.detach()))
    for rank in range(WORLD):
        loss, grad, _, shape = two_process_results[(False, rank)]
        assert shape == (N_PER_PROC, K, D_OUT)
        assert loss == pytest.approx(losses[rank], rel=1e-12)
        torch.testing.assert_close(grad, torch.stack(grads).mean(0), rtol=1e-10, atol=1e-12)


def test_single_process_is_identity() -> None:
    z = torch.randn(4, 2, 3, requires_grad=True)
    assert gather_with_grad(z) is z
    assert gradient_scale(True) == 1.0 and world_size() == 1
