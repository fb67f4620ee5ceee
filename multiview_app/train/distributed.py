"""All-gather of embeddings WITH gradient for contrastive losses across processes.

``accelerate.gather`` returns tensors without autograd history. Here every process all-gathers the
embeddings ``(n, k, d)`` and puts its own (differentiable) tensor back into its slot, so the loss on
the gathered ``(world * n, k, d)`` batch is identical on every process and each process
back-propagates into its own items only. DDP then *averages* the per-process gradients, i.e.
divides their sum by ``world``; :func:`gradient_scale` returns the factor (``world``) by which the
loss must be multiplied before ``backward`` so that the gradients equal those of one process on the
full batch.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def world_size() -> int:
    """Number of processes (1 when torch.distributed is not initialized)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def gather_with_grad(z: torch.Tensor) -> torch.Tensor:
    """``(n, ...)`` per process -> ``(world * n, ...)`` in rank order; the local slot keeps its
    autograd history. Every process must pass the same shape."""
    world = world_size()
    if world == 1:
        return z
    shape = torch.tensor(list(z.shape), device=z.device)
    shapes = [torch.empty_like(shape) for _ in range(world)]
    dist.all_gather(shapes, shape)
    if any(not torch.equal(s, shape) for s in shapes):
        raise RuntimeError(
            f"gather_with_grad: processes hold embeddings of different shapes {[s.tolist() for s in shapes]}; "
            "use drop_last batches of equal size"
        )
    parts = [torch.empty_like(z) for _ in range(world)]
    dist.all_gather(parts, z.detach().contiguous())
    parts[dist.get_rank()] = z
    return torch.cat(parts, dim=0)


def gradient_scale(gathered: bool) -> float:
    """Factor for the loss before ``backward`` so that DDP's averaged gradients equal the
    single-process full-batch gradients (``world`` when gathered, else 1)."""
    return float(world_size()) if gathered else 1.0
