"""numba sweeps of the factorized MM-Sinkhorn for ``k > 3`` on small CPU problems (cost ``cv`` of M3G).

The numba backend of :func:`.m3g.solve` for ``k > 3`` (sizes: :data:`.m3g.AUTO_NUMBA_ON_CPU`). A sweep's heavy
``n^(k-1)`` steps (GEMM 1 with its right chain, the rest views' updates, GEMM 2) run as compiled loops
(:mod:`._pairwise_kernels`) on numpy views of the same memory, driven by a host loop that reads the stopping rule
every sweep (a read costs nothing on the CPU). Same sweeps as the blocks (:func:`.sinkhorn._factorized_sweep`):
Gauss-Seidel order, the stopping rule on the incoming plan, the underflow checks and Anderson mixing (the one
arithmetic, :func:`.sinkhorn._anderson_mix`); values, gradients and sweep counts agree with the blocks to
round-off (tested). On an underflow the current potentials are absorbed into the factors and the sweep is redone;
a second one in the same sweep returns None and the caller runs the blocks.
"""

from __future__ import annotations

import functools
import math
from types import ModuleType

import numpy as np
import torch

from .sinkhorn import (
    _REL_UNDERFLOW,
    MMSinkhornResult,
    _anderson_mix,
    _column_factor,
    _left_vector,
    _rest_scalings,
)


class _NumericalTrouble(Exception):
    """An exp-domain intermediate underflowed or is not finite."""


def _check(values: torch.Tensor, tiny: float) -> None:
    """Raise :class:`_NumericalTrouble` unless every entry is finite and ``>= tiny`` (NaN fails)."""
    if not float(values.amin()) >= tiny:
        raise _NumericalTrouble


@functools.lru_cache(maxsize=1)
def kernels() -> ModuleType | None:
    """The compiled kernels (:mod:`._pairwise_kernels`), or None when numba is not installed."""
    try:
        from . import _pairwise_kernels
    except ImportError:
        return None
    return _pairwise_kernels


class _HostAnderson:
    """The history of :func:`.sinkhorn._anderson_mix` between host-loop sweeps, and its decision read."""

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self.reset()

    def reset(self) -> None:
        self.history: tuple[torch.Tensor, ...] | None = None

    def mix(self, inputs: torch.Tensor, outputs: torch.Tensor, error: float) -> torch.Tensor | None:
        """Extrapolated rest potentials ``(r, n)`` (dtype of ``outputs``) or None (plain sweep)."""
        if self.history is None:
            rings = torch.zeros(2, self.depth + 1, outputs.numel(), dtype=torch.float64)
            count = torch.zeros((), dtype=torch.int64)
            self.history = (rings[0], rings[1], count, torch.full((), math.inf, dtype=torch.float64))
        error_tensor = torch.tensor(error, dtype=torch.float64)
        active = torch.ones((), dtype=torch.bool)
        mixed, use, self.history = _anderson_mix(self.history, inputs, outputs, error_tensor, active)
        return mixed if bool(use) else None


class _NumbaFactors:
    """Exp-domain factors of :class:`.sinkhorn._FactorView` (``xe`` / ``be`` ``(n^(r-1), n)`` in the input
    dtype, ``bs``, ``absorbed``, ``last``) with the potentials ``(k, n)`` absorbed, filled by a compiled pass (the
    log-domain sums are never materialized), with the work buffers of the compiled sweep. ``loop``:
    ``(check_first, tol, max_iter, tiny)`` of the solve."""

    def __init__(self, log_factors: torch.Tensor, offset: float, potentials: torch.Tensor, loop: tuple) -> None:
        k, n = log_factors.shape[0], log_factors.shape[2]
        self.k, self.n, self.r, self.q = k, n, k - 1, k - 1
        self.offset, self.loop, self.dtype, self.kernels = offset, loop, log_factors.dtype, kernels()
        self.log_factors64 = log_factors.detach().to(torch.float64).contiguous().numpy()
        self.last = log_factors[k - 2, k - 1]
        rows, r = n ** (k - 2), k - 1
        self.xe, self.be, self._q0 = torch.empty(3, rows, n, dtype=self.dtype).unbind()
        self._v, self._left, self._coupling, self._col, self._scalars = (
            np.empty((r, n)),
            np.empty(rows),
            np.empty((n, n), dtype=self.xe.numpy().dtype),
            np.empty(n),
            np.empty(4),
        )
        chain = np.empty(sum(n ** (l + 1) for l in range(r - 1)))
        self._work = (np.empty((r, n)), np.empty(r), self._v, np.empty((r, n)), chain, self._left, np.empty(rows))
        self._work += (self._coupling, self._col, self._scalars)
        self.absorb(potentials)

    def absorb(self, potentials: torch.Tensor) -> None:
        """Fold ``potentials`` ``(k, n)`` into ``xe`` / ``be`` (one compiled pass)."""
        self.absorbed = potentials.clone()
        potentials64 = potentials.detach().double().numpy()
        self.bs = float(self.kernels.absorb(self.log_factors64, potentials64, self.xe.numpy(), self.be.numpy()))

    def sweep(self, g: torch.Tensor, iterations: int, mixer: _HostAnderson | None) -> MMSinkhornResult | None:
        """One sweep (``g`` ``(k, n)`` updated in place): the rest views' part compiled
        (:func:`._pairwise_kernels.sweep_rest`, float64), then Anderson mixing and view ``q``'s update.
        Returns the result once converged or after ``max_iter`` sweeps, else None; raises
        :class:`_NumericalTrouble` on an underflow."""
        m1_shift, m1 = _column_factor(self, g)
        rest = g.detach().double().numpy().copy()  # updated in place (rest views)
        factors = (self.xe.numpy(), self.be.numpy(), m1.numpy(), self._q0.numpy())
        loop = (iterations, *self.loop)
        base = self.bs - float(self.offset)
        status = self.kernels.sweep_rest(
            factors, m1_shift.double().numpy(), rest, self.absorbed.double().numpy(), base, loop, self._work
        )
        if status == self.kernels.TROUBLE:
            raise _NumericalTrouble
        error, converged, log_scale, log_scale_in = self._scalars.tolist()
        if status == self.kernels.FINISHED:  # the incoming plan is the output (g unchanged)
            pairs = self.pair_marginals(torch.from_numpy(self._work[3]), m1, log_scale_in)
            return MMSinkhornResult(
                g, pairs, float(pairs[0, 1].sum()), iterations, error, converged > 0, "factorized-numba"
            )
        g_in = g[: self.r].clone()
        g[: self.r] = torch.from_numpy(rest[: self.r]).to(self.dtype)
        if mixer is not None and iterations > 0:  # g_in[q] is then view q's update for g_in[:r]
            mixed = mixer.mix(g_in, g[: self.r], error)
            if mixed is not None:
                g[: self.r] = mixed
                _, h_max, v_mixed = _rest_scalings(self, g, m1_shift)
                return self._update_last(g, v_mixed.double().numpy(), m1, self.bs - self.offset + float(h_max.sum()))
        return self._update_last(g, self._v, m1, log_scale)

    def _update_last(self, g: torch.Tensor, v: np.ndarray, m1: torch.Tensor, log_scale: float) -> None:
        """View ``q``'s update of ``g`` ``(k, n)`` (in place) for rest scalings ``v`` ``(r, n)``."""
        self.kernels.last_column_of(
            self.xe.numpy(), self.be.numpy(), v, m1.numpy(), self._left, self._coupling, self._col
        )
        col = torch.from_numpy(self._col).to(self.dtype)
        _check(col, self.loop[3])
        g[self.q] += -math.log(self.n) - col.log() - log_scale

    def pair_marginals(self, v: torch.Tensor, m1: torch.Tensor, log_scale: float) -> torch.Tensor:
        """All pair marginals ``(k, k, n, n)`` (``l < m`` filled) of the plan ``q0 * (x)v * exp(log_scale)``
        (one compiled pass, :func:`._pairwise_kernels.pair_sums`); raises :class:`_NumericalTrouble` on a non-finite
        one."""
        if not abs(log_scale) < 700.0:
            raise _NumericalTrouble
        pairs = np.zeros((self.k, self.k, self.n, self.n))
        left = _left_vector(v.double(), self.r - 1).numpy()
        xe, be, q0, m1_t = self.xe.numpy(), self.be.numpy(), self._q0.numpy(), m1.T.contiguous().numpy()
        self.kernels.pair_sums(xe, be, q0, left, v[-1].double().numpy(), m1_t, pairs)
        pairs = torch.from_numpy(pairs * math.exp(log_scale)).to(self.dtype)
        if not bool(torch.isfinite(pairs).all()):
            raise _NumericalTrouble
        return pairs


def mm_sinkhorn_pairwise_numba(
    log_factors: torch.Tensor, offset: float, tol: float, max_iter: int, init: torch.Tensor | None, anderson: int
) -> MMSinkhornResult | None:
    """Alg. 1 for ``A = sum_{l<m} log_factors[l, m][i_l, i_m] - offset`` (``(k, k, n, n)``, ``k > 3``) on the
    numba sweeps from ``init`` (``(k, n)`` warm start, zeros if None; the stopping rule is then also checked
    before the first sweep), in the input dtype; ``path`` ``"factorized-numba"``. None on numerical trouble
    that re-absorbing the potentials does not cure (the caller runs the sweep blocks)."""
    k, n = log_factors.shape[0], log_factors.shape[2]
    tiny = torch.finfo(log_factors.dtype).tiny * float(n) ** k / _REL_UNDERFLOW
    g = torch.zeros(k, n, dtype=log_factors.dtype)
    if init is not None:
        g.copy_(init)
    fac = _NumbaFactors(log_factors, offset, g, (init is not None, tol, max_iter, tiny))
    mixer = _HostAnderson(anderson) if anderson > 0 else None
    iterations, absorbed_at = 0, -1
    while True:
        start = g.clone()
        try:
            outcome = fac.sweep(g, iterations, mixer)
        except _NumericalTrouble:
            g.copy_(start)
            if mixer is not None:
                mixer.reset()
            if absorbed_at == iterations:
                return None
            fac.absorb(g)
            absorbed_at = iterations
            continue
        if outcome is not None:
            return outcome
        iterations += 1


__all__ = ["kernels", "mm_sinkhorn_pairwise_numba"]
