"""Learnable temperature for InfoNCE-type losses (CLIP's logit scale).

``logit_scale`` is a parameter initialised to ``log(1 / tau)``; the logits are multiplied by
``exp(min(logit_scale, log(max_logit_scale)))`` (CLIP clamps the scale at 100). Without
``learnable_temperature`` the loss divides by the fixed ``tau`` exactly as before.
The trainer optimizes loss parameters (without weight decay) and checkpoints them.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .base import check_positive


class LogitScale(nn.Module):
    """``scale(logits)`` = ``logits / tau`` (fixed) or ``logits * exp(clamp(logit_scale))`` (learnable)."""

    def __init__(self, tau: float, learnable: bool = False, max_logit_scale: float = 100.0, loss: str = "") -> None:
        super().__init__()
        self.tau = check_positive("tau", tau, loss=loss)
        self.max_log = math.log(check_positive("max_logit_scale", max_logit_scale, loss=loss))
        if learnable and 1.0 / self.tau > max_logit_scale:
            raise ValueError(f"loss '{loss}': 1 / tau = {1 / self.tau:g} exceeds max_logit_scale = {max_logit_scale:g}")
        self.learnable = bool(learnable)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1.0 / self.tau))) if learnable else None

    def value(self) -> float:
        """Current multiplier ``1 / tau`` (clamped when learnable; a host read then)."""
        return float(self.stat())

    def stat(self) -> float | torch.Tensor:
        """Current multiplier ``1 / tau`` for ``last_stats``: a float, or a detached 0-d tensor when
        learnable (no host read)."""
        if self.logit_scale is None:
            return 1.0 / self.tau
        return self.logit_scale.detach().clamp(max=self.max_log).exp()

    def bound(self) -> float:
        """A host-side upper bound of the multiplier (no host read): ``1 / tau``, or ``max_logit_scale``
        when learnable (its clamp)."""
        return 1.0 / self.tau if self.logit_scale is None else math.exp(self.max_log)

    def multiplier(self, like: torch.Tensor) -> float | torch.Tensor:
        """The multiplier ``1 / tau``: a float when fixed, else a 0-d tensor of ``like``'s dtype with gradient."""
        if self.logit_scale is None:
            return 1.0 / self.tau
        return self.logit_scale.clamp(max=self.max_log).exp().to(like.dtype)

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        if self.logit_scale is None:
            return logits / self.tau
        return logits * self.logit_scale.clamp(max=self.max_log).exp().to(logits.dtype)


__all__ = ["LogitScale"]
