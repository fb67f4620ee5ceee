"""M3G: factorized solver vs the materialized reference vs a brute-force loop; POT at k=2;
finite differences of the Danskin gradient; invariances; float32 robustness; warnings; bad params."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
import torch

from multiview_app.losses import build_loss, m3g
from multiview_app.losses.base import normalize
from multiview_app.losses.m3g import m3g_factorized, m3g_materialized


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny tensors: one intra-op thread avoids oversubscription stalls on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def embeddings(n: int, k: int, d: int = 8, seed: int = 0, noise: float = 1.0, dtype=torch.float64) -> torch.Tensor:
    """Normalized ``(n, k, d)`` views of n items: shared direction + per-view noise."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(n, 1, d, generator=g, dtype=torch.float64)
    return normalize(base + noise * torch.randn(n, k, d, generator=g, dtype=torch.float64)).to(dtype)


def brute_force_m3g(z: torch.Tensor, epsilon: float, cost: str, iters: int) -> float:
    """Def. 3.1 with loops: cost tensor entry by entry, Alg. 1 on the full tensor, float64."""
    n, k, _ = z.shape
    shape = (n,) * k
    c = torch.zeros(shape, dtype=torch.float64)
    for idx in itertools.product(range(n), repeat=k):
        pts = [z[idx[l], l] for l in range(k)]
        if cost == "circular_variance":  # Eq. 12: 1 - R^2
            c[idx] = 1 - float(torch.stack(pts).mean(0).norm() ** 2)
        elif cost == "cv":
            c[idx] = (2 / (k - 1)) ** 2 * sum(2 - 2 * float(pts[l] @ pts[m]) for l in range(k) for m in range(l + 1, k))
        else:
            c[idx] = -math.log(max(float(torch.stack(pts).mean(0).norm() ** 2), 1e-6))
    f = [torch.zeros(n, dtype=torch.float64) for _ in range(k)]
    for _ in range(iters):
        for l in range(k):
            total = -c
            for m in range(k):
                if m != l:
                    total = total + f[m].reshape([n if a == m else 1 for a in range(k)])
            others = [a for a in range(k) if a != l]
            f[l] = -epsilon * (torch.logsumexp(total / epsilon, dim=others) + math.log(n))
    plan = -c
    for m in range(k):
        plan = plan + f[m].reshape([n if a == m else 1 for a in range(k)])
    mass = float((plan / epsilon).exp().sum())
    ot = sum(float(x.sum()) for x in f) / n - epsilon * mass
    diag = sum(float(c[(i,) * k]) for i in range(n)) / n
    return diag - epsilon * (math.log(n) + 1) - ot


@pytest.mark.parametrize("cost", ["cv", "csd"])
def test_materialized_matches_brute_force(cost: str) -> None:
    z = embeddings(3, 3, seed=1)
    value, stats = m3g_materialized(z, epsilon=0.3, cost=cost, tol=1e-12, max_iter=400)
    assert value.item() == pytest.approx(brute_force_m3g(z, 0.3, cost, iters=int(stats["iterations"])), abs=1e-10)


@pytest.mark.parametrize(
    ("k", "eps", "tol"),
    [(2, 1.0, 1e-7), (3, 0.2, 1e-7), (3, 0.05, 1e-3), (4, 0.2, 1e-7), (4, 0.02, 1e-3), (5, 0.1, 1e-7)],
)
def test_factorized_matches_materialized(k: int, eps: float, tol: float) -> None:
    z = embeddings(6, k, seed=10 * k).requires_grad_()
    fast, fast_stats = m3g_factorized(z, eps, tol=tol, max_iter=3000)
    (fast_grad,) = torch.autograd.grad(fast, z)
    ref, ref_stats = m3g_materialized(z, eps, "cv", tol=tol, max_iter=3000)
    (ref_grad,) = torch.autograd.grad(ref, z)
    assert fast_stats["fallback"] == 0.0
    assert fast.item() == pytest.approx(ref.item(), abs=1e-9)
    # same algorithm and stopping rule (round-off may move the stop by a few sweeps on flat tails)
    assert abs(fast_stats["iterations"] - ref_stats["iterations"]) <= 0.1 * ref_stats["iterations"] + 1
    assert fast_stats["ot"] == pytest.approx(ref_stats["ot"], abs=1e-9)
    assert fast_stats["marginal_error"] < tol and fast_stats["converged"] == 1.0
    assert torch.allclose(fast_grad, ref_grad, atol=1e-9)
    assert fast.item() >= 0.0 and ref.item() >= 0.0


def test_factorized_plan_marginals_match_materialized() -> None:
    from multiview_app.losses.m3g import _cv_scale, _pair_grams
    from multiview_app.losses.sinkhorn import mm_sinkhorn_dense, mm_sinkhorn_pairwise, pairwise_sum_tensor

    n, k, eps = 6, 4, 0.3
    z = embeddings(n, k, seed=40)
    s = _cv_scale(k)
    grams = _pair_grams(z)
    fast = mm_sinkhorn_pairwise(grams * (2 * s / eps), s * k * (k - 1) / eps, 1e-8, 2000)
    dense = mm_sinkhorn_dense(-s * (k * (k - 1) - 2 * pairwise_sum_tensor(grams)) / eps, 1e-8, 2000)
    assert fast.converged and fast.iterations == dense.iterations
    assert torch.allclose(fast.pair_marginals, dense.pair_marginals, atol=1e-12)
    assert torch.allclose(fast.log_potentials, dense.log_potentials, atol=1e-9)
    for l, m in itertools.combinations(range(k), 2):  # every pair marginal is a coupling of 1/n, 1/n
        assert torch.allclose(fast.pair_marginals[l, m].sum(0), torch.full((n,), 1 / n, dtype=torch.float64), atol=1e-8)
        assert torch.allclose(fast.pair_marginals[l, m].sum(1), torch.full((n,), 1 / n, dtype=torch.float64), atol=1e-8)


@pytest.mark.parametrize("eps", [1.0, 0.5])
def test_two_views_plan_equals_pot_sinkhorn(eps: float) -> None:
    ot = pytest.importorskip("ot")
    from multiview_app.losses.m3g import _pair_grams
    from multiview_app.losses.sinkhorn import mm_sinkhorn_pairwise

    n = 7
    z = embeddings(n, 2, seed=5)
    grams = _pair_grams(z)
    cost = 4.0 * (2.0 - 2.0 * grams[0, 1])  # Alg. 2 with k=2: (2/(k-1))^2 (2 - 2<x, y>)
    a = np.full(n, 1.0 / n)
    pot_plan = ot.bregman.sinkhorn_log(a, a, cost.numpy(), reg=eps, stopThr=1e-13, numItermax=100000)
    ours = mm_sinkhorn_pairwise(grams * (8.0 / eps), 8.0 / eps, 1e-11, 100000)
    assert np.allclose(ours.pair_marginals[0, 1].numpy(), pot_plan, atol=1e-10)


def test_danskin_gradient_matches_finite_differences() -> None:
    torch.manual_seed(0)
    raw = torch.randn(4, 3, 5, dtype=torch.float64)
    loss = build_loss("m3g", epsilon=0.3, tol=1e-9, max_iter=20000)
    x = raw.clone().requires_grad_()
    (grad,) = torch.autograd.grad(loss(x), x)  # includes the L2 normalization
    direction = torch.randn_like(raw)
    h = 1e-5
    with torch.no_grad():
        numeric = (loss(raw + h * direction) - loss(raw - h * direction)).item() / (2 * h)
    assert (grad * direction).sum().item() == pytest.approx(numeric, rel=1e-5, abs=1e-8)


def test_csd_gradient_matches_finite_differences() -> None:
    z0 = embeddings(4, 3, d=5, seed=7)
    x = z0.clone().requires_grad_()
    value, _ = m3g_materialized(x, epsilon=0.4, cost="csd", tol=1e-10, max_iter=20000)
    (grad,) = torch.autograd.grad(value, x)
    direction = torch.randn_like(z0)
    h = 1e-5
    plus, _ = m3g_materialized(z0 + h * direction, 0.4, "csd", 1e-10, 20000)
    minus, _ = m3g_materialized(z0 - h * direction, 0.4, "csd", 1e-10, 20000)
    assert (grad * direction).sum().item() == pytest.approx((plus - minus).item() / (2 * h), rel=1e-5, abs=1e-8)


@pytest.mark.parametrize("cost", ["cv", "csd"])
def test_permutation_invariance(cost: str) -> None:
    z = embeddings(6, 4, seed=40)
    loss = build_loss("m3g", epsilon=0.3, cost=cost, tol=1e-8, max_iter=5000)
    value = loss(z).item()
    items = torch.randperm(6, generator=torch.Generator().manual_seed(1))
    assert loss(z[items]).item() == pytest.approx(value, abs=1e-8)
    views = torch.tensor([2, 0, 3, 1])
    assert loss(z[:, views]).item() == pytest.approx(value, abs=1e-8)


def test_value_is_nonnegative_and_zero_gap_needs_aligned_views() -> None:
    loss = build_loss("m3g", epsilon=0.1)
    for seed in range(3):
        assert loss(embeddings(8, 3, seed=seed, noise=2.0)).item() >= 0.0
    aligned = loss(embeddings(8, 3, seed=0, noise=0.05)).item()
    mixed = loss(embeddings(8, 3, seed=0, noise=3.0)).item()
    assert 0.0 <= aligned < mixed


@pytest.mark.parametrize(("n", "k"), [(3, 8), (4, 6), (6, 3), (5, 2)])
def test_float32_small_epsilon_is_finite_and_matches_float64(n: int, k: int) -> None:
    # 300 sweeps (not always converged at eps 0.01): both dtypes must reach the same iterate
    z64 = embeddings(n, k, seed=n + k)
    x = z64.float().requires_grad_()
    loss = build_loss("m3g", epsilon=0.01, max_iter=300)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        value = loss(x)
        (grad,) = torch.autograd.grad(value, x)
        ref, ref_stats = m3g_materialized(z64, 0.01, "cv", 1e-3, 300)
    assert value.dtype == torch.float32
    assert math.isfinite(value.item()) and bool(torch.isfinite(grad).all())
    assert all(math.isfinite(v) for v in loss.last_stats.values())
    assert value.item() >= 0.0
    assert value.item() == pytest.approx(ref.item(), abs=2e-3 * max(1.0, abs(ref.item())))
    assert loss.last_stats["marginal_error"] == pytest.approx(ref_stats["marginal_error"], abs=2e-3)


def test_float32_underflow_is_retried_in_float64_and_exact() -> None:
    # near-antipodal views at tiny epsilon: the float32 exp-domain factors underflow on the first
    # sweep, the factorized solve continues in float64 (still never n^k)
    z = embeddings(4, 3, seed=2, noise=3.0, dtype=torch.float32)
    loss = build_loss("m3g", epsilon=0.01, max_iter=300)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        value = loss(z).item()
        ref, _ = m3g_materialized(z.double(), 0.01, "cv", 1e-3, 300)
    assert loss.last_stats["float64_retry"] == 1.0 and loss.last_stats["fallback"] == 0.0
    assert value == pytest.approx(ref.item(), abs=1e-3)


def test_dense_fallback_when_even_float64_underflows() -> None:
    from multiview_app.losses.m3g import _pair_grams
    from multiview_app.losses.sinkhorn import mm_sinkhorn_dense, mm_sinkhorn_pairwise, pairwise_sum_tensor

    z = embeddings(4, 3, seed=2, noise=3.0)
    factors = _pair_grams(z) * 3000.0  # log-kernel range ~ e^10000: beyond float64's exp range
    fast = mm_sinkhorn_pairwise(factors, 0.0, 1e-6, 500)
    dense = mm_sinkhorn_dense(pairwise_sum_tensor(factors), 1e-6, 500)
    assert fast.path == "factorized->dense"
    assert fast.iterations == dense.iterations and fast.converged == dense.converged
    assert torch.allclose(fast.pair_marginals, dense.pair_marginals, atol=1e-9)


def test_non_convergence_warns_once_and_reports() -> None:
    loss = build_loss("m3g", epsilon=0.05, max_iter=2)
    z = embeddings(6, 3, seed=0, noise=2.0)
    with pytest.warns(RuntimeWarning, match="did not converge"):
        loss(z)
    assert loss.last_stats["converged"] == 0.0
    assert loss.last_stats["iterations"] == 2.0
    assert loss.last_stats["marginal_error"] >= 1e-3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loss(z)  # second time: no warning
    assert loss.last_stats["converged"] == 0.0


def test_stats_and_dtypes() -> None:
    loss = build_loss("m3g")
    z = embeddings(5, 3, seed=0).requires_grad_()
    out = loss(z)
    assert out.dim() == 0 and out.dtype == torch.float64
    assert set(loss.last_stats) >= {"iterations", "marginal_error", "converged", "ot", "loss"}
    assert loss.last_stats["converged"] == 1.0 and loss.last_stats["marginal_error"] < 1e-3
    out.backward()
    assert z.grad is not None and bool(torch.isfinite(z.grad).all())
    assert loss(z.detach().half()).dtype == torch.float32
    assert type(loss).gather_across_processes is False


@pytest.mark.parametrize(
    "params",
    [{"epsilon": 0.0}, {"epsilon": -1.0}, {"cost": "euclid"}, {"tol": 0.0}, {"max_iter": 0}, {"max_iter": 2.5}],
)
def test_bad_parameters_raise(params: dict) -> None:
    with pytest.raises(ValueError):
        build_loss("m3g", **params)


# --------------------------------------------------------------------------- k = 3 closed form, warm start
@pytest.mark.parametrize(
    ("n", "eps", "dtype"), [(5, 0.2, torch.float64), (40, 0.2, torch.float32), (60, 0.1, torch.float32)]
)
def test_three_view_path_matches_general_factorized_path(n: int, eps: float, dtype: torch.dtype) -> None:
    from multiview_app.losses.m3g import _cv_scale, _pair_grams
    from multiview_app.losses.sinkhorn import LoopHints, _pairwise_device, mm_sinkhorn_pairwise

    z = embeddings(n, 3, seed=n, noise=1.5).to(dtype)
    factors = _pair_grams(z) * (2 * _cv_scale(3) / eps)
    fast = mm_sinkhorn_pairwise(factors, 6 / eps, 1e-5, 2000)
    general = _pairwise_device(factors.double(), 6 / eps, 1e-5, 2000, None, 0, LoopHints(), 0, [])
    assert fast.path == "factorized-k3" and fast.converged
    assert fast.iterations == general.iterations
    init = fast.log_potentials.clone()
    again = mm_sinkhorn_pairwise(factors, 6 / eps, 1e-5, 2000, init=init)
    assert again.iterations <= 1 and torch.equal(
        init, fast.log_potentials
    )  # converged start (float32: +1 sweep of round-off); init not modified
    atol = 1e-12 if dtype == torch.float64 else 2e-6
    assert torch.allclose(fast.pair_marginals.double(), general.pair_marginals, atol=atol / n)
    # potentials up to the gauge (a constant moved between views): compare the plan's log-scalings sum
    assert float(fast.log_potentials.double().sum()) == pytest.approx(
        float(general.log_potentials.sum()), abs=1e-3 if dtype == torch.float32 else 1e-9
    )


@pytest.mark.parametrize(("k", "cost"), [(3, "cv"), (4, "cv"), (3, "csd")])
def test_warm_start_is_exact_at_convergence_and_needs_fewer_sweeps(k: int, cost: str) -> None:
    z1 = embeddings(7, k, seed=3 * k, noise=2.0)
    z2 = normalize(z1 + 0.02 * embeddings(7, k, seed=99))  # the next step: a nearby batch
    params = dict(epsilon=0.2, cost=cost, tol=1e-10, max_iter=20000)
    warm = build_loss("m3g", warm_start=True, **params)
    cold = build_loss("m3g", **params)
    warm(z1)
    assert warm.last_stats["warm_started"] == 0.0
    x_warm, x_cold = z2.clone().requires_grad_(), z2.clone().requires_grad_()
    value_warm, value_cold = warm(x_warm), cold(x_cold)
    assert warm.last_stats["warm_started"] == 1.0 and warm.last_stats["converged"] == 1.0
    assert warm.last_stats["iterations"] < cold.last_stats["iterations"]
    assert value_warm.item() == pytest.approx(value_cold.item(), abs=1e-8)
    (grad_warm,), (grad_cold,) = torch.autograd.grad(value_warm, x_warm), torch.autograd.grad(value_cold, x_cold)
    assert torch.allclose(grad_warm, grad_cold, atol=1e-8)


def test_warm_start_converged_potentials_cost_zero_sweeps() -> None:
    z = embeddings(6, 4, seed=1)
    loss = build_loss("m3g", epsilon=0.2, warm_start=True)
    first = loss(z).item()
    second = loss(z).item()
    assert loss.last_stats["iterations"] == 0.0 and loss.last_stats["converged"] == 1.0
    assert second == pytest.approx(first, abs=1e-9)


def test_warm_start_state_dict_round_trip(tmp_path) -> None:
    z = embeddings(6, 3, seed=2)
    loss = build_loss("m3g", epsilon=0.2, warm_start=True)
    assert loss.state_dict()["_extra_state"] == {"potentials": None}
    loss(z)
    path = tmp_path / "loss.pt"
    torch.save(loss.state_dict(), path)
    restored = build_loss("m3g", epsilon=0.2, warm_start=True)
    restored.load_state_dict(torch.load(path, weights_only=True))
    assert torch.equal(restored.potentials, loss.potentials)
    restored(z)
    assert restored.last_stats["warm_started"] == 1.0 and restored.last_stats["iterations"] == 0.0
    restored(embeddings(5, 3, seed=2))  # another batch shape: cold start
    assert restored.last_stats["warm_started"] == 0.0
    with pytest.raises(ValueError, match="potentials"):
        restored.load_state_dict({"_extra_state": {"potentials": torch.tensor([float("nan")])}})
    with pytest.raises(ValueError, match="warm_start"):
        build_loss("m3g", warm_start="yes")


# --------------------------------------------------------------------------- fused k = 3 fast path
def _fused_ran(out: torch.Tensor) -> bool:
    return type(out.grad_fn).__name__.startswith("_FusedGradient")


def _value_grad_stats(raw: torch.Tensor, monkeypatch, fused: bool, **params) -> tuple[float, torch.Tensor, dict, bool]:
    loss = build_loss("m3g", backend="numba" if fused else "blocks", **params)
    x = raw.clone().requires_grad_()
    out = loss(x)
    out.backward()
    return out.item(), x.grad, dict(loss.last_stats), _fused_ran(out)


@pytest.mark.parametrize(
    ("n", "d", "eps", "dtype", "params"),
    [
        (3, 4, 0.3, torch.float64, {}),
        (17, 16, 0.05, torch.float64, {}),
        (17, 16, 0.2, torch.float64, {"init_potentials": "diagonal"}),  # the blocks' diagonal cold start
        (32, 128, 0.2, torch.float32, {}),
        (40, 32, 0.05, torch.float32, {}),
    ],
)
def test_fused_three_view_equals_general_path(
    n: int, d: int, eps: float, dtype: torch.dtype, params: dict, monkeypatch
) -> None:
    pytest.importorskip("numba")
    raw = (3.0 * torch.randn(n, 3, d, generator=torch.Generator().manual_seed(n), dtype=torch.float64)).to(dtype)
    raw[0, 1] = 0.0  # an all-zero row: normalization's eps branch (value and gradient)
    fused = _value_grad_stats(raw, monkeypatch, True, epsilon=eps, **params)
    general = _value_grad_stats(raw, monkeypatch, False, epsilon=eps, **params)
    assert fused[3] and not general[3]
    tol = 1e-12 if dtype == torch.float64 else 2e-6
    assert fused[0] == pytest.approx(general[0], abs=tol * 10)
    assert fused[1].dtype == dtype and torch.allclose(fused[1], general[1], atol=tol, rtol=1e-4)
    assert fused[2]["iterations"] == general[2]["iterations"] and fused[2]["converged"] == 1.0
    for key in ("ot", "mass", "marginal_error"):
        assert fused[2][key] == pytest.approx(general[2][key], abs=1e-9 if dtype == torch.float64 else 1e-4)


def test_fused_three_view_matches_brute_force_and_finite_differences() -> None:
    pytest.importorskip("numba")
    raw = torch.randn(4, 3, 5, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    loss = build_loss("m3g", epsilon=0.3, tol=1e-11, max_iter=20000)
    x = raw.clone().requires_grad_()
    value = loss(x)
    assert _fused_ran(value)
    assert value.item() == pytest.approx(
        brute_force_m3g(normalize(raw), 0.3, "cv", int(loss.last_stats["iterations"])), abs=1e-10
    )
    (grad,) = torch.autograd.grad(value, x)
    direction = torch.randn(raw.shape, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    h = 1e-5
    with torch.no_grad():
        numeric = (loss(raw + h * direction) - loss(raw - h * direction)).item() / (2 * h)
    assert (grad * direction).sum().item() == pytest.approx(numeric, rel=1e-5, abs=1e-8)
    # the reference: autograd through normalize + the materialized solver's Danskin surrogate
    x_ref = raw.clone().requires_grad_()
    ref, _ = m3g_materialized(normalize(x_ref), 0.3, "cv", 1e-11, 20000)
    (ref_grad,) = torch.autograd.grad(ref, x_ref)
    assert torch.allclose(grad, ref_grad, atol=1e-10)


def test_fused_three_view_warm_start_and_declined_inputs(monkeypatch) -> None:
    pytest.importorskip("numba")
    z1 = embeddings(9, 3, seed=5, noise=2.0)
    z2 = normalize(z1 + 0.02 * embeddings(9, 3, seed=6))
    results = {}
    for fused, backend in ((True, "numba"), (False, "blocks")):  # same warm-start sequence through both paths
        loss = build_loss("m3g", epsilon=0.2, tol=1e-10, max_iter=20000, warm_start=True, backend=backend)
        loss(z1)
        x = z2.clone().requires_grad_()
        out = loss(x)
        assert _fused_ran(out) == fused and loss.last_stats["warm_started"] == 1.0
        results[fused] = (out.item(), torch.autograd.grad(out, x)[0], loss.last_stats["iterations"], loss.potentials)
    assert results[True][0] == pytest.approx(results[False][0], abs=1e-12)
    assert torch.allclose(results[True][1], results[False][1], atol=1e-12)
    assert results[True][2] == results[False][2]
    assert torch.allclose(results[True][3], results[False][3], atol=1e-8)
    loss = build_loss("m3g")
    bad = embeddings(5, 3).clone()
    bad[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):  # declined: the general path's error
        loss(bad)
    assert not _fused_ran(loss(embeddings(5, 3).half().requires_grad_()))  # half: general path (float32)
    assert not _fused_ran(loss(embeddings(5, 4).requires_grad_()))  # k = 4
    assert _fused_ran(loss(embeddings(5, 3).requires_grad_()))
    largest = m3g.AUTO_NUMBA_ON_CPU[3]
    assert _fused_ran(loss(embeddings(largest, 3, d=4).requires_grad_()))
    assert not _fused_ran(loss(embeddings(largest + 1, 3, d=4).requires_grad_()))  # beyond the measured table
    monkeypatch.setattr(m3g, "AUTO_OVERRIDE", "blocks")  # MVAPP_M3G_BACKEND=blocks at import
    assert not _fused_ran(loss(embeddings(5, 3).requires_grad_()))
    assert _fused_ran(build_loss("m3g", backend="numba")(embeddings(largest + 1, 3, d=4).requires_grad_()))


def test_removed_solver_loop_parameter_names_its_replacement() -> None:
    with pytest.raises(ValueError, match="loss.solver_loop: parameter removed from loss 'm3g': the sweeps always run"):
        build_loss("m3g", solver_loop="host")


# --------------------------------------------------------------------------- Anderson acceleration, diagonal start
@pytest.mark.parametrize(
    ("k", "n", "params", "dtype"),
    [
        (4, 6, {"anderson": 5}, torch.float64),
        (5, 4, {"anderson": 16, "init_potentials": "diagonal"}, torch.float64),
        (4, 6, {"init_potentials": "diagonal"}, torch.float64),
        (4, 6, {"anderson": 5}, torch.float32),  # training's dtype (the mixer keeps float64 copies)
    ],
)
def test_anderson_and_diagonal_start_are_exact_at_convergence(k: int, n: int, params: dict, dtype: torch.dtype) -> None:
    z = embeddings(n, k, seed=k, noise=1.0, dtype=dtype)  # partly aligned views: plain Alg. 1 needs 300-400 sweeps
    tol, atol = (1e-8, 1e-10) if dtype == torch.float64 else (1e-4, 1e-5)
    results = {}
    for name, extra in (("plain", {}), ("fast", params)):
        loss = build_loss("m3g", epsilon=0.2, tol=tol, max_iter=3000, **extra)
        x = z.clone().requires_grad_()
        value = loss(x)
        assert loss.last_stats["converged"] == 1.0
        results[name] = (value.item(), torch.autograd.grad(value, x)[0], loss.last_stats["iterations"])
    assert results["fast"][0] == pytest.approx(results["plain"][0], abs=atol)
    assert torch.allclose(results["fast"][1], results["plain"][1], atol=1e-7 if dtype == torch.float64 else 1e-4)
    if "anderson" in params:
        assert results["fast"][2] <= 0.3 * results["plain"][2]


def test_diagonal_split_gives_aligned_views_the_diagonal_plan() -> None:
    from multiview_app.losses.m3g import _cv_scale, _diagonal_split, _pair_grams
    from multiview_app.losses.sinkhorn import pairwise_sum_tensor

    n, k, eps = 5, 4, 0.2
    z = embeddings(n, k, seed=3)
    s = _cv_scale(k)
    grams = _pair_grams(z)
    g = _diagonal_split(grams, 2 * s / eps, s * k * (k - 1) / eps)
    log_plan = pairwise_sum_tensor(grams * (2 * s / eps), s * k * (k - 1) / eps)
    for l in range(k):
        log_plan = log_plan + g[l].reshape([n if a == l else 1 for a in range(k)])
    diagonal = torch.stack([log_plan[(i,) * k] for i in range(n)]).exp()
    assert torch.allclose(diagonal, torch.full((n,), 1 / n, dtype=torch.float64), atol=1e-12)


@pytest.mark.parametrize(
    "params", [{"anderson": -1}, {"anderson": 2.5}, {"anderson": True}, {"init_potentials": "ones"}]
)
def test_bad_acceleration_parameters_raise(params: dict) -> None:
    with pytest.raises(ValueError, match="anderson|init_potentials"):
        build_loss("m3g", **params)


@pytest.mark.parametrize("k", [2, 3, 4])
def test_cv_cost_is_scaled_circular_variance_with_rescaled_epsilon(k: int) -> None:
    """The documented deviation: Alg. 2's cv cost is a_k (1 - R^2), a_k = 4 k^2 / (k-1)^2, so
    M3G_alg2(z; eps) = a_k M3G_eq12(z; eps / a_k) (the objective is 1-homogeneous in (C, eps))."""
    z = embeddings(4, k, seed=k)
    eps = 0.3
    a_k = 4 * k**2 / (k - 1) ** 2
    alg2 = brute_force_m3g(z, eps, "cv", iters=400)
    eq12 = brute_force_m3g(z, eps / a_k, "circular_variance", iters=400)
    assert alg2 == pytest.approx(a_k * eq12, rel=1e-9, abs=1e-12)
    loss, _ = m3g_materialized(z, epsilon=eps, cost="cv", tol=1e-10, max_iter=5000)
    assert float(loss) == pytest.approx(alg2, rel=1e-3)  # the solver at its tolerance


def test_entropy_offset_follows_eq8() -> None:
    """The identity term is h(J, C) = <J, C> + eps <J, log J - 1> = diag - eps (log n + 1) (Eq. 8), not
    Eq. 14's printed + eps log n: with it the gap is >= 0 and vanishes for views the plan cannot improve."""
    n, eps = 5, 0.2
    z = embeddings(n, 3, seed=7)
    j = torch.zeros((n,) * 3, dtype=torch.float64)
    j[tuple(torch.arange(n) for _ in range(3))] = 1.0 / n
    support = j > 0
    entropy_term = eps * float((j[support] * (j[support].log() - 1)).sum())
    assert entropy_term == pytest.approx(-eps * (math.log(n) + 1), rel=1e-12)
    assert brute_force_m3g(z, eps, "cv", iters=400) >= -1e-9


@pytest.mark.parametrize("backend", ["blocks", "numba", "dense"])
@pytest.mark.parametrize("k", [3, 4, 6])
def test_every_backend_equals_the_dense_float64_reference(backend: str, k: int) -> None:
    # value and gradient w.r.t. the raw input (normalization included), at the view counts the configs use
    if backend == "numba":
        pytest.importorskip("numba")
    raw = 2.0 * embeddings(5, k, d=4, seed=k, noise=1.5)
    loss = build_loss("m3g", epsilon=0.5, tol=1e-11, max_iter=100000, backend=backend)
    x = raw.clone().requires_grad_()
    value = loss(x)
    (grad,) = torch.autograd.grad(value, x)
    x_ref = raw.clone().requires_grad_()
    reference, _ = m3g_materialized(normalize(x_ref), 0.5, "cv", 1e-11, 100000)
    (reference_grad,) = torch.autograd.grad(reference, x_ref)
    assert loss.last_stats["converged"] == 1.0
    assert value.item() == pytest.approx(reference.item(), abs=1e-10)
    assert torch.allclose(grad, reference_grad, atol=1e-9)
