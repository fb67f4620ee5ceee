"""M3G's one solver, the device-resident sweep blocks (run eagerly here): values, Danskin gradient, sweep
counts and escalations against the float64 dense reference, and at most 2 tensor-to-Python conversions per
forward+backward (the CPU-side pin of the GPU's host-synchronization count)."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

import pytest
import torch
from test_m3g import embeddings

from multiview_app.losses import _compile, build_loss, m3g
from multiview_app.losses.base import normalize
from multiview_app.losses.m3g import _cv_scale, _pair_grams, m3g_materialized
from multiview_app.losses.sinkhorn import LoopHints, mm_sinkhorn_dense, mm_sinkhorn_pairwise, pairwise_sum_tensor


@pytest.fixture(autouse=True)
def _blocks_without_numba(monkeypatch) -> None:
    """The sweep blocks (the numba k = 3 kernels are tested in test_m3g.py), run eagerly (compiling every
    shape here would take minutes on a CPU; the compiled blocks are tested against the eager ones in
    test_m3g_compiled.py)."""
    monkeypatch.setattr(m3g, "AUTO_OVERRIDE", "blocks")
    monkeypatch.setattr(_compile, "SWITCH", "0")


def _run(z: torch.Tensor, calls: int = 1, **params) -> tuple[list[float], torch.Tensor, dict, torch.nn.Module]:
    """Values of ``calls`` consecutive calls on ``z`` (the last one's gradient and stats)."""
    loss = build_loss("m3g", **params)
    values = []
    for _ in range(calls):
        x = z.clone().requires_grad_()
        out = loss(x)
        out.backward()
        values.append(out.item())
    return values, x.grad, dict(loss.last_stats), loss


def _reference(z: torch.Tensor, epsilon: float, tol: float, max_iter: int) -> tuple[float, torch.Tensor, dict]:
    """Value, gradient (through the loss's L2 normalization) and stats of the float64 dense reference
    (:func:`m3g_materialized`) at raw ``z``."""
    x = z.double().clone().requires_grad_()
    value, stats = m3g_materialized(normalize(x), epsilon, "cv", tol, max_iter)
    (grad,) = torch.autograd.grad(value, x)
    return value.item(), grad, stats


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
def test_blocks_equal_the_float64_reference(k: int, n: int, params: dict) -> None:
    z = embeddings(n, k, seed=k + n, noise=1.0)
    # a nearby second batch: a warm-started call starts from the first call's potentials
    batches = [z, torch.nn.functional.normalize(z + 0.05 * embeddings(n, k, seed=99), dim=-1)]
    loss = build_loss("m3g", epsilon=0.2, tol=1e-10, max_iter=5000, **params)
    plain = not params  # zero start, plain sweeps: the reference's very iterates
    for batch in batches:
        x = batch.clone().requires_grad_()
        value = loss(x)
        (grad,) = torch.autograd.grad(value, x)
        stats = dict(loss.last_stats)
        ref_value, ref_grad, ref_stats = _reference(batch, 0.2, 1e-10, 5000)
        assert stats["converged"] == 1.0 and stats["fallback"] == 0.0
        if plain:
            assert stats["iterations"] == ref_stats["iterations"]
        assert value.item() == pytest.approx(ref_value, abs=1e-9)
        assert torch.allclose(grad, ref_grad, atol=1e-8, rtol=0)
        assert stats["ot"] == pytest.approx(ref_stats["ot"], abs=1e-9)
        assert stats["mass"] == pytest.approx(ref_stats["mass"], abs=1e-9)
    assert stats["warm_started"] == float(bool(params.get("warm_start")))


@pytest.mark.parametrize("k", [3, 4, 6])
def test_solver_plan_equals_the_dense_reference(k: int) -> None:
    n, eps = (6, 4, 3)[[3, 4, 6].index(k)], 0.2
    z = embeddings(n, k, seed=7, noise=1.5)
    factors = _pair_grams(z) * (2 * _cv_scale(k) / eps)
    offset = _cv_scale(k) * k * (k - 1) / eps
    dense = mm_sinkhorn_dense(pairwise_sum_tensor(factors, offset), 1e-9, 5000)
    hints = LoopHints()
    blocks = mm_sinkhorn_pairwise(factors, offset, 1e-9, 5000, hints=hints)
    assert blocks.path == ("factorized-k3" if k == 3 else "factorized") and blocks.converged
    assert blocks.iterations == dense.iterations
    assert torch.allclose(blocks.pair_marginals, dense.pair_marginals, atol=1e-12, rtol=0)
    assert blocks.mass == pytest.approx(dense.mass, abs=1e-12)
    assert blocks.marginal_error == pytest.approx(dense.marginal_error, rel=1e-5)
    # potentials up to the gauge (a constant moved between views): their total
    assert float(blocks.log_potentials.sum()) == pytest.approx(float(dense.log_potentials.sum()), abs=1e-8)
    # the next solve of the same problem reads back once: the block is sized from this one
    assert hints.positions == dense.iterations + 1
    again = mm_sinkhorn_pairwise(factors, offset, 1e-9, 5000, hints=hints)
    assert hints.readbacks == 1 and again.iterations == dense.iterations


def test_fixed_small_blocks_give_the_same_result() -> None:
    z = embeddings(5, 4, seed=3, noise=1.0)
    adaptive, _, adaptive_stats, _ = _run(z, epsilon=0.2, tol=1e-9, anderson=5)
    small, _, small_stats, loss = _run(z, epsilon=0.2, tol=1e-9, anderson=5, solver_block=3)
    assert small_stats["iterations"] == adaptive_stats["iterations"] and small == pytest.approx(adaptive, abs=1e-12)
    assert loss._loop_hints[(5, 4)].readbacks > 1  # several blocks of 3, 6, 12, ... sweeps


def test_non_convergence_is_reported_and_warned_like_the_reference() -> None:
    z = embeddings(6, 4, seed=0, noise=2.0)
    with pytest.warns(RuntimeWarning, match="did not converge"):
        values, grad, stats, _ = _run(z, epsilon=0.05, max_iter=2)
    ref_value, ref_grad, ref_stats = _reference(z, 0.05, 1e-3, 2)  # the same two sweeps
    assert stats["iterations"] == ref_stats["iterations"] == 2.0 and stats["converged"] == 0.0
    assert stats["marginal_error"] == pytest.approx(ref_stats["marginal_error"], rel=1e-9)
    assert values[0] == pytest.approx(ref_value, abs=1e-10)
    assert torch.allclose(grad, ref_grad, atol=1e-9)


def test_float32_underflow_is_retried_on_the_same_blocks_in_float64() -> None:
    # test_m3g's float64-retry case: the float32 blocks flag the underflow, the float64 blocks re-run
    z = embeddings(4, 4, seed=2, noise=3.0, dtype=torch.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        value, grad, stats, _ = _run(z, epsilon=0.01, max_iter=300)
        _, _, stats64, _ = _run(z.double(), epsilon=0.01, max_iter=300)
        ref_value, _, _ = _reference(z, 0.01, 1e-3, 300)
    assert stats["float64_retry"] == 1.0 and stats["fallback"] == 0.0
    assert stats64["float64_retry"] == 0.0 and stats["iterations"] == stats64["iterations"]
    assert value[0] == pytest.approx(ref_value, abs=1e-3) and bool(torch.isfinite(grad).all())


@pytest.mark.parametrize("k", [3, 4])
def test_dense_fallback_when_float64_blocks_fail(k: int) -> None:
    z = embeddings(4, k, seed=2, noise=3.0)
    factors = _pair_grams(z) * 3000.0  # beyond float64's exp range: the dense path
    blocks = mm_sinkhorn_pairwise(factors, 0.0, 1e-6, 500)
    dense = mm_sinkhorn_dense(pairwise_sum_tensor(factors), 1e-6, 500)
    assert blocks.path == "factorized->dense"
    assert blocks.iterations == dense.iterations and torch.equal(blocks.pair_marginals, dense.pair_marginals)
    blocks32 = mm_sinkhorn_pairwise(factors.float(), 0.0, 1e-3, 50)
    assert blocks32.path == "factorized->float64->dense"


def test_three_view_dtype_follows_the_kernel_range() -> None:
    # float32 input whose kernel log-range exceeds float32's budget: the k = 3 blocks guess float32
    # first, read the range back and re-run in float64 (then remember)
    z = embeddings(6, 3, seed=4, noise=0.3, dtype=torch.float32)
    factors = _pair_grams(z) * (2 / 0.05)
    hints = LoopHints()
    blocks = mm_sinkhorn_pairwise(factors, 6 / 0.05, 1e-5, 2000, hints=hints)
    dense = mm_sinkhorn_dense(pairwise_sum_tensor(factors.double(), 6 / 0.05), 1e-5, 2000)
    assert hints.k3_float64 and blocks.path == "factorized-k3"
    assert blocks.iterations == dense.iterations
    assert torch.allclose(blocks.pair_marginals.double(), dense.pair_marginals, atol=1e-7, rtol=0)


def test_bad_inputs_raise_the_usual_errors() -> None:
    loss = build_loss("m3g")
    z = embeddings(5, 4)
    z[1, 2, 3] = float("nan")
    with pytest.raises(ValueError, match="1 non-finite"):
        loss(z)
    factors = _pair_grams(embeddings(4, 4)) * 10.0
    bad_init = torch.zeros(4, 4, dtype=torch.float64)
    bad_init[0, 0] = float("inf")
    with pytest.raises(ValueError, match="init must be finite"):
        mm_sinkhorn_pairwise(factors, 60.0, 1e-3, 100, init=bad_init)
    with pytest.raises(ValueError, match="solver_block"):
        build_loss("m3g", solver_block=-1)


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


def _conversions_per_call(k: int, n: int, dtype: torch.dtype, **params) -> list[str]:
    """Conversions of one forward+backward after a warm-up call on the same batch."""
    loss = build_loss("m3g", epsilon=0.2, tol=1e-3, **params)
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
def test_blocks_read_the_device_at_most_twice_per_call(k: int, n: int, dtype: torch.dtype, params: dict) -> None:
    seen = _conversions_per_call(k, n, dtype, **params)
    assert len(seen) <= 2, seen


def test_conversion_counter_catches_a_per_sweep_read() -> None:
    # the same measurement on the dense solver (cost csd), which reads its stopping rule every sweep
    seen = _conversions_per_call(4, 6, torch.float32, cost="csd")
    assert len(seen) > 2, seen  # more than the blocks' bound above


@pytest.mark.parametrize("backend", ["blocks", "numba", "dense"])
def test_a_cpu_solve_runs_at_one_thread_and_restores_the_count(backend: str, monkeypatch) -> None:
    # a parallel region of the small solver ops waits for a core another process holds (busy machine)
    if backend == "numba":
        pytest.importorskip("numba")
    changes: list[int] = []
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)  # as if torch ran 2 intra-op threads
    monkeypatch.setattr(torch, "set_num_threads", changes.append)
    x = embeddings(6, 4, seed=3).requires_grad_()
    build_loss("m3g", epsilon=0.5, backend=backend)(x).backward()
    assert changes and changes[::2] == [1] * (len(changes) // 2) and changes[1::2] == [2] * (len(changes) // 2)
