"""The multi-view loss head: every loss maps embeddings ``(n, k, d)`` to a 0-d tensor (the supervised
``supervised_ce`` head also takes the batch's labels; it is listed by ``available_losses(supervised=True)``).

Public API::

    build_loss(name, **params) -> torch.nn.Module
    available_losses() -> list[str]
"""
from __future__ import annotations

from ..options import Wording, option_defaults, validate_options
from ..registry import Registry
from . import sinkhorn_fast  # noqa: F401 - registers the compiled k > 3 MM-Sinkhorn sweeps with the solver
from .base import MultiViewLoss, check_embeddings

#: Losses by name; registering sets the class's ``name``.
LOSSES: Registry[type[MultiViewLoss]] = Registry(
    "loss", modules=[f"{__name__}.{m}" for m in ("contrastive", "flatnce", "m3g", "mveb", "supervised")], name_attribute="name"
)


def available_losses(supervised: bool = False) -> list[str]:
    """Names of the self-supervised losses (``loss(z)`` on embeddings alone), sorted; ``supervised=True``
    adds the heads that also take the batch's labels (``uses_labels``, e.g. ``supervised_ce``, the domain
    evaluators' ERM baseline). Every name is accepted by :func:`build_loss`."""
    return [name for name in LOSSES.names() if supervised or not getattr(LOSSES.get(name), "uses_labels", False)]


def loss_parameters(name: str) -> dict[str, object]:
    """Parameter names of loss ``name`` with their defaults (its ``Options`` model, in signature order)."""
    return option_defaults(LOSSES.get(name).Options)


def build_loss(name: str, **params: object) -> MultiViewLoss:
    """Instantiate loss ``name`` with keyword ``params``.

    Raises ``ValueError`` for an unknown name (listing the available ones) or an unknown
    parameter (``loss.<key>: unknown parameter for loss '<name>'; valid: <key>=<default>, ...``).
    """
    cls = LOSSES.get(name)
    wording = Wording(noun="parameter", owner=f"loss {name!r}", label="valid", defaults=True)
    validate_options(cls.Options, params, "loss", wording)
    return cls(**params)


__all__ = ["LOSSES", "MultiViewLoss", "available_losses", "build_loss", "check_embeddings", "loss_parameters"]
