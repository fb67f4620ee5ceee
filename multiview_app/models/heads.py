"""Projection and prediction heads (M3G App. A: Linear(4096) - GELU - Linear(256) at full scale)."""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

Norm = Literal["none", "batch", "view_batch", "layer"]


class ViewBatchNorm1d(nn.BatchNorm1d):
    """BatchNorm whose batch statistics are taken per view, as in BYOL, where every view is forwarded as its
    own batch: input ``(v, n, h)`` (v views of the same n items) -> each view normalized by its own mean and
    variance over the n items, one shared affine; the running statistics move by the views' average (their
    mean and unbiased variance). ``(m, h)`` input is one view (plain BatchNorm). In eval mode the running
    statistics normalize every view alike. Under ``norm: batch`` the statistics span all ``v n`` rows instead,
    so a shift shared by the rows of one view (e.g. a view that is always one image domain) survives it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 2:
            return super().forward(x)
        if x.dim() != 3:
            raise ValueError(f"ViewBatchNorm1d expects (v, n, h) or (m, h) input, got {tuple(x.shape)}")
        if not self.training and self.track_running_stats:
            return super().forward(x.reshape(-1, x.shape[-1])).view_as(x)
        if x.shape[1] < 2:
            raise ValueError(f"ViewBatchNorm1d in training needs >= 2 items per view, got input {tuple(x.shape)}")
        var, mean = torch.var_mean(x, dim=1, correction=0, keepdim=True)  # (v, 1, h) each
        if self.training and self.track_running_stats:
            with torch.no_grad():
                self._update_running(
                    mean.mean(dim=0).squeeze(0), var.mean(dim=0).squeeze(0) * x.shape[1] / (x.shape[1] - 1)
                )
        out = (x - mean) * torch.rsqrt(var + self.eps)
        return out * self.weight + self.bias if self.affine else out

    def _update_running(self, mean: torch.Tensor, unbiased_var: torch.Tensor) -> None:
        """Move the running statistics (``(h,)`` each) towards this step's as :class:`nn.BatchNorm1d` does."""
        assert self.running_mean is not None and self.running_var is not None
        assert self.num_batches_tracked is not None
        self.num_batches_tracked.add_(1)
        momentum = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        self.running_mean.lerp_(mean.to(self.running_mean.dtype), momentum)
        self.running_var.lerp_(unbiased_var.to(self.running_var.dtype), momentum)


NORM_LAYERS: dict[str, type[nn.Module] | None] = {
    "none": None,
    "batch": nn.BatchNorm1d,
    "view_batch": ViewBatchNorm1d,
    "layer": nn.LayerNorm,
}


class MLPHead(nn.Module):
    """``Linear(in_dim, hidden_dim) [- Norm] - GELU - Linear(hidden_dim, out_dim)``: ``(m, in) -> (m, out)`` or,
    for the k views of n items, ``(k, n, in) -> (k, n, out)`` (``norm: view_batch`` then takes BatchNorm
    statistics per view; every other norm treats the ``k n`` rows as one batch)."""

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
        self.per_view = norm == "view_batch"
        self.in_dim, self.hidden_dim, self.out_dim = in_dim, hidden_dim, out_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 3 and not self.per_view:
            return self.net(x.reshape(-1, x.shape[-1])).view(*x.shape[:2], -1)
        return self.net(x)


class Projector(MLPHead):
    """Encoder features ``(m, f)`` -> embeddings ``(m, d)``; one per modality, shared over views."""


class Predictor(MLPHead):
    """Student-only head ``(m, d) -> (m, d)`` (BYOL / M3G student-teacher); ``out_dim`` = ``in_dim``."""

    def __init__(self, in_dim: int, hidden_dim: int = 512, norm: Norm = "none") -> None:
        super().__init__(in_dim, hidden_dim, in_dim, norm)


__all__ = ["MLPHead", "Predictor", "Projector", "ViewBatchNorm1d"]
