"""Frozen-encoder feature extraction shared by every evaluator."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Literal

import numpy as np
import torch
from torch.utils.data import DataLoader, default_collate

from ..data.batch import to_device

Combine = Literal["mean", "concat", "first"]


@contextmanager
def torch_threads(count: int | None) -> Iterator[None]:
    """Run the block with ``torch.set_num_threads(count)`` (``None``: unchanged), then restore.

    Small per-op work (32-px views, a small CNN) on a CPU shared with other jobs: one thread avoids
    OpenMP barrier stalls (measured 30-60x faster for the domain views on 2 cores at load ~25).
    """
    if count is None:
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


@torch.no_grad()
def extract_features(
    model: torch.nn.Module, adapter: Any, policy: Any, split: str, batch_size: int = 256,
    device: torch.device | str = "cpu", progress: bool = True, dataset: Any = None,
) -> tuple[np.ndarray, np.ndarray, dict[str, list[Any]]]:
    """Encoder features of every item of ``adapter.split(split)`` (or of ``dataset`` when given,
    ``split`` then only names it) through ``policy.eval_views``.

    Returns ``features (N, k, f)`` float32 (k = number of eval views), ``labels (N,)`` int64
    (-1 when unlabelled) and ``meta``: every other item column as a list of length N.
    """
    from tqdm.auto import tqdm

    dataset = adapter.split(split) if dataset is None else dataset
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, collate_fn=default_collate)
    was_training = model.training
    model.eval().to(device)
    feats: list[np.ndarray] = []
    labels: list[np.ndarray] = []
    meta: dict[str, list[Any]] = {}
    try:
        for raw in tqdm(loader, desc=f"features {split}", unit="batch", disable=not progress, leave=False):
            batch = policy.eval_views(to_device(raw, torch.device(device)))
            feats.append(model.features(batch).float().cpu().numpy())
            n = batch.n
            labels.append(
                batch.labels.cpu().numpy() if batch.labels is not None else np.full(n, -1, dtype=np.int64)
            )
            for key, column in batch.meta.items():
                values = column.tolist() if isinstance(column, torch.Tensor) else list(column)
                meta.setdefault(key, []).extend(values)
    finally:
        model.train(was_training)
    if not feats:
        raise ValueError(f"split '{split}' of {type(adapter).__name__} is empty; nothing to evaluate")
    return np.concatenate(feats).astype(np.float32), np.concatenate(labels).astype(np.int64), meta


def combine_views(features: np.ndarray, how: Combine = "mean") -> np.ndarray:
    """``(N, k, f)`` -> ``(N, f)`` (mean over views, or the first view) or ``(N, k * f)`` (concat)."""
    if features.ndim != 3:
        raise ValueError(f"expected features of shape (N, k, f), got {features.shape}")
    if how == "mean":
        return features.mean(axis=1)
    if how == "first":
        return features[:, 0]
    if how == "concat":
        return features.reshape(features.shape[0], -1)
    raise ValueError(f"combine: expected mean, concat or first, got {how!r}")
