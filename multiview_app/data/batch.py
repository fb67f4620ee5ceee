"""ViewBatch: the one contract between data and everything downstream."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class ViewBatch:
    """k views of n items: what a data loader yields and :class:`~multiview_app.models.MultiViewModel` reads.

    Attributes
    ----------
    views : list of torch.Tensor
        k tensors, each ``(n, ...)`` in its modality's shape (EEG ``(n, T)``, image ``(n, C, H, W)``,
        text ``(n, L)`` token ids).
    modalities : list of str
        k modality names ("eeg", "image", "text").
    view_names : list of str
        k view names (channel "C3-M2", stack "simclr", domain "sketch", "caption").
    labels : torch.Tensor or None
        ``(n,)`` int64 class labels.
    meta : dict
        Per-item columns, each a list (or 1-D tensor) of length n (ids, subject, ...).

    Raises
    ------
    ValueError
        No views, list lengths that differ, or views / labels with different item counts.

    Examples
    --------
    >>> import torch
    >>> from multiview_app.data import ViewBatch
    >>> batch = ViewBatch(views=[torch.randn(4, 3000), torch.randn(4, 3000)], modalities=["eeg", "eeg"],
    ...                   view_names=["C3-M2", "C4-M1"], labels=torch.tensor([0, 2, 2, 1]))
    >>> batch.n, batch.k
    (4, 2)
    >>> ViewBatch(views=[torch.randn(4, 10), torch.randn(3, 10)], modalities=["eeg"] * 2, view_names=["a", "b"])
    Traceback (most recent call last):
    ...
    ValueError: ViewBatch: view 'b' has 3 items, expected 4
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
                f"ViewBatch: {k} views but {len(self.modalities)} modalities and {len(self.view_names)} view names"
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

    def to(self, device: torch.device | str, non_blocking: bool = False) -> ViewBatch:
        """Move views and labels to ``device`` (meta stays on the host)."""
        return ViewBatch(
            views=[v.to(device, non_blocking=non_blocking) for v in self.views],
            modalities=list(self.modalities),
            view_names=list(self.view_names),
            labels=None if self.labels is None else self.labels.to(device, non_blocking=non_blocking),
            meta=self.meta,
        )

    def select(self, indices: list[int] | tuple[int, ...]) -> ViewBatch:
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
