"""Contrastive / BYOL / poly-view losses against brute-force float64 references (issue 2, losses 1-6)."""

from __future__ import annotations

import math

import pytest
import reference_losses as ref
import torch

from multiview_app.losses import build_loss

REFERENCES = {
    "infonce_pwe": ref.infonce_pwe,
    "infonce_ave": ref.infonce_ave,
    "byol_pwe": ref.byol_pwe,
    "byol_ave": ref.byol_ave,
    "pvc_geometric": ref.pvc_geometric,
    "pvc_arithmetic": ref.pvc_arithmetic,
    "pvc_sufficient": ref.pvc_sufficient,
    "aggnce": ref.aggnce,
}
TEMPERATURE_LOSSES = [name for name in REFERENCES if not name.startswith("byol")]


def embeddings(n: int, k: int, d: int, seed: int = 0, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Random, not normalized, ``(n, k, d)`` embeddings with correlated views."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(n, 1, d, generator=g, dtype=torch.float64)
    return (base + 0.7 * torch.randn(n, k, d, generator=g, dtype=torch.float64)).mul(3.0).to(dtype)


@pytest.mark.parametrize("k", [2, 3, 5])
@pytest.mark.parametrize("name", list(REFERENCES))
def test_matches_bruteforce_reference(name: str, k: int) -> None:
    z = embeddings(5, k, 4, seed=k)
    value = build_loss(name)(z)
    assert value.dim() == 0 and value.dtype == torch.float64
    assert value.item() == pytest.approx(REFERENCES[name](z), rel=1e-10, abs=1e-10)


@pytest.mark.parametrize("name", TEMPERATURE_LOSSES)
def test_temperature_is_used(name: str) -> None:
    z = embeddings(4, 3, 3, seed=11)
    value = build_loss(name, tau=0.37)(z).item()
    assert value == pytest.approx(REFERENCES[name](z, tau=0.37), rel=1e-10)
    assert value != pytest.approx(REFERENCES[name](z, tau=0.1), rel=1e-3)


@pytest.mark.parametrize("name", list(REFERENCES))
def test_float32_close_to_float64(name: str) -> None:
    z = embeddings(6, 3, 8, seed=3)
    loss = build_loss(name)
    v32 = loss(z.float())
    assert v32.dtype == torch.float32
    assert v32.item() == pytest.approx(loss(z).item(), rel=1e-5, abs=1e-5)


@pytest.mark.parametrize("name", list(REFERENCES))
def test_gradcheck(name: str) -> None:
    z = embeddings(3, 3, 3, seed=5).requires_grad_()
    loss = build_loss(name, tau=0.5) if name in TEMPERATURE_LOSSES else build_loss(name)
    assert torch.autograd.gradcheck(loss, (z,), eps=1e-6, atol=1e-7)


def test_k2_poly_view_losses_equal_nt_xent() -> None:
    z = embeddings(6, 2, 5, seed=7)
    expected = ref.nt_xent(z, tau=0.2)
    for name in ["pvc_geometric", "pvc_arithmetic", "pvc_sufficient", "aggnce", "flatnce"]:
        assert build_loss(name, tau=0.2)(z).item() == pytest.approx(expected, rel=1e-10), name


def test_geometric_and_arithmetic_differ_for_k_above_2() -> None:
    z = embeddings(5, 4, 6, seed=8)
    geometric = build_loss("pvc_geometric")(z).item()
    arithmetic = build_loss("pvc_arithmetic")(z).item()
    assert arithmetic < geometric  # Jensen: -log(mean l) <= -mean(log l), strict for unequal l


@pytest.mark.parametrize("name", list(REFERENCES))
def test_permutation_invariance_items_and_views(name: str) -> None:
    z = embeddings(6, 4, 5, seed=9)
    loss = build_loss(name)
    value = loss(z).item()
    g = torch.Generator().manual_seed(1)
    items = torch.randperm(6, generator=g)
    views = torch.randperm(4, generator=g)
    assert loss(z[items]).item() == pytest.approx(value, rel=1e-12)
    assert loss(z[:, views]).item() == pytest.approx(value, rel=1e-12)


def test_scale_invariance_from_normalization() -> None:
    z = embeddings(5, 3, 4, seed=2)
    loss = build_loss("pvc_sufficient")
    assert loss(z * 17.0).item() == pytest.approx(loss(z).item(), rel=1e-12)


@pytest.mark.parametrize("name", ["pvc_geometric", "pvc_arithmetic", "pvc_sufficient"])
def test_mi_lower_bound_stat(name: str) -> None:
    n, k = 5, 3
    z = embeddings(n, k, 4, seed=4)
    loss = build_loss(name)
    value = loss(z).item()
    assert loss.last_stats["loss"] == pytest.approx(value)
    assert loss.last_stats["mi_lower_bound"] == pytest.approx(math.log(n * k - k + 1) - value, rel=1e-12)


def test_pvc_bound_approaches_log_b_minus_m_plus_1_for_separated_items() -> None:
    # identical views, orthogonal items: every l -> 1, the bound -> log(nk - k + 1)
    n, k = 4, 3
    z = torch.eye(n, dtype=torch.float64)[:, None, :].repeat(1, k, 1)
    loss = build_loss("pvc_geometric", tau=0.01)
    assert loss(z).item() == pytest.approx(0.0, abs=1e-20)
    assert loss.last_stats["mi_lower_bound"] == pytest.approx(math.log(n * k - k + 1))


def test_byol_perfect_alignment_is_zero() -> None:
    z = embeddings(4, 1, 6, seed=1).repeat(1, 3, 1)
    for name in ["byol_pwe", "byol_ave"]:
        assert build_loss(name)(z).item() == pytest.approx(0.0, abs=1e-12)


def _masked_lse(anchors: torch.Tensor, targets: torch.Tensor, tau: float) -> torch.Tensor:
    """Plain autograd version of other_item_logsumexp: full logits, own item masked to -inf."""
    n = anchors.shape[0]
    logits = torch.einsum("iad,jgd->iajg", anchors, targets) / tau
    own = torch.eye(n, dtype=torch.bool)[:, None, :, None]
    return torch.logsumexp(logits.masked_fill(own, float("-inf")).flatten(2), dim=-1)


@pytest.mark.parametrize("tau", [0.5, 0.1, 0.002])  # 0.002: float64 falls back to the general path
@pytest.mark.parametrize("k", [2, 3, 5])
def test_other_item_logsumexp_paths_agree(k: int, tau: float) -> None:
    from multiview_app.losses.contrastive import other_item_logsumexp

    z = torch.nn.functional.normalize(embeddings(5, k, 4, seed=k), dim=-1)
    q = torch.nn.functional.normalize(embeddings(5, k, 4, seed=k + 1), dim=-1)
    for anchors, targets in [(z, z), (z, q)]:
        a1 = anchors.clone().requires_grad_()
        t1 = a1 if targets is anchors else targets.clone().requires_grad_()
        a2 = anchors.clone().requires_grad_()
        t2 = a2 if targets is anchors else targets.clone().requires_grad_()
        weights = torch.rand(5, k, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
        fast = other_item_logsumexp(a1, t1, tau)
        slow = _masked_lse(a2, t2, tau)
        torch.testing.assert_close(fast, slow, rtol=1e-12, atol=1e-12)
        (fast * weights).sum().backward()
        (slow * weights).sum().backward()
        torch.testing.assert_close(a1.grad, a2.grad, rtol=1e-9, atol=1e-9)
        if targets is not anchors:
            torch.testing.assert_close(t1.grad, t2.grad, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", ["pvc_geometric", "pvc_arithmetic", "pvc_sufficient", "aggnce", "flatnce"])
@pytest.mark.parametrize("tau", [0.1, 0.01])  # 0.01 in float32 takes the per-row-max path
def test_float32_small_temperature_is_finite_and_accurate(name: str, tau: float) -> None:
    z = embeddings(16, 3, 8, seed=12)
    loss = build_loss(name, tau=tau)
    x = z.float().requires_grad_()
    value = loss(x)
    value.backward()
    assert torch.isfinite(value) and torch.isfinite(x.grad).all()
    assert value.item() == pytest.approx(loss(z).item(), rel=1e-4)


def test_benchmark_paper_loop_reference_matches_geometric() -> None:
    """The benchmark's re-implementation of the paper's pseudocode computes Eq. 13-14 geometric PVC."""
    from _train_helpers import load_script

    bench = load_script("bench/bench_losses")  # and its sibling common.py
    for k in (2, 3, 5):
        z = embeddings(6, k, 4, seed=30 + k)
        expected = build_loss("pvc_geometric", tau=0.2)(z).item()
        assert bench.paper_pvc_loop(z, 0.2, "geometric").item() == pytest.approx(expected, rel=1e-10)


# --------------------------------------------------------------------------- blockwise (chunked) path
CHUNKABLE = [*TEMPERATURE_LOSSES, "flatnce"]


@pytest.fixture()
def tiny_blocks(monkeypatch):
    """Blocks of a few rows, so the tests cross many block boundaries (and item boundaries inside one)."""
    import multiview_app.losses.contrastive as contrastive

    monkeypatch.setattr(contrastive, "_BLOCK_LOGITS", 37)


@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("name", CHUNKABLE)
def test_chunked_path_equals_dense_path_and_reference(name: str, k: int, tiny_blocks) -> None:
    z = embeddings(7, k, 5, seed=20 + k)
    x_dense, x_chunked = z.clone().requires_grad_(), z.clone().requires_grad_()
    dense, chunked = build_loss(name, chunked=False), build_loss(name, chunked=True)
    value_dense, value_chunked = dense(x_dense), chunked(x_chunked)
    assert value_chunked.item() == pytest.approx(value_dense.item(), rel=1e-12, abs=1e-12)
    if name in REFERENCES:
        assert value_chunked.item() == pytest.approx(REFERENCES[name](z), rel=1e-10, abs=1e-10)
    value_dense.backward()
    value_chunked.backward()
    torch.testing.assert_close(x_chunked.grad, x_dense.grad, rtol=1e-10, atol=1e-12)
    assert chunked.last_stats.keys() == dense.last_stats.keys()
    for key, value in dense.last_stats.items():
        assert chunked.last_stats[key] == pytest.approx(value, rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("tau", [0.5, 0.002])
def test_blockwise_logsumexp_matches_masked_reference(tau: float, tiny_blocks) -> None:
    from multiview_app.losses.contrastive import blockwise_logsumexp

    z = torch.nn.functional.normalize(embeddings(6, 3, 4, seed=3), dim=-1)
    q = torch.nn.functional.normalize(embeddings(6, 3, 4, seed=4), dim=-1)
    a1, t1 = z.clone().requires_grad_(), q.clone().requires_grad_()
    a2, t2 = z.clone().requires_grad_(), q.clone().requires_grad_()
    weights = torch.rand(6, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    fast = blockwise_logsumexp(a1, t1, tau, exclude_own=True)
    slow = _masked_lse(a2, t2, tau)
    torch.testing.assert_close(fast, slow, rtol=1e-12, atol=1e-12)
    (fast * weights).sum().backward()
    (slow * weights).sum().backward()
    torch.testing.assert_close(a1.grad, a2.grad, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(t1.grad, t2.grad, rtol=1e-9, atol=1e-9)


def test_chunked_gradcheck_and_automatic_choice(monkeypatch) -> None:
    import multiview_app.losses.contrastive as contrastive

    z = embeddings(3, 3, 3, seed=5).requires_grad_()
    assert torch.autograd.gradcheck(build_loss("pvc_geometric", tau=0.5, chunked=True), (z,), eps=1e-6, atol=1e-7)
    assert contrastive.use_blockwise(None, 10, 10) is False and contrastive.use_blockwise(True, 10, 10) is True
    monkeypatch.setattr(contrastive, "DENSE_MAX_LOGITS", 50)  # 9 x 9 = 81 logits: automatic -> blockwise
    calls = []
    original = contrastive._BlockwiseLogSumExp.apply
    monkeypatch.setattr(contrastive._BlockwiseLogSumExp, "apply", lambda *a: calls.append(1) or original(*a))
    build_loss("aggnce")(z)
    assert calls
    with pytest.raises(ValueError, match="chunked"):
        build_loss("aggnce", chunked="yes")


# ----------------------------------------------------------------------------- infonce_pwe fast path
def _dense_infonce_pwe(z: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Autograd reference: two log-softmax cross-entropies per view pair (no constant shift)."""
    import torch.nn.functional as F

    z = F.normalize(z, dim=-1)
    n, k, _ = z.shape
    labels = torch.arange(n)
    terms = []
    for a in range(k):
        for b in range(a + 1, k):
            logits = scale * z[:, a] @ z[:, b].T
            terms.append(0.5 * (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)))
    return torch.stack(terms).mean()


@pytest.mark.parametrize("k", [2, 3, 4])
@pytest.mark.parametrize("learnable", [False, True])
def test_infonce_pwe_fast_path_values_and_gradients(k: int, learnable: bool) -> None:
    """The constant-shift path (one exp for row and column softmax) equals the autograd reference in
    value and in the gradients w.r.t. z and the logit scale; gradcheck in float64."""
    z = embeddings(7, k, 5, seed=20 + k).requires_grad_()
    loss = build_loss("infonce_pwe", tau=0.25, learnable_temperature=learnable).double()
    value = loss(z)
    log_scale = (
        loss.scale.logit_scale.detach().clone() if learnable else torch.tensor(math.log(4.0), dtype=torch.float64)
    )
    log_scale.requires_grad_()
    expected = _dense_infonce_pwe(z, log_scale.exp())
    torch.testing.assert_close(value, expected, rtol=1e-12, atol=1e-12)
    tau = 1.0 / float(log_scale.detach().exp())
    assert value.item() == pytest.approx(ref.infonce_pwe(z.detach(), tau=tau), rel=1e-10)
    params = [z] + ([loss.scale.logit_scale] if learnable else [])
    grads = torch.autograd.grad(value, params)
    ref_grads = torch.autograd.grad(expected, [z, log_scale] if learnable else [z])
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("k", [2, 3])
def test_infonce_pwe_fast_path_gradcheck(k: int) -> None:
    from multiview_app.losses.contrastive import pair_blocks_infonce

    zn = torch.nn.functional.normalize(embeddings(4, k, 3, seed=30 + k), dim=-1).requires_grad_()
    scale = torch.tensor(4.0, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda z, s: pair_blocks_infonce(z, s, 4.0), (zn, scale), eps=1e-6, atol=1e-7)
    fixed = pair_blocks_infonce(zn, 4.0, 4.0)  # a fixed scale: a float, the same value
    torch.testing.assert_close(fixed, pair_blocks_infonce(zn, scale, 4.0))
    assert torch.autograd.gradcheck(lambda z: pair_blocks_infonce(z, 4.0, 4.0), (zn,), eps=1e-6, atol=1e-7)


def test_infonce_pwe_equals_open_clip_clip_loss_float32() -> None:
    """k = 2: CLIP's symmetric loss (open_clip ``ClipLoss``) in value and gradients, fixed and learnable
    scale (the head L2-normalizes its input, so the gradients are ClipLoss's through ``F.normalize``)."""
    open_clip_loss = pytest.importorskip("open_clip.loss")
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(3)
    image = F.normalize(torch.randn(64, 16, generator=g), dim=-1).requires_grad_()
    text = F.normalize(torch.randn(64, 16, generator=g), dim=-1).requires_grad_()
    for learnable in (False, True):
        ours = build_loss("infonce_pwe", tau=0.07, learnable_temperature=learnable)
        log_scale = torch.tensor(math.log(1 / 0.07), requires_grad=True)
        want = open_clip_loss.ClipLoss()(F.normalize(image, dim=-1), F.normalize(text, dim=-1), log_scale.exp())
        got = ours(torch.stack([image, text], dim=1))
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        params = [image, text] + ([ours.scale.logit_scale] if learnable else [])
        for a, b in zip(torch.autograd.grad(got, params), torch.autograd.grad(want, [image, text, log_scale])):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_infonce_pwe_large_logit_scale_takes_the_max_shift_path() -> None:
    """float32 with 2 / tau above the constant-shift limit: the per-row / per-column max path, still exact."""
    from multiview_app.losses.contrastive import pair_blocks_infonce

    z = embeddings(6, 3, 4, seed=9)
    zn = torch.nn.functional.normalize(z, dim=-1).float()
    assert pair_blocks_infonce(zn, 100.0, 100.0) is None
    assert pair_blocks_infonce(zn, 10.0, 10.0) is not None
    assert pair_blocks_infonce(zn, torch.tensor(10.0), 100.0) is None  # decided by the host-side bound
    value = build_loss("infonce_pwe", tau=0.01)(z.float())
    assert torch.isfinite(value) and value.item() == pytest.approx(ref.infonce_pwe(z, tau=0.01), rel=1e-4)


def test_normalize_matches_f_normalize_including_zero_rows() -> None:
    import torch.nn.functional as F

    from multiview_app.losses.base import normalize

    x = embeddings(4, 3, 5, seed=2)
    x[1, 2] = 0.0
    x[2, 0] = 1e-14
    x.requires_grad_()
    upstream = torch.randn(4, 3, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    ours = normalize(x)
    want = F.normalize(x, dim=-1, eps=1e-12)
    torch.testing.assert_close(ours, want, rtol=0, atol=0)
    g1 = torch.autograd.grad((ours * upstream).sum(), x)[0]
    g2 = torch.autograd.grad((want * upstream).sum(), x)[0]
    torch.testing.assert_close(g1, g2, rtol=1e-12, atol=1e-12)
    assert torch.autograd.gradcheck(normalize, (embeddings(3, 2, 4, seed=4).requires_grad_(),))
