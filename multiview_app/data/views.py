"""View policies: raw batch (on the device) -> :class:`ViewBatch` of k views.

Contract (docs/architecture.md, "Contracts", "Views and batch")::

    policy = build_view_policy("augment", k=2, options={"image_size": 32}, adapter=adapter)
    views = policy.train_views(raw, generator)   # k random views
    views = policy.eval_views(raw)               # 1 deterministic view

``raw`` is ``torch.utils.data.default_collate`` of adapter items, already on the device.
Batch modes (poly-view Sec. 3.2) are computed by :func:`items_per_batch`.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from ..options import ComponentOptions, validate_options
from ..registry import Registry
from .adapters import MODALITY_PACKAGES, DataAdapter
from .batch import ViewBatch

BATCH_MODES: tuple[str, ...] = ("growing", "fixed")


class PolicyOptions(ComponentOptions):
    """Base of every policy's ``Options``: unknown keys are rejected."""


class ViewPolicy:
    """Base of view policies. Subclasses set ``modality`` (the adapter modality they accept).

    ``uses_model``: the views depend on the model being trained (e.g. nearest-neighbour target views); the
    trainer then calls :meth:`bind_model` once and builds each micro-batch's views synchronously.
    """

    modality: ClassVar[str] = ""
    Options: ClassVar[type[PolicyOptions]] = PolicyOptions
    min_k: ClassVar[int] = 1
    uses_model: bool = False

    def __init__(self, k: int, options: PolicyOptions, adapter: DataAdapter) -> None:
        self.k = k
        self.options = options
        self.adapter = adapter

    def bind_model(self, model: torch.nn.Module) -> None:
        """Give a ``uses_model`` policy the model whose weights its views use (nothing for the others)."""

    def train_views(self, raw: dict[str, Any], generator: torch.Generator | None = None) -> ViewBatch:
        """k random views of the raw batch's n items."""
        raise NotImplementedError

    def eval_views(self, raw: dict[str, Any]) -> ViewBatch:
        """Deterministic views for evaluators and export."""
        raise NotImplementedError


#: View policies by name; every modality package (:data:`MODALITY_PACKAGES`) registers its own.
VIEW_POLICIES: Registry[type[ViewPolicy]] = Registry("view policy", modules=MODALITY_PACKAGES)


def available_view_policies() -> list[str]:
    return VIEW_POLICIES.names()


def build_view_policy(name: str, k: int, options: dict[str, Any] | None, adapter: DataAdapter) -> ViewPolicy:
    """Validate ``options`` (errors name ``views.options.<key>``), k and the modality, then build."""
    cls = VIEW_POLICIES.get(name)
    if not isinstance(k, int) or k < max(1, cls.min_k):
        raise ValueError(f"views.k must be an integer >= {max(1, cls.min_k)} for view policy '{name}', got {k!r}")
    if cls.modality and adapter.modality != cls.modality:
        raise ValueError(
            f"view policy '{name}' works on '{cls.modality}' data but data adapter "
            f"{type(adapter).__name__} provides '{adapter.modality}'"
        )
    parsed = validate_options(
        cls.Options, options, "views.options", prefix=f"invalid options for view policy '{name}': "
    )
    return cls(k, parsed, adapter)


def items_per_batch(batch_mode: str, batch_size: int, k: int) -> int:
    """Unique items per batch (poly-view Sec. 3.2).

    ``growing``: ``batch_size`` items, each with k views (k * batch_size views);
    ``fixed``: ``batch_size`` views in total -> ``batch_size // k`` items (error if < 2).
    """
    if batch_mode not in BATCH_MODES:
        raise ValueError(f"unknown batch mode '{batch_mode}'; allowed: {', '.join(BATCH_MODES)}")
    if k < 1 or batch_size < 1:
        raise ValueError(f"batch_size and k must be >= 1, got batch_size={batch_size}, k={k}")
    if batch_mode == "growing":
        return batch_size
    items = batch_size // k
    if items < 2:
        raise ValueError(
            f"batch mode 'fixed' with batch_size={batch_size} views and k={k} gives {items} item(s) "
            "per batch; need >= 2 (raise batch_size or lower k)"
        )
    return items


def draw_device(generator: torch.Generator | None, fallback: torch.device) -> torch.device:
    """Where a random draw must happen: on ``generator``'s device (CUDA generators only draw on CUDA),
    else on ``fallback`` (the data's device). Move the result to where it is used afterwards."""
    return generator.device if generator is not None else fallback


def host_generator(generator: torch.Generator | None, stream: int = 0) -> torch.Generator | None:
    """The generator of draws the host must read back (which channels or domains form the views, which
    captions an item shows): ``generator`` itself when it lives on the CPU (or is None: torch's global
    CPU generator), so CPU views keep their random stream; for a device generator, a CPU generator
    seeded by ``(generator.initial_seed(), stream)``, so reading those draws never waits for the device
    (a policy passes a different ``stream`` for each independent host draw of one batch). The trainer
    gives every micro-batch its own seeded generator, so these draws are reproducible and resume-exact."""
    if generator is None or generator.device.type == "cpu":
        return generator
    return torch.Generator().manual_seed((generator.initial_seed() * 1_000_003 + stream) % (1 << 63))


def labels_and_meta(raw: dict[str, Any]) -> tuple[torch.Tensor | None, dict[str, Any]]:
    """Split a raw batch into labels ``(n,)`` and the meta columns (everything except ``x``)."""
    labels = raw.get("label")
    if labels is not None:
        labels = torch.as_tensor(labels).long()
    meta = {key: value for key, value in raw.items() if key not in ("x", "label")}
    return labels, meta


__all__ = [
    "BATCH_MODES",
    "VIEW_POLICIES",
    "PolicyOptions",
    "ViewPolicy",
    "available_view_policies",
    "build_view_policy",
    "draw_device",
    "host_generator",
    "items_per_batch",
]
