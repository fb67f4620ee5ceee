"""Per-modality and fused embeddings of a PSG modality split, for evaluators and export.

Items of a modality split (``psg_modalities`` adapter) carry the modalities their night has, so the split is
embedded one modality set at a time (``dataset.set_ids``), each batch through the view policy's
``eval_views`` (full windows, no augmentation) and the model. The **fused** embedding of an item is the mean
of its present modalities' L2-normalized vectors (not renormalized: its norm shrinks as the modalities
disagree), so an item missing a modality still gets one, from what it has.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Subset, default_collate

from ..data.batch import to_device


@dataclass
class ModalEmbeddings:
    """Embeddings of ``N`` items of a modality split.

    Attributes:
        per_modality: modality -> ``(N, d)`` float32; rows of items without that modality are NaN.
        present: modality -> ``(N,)`` bool, whether the item has the modality.
        fused: ``(N, d)`` float32, mean of the present modalities' L2-normalized vectors.
        labels: ``(N,)`` int64 stage labels; meta: per-item columns (``subject``, ``recording``, ``window``,
            ``onset``, ``index``), each a list or array of length N, in dataset order.
    """

    per_modality: dict[str, np.ndarray]
    present: dict[str, np.ndarray]
    fused: np.ndarray
    labels: np.ndarray
    meta: dict[str, list[Any]]

    def only(self, modality: str) -> tuple[np.ndarray, np.ndarray]:
        """``(vectors (N_m, d), item indices (N_m,))`` of the items that have ``modality``."""
        index = np.flatnonzero(self.present[modality])
        return self.per_modality[modality][index], index


def fuse(vectors: torch.Tensor) -> torch.Tensor:
    """``(n, k, d)`` per-modality vectors of the present modalities -> ``(n, d)`` mean of their L2-normalized rows."""
    return F.normalize(vectors, dim=-1).mean(dim=1)


class _Collector:
    """Rows of :class:`ModalEmbeddings` filled batch by batch (the arrays are made at the first batch's width)."""

    def __init__(self, names: list[str], n_items: int) -> None:
        self.names, self.n = names, n_items
        self.blocks: dict[str, np.ndarray] = {}
        self.present = {m: np.zeros(n_items, dtype=bool) for m in names}
        self.fused: np.ndarray | None = None
        self.labels = np.zeros(n_items, dtype=np.int64)
        self.meta: dict[str, list[Any]] = {k: [None] * n_items for k in ("subject", "recording", "window", "onset")}

    def add(self, index: np.ndarray, modalities: list[str], vectors: torch.Tensor, raw: dict[str, Any]) -> None:
        """Items ``index`` with their present ``modalities`` and vectors ``(n, k, x)``."""
        width = vectors.shape[-1]
        if self.fused is None:
            self.fused = np.zeros((self.n, width), dtype=np.float32)
        self.fused[index] = fuse(vectors).float().cpu().numpy()
        for j, modality in enumerate(modalities):
            block = self.blocks.setdefault(modality, np.full((self.n, width), np.nan, np.float32))
            block[index] = vectors[:, j].float().cpu().numpy()
            self.present[modality][index] = True
        self.labels[index] = torch.as_tensor(raw["label"]).cpu().numpy()
        for key, column in self.meta.items():
            for i, value in zip(index, raw[key]):
                column[i] = value.item() if isinstance(value, torch.Tensor) else value

    def result(self) -> ModalEmbeddings:
        width = 0 if self.fused is None else self.fused.shape[1]
        empty = np.full((self.n, width), np.nan, np.float32)
        per_modality = {m: self.blocks.get(m, empty.copy()) for m in self.names}
        fused = np.zeros((self.n, width), np.float32) if self.fused is None else self.fused
        return ModalEmbeddings(per_modality, self.present, fused, self.labels, self.meta)


@torch.no_grad()
def modality_embeddings(
    model: torch.nn.Module,
    policy: Any,
    dataset: Any,
    *,
    output: Literal["features", "embed"] = "features",
    batch_size: int = 64,
    device: str | torch.device = "cpu",
) -> ModalEmbeddings:
    """Embed every item of a modality split ``dataset`` (a ``ModalWindowDataset``) with ``model``.

    ``output``: ``"features"`` (encoder outputs ``(n, k, f)``, what frozen-feature evaluators read; every
    modality's encoder must have the same width) or ``"embed"`` (projected, L2-normalized ``(n, k, d)``).
    ``policy``: the run's ``modalities`` view policy (its ``eval_views`` assemble each modality's input).
    """
    was_training = model.training
    model.eval().to(device)
    collector = _Collector(list(policy.specs), len(dataset))
    groups = np.asarray(dataset.set_ids)
    try:
        for group in np.unique(groups):
            members = np.flatnonzero(groups == group)
            loader = DataLoader(Subset(dataset, members.tolist()), batch_size=batch_size, collate_fn=default_collate)
            start = 0
            for raw in loader:
                index = members[start : start + len(raw["index"])]
                start += len(index)
                batch = policy.eval_views(to_device(raw, device))
                vectors = model.features(batch) if output == "features" else model.embed(batch)  # (n, k, x)
                collector.add(index, batch.modalities, vectors, raw)
    finally:
        model.train(was_training)
    return collector.result()


__all__ = ["ModalEmbeddings", "fuse", "modality_embeddings"]
