"""MVEB: value vs brute force, Stein linear system, bandwidth rule, beta = 0, gradient only through z."""

from __future__ import annotations

import pytest
import reference_losses as ref
import torch

from multiview_app.losses import build_loss
from multiview_app.losses.mveb import blockwise_bandwidth, stein_score, stein_score_blockwise, vmf_bandwidth


def embeddings(n: int, k: int, d: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(n, 1, d, generator=g, dtype=torch.float64)
    return base + 0.9 * torch.randn(n, k, d, generator=g, dtype=torch.float64)


def unit(z: torch.Tensor) -> torch.Tensor:
    return z / z.norm(dim=-1, keepdim=True)


@pytest.fixture()
def tiny_blocks(monkeypatch):
    """Blocks of a few kernel rows on the blockwise path (many block boundaries at test sizes)."""
    import multiview_app.losses.contrastive as contrastive

    monkeypatch.setattr(contrastive, "_BLOCK_LOGITS", 37)


@pytest.mark.parametrize("chunked", [False, True])
@pytest.mark.parametrize("k", [2, 3, 5])
def test_matches_bruteforce_reference(k: int, chunked: bool, tiny_blocks) -> None:
    z = embeddings(6, k, 4, seed=k)
    loss = build_loss("mveb", beta=0.5, eta=0.05, chunked=chunked)
    value = loss(z).item()
    assert value == pytest.approx(ref.mveb(z, beta=0.5, eta=0.05), rel=1e-8)
    u = unit(z)
    pairs = [(a, b) for a in range(k) for b in range(a + 1, k)]
    alignment = sum((u[:, a] * u[:, b]).sum(-1).mean().item() for a, b in pairs) / len(pairs)
    assert loss.last_stats["alignment"] == pytest.approx(alignment, rel=1e-12)
    assert value == pytest.approx(-alignment + 0.5 * loss.last_stats["entropy_surrogate"], rel=1e-10)
    bandwidths = [ref.bandwidth(u[:, a]) for a in range(k)]
    assert loss.last_stats["bandwidth"] == pytest.approx(sum(bandwidths) / k, rel=1e-12)


@pytest.mark.parametrize("estimator", [stein_score, stein_score_blockwise])
@pytest.mark.parametrize("eta", [0.01, 1.0])
def test_stein_estimate_solves_linear_system(eta: float, estimator) -> None:
    x = unit(embeddings(7, 1, 5, seed=3)[:, 0])
    kernel, g, delta = ref.stein_pieces(x)
    score, bandwidth = estimator(x, eta)
    assert bandwidth.item() == pytest.approx(delta, rel=1e-12)
    residual = (kernel + eta * torch.eye(7, dtype=torch.float64)) @ score + g
    assert residual.abs().max().item() < 1e-8 * g.abs().max().item()
    assert not score.requires_grad


@pytest.mark.parametrize("estimator", [stein_score, stein_score_blockwise])
def test_stein_estimate_float32_input_keeps_dtype_and_accuracy(estimator) -> None:
    x = unit(embeddings(16, 1, 8, seed=4)[:, 0])
    s64, _ = estimator(x, 0.01)
    s32, _ = estimator(x.float(), 0.01)
    assert s32.dtype == torch.float32
    torch.testing.assert_close(s32.double(), s64, rtol=1e-3, atol=1e-3 * s64.abs().max().item())


def test_bandwidth_is_median_pairwise_cosine_distance() -> None:
    # 4 unit vectors in the plane at angles 0, 60, 120, 180 deg: distances 1 - cos
    angles = torch.tensor([0.0, 60.0, 120.0, 180.0], dtype=torch.float64).deg2rad()
    x = torch.stack([angles.cos(), angles.sin()], dim=1)
    # pairs: 60 (x3), 120 (x2), 180 (x1) -> distances 0.5, 0.5, 0.5, 1.5, 1.5, 2 -> median (0.5 + 1.5) / 2
    assert vmf_bandwidth(x).item() == pytest.approx(1.0)
    assert ref.bandwidth(x) == pytest.approx(1.0)


@pytest.mark.parametrize("chunked", [False, True])
def test_bandwidth_floor(chunked: bool) -> None:
    x = unit(torch.ones(5, 3, dtype=torch.float64) + 1e-3 * embeddings(5, 1, 3, seed=1)[:, 0])
    assert vmf_bandwidth(x).item() == 0.1
    loss = build_loss("mveb", chunked=chunked)
    loss(x[:, None, :].repeat(1, 2, 1))
    assert loss.last_stats["bandwidth"] == pytest.approx(0.1)


@pytest.mark.parametrize("chunked", [False, True])
def test_beta_zero_is_pure_alignment(chunked: bool) -> None:
    z = embeddings(5, 3, 4, seed=6)
    x = z.clone().requires_grad_()
    value = build_loss("mveb", beta=0.0, chunked=chunked)(x)
    value.backward()
    y = z.clone().requires_grad_()
    u = unit(y)
    expected = -torch.stack([(u[:, a] * u[:, b]).sum(-1).mean() for a, b in [(0, 1), (0, 2), (1, 2)]]).mean()
    expected.backward()
    assert value.item() == pytest.approx(expected.item(), rel=1e-12)
    torch.testing.assert_close(x.grad, y.grad, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("chunked", [False, True])
def test_gradient_flows_only_through_z_with_score_detached(chunked: bool, tiny_blocks) -> None:
    n, k, beta = 6, 3, 0.7
    z = embeddings(n, k, 4, seed=8)
    x = z.clone().requires_grad_()
    build_loss("mveb", beta=beta, chunked=chunked)(x).backward()
    # the same objective with the score as a constant computed by the brute-force reference
    u0 = unit(z)
    scores = []
    for a in range(k):
        kernel, g, _ = ref.stein_pieces(u0[:, a])
        scores.append(-torch.linalg.solve(kernel + 0.01 * torch.eye(n, dtype=torch.float64), g))
    score = torch.stack(scores, dim=1)
    y = z.clone().requires_grad_()
    u = unit(y)
    pairs = [(a, b) for a in range(k) for b in range(a + 1, k)]
    alignment = torch.stack([(u[:, a] * u[:, b]).sum(-1).mean() for a, b in pairs]).mean()
    (-alignment + beta * (score * u).sum(-1).mean()).backward()
    torch.testing.assert_close(x.grad, y.grad, rtol=1e-7, atol=1e-10)


def test_float32_close_to_float64() -> None:
    z = embeddings(32, 2, 16, seed=9)
    loss = build_loss("mveb")
    v32 = loss(z.float())
    assert v32.dtype == torch.float32 and torch.isfinite(v32)
    assert v32.item() == pytest.approx(loss(z).item(), rel=1e-4, abs=1e-5)


@pytest.mark.parametrize("params, word", [({"beta": -0.1}, "beta"), ({"eta": 0.0}, "eta"), ({"beta": "x"}, "beta")])
def test_bad_parameters(params: dict, word: str) -> None:
    with pytest.raises(ValueError, match=f"mveb.*{word}"):
        build_loss("mveb", **params)


# --------------------------------------------------------------------------- blockwise (chunked) path
@pytest.mark.parametrize("n, k, d, spread", [(40, 2, 8, 0.9), (33, 3, 6, 0.2)])
def test_chunked_path_equals_dense_path(n: int, k: int, d: int, spread: float, monkeypatch) -> None:
    """Values, gradients and stats of both paths agree to float64 tolerance, with a Nystrom rank below
    n (so conjugate gradients really iterate) and blocks of a few rows."""
    import multiview_app.losses.contrastive as contrastive
    import multiview_app.losses.mveb as mveb

    monkeypatch.setattr(mveb, "NYSTROM_RANK", 8)
    monkeypatch.setattr(contrastive, "_BLOCK_LOGITS", 12 * n)
    g = torch.Generator().manual_seed(n)
    z = torch.randn(n, 1, d, generator=g, dtype=torch.float64) + spread * torch.randn(
        n, k, d, generator=g, dtype=torch.float64
    )
    x_dense, x_chunked = z.clone().requires_grad_(), z.clone().requires_grad_()
    dense, chunked = build_loss("mveb", beta=0.3, chunked=False), build_loss("mveb", beta=0.3, chunked=True)
    value_dense, value_chunked = dense(x_dense), chunked(x_chunked)
    assert value_chunked.item() == pytest.approx(value_dense.item(), rel=1e-10, abs=1e-12)
    value_dense.backward()
    value_chunked.backward()
    torch.testing.assert_close(x_chunked.grad, x_dense.grad, rtol=1e-9, atol=1e-12)
    assert chunked.last_stats.keys() == dense.last_stats.keys()
    for key, value in dense.last_stats.items():
        assert chunked.last_stats[key] == pytest.approx(value, rel=1e-10, abs=1e-12)
    score_dense, _ = stein_score(unit(z).transpose(0, 1), 0.01)
    score_chunked, _ = stein_score_blockwise(unit(z).transpose(0, 1), 0.01, rows=4)
    torch.testing.assert_close(score_chunked, score_dense, rtol=1e-9, atol=1e-9 * score_dense.abs().max().item())


@pytest.mark.parametrize("n", [2, 3, 9, 24, 25])  # odd and even pair counts
@pytest.mark.parametrize("spread", [0.05, 0.5, 3.0])
def test_blockwise_bandwidth_is_the_exact_median(n: int, spread: float, monkeypatch) -> None:
    """Histogram refinement (few bins, nothing gathered before the range is one value or small) selects
    exactly the dense median, across block sizes, including the floor shortcut."""
    import multiview_app.losses.mveb as mveb

    monkeypatch.setattr(mveb, "_MEDIAN_BINS", 3)
    g = torch.Generator().manual_seed(n)
    x = unit(
        torch.randn(1, 5, generator=g, dtype=torch.float64)
        + spread * torch.randn(n, 5, generator=g, dtype=torch.float64)
    )
    expected = vmf_bandwidth(x).item()
    for rows in (1, 4, n):
        for gather_max in (1, 2, 1 << 20):
            assert blockwise_bandwidth(x, rows=rows, gather_max=gather_max).item() == pytest.approx(expected, rel=1e-14)


def test_blockwise_bandwidth_with_ties() -> None:
    """Repeated points: many equal distances (the refinement stops at a one-value range)."""
    angles = torch.tensor([0.0, 0.0, 0.0, 90.0, 90.0, 180.0, 180.0, 180.0], dtype=torch.float64).deg2rad()
    x = torch.stack([angles.cos(), angles.sin()], dim=1)
    for gather_max in (1, 3, 100):
        assert blockwise_bandwidth(x, rows=3, gather_max=gather_max).item() == pytest.approx(vmf_bandwidth(x).item())
    basis = torch.eye(6, dtype=torch.float64)  # every pair distance is exactly 1: a one-value range at once
    assert blockwise_bandwidth(basis, rows=2, gather_max=1).item() == vmf_bandwidth(basis).item() == 1.0


def test_blockwise_solver_warns_when_not_converged_and_keeps_global_rng(monkeypatch) -> None:
    import multiview_app.losses.mveb as mveb

    monkeypatch.setattr(mveb, "NYSTROM_RANK", 1)
    x = unit(embeddings(12, 1, 4, seed=2)[:, 0])
    state = torch.random.get_rng_state()
    with pytest.warns(RuntimeWarning, match="mveb: blockwise Stein solve stopped after 2 conjugate-gradient steps"):
        stein_score_blockwise(x, 0.01, max_iter=2)
    assert torch.equal(torch.random.get_rng_state(), state)


def test_automatic_choice_and_bad_chunked(monkeypatch) -> None:
    import multiview_app.losses.contrastive as contrastive
    import multiview_app.losses.mveb as mveb

    calls = []
    original = mveb.stein_score_blockwise
    monkeypatch.setattr(mveb, "stein_score_blockwise", lambda *a, **kw: calls.append(1) or original(*a, **kw))
    z = embeddings(9, 2, 4, seed=3)
    build_loss("mveb")(z)  # 2 x 9 x 9 kernel entries: dense
    assert not calls
    monkeypatch.setattr(contrastive, "DENSE_MAX_LOGITS", 100)  # 162 > 100: blockwise
    build_loss("mveb")(z)
    assert calls
    with pytest.raises(ValueError, match="mveb.*chunked"):
        build_loss("mveb", chunked="yes")


def test_stein_score_survives_a_thread_count_change() -> None:
    """torch's MKL batched LU returns invalid pivots after set_num_threads(1) -> (2) in one process (seen with
    torch 2.14 on this project's CPU machine: the suite's thread-pinning fixtures do exactly that); the
    score solve (Cholesky of the positive definite K + eta I) must not depend on it."""
    from multiview_app.losses.mveb import stein_score

    z = torch.nn.functional.normalize(
        torch.randn(4, 256, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(0)), dim=-1
    )
    before = torch.get_num_threads()
    expected, _ = stein_score(z, 0.1)
    try:
        torch.set_num_threads(1)
        torch.set_num_threads(2)
        got, _ = stein_score(z, 0.1)
    finally:
        torch.set_num_threads(before)
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-12)
    kernel_solution = torch.stack([torch.linalg.solve(*_system(z[i], 0.1)) for i in range(4)])
    torch.testing.assert_close(got, -kernel_solution, rtol=1e-8, atol=1e-10)


def _system(x: torch.Tensor, eta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(K + eta I, G)`` of the vMF Stein estimator for one view ``x`` ``(n, d)`` (2-D solves are unaffected)."""
    from multiview_app.losses.mveb import bandwidth_from_gram

    gram = x @ x.T
    delta = bandwidth_from_gram(gram)
    kernel = torch.exp(gram / delta)
    return kernel + eta * torch.eye(len(x), dtype=x.dtype), x / delta * kernel.sum(dim=-1, keepdim=True)


def test_conjugate_gradient_in_blocks_equals_step_by_step_and_reads_once_per_block(monkeypatch) -> None:
    """The blockwise CG reads its residual once per ``block`` steps; the steps of a block past the stop
    change nothing, so every block size gives the step-by-step solve's solution and step count exactly."""
    from _host_reads import HostReads

    from multiview_app.losses.mveb import conjugate_gradient, kernel_matmul

    x = unit(embeddings(30, 1, 5, seed=4)[:, 0])
    rhs = torch.randn(30, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))

    def apply(v: torch.Tensor) -> torch.Tensor:
        return kernel_matmul(x, 0.5, v, rows=7).add_(v, alpha=0.01)

    expected, steps, residual = conjugate_gradient(apply, rhs, 1e-10, 200, block=1)
    assert 3 < steps < 200 and residual <= 1e-10
    for block in (2, 4, 7, 500):
        reads = HostReads()
        with monkeypatch.context() as patched:
            reads.patch(patched, nonzero=True, transfers=True)
            solution, block_steps, block_residual = conjugate_gradient(apply, rhs, 1e-10, 200, block=block)
        assert (block_steps, block_residual) == (steps, residual)
        assert torch.equal(solution, expected)
        # one read per block started (the last one finds the stop), plus the step count and the residual
        assert len(reads.seen) <= -(-steps // block) + 1 + 2, "\n".join(reads.seen)


def test_tiny_ridge_is_raised_to_the_cholesky_safe_one() -> None:
    """A collapsed batch (every kernel entry exp(10)) with a ridge far below rounding: the ridge is raised
    to ``cholesky_safe_ridge(n)`` (no LU fallback, no host read), the score is finite and solves that
    system; the default ridge is above it at every size the dense path takes."""
    from multiview_app.losses.contrastive import DENSE_MAX_LOGITS
    from multiview_app.losses.mveb import cholesky_safe_ridge

    assert cholesky_safe_ridge(int(DENSE_MAX_LOGITS**0.5)) < 0.01  # n = 8192, k = 1
    x = unit(torch.ones(64, 5, dtype=torch.float64) + 1e-9 * embeddings(64, 1, 5, seed=5)[:, 0])
    score, _ = stein_score(x, 1e-15)
    assert torch.isfinite(score).all()
    system, g = _system(x, cholesky_safe_ridge(64))
    torch.testing.assert_close(system @ score, -g, rtol=1e-6, atol=1e-6 * g.abs().max().item())
