"""SleepFM's contrastive losses over modalities: leave-one-out (``sleepfm_loo``) and pairwise (``sleepfm_pairwise``).

Thapa et al., *SleepFM: Multi-modal Representation Learning for Sleep Across Brain Activity, ECG and
Respiratory Signals*, ICML 2024. Written here from the paper's formulas.

With the k views (modalities) of a batch L2-normalized, ``z_m`` ``(n, d)``, and a learnable scalar ``t``
(initialized at 0, clamped at ``t >= 0``; the logit scale is ``exp(t) >= 1``):

* leave-one-out: ``r_m = mean_{j != m} z_j`` (**not** renormalized), ``logits_m = exp(t) z_m r_m^T``
  ``(n, n)``, and ``loss = sum_m [CE(logits_m, I) + CE(logits_m^T, I)] / (2 k)``;
* pairwise: ``logits_mj = exp(t) z_m z_j^T`` for every ordered pair ``m != j``, and the loss is the mean of
  the ``2 k (k - 1)`` cross-entropies ``CE(logits_mj, I)`` and ``CE(logits_mj^T, I)`` (this normalization
  is ours: it keeps the pairwise loss on the leave-one-out loss's scale, and with ``k = 2`` both are equal).

``CE(L, I)`` is the cross-entropy of each row of ``L`` against the matching item (the diagonal), averaged
over the batch. How they differ from ``infonce_ave`` (each view against the average of the others, M3G
paper Eq. 4): ``infonce_ave`` renormalizes the average, is one-directional (rows only) and divides by a
fixed ``tau`` (unless ``learnable_temperature``); ``sleepfm_loo`` keeps the average's norm (which shrinks
as the other views disagree), adds the transposed (column) direction, and learns its scale from ``exp(0) = 1``.

``t`` is an ``nn.Parameter`` of the loss module: the trainer optimizes the loss's parameters (without
weight decay) and checkpoints them. The clamp is applied to the parameter itself before each call (an
optimizer step that takes it below 0 is undone), so its gradient never dies at the boundary.
"""

from __future__ import annotations

import torch
from torch import nn

from . import LOSSES
from .base import MultiViewLoss


def symmetric_ce(logits: torch.Tensor) -> torch.Tensor:
    """``CE(L, I) + CE(L^T, I)`` for a stack of logit matrices ``(..., n, n)``, each CE batch-averaged -> ``(...)``."""
    diagonal = logits.diagonal(dim1=-2, dim2=-1)  # (..., n)
    rows = torch.logsumexp(logits, dim=-1) - diagonal
    columns = torch.logsumexp(logits, dim=-2) - diagonal
    return (rows + columns).mean(dim=-1)


class SleepFMLoss(MultiViewLoss):
    """Base of the SleepFM losses: the learnable log-scale ``t`` (``log_scale``), its clamp and diagnostics.

    Parameters
    ----------
    init_log_scale : float, default 0.0
        Initial ``t`` (SleepFM: 0, a logit scale of 1); must be >= 0.

    ``last_stats``: ``loss`` and ``logit_scale`` (= ``exp(t)``).
    """

    def __init__(self, init_log_scale: float = 0.0) -> None:
        super().__init__()
        if not float(init_log_scale) >= 0.0:
            raise ValueError(f"loss '{self.name}': init_log_scale must be >= 0, got {init_log_scale}")
        self.log_scale = nn.Parameter(torch.tensor(float(init_log_scale)))

    def scale(self, like: torch.Tensor) -> torch.Tensor:
        """``exp(t)`` as a 0-d tensor of ``like``'s dtype, after clamping the parameter at ``t >= 0``."""
        with torch.no_grad():  # the clamp acts on the parameter: its gradient stays alive at t = 0
            self.log_scale.clamp_(min=0.0)
        return self.log_scale.to(like.dtype).exp()

    def temperature(self) -> float | None:
        """``1 / exp(t)`` (a host read)."""
        return float(torch.exp(-self.log_scale.detach().clamp(min=0.0)))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        loss = super().forward(z)
        self.last_stats["logit_scale"] = self.log_scale.detach().clamp(min=0.0).exp()
        return loss


@LOSSES.register("sleepfm_loo")
class SleepFMLeaveOneOutLoss(SleepFMLoss):
    """SleepFM's leave-one-out contrastive loss (registry name ``sleepfm_loo``; formula in the module docstring).

    Each modality ``z_m`` ``(n, d)`` is contrasted, in both directions, with the plain mean of the other
    modalities ``r_m`` (not renormalized), at the learned scale ``exp(t)``.

    Examples
    --------
    >>> import torch
    >>> from multiview_app.losses import build_loss
    >>> z = torch.randn(8, 3, 16, generator=torch.Generator().manual_seed(0))
    >>> build_loss("sleepfm_loo")(z).shape
    torch.Size([])
    >>> torch.allclose(build_loss("sleepfm_loo")(z[:, :2]), build_loss("sleepfm_pairwise")(z[:, :2]))
    True
    """

    def compute(self, z: torch.Tensor) -> torch.Tensor:
        k = z.shape[1]
        rest = (z.sum(dim=1, keepdim=True) - z) / (k - 1)  # (n, k, d): r_m, not renormalized
        logits = self.scale(z) * torch.bmm(z.transpose(0, 1), rest.permute(1, 2, 0))  # (k, n, n)
        return symmetric_ce(logits).sum() / (2 * k)


@LOSSES.register("sleepfm_pairwise")
class SleepFMPairwiseLoss(SleepFMLoss):
    """SleepFM's pairwise contrastive loss (registry name ``sleepfm_pairwise``; formula in the module docstring).

    Every ordered pair of modalities ``(m, j)``, ``m != j``, is contrasted in both directions at the
    learned scale ``exp(t)``; the ``2 k (k - 1)`` cross-entropies are averaged.

    Examples
    --------
    >>> import torch
    >>> from multiview_app.losses import build_loss
    >>> build_loss("sleepfm_pairwise")(torch.randn(8, 4, 16)).shape
    torch.Size([])
    """

    def compute(self, z: torch.Tensor) -> torch.Tensor:
        k = z.shape[1]
        views = z.transpose(0, 1)  # (k, n, d)
        logits = self.scale(z) * torch.einsum("mid,jed->mjie", views, views)  # (k, k, n, n): z_m z_j^T
        # the ordered pairs m != j as flat indices into (k * k): a gather, not a boolean mask (which reads the
        # mask's count back to the host)
        pairs = torch.tensor([m * k + j for m in range(k) for j in range(k) if m != j], device=z.device)
        return symmetric_ce(logits.flatten(0, 1).index_select(0, pairs)).sum() / (2 * k * (k - 1))


__all__ = ["SleepFMLeaveOneOutLoss", "SleepFMLoss", "SleepFMPairwiseLoss", "symmetric_ce"]
