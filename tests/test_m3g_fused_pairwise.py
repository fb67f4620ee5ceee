"""numba k > 3 MM-Sinkhorn sweeps (losses/sinkhorn_fast.py) vs the sweep blocks: values, gradients, sweep
counts, warm start, Anderson / diagonal start, the escalations, the auto table, and every case where they
must not run. The auto table is widened to every tested size here (the measured one routes only a few sizes)."""

from __future__ import annotations

import math
import subprocess
import sys
import warnings

import pytest
import torch

from multiview_app.losses import build_loss, m3g, sinkhorn_fast
from multiview_app.losses.base import normalize
from multiview_app.losses.m3g import _cv_scale, _diagonal_split, _pair_grams, m3g_materialized
from multiview_app.losses.sinkhorn import mm_sinkhorn_dense, mm_sinkhorn_pairwise, pairwise_sum_tensor
from multiview_app.losses.sinkhorn_fast import mm_sinkhorn_pairwise_numba

pytest.importorskip("numba")


@pytest.fixture(autouse=True)
def _one_thread_every_size_routed(monkeypatch):
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    monkeypatch.setattr(m3g, "AUTO_NUMBA_ON_CPU", {**m3g.AUTO_NUMBA_ON_CPU, 4: 64, 5: 64, 6: 64})
    monkeypatch.setattr(m3g, "AUTO_OVERRIDE", None)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def fused_calls(monkeypatch) -> list[bool]:
    """Records, per M3G solve, whether the dispatch chose the numba backend."""
    calls: list[bool] = []
    original = m3g.choose_backend

    def spy(*args):
        chosen = original(*args)
        calls.append(chosen == "numba")
        return chosen

    monkeypatch.setattr(m3g, "choose_backend", spy)
    return calls


def raw_embeddings(n: int, k: int, d: int = 6, seed: int = 0, noise: float = 1.0, dtype=torch.float64) -> torch.Tensor:
    """Unnormalized ``(n, k, d)``: a shared direction per item plus per-view noise (partly aligned views)."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(n, 1, d, generator=g, dtype=torch.float64)
    return (2.0 * (base + noise * torch.randn(n, k, d, generator=g, dtype=torch.float64))).to(dtype)


def run_loss(raw: torch.Tensor, monkeypatch, fused: bool, **params) -> tuple[float, torch.Tensor, dict]:
    loss = build_loss("m3g", backend="numba" if fused else "blocks", **params)
    x = raw.clone().requires_grad_()
    out = loss(x)
    (grad,) = torch.autograd.grad(out, x)
    return out.item(), grad, dict(loss.last_stats)


def _factors(n: int, k: int, seed: int, eps: float = 0.2, noise: float = 1.0) -> tuple[torch.Tensor, float]:
    z = normalize(raw_embeddings(n, k, seed=seed, noise=noise))
    s = _cv_scale(k)
    return _pair_grams(z) * (2 * s / eps), s * k * (k - 1) / eps


CASES = [  # (n, k, epsilon, extra loss parameters, view noise): every case converges at tol 1e-9
    (5, 4, 0.2, {}, 1.0),
    (6, 4, 0.05, {"anderson": 5}, 2.0),
    (4, 5, 0.2, {"anderson": 16, "init_potentials": "diagonal"}, 1.0),
    (3, 5, 0.05, {"init_potentials": "diagonal"}, 1.0),
    (3, 6, 0.2, {"anderson": 16, "init_potentials": "diagonal"}, 1.0),
    (4, 6, 0.05, {"anderson": 16, "init_potentials": "diagonal"}, 1.0),
    (7, 4, 0.2, {"anderson": 16, "init_potentials": "diagonal"}, 1.0),  # 49 rows: the 4-row blocks' remainder
]


@pytest.mark.parametrize(("n", "k", "eps", "params", "noise"), CASES)
def test_numba_equals_the_blocks_float64(
    n: int, k: int, eps: float, params: dict, noise: float, monkeypatch, fused_calls
) -> None:
    raw = raw_embeddings(n, k, seed=n * k, noise=noise)
    settings = dict(epsilon=eps, tol=1e-9, max_iter=5000, **params)
    fused = run_loss(raw, monkeypatch, True, **settings)
    assert fused_calls == [True]
    general = run_loss(raw, monkeypatch, False, **settings)
    assert fused_calls == [True, False]
    assert fused[2]["converged"] == general[2]["converged"] == 1.0
    assert fused[2]["iterations"] == general[2]["iterations"]
    assert fused[0] == pytest.approx(general[0], abs=1e-12, rel=1e-10)
    assert torch.allclose(fused[1], general[1], atol=1e-11, rtol=1e-9)
    for key in ("ot", "mass"):
        assert fused[2][key] == pytest.approx(general[2][key], abs=1e-11, rel=1e-8)
    # the stopping-rule error of the final plan, both below tol (Anderson's least squares amplify round-off
    # near convergence: equal to a few percent, not to float64 precision)
    assert fused[2]["marginal_error"] == pytest.approx(general[2]["marginal_error"], rel=0.2)


@pytest.mark.parametrize(("n", "k"), [(16, 6), (9, 5)])
def test_numba_equals_the_blocks_float32_training_settings(n: int, k: int, monkeypatch, fused_calls) -> None:
    # the EEG demo's loss (epsilon 0.2, tol 1e-3, anderson 16, diagonal start) in training's dtype
    raw = raw_embeddings(n, k, d=16, seed=n, dtype=torch.float32)
    settings = dict(epsilon=0.2, max_iter=300, anderson=16, init_potentials="diagonal")
    fused = run_loss(raw, monkeypatch, True, **settings)
    general = run_loss(raw, monkeypatch, False, **settings)
    assert fused_calls == [True, False]
    assert fused[1].dtype == torch.float32
    assert fused[2]["iterations"] == general[2]["iterations"]
    assert fused[0] == pytest.approx(general[0], abs=1e-4, rel=1e-4)
    assert torch.allclose(fused[1], general[1], atol=1e-5, rtol=1e-3)


def test_solver_pair_marginals_match_dense_reference() -> None:
    factors, offset = _factors(4, 5, seed=7)
    fast = mm_sinkhorn_pairwise_numba(factors, offset, 1e-10, 20000, None, 0)
    dense = mm_sinkhorn_dense(pairwise_sum_tensor(factors, offset), 1e-10, 20000)
    assert fast.path == "factorized-numba"
    assert fast.converged and dense.converged
    for l in range(5):
        for m in range(l + 1, 5):
            assert torch.allclose(fast.pair_marginals[l, m], dense.pair_marginals[l, m], atol=1e-10)
    assert fast.mass == pytest.approx(dense.mass, abs=1e-10)


def test_warm_start_sequence_equals_the_blocks(monkeypatch) -> None:
    z1 = raw_embeddings(5, 5, seed=1)
    z2 = z1 + 0.05 * raw_embeddings(5, 5, seed=2)
    results = {}
    for fused in (True, False):
        backend = "numba" if fused else "blocks"
        loss = build_loss("m3g", epsilon=0.2, tol=1e-9, max_iter=5000, warm_start=True, anderson=5, backend=backend)
        loss(z1)
        x = z2.clone().requires_grad_()
        out = loss(x)
        assert loss.last_stats["warm_started"] == 1.0
        results[fused] = (out.item(), torch.autograd.grad(out, x)[0], loss.last_stats["iterations"], loss.potentials)
    assert results[True][0] == pytest.approx(results[False][0], abs=1e-12)
    assert torch.allclose(results[True][1], results[False][1], atol=1e-11)
    assert results[True][2] == results[False][2]
    assert torch.allclose(results[True][3], results[False][3], atol=1e-9)


def test_converged_warm_start_costs_zero_sweeps() -> None:
    factors, offset = _factors(4, 4, seed=3)
    first = mm_sinkhorn_pairwise_numba(factors, offset, 1e-8, 5000, None, 0)
    again = mm_sinkhorn_pairwise_numba(factors, offset, 1e-8, 5000, first.log_potentials, 0)
    assert again.iterations == 0 and again.converged
    assert torch.allclose(again.pair_marginals, first.pair_marginals, atol=1e-12)


def test_gradcheck_through_normalization() -> None:
    loss = build_loss("m3g", epsilon=0.3, tol=1e-13, max_iter=100000, anderson=5, init_potentials="diagonal")
    x = raw_embeddings(3, 4, d=3, seed=5).requires_grad_()
    assert torch.autograd.gradcheck(loss, (x,), eps=1e-6, atol=1e-6, rtol=1e-4)


def test_matches_materialized_reference_gradient() -> None:
    raw = raw_embeddings(3, 5, d=4, seed=6)  # epsilon 0.5: plain Alg. 1 converges in ~300 sweeps
    loss = build_loss("m3g", epsilon=0.5, tol=1e-12, max_iter=100000)
    x = raw.clone().requires_grad_()
    value = loss(x)
    assert loss.last_stats["converged"] == 1.0
    (grad,) = torch.autograd.grad(value, x)
    x_ref = raw.clone().requires_grad_()
    ref, _ = m3g_materialized(normalize(x_ref), 0.5, "cv", 1e-12, 100000)
    (ref_grad,) = torch.autograd.grad(ref, x_ref)
    assert value.item() == pytest.approx(ref.item(), abs=1e-11)
    assert torch.allclose(grad, ref_grad, atol=1e-10)


# --------------------------------------------------------------------------- the table; where it must not run
def test_the_measured_table_routes_the_eeg_demo(monkeypatch) -> None:
    monkeypatch.undo()  # the table as shipped
    # the EEG demo: 16 items, 6 views, float32 on the CPU
    assert m3g.choose_backend("auto", "cv", "cpu", torch.float32, 6, 16) == "numba"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("auto", "cv", "cpu", torch.float32, 4, 4), "numba"),
        (("auto", "cv", "cpu", torch.float32, 4, 65), "blocks"),  # above the table's largest n
        (("auto", "cv", "cpu", torch.float16, 4, 4), "blocks"),  # dtype
        (("auto", "cv", "cuda", torch.float32, 4, 4), "blocks"),  # device
        (("numba", "cv", "cuda", torch.float32, 4, 4), "blocks"),
        (("auto", "cv", "cpu", torch.float32, 7, 4), "blocks"),  # k beyond the table
        (("auto", "csd", "cpu", torch.float32, 4, 4), "dense"),
        (("dense", "cv", "cpu", torch.float32, 4, 4), "dense"),
        (("blocks", "cv", "cpu", torch.float32, 4, 4), "blocks"),
    ],
)
def test_the_dispatch_table(args: tuple, expected: str) -> None:
    assert m3g.choose_backend(*args) == expected


def test_the_environment_overrides_auto_only(monkeypatch) -> None:
    monkeypatch.setattr(m3g, "AUTO_OVERRIDE", "dense")
    assert m3g.choose_backend("auto", "cv", "cpu", torch.float32, 4, 4) == "dense"
    assert m3g.choose_backend("blocks", "cv", "cpu", torch.float32, 4, 4) == "blocks"
    loss = build_loss("m3g", epsilon=0.5)
    loss(raw_embeddings(4, 4, seed=8))
    assert loss.last_stats["iterations"] > 0


def test_declined_cases_run_the_blocks(monkeypatch, fused_calls) -> None:
    raw = raw_embeddings(4, 4, seed=8)
    build_loss("m3g", epsilon=0.5, backend="blocks")(raw)
    build_loss("m3g", epsilon=0.5)(raw)
    assert fused_calls == [False, True]
    monkeypatch.setitem(m3g.AUTO_NUMBA_ON_CPU, 4, 3)  # n = 4 above the table's largest n
    build_loss("m3g", epsilon=0.5)(raw)
    assert fused_calls[-1] is False
    build_loss("m3g", epsilon=0.5)(raw.half())  # dtype
    assert fused_calls[-1] is False


def test_bad_backends_raise(monkeypatch) -> None:
    with pytest.raises(ValueError, match="unknown backend 'gpu'"):
        build_loss("m3g", backend="gpu")
    with pytest.raises(ValueError, match="backend 'numba' solves cost 'cv' only"):
        build_loss("m3g", cost="csd", backend="numba")
    monkeypatch.setattr(sinkhorn_fast, "kernels", lambda: None)
    with pytest.raises(ValueError, match="needs numba"):
        build_loss("m3g", backend="numba")


def test_without_numba_the_blocks_run(monkeypatch, fused_calls) -> None:
    monkeypatch.setattr(sinkhorn_fast, "kernels", lambda: None)
    build_loss("m3g", epsilon=0.5)(raw_embeddings(4, 4, seed=9))
    assert fused_calls == [False]


def test_bad_warm_start_is_left_to_the_blocks_error() -> None:
    z = normalize(raw_embeddings(4, 4, seed=9))
    with pytest.raises(ValueError, match="init must be finite of shape"):
        m3g.m3g_factorized(z, init=torch.full((4, 4), math.nan, dtype=z.dtype))


def test_nonfinite_input_raises_before_the_numba_solve(fused_calls) -> None:
    raw = raw_embeddings(4, 4, seed=9)
    raw[1, 2, 0] = math.nan
    with pytest.raises(ValueError, match="NaN"):
        build_loss("m3g")(raw)


def test_float32_underflow_continues_on_the_blocks_in_float64(monkeypatch) -> None:
    # near-antipodal views at tiny epsilon: float32 factors underflow -> the blocks' float64 retry
    raw = raw_embeddings(4, 4, seed=2, noise=3.0, dtype=torch.float32)
    results = {}
    for fused in (True, False):
        loss = build_loss("m3g", epsilon=0.01, max_iter=300, backend="numba" if fused else "blocks")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            results[fused] = (loss(raw).item(), dict(loss.last_stats))
    assert results[True][1]["float64_retry"] == results[False][1]["float64_retry"] == 1.0
    assert results[True][1]["iterations"] == results[False][1]["iterations"]
    assert results[True][0] == pytest.approx(results[False][0], abs=1e-5)


def test_beyond_float64_range_is_declined_and_ends_on_the_dense_path(monkeypatch) -> None:
    factors, _ = _factors(3, 4, seed=2, noise=3.0)
    factors = factors * 1000.0  # log-kernel range ~ e^10000
    assert mm_sinkhorn_pairwise_numba(factors, 0.0, 1e-6, 500, None, 0) is None
    fast = mm_sinkhorn_pairwise(factors, 0.0, 1e-6, 500)
    dense = mm_sinkhorn_dense(pairwise_sum_tensor(factors), 1e-6, 500)
    assert fast.path == "factorized->dense"
    assert fast.iterations == dense.iterations and fast.converged == dense.converged


def test_diagonal_start_is_used_by_the_numba_solve(monkeypatch) -> None:
    # the diagonal split is absorbed into the factors before the first sweep: same sweeps as the blocks
    n, k, eps = 5, 5, 0.2
    z = normalize(raw_embeddings(n, k, seed=4, noise=0.3))
    s = _cv_scale(k)
    grams = _pair_grams(z)
    scale, offset = 2 * s / eps, s * k * (k - 1) / eps
    init = _diagonal_split(grams, scale, offset)
    fast = mm_sinkhorn_pairwise_numba(grams * scale, offset, 1e-7, 5000, init, 16)
    blocks = mm_sinkhorn_pairwise(grams * scale, offset, 1e-7, 5000, init=init, anderson=16)
    assert fast.path == "factorized-numba" and blocks.path == "factorized"
    assert fast.iterations == blocks.iterations
    assert torch.allclose(fast.log_potentials, blocks.log_potentials, atol=1e-9)
    assert math.isclose(fast.mass, blocks.mass, abs_tol=1e-12)


def test_warmup_entry_point_runs_the_demo_solver_and_reports_its_time():
    done = subprocess.run(
        [sys.executable, "-m", "multiview_app.losses.warmup", "4", "5"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("m3g solver for 4 x 5 ready in ")
