"""GPU readiness (issue 16 §5): every view policy, every loss and one bf16 training step on CUDA.

Marked ``cuda``; skipped with the reason on machines without a GPU. The device rule they check:
random draws happen on the generator's device (``data.views.draw_device``), every tensor a loss or
a model creates lives on its input's device, and the views of a seed are the same on CPU and CUDA
generators' devices only up to the RNG (so here: same seed -> same views on CUDA, all on CUDA).
"""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import pytest
import torch

from multiview_app.data.views import available_view_policies, build_view_policy
from multiview_app.losses import available_losses, build_loss

from _train_helpers import tiny_config

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none on this machine"),
]


def _digits_case() -> tuple[Any, dict[str, Any], dict[str, Any]]:
    from multiview_app.data.adapters import build_adapter

    adapter = build_adapter("digits", {"load_size": 16})
    images = torch.stack([adapter.split("train")[i]["x"] for i in range(6)])
    return adapter, {"stacks": "simclr", "image_size": 16}, {"x": images, "label": torch.arange(6)}


def _eeg_case() -> tuple[Any, dict[str, Any], dict[str, Any]]:
    adapter = SimpleNamespace(modality="eeg", channel_names=["Fpz-Cz", "Pz-Oz", "C3-M2"], sfreq=100.0)
    x = torch.randn(6, 3, 3000, generator=torch.Generator().manual_seed(0))
    return adapter, {"channel_split": "average", "crop_seconds": 10.0}, {"x": x, "label": torch.arange(6)}


#: A raw batch and options per view policy; a new policy needs a case here.
POLICY_CASES: dict[str, tuple[int, Callable[[], tuple[Any, dict[str, Any], dict[str, Any]]]]] = {
    "augment": (2, _digits_case),
    "channels": (2, _eeg_case),
}


@pytest.mark.parametrize("name", available_view_policies())
def test_view_policy_runs_on_cuda(name: str) -> None:
    assert name in POLICY_CASES, f"add a CUDA case for view policy {name!r} to POLICY_CASES"
    k, case = POLICY_CASES[name]
    adapter, options, raw = case()
    policy = build_view_policy(name, k, options, adapter)
    device = torch.device("cuda")
    raw = {key: value.to(device) for key, value in raw.items()}

    def views(seed: int) -> list[torch.Tensor]:
        batch = policy.train_views(raw, torch.Generator(device=device).manual_seed(seed))
        return list(batch.views)

    first, again = views(3), views(3)
    assert len(first) == k and all(v.device.type == "cuda" for v in first)
    for a, b in zip(first, again):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert all(v.device.type == "cuda" for v in policy.eval_views(raw).views)


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


def test_one_bf16_training_step_on_cuda(tmp_path: Path) -> None:
    from multiview_app.train.trainer import train

    result = train(tiny_config(tmp_path, "bf16", train={"max_steps": 1, "precision": "bf16"}))
    assert result.steps == 1 and torch.isfinite(torch.tensor(result.final_loss))
    assert not any("fp32" in note for note in result.notes)  # bf16 really used


# --------------------------------------------------------------------------- M3G device loop (issue 28 item 1)
def _m3g_batch(n: int, k: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(n * k)
    return (torch.randn(n, 1, 32, generator=g) + torch.randn(n, k, 32, generator=g)).to("cuda", dtype)


@pytest.mark.parametrize(("n", "k", "params"), [(16, 6, {}), (32, 3, {}), (16, 6, {"anderson": 16, "init_potentials": "diagonal"})])
def test_m3g_device_loop_makes_no_sync_beyond_its_readback(n: int, k: int, params: dict) -> None:
    # after a warm-up call (the block size comes from it) the call reads the GPU once: the
    # solver's readback; torch's sync debug mode counts it, so the mode is "warn" and warnings are counted
    loss = build_loss("m3g", epsilon=0.2, tol=1e-3, solver_loop="device", **params)
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
def test_m3g_device_loop_equals_host_loop_on_cuda(n: int, k: int, dtype: torch.dtype) -> None:
    z = _m3g_batch(n, k, dtype)
    out = {}
    for loop in ("host", "device"):
        loss = build_loss("m3g", epsilon=0.2, tol=1e-3 if dtype == torch.float32 else 1e-8, solver_loop=loop)
        x = z.clone().requires_grad_()
        value = loss(x)
        (grad,) = torch.autograd.grad(value, x)
        out[loop] = (value.item(), grad, loss.last_stats["iterations"])
    assert out["device"][2] == out["host"][2]
    atol = 1e-5 if dtype == torch.float32 else 1e-10
    assert abs(out["device"][0] - out["host"][0]) <= atol
    assert torch.allclose(out["device"][1], out["host"][1], atol=atol)
    assert build_loss("m3g")._loop(z) == "device"  # auto on CUDA
