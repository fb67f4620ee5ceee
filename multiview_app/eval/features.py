"""Frozen-encoder feature extraction shared by every evaluator and by ``mvapp export``.

:func:`iter_feature_batches` streams one :class:`FeatureBatch` per loader batch (bounded memory);
:func:`extract_features` concatenates them for a whole split (what the evaluators use).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Subset, default_collate

from ..data.batch import to_device
from ..data.streaming import StreamingDataset

Combine = Literal["mean", "concat", "first"]
#: What a feature batch holds: ``encoder`` features ``(n, k, f)`` or the ``projector`` space
#: ``(n, k, d)`` the loss head sees (L2-normalized, without the predictor).
FeatureKind = Literal["encoder", "projector"]
FEATURE_KINDS: tuple[str, ...] = ("encoder", "projector")


@contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """The block runs with every submodule of ``model`` in eval mode (norm layers use and keep their
    running statistics, dropout is off); afterwards each submodule gets back its own mode (a
    submodule that was in eval mode inside a training model stays so, unlike ``model.train()``)."""
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        yield model
    finally:
        for module, training in modes:
            module.training = training


@dataclass
class FeatureBatch:
    """Features of n items: ``features (n, k, f)`` float32, ``labels (n,)`` int64 (-1 when
    unlabelled), ``meta`` (every other item column as a list of length n) and the k view names /
    modalities of the eval views."""

    features: np.ndarray
    labels: np.ndarray
    meta: dict[str, list[Any]]
    view_names: list[str]
    modalities: list[str]


def model_outputs(model: torch.nn.Module, batch: Any, kind: FeatureKind) -> torch.Tensor:
    """``(n, k, f)`` encoder features or ``(n, k, d)`` normalized projector embeddings of a ViewBatch."""
    if kind == "encoder":
        return model.features(batch)
    if kind == "projector":
        return model.embed(batch, use_predictor=False)
    raise ValueError(f"features: expected one of {', '.join(FEATURE_KINDS)}, got {kind!r}")


def item_groups(dataset: Any) -> np.ndarray | None:
    """``(N,)`` group id of each item when the dataset has ``batch_groups`` (a PSG modality split: items of
    one modality set), through ``Subset`` wrappers; None otherwise."""
    if isinstance(dataset, Subset):
        parent = item_groups(dataset.dataset)
        return None if parent is None else parent[np.asarray(dataset.indices, dtype=np.int64)]
    groups = getattr(dataset, "batch_groups", None)
    return None if groups is None else np.asarray(groups)


def same_group_batches(dataset: Any, batch_size: int) -> list[list[int]] | None:
    """Consecutive batches of at most ``batch_size`` items, in dataset order, cut where the item group
    (:func:`item_groups`) changes, so a batch never mixes modality sets; None for a dataset without groups."""
    groups = item_groups(dataset)
    if groups is None:
        return None
    batches: list[list[int]] = []
    for i, group in enumerate(groups.tolist()):
        if not batches or len(batches[-1]) == batch_size or groups[batches[-1][-1]] != group:
            batches.append([])
        batches[-1].append(i)
    return batches


@torch.no_grad()
def iter_feature_batches(
    model: torch.nn.Module,
    dataset: Dataset,
    policy: Any,
    batch_size: int = 256,
    device: torch.device | str = "cpu",
    kind: FeatureKind = "encoder",
    num_workers: int = 0,
    progress: bool = False,
    desc: str = "features",
) -> Iterator[FeatureBatch]:
    """Stream the items of ``dataset`` (in order) through ``policy.eval_views`` and the model (eval mode).

    Every submodule's train/eval mode is restored when the iterator finishes or is closed (:func:`eval_mode`).
    """
    from ..console import progress as progress_display

    if kind not in FEATURE_KINDS:
        raise ValueError(f"features: expected one of {', '.join(FEATURE_KINDS)}, got {kind!r}")
    if isinstance(dataset, StreamingDataset):  # endless: would never finish
        raise ValueError(
            "features: this split is streamed (data.options.stream: true) and has no end; use the test "
            "split, or read the shards with stream: false"
        )
    batches = same_group_batches(dataset, batch_size)
    sizes = {"batch_size": batch_size, "shuffle": False} if batches is None else {"batch_sampler": batches}
    loader = DataLoader(dataset, collate_fn=default_collate, num_workers=num_workers, **sizes)
    with eval_mode(model.to(device)):
        for raw in progress_display(loader, desc=desc, unit="batch", disable=not progress, leave=False):
            batch = policy.eval_views(to_device(raw, torch.device(device)))
            n = batch.n
            labels = batch.labels.cpu().numpy() if batch.labels is not None else np.full(n, -1, dtype=np.int64)
            meta = {
                key: column.tolist() if isinstance(column, torch.Tensor) else list(column)
                for key, column in batch.meta.items()
            }
            yield FeatureBatch(
                model_outputs(model, batch, kind).float().cpu().numpy(),
                labels.astype(np.int64),
                meta,
                list(batch.view_names),
                list(batch.modalities),
            )


def extract_features(
    model: torch.nn.Module,
    adapter: Any,
    policy: Any,
    split: str,
    batch_size: int = 256,
    device: torch.device | str = "cpu",
    progress: bool = True,
    dataset: Any = None,
    kind: FeatureKind = "encoder",
) -> tuple[np.ndarray, np.ndarray, dict[str, list[Any]]]:
    """Encoder features (``kind="projector"``: normalized projector embeddings) of every item of
    ``adapter.split(split)`` (or of ``dataset`` when given, ``split`` then only names it) through
    ``policy.eval_views``.

    Returns ``features (N, k, f)`` float32 (k = number of eval views), ``labels (N,)`` int64
    (-1 when unlabelled) and ``meta``: every other item column as a list of length N.
    """
    feats: list[np.ndarray] = []
    labels: list[np.ndarray] = []
    meta: dict[str, list[Any]] = {}
    dataset = adapter.split(split) if dataset is None else dataset
    for part in iter_feature_batches(
        model, dataset, policy, batch_size, device, kind=kind, progress=progress, desc=f"features {split}"
    ):
        feats.append(part.features)
        labels.append(part.labels)
        for key, values in part.meta.items():
            meta.setdefault(key, []).extend(values)
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


def window_features(
    model: Any,
    adapter: Any,
    policy: Any,
    split: str,
    batch_size: int,
    device: str,
    *,
    rows: np.ndarray | list[int] | None = None,
    combine: Combine = "concat",
    kind: FeatureKind = "encoder",
    progress: bool = False,
) -> tuple[np.ndarray, np.ndarray, dict[str, list[Any]]]:
    """Per-window features of ``split`` (only the windows ``rows`` when given): the views' features
    combined (``(N, k * f)`` concatenated, ``(N, f)`` averaged), labels ``(N,)`` and the windows'
    meta (subject, recording, window). The one feature path of the sleep-staging evaluator, its supervised
    ceiling and ``mvapp tune``'s sleep-staging objective."""
    dataset = None if rows is None else Subset(adapter.split(split), np.asarray(rows).tolist())
    feats, labels, meta = extract_features(
        model, adapter, policy, split, batch_size, device, progress, dataset=dataset, kind=kind
    )
    return combine_views(feats, combine), labels, meta
