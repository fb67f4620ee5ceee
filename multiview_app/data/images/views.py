"""The ``augment`` view policy: k augmented views of every image (per-view augmentation stacks)."""

from __future__ import annotations

from typing import Any

import torch
from pydantic import Field, field_validator

from ..adapters import DataAdapter
from ..batch import ViewBatch
from ..views import VIEW_POLICIES, PolicyOptions, ViewPolicy, labels_and_meta
from .augment import M3G_STACKS, STACKS, augment, customized


@VIEW_POLICIES.register("augment")
class AugmentPolicy(ViewPolicy):
    """k augmented views of every image; view ``i`` uses stack ``stacks[i]``.

    ``stacks``: one stack name for all views, or a list of k names; default ``None`` = M3G's
    ``[byol_global1, byol_global2, simclr, byol_global1][:k]`` for k <= 4, else ``simclr`` for all
    views (the poly-view setting). ``crop_scale`` / ``jitter_strength`` adjust every stack (e.g.
    gentler crops for 32-px digits). Eval views use the ``test`` stack.
    """

    modality = "image"

    class Options(PolicyOptions):
        stacks: str | list[str] | None = None
        image_size: int = Field(32, ge=8, le=1024, description="side of the square views (pixels)")
        crop_scale: tuple[float, float] | None = Field(
            None, description="override of every stack's RandomResizedCrop scale range (default (0.08, 1.0))"
        )
        jitter_strength: float = Field(
            1.0, ge=0.0, le=4.0, description="multiplies every stack's color-jitter strengths"
        )

        @field_validator("crop_scale")
        @classmethod
        def _scale_range(cls, value: tuple[float, float] | None) -> tuple[float, float] | None:
            if value is not None and not 0.0 < value[0] <= value[1] <= 1.0:
                raise ValueError("expected 0 < low <= high <= 1")
            return value

        @field_validator("stacks")
        @classmethod
        def _known_stacks(cls, value: str | list[str] | None) -> str | list[str] | None:
            names = [value] if isinstance(value, str) else (value or [])
            unknown = [n for n in names if n not in STACKS]
            if unknown:
                raise ValueError(f"unknown stack(s) {', '.join(unknown)}; valid: {', '.join(STACKS.names())}")
            return value

    def __init__(self, k: int, options: Options, adapter: DataAdapter) -> None:
        super().__init__(k, options, adapter)
        stacks = options.stacks
        if stacks is None:
            self.stacks = list(M3G_STACKS[:k]) if k <= len(M3G_STACKS) else ["simclr"] * k
        elif isinstance(stacks, str):
            self.stacks = [stacks] * k
        else:
            if len(stacks) != k:
                raise ValueError(f"views.options.stacks lists {len(stacks)} stacks but views.k = {k}")
            self.stacks = list(stacks)
        self.image_size = options.image_size
        self.specs = [customized(STACKS.get(name), options.crop_scale, options.jitter_strength) for name in self.stacks]

    def train_views(self, raw: dict[str, Any], generator: torch.Generator | None = None) -> ViewBatch:
        images = raw["x"]
        views = [augment(images, spec, self.image_size, generator) for spec in self.specs]
        labels, meta = labels_and_meta(raw)
        return ViewBatch(views, ["image"] * self.k, list(self.stacks), labels, meta)

    def eval_views(self, raw: dict[str, Any]) -> ViewBatch:
        labels, meta = labels_and_meta(raw)
        return ViewBatch([augment(raw["x"], "test", self.image_size)], ["image"], ["test"], labels, meta)


__all__ = ["AugmentPolicy"]
