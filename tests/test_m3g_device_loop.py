"""M3G's device-resident MM-Sinkhorn loop (``solver_loop="device"``, issue 28 item 1): same values,
Danskin gradient, sweep counts and escalations as the host loop, and at most 2 tensor-to-Python
conversions per forward+backward (the CPU-side pin of the GPU's host-synchronization count)."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

import pytest
import torch
from test_m3g import embeddings

from multiview_app.losses import build_loss
from multiview_app.losses.m3g import _cv_scale, _pair_grams
from multiview_app.losses.sinkhorn import LoopHints, mm_sinkhorn_pairwise


@pytest.fixture(autouse=True)
def _host_loop_without_numba(monkeypatch) -> None:
    """The host reference is the general torch path (the numba k = 3 kernels are tested elsewhere); the
    device loop's blocks run eagerly (compiling every shape here would take minutes on a CPU; the compiled
    blocks are tested against the eager ones in test_m3g_compiled.py)."""
    monkeypatch.setenv("MVAPP_M3G_FUSED", "0")
    monkeypatch.setenv("MVAPP_M3G_COMPILE", "0")


def _run(
    z: torch.Tensor, loop: str, calls: int = 1, **params
) -> tuple[list[float], torch.Tensor, dict, torch.nn.Module]:
    """Values of ``calls`` consecutive calls on ``z`` (the last one's gradient and stats)."""
    loss = build_loss("m3g", solver_loop=loop, **params)
    values = []
    for _ in range(calls):
        x = z.clone().requires_grad_()
        out = loss(x)
        out.backward()
        values.append(out.item())
    return values, x.grad, dict(loss.last_stats), loss


CASES = [
    pytest.param(3, 6, {}, id="k3"),
    pytest.param(4, 5, {}, id="k4"),
    pytest.param(5, 4, {}, id="k5"),
    pytest.param(6, 3, {}, id="k6"),
    pytest.param(4, 5, {"anderson": 5}, id="k4-anderson"),
    pytest.param(5, 4, {"anderson": 16, "init_potentials": "diagonal"}, id="k5-anderson-diagonal"),
    pytest.param(6, 3, {"init_potentials": "diagonal"}, id="k6-diagonal"),
    pytest.param(3, 6, {"warm_start": True}, id="k3-warm"),
    pytest.param(4, 5, {"warm_start": True, "anderson": 5}, id="k4-warm-anderson"),
]


@pytest.mark.parametrize(("k", "n", "params"), CASES)
def test_device_loop_equals_host_loop(k: int, n: int, params: dict) -> None:
    z = embeddings(n, k, seed=k + n, noise=1.0)
    # a nearby second batch: the warm-started call starts from the first call's potentials
    batches = [z, torch.nn.functional.normalize(z + 0.05 * embeddings(n, k, seed=99), dim=-1)]
    common = dict(epsilon=0.2, tol=1e-8, max_iter=5000, **params)
    host_loss, device_loss = (
        build_loss("m3g", solver_loop="host", **common),
        build_loss("m3g", solver_loop="device", **common),
    )
    for batch in batches:
        results = []
        for loss in (host_loss, device_loss):
            x = batch.clone().requires_grad_()
            value = loss(x)
            (grad,) = torch.autograd.grad(value, x)
            results.append((value.item(), grad, dict(loss.last_stats), loss.potentials))
        (v_host, g_host, s_host, p_host), (v_dev, g_dev, s_dev, p_dev) = results
        assert s_dev["iterations"] == s_host["iterations"] and s_dev["converged"] == s_host["converged"] == 1.0
        assert s_dev["warm_started"] == s_host["warm_started"]
        assert v_dev == pytest.approx(v_host, abs=1e-11)
        assert torch.allclose(g_dev, g_host, atol=1e-10, rtol=0)
        for key in ("ot", "mass", "marginal_error"):
            assert s_dev[key] == pytest.approx(s_host[key], rel=1e-9, abs=1e-12), key
        if params.get("warm_start"):
            assert torch.allclose(p_dev, p_host, atol=1e-9, rtol=0)
    assert s_dev["warm_started"] == float(bool(params.get("warm_start")))


@pytest.mark.parametrize("k", [3, 4, 6])
def test_device_loop_solver_potentials_and_plan_equal_host(k: int) -> None:
    n, eps = (6, 4, 3)[[3, 4, 6].index(k)], 0.2
    z = embeddings(n, k, seed=7, noise=1.5)
    factors = _pair_grams(z) * (2 * _cv_scale(k) / eps)
    offset = _cv_scale(k) * k * (k - 1) / eps
    host = mm_sinkhorn_pairwise(factors, offset, 1e-9, 5000)
    hints = LoopHints()
    device = mm_sinkhorn_pairwise(factors, offset, 1e-9, 5000, loop="device", hints=hints)
    assert device.path == host.path and device.iterations == host.iterations and device.converged
    assert torch.allclose(device.log_potentials, host.log_potentials, atol=1e-10, rtol=0)
    assert torch.allclose(device.pair_marginals, host.pair_marginals, atol=1e-13, rtol=0)
    assert device.mass == pytest.approx(host.mass, abs=1e-13)
    assert device.marginal_error == pytest.approx(host.marginal_error, rel=1e-6)
    # the next solve of the same problem reads back once: the block is sized from this one
    assert hints.positions == host.iterations + 1
    again = mm_sinkhorn_pairwise(factors, offset, 1e-9, 5000, loop="device", hints=hints)
    assert hints.readbacks == 1 and again.iterations == host.iterations


def test_fixed_small_blocks_give_the_same_result() -> None:
    z = embeddings(5, 4, seed=3, noise=1.0)
    host, _, host_stats, _ = _run(z, "host", epsilon=0.2, tol=1e-9, anderson=5)
    dev, _, dev_stats, loss = _run(z, "device", epsilon=0.2, tol=1e-9, anderson=5, solver_block=3)
    assert dev_stats["iterations"] == host_stats["iterations"] and dev == pytest.approx(host, abs=1e-11)
    assert loss._loop_hints[(5, 4)].readbacks > 1  # several blocks of 3, 6, 12, ... sweeps


def test_non_convergence_is_reported_and_warned_like_the_host_loop() -> None:
    z = embeddings(6, 4, seed=0, noise=2.0)
    results = {}
    for loop in ("host", "device"):
        with pytest.warns(RuntimeWarning, match="did not converge"):
            values, grad, stats, _ = _run(z, loop, epsilon=0.05, max_iter=2)
        results[loop] = (values[0], grad, stats)
    assert results["device"][2]["iterations"] == results["host"][2]["iterations"] == 2.0
    assert results["device"][2]["converged"] == 0.0
    assert results["device"][2]["marginal_error"] == pytest.approx(results["host"][2]["marginal_error"], rel=1e-9)
    assert results["device"][0] == pytest.approx(results["host"][0], abs=1e-11)
    assert torch.allclose(results["device"][1], results["host"][1], atol=1e-10)


def test_float32_underflow_escalates_like_the_host_loop() -> None:
    # test_m3g's float64-retry case: the device loop flags the underflow, the host loop re-runs
    z = embeddings(4, 4, seed=2, noise=3.0, dtype=torch.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        host, host_grad, host_stats, _ = _run(z, "host", epsilon=0.01, max_iter=300)
        dev, dev_grad, dev_stats, _ = _run(z, "device", epsilon=0.01, max_iter=300)
    assert dev_stats["float64_retry"] == host_stats["float64_retry"] == 1.0
    assert dev_stats["iterations"] == host_stats["iterations"] and dev == host
    assert torch.equal(dev_grad, host_grad)


def test_dense_fallback_escalates_like_the_host_loop() -> None:
    z = embeddings(4, 3, seed=2, noise=3.0)
    factors = _pair_grams(z) * 3000.0  # beyond float64's exp range: the dense path
    host = mm_sinkhorn_pairwise(factors, 0.0, 1e-6, 500)
    device = mm_sinkhorn_pairwise(factors, 0.0, 1e-6, 500, loop="device")
    assert device.path == host.path == "factorized->dense"
    assert device.iterations == host.iterations and torch.equal(device.pair_marginals, host.pair_marginals)


def test_three_view_dtype_follows_the_host_rule() -> None:
    # float32 input whose kernel log-range exceeds float32's budget: the host path solves in float64;
    # the device loop guesses float32 first, reads the range back and re-runs (then remembers)
    z = embeddings(6, 3, seed=4, noise=0.3, dtype=torch.float32)
    factors = _pair_grams(z) * (2 / 0.05)
    host = mm_sinkhorn_pairwise(factors, 6 / 0.05, 1e-5, 2000)
    hints = LoopHints()
    device = mm_sinkhorn_pairwise(factors, 6 / 0.05, 1e-5, 2000, loop="device", hints=hints)
    assert hints.k3_float64 and device.path == host.path == "factorized-k3"
    assert device.iterations == host.iterations
    assert torch.allclose(device.pair_marginals, host.pair_marginals, atol=1e-9, rtol=0)


def test_device_loop_bad_inputs_raise_the_usual_errors() -> None:
    loss = build_loss("m3g", solver_loop="device")
    z = embeddings(5, 4)
    z[1, 2, 3] = float("nan")
    with pytest.raises(ValueError, match="1 non-finite"):
        loss(z)
    factors = _pair_grams(embeddings(4, 4)) * 10.0
    bad_init = torch.zeros(4, 4, dtype=torch.float64)
    bad_init[0, 0] = float("inf")
    with pytest.raises(ValueError, match="init must be finite"):
        mm_sinkhorn_pairwise(factors, 60.0, 1e-3, 100, init=bad_init, loop="device")
    with pytest.raises(ValueError, match="solver_loop"):
        build_loss("m3g", solver_loop="gpu")
    with pytest.raises(ValueError, match="solver_block"):
        build_loss("m3g", solver_block=-1)
    with pytest.warns(RuntimeWarning, match="covers cost 'cv'"):
        csd = build_loss("m3g", cost="csd", solver_loop="device")
    assert csd._loop(embeddings(4, 3)) == "host"


def test_auto_loop_is_host_on_cpu() -> None:
    loss = build_loss("m3g")
    assert loss.solver_loop == "auto" and loss._loop(embeddings(4, 3)) == "host"


# --------------------------------------------------------------------------- host reads per call
_CONVERSIONS = ("item", "tolist", "__bool__", "__float__", "__int__", "__index__")


@contextlib.contextmanager
def count_conversions() -> Iterator[list[str]]:
    """Record every tensor -> Python conversion (the reads that synchronize with a GPU)."""
    seen: list[str] = []
    originals = {name: getattr(torch.Tensor, name) for name in _CONVERSIONS}

    def counting(name: str, original):
        def method(self, *args, **kwargs):
            seen.append(name)
            return original(self, *args, **kwargs)

        return method

    try:
        for name, original in originals.items():
            setattr(torch.Tensor, name, counting(name, original))
        yield seen
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)


def _conversions_per_call(loop: str, k: int, n: int, dtype: torch.dtype, **params) -> list[str]:
    """Conversions of one forward+backward after a warm-up call on the same batch."""
    loss = build_loss("m3g", solver_loop=loop, epsilon=0.2, tol=1e-3, **params)
    x = embeddings(n, k, d=16, seed=1, noise=1.0, dtype=dtype).requires_grad_()
    loss(x).backward()
    x.grad = None
    with count_conversions() as seen:
        loss(x).backward()
    return seen


@pytest.mark.parametrize(
    ("k", "n", "dtype", "params"),
    [
        (3, 16, torch.float32, {}),
        (4, 8, torch.float32, {}),
        (6, 4, torch.float32, {"anderson": 16, "init_potentials": "diagonal"}),
        (4, 8, torch.float64, {"warm_start": True, "anderson": 5}),
    ],
)
def test_device_loop_reads_the_device_at_most_twice_per_call(k: int, n: int, dtype: torch.dtype, params: dict) -> None:
    seen = _conversions_per_call("device", k, n, dtype, **params)
    assert len(seen) <= 2, seen


def test_conversion_counter_catches_the_host_loop() -> None:
    # the same measurement on the host loop: a read per sweep and per check (what the pin guards)
    seen = _conversions_per_call("host", 4, 8, torch.float32)
    assert len(seen) > 10, seen
