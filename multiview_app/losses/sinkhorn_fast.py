"""Fused CPU kernel of the factorized MM-Sinkhorn (:func:`.sinkhorn.mm_sinkhorn_pairwise`) for ``k > 3``.

At the sizes M3G trains with (the EEG demo: ``n = 16`` items, ``k = 6`` views, ``n^k = 16.7 M``) one
sweep of the general path is ~40 torch operations over ``n^(k-1)``-entry arrays plus two ``n^k`` GEMMs
of shape ``(n^(k-2), n) x (n, n)``: dispatch, temporaries and memory traffic, not arithmetic. Here the
whole solve -- building the exp-domain factors, the sweeps with their stopping rule, Anderson mixing,
the pair marginals of the final plan -- is one compiled function (numba, compiled on first use and
cached on disk; :mod:`._pairwise_kernels`) called on numpy copies of the ``(k, k, n, n)`` log-factors.

Same algorithm as the general host loop (:func:`.sinkhorn._pairwise_solve`): the same factors and
shifts, Gauss-Seidel order, underflow checks (threshold ``finfo(float64).tiny n^k / 1e-7``), one
re-absorption of the potentials per failing sweep, the stopping rule ``sum_l ||m_l(P) - 1/n||_1 <
tol`` on the incoming plan after every sweep (and before the first on a warm start), Anderson mixing
(type II, same restart rule and regularization), hence the same sweep counts; everything in float64
(float32 inputs: the results are cast back, as the ``k = 3`` kernel does). The Danskin backward is
unchanged (the caller's ``(k, k, n, n)`` pair weights and one GEMM).

:func:`fused_pairwise` returns ``None`` when it does not apply -- numba missing or
``MVAPP_M3G_FUSED=0``, not a CPU tensor, ``k < 4``, ``n^(k-1)`` above :data:`FUSED_PAIRWISE_MAX_ROWS`,
dtype not float32 / float64, or a second underflow within one sweep (where the general path would
continue in float64 / on the dense path) -- and the caller runs the general path from the start.
"""
from __future__ import annotations

import functools
import math
from types import ModuleType

import numpy as np
import torch

from .m3g_fast import fused_available
from .sinkhorn import _REL_UNDERFLOW, MMSinkhornResult

# Largest n^(k-1) (rows x columns of the (n^(k-2), n) factors) routed here: three float64 arrays of
# this size (24 MiB at the cap) stay in a large L3 (docs/benchmarks.md "fused k > 3").
FUSED_PAIRWISE_MAX_ENTRIES = 1 << 20
# the Anderson least-squares regularization of :class:`.sinkhorn.AndersonMixer`
_ANDERSON_REGULARIZATION = 1e-10


@functools.lru_cache(maxsize=1)
def _kernel() -> ModuleType | None:
    """The compiled kernels (:mod:`._pairwise_kernels`), or None when numba is not installed."""
    try:
        from . import _pairwise_kernels
    except ImportError:
        return None
    return _pairwise_kernels


def fused_pairwise_applies(log_factors: torch.Tensor) -> bool:
    """Whether :func:`fused_pairwise` takes ``log_factors`` ``(k, k, n, n)`` (before trying)."""
    if not isinstance(log_factors, torch.Tensor) or log_factors.dim() != 4:
        return False
    k, n = log_factors.shape[0], log_factors.shape[2]
    return (
        k >= 4
        and n >= 2
        and n ** (k - 1) <= FUSED_PAIRWISE_MAX_ENTRIES
        and log_factors.device.type == "cpu"
        and log_factors.dtype in (torch.float32, torch.float64)
        and log_factors.layout == torch.strided
        and fused_available()
        and _kernel() is not None
    )


def fused_pairwise(
    log_factors: torch.Tensor, offset: float, tol: float, max_iter: int, init: torch.Tensor | None,
    anderson: int = 0,
) -> MMSinkhornResult | None:
    """:func:`.sinkhorn.mm_sinkhorn_pairwise` (host loop) for ``A = sum_{l<m} log_factors[l, m] - offset``.

    ``log_factors`` ``(k, k, n, n)`` (``l < m`` blocks read), ``init`` validated starting
    log-potentials ``(k, n)`` or None, ``anderson`` the mixing depth. Returns the result
    (``log_potentials`` ``(k, n)`` and ``pair_marginals`` ``(k, k, n, n)`` in the input dtype,
    ``path = "factorized-fused"``) or None (see the module docstring).
    """
    if not fused_pairwise_applies(log_factors):
        return None
    kernels = _kernel()
    k, n = log_factors.shape[0], log_factors.shape[2]
    factors = log_factors.detach().to(torch.float64).contiguous().numpy()
    g = np.zeros((k, n)) if init is None else init.detach().to(torch.float64).numpy().copy()
    pairs = np.zeros((k, k, n, n))
    tiny = float(np.finfo(np.float64).tiny) * float(n) ** k / _REL_UNDERFLOW
    status, iterations, error, converged, mass = kernels.solve(
        factors, float(offset), float(tol), int(max_iter), g, init is not None, int(anderson),
        _ANDERSON_REGULARIZATION, tiny, pairs,
    )
    if status != kernels.DONE or not math.isfinite(float(g.sum())):
        return None
    dtype = log_factors.dtype
    return MMSinkhornResult(
        torch.from_numpy(g).to(dtype), torch.from_numpy(pairs).to(dtype), float(mass), int(iterations),
        float(error), bool(converged), "factorized-fused",
    )


__all__ = ["FUSED_PAIRWISE_MAX_ENTRIES", "fused_pairwise", "fused_pairwise_applies"]
