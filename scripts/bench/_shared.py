"""Helpers shared by the benchmark scripts of ``scripts/bench/`` (``from _shared import embeddings``: a script run
as ``python scripts/bench/<script>.py`` finds this module beside it; tests load it with ``load_script``)."""

from __future__ import annotations

import torch


def embeddings(
    n: int, k: int, d: int, seed: int = 0, signal: float = 1.0, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Synthetic view embeddings ``(n, k, d)``: ``signal`` x a direction shared by an item's ``k`` views plus
    unit-variance noise per view (``signal=0``: noise only), drawn from a generator seeded with ``seed``.

    Parameters
    ----------
    n, k, d : int
        Items, views per item and embedding width.
    seed : int
        Seed of the generator (the same seed gives the same tensor).
    signal : float
        Scale of the shared per-item direction; 0 skips its draw.
    dtype : torch.dtype
        Dtype of the result (drawn in float32, then cast).

    Returns
    -------
    torch.Tensor
        ``(n, k, d)`` embeddings on the CPU, not normalized.
    """
    generator = torch.Generator().manual_seed(seed)
    shared = signal * torch.randn(n, 1, d, generator=generator) if signal else 0.0
    return (shared + torch.randn(n, k, d, generator=generator)).to(dtype)


__all__ = ["embeddings"]
