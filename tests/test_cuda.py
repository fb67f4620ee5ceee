"""GPU readiness (issues 16 §5, 28 §4): every view policy (built without a host synchronization), every
loss in fp32 and bf16, one bf16 training step per modality, resume bit-exact, on CUDA. The policy cases,
training steps and resume check are the helpers of tests/_device_cases.py, which tests/test_device_cases.py
runs on the CPU (including the check that every registered view policy has a case).

Marked ``cuda``; skipped with the reason on machines without a GPU. The device rule they check:
random draws happen on the generator's device (``data.views.draw_device``; draws the host must read,
such as which channels or domains form the views, on a CPU generator seeded from it:
``data.views.host_generator``), every tensor a loss or a model creates lives on its input's device,
and the views of a seed are the same on CPU and CUDA generators' devices only up to the RNG (so here:
same seed -> same views on CUDA, all on CUDA).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _device_cases import MODALITIES, POLICY_CASES, check_policy_on, check_resume_is_exact, train_one_step
from _train_helpers import tiny_config

from multiview_app.data.views import available_view_policies
from multiview_app.losses import available_losses, build_loss

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none on this machine"),
]


@pytest.mark.parametrize("name", available_view_policies())
def test_view_policy_runs_on_cuda(name: str, tmp_path: Path) -> None:
    assert name in POLICY_CASES, f"add a case for view policy {name!r} to POLICY_CASES (tests/_device_cases.py)"
    check_policy_on(name, torch.device("cuda"), tmp_path)


@pytest.mark.parametrize("name", available_losses())
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_loss_forward_backward_on_cuda(name: str, dtype: torch.dtype) -> None:
    z_cpu = torch.randn(8, 3, 16, generator=torch.Generator().manual_seed(0))
    z = z_cpu.to("cuda", dtype).requires_grad_()
    loss = build_loss(name).cuda()
    value = loss(z)
    value.backward()
    assert value.device.type == "cuda" and value.dtype == torch.float32  # half inputs computed in float32
    assert torch.isfinite(value) and z.grad is not None and bool(torch.isfinite(z.grad.float()).all())
    reference = build_loss(name)(z_cpu.to(dtype).float())
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    assert value.item() == pytest.approx(reference.item(), rel=tol, abs=tol)


@pytest.mark.parametrize("modality", MODALITIES)
def test_one_bf16_training_step_per_modality_on_cuda(modality: str, tmp_path: Path) -> None:
    result = train_one_step(tmp_path, modality, "bf16")
    assert not any("fp32" in note for note in result.notes)  # bf16 really used


def test_resume_on_cuda_is_bit_exact(tmp_path: Path) -> None:
    check_resume_is_exact(tmp_path, "bf16")


def test_one_bf16_training_step_on_cuda(tmp_path: Path) -> None:
    from multiview_app.train.trainer import train

    result = train(tiny_config(tmp_path, "bf16", train={"max_steps": 1, "precision": "bf16"}))
    assert result.steps == 1 and torch.isfinite(torch.tensor(result.final_loss))
    assert not any("fp32" in note for note in result.notes)  # bf16 really used


# --------------------------------------------------------------------------- M3G device loop (issue 28 item 1)
def _m3g_batch(n: int, k: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(n * k)
    return (torch.randn(n, 1, 32, generator=g) + torch.randn(n, k, 32, generator=g)).to("cuda", dtype)


@pytest.mark.parametrize(
    ("n", "k", "params"), [(16, 6, {}), (32, 3, {}), (16, 6, {"anderson": 16, "init_potentials": "diagonal"})]
)
def test_m3g_device_loop_makes_no_sync_beyond_its_readback(n: int, k: int, params: dict) -> None:
    # after a warm-up call (the block size comes from it) the call reads the GPU once: the
    # solver's readback; torch's sync debug mode counts it, so the mode is "warn" and warnings are counted
    loss = build_loss("m3g", epsilon=0.2, tol=1e-3, **params)
    x = _m3g_batch(n, k).requires_grad_()
    loss(x).backward()
    torch.cuda.synchronize()
    import warnings as _warnings

    with _warnings.catch_warnings(record=True) as caught:
        _warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            loss(x).backward()
        finally:
            torch.cuda.set_sync_debug_mode(0)
    syncs = [w for w in caught if "synchroniz" in str(w.message).lower()]
    assert len(syncs) <= 2, [str(w.message) for w in syncs]
    assert loss._loop_hints[(n, k)].readbacks == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("n", "k"), [(16, 6), (32, 3), (64, 4)])
def test_m3g_blocks_equal_the_float64_reference_on_cuda(n: int, k: int, dtype: torch.dtype) -> None:
    from multiview_app.losses.base import normalize
    from multiview_app.losses.m3g import m3g_materialized

    z = _m3g_batch(n, k, dtype)
    tol = 1e-3 if dtype == torch.float32 else 1e-8
    loss = build_loss("m3g", epsilon=0.2, tol=tol)
    x = z.clone().requires_grad_()
    value = loss(x)
    (grad,) = torch.autograd.grad(value, x)
    x_ref = z.double().clone().requires_grad_()
    ref, ref_stats = m3g_materialized(normalize(x_ref), 0.2, "cv", tol, 1000)  # dense float64, on the GPU
    (ref_grad,) = torch.autograd.grad(ref, x_ref)
    if dtype == torch.float64:  # the reference's very iterates
        assert loss.last_stats["iterations"] == ref_stats["iterations"]
    atol = 1e-4 if dtype == torch.float32 else 1e-10
    assert abs(value.item() - ref.item()) <= atol
    assert torch.allclose(grad.double(), ref_grad, atol=atol)
    assert build_loss("m3g")._loop(z) == "device"  # auto on CUDA
