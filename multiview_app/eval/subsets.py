"""Labels of a split and fixed class-stratified subsets of it (the tune objective's intermediate
reports and the kNN monitor score every trial / every probe on the same items)."""

from __future__ import annotations

from typing import Any

import numpy as np

#: Seed of the fixed subsets (the same items for every trial and every probe).
SUBSET_SEED = 0


def split_labels(dataset: Any) -> np.ndarray:
    """``(N,)`` int64 labels of a split (its ``labels`` column when it has one, else read item by item)."""
    labels = getattr(dataset, "labels", None)
    if labels is None:
        labels = [int(dataset[i].get("label", -1)) for i in range(len(dataset))]
    return np.asarray(labels, dtype=np.int64).reshape(-1)


def stratified_subset(labels: np.ndarray, items: int | None, seed: int = SUBSET_SEED) -> np.ndarray | None:
    """Sorted indices of a class-stratified subset of about ``items`` of the ``n`` labelled items of
    ``labels (N,)``: class c gets ``max(1, round(items * n_c / n))`` of its ``n_c`` (every class stays
    represented), unlabelled ``-1`` items are left out. ``None`` (= every item) when ``items`` is None
    or covers every labelled item. Depends only on the labels and ``seed``."""
    labelled = np.flatnonzero(labels >= 0)
    if items is None or items >= labelled.size:
        return None
    rng = np.random.default_rng(seed)
    chosen = []
    for cls in np.unique(labels[labelled]):
        members = np.flatnonzero(labels == cls)
        take = min(members.size, max(1, int(round(items * members.size / labelled.size))))
        chosen.append(rng.choice(members, size=take, replace=False))
    return np.sort(np.concatenate(chosen))


__all__ = ["SUBSET_SEED", "split_labels", "stratified_subset"]
