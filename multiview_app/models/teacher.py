"""EMA teacher (BYOL / M3G Sec. 2.1): ``theta_t <- m * theta_t + (1 - m) * theta_s`` after each step."""

from __future__ import annotations

import copy
import math

import torch
from torch import nn

from ..data.batch import ViewBatch


def unwrap(model: nn.Module) -> nn.Module:
    """The module inside a DDP / accelerate wrapper (``.module``), else ``model``."""
    while hasattr(model, "module") and isinstance(model.module, nn.Module):
        model = model.module
    return model


def cosine_momentum(step: int, total_steps: int, base: float = 0.996) -> float:
    """BYOL schedule: ``1 - (1 - base) * (cos(pi * step / total_steps) + 1) / 2``, from base to 1."""
    if total_steps <= 0:
        return 1.0
    progress = min(max(step / total_steps, 0.0), 1.0)
    return 1.0 - (1.0 - base) * (math.cos(math.pi * progress) + 1.0) / 2.0


class EMATeacher(nn.Module):
    """Frozen deep copy of a :class:`~multiview_app.models.model.MultiViewModel`, updated by EMA.

    The teacher has no gradients; its ``embed`` skips the predictor (teacher omits it). Buffers
    (e.g. BatchNorm running stats) are copied from the student on every update.
    """

    def __init__(self, student: nn.Module) -> None:
        super().__init__()
        self.model = copy.deepcopy(unwrap(student))
        for p in self.model.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def update(self, student: nn.Module, momentum: float) -> None:
        """``teacher = momentum * teacher + (1 - momentum) * student`` (parameters); buffers copied."""
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"EMA momentum must be in [0, 1], got {momentum}")
        student = unwrap(student)
        t_params = dict(self.model.named_parameters())
        for name, s_param in student.named_parameters():
            if name not in t_params:
                raise ValueError(f"EMA teacher has no parameter '{name}' of the student")
            t_params[name].lerp_(s_param.detach().to(t_params[name].dtype), 1.0 - momentum)
        t_buffers = dict(self.model.named_buffers())
        for name, s_buf in student.named_buffers():
            t_buffers[name].copy_(s_buf)

    @torch.no_grad()
    def embed(self, batch: ViewBatch) -> torch.Tensor:
        """Teacher embeddings ``(n, k, d)``, L2-normalized, without predictor, no gradient."""
        return self.model.embed(batch, use_predictor=False)

    @torch.no_grad()
    def features(self, batch: ViewBatch) -> torch.Tensor:
        return self.model.features(batch)


__all__ = ["EMATeacher", "cosine_momentum", "unwrap"]
