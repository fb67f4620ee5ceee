"""Contrastive and BYOL-style multi-view losses.

Notation: ``z`` is ``(n, k, d)`` and already L2-normalized by :class:`MultiViewLoss`;
``s(a, b) = <z_a, z_b> / tau``; item ``i``, views ``alpha, beta, gamma``. The *negatives* of an
anchor ``(i, alpha)`` are every view of every other item, ``{(j, gamma) : j != i}``.

Everything is vectorized (no Python loops over items or views); softmax denominators are
log-sum-exps. The shared building blocks are

* :func:`other_item_logsumexp` -- logsumexp of anchors against all views of the *other* items
  (custom autograd: one Gram matrix, symmetric half when anchors are the targets), used by the
  PVC losses, AggNCE and FlatNCE;
* :func:`rest_mean` -- the mean of the other ``k - 1`` views of each item;
* :func:`pair_logsumexp_ce` -- InfoNCE cross-entropy of one view against another.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import ClassVar

import torch
import torch.nn.functional as F

from . import LOSSES
from .base import LazyStats, MultiViewLoss, check_chunked, check_embeddings, check_positive, normalize
from .temperature import LogitScale

# --------------------------------------------------------------------------- shared helpers
# Largest 2 / tau for which the fixed shift 1 / tau is safe: logits of unit vectors lie in
# [-1/tau, 1/tau], so exp(logit - 1/tau) >= exp(-2/tau) and its square stay normal numbers
# (float32 tau >= 0.05, float64 tau >= 0.006); smaller tau uses the general per-row-max path.
_SHIFT_LIMIT = {torch.float32: 40.0, torch.float64: 340.0}


class _OtherItemLogSumExp(torch.autograd.Function):
    """General path of :func:`other_item_logsumexp` (anchors and targets differ, or tiny tau).

    One ``(n a, n k)`` Gram matrix, per-row max shift, exp in place; backward = two GEMMs with the
    saved softmax numerators. Outputs ``(lse (n, a), weight_sq (n, a))``.
    """

    @staticmethod
    def forward(
        ctx, anchors: torch.Tensor, targets: torch.Tensor, tau: float, with_weight_sq: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        n, a, d = anchors.shape
        k = targets.shape[1]
        flat_a, flat_t = anchors.reshape(n * a, d), targets.reshape(n * k, d)
        numer = torch.mm(flat_a / tau, flat_t.T).view(n, a, n, k)
        items = torch.arange(n, device=anchors.device)
        numer[items, :, items, :] = float("-inf")  # own item: not a negative
        numer = numer.view(n * a, n * k)
        shift = numer.amax(dim=1, keepdim=True)
        numer.sub_(shift).exp_()
        total = numer.sum(dim=1)
        weight_sq = (numer * numer).sum(dim=1) / total.square() if with_weight_sq else total.new_zeros(n * a)
        ctx.save_for_backward(flat_a, flat_t, numer, total)
        ctx.tau, ctx.shapes = tau, (anchors.shape, targets.shape)
        ctx.mark_non_differentiable(weight_sq)
        return (total.log() + shift[:, 0]).view(n, a), weight_sq.view(n, a)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_lse: torch.Tensor, _grad_sq: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        flat_a, flat_t, numer, total = ctx.saved_tensors
        weights = numer * (grad_lse.reshape(-1) / total / ctx.tau)[:, None]  # d lse / d <a, t>
        grad_a = torch.mm(weights, flat_t).view(ctx.shapes[0]) if ctx.needs_input_grad[0] else None
        grad_t = torch.mm(weights.T, flat_a).view(ctx.shapes[1]) if ctx.needs_input_grad[1] else None
        return grad_a, grad_t, None, None


class _SymmetricOtherItemLogSumExp(torch.autograd.Function):
    """Fast path of :func:`other_item_logsumexp` for ``anchors is targets`` (unit vectors).

    Uses the symmetry of the Gram matrix: only the view blocks ``(p, q)``, ``p <= q`` are computed
    (``k (k + 1) / 2`` blocks of ``(n, n)``, batched GEMM), with the constant shift ``1 / tau`` so
    that the exponentiated blocks stay symmetric; row sums of a block serve anchors of view ``p``,
    column sums anchors of view ``q``. Backward: ``grad = (W + W^T) z / tau`` block-wise.
    """

    @staticmethod
    def forward(ctx, z: torch.Tensor, tau: float, with_weight_sq: bool) -> tuple[torch.Tensor, torch.Tensor]:
        n, k, _ = z.shape
        by_view = z.transpose(0, 1).contiguous()  # (k, n, d)
        first, second = _view_pairs(k, z.device)  # p <= q, the k blocks p == q first
        numer = torch.bmm(by_view[first] / tau, by_view[second].transpose(1, 2))  # (P, n, n)
        numer.sub_(1.0 / tau).exp_()
        numer.diagonal(dim1=1, dim2=2).zero_()  # own item: not a negative
        total = _fold_rows_and_cols(numer.sum(dim=2), numer[k:].sum(dim=1), first, second, k)
        if with_weight_sq:
            squares = numer * numer
            weight_sq = _fold_rows_and_cols(squares.sum(dim=2), squares[k:].sum(dim=1), first, second, k)
            weight_sq = weight_sq / total.square()
        else:
            weight_sq = torch.zeros_like(total)
        ctx.save_for_backward(by_view, numer, total, first, second)
        ctx.tau = tau
        ctx.mark_non_differentiable(weight_sq)
        return (total.log() + 1.0 / tau).T, weight_sq.T

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_lse: torch.Tensor, _grad_sq: torch.Tensor | None) -> tuple[torch.Tensor | None, None, None]:
        by_view, numer, total, first, second = ctx.saved_tensors
        k = by_view.shape[0]
        scale = grad_lse.T / total / ctx.tau  # (k, n)
        # block (p, q) of W + W^T, W = diag(scale) * numer (row-scaled softmax numerators)
        sym = numer * (scale[first][:, :, None] + scale[second][:, None, :])  # (P, n, n)
        from_rows = torch.bmm(sym, by_view[second])  # (P, n, d): contributions to view `first`
        from_cols = torch.bmm(sym[k:].transpose(1, 2), by_view[first[k:]])  # to view `second`
        grad = _fold_rows_and_cols(from_rows, from_cols, first, second, k)  # (k, n, d)
        return grad.transpose(0, 1), None, None


@functools.lru_cache(maxsize=32)
def _view_pairs(k: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """View pairs ``(first, second)`` with ``first <= second``: the ``k`` pairs ``(p, p)`` first,
    then the ``k (k - 1) / 2`` pairs ``p < q``."""
    diagonal = torch.arange(k, device=device)
    upper = torch.triu_indices(k, k, offset=1, device=device)
    return torch.cat([diagonal, upper[0]]), torch.cat([diagonal, upper[1]])


def _fold_rows_and_cols(
    row_blocks: torch.Tensor, col_blocks: torch.Tensor, first: torch.Tensor, second: torch.Tensor, k: int
) -> torch.Tensor:
    """Per-view totals ``(k, ...)`` from per-block values (pairs of :func:`_view_pairs`):
    ``row_blocks[b]`` ``(P, ...)`` goes to view ``first[b]``, ``col_blocks[b]`` ``(P - k, ...)`` of
    the off-diagonal block ``k + b`` to view ``second[k + b]``. Small GEMMs with one-hot matrices."""
    to_first = F.one_hot(first, k).to(row_blocks.dtype)  # (P, k)
    to_second = F.one_hot(second[k:], k).to(row_blocks.dtype)  # (P - k, k)
    tail = row_blocks.shape[1:]
    out = to_first.T @ row_blocks.reshape(len(first), -1)
    out = out + to_second.T @ col_blocks.reshape(len(first) - k, -1)
    return out.view(k, *tail)


class _PairBlocksInfoNCE(torch.autograd.Function):
    """Symmetric InfoNCE over view pairs with a constant shift (dense fast path of ``infonce_pwe``).

    ``z`` ``(n, k, d)`` unit vectors, view pairs ``first[p] < second[p]`` (:func:`_view_pairs`
    order), ``scale`` the logit multiplier ``1 / tau`` (a float, or a 0-d tensor when learned: it then
    stays on the device, no host read). Logits
    ``L[p] = scale * z[:, first[p]] @ z[:, second[p]].T`` ``(n, n)``; value
    ``mean_p [0.5 (mean_i lse_row_i + mean_j lse_col_j) - mean_i L[p, i, i]]`` (CLIP's symmetric
    cross-entropy when ``k = 2``). ``|L| <= scale`` for unit vectors, so one ``exp(L - scale)``
    serves both the row and the column softmax (the caller keeps ``2 scale`` within
    :data:`_SHIFT_LIMIT`). Backward: ``G = dloss/dL = (row softmax + column softmax) / (2 P n) - I / (P n)``,
    ``grad_first = scale G second``, ``grad_second = scale G^T first``,
    ``grad_scale = sum(G * first second^T) = sum((G second) * first)``.
    """

    @staticmethod
    def forward(
        ctx, z: torch.Tensor, scale: float | torch.Tensor, first: torch.Tensor, second: torch.Tensor
    ) -> torch.Tensor:
        n, k, _ = z.shape
        p = len(first)
        s = scale.detach() if isinstance(scale, torch.Tensor) else scale
        by_view = z.transpose(0, 1)  # (k, n, d), a view
        a, b = (by_view[:1], by_view[1:]) if k == 2 else (by_view[first], by_view[second])
        numer = torch.bmm(a * s, b.transpose(1, 2))  # (P, n, n) logits
        positives = numer.diagonal(dim1=1, dim2=2).sum()
        numer.sub_(s).exp_()
        rows, cols = numer.sum(dim=2), numer.sum(dim=1)  # (P, n) each
        lse_total = rows.log().sum() + cols.log().sum() + 2.0 * p * n * s
        ctx.save_for_backward(a, b, numer, rows, cols, first, second)
        ctx.scale, ctx.views = s, k
        return (0.5 * lse_total - positives) / (p * n)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        a, b, numer, rows, cols, first, second = ctx.saved_tensors
        p, n, d = a.shape
        k, s = ctx.views, ctx.scale
        # weights = grad_out * scale * G: the upstream gradient and the scale folded into the per-row /
        # per-column factors, so that the (P, n, n) matrix is touched twice (no extra passes)
        unit = grad_out * (s / (p * n))
        weights = numer * (0.5 * unit / rows)[:, :, None]
        weights.addcmul_(numer, (0.5 * unit / cols)[:, None, :])
        weights.diagonal(dim1=1, dim2=2).sub_(unit)
        grad_a = torch.bmm(weights, b)  # (P, n, d) = grad_out * d loss / d a
        grad_z = grad_scale = None
        if ctx.needs_input_grad[0]:
            grad_b = torch.bmm(weights.transpose(1, 2), a)
            if k == 2:
                grad_z = torch.stack([grad_a[0], grad_b[0]], dim=1)
            else:  # view v collects the pairs where it is first or second
                grad_by_view = a.new_zeros(k, n, d).index_add_(0, first, grad_a).index_add_(0, second, grad_b)
                grad_z = grad_by_view.transpose(0, 1)
        if ctx.needs_input_grad[1]:
            grad_scale = ((grad_a * a).sum() / s).reshape(())
        return grad_z, grad_scale, None, None


def pair_blocks_infonce(z: torch.Tensor, scale: float | torch.Tensor, scale_bound: float) -> torch.Tensor | None:
    """Symmetric InfoNCE of ``z`` ``(n, k, d)`` over its ``k (k - 1) / 2`` view pairs
    (:class:`_PairBlocksInfoNCE`) with the logit multiplier ``scale`` (float, or a 0-d tensor when
    learned), or ``None`` when ``scale_bound`` (a host-side upper bound of ``scale``: no host read) is
    too large for the constant shift in this dtype (the caller then takes the per-row / per-column max
    path)."""
    if 2.0 * scale_bound > _SHIFT_LIMIT.get(z.dtype, 0.0):
        return None
    first, second = _view_pairs(z.shape[1], z.device)
    k = z.shape[1]
    return _PairBlocksInfoNCE.apply(z, scale, first[k:], second[k:])


# --------------------------------------------------------------------------- blockwise (chunked) path
# Above this many logits (anchors x targets) the losses switch to the blockwise path by default
# (``chunked=None``): 2^26 float32 logits are 256 MiB, and the dense paths keep one or two such
# matrices for backward. Below it the dense paths are faster (one GEMM less, no Python loop).
DENSE_MAX_LOGITS = 1 << 26
# Logits per block of the blockwise path (16 MiB in float32): rows per block = this // targets.
_BLOCK_LOGITS = 1 << 22


def block_rows(n_rows: int, n_cols: int) -> int:
    """Rows per block of a blockwise pass over an ``(n_rows, n_cols)`` matrix: about
    ``_BLOCK_LOGITS`` entries per block, at least one row, at most ``n_rows``."""
    return max(1, min(n_rows, _BLOCK_LOGITS // max(n_cols, 1)))


def use_blockwise(chunked: bool | None, anchors: int, targets: int) -> bool:
    """Whether a loss with parameter ``chunked`` (None = automatic) uses the blockwise path for an
    ``anchors x targets`` logit matrix."""
    return anchors * targets > DENSE_MAX_LOGITS if chunked is None else chunked


def _block_logits(
    anchors: torch.Tensor,
    targets: torch.Tensor,
    start: int,
    stop: int,
    tau: float,
    per_item: int,
    views: int,
    exclude_own: bool,
) -> torch.Tensor:
    """Logits ``(stop - start, M)`` of anchor rows ``start:stop`` against all targets (``(M, d)``),
    own item (anchor row ``r`` is item ``r // per_item``, its targets ``item * views + 0..views-1``)
    set to ``-inf`` when ``exclude_own``."""
    logits = torch.mm(anchors[start:stop], targets.T).div_(tau)
    if exclude_own:
        rows = torch.arange(stop - start, device=logits.device)
        items = torch.div(rows + start, per_item, rounding_mode="floor")
        logits.view(stop - start, -1, views)[rows, items] = float("-inf")
    return logits


class _BlockwiseLogSumExp(torch.autograd.Function):
    """Row ``logsumexp`` of ``anchors @ targets.T / tau`` one block of rows at a time.

    ``anchors`` ``(N, d)`` (item ``r // per_item``), ``targets`` ``(M, d)`` (``views`` consecutive rows
    per item); ``exclude_own`` masks each anchor's own item. Memory: one ``(rows, M)`` block, never
    ``N x M``. Backward recomputes each block: ``p = exp(logits - lse)``, ``grad_anchors = (g p / tau)
    targets``, ``grad_targets = (g p / tau)^T anchors``. Outputs ``(lse (N,), weight_sq (N,))``.
    """

    @staticmethod
    def forward(
        ctx,
        anchors: torch.Tensor,
        targets: torch.Tensor,
        tau: float,
        per_item: int,
        views: int,
        exclude_own: bool,
        with_weight_sq: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        n_rows, n_cols = anchors.shape[0], targets.shape[0]
        rows = block_rows(n_rows, n_cols)
        lse = anchors.new_empty(n_rows)
        weight_sq = anchors.new_zeros(n_rows)
        for start in range(0, n_rows, rows):
            stop = min(n_rows, start + rows)
            block = _block_logits(anchors, targets, start, stop, tau, per_item, views, exclude_own)
            shift = block.amax(dim=1, keepdim=True)
            block.sub_(shift).exp_()
            total = block.sum(dim=1)
            lse[start:stop] = total.log() + shift[:, 0]
            if with_weight_sq:
                weight_sq[start:stop] = block.square_().sum(dim=1) / total.square()
        ctx.save_for_backward(anchors, targets, lse)
        ctx.params = (tau, per_item, views, exclude_own, rows)
        ctx.mark_non_differentiable(weight_sq)
        return lse, weight_sq

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_lse: torch.Tensor, _grad_sq: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        anchors, targets, lse = ctx.saved_tensors
        tau, per_item, views, exclude_own, rows = ctx.params
        grad_a = torch.zeros_like(anchors) if ctx.needs_input_grad[0] else None
        grad_t = torch.zeros_like(targets) if ctx.needs_input_grad[1] else None
        scale = grad_lse / tau
        for start in range(0, anchors.shape[0], rows):
            stop = min(anchors.shape[0], start + rows)
            block = _block_logits(anchors, targets, start, stop, tau, per_item, views, exclude_own)
            block.sub_(lse[start:stop, None]).exp_().mul_(scale[start:stop, None])  # d out / d <a, t>
            if grad_a is not None:
                torch.mm(block, targets, out=grad_a[start:stop])
            if grad_t is not None:
                grad_t.addmm_(block.T, anchors[start:stop])
        return grad_a, grad_t, None, None, None, None, None


def blockwise_logsumexp(
    anchors: torch.Tensor,
    targets: torch.Tensor,
    tau: float,
    *,
    exclude_own: bool = False,
    return_weight_sq: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Blockwise ``logsumexp_{j, gamma} <anchors[i, alpha], targets[j, gamma]> / tau`` ``(n, a)``.

    ``anchors`` ``(n, a, d)``, ``targets`` ``(m, k, d)``; ``exclude_own`` (needs ``m == n``) drops
    ``j == i``. Peak memory ``O(block + (n a + m k) d)`` instead of the ``(n a, m k)`` logits.
    ``return_weight_sq`` as in :func:`other_item_logsumexp`.
    """
    n, a, d = anchors.shape
    k = targets.shape[1]
    lse, weight_sq = _BlockwiseLogSumExp.apply(
        anchors.reshape(n * a, d), targets.reshape(-1, d), tau, a, k, exclude_own, return_weight_sq
    )
    return (lse.view(n, a), weight_sq.view(n, a)) if return_weight_sq else lse.view(n, a)


def other_item_logsumexp(
    anchors: torch.Tensor,
    targets: torch.Tensor,
    tau: float | torch.Tensor,
    return_weight_sq: bool = False,
    chunked: bool | None = None,
    tau_floor: float | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """``logsumexp`` of each anchor's logits against every view of every *other* item.

    ``anchors`` ``(n, a, d)``, ``targets`` ``(n, k, d)`` (unit vectors) -> ``(n, a)`` with entry
    ``[i, alpha] = logsumexp_{j != i, gamma} <anchors[i, alpha], targets[j, gamma]> / tau``.
    With ``return_weight_sq`` also returns ``sum_j w_j^2`` ``(n, a)`` (no gradient) for the
    softmax weights ``w`` of those negatives (for FlatNCE's ESS). ``chunked``: blockwise path
    (:func:`blockwise_logsumexp`); None chooses it above :data:`DENSE_MAX_LOGITS` logits. ``tau`` may
    be a 0-d tensor (a scheduled temperature on the device); ``tau_floor``, a host-side lower bound of
    it, then decides whether the constant-shift path is safe (None: the general path), without a host read.
    """
    n, a, _ = anchors.shape
    if use_blockwise(chunked, n * a, n * targets.shape[1]):
        return blockwise_logsumexp(anchors, targets, tau, exclude_own=True, return_weight_sq=return_weight_sq)
    smallest_tau = (tau_floor or 0.0) if isinstance(tau, torch.Tensor) else tau
    if targets is anchors and smallest_tau > 0 and 2.0 / smallest_tau <= _SHIFT_LIMIT.get(anchors.dtype, 0.0):
        lse, weight_sq = _SymmetricOtherItemLogSumExp.apply(anchors, tau, return_weight_sq)
    else:
        lse, weight_sq = _OtherItemLogSumExp.apply(anchors, targets, tau, return_weight_sq)
    return (lse, weight_sq) if return_weight_sq else lse


def rest_mean(z: torch.Tensor) -> torch.Tensor:
    """Mean of the other views of each item: ``(n, k, d) -> (n, k, d)``, entry ``[i, alpha]``
    is ``mean_{beta != alpha} z[i, beta]`` (not re-normalized)."""
    k = z.shape[1]
    return (z.sum(dim=1, keepdim=True) - z) / (k - 1)


def positive_logits(z: torch.Tensor, tau: float) -> torch.Tensor:
    """Within-item logits ``s(i alpha, i beta)``: ``(n, k, d) -> (n, k, k)`` indexed ``[i, alpha, beta]``."""
    return torch.einsum("iad,ibd->iab", z, z) / tau


def off_diagonal(x: torch.Tensor) -> torch.Tensor:
    """Entries ``[..., alpha, beta]`` with ``alpha != beta``: ``(..., k, k) -> (..., k, k - 1)``.

    Strided trick (no boolean indexing): drop the first of the ``k^2`` row-major entries, view the
    rest as ``(k - 1, k + 1)`` rows whose last entry is the next diagonal element, drop it.
    """
    k = x.shape[-1]
    lead = x.shape[:-2]
    return x.flatten(-2)[..., 1:].view(*lead, k - 1, k + 1)[..., :-1].reshape(*lead, k, k - 1)


def pair_logsumexp_ce(logits: torch.Tensor, dim: int) -> torch.Tensor:
    """InfoNCE cross-entropy with the positives on the diagonal.

    ``logits`` ``(p, n, n)``; the softmax runs over ``dim`` (2: rows, 1: columns) and the
    target of row/column ``i`` is ``i``. Returns the per-anchor losses ``(p, n)``.
    """
    return torch.logsumexp(logits, dim=dim) - torch.diagonal(logits, dim1=1, dim2=2)


def contrastive_log_ratio(positive: torch.Tensor, negatives_lse: torch.Tensor) -> torch.Tensor:
    """``log( e^pos / (e^pos + sum_neg e^neg) )`` from the positive logit and the negatives'
    ``logsumexp`` (broadcast): ``positive - logaddexp(positive, negatives_lse)``."""
    return positive - torch.logaddexp(positive, negatives_lse)


class TemperatureLoss(MultiViewLoss):
    """Base of the losses with a temperature ``tau`` (> 0) over a softmax of other items.

    ``chunked``: ``None`` (default) = dense logit matrices up to :data:`DENSE_MAX_LOGITS` entries,
    blockwise logsumexp above (:func:`blockwise_logsumexp`, memory ``O(block)``); ``True`` / ``False``
    force the blockwise / dense path. Both give the same values and gradients.
    """

    def __init__(self, tau: float = 0.1, chunked: bool | None = None) -> None:
        super().__init__()
        self.tau = check_positive("tau", tau, loss=self.name)
        self.chunked = check_chunked(chunked, loss=self.name)

    def temperature(self) -> float | None:
        return self.tau

    def extra_repr(self) -> str:
        return f"tau={self.tau}, chunked={self.chunked}"


class LearnableTemperatureLoss(TemperatureLoss):
    """Temperature loss whose ``1 / tau`` may be learned (CLIP logit scale, clamped at
    ``max_logit_scale``; see ``losses/temperature.py``). last_stats: ``logit_scale`` (= 1 / tau)."""

    def __init__(
        self,
        tau: float = 0.1,
        chunked: bool | None = None,
        learnable_temperature: bool = False,
        max_logit_scale: float = 100.0,
    ) -> None:
        super().__init__(tau, chunked)
        if learnable_temperature and chunked:
            raise ValueError(
                f"loss '{self.name}': chunked=true does not support learnable_temperature (dense path only)"
            )
        self.scale = LogitScale(self.tau, learnable_temperature, max_logit_scale, loss=self.name)

    def temperature(self) -> float | None:
        """``1 / scale`` (the learned value when the temperature is learnable)."""
        return 1.0 / float(self.scale.value())

    def blockwise(self, n: int) -> bool:
        """Blockwise path for ``n x n`` logits (never with a learnable temperature)."""
        return not self.scale.learnable and use_blockwise(self.chunked, n, n)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        loss = super().forward(z)
        self.last_stats["logit_scale"] = self.scale.stat()
        return loss


# --------------------------------------------------------------------------- InfoNCE baselines
@LOSSES.register("infonce_pwe")
class InfoNCEPairwiseLoss(LearnableTemperatureLoss):
    """InfoNCE averaged over ordered view pairs (registry name ``infonce_pwe``).

    The pairwise baseline of the M3G paper (Eq. 1 summed over pairs, Eq. 3); InfoNCE itself is van den Oord,
    Li, Vinyals, *Representation Learning with Contrastive Predictive Coding*, arXiv:1807.03748.

    Piran, Klein, Thornton, Cuturi. *Contrasting Multiple Representations with the Multi-Marginal
    Matching Gap*. ICML 2024, arXiv:2405.19532.

    ``L(alpha -> beta) = mean_i[-s(i alpha, i beta) + logsumexp_j s(i alpha, j beta)]`` with
    ``s(a, b) = <z_a, z_b> / tau``; the loss is the mean over the ``k (k - 1)`` ordered pairs
    ``alpha != beta``. Each unordered pair's ``(n, n)`` block is computed once (its row softmax gives
    ``alpha -> beta``, its column softmax ``beta -> alpha``). With ``k = 2`` it is the symmetric CLIP loss.
    ``last_stats["mi_lower_bound"] = log(n) - L``.

    Parameters
    ----------
    tau : float, default 0.1
        Softmax temperature, > 0.
    chunked : bool or None, default None
        ``None``: dense logit matrices up to ``DENSE_MAX_LOGITS`` entries, blockwise log-sum-exp above
        (memory ``O(block)``); ``True`` / ``False`` force the blockwise / dense path (same values and
        gradients).
    learnable_temperature : bool, default False
        Learn ``1 / tau`` as a CLIP-style logit scale (dense path only).
    max_logit_scale : float, default 100.0
        Clamp of the learned ``1 / tau``.

    Returns
    -------
    torch.Tensor
        ``loss(z)`` for embeddings ``z`` of shape ``(n, k, d)`` (L2-normalized inside) is a 0-d tensor.

    Raises
    ------
    ValueError
        At construction, for a non-positive or non-numeric parameter; at call, for ``z`` that is not
        ``(n, k, d)`` with ``n >= 2`` items and ``k >= 2`` views, or that holds NaN / Inf.

    Examples
    --------
    >>> import torch
    >>> from multiview_app.losses import InfoNCEPairwiseLoss
    >>> z = torch.randn(8, 2, 16, generator=torch.Generator().manual_seed(0), requires_grad=True)
    >>> loss = InfoNCEPairwiseLoss(tau=0.5)(z)
    >>> loss.shape
    torch.Size([])
    >>> u = torch.nn.functional.normalize(z, dim=-1)  # k = 2: the symmetric CLIP loss
    >>> logits, items = u[:, 0] @ u[:, 1].T / 0.5, torch.arange(8)
    >>> cross_entropy = torch.nn.functional.cross_entropy
    >>> clip = (cross_entropy(logits, items) + cross_entropy(logits.T, items)) / 2
    >>> torch.allclose(loss, clip)
    True
    """

    def compute(self, z: torch.Tensor) -> torch.Tensor:
        n, k, _ = z.shape
        if self.blockwise(n):
            # every ordered pair (alpha -> beta): anchors z[:, alpha], candidates z[:, beta]
            pairs = list(itertools.combinations(range(k), 2))  # alpha < beta, then the reversed pairs
            anchors = [a for a, _ in pairs] + [b for _, b in pairs]
            candidates = [b for _, b in pairs] + [a for a, _ in pairs]
            positive = torch.stack([(z[:, a] * z[:, b]).sum(-1) for a, b in zip(anchors, candidates)]) / self.tau
            lse = torch.stack(
                [blockwise_logsumexp(z[:, a, None], z[:, b, None], self.tau)[:, 0] for a, b in zip(anchors, candidates)]
            )
            loss = (lse - positive).mean()
        else:
            loss = pair_blocks_infonce(z, self.scale.multiplier(z), self.scale.bound())
            if loss is None:  # logit scale too large for the constant shift: per-row / per-column max
                # (p, n, n) with p = k (k - 1) / 2 unordered pairs
                first, second = torch.triu_indices(k, k, offset=1, device=z.device)
                logits = self.scale(torch.bmm(z[:, first].transpose(0, 1), z[:, second].permute(1, 2, 0)))
                loss = 0.5 * (pair_logsumexp_ce(logits, 2).mean() + pair_logsumexp_ce(logits, 1).mean())
        self.last_stats["mi_lower_bound"] = math.log(z.shape[0]) - loss.detach()
        return loss


@LOSSES.register("infonce_ave")
class InfoNCEAverageLoss(LearnableTemperatureLoss):
    """InfoNCE of each view against the average of the others (registry name ``infonce_ave``).

    The one-vs-average-of-rest baseline of the M3G paper (Eq. 4).

    Piran, Klein, Thornton, Cuturi. *Contrasting Multiple Representations with the Multi-Marginal
    Matching Gap*. ICML 2024, arXiv:2405.19532.

    ``xbar_i alpha = normalize(mean_{beta != alpha} z_i beta)``;
    ``L(alpha) = mean_i[-s(z_i alpha, xbar_i alpha) + logsumexp_j s(z_i alpha, xbar_j alpha)]``, averaged over
    ``alpha``. With ``k = 2`` it equals :class:`InfoNCEPairwiseLoss`. ``last_stats["mi_lower_bound"] = log(n) - L``.

    Parameters
    ----------
    tau : float, default 0.1
        Softmax temperature, > 0.
    chunked : bool or None, default None
        ``None``: dense logit matrices up to ``DENSE_MAX_LOGITS`` entries, blockwise log-sum-exp above
        (memory ``O(block)``); ``True`` / ``False`` force the blockwise / dense path (same values and
        gradients).
    learnable_temperature : bool, default False
        Learn ``1 / tau`` as a CLIP-style logit scale (dense path only).
    max_logit_scale : float, default 100.0
        Clamp of the learned ``1 / tau``.

    Returns
    -------
    torch.Tensor
        ``loss(z)`` for embeddings ``z`` of shape ``(n, k, d)`` (L2-normalized inside) is a 0-d tensor.

    Raises
    ------
    ValueError
        At construction, for a non-positive or non-numeric parameter; at call, for ``z`` that is not
        ``(n, k, d)`` with ``n >= 2`` items and ``k >= 2`` views, or that holds NaN / Inf.

    Examples
    --------
    >>> import torch
    >>> from multiview_app.losses import InfoNCEAverageLoss
    >>> z = torch.randn(8, 3, 16, generator=torch.Generator().manual_seed(0), requires_grad=True)
    >>> loss = InfoNCEAverageLoss(tau=0.5)(z)
    >>> loss.shape
    torch.Size([])
    >>> from multiview_app.losses import InfoNCEPairwiseLoss
    >>> torch.allclose(InfoNCEAverageLoss(tau=0.5)(z[:, :2]), InfoNCEPairwiseLoss(tau=0.5)(z[:, :2]))
    True
    """

    def compute(self, z: torch.Tensor) -> torch.Tensor:
        n, k, _ = z.shape
        xbar = normalize(rest_mean(z))
        if self.blockwise(n):
            positive = (z * xbar).sum(-1) / self.tau  # (n, k)
            lse = torch.stack(
                [blockwise_logsumexp(z[:, a, None], xbar[:, a, None], self.tau)[:, 0] for a in range(k)], 1
            )
            loss = (lse - positive).mean()
        else:
            logits = self.scale(torch.bmm(z.transpose(0, 1), xbar.permute(1, 2, 0)))  # (k, n, n)
            loss = pair_logsumexp_ce(logits, 2).mean()
        self.last_stats["mi_lower_bound"] = math.log(z.shape[0]) - loss.detach()
        return loss


# --------------------------------------------------------------------------- BYOL-style
class BYOLLoss(MultiViewLoss):
    """Multi-view BYOL: the online branch's predictions against the target branch's projections.

    Paper: Grill et al., "Bootstrap your own latent: A new approach to self-supervised learning",
    arXiv:2006.07733 (Sec. 3.1, Eq. 2); its multi-view forms are M3G Eq. 2 (pairwise / average).

    Equations, with ``p = normalize(q(g(f(v))))`` the online predictions and
    ``t = normalize(g'(f'(v)))`` the target projections (EMA weights, no gradient), both ``(n, k, d)``,
    and ``c(a, b) = 2 - 2 <a, b>`` the normalized MSE ``||a - b||^2`` of unit vectors:

    * ``byol_pwe`` (:class:`BYOLPairwise`): ``L = mean_i mean_{alpha != beta} c(p_i alpha, t_i beta)``;
    * ``byol_ave`` (:class:`BYOLAverage`):
      ``L = mean_i mean_alpha c(p_i alpha, normalize(mean_{beta != alpha} t_i beta))``.

    Every term pairs an online prediction with a target projection: there is no online-online term.
    At ``k = 2`` both equal ``(c(p_1, t_2) + c(p_2, t_1)) / 2``, half the paper's symmetrized loss
    ``L + L~`` (Eq. 2 and the text after it), averaged over the batch.

    Shapes: ``forward(online (n, k, d), target (n, k, d)) -> 0-d tensor``; both are L2-normalized
    here; the target is detached (a stop-gradient, as in the paper). With ``target`` omitted the loss
    is the single-branch form of M3G Eq. 2 on ``online`` itself (``target = online``, gradient on both
    sides); the trainer's ``byol`` method always passes the EMA target.

    Deviations from the paper: the mean (not the sum) over the ordered view pairs; ``k >= 2`` views
    (the paper has two); the EMA update, predictor and BatchNorm heads live in the model / trainer
    (``model.predictor``, ``model.projector.norm`` / ``model.predictor.norm``, ``model.teacher``),
    not in this module.

    :class:`BYOLPairwise` / :class:`BYOLAverage` take no parameters.

    Returns
    -------
    torch.Tensor
        ``loss(online, target)`` is a 0-d tensor.

    Raises
    ------
    ValueError
        ``online`` / ``target`` not ``(n, k, d)`` with ``k >= 2``, ``n >= 2``, finite, or of different
        shapes.

    Examples
    --------
    >>> import torch
    >>> from multiview_app.losses import BYOLPairwise
    >>> online = torch.tensor([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [1.0, 0.0]]])
    >>> target = torch.tensor([[[0.0, 1.0], [1.0, 0.0]], [[1.0, 0.0], [0.0, 1.0]]])
    >>> # item 0: both predictions match the other view's target (cost 0); item 1: p_1 . t_2 = 0,
    >>> # p_2 . t_1 = 1 -> costs 2 and 0; mean over items and the two ordered pairs = 0.5
    >>> float(BYOLPairwise()(online, target))
    0.5
    """

    gather_across_processes: ClassVar[bool] = False
    needs_teacher: ClassVar[bool] = True  # positives only: collapses without the EMA target
    #: the trainer runs these losses with the ``byol`` method (online predictions vs. EMA targets)
    takes_target: ClassVar[bool] = True

    def forward(self, online: torch.Tensor, target: torch.Tensor | None = None) -> torch.Tensor:  # noqa: D401
        """Loss of online predictions ``(n, k, d)`` against target projections ``(n, k, d)``."""
        online = normalize(check_embeddings(online, min_views=self.min_views, check_finite=self.check_finite))
        if target is None:
            target = online
        else:
            target = check_embeddings(target.detach(), min_views=self.min_views, check_finite=self.check_finite)
            if target.shape != online.shape:
                raise ValueError(
                    f"loss '{self.name}': online {tuple(online.shape)} and target "
                    f"{tuple(target.shape)} must have the same shape (n, k, d)"
                )
            target = normalize(target.to(online.dtype))
        self.last_stats = LazyStats()
        loss = self.compute_pair(online, target)
        self._record_loss(loss)
        return loss

    def compute(self, z: torch.Tensor) -> torch.Tensor:
        return self.compute_pair(z, z)

    def compute_pair(self, online: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Loss of normalized ``online`` and ``target`` ``(n, k, d)``."""
        raise NotImplementedError


@LOSSES.register("byol_pwe")
class BYOLPairwise(BYOLLoss):
    """BYOL over ordered view pairs: ``2 - 2 mean_i mean_{alpha != beta} <p_i alpha, t_i beta>``.

    Uses ``sum_{alpha != beta} <p_alpha, t_beta> = <sum p, sum t> - sum_alpha <p_alpha, t_alpha>``,
    so the cost is O(n k d). See :class:`BYOLLoss`.

    Examples
    --------
    >>> import torch
    >>> from multiview_app.losses import BYOLPairwise
    >>> online = torch.nn.functional.normalize(torch.randn(8, 3, 16), dim=-1)
    >>> float(BYOLPairwise()(online, online.roll(1, dims=1))) >= 0.0  # target = the other views
    True
    """

    def compute_pair(self, online: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        k = online.shape[1]
        same_view = (online * target).sum(dim=(1, 2))  # (n,)
        pair_sum = (online.sum(dim=1) * target.sum(dim=1)).sum(dim=-1) - same_view  # (n,)
        return 2.0 - 2.0 * (pair_sum / (k * (k - 1))).mean()


@LOSSES.register("byol_ave")
class BYOLAverage(BYOLLoss):
    """BYOL against the rest: ``2 - 2 mean_{i, alpha} <p_i alpha, normalize(mean_{beta != alpha} t_i beta)>``.
    See :class:`BYOLLoss`.

    Examples
    --------
    >>> import torch
    >>> from multiview_app.losses import BYOLAverage
    >>> agree = torch.ones(8, 3, 16)  # every view of every item the same: the rest-mean is that view
    >>> round(float(BYOLAverage()(agree, agree)), 6)
    0.0
    """

    def compute_pair(self, online: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return 2.0 - 2.0 * (online * normalize(rest_mean(target))).sum(dim=-1).mean()


# --------------------------------------------------------------------------- poly-view family
class _PolyViewLoss(TemperatureLoss):
    """Shared stats of the poly-view losses: ``mi_lower_bound = log(n k - k + 1) - L``."""

    def _record_bound(self, z: torch.Tensor, loss: torch.Tensor) -> None:
        n, k, _ = z.shape
        self.last_stats["mi_lower_bound"] = math.log(n * k - k + 1) - loss.detach()

    def log_ratios(self, z: torch.Tensor) -> torch.Tensor:
        """``log l(i, alpha, beta)`` of poly-view Eq. 14 for ``beta != alpha``: ``(n, k, k - 1)``.

        ``log l = s(i alpha, i beta) - logsumexp({s(i alpha, i beta)} U {s(i beta, j gamma) : j != i})``;
        the negatives are those of ``(i, beta)``, as Eq. 14 writes it.
        """
        negatives = other_item_logsumexp(z, z, self.tau, chunked=self.chunked)  # (n, k) indexed [i, beta]
        return off_diagonal(contrastive_log_ratio(positive_logits(z, self.tau), negatives[:, None, :]))


@LOSSES.register("pvc_geometric")
class PolyViewGeometricLoss(_PolyViewLoss):
    """Geometric poly-view contrastive loss (registry name ``pvc_geometric``).

    Shidani, Hjelm, Ramapuram, Webb, Dhekane, Busbridge. *Poly-View Contrastive Learning*. ICLR 2024,
    arXiv:2403.05490.

    Eq. 13-14: ``log l(i, alpha, beta) = s(i alpha, i beta) - logsumexp({s(i alpha, i beta)} U
    {s(i beta, j gamma) : j != i})`` and ``L = -mean_{i, alpha, beta != alpha} log l(i, alpha, beta)``, with
    ``s(a, b) = <z_a, z_b> / tau``. ``last_stats["mi_lower_bound"] = log(n k - k + 1) - L``.

    Deviations from the paper: none in the value. The negatives of ``log l(i, alpha, beta)`` are those of
    ``(i, beta)`` (every view of every other item, ``(n - 1) k`` of them), as Eq. 14 writes it.

    Parameters
    ----------
    tau : float, default 0.1
        Softmax temperature, > 0.
    chunked : bool or None, default None
        ``None``: dense logit matrices up to ``DENSE_MAX_LOGITS`` entries, blockwise log-sum-exp above
        (memory ``O(block)``); ``True`` / ``False`` force the blockwise / dense path (same values and
        gradients).

    Returns
    -------
    torch.Tensor
        ``loss(z)`` for embeddings ``z`` of shape ``(n, k, d)`` (L2-normalized inside) is a 0-d tensor.

    Raises
    ------
    ValueError
        At construction, for a non-positive or non-numeric parameter; at call, for ``z`` that is not
        ``(n, k, d)`` with ``n >= 2`` items and ``k >= 2`` views, or that holds NaN / Inf.

    Examples
    --------
    >>> import torch
    >>> from multiview_app.losses import PolyViewGeometricLoss
    >>> z = torch.randn(8, 4, 16, generator=torch.Generator().manual_seed(0), requires_grad=True)
    >>> loss = PolyViewGeometricLoss(tau=0.5)(z)
    >>> loss.shape
    torch.Size([])
    >>> loss.backward()
    >>> z.grad.shape
    torch.Size([8, 4, 16])
    """

    def compute(self, z: torch.Tensor) -> torch.Tensor:
        loss = -self.log_ratios(z).mean()
        self._record_bound(z, loss)
        return loss


@LOSSES.register("pvc_arithmetic")
class PolyViewArithmeticLoss(_PolyViewLoss):
    """Arithmetic poly-view contrastive loss (registry name ``pvc_arithmetic``).

    Shidani, Hjelm, Ramapuram, Webb, Dhekane, Busbridge. *Poly-View Contrastive Learning*. ICLR 2024,
    arXiv:2403.05490.

    Eq. 12 with ``l`` of Eq. 14: ``L = -mean_{i, alpha} log((1 / (k - 1)) sum_{beta != alpha} l(i, alpha, beta))``
    (see :class:`PolyViewGeometricLoss` for ``l``). With ``k = 2`` it equals the geometric loss.
    ``last_stats["mi_lower_bound"] = log(n k - k + 1) - L``.

    Deviations from the paper: Eq. 12 is followed, not the appendix pseudocode, whose line
    ``logsumexp(losses) - log(k)`` takes the log-sum-exp of the cross-entropies ``-log l`` and subtracts
    the log of the batch size (the pseudocode's ``k``); Eq. 12 (paper notation: ``M`` views, ``K`` items)
    is ``-log`` of the mean of ``l`` over the ``M - 1`` other views, computed here as
    ``-(logsumexp_beta log l - log(k - 1))``. The negatives of ``log l(i, alpha, beta)`` are those of
    ``(i, beta)`` (every view of every other item, ``(n - 1) k`` of them), as Eq. 14 writes it.

    Parameters
    ----------
    tau : float, default 0.1
        Softmax temperature, > 0.
    chunked : bool or None, default None
        ``None``: dense logit matrices up to ``DENSE_MAX_LOGITS`` entries, blockwise log-sum-exp above
        (memory ``O(block)``); ``True`` / ``False`` force the blockwise / dense path (same values and
        gradients).

    Returns
    -------
    torch.Tensor
        ``loss(z)`` for embeddings ``z`` of shape ``(n, k, d)`` (L2-normalized inside) is a 0-d tensor.

    Raises
    ------
    ValueError
        At construction, for a non-positive or non-numeric parameter; at call, for ``z`` that is not
        ``(n, k, d)`` with ``n >= 2`` items and ``k >= 2`` views, or that holds NaN / Inf.

    Examples
    --------
    >>> import torch
    >>> from multiview_app.losses import PolyViewArithmeticLoss
    >>> z = torch.randn(8, 4, 16, generator=torch.Generator().manual_seed(0), requires_grad=True)
    >>> loss = PolyViewArithmeticLoss(tau=0.5)(z)
    >>> loss.shape
    torch.Size([])
    >>> from multiview_app.losses import PolyViewGeometricLoss  # k = 2: both averages are over one term
    >>> torch.allclose(PolyViewArithmeticLoss(tau=0.5)(z[:, :2]), PolyViewGeometricLoss(tau=0.5)(z[:, :2]))
    True
    """

    def compute(self, z: torch.Tensor) -> torch.Tensor:
        k = z.shape[1]
        loss = -(torch.logsumexp(self.log_ratios(z), dim=-1) - math.log(k - 1)).mean()
        self._record_bound(z, loss)
        return loss


@LOSSES.register("pvc_sufficient")
class SufficientStatisticsLoss(_PolyViewLoss):
    """Sufficient-statistics poly-view contrastive loss (registry name ``pvc_sufficient``).

    Shidani, Hjelm, Ramapuram, Webb, Dhekane, Busbridge. *Poly-View Contrastive Learning*. ICLR 2024,
    arXiv:2403.05490.

    Eq. 22 with the statistic ``Q`` of Eq. 24: ``Q_i alpha = normalize(mean_{beta != alpha} z_i beta)``;
    ``log l~(i, alpha) = <z_i alpha, Q_i alpha>/tau - logsumexp({that} U {<z_i alpha, Q_j gamma>/tau : j != i})``;
    ``L = -mean_{i, alpha} log l~``. ``last_stats["mi_lower_bound"] = log(n k - k + 1) - L``.

    Deviations from the paper: ``Q`` is the L2-normalized mean of the other views (Eq. 24's mean,
    normalized so that the logits of unit vectors stay in ``[-1/tau, 1/tau]``).

    Parameters
    ----------
    tau : float, default 0.1
        Softmax temperature, > 0.
    chunked : bool or None, default None
        ``None``: dense logit matrices up to ``DENSE_MAX_LOGITS`` entries, blockwise log-sum-exp above
        (memory ``O(block)``); ``True`` / ``False`` force the blockwise / dense path (same values and
        gradients).

    Returns
    -------
    torch.Tensor
        ``loss(z)`` for embeddings ``z`` of shape ``(n, k, d)`` (L2-normalized inside) is a 0-d tensor.

    Raises
    ------
    ValueError
        At construction, for a non-positive or non-numeric parameter; at call, for ``z`` that is not
        ``(n, k, d)`` with ``n >= 2`` items and ``k >= 2`` views, or that holds NaN / Inf.

    Examples
    --------
    >>> import torch
    >>> from multiview_app.losses import SufficientStatisticsLoss
    >>> z = torch.randn(8, 4, 16, generator=torch.Generator().manual_seed(0), requires_grad=True)
    >>> loss = SufficientStatisticsLoss(tau=0.5)(z)
    >>> loss.shape
    torch.Size([])
    >>> from multiview_app.losses import PolyViewGeometricLoss  # k = 2: Q is the other view
    >>> torch.allclose(SufficientStatisticsLoss(tau=0.5)(z[:, :2]), PolyViewGeometricLoss(tau=0.5)(z[:, :2]))
    True
    """

    def compute(self, z: torch.Tensor) -> torch.Tensor:
        q = normalize(rest_mean(z))
        positive = (z * q).sum(dim=-1) / self.tau  # (n, k)
        loss = -contrastive_log_ratio(positive, other_item_logsumexp(z, q, self.tau, chunked=self.chunked)).mean()
        self._record_bound(z, loss)
        return loss


@LOSSES.register("aggnce")
class AggNCELoss(TemperatureLoss):
    """Aggregated InfoNCE over ``k`` views (registry name ``aggnce``).

    Cui, Huang, Wang, Wang. *AggNCE: Asymptotically Identifiable Contrastive Learning*.

    Eq. 10 with ``B = k - 1`` positives per anchor, aggregated as ``p_i alpha = mean_{beta != alpha} z_i beta``
    (the paper's ``f-bar(x+)``, not re-normalized):
    ``L = mean_{i, alpha}[-<z_i alpha, p_i alpha>/tau + logsumexp({<z_i alpha, p_i alpha>/tau} U
    {s(i alpha, j gamma) : j != i})]``, ``s(a, b) = <z_a, z_b> / tau``. With ``k = 2`` (``B = 1``) it is
    InfoNCE, equal to :class:`PolyViewGeometricLoss`.

    Deviations from the paper: the ``M`` negatives of anchor ``(i, alpha)`` are every view of every other
    item of the batch (``(n - 1) k``); every view is an anchor in turn (the paper writes one anchor ``x``).

    Parameters
    ----------
    tau : float, default 0.1
        Softmax temperature, > 0.
    chunked : bool or None, default None
        ``None``: dense logit matrices up to ``DENSE_MAX_LOGITS`` entries, blockwise log-sum-exp above
        (memory ``O(block)``); ``True`` / ``False`` force the blockwise / dense path (same values and
        gradients).

    Returns
    -------
    torch.Tensor
        ``loss(z)`` for embeddings ``z`` of shape ``(n, k, d)`` (L2-normalized inside) is a 0-d tensor.

    Raises
    ------
    ValueError
        At construction, for a non-positive or non-numeric parameter; at call, for ``z`` that is not
        ``(n, k, d)`` with ``n >= 2`` items and ``k >= 2`` views, or that holds NaN / Inf.

    Examples
    --------
    >>> import torch
    >>> from multiview_app.losses import AggNCELoss
    >>> z = torch.randn(8, 4, 16, generator=torch.Generator().manual_seed(0), requires_grad=True)
    >>> loss = AggNCELoss(tau=0.5)(z)
    >>> loss.shape
    torch.Size([])
    >>> from multiview_app.losses import PolyViewGeometricLoss  # B = 1: InfoNCE
    >>> torch.allclose(AggNCELoss(tau=0.5)(z[:, :2]), PolyViewGeometricLoss(tau=0.5)(z[:, :2]))
    True
    """

    def compute(self, z: torch.Tensor) -> torch.Tensor:
        positive = (z * rest_mean(z)).sum(dim=-1) / self.tau  # (n, k)
        return -contrastive_log_ratio(positive, other_item_logsumexp(z, z, self.tau, chunked=self.chunked)).mean()
