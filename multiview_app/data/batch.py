"""ViewBatch: the one contract between data and everything downstream."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class ViewBatch:
    """k views of n items.

    Attributes:
        views: k tensors, each ``(n, ...)`` in its modality's shape (EEG ``(n, T)``,
            image ``(n, C, H, W)``, text ``(n, L)`` token ids).
        modalities: k modality names ("eeg", "image", "text").
        view_names: k view names (channel "C3-M2", stack "simclr", domain "sketch", "caption").
        labels: ``(n,)`` int64 class labels, or None.
        meta: per-item columns, each a list (or 1-D tensor) of length n (ids, subject, ...).
    """

    views: list[torch.Tensor]
    modalities: list[str]
    view_names: list[str]
    labels: torch.Tensor | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        k = len(self.views)
        if k == 0:
            raise ValueError("ViewBatch needs at least one view")
        if len(self.modalities) != k or len(self.view_names) != k:
            raise ValueError(
                f"ViewBatch: {k} views but {len(self.modalities)} modalities and "
                f"{len(self.view_names)} view names"
            )
        n = self.views[0].shape[0]
        for name, v in zip(self.view_names, self.views):
            if v.shape[0] != n:
                raise ValueError(f"ViewBatch: view '{name}' has {v.shape[0]} items, expected {n}")
        if self.labels is not None and self.labels.shape[0] != n:
            raise ValueError(f"ViewBatch: {self.labels.shape[0]} labels for {n} items")

    @property
    def n(self) -> int:
        """Number of items."""
        return int(self.views[0].shape[0])

    @property
    def k(self) -> int:
        """Number of views."""
        return len(self.views)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "ViewBatch":
        """Move views and labels to ``device`` (meta stays on the host)."""
        return ViewBatch(
            views=[v.to(device, non_blocking=non_blocking) for v in self.views],
            modalities=list(self.modalities),
            view_names=list(self.view_names),
            labels=None if self.labels is None else self.labels.to(device, non_blocking=non_blocking),
            meta=self.meta,
        )

    def select(self, indices: "list[int] | tuple[int, ...]") -> "ViewBatch":
        """The sub-batch with views ``indices`` (same n items)."""
        return ViewBatch(
            views=[self.views[i] for i in indices],
            modalities=[self.modalities[i] for i in indices],
            view_names=[self.view_names[i] for i in indices],
            labels=self.labels,
            meta=self.meta,
        )


def host_to_device(tensor: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """A host tensor made during view building (token ids, a pool of images) on ``device``: to a CUDA
    device through pinned memory with a non-blocking copy, so the host does not wait for the GPU."""
    device = torch.device(device)
    if device.type == "cuda" and tensor.device.type == "cpu":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


def to_device(raw: dict[str, Any], device: torch.device | str) -> dict[str, Any]:
    """Tensors of a raw (collated, pre-view) batch to ``device``; other columns unchanged."""
    return {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in raw.items()}
