"""FlatNCE (Chen et al., Alg. 1 / Eq. 6) for k views, with optional ESS scheduling of tau (Alg. S1).

For every anchor ``(i, alpha)``, positive ``(i, beta)`` (``beta != alpha``) and the negatives of
``(i, alpha)`` (all views of the other items, ``K = (n - 1) k`` of them):

    c = logsumexp_{j != i, gamma}( s(i alpha, j gamma) - s(i alpha, i beta) )

The gradient is that of ``mean(exp(c - detach(c)))``; the returned value is FlatCLR's
``surrogate - 1 + detach(InfoNCE)`` with ``InfoNCE = mean softplus(c)``, i.e. it reads as the matching
InfoNCE (the same anchors, positives and negatives; equal to ``pvc_geometric``).
"""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from . import LOSSES
from .base import check_positive
from .contrastive import TemperatureLoss, off_diagonal, other_item_logsumexp, positive_logits


def effective_sample_size(negatives_weight_sq: torch.Tensor, num_negatives: int) -> torch.Tensor:
    """FlatNCE Eq. 10 per anchor: ``ESS = 1 / (K sum_j w_j^2)`` in ``[1 / K, 1]`` from the softmax
    weights' ``sum_j w_j^2`` (any shape) over ``K = num_negatives`` negatives."""
    return 1.0 / (num_negatives * negatives_weight_sq)


def batch_ess(z: torch.Tensor, tau: float) -> float:
    """Mean ESS over the anchors of unit-vector embeddings ``z`` ``(n, k, d)``: the softmax over the
    ``(n - 1) k`` other-item negatives of each anchor ``(i, alpha)`` at temperature ``tau``."""
    n, k, _ = z.shape
    _, weight_sq = other_item_logsumexp(z, z, tau, return_weight_sq=True)
    return float(effective_sample_size(weight_sq, (n - 1) * k).mean())


@LOSSES.register("flatnce")
class FlatNCE(TemperatureLoss):
    """FlatNCE over all ordered view pairs (see module docstring).

    Parameters: ``tau`` (initial temperature, > 0); ``ess_target`` (``None``: fixed tau; a value in
    ``(0, 1]``: after each training-mode forward, tau is multiplied by ``1 - ess_rate`` when the batch
    ESS is above the target (sharper weights, lower ESS) and by ``1 + ess_rate`` otherwise -- Alg. S1
    applied so that the ESS is driven towards the target; Alg. S1 as printed updates the *inverse*
    temperature in that direction, which would move the ESS away from the target); ``ess_rate``
    (adaptation rate gamma in ``(0, 1)``, 0.01 in the paper); ``chunked`` as in
    :class:`~.contrastive.TemperatureLoss`.

    last_stats: ``loss`` (= ``infonce``), ``infonce``, ``ess``, ``tau`` (used in this call),
    ``mi_lower_bound`` (``log(n k - k + 1) - infonce``).
    """


    def __init__(
        self, tau: float = 0.1, ess_target: float | None = None, ess_rate: float = 0.01, chunked: bool | None = None
    ) -> None:
        super().__init__(tau, chunked)
        if ess_target is not None:
            ess_target = check_positive("ess_target", ess_target, loss=self.name)
            if ess_target > 1.0:
                raise ValueError(f"loss '{self.name}': parameter ess_target must be in (0, 1], got {ess_target}")
        rate = check_positive("ess_rate", ess_rate, loss=self.name)
        if rate >= 1.0:
            raise ValueError(f"loss '{self.name}': parameter ess_rate must be in (0, 1), got {rate}")
        self.ess_target = ess_target
        self.ess_rate = rate

    def compute(self, z: torch.Tensor) -> torch.Tensor:
        n, k, _ = z.shape
        # logsumexp over the K = (n - 1) k negatives of (i, alpha) and sum_j w_j^2 of their softmax
        negatives, weight_sq = other_item_logsumexp(z, z, self.tau, return_weight_sq=True, chunked=self.chunked)  # (n, k) each
        positive = off_diagonal(positive_logits(z, self.tau))  # (n, k, k - 1) [i, alpha, beta]
        c = negatives[:, :, None] - positive  # (n, k, k - 1)
        surrogate = torch.exp(c - c.detach()).mean()
        with torch.no_grad():
            infonce = F.softplus(c).mean()
            ess = float(effective_sample_size(weight_sq, (n - 1) * k).mean())
        self.last_stats.update(
            infonce=float(infonce),
            ess=ess,
            tau=self.tau,
            mi_lower_bound=math.log(n * k - k + 1) - float(infonce),
        )
        if self.ess_target is not None and self.training:
            self.tau *= (1.0 - self.ess_rate) if ess > self.ess_target else (1.0 + self.ess_rate)
        return surrogate - 1.0 + infonce

    def extra_repr(self) -> str:
        return f"tau={self.tau}, ess_target={self.ess_target}, ess_rate={self.ess_rate}, chunked={self.chunked}"

    def get_extra_state(self) -> dict[str, Any]:
        """Keep the scheduled tau in checkpoints (``state_dict``)."""
        return {"tau": self.tau}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.tau = check_positive("tau", state["tau"], loss=self.name)
