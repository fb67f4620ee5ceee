"""The multi-view loss head: every loss maps embeddings ``(n, k, d)`` to a 0-d tensor (the supervised
``supervised_ce`` head also takes the batch's labels; it is listed by ``available_losses(supervised=True)``).

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


def available_losses(supervised: bool = False) -> list[str]:
    """Names of the self-supervised losses (``loss(z)`` on embeddings alone), sorted; ``supervised=True``
    adds the heads that also take the batch's labels (``uses_labels``, e.g. ``supervised_ce``, the domain
    evaluators' ERM baseline). Every name is accepted by :func:`build_loss`."""
    return [name for name in LOSSES.names() if supervised or not getattr(LOSSES.get(name), "uses_labels", False)]


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
