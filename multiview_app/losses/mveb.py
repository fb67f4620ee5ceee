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
    """Median of a 1-D tensor (mean of the two middle values for an even count): ``(m,) -> ()``."""
    m = values.numel()
    low = torch.kthvalue(values, (m + 1) // 2).values
    high = torch.kthvalue(values, m // 2 + 1).values
    return 0.5 * (low + high)


def vmf_bandwidth(z: torch.Tensor, floor: float = MIN_BANDWIDTH) -> torch.Tensor:
    """Median pairwise cosine distance ``1 - <z_i, z_j>`` over ``i < j`` (== over ``i != j``), at least
    ``floor``. ``z`` ``(n, d)`` unit rows -> 0-d tensor."""
    n = z.shape[0]
    rows, cols = torch.triu_indices(n, n, offset=1, device=z.device)
    distances = 1.0 - (z[rows] * z[cols]).sum(dim=-1)
    return median(distances).clamp_min(floor)


@torch.no_grad()
def stein_score(z: torch.Tensor, eta: float, bandwidth: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Stein score estimate with the vMF kernel for one batch ``z`` ``(n, d)`` of unit vectors.

    Returns ``(S (n, d), bandwidth ())`` with ``(K + eta I) S = -G``; computed in float64 without
    gradient, returned in ``z``'s dtype.
    """
    x = z.detach().double()
    delta = vmf_bandwidth(x) if bandwidth is None else bandwidth.double()
    kernel = torch.exp(x @ x.T / delta)  # (n, n)
    g = x / delta * kernel.sum(dim=1, keepdim=True)  # (n, d)
    eye = torch.eye(x.shape[0], dtype=x.dtype, device=x.device)
    score = -torch.linalg.solve(kernel + eta * eye, g)
    return score.to(z.dtype), delta.to(z.dtype)


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
        scores, bandwidths = zip(*(stein_score(z[:, view], self.eta) for view in range(k)))
        score = torch.stack(scores, dim=1)  # (n, k, d), no gradient
        entropy_surrogate = (score * z).sum(dim=-1).mean()
        self.last_stats.update(
            alignment=float(alignment.detach()),
            entropy_surrogate=float(entropy_surrogate.detach()),
            bandwidth=float(torch.stack(bandwidths).mean()),
        )
        return -alignment + self.beta * entropy_surrogate
