"""scripts/bench/common.py: the synthetic view embeddings the benchmark scripts share."""

from __future__ import annotations

import torch
from _train_helpers import load_script


def test_shared_bench_embeddings_are_seeded_and_carry_the_shared_direction() -> None:
    """The same seed gives the same ``(n, k, d)`` tensor; ``signal`` scales a direction shared by an item's views
    (views of one item correlate), ``signal=0`` is view noise alone."""
    shared = load_script("bench/common")
    z = shared.embeddings(64, 3, 16, seed=5, signal=3.0, dtype=torch.float64)
    assert z.shape == (64, 3, 16) and z.dtype == torch.float64
    assert torch.equal(z, shared.embeddings(64, 3, 16, seed=5, signal=3.0, dtype=torch.float64))
    same_item = torch.nn.functional.cosine_similarity(z[:, 0], z[:, 1], dim=-1).mean()
    noise = shared.embeddings(64, 3, 16, seed=5, signal=0)
    assert same_item > 0.7 and torch.nn.functional.cosine_similarity(noise[:, 0], noise[:, 1], dim=-1).mean() < 0.2
