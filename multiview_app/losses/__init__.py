"""The multi-view loss head: every loss maps embeddings ``(n, k, d)`` to a 0-d tensor.

Public API::

    build_loss(name, **params) -> torch.nn.Module
    available_losses() -> list[str]
"""
from __future__ import annotations

import inspect

from torch import nn

from ..registry import Registry
from .base import MultiViewLoss, check_embeddings

LOSSES: Registry[type[MultiViewLoss]] = Registry(
    "loss", modules=[f"{__name__}.{m}" for m in ("contrastive", "flatnce", "m3g", "mveb", "supervised")]
)


def available_losses() -> list[str]:
    """Names accepted by :func:`build_loss`, sorted."""
    return LOSSES.names()


def loss_parameters(name: str) -> dict[str, object]:
    """Parameter names of loss ``name`` with their defaults."""
    cls = LOSSES.get(name)
    sig = inspect.signature(cls.__init__)
    return {
        p.name: p.default
        for p in list(sig.parameters.values())[1:]
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }


def build_loss(name: str, **params: object) -> nn.Module:
    """Instantiate loss ``name`` with keyword ``params``.

    Raises ``ValueError`` for an unknown name (listing the available ones) or an unknown
    parameter (listing the valid ones).
    """
    cls = LOSSES.get(name)
    valid = loss_parameters(name)
    unknown = sorted(set(params) - set(valid))
    if unknown:
        raise ValueError(
            f"unknown parameter(s) {', '.join(unknown)} for loss '{name}'; "
            f"valid: {', '.join(f'{k}={v!r}' for k, v in valid.items()) or '(none)'}"
        )
    return cls(**params)


__all__ = ["LOSSES", "MultiViewLoss", "available_losses", "build_loss", "check_embeddings", "loss_parameters"]
