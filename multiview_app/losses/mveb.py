"""MVEB (Wen et al., Eq. 11) generalized to k views, with the Stein score estimator (App. A, Eq. 26).

    L = -A + beta * mean_alpha mean_i <stopgrad(S_i alpha), z_i alpha>
    A = mean_i mean_{alpha < beta} <z_i alpha, z_i beta>

``S_alpha`` ``(n, d)`` estimates the score of the batch of view ``alpha`` with the vMF kernel
``K_ij = exp(<z_i, z_j> / Delta)``: ``S = -(K + eta I)^{-1} G``, ``G_i = (z_i / Delta) sum_m K_im``,
solved (not inverted) without gradient in float64. ``Delta`` = median of ``1 - <z_i, z_j>`` over
``i != j``, floored at 0.1, per view.
"""
from __future__ import annotations

from typing import ClassVar

import torch

from . import LOSSES
from .base import MultiViewLoss, check_positive

MIN_BANDWIDTH = 0.1


def median(values: torch.Tensor) -> torch.Tensor:
    """Median along the last dimension (mean of the two middle values for an even count):
    ``(..., m) -> (...)``."""
    m = values.shape[-1]
    low = torch.kthvalue(values, (m + 1) // 2, dim=-1).values
    high = torch.kthvalue(values, m // 2 + 1, dim=-1).values
    return 0.5 * (low + high)


def bandwidth_from_gram(gram: torch.Tensor, floor: float = MIN_BANDWIDTH) -> torch.Tensor:
    """Median of ``1 - gram[i, j]`` over ``i < j`` (== over ``i != j``), at least ``floor``:
    ``(..., n, n) -> (...)``."""
    n = gram.shape[-1]
    rows, cols = torch.triu_indices(n, n, offset=1, device=gram.device)
    return median(1.0 - gram[..., rows, cols]).clamp_min(floor)


def vmf_bandwidth(z: torch.Tensor, floor: float = MIN_BANDWIDTH) -> torch.Tensor:
    """Median pairwise cosine distance ``1 - <z_i, z_j>`` of unit rows ``z`` ``(..., n, d)``,
    floored: ``-> (...)``."""
    return bandwidth_from_gram(z @ z.transpose(-1, -2), floor)


@torch.no_grad()
def stein_score(z: torch.Tensor, eta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Stein score estimate with the vMF kernel, per batch of unit vectors ``z`` ``(..., n, d)``.

    Returns ``(S (..., n, d), bandwidth (...))`` with ``(K + eta I) S = -G``,
    ``K_ij = exp(<z_i, z_j> / Delta)``, ``G_i = (z_i / Delta) sum_m K_im``; computed in float64
    without gradient (batched linear solve), returned in ``z``'s dtype.
    """
    x = z.detach().double()
    gram = x @ x.transpose(-1, -2)  # (..., n, n)
    delta = bandwidth_from_gram(gram)[..., None, None]  # (..., 1, 1)
    kernel = torch.exp(gram / delta)
    g = x / delta * kernel.sum(dim=-1, keepdim=True)  # (..., n, d)
    eye = torch.eye(x.shape[-2], dtype=x.dtype, device=x.device)
    score = -torch.linalg.solve(kernel + eta * eye, g)
    return score.to(z.dtype), delta[..., 0, 0].to(z.dtype)


@LOSSES.register("mveb")
class MVEB(MultiViewLoss):
    """Multi-view entropy bottleneck: alignment over view pairs plus ``beta`` times the Stein entropy
    surrogate (see module docstring). ``beta >= 0`` (0: pure alignment), ``eta > 0``.

    last_stats: ``alignment`` (A), ``entropy_surrogate`` (``mean <S, z>``), ``bandwidth`` (mean
    Delta over views).
    """

    name: ClassVar[str] = "mveb"

    def __init__(self, beta: float = 0.01, eta: float = 0.01) -> None:
        super().__init__()
        try:
            beta = float(beta)
        except (TypeError, ValueError):
            raise ValueError(f"loss '{self.name}': parameter beta must be a number, got {beta!r}") from None
        if not (0.0 <= beta < float("inf")):
            raise ValueError(f"loss '{self.name}': parameter beta must be >= 0, got {beta}")
        self.beta = beta
        self.eta = check_positive("eta", eta, loss=self.name)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, eta={self.eta}"

    def compute(self, z: torch.Tensor) -> torch.Tensor:
        k = z.shape[1]
        # sum_{alpha < beta} <z_alpha, z_beta> = (||sum_alpha z_alpha||^2 - sum_alpha ||z_alpha||^2) / 2
        pair_sum = 0.5 * (z.sum(dim=1).pow(2).sum(dim=-1) - z.pow(2).sum(dim=(1, 2)))  # (n,)
        alignment = pair_sum.mean() / (k * (k - 1) / 2)
        score, bandwidth = stein_score(z.transpose(0, 1), self.eta)  # (k, n, d), (k,): one batch per view
        entropy_surrogate = (score.transpose(0, 1) * z).sum(dim=-1).mean()
        self.last_stats.update(
            alignment=float(alignment.detach()),
            entropy_surrogate=float(entropy_surrogate.detach()),
            bandwidth=float(bandwidth.mean()),
        )
        return -alignment + self.beta * entropy_surrogate
