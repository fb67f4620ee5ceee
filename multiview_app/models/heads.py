"""Projection and prediction heads (M3G App. A: Linear(4096) - GELU - Linear(256) at full scale)."""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

Norm = Literal["none", "batch", "layer"]
NORM_LAYERS: dict[str, type[nn.Module] | None] = {"none": None, "batch": nn.BatchNorm1d, "layer": nn.LayerNorm}


class MLPHead(nn.Module):
    """``Linear(in_dim, hidden_dim) [- Norm] - GELU - Linear(hidden_dim, out_dim)``: ``(m, in) -> (m, out)``."""

    def __init__(self, in_dim: int, hidden_dim: int = 512, out_dim: int = 128, norm: Norm = "none") -> None:
        super().__init__()
        if norm not in NORM_LAYERS:
            raise ValueError(f"unknown head norm '{norm}'; allowed: {', '.join(NORM_LAYERS)}")
        for label, value in (("in_dim", in_dim), ("hidden_dim", hidden_dim), ("out_dim", out_dim)):
            if value < 1:
                raise ValueError(f"head {label} must be >= 1, got {value}")
        norm_layer = NORM_LAYERS[norm]
        layers: list[nn.Module] = [nn.Linear(in_dim, hidden_dim)]
        if norm_layer is not None:
            layers.append(norm_layer(hidden_dim))
        layers += [nn.GELU(), nn.Linear(hidden_dim, out_dim)]
        self.net = nn.Sequential(*layers)
        self.in_dim, self.hidden_dim, self.out_dim = in_dim, hidden_dim, out_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class Projector(MLPHead):
    """Encoder features ``(m, f)`` -> embeddings ``(m, d)``; one per modality, shared over views."""


class Predictor(MLPHead):
    """Student-only head ``(m, d) -> (m, d)`` (BYOL / M3G student-teacher); ``out_dim`` = ``in_dim``."""

    def __init__(self, in_dim: int, hidden_dim: int = 512, norm: Norm = "none") -> None:
        super().__init__(in_dim, hidden_dim, in_dim, norm)


__all__ = ["MLPHead", "Predictor", "Projector"]
