"""Fused CPU fast path of the ``m3g`` loss (cost ``cv``) for ``k = 3`` views and small ``n``.

At ``n^3 <= 1e5`` the whole loss (input check, L2 normalization, Gram blocks, a few MM-Sinkhorn sweeps, Danskin
weights, backward through the normalization) is tiny and its cost is per-operation dispatch. Here the forward and
the backward are one numba kernel each (:func:`._pairwise_kernels.fused_forward` / ``fused_backward``) called on
numpy views of the input's memory, plus one autograd node.

Same mathematics as the sweep blocks (:func:`.sinkhorn._three_view_sweep`): normalization ``x / max(||x||, eps)``
(eps ``1e-6`` float32, ``1e-12`` float64, as :func:`.base.normalize`), Gram blocks and backward GEMMs in the input
dtype, the sweeps in float64 in the Gauss-Seidel order of Alg. 1 with the same stopping rule, hence the same sweep
counts; values and gradients agree with the blocks and the float64 reference to float32 round-off (tested).

:func:`fused_three_view` returns ``None`` whenever it does not apply (numba not installed, not CPU, dtype not
float32 / float64, a non-finite input -- the blocks then raise the usual error --, a kernel log-range beyond
float64, or an underflowing marginal); the caller then runs the sweep blocks. Anderson acceleration does not apply
here (3-5 sweeps at epsilon 0.2).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np
import torch

from .sinkhorn import _REL_UNDERFLOW, _THREE_VIEW_SPAN_F64, MMSinkhornResult
from .sinkhorn_fast import kernels


class _FusedGradient(torch.autograd.Function):
    """0-d ``value`` whose backward is :func:`._pairwise_kernels.fused_backward` (Danskin + normalization)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, saved: tuple, value: float) -> torch.Tensor:
        ctx.saved = saved
        return torch.tensor(value, dtype=x.dtype)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return torch.from_numpy(kernels().fused_backward(*ctx.saved, float(grad_out))), None, None


def _applies(x: object) -> bool:
    """Whether raw embeddings ``x`` ``(n, 3, d)`` fit the kernels: a strided CPU float32 / float64 tensor,
    numba installed (the values may still be declined, see the module docstring)."""
    return (
        isinstance(x, torch.Tensor)
        and x.dim() == 3
        and x.shape[1] == 3
        and x.shape[0] >= 2
        and x.shape[2] >= 1
        and x.device.type == "cpu"
        and x.dtype in (torch.float32, torch.float64)
        and x.layout == torch.strided
        and kernels() is not None
    )


def fused_three_view(
    x: torch.Tensor, epsilon: float, tol: float, max_iter: int, init: torch.Tensor | None
) -> tuple[Callable[[float], torch.Tensor], float, MMSinkhornResult] | None:
    """Forward of M3G (``cv``) on raw (not yet normalized) embeddings ``x`` ``(n, 3, d)``, fused.

    ``init``: warm-start log-potentials ``(3, n)`` or None. Returns ``(attach, diag_cost, result)``:
    ``diag_cost = (1/n) sum_i C[i, i, i]``, ``result`` the solve (``log_potentials`` float64, ``pair_marginals``
    ``(3, 3, n, n)`` float64, ``path = "fused-k3"``); the caller turns them into the M3G value and gets the loss
    tensor (Danskin gradient w.r.t. ``x``) from ``attach(value)``. ``None`` when the fast path does not apply.
    """
    if not _applies(x):
        return None
    n = x.shape[0]
    s = 1.0  # cv scale (2 / (k - 1))^2 at k = 3
    eps_norm = 1e-12 if x.dtype == torch.float64 else 1e-6
    warm = init is not None
    init_np = init.detach().to(torch.float64).numpy() if warm else np.zeros((3, n))
    solver = (tol, max_iter, warm, _THREE_VIEW_SPAN_F64, _REL_UNDERFLOW)
    fused = kernels().fused_forward(
        x.detach().contiguous().numpy(), eps_norm, 2 * s / epsilon, 6 * s / epsilon, solver, init_np
    )
    status, z, norms, pairs, log_pot, iterations, error, converged, pair_diag = fused
    if status != kernels().OK or not (math.isfinite(float(pairs.sum())) and math.isfinite(float(log_pot.sum()))):
        return None
    result = MMSinkhornResult(
        torch.from_numpy(log_pot),
        torch.from_numpy(pairs),
        float(pairs[0, 1].sum()),
        int(iterations),
        float(error),
        bool(converged),
        "fused-k3",
    )
    attach = functools.partial(_FusedGradient.apply, x, (z, norms, eps_norm, pairs, 2.0 * s))
    return attach, s * (6.0 - 2.0 * pair_diag), result


__all__ = ["fused_three_view"]
