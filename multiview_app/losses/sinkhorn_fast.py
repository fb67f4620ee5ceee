"""Compiled sweeps of the factorized MM-Sinkhorn (:func:`.sinkhorn.mm_sinkhorn_pairwise`) for ``k > 3`` on CPU.

At the sizes M3G trains with (the EEG demo: ``n = 16`` items, ``k = 6`` views, ``n^k = 16.7 M``) a
sweep of the general path is dominated by its ``n^(k-1)`` / ``n^k`` steps run as torch operations:
the exp-domain factors, GEMM 1 (``(n^(k-2), n) x (n, n)``) and the first link of the right chain,
the marginal of view ``r - 1``, GEMM 2 (view ``q``'s marginal) and the final pair marginals -- each
several passes over ``n^(k-1)``-entry temporaries. :class:`FusedPairwiseFactors` runs each of them
as one compiled loop (numba, :mod:`._pairwise_kernels`, compiled on first use per dtype and cached
on disk) on numpy views of the same memory; sums over the ``n^(k-2)`` rows are accumulated in float64.

Everything else is the general host loop itself (:func:`.sinkhorn._pairwise_solve` /
:func:`.sinkhorn._pairwise_sweep` with ``factors=FusedPairwiseFactors``): the Gauss-Seidel order, the
underflow checks, the stopping rule ``sum_l ||m_l(P) - 1/n||_1 < tol`` on the incoming plan (and
before the first sweep on a warm start), Anderson mixing, re-absorption, the float64 retry and the
dense fallback -- so the same sweeps and values up to round-off, in the input's dtype. The Danskin
backward is unchanged (the caller's pair weights and one GEMM).

:func:`fused_factors` returns ``None`` (general path) when numba is missing or ``MVAPP_M3G_FUSED=0``,
the tensor is not a CPU float32 / float64 one, ``k < 4``, or ``n^(k-1)`` exceeds
:data:`FUSED_PAIRWISE_MAX_ENTRIES`.
"""

from __future__ import annotations

import functools
import math
from types import ModuleType

import numpy as np
import torch

from .m3g_fast import fused_available
from .sinkhorn import (
    AndersonMixer,
    MMSinkhornResult,
    _check,
    _column_factor,
    _left_vector,
    _NumericalTrouble,
    _PairwiseFactors,
    _rest_scalings,
    register_fused_factors,
)

# :func:`._pairwise_kernels.sweep_rest` outcomes
_UPDATED, _FINISHED, _TROUBLE = 0, 1, 2

# Largest n^(k-1) (entries of each (n^(k-2), n) factor) routed here: (16, 6), (32, 5), (64, 4) and below.
# Three such arrays in the input dtype (12-24 MiB at the cap) stay within a large L3; bigger problems keep
# the general path (its BLAS GEMMs; not measured against the kernels: docs/benchmarks.md "k > 3 on CPU").
FUSED_PAIRWISE_MAX_ENTRIES = 1 << 20


@functools.lru_cache(maxsize=1)
def _kernels() -> ModuleType | None:
    """The compiled kernels (:mod:`._pairwise_kernels`), or None when numba is not installed."""
    try:
        from . import _pairwise_kernels
    except ImportError:
        return None
    return _pairwise_kernels


def fused_factors(log_factors: torch.Tensor) -> type[_PairwiseFactors] | None:
    """:class:`FusedPairwiseFactors` when the compiled sweeps take ``log_factors`` ``(k, k, n, n)``,
    else None (see the module docstring)."""
    if not isinstance(log_factors, torch.Tensor) or log_factors.dim() != 4:
        return None
    k, n = log_factors.shape[0], log_factors.shape[2]
    applies = (
        k >= 4
        and n >= 2
        and n ** (k - 1) <= FUSED_PAIRWISE_MAX_ENTRIES
        and log_factors.device.type == "cpu"
        and log_factors.dtype in (torch.float32, torch.float64)
        and log_factors.layout == torch.strided
        and fused_available()
        and _kernels() is not None
    )
    return FusedPairwiseFactors if applies else None


class FusedPairwiseFactors(_PairwiseFactors):
    """:class:`.sinkhorn._PairwiseFactors` whose heavy steps are compiled kernels (CPU, host loop).

    Same attributes (``xe`` / ``be`` ``(n^(r-1), n)`` in the input dtype, ``bs``, ``absorbed``,
    ``last``); the log-domain sums ``log_x`` / ``log_b`` are never materialized (the kernel sums the
    ``(k, k, n, n)`` log-factors, in float64, while it fills ``xe`` / ``be``).
    """

    def __init__(self, log_factors: torch.Tensor, offset: float, *, device_loop: bool = False) -> None:
        if device_loop or log_factors.device.type != "cpu":
            raise ValueError("FusedPairwiseFactors: CPU host loop only")
        k, n = log_factors.shape[0], log_factors.shape[2]
        self.device_loop = False
        self.k, self.n, self.r, self.q = k, n, k - 1, k - 1
        self.offset = offset
        self.dtype = log_factors.dtype
        self.kernels = _kernels()
        self.log_factors64 = log_factors.detach().to(torch.float64).contiguous().numpy()
        self.last = log_factors[k - 2, k - 1]
        rows = n ** (k - 2)
        self.xe = torch.empty(rows, n, dtype=self.dtype)
        self.be = torch.empty(rows, n, dtype=self.dtype)
        self._q0 = torch.empty(rows, n, dtype=self.dtype)
        # work buffers of the compiled sweep (float64 unless noted)
        r = k - 1
        self._h, self._h_max = np.empty((r, n)), np.empty(r)
        self._v, self._v_in = np.empty((r, n)), np.empty((r, n))
        self._chain = np.empty(sum(n ** (l + 1) for l in range(r - 1)))
        self._left, self._left_in = np.empty(rows), np.empty(rows)
        self._coupling = np.empty((n, n), dtype=self.xe.numpy().dtype)
        self._col, self._scalars = np.empty(n), np.empty(4)
        self.absorbed = torch.zeros(k, n, dtype=self.dtype)
        self._filled = False  # xe / be / bs are filled on first use: a solve from nonzero potentials
        # absorbs them first (the general class absorbs zeros, then those potentials: same factors)

    @property
    def bs(self) -> float:
        self._fill()
        return self._bs

    def _fill(self) -> None:
        if not self._filled:
            self.absorb(self.absorbed)

    def absorb(self, potentials: torch.Tensor) -> None:
        """Fold ``potentials`` ``(k, n)`` into ``xe`` / ``be`` (one compiled pass)."""
        self.absorbed = potentials.clone()
        self._bs = float(
            self.kernels.absorb(
                self.log_factors64, potentials.detach().double().numpy(), self.xe.numpy(), self.be.numpy()
            )
        )
        self._filled = True

    def pair_marginals(self, q0: torch.Tensor, v: torch.Tensor, m1: torch.Tensor, log_scale: float) -> torch.Tensor:
        if not abs(log_scale) < 700.0:  # as sinkhorn._times_exp
            raise _NumericalTrouble
        self._fill()
        k, n = self.k, self.n
        pairs = np.zeros((k, k, n, n))
        self.kernels.pair_sums(
            self.xe.numpy(),
            self.be.numpy(),
            q0.numpy(),
            _left_vector(v.double(), self.r - 1).numpy(),
            v[-1].double().numpy(),
            m1.T.contiguous().numpy(),
            pairs,
        )
        return torch.from_numpy(pairs * math.exp(log_scale)).to(self.dtype)

    def sweep(
        self,
        g: torch.Tensor,
        iterations: int,
        tol: float,
        max_iter: int,
        tiny: float,
        check_first: bool = False,
        mixer: AndersonMixer | None = None,
    ) -> MMSinkhornResult | None:
        """:func:`.sinkhorn._pairwise_sweep` with the rest views' part compiled
        (:func:`._pairwise_kernels.sweep_rest`, float64); Anderson mixing and view ``q``'s update as
        there. Raises :class:`.sinkhorn._NumericalTrouble` where the general sweep would."""
        self._fill()
        r, q, n = self.r, self.q, self.n
        kernels = self.kernels
        m1_shift, m1 = _column_factor(self, g)
        m1_np = m1.numpy()
        rest = g.detach().double().numpy().copy()  # updated in place (rest views)
        status = kernels.sweep_rest(
            self.xe.numpy(),
            self.be.numpy(),
            self._q0.numpy(),
            m1_np,
            m1_shift.double().numpy(),
            rest,
            self.absorbed.double().numpy(),
            self._bs,
            float(self.offset),
            iterations,
            check_first,
            tol,
            max_iter,
            tiny,
            self._h,
            self._h_max,
            self._v,
            self._v_in,
            self._chain,
            self._left,
            self._left_in,
            self._coupling,
            self._col,
            self._scalars,
        )
        if status == _TROUBLE:
            raise _NumericalTrouble
        error, converged, log_scale, log_scale_in = self._scalars.tolist()
        if status == _FINISHED:  # the incoming plan is the output (g unchanged)
            pairs = self.pair_marginals(self._q0, torch.from_numpy(self._v_in), m1, log_scale_in)
            mass = float(pairs[0, 1].sum())
            if not math.isfinite(mass) or not bool(torch.isfinite(pairs).all()):
                raise _NumericalTrouble
            return MMSinkhornResult(g, pairs, mass, iterations, error, converged > 0, "factorized")
        g_in = g[:r].clone()
        g[:r] = torch.from_numpy(rest[:r]).to(self.dtype)
        v = self._v
        if mixer is not None and iterations > 0:  # as the general sweep
            mixed = mixer.mix(g_in, g[:r], error)
            if mixed is not None:
                g[:r] = mixed
                _, h_max, v_mixed = _rest_scalings(self, g, m1_shift)
                log_scale = self._bs - self.offset + float(h_max.sum())
                v = v_mixed.double().numpy()
        kernels.last_column_of(self.xe.numpy(), self.be.numpy(), v, m1_np, self._left, self._coupling, self._col)
        col = torch.from_numpy(self._col).to(self.dtype)
        _check(col, tiny)
        g[q] += -math.log(n) - col.log() - log_scale
        return None


def warm_up(dtypes: tuple[torch.dtype, ...] = (torch.float32,)) -> float:
    """Compile the kernels for ``dtypes`` (or load them from numba's on-disk cache) on a tiny problem
    (``k = 4``, ``n = 3``: numba specializes on dtypes and layouts, not sizes); returns the seconds spent.
    ``python -m multiview_app.losses.warmup`` runs it (the EEG demo does, beside its synthesis)."""
    import time

    from .m3g import m3g_factorized

    start = time.perf_counter()
    if fused_factors(torch.zeros(4, 4, 3, 3)) is None:
        return 0.0
    raw = torch.randn(3, 4, 2, generator=torch.Generator().manual_seed(0))
    for dtype in dtypes:
        z = torch.nn.functional.normalize(raw.to(dtype), dim=-1)
        m3g_factorized(z, 0.5, max_iter=20, anderson=2, init_potentials="diagonal")
    return time.perf_counter() - start


def _route(log_factors: torch.Tensor) -> type[_PairwiseFactors] | None:
    """:func:`fused_factors`, looked up at call time (tests replace it): the hook registered with the solver."""
    return fused_factors(log_factors)


register_fused_factors(_route)

__all__ = ["FUSED_PAIRWISE_MAX_ENTRIES", "FusedPairwiseFactors", "fused_factors", "warm_up"]
