"""Contrastive and BYOL-style multi-view losses (issue 2, losses 1-6).

Notation: ``z`` is ``(n, k, d)`` and already L2-normalized by :class:`MultiViewLoss`;
``s(a, b) = <z_a, z_b> / tau``; item ``i``, views ``alpha, beta, gamma``. The *negatives* of an
anchor ``(i, alpha)`` are every view of every other item, ``{(j, gamma) : j != i}``.

Everything is vectorized: one Gram matrix per call, masks instead of loops, ``torch.logsumexp``
for every softmax denominator. The shared building blocks are

* :func:`other_item_logits` -- logits of anchors against all views of the *other* items
  (the ``j == i`` block masked to ``-inf``), used by the PVC losses, AggNCE and FlatNCE;
* :func:`rest_mean` -- the mean of the other ``k - 1`` views of each item;
* :func:`pair_logsumexp_ce` -- InfoNCE cross-entropy of one view against another.
"""
from __future__ import annotations

import math
from typing import ClassVar

import torch

from . import LOSSES
from .base import MultiViewLoss, check_positive, normalize


# --------------------------------------------------------------------------- shared helpers
def other_item_logits(anchors: torch.Tensor, targets: torch.Tensor, tau: float) -> torch.Tensor:
    """Logits of every anchor against every view of every *other* item.

    ``anchors`` ``(n, a, d)``, ``targets`` ``(n, k, d)`` -> ``(n, a, n * k)`` where entry
    ``[i, alpha, j * k + gamma] = <anchors[i, alpha], targets[j, gamma]> / tau`` for ``j != i``
    and ``-inf`` for ``j == i`` (the anchor's own item is never a negative).
    """
    n, a, d = anchors.shape
    k = targets.shape[1]
    logits = (anchors.reshape(n * a, d) @ targets.reshape(n * k, d).T).div_(tau)
    logits = logits.view(n, a, n, k)
    same_item = torch.eye(n, dtype=torch.bool, device=anchors.device).view(n, 1, n, 1)
    return logits.masked_fill(same_item, float("-inf")).view(n, a, n * k)


def other_item_logsumexp(anchors: torch.Tensor, targets: torch.Tensor, tau: float) -> torch.Tensor:
    """``logsumexp`` over the negatives of each anchor: ``(n, a, d), (n, k, d) -> (n, a)``."""
    return torch.logsumexp(other_item_logits(anchors, targets, tau), dim=-1)


def rest_mean(z: torch.Tensor) -> torch.Tensor:
    """Mean of the other views of each item: ``(n, k, d) -> (n, k, d)``, entry ``[i, alpha]``
    is ``mean_{beta != alpha} z[i, beta]`` (not re-normalized)."""
    k = z.shape[1]
    return (z.sum(dim=1, keepdim=True) - z) / (k - 1)


def positive_logits(z: torch.Tensor, tau: float) -> torch.Tensor:
    """Within-item logits ``s(i alpha, i beta)``: ``(n, k, d) -> (n, k, k)`` indexed ``[i, alpha, beta]``."""
    return torch.einsum("iad,ibd->iab", z, z) / tau


def off_diagonal(x: torch.Tensor) -> torch.Tensor:
    """Entries ``[..., alpha, beta]`` with ``alpha != beta``: ``(..., k, k) -> (..., k, k - 1)``."""
    k = x.shape[-1]
    mask = ~torch.eye(k, dtype=torch.bool, device=x.device)
    return x[..., mask].view(*x.shape[:-2], k, k - 1)


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
    """Base of the losses with one temperature parameter ``tau`` (> 0)."""

    def __init__(self, tau: float = 0.1) -> None:
        super().__init__()
        self.tau = check_positive("tau", tau, loss=self.name)

    def extra_repr(self) -> str:
        return f"tau={self.tau}"


# --------------------------------------------------------------------------- InfoNCE baselines
@LOSSES.register("infonce_pwe")
class InfoNCEPairwise(TemperatureLoss):
    """M3G Eq. 1 averaged over ordered view pairs (Eq. 3).

    ``L(alpha -> beta) = mean_i[-s(i alpha, i beta) + logsumexp_j s(i alpha, j beta)]``; the loss is
    the mean over ``alpha != beta``. Each unordered pair's ``(n, n)`` block is computed once: its
    row softmax gives ``alpha -> beta`` and its column softmax ``beta -> alpha``.
    """

    name: ClassVar[str] = "infonce_pwe"

    def compute(self, z: torch.Tensor) -> torch.Tensor:
        k = z.shape[1]
        first, second = torch.triu_indices(k, k, offset=1, device=z.device)
        # (p, n, n) with p = k (k - 1) / 2 unordered pairs
        logits = torch.bmm(z[:, first].transpose(0, 1), z[:, second].permute(1, 2, 0)) / self.tau
        loss = 0.5 * (pair_logsumexp_ce(logits, 2).mean() + pair_logsumexp_ce(logits, 1).mean())
        self.last_stats["mi_lower_bound"] = math.log(z.shape[0]) - float(loss.detach())
        return loss


@LOSSES.register("infonce_ave")
class InfoNCEAverage(TemperatureLoss):
    """M3G Eq. 4: view ``alpha`` against ``xbar_i = normalize(mean_{beta != alpha} z_i beta)``.

    ``L(alpha) = mean_i[-s(z_i alpha, xbar_i) + logsumexp_j s(z_i alpha, xbar_j)]``, averaged over alpha.
    """

    name: ClassVar[str] = "infonce_ave"

    def compute(self, z: torch.Tensor) -> torch.Tensor:
        xbar = normalize(rest_mean(z))
        logits = torch.bmm(z.transpose(0, 1), xbar.permute(1, 2, 0)) / self.tau  # (k, n, n)
        loss = pair_logsumexp_ce(logits, 2).mean()
        self.last_stats["mi_lower_bound"] = math.log(z.shape[0]) - float(loss.detach())
        return loss


# --------------------------------------------------------------------------- BYOL-style
@LOSSES.register("byol_pwe")
class BYOLPairwise(MultiViewLoss):
    """M3G Eq. 2 over ordered view pairs: ``2 - 2 mean_i mean_{alpha != beta} <z_i alpha, z_i beta>``.

    Uses ``sum_{alpha != beta} <z_alpha, z_beta> = ||sum_alpha z_alpha||^2 - k`` (unit vectors),
    so the cost is O(n k d).
    """

    name: ClassVar[str] = "byol_pwe"
    gather_across_processes: ClassVar[bool] = False

    def compute(self, z: torch.Tensor) -> torch.Tensor:
        k = z.shape[1]
        norms = (z * z).sum(dim=-1)  # (n, k), 1 up to rounding
        pair_sum = z.sum(dim=1).pow(2).sum(dim=-1) - norms.sum(dim=1)  # (n,)
        return 2.0 - 2.0 * (pair_sum / (k * (k - 1))).mean()


@LOSSES.register("byol_ave")
class BYOLAverage(MultiViewLoss):
    """M3G Eq. 2 against the rest: ``2 - 2 mean_{i, alpha} <z_i alpha, normalize(mean_{beta != alpha} z_i beta)>``."""

    name: ClassVar[str] = "byol_ave"
    gather_across_processes: ClassVar[bool] = False

    def compute(self, z: torch.Tensor) -> torch.Tensor:
        return 2.0 - 2.0 * (z * normalize(rest_mean(z))).sum(dim=-1).mean()


# --------------------------------------------------------------------------- poly-view family
class _PolyViewLoss(TemperatureLoss):
    """Shared stats of the poly-view losses: ``mi_lower_bound = log(n k - k + 1) - L``."""

    def _record_bound(self, z: torch.Tensor, loss: torch.Tensor) -> None:
        n, k, _ = z.shape
        self.last_stats["mi_lower_bound"] = math.log(n * k - k + 1) - float(loss.detach())

    def log_ratios(self, z: torch.Tensor) -> torch.Tensor:
        """``log l(i, alpha, beta)`` of poly-view Eq. 14 for ``beta != alpha``: ``(n, k, k - 1)``.

        ``log l = s(i alpha, i beta) - logsumexp({s(i alpha, i beta)} U {s(i beta, j gamma) : j != i})``;
        the negatives are those of ``(i, beta)``, as Eq. 14 writes it.
        """
        negatives = other_item_logsumexp(z, z, self.tau)  # (n, k) indexed [i, beta]
        return off_diagonal(contrastive_log_ratio(positive_logits(z, self.tau), negatives[:, None, :]))


@LOSSES.register("pvc_geometric")
class PolyViewGeometric(_PolyViewLoss):
    """Geometric PVC (poly-view Eq. 13-14): ``L = -mean_{i, alpha, beta != alpha} log l(i, alpha, beta)``."""

    name: ClassVar[str] = "pvc_geometric"

    def compute(self, z: torch.Tensor) -> torch.Tensor:
        loss = -self.log_ratios(z).mean()
        self._record_bound(z, loss)
        return loss


@LOSSES.register("pvc_arithmetic")
class PolyViewArithmetic(_PolyViewLoss):
    """Arithmetic PVC (poly-view Eq. 12, 14):
    ``L = -mean_{i, alpha} log((1 / (k - 1)) sum_{beta != alpha} l(i, alpha, beta))``.

    (The paper's pseudocode line ``logsumexp(losses) - log(k)`` is not followed.)
    """

    name: ClassVar[str] = "pvc_arithmetic"

    def compute(self, z: torch.Tensor) -> torch.Tensor:
        k = z.shape[1]
        loss = -(torch.logsumexp(self.log_ratios(z), dim=-1) - math.log(k - 1)).mean()
        self._record_bound(z, loss)
        return loss


@LOSSES.register("pvc_sufficient")
class PolyViewSufficient(_PolyViewLoss):
    """Sufficient-statistics loss (poly-view Eq. 22, Q from Eq. 24).

    ``Q_i alpha = normalize(mean_{beta != alpha} z_i beta)``;
    ``log l~(i, alpha) = <z_i alpha, Q_i alpha>/tau - logsumexp({that} U {<z_i alpha, Q_j gamma>/tau : j != i})``;
    ``L = -mean_{i, alpha} log l~``.
    """

    name: ClassVar[str] = "pvc_sufficient"

    def compute(self, z: torch.Tensor) -> torch.Tensor:
        q = normalize(rest_mean(z))
        positive = (z * q).sum(dim=-1) / self.tau  # (n, k)
        loss = -contrastive_log_ratio(positive, other_item_logsumexp(z, q, self.tau)).mean()
        self._record_bound(z, loss)
        return loss


@LOSSES.register("aggnce")
class AggNCE(TemperatureLoss):
    """AggNCE (Eq. 10) with ``B = k - 1`` positives aggregated as ``p_i alpha = mean_{beta != alpha} z_i beta``
    (not re-normalized):
    ``L = mean_{i, alpha}[-<z_i alpha, p_i alpha>/tau + logsumexp({<z_i alpha, p_i alpha>/tau} U {s(i alpha, j gamma) : j != i})]``.
    """

    name: ClassVar[str] = "aggnce"

    def compute(self, z: torch.Tensor) -> torch.Tensor:
        positive = (z * rest_mean(z)).sum(dim=-1) / self.tau  # (n, k)
        return -contrastive_log_ratio(positive, other_item_logsumexp(z, z, self.tau)).mean()
