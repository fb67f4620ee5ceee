"""Multi-marginal Sinkhorn (M3G paper, Alg. 1) in two exact variants.

Both solve, for a log-kernel ``A = -C / epsilon`` over ``k`` views of ``n`` points, the dual
potentials ``g_l = f_l / epsilon`` (``(k, n)``) of the plan ``P = exp(A + g_1 (+) ... (+) g_k)`` with
uniform marginals ``1/n``. Updates follow Alg. 1 (Gauss-Seidel: ``g_1``, then ``g_2`` with the new
``g_1``, ...); after every full sweep the stopping rule is ``sum_l ||m_l(P) - 1/n||_1 < tol``.

* :func:`mm_sinkhorn_dense` -- the materialized log-domain solver on a full ``(n,)*k`` log-kernel
  (temporaries processed in chunks along the first axis). The reference (in float64, the tests'
  oracle), the solver of non-pairwise costs, and the last numerical fallback.
* :func:`mm_sinkhorn_pairwise` -- for kernels that factorize over view pairs,
  ``A[i_1..i_k] = sum_{l<m} L_lm[i_l, i_m] - offset``: the one solver of M3G's ``cv`` cost, on CPU
  and GPU alike. The last view ``q`` is summed out with a GEMM against pre-stabilized exp-domain
  factors, so one sweep costs two ``n^k`` GEMMs plus ``O(k n^(k-1))`` element-wise work and memory
  ``O(n^(k-1))``; potentials stay in the log domain and every exp-domain factor carries its own max
  shift (``k = 3``: closed-form sweeps on three ``(n, n)`` kernels). Sweeps are pure functions of
  tensors, run in blocks (compiled by ``torch.compile`` on a GPU, eager on the CPU by default, same
  values: :mod:`._compile`) with the stopping rule on the device and one host read per block. A marginal
  sum that may have lost accuracy to underflow (or is not finite) escalates: float32 re-runs the
  blocks in float64, then the dense exact log-domain path.

Both return a :class:`MMSinkhornResult` with the pairwise marginals ``P_lm`` (``l < m``) that the
Danskin gradient of M3G needs.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from ._compile import compiled

# Factorized path: every exp-domain factor is <= 1 after its max shift, so underflow perturbs each
# of the <= n^k terms of a marginal sum by at most finfo.tiny. A marginal entry must exceed
# finfo.tiny * n^k / _REL_UNDERFLOW (relative error <= _REL_UNDERFLOW); else the solve escalates.
_REL_UNDERFLOW = 1e-7


@dataclass
class MMSinkhornResult:
    """Output of an MM-Sinkhorn solve.

    ``log_potentials``: ``(k, n)`` dual potentials divided by epsilon (``g_l = f_l / epsilon``).
    ``pair_marginals``: ``(k, k, n, n)``; entry ``[l, m]`` for ``l < m`` is the sum of ``P`` (or of
    ``P * pair_weight`` on the dense path) over every axis but ``l`` and ``m``; other entries are 0.
    ``mass``: ``sum(P)``. ``marginal_error``: ``sum_l ||m_l(P) - 1/n||_1`` of the returned plan.
    ``path``: ``"dense"``, ``"factorized-k3"`` (the closed-form ``k = 3`` sweeps), ``"factorized"``, or a
    numerical fallback of :func:`mm_sinkhorn_pairwise`: ``"factorized->float64"`` (float32 solve retried
    in float64), ``"factorized->float64->dense"`` (that retry failed too) or ``"factorized->dense"``
    (float64 input: no retry, straight to dense); ``"fused-k3"``: the numba ``k = 3`` loss (:mod:`.m3g_fast`);
    ``"factorized-numba"``: the numba ``k > 3`` sweeps (:mod:`.sinkhorn_fast`).
    """

    log_potentials: torch.Tensor
    pair_marginals: torch.Tensor
    mass: float
    iterations: int
    marginal_error: float
    converged: bool
    path: str
    potentials_finite: bool | None = None  # checked by the solver (device loop), None = not checked


# --------------------------------------------------------------------------- dense (materialized)
def _outer_sum(vectors: list[torch.Tensor]) -> torch.Tensor:
    """``v_1 (+) ... (+) v_k`` as a tensor of shape ``(len(v_1), ..., len(v_k))``."""
    total = vectors[0]
    for vec in vectors[1:]:
        total = total.unsqueeze(-1) + vec
    return total


def _chunk_rows(shape: tuple[int, ...], chunk_elems: int) -> int:
    """Rows of the first axis per chunk so that a chunk holds about ``chunk_elems`` entries."""
    row = math.prod(shape[1:])
    return max(1, min(shape[0], chunk_elems // max(row, 1)))


def _log_plan_chunks(
    log_kernel: torch.Tensor, g: torch.Tensor, chunk_elems: int
) -> Iterator[tuple[slice, torch.Tensor]]:
    """``(rows, log P[rows])`` of ``P = exp(log_kernel + (+)g)`` in chunks of about ``chunk_elems`` entries
    along axis 0 (``g`` ``(k, n)``)."""
    n = g.shape[1]
    step = _chunk_rows(tuple(log_kernel.shape), chunk_elems)
    for start in range(0, n, step):
        rows = slice(start, min(n, start + step))
        yield rows, log_kernel[rows] + _outer_sum([g[0, rows], *g[1:]])


def _dense_log_marginal(log_kernel: torch.Tensor, g: torch.Tensor, view: int, chunk_elems: int) -> torch.Tensor:
    """``log m_view`` of ``P = exp(log_kernel + (+)g)`` ``(n,)``, chunked along axis 0."""
    parts = [
        torch.logsumexp(block.movedim(view, 0).reshape(block.shape[view], -1), dim=1)
        for _, block in _log_plan_chunks(log_kernel, g, chunk_elems)
    ]
    return torch.cat(parts) if view == 0 else torch.logsumexp(torch.stack(parts), dim=0)


def _dense_sums(
    log_kernel: torch.Tensor,
    g: torch.Tensor,
    chunk_elems: int,
    groups: list[tuple[int, ...]],
    weight: torch.Tensor | None = None,
) -> list[torch.Tensor]:
    """Sums of ``P`` (times ``weight`` if given) over every axis but those of each group (``(n,)`` per axis kept,
    in the group's order), one exp pass over the chunks."""
    k, n = g.shape
    sums = [torch.zeros((n,) * len(group), dtype=g.dtype, device=g.device) for group in groups]
    for rows, block in _log_plan_chunks(log_kernel, g, chunk_elems):
        plan = block.exp_() if weight is None else block.exp_().mul_(weight[rows])
        for out, group in zip(sums, groups):
            dims = tuple(d for d in range(k) if d not in group)
            part = plan.sum(dim=dims) if dims else plan
            if 0 in group:
                out[rows] = part
            else:
                out += part
    return sums


def mm_sinkhorn_dense(
    log_kernel: torch.Tensor,
    tol: float,
    max_iter: int,
    *,
    init: torch.Tensor | None = None,
    pair_weight: torch.Tensor | None = None,
    chunk_elems: int = 1 << 24,
) -> MMSinkhornResult:
    """Alg. 1 on a materialized log-kernel ``A = -C / epsilon`` of shape ``(n,)*k``.

    ``init``: starting log-potentials ``(k, n)`` (zeros by default). ``pair_weight``: optional
    ``(n,)*k`` tensor; the returned pair sums are then those of ``P * pair_weight``.
    Runs in ``log_kernel``'s dtype; memory ``n^k`` plus chunk temporaries.
    """
    k, n = log_kernel.dim(), log_kernel.shape[0]
    log_target = -math.log(n)
    g = torch.zeros(k, n, dtype=log_kernel.dtype, device=log_kernel.device) if init is None else init.clone()
    iterations, error, converged = 0, float("inf"), False
    while iterations < max_iter:
        for view in range(k):
            g[view] += log_target - _dense_log_marginal(log_kernel, g, view, chunk_elems)
        iterations += 1
        marg = torch.stack(_dense_sums(log_kernel, g, chunk_elems, [(view,) for view in range(k)]))
        error = float((marg - 1.0 / n).abs().sum())
        if error < tol:
            converged = True
            break
    upper = [(l, m) for l in range(k) for m in range(l + 1, k)]
    pairs = torch.zeros(k, k, n, n, dtype=g.dtype, device=g.device)
    for (l, m), total in zip(upper, _dense_sums(log_kernel, g, chunk_elems, upper, pair_weight)):
        pairs[l, m] = total
    mass = float(marg[0].sum())
    return MMSinkhornResult(g, pairs, mass, iterations, error, converged, "dense")


# --------------------------------------------------------------------------- factorized (pairwise)
def _times_exp(values: torch.Tensor, log_scale: torch.Tensor) -> torch.Tensor:
    """``values * exp(log_scale)`` computed in float64 (small tensors only), cast back. ``log_scale`` is
    a 0-d tensor, not read: the sweep checks ``|log_scale| < 700`` on the device (:func:`_scale_ok`)."""
    return (values.double() * log_scale.exp()).to(values.dtype)


class _FactorView:
    """Exp-domain factors of a pairwise log-kernel with absorbed potentials ``absorbed`` ``(k, n)`` (built by
    :func:`_pairwise_factors`; rebuilt from its tensors inside a compiled block).

    Views ``0..r-1`` (``r = k - 1``) are the "rest" ``I = (I', j)`` with ``j = i_{r-1}``; view ``q = k - 1`` is
    summed out by GEMMs. With ``logX[I', i_q] = sum_{l<r-1} L_lq[i_l, i_q] + a_q`` and
    ``logB[I] = sum_{l<m<q} L_lm[i_l, i_m] + sum_{l<r} a_l[i_l]``: ``xe = exp(logX - xs[I'])`` ``(n^(r-1), n)``,
    row-shifted (``xs`` the row max); ``be = exp(logB + xs[I'] - bs)`` ``(n^(r-1), n)``, ``bs`` its global max;
    ``last = L_{r-1, q}`` ``(n, n)``. ``P[I, i_q] = be[I] xe[I', i_q] exp(last[j, i_q] + sum_l (g - a)_l - offset
    + bs)``; the sweep handles the remaining exp factor with per-vector shifts.
    """

    def __init__(self, be: torch.Tensor, xe: torch.Tensor, last: torch.Tensor, absorbed: torch.Tensor) -> None:
        self.be, self.xe, self.last, self.absorbed = be, xe, last, absorbed
        self.k, self.n = absorbed.shape
        self.r = self.q = self.k - 1


def _pairwise_factors(log_factors: torch.Tensor, potentials: torch.Tensor) -> tuple[_FactorView, torch.Tensor]:
    """The factors of ``log_factors`` ``(k, k, n, n)`` with ``potentials`` ``(k, n)`` absorbed (a warm start's
    plan is then near the shifts) and ``bs`` (0-d float64)."""
    k, _, n, _ = log_factors.shape
    r = q = k - 1
    log_x = torch.zeros(n, dtype=log_factors.dtype, device=log_factors.device)  # pair sums grown one axis at a time
    for l in range(r - 1):
        log_x = log_x.unsqueeze(-2) + log_factors[l, q]  # (n,)*(l+1) + (n_q,)
    log_x = log_x.reshape(-1, n) + potentials[q]  # (n^(r-1), n)
    xs = log_x.amax(dim=1)
    log_b = pairwise_sum_tensor(log_factors[:r, :r]) + xs.reshape((n,) * (r - 1) + (1,))
    for l in range(r):
        log_b = log_b + potentials[l].reshape((n,) + (1,) * (r - 1 - l))
    bs = log_b.max()
    be = (log_b - bs).exp_().reshape(-1, n)  # (n^(r-1), n)
    return _FactorView(be, (log_x - xs[:, None]).exp_(), log_factors[r - 1, q], potentials.clone()), bs.double()


def _right_chain(flat_plan: torch.Tensor, v: torch.Tensor) -> list[torch.Tensor]:
    """``right[l]`` (``l < r``): ``flat_plan`` ``(n^r,)`` contracted with ``v_{l+1}..v_{r-1}`` on its
    last axes, flattened ``(n^(l+1),)``; ``right[r-1]`` is ``flat_plan``."""
    r, n = v.shape
    right = [flat_plan]
    for a in range(r - 1, 0, -1):
        right.append(right[-1].reshape(-1, n) @ v[a])
    right.reverse()
    return right


# k = 3 closed form: the three exp-domain factors are max-shifted to <= 1, so a kernel entry is at
# least exp(-sum of the three log-ranges). The solve runs in float32 (float32 input) while that sum
# is below _THREE_VIEW_SPAN_F32 (entries >= e^-40, far from float32's e^-87), else in float64 up to
# _THREE_VIEW_SPAN_F64 (float64 reaches e^-708); beyond, the general path.
_THREE_VIEW_SPAN_F32 = 40.0
_THREE_VIEW_SPAN_F64 = 600.0


def pairwise_sum_tensor(pair_terms: torch.Tensor, offset: float = 0.0) -> torch.Tensor:
    """Materialize ``sum_{l<m} pair_terms[l, m][i_l, i_m] - offset`` as ``(n,)*k``.

    ``pair_terms``: ``(k, k, n, n)``, only the ``l < m`` blocks are read.
    """
    k, n = pair_terms.shape[0], pair_terms.shape[2]
    out = torch.full((n,) * k, -offset, dtype=pair_terms.dtype, device=pair_terms.device)
    for l in range(k):
        for m in range(l + 1, k):
            shape = [1] * k
            shape[l], shape[m] = n, n
            out += pair_terms[l, m].reshape(shape)
    return out


def _sweep_gemm1(fac: _FactorView, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """GEMM 1 of a sweep from potentials ``g`` ``(k, n)``: ``R1[I', j] = sum_{i_q} xe[I', i_q] M1[i_q, j]``.

    Returns ``m1_shift`` ``(n_j,)`` (row max of ``last + (g - a)_q``), ``M1`` ``(n_q, n_j)`` and the
    rest plan ``q0 = be * R1`` ``(n^(r-1), n_j)`` (up to ``(x)v * exp(log_scale)``).
    """
    m1_shift, m1 = _column_factor(fac, g)
    return m1_shift, m1, fac.be * (fac.xe @ m1)


def _column_factor(fac: _FactorView, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``m1_shift`` ``(n_j,)`` (row max of ``last + (g - a)_q``) and ``M1 = exp(last + (g - a)_q -
    m1_shift)^T`` ``(n_q, n_j)`` of the potentials ``g`` ``(k, n)``."""
    q = fac.q
    last_g = fac.last + (g[q] - fac.absorbed[q])  # (n_j, n_q)
    m1_shift = last_g.amax(dim=1)
    return m1_shift, (last_g - m1_shift[:, None]).exp_().T.contiguous()


def _rest_scalings(
    fac: _FactorView, g: torch.Tensor, m1_shift: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Log-scalings ``h`` ``(r, n)`` of the rest views (``(g - a)[:r]``, view ``r-1`` plus
    ``m1_shift``), their row max ``h_max`` ``(r,)`` and ``v = exp(h - h_max)`` ``(r, n)``."""
    r = fac.r
    h = (g[:r] - fac.absorbed[:r]).clone()
    h[r - 1] += m1_shift
    h_max = h.amax(dim=1)
    return h, h_max, (h - h_max[:, None]).exp_()


def _left_vector(v: torch.Tensor, count: int) -> torch.Tensor:
    """``prod_{a<count} v_a[i_a]`` flattened ``(n^count,)`` (``[1.]`` when ``count == 0``)."""
    if count == 0:
        return v.new_ones(1)
    out = v[0]
    for a in range(1, count):
        out = (out[:, None] * v[a][None, :]).reshape(-1)
    return out


def _last_pair(fac: _FactorView, v: torch.Tensor, m1: torch.Tensor) -> torch.Tensor:
    """Pair marginal of views ``(r-1, q)`` ``(n_j, n_q)`` up to the factor ``exp(log_scale)``.

    ``P_{r-1,q}[j, i_q] = v_{r-1}[j] M1[i_q, j] sum_{I'} V'[I'] be[I', j] xe[I', i_q]`` (one GEMM),
    ``V'`` the left vector of the first ``r-1`` views.
    """
    rows = _left_vector(v, fac.r - 1)
    core = fac.be.T @ (fac.xe * rows[:, None])  # (n_j, n_q)
    return core * v[fac.r - 1][:, None] * m1.T


def _pairwise_marginals(
    fac: _FactorView, q0: torch.Tensor, v: torch.Tensor, m1: torch.Tensor, log_scale: torch.Tensor
) -> torch.Tensor:
    """All pair marginals ``(k, k, n, n)`` (``l < m`` filled) of the current plan."""
    k, n, r, q = fac.k, fac.n, fac.r, fac.q
    pairs = torch.zeros(k, k, n, n, dtype=v.dtype, device=v.device)
    if r > 1:
        rest = (q0 * (_left_vector(v, r - 1)[:, None] * v[r - 1][None, :])).reshape((n,) * r)
        for l in range(r):
            for m in range(l + 1, r):
                dims = tuple(a for a in range(r) if a not in (l, m))
                pairs[l, m] = _times_exp(rest.sum(dim=dims) if dims else rest, log_scale)
        # pairs (l, q), l < r-1: sum over I' minus l of xe[I', i_q] * (qn @ M1^T)[I', i_q], qn = plan / R1
        qn = fac.be * (_left_vector(v, r - 1)[:, None] * v[r - 1][None, :])
        h = fac.xe * (qn @ m1.T)  # (n^(r-1), n_q)
        h = h.reshape((n,) * (r - 1) + (n,))
        for l in range(r - 1):
            dims = tuple(a for a in range(r - 1) if a != l)
            pairs[l, q] = _times_exp(h.sum(dim=dims) if dims else h, log_scale)
    pairs[r - 1, q] = _times_exp(_last_pair(fac, v, m1), log_scale)
    return pairs


# --------------------------------------------------------------------------- the sweep blocks
# Nothing is read by Python inside the loop. Scalars (log-scales, errors, the stopping decision,
# underflow flags, the sweep counter) stay 0-d device tensors; sweeps run in blocks (compiled, see
# :mod:`._compile`); once the incoming plan of a sweep meets the stopping rule (or max_iter is reached)
# the state is frozen (``torch.where``) and later sweeps of the block are no-ops, so the result is that
# of stopping at the first converged sweep. One host read per block (flags, counters, the final mass).
# Numerical trouble flagged on the device escalates (:func:`mm_sinkhorn_pairwise`).
_FIRST_BLOCK = 8  # sweep positions of the first block when no earlier solve of the problem is known


@dataclass
class LoopHints:
    """What the device loop remembers of the last solve of one problem (the caller keeps one per
    ``(n, k)``): ``positions`` it used (sweeps + the final check; sizes the next first block),
    ``k3_float64`` (the ``k = 3`` kernel range needed float64), ``readbacks`` (host reads of the
    last solve)."""

    positions: int = 0
    k3_float64: bool = False
    readbacks: int = 0


# a 0-d tensor read back with the loop's first block and the check that raises on its value
DeferredCheck = tuple[torch.Tensor, Any]


# The state of a device-loop solve: 0-d device tensors ``(position, done, trouble, iterations,
# error, converged)`` (int64, bool, bool, int64, float64, bool): the sweep position, the state is
# frozen, numerical trouble was flagged, sweeps done, stopping-rule error of the last checked plan.
Flags = tuple[torch.Tensor, ...]


def _new_flags(device: torch.device) -> Flags:
    """Fresh flags (distinct tensors: a compiled block guards on aliasing)."""
    position, done, trouble, iterations, converged = (
        torch.zeros((), dtype=dtype, device=device)
        for dtype in (torch.int64, torch.bool, torch.bool, torch.int64, torch.bool)
    )
    return position, done, trouble, iterations, torch.full((), math.inf, dtype=torch.float64, device=device), converged


@functools.lru_cache(maxsize=64)
def _limits(tol: float, max_iter: int, tiny: float, device: torch.device) -> torch.Tensor:
    """``(3,)`` float64: tolerance, max_iter, underflow bound (a tensor: no recompile per value; cached:
    no host-to-device copy per solve). Read only."""
    return torch.tensor([tol, float(max_iter), tiny], dtype=torch.float64, device=device)


def _check_stop(
    flags: Flags, live: torch.Tensor, err: torch.Tensor, limits: torch.Tensor
) -> tuple[Flags, torch.Tensor]:
    """Record the stopping-rule error ``err`` of a live sweep; returns the flags and the stop
    decision (converged, or position ``max_iter`` reached)."""
    position, done, trouble, iterations, error, converged = flags
    err = err.double()
    trouble = trouble | (live & ~torch.isfinite(err))
    now = err < limits[0]
    error = torch.where(live, err, error)
    converged = torch.where(live, now, converged)
    return (position, done, trouble, iterations, error, converged), now | (position >= limits[1])


def _advance(flags: Flags, active: torch.Tensor, stop: torch.Tensor | None) -> Flags:
    position, done, trouble, iterations, error, converged = flags
    done = done if stop is None else done | stop
    return position + 1, done, trouble, iterations + active.long(), error, converged


def _at_least(values: torch.Tensor, tiny: torch.Tensor) -> torch.Tensor:
    """0-d bool: every entry finite and ``>= tiny`` (device version of :func:`_check`)."""
    return values.amin() >= tiny.to(values.dtype)


def _scale_ok(log_scale: torch.Tensor) -> torch.Tensor:
    """0-d bool: ``|log_scale| < 700`` (device version of :func:`_times_exp`'s check)."""
    return log_scale.abs() < 700.0


#: The second block as a multiple of the first, per device type. A host read costs nothing on the CPU, so
#: its later blocks are small (a solve a little longer than the last one costs one more read, not masked
#: sweeps: a masked sweep costs as much as a live one there). On a GPU a read is a synchronization: the
#: second block is twice the first, so a solve up to 3x the last one's length reads twice.
_SECOND_BLOCK = {"cpu": 1 / 8}
_SECOND_BLOCK_ELSEWHERE = 2.0


def _block_sizes(hints: LoopHints, block: int, device_type: str) -> Any:
    """Sweep positions per block. The first: ``block`` (> 0), else the last solve's positions (a
    repeated problem reads back once), else :data:`_FIRST_BLOCK`. Then :data:`_SECOND_BLOCK` times
    the first (at least 4; a cold start with no estimate: twice the first), doubling from then on."""
    first = block if block > 0 else hints.positions or _FIRST_BLOCK
    yield first
    factor = _SECOND_BLOCK.get(device_type, _SECOND_BLOCK_ELSEWHERE)
    size = max(4, math.ceil(first * factor)) if block > 0 or hints.positions else 2 * first
    while True:
        yield size
        size *= 2


#: Sweeps unrolled in one compiled call; a block of ``s`` sweeps is a few such calls (binary digits
#: of ``s``), so at most four graphs per variant are compiled and no sweep past the block is run.
_UNROLLS = (8, 4, 2, 1)
#: The CPU's: one sweep per call. A call costs ~0.1 ms there (no launch to save) and each unrolled graph
#: is minutes of inductor compile time on a small CPU: one graph per variant instead of four.
_CPU_UNROLLS = (1,)


def _unrolled(count: int, device_type: str) -> list[int]:
    """``count`` as a sum of the device's unroll sizes, largest first."""
    sizes = []
    for size in _CPU_UNROLLS if device_type == "cpu" else _UNROLLS:
        while count >= size:
            sizes.append(size)
            count -= size
    return sizes


def _block_function(sweep: Callable[..., Any], sweeps: int) -> Callable[..., Any]:
    """``(consts, iterates, flags) -> (iterates, flags)`` after ``sweeps`` calls of ``sweep``."""

    def block(consts: tuple, iterates: tuple, flags: Flags) -> tuple[tuple, Flags]:
        for _ in range(sweeps):
            iterates, flags = sweep(consts, iterates, flags)
        return iterates, flags

    return block


class _SweepRunner:
    """Runs sweep positions of one solve through the compiled blocks: position 0 with the first
    sweep's variant (``first``), every later one with ``steady`` (variants chosen before the loop, no
    branch on tensor values inside). ``key``: what the compiled functions are cached under (with the
    variant and the unroll count)."""

    def __init__(
        self, key: tuple, first: Callable[..., Any], steady: Callable[..., Any], consts: tuple, iterates: tuple
    ) -> None:
        self.key, self.first, self.steady = key, first, steady  # key: (problem, first's tag, steady's tag)
        self.consts, self.iterates = consts, iterates
        self.device_type = iterates[0].device.type
        self.flags = _new_flags(iterates[0].device)

    def _call(self, variant: int, sweep: Callable[..., Any], sweeps: int) -> None:
        problem, *tags = self.key
        key = (*problem, ("first", "steady")[variant], tags[variant], sweeps)
        block = compiled(key, _block_function(sweep, sweeps), self.device_type)
        self.iterates, self.flags = block(self.consts, self.iterates, self.flags)

    def run(self, position: int, count: int) -> None:
        """Sweep positions ``position .. position + count - 1``."""
        if position == 0 and count > 0:
            self._call(0, self.first, 1)
            count -= 1
        for sweeps in _unrolled(count, self.device_type):
            self._call(1, self.steady, sweeps)

    def readback(self, extra: list[torch.Tensor]) -> list[float]:
        """The one host read of a block: ``[done, trouble, iterations, error, converged, *extra]``."""
        values = [*self.flags[1:], *extra]
        return torch.stack([value.double() for value in values]).tolist()


def _run_blocks(
    runner: _SweepRunner,
    outputs: Callable[[], tuple[Any, list[torch.Tensor]]],
    max_iter: int,
    hints: LoopHints,
    block: int,
    deferred: list[DeferredCheck],
    on_readback: Callable[[list[float]], bool] | None = None,
) -> tuple[Any, list[float]] | None:
    """Drive ``runner`` in blocks until the state is done or in trouble.

    After each block ``outputs()`` returns ``(result, scalars)`` for the current state (the final
    plan's pair marginals etc., computed speculatively: a typical solve has one block) and the state,
    the scalars and the ``deferred`` checks' tensors are read back at once. A deferred check raises
    on its value; ``on_readback(values)`` may return False to abandon the solve (None returned).
    Returns ``(result, [done, trouble, iterations, error, converged, *scalars])``, or None on
    trouble.
    """
    position, readbacks = 0, 0
    for size in _block_sizes(hints, block, runner.device_type):
        stop = min(position + size, max_iter + 1)  # position max_iter always stops
        runner.run(position, stop - position)
        position = stop
        result, scalars = outputs()
        values = runner.readback([tensor for tensor, _ in deferred] + scalars)
        readbacks += 1
        for (_, raise_on), value in zip(deferred, values[5:]):
            raise_on(value)
        if on_readback is not None and not on_readback(values):
            return None
        if values[1] > 0:
            return None
        if values[0] > 0:
            hints.positions, hints.readbacks = int(values[2]) + 1, readbacks
            return result, values[:5] + values[5 + len(deferred) :]
    raise AssertionError("unreachable: position max_iter always stops")


def _flag_trouble(flags: Flags, bad: torch.Tensor) -> Flags:
    """``flags`` with numerical trouble also where ``bad`` (0-d bool)."""
    position, done, trouble, *rest = flags
    return (position, done, trouble | bad, *rest)


def _solve_blocks(
    problem: tuple,
    sweeps: tuple[Callable[..., Any], Callable[..., Any]],
    tags: tuple,
    start: tuple[tuple, tuple],
    finish: Callable[..., tuple],
    loop: tuple[int, LoopHints, int, list[DeferredCheck]],
    on_readback: Callable[[list[float]], bool] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, float, int, float, bool] | None:
    """One solve: the ``(first, steady)`` sweeps from ``start = (consts, iterates)`` in blocks (:func:`_run_blocks`
    with ``loop = (max_iter, hints, block, deferred)``), compiled under ``problem`` (ending with the device type) and
    ``tags``. ``finish(consts, iterates)`` gives ``(potentials, pairs, mass, finite, *extra)`` of a state. Returns
    ``(potentials, pairs, mass, sweeps, error, converged)``, or None on trouble or a non-finite result."""
    consts, iterates = start
    runner = _SweepRunner((problem, *tags), *sweeps, consts, iterates)
    finish = compiled((*problem, "outputs"), finish, problem[-1])

    def outputs() -> tuple[tuple[torch.Tensor, torch.Tensor], list[torch.Tensor]]:
        potentials, pairs, *scalars = finish(consts, runner.iterates)
        return (potentials, pairs), scalars

    outcome = _run_blocks(runner, outputs, *loop, on_readback)
    if outcome is None:
        return None
    (potentials, pairs), (_, _, iterations, error, converged, mass, finite, *_) = outcome
    return (potentials, pairs, mass, int(iterations), error, converged > 0) if finite else None


# --------------------------------------------------------------------------- k = 3 closed-form sweep
def _three_view_sweep(consts: tuple, scalings: tuple, flags: Flags, *, check: bool, warm_first: bool) -> tuple:
    """One ``k = 3`` sweep of Alg. 1 (Gauss-Seidel ``u``, ``v``, ``w``), the state frozen once stopped.

    ``Q = K01 * ((K02 w) K12^T)`` (one GEMM) is the pair plan ``P01 / (u v^T)`` of the incoming ``w``: its row /
    column sums are the marginals of views 0 and 1 (stopping rule on the incoming plan) and give the updates of
    ``u`` and then ``v`` (two GEMVs); view 2's marginal needs one more GEMM, ``colsum(K02 * ((u K01 v) K12))``. No
    ``n^3`` array. ``consts``: ``(k01, k02, k12, limits, ...)``; ``scalings``: ``(u, v, w)`` ``(n,)`` each.
    ``check``: the stopping rule runs on the incoming plan (every sweep but a cold start's first); ``warm_first``:
    the first sweep of a warm start (view 2's marginal counts too).
    """
    k01, k02, k12, limits, *_ = consts
    u, v, w = scalings
    target = 1.0 / k01.shape[0]
    live = ~flags[1]
    q = k01 * ((k02 * w) @ k12.T)
    row = q @ v
    stop = None
    if check:  # stopping rule on the incoming plan
        err = (torch.cat([u * row, v * (q.T @ u)]) - target).abs().sum()
        if warm_first:  # warm start: view 2 is not exact yet
            wm = (k01 * u[:, None] * v) @ k12
            err = err + (w * (k02 * wm).sum(0) - target).abs().sum()
        flags, stop = _check_stop(flags, live, err, limits)
    active = live if stop is None else live & ~stop
    u_new = target / row
    col = q.T @ u_new
    v_new = target / col
    last = (k02 * ((k01 * u_new[:, None] * v_new) @ k12)).sum(0)
    w_new = target / last
    flags = _flag_trouble(flags, active & ~_at_least(torch.cat([row, col, last]), limits[2]))
    scalings = (torch.where(active, u_new, u), torch.where(active, v_new, v), torch.where(active, w_new, w))
    return scalings, _advance(flags, active, stop)


def _three_view_outputs(consts: tuple, scalings: tuple) -> tuple[torch.Tensor, ...]:
    """``(potentials (3, n), pairs (3, 3, n, n), mass, finite, span)`` of the plan of ``scalings``."""
    k01, k02, k12, _, const, span = consts
    u, v, w = scalings
    n = k01.shape[0]
    q = k01 * ((k02 * w) @ k12.T)
    wm = (k01 * u[:, None] * v) @ k12
    pairs = torch.zeros(3, 3, n, n, dtype=u.dtype, device=u.device)
    pairs[0, 1] = u[:, None] * q * v
    pairs[0, 2] = k02 * wm * w
    pairs[1, 2] = (v[:, None] * w) * k12 * ((k01 * u[:, None]).T @ k02)
    potentials = torch.stack([u, v, w]).log()
    potentials[0] = potentials[0] - const.to(u.dtype)
    finite = torch.isfinite(pairs.sum()) & torch.isfinite(potentials.sum())
    return potentials, pairs, pairs[0, 1].sum(), finite, span


def _three_view_consts(log_factors: torch.Tensor, offset: float, dtype: torch.dtype, limits: torch.Tensor) -> tuple:
    """``(k01, k02, k12, limits, const, span)``: the kernels ``K = exp(L - max L)`` ``(n, n)`` in ``dtype``, the
    log-kernel's constant ``sum max L - offset`` and the summed log-ranges (0-d, float64 / input dtype)."""
    logs = torch.stack([log_factors[0, 1], log_factors[0, 2], log_factors[1, 2]])  # (3, n, n)
    shifts = logs.amax(dim=(1, 2))
    span = (shifts - logs.amin(dim=(1, 2))).sum()
    logs, shifts = logs.to(dtype), shifts.to(dtype)
    k01, k02, k12 = (logs - shifts[:, None, None]).exp_()
    return k01, k02, k12, limits, shifts.sum().double() - offset, span


def _three_view_dtype(span: float, float32_input: bool) -> torch.dtype | None:
    """The dtype the ``k = 3`` solve needs for kernel log-range ``span`` (None: beyond float64, or NaN)."""
    if float32_input and span <= _THREE_VIEW_SPAN_F32:
        return torch.float32
    return torch.float64 if span <= _THREE_VIEW_SPAN_F64 else None


def _three_view_device(
    log_factors: torch.Tensor,
    offset: float,
    tol: float,
    max_iter: int,
    init: torch.Tensor | None,
    hints: LoopHints,
    block: int,
    deferred: list[DeferredCheck],
) -> MMSinkhornResult | None:
    """Alg. 1 for ``k = 3`` with closed-form sweeps (:func:`_three_view_sweep`) in blocks, or None
    (numerical trouble or a kernel range beyond float64: the general factorized blocks run).

    ``P[i, j, l] = u_i v_j w_l K01[i, j] K02[i, l] K12[j, l]`` with ``K = exp(L - max L)`` ``(n, n)``. The solve runs in float32 for float32 input while the
    kernel's log-range allows (:data:`_THREE_VIEW_SPAN_F32`), else in float64. That choice needs the range: the
    loop runs in the dtype the last solve of the problem needed (float32 for float32 input at first); the range is
    read back with the first block, and a wrong guess re-runs the solve in the right dtype.
    """
    n, device = log_factors.shape[2], log_factors.device
    float32_input = log_factors.dtype == torch.float32
    dtype = torch.float32 if float32_input and not hints.k3_float64 else torch.float64
    tiny = torch.finfo(dtype).tiny * float(n) ** 3 / _REL_UNDERFLOW
    consts = _three_view_consts(log_factors, offset, dtype, _limits(tol, max_iter, tiny, device))
    g = torch.zeros(3, n, dtype=dtype, device=device) if init is None else init.to(dtype, copy=True)
    g[0] += consts[4]
    warm = init is not None
    first = functools.partial(_three_view_sweep, check=warm, warm_first=warm)
    steady = functools.partial(_three_view_sweep, check=True, warm_first=False)
    needed: list[torch.dtype | None] = []

    def on_readback(values: list[float]) -> bool:
        needed.append(_three_view_dtype(values[-1], float32_input))
        return needed[-1] == dtype

    problem = ("k3", n, dtype, device.type)
    solved = _solve_blocks(
        problem,
        (first, steady),
        (warm, None),
        (consts, tuple(g.exp())),
        _three_view_outputs,
        (max_iter, hints, block, deferred),
        on_readback,
    )
    if needed and needed[-1] is not None and needed[-1] != dtype:  # a wrong guess: again in the right dtype
        hints.k3_float64 = needed[-1] == torch.float64
        return _three_view_device(log_factors, offset, tol, max_iter, init, hints, block, [])
    if solved is None:
        return None
    potentials, pairs, *rest = solved
    out = log_factors.dtype
    return MMSinkhornResult(potentials.to(out), pairs.to(out), *rest, "factorized-k3", potentials_finite=True)


# --------------------------------------------------------------------------- factorized sweep (every k)
def _anderson_mix(
    history: tuple[torch.Tensor, ...],
    inputs: torch.Tensor,
    outputs: torch.Tensor,
    error: torch.Tensor,
    active: torch.Tensor,
    regularization: float = 1e-10,
) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
    """Anderson acceleration (type II) of the rest views' potentials: ``(mixed (r, n), use, history)``.

    One sweep is a fixed-point map ``y -> Phi(y)`` of ``y = g[:r]`` (view ``q`` is their exact update);
    the extrapolation is ``Phi(y_t) - sum_i gamma_i (Phi(y_i+1) - Phi(y_i))`` with ``gamma`` the
    regularized least-squares fit of the residual ``Phi(y_t) - y_t`` by the residual differences. Only
    the iterates change, not the stopping rule on the plan. ``history``: a ring of the last ``depth + 1`` outputs / residuals (float64, ``(depth + 1, r n)``
    each), the valid-entry count and the last error (0-d). The restart rule and the non-finite reset
    are selects; the least-squares system is padded to ``depth x depth`` with identity rows for the
    missing history (same solution). ``use`` False: plain sweep. The history changes only where
    ``active``.
    """
    ring_out_old, ring_res_old, count_old, last_error = history
    depth = ring_out_old.shape[0] - 1
    restart = ~(error < last_error)
    count = torch.where(restart, torch.zeros_like(count_old), count_old)
    out = outputs.reshape(-1).double()
    ring_out = torch.cat([ring_out_old[1:], out[None]])
    ring_res = torch.cat([ring_res_old[1:], (out - inputs.reshape(-1).double())[None]])
    count = (count + 1).clamp_max(depth + 1)
    # difference j (rows j, j+1 of the ring) is valid once count >= depth + 1 - j
    valid = count >= torch.arange(depth + 1, 1, -1, device=count.device)  # (depth,)
    d_res = (ring_res[1:] - ring_res[:-1]).T * valid  # (D, depth)
    d_out = (ring_out[1:] - ring_out[:-1]).T * valid
    gram = d_res.T @ d_res
    padded = torch.where(valid, gram.diagonal() + (regularization * gram.diagonal().sum() + 1e-300), 1.0)
    gram = gram * (valid[:, None] & valid[None, :]) + torch.diag_embed(padded - gram.diagonal() * valid)
    gamma = torch.linalg.solve_ex(gram, d_res.T @ ring_res[-1])[0] * valid
    mixed = ring_out[-1] - d_out @ gamma
    enough = count >= 2
    reset = enough & ~torch.isfinite(mixed).all()
    history = (
        torch.where(active, ring_out, ring_out_old),
        torch.where(active, ring_res, ring_res_old),
        torch.where(active, torch.where(reset, torch.zeros_like(count), count), count_old),
        torch.where(active, torch.where(reset, math.inf, error), last_error),
    )
    return mixed.to(outputs.dtype).view_as(outputs), active & enough & ~reset, history


def _factorized_sweep(consts: tuple, state: tuple, flags: Flags, *, check: bool, warm_first: bool, mix: bool) -> tuple:
    """One factorized sweep of Alg. 1 (potentials ``g`` in the log domain), the state frozen once stopped.

    GEMM 1 sums out view ``q``; the rest plan is ``q0 * (x)v * exp(log_scale)`` (``q0`` ``(n,)*r``). In Gauss-Seidel
    order the axes after ``l`` still carry the old scalings when ``l`` is updated, so one right-to-left chain of
    GEMVs (``right[l]`` = ``q0`` contracted with ``v_{l+1}..v_{r-1}``) serves every update; the last rest view and
    the stopping rule (on the incoming plan, :func:`_incoming_error`) share one two-row GEMM over ``q0``. GEMM 2
    gives view ``q``'s marginal (:func:`_last_view_update`). Every exp-domain vector carries its own max shift; an
    underflowing marginal sum (below ``finfo.tiny * n^k / _REL_UNDERFLOW``) flags trouble.

    ``consts``: ``(be, xe, last, absorbed, base, limits)`` (``base = bs - offset``, 0-d float64); ``state``:
    ``(g (k, n), *anderson history)``. ``check`` / ``warm_first``: as :func:`_three_view_sweep`; ``mix``: Anderson
    acceleration (every sweep after the first).
    """
    *tensors, base, limits = consts
    fac = _FactorView(*tensors)
    g, *history = state
    n, r, tiny = fac.n, fac.r, limits[2]
    live = ~flags[1]
    m1_shift, m1, q0 = _sweep_gemm1(fac, g)
    h, h_max, v = _rest_scalings(fac, g, m1_shift)
    log_scale = base + h_max.sum().double()
    v_in, log_scale_in = v.clone(), log_scale
    right = _right_chain(q0.reshape(-1), v)
    new, incoming = g.clone(), []
    ok = _scale_ok(log_scale_in) if check else torch.ones_like(live)  # checks before the stop decision
    for l in range(r - 1):
        partial = _left_vector(v, l) @ right[l].reshape(-1, n)
        incoming.append(_left_vector(v_in, l) @ right[l].reshape(-1, n) if l > 0 else partial)
        ok = ok & _at_least(partial, tiny)
        log_scale = _gauss_seidel(new, (h, h_max, v), l, partial, log_scale)
    # the last rest view: its incoming and updated marginal sums in one two-row GEMM over q0
    last_in, partial = (torch.stack([_left_vector(v_in, r - 1), _left_vector(v, r - 1)]) @ q0).unbind()
    flags = _flag_trouble(flags, live & ~(ok & _at_least(last_in, tiny)))
    stop = err = None
    if check:
        err = _incoming_error(fac, torch.stack([*incoming, last_in]), v_in, log_scale_in, m1 if warm_first else None)
        flags, stop = _check_stop(flags, live, err, limits)
    log_scale = _gauss_seidel(new, (h, h_max, v), r - 1, partial, log_scale)
    active = live if stop is None else live & ~stop
    checks = (active, _at_least(partial, tiny), err, tiny)  # the update's checks count only while active
    new, history, flags = _last_view_update(
        fac, (g, new, tuple(history)), (v, log_scale, base, m1, m1_shift), flags, checks, mix
    )
    return (torch.where(active, new, g), *history), _advance(flags, active, stop)


def _gauss_seidel(
    g: torch.Tensor,
    scalings: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    l: int,
    partial: torch.Tensor,
    log_scale: torch.Tensor,
) -> torch.Tensor:
    """Update of rest view ``l`` from its marginal sum ``partial`` ``(n,)``: ``g[l]`` ``(k, n)`` and the scalings
    ``(h (r, n), h_max (r,), v (r, n))`` in place; returns the new ``log_scale``."""
    h, h_max, v = scalings
    step = -math.log(g.shape[1]) - (h[l] - h_max[l]) - partial.log() - log_scale
    g[l] += step
    h[l] += step
    new_max = h[l].amax()
    log_scale = log_scale + (new_max - h_max[l]).double()
    h_max[l] = new_max
    v[l] = (h[l] - new_max).exp()
    return log_scale


def _incoming_error(
    fac: _FactorView, incoming: torch.Tensor, v_in: torch.Tensor, log_scale_in: torch.Tensor, m1: torch.Tensor | None
) -> torch.Tensor:
    """Stopping-rule error (0-d float64) of the incoming plan from the rest views' marginal sums ``incoming``
    ``(r, n)``; with ``m1`` (a warm start's first check) view ``q``'s marginal counts too."""
    target = 1.0 / fac.n
    err = (_times_exp(incoming * v_in, log_scale_in) - target).abs().sum().double()
    if m1 is not None:
        col = _times_exp(_last_pair(fac, v_in, m1).sum(dim=0), log_scale_in)
        err = err + (col - target).abs().sum().double()
    return err


def _last_view_update(
    fac: _FactorView, iterates: tuple, scaled: tuple, flags: Flags, checks: tuple, mix: bool
) -> tuple:
    """Anderson mixing of the rest views (``mix``) and view ``q``'s exact update (GEMM 2) of ``new`` (in place).

    ``iterates = (g, new, history)``, ``scaled = (v, log_scale, base, m1, m1_shift)`` of ``new``'s rest views,
    ``checks = (active, ok, err, tiny)``. Returns ``(new, history, flags)``.
    """
    g, new, history = iterates
    v, log_scale, base, m1, m1_shift = scaled
    active, ok, err, tiny = checks
    r, q = fac.r, fac.q
    if mix:  # Anderson on the rest views (g[q] is view q's exact update of g[:r])
        mixed, use, history = _anderson_mix(history, g[:r], new[:r], err, active)
        new[:r] = torch.where(use, mixed, new[:r])
        _, h_max_mix, v_mix = _rest_scalings(fac, new, m1_shift)
        v = torch.where(use, v_mix, v)
        log_scale = torch.where(use, base + h_max_mix.sum().double(), log_scale)
    col = _last_pair(fac, v, m1).sum(dim=0)
    new[q] += -math.log(fac.n) - col.log() - log_scale
    return new, history, _flag_trouble(flags, active & ~(ok & _at_least(col, tiny)))


def _factorized_outputs(consts: tuple, state: tuple) -> tuple[torch.Tensor, ...]:
    """``(potentials (k, n), pairs (k, k, n, n), mass, finite)`` of the plan of ``state[0]`` (the potentials)."""
    *tensors, base, _ = consts
    fac = _FactorView(*tensors)
    g = state[0]
    m1_shift, m1, q0 = _sweep_gemm1(fac, g)
    _, h_max, v = _rest_scalings(fac, g, m1_shift)
    log_scale = base + h_max.sum().double()
    pairs = _pairwise_marginals(fac, q0, v, m1, log_scale)
    finite = _scale_ok(log_scale) & torch.isfinite(pairs).all() & torch.isfinite(g).all()
    return g, pairs, pairs[0, 1].sum(), finite


def _pairwise_device(
    log_factors: torch.Tensor,
    offset: float,
    tol: float,
    max_iter: int,
    init: torch.Tensor | None,
    anderson: int,
    hints: LoopHints,
    block: int,
    deferred: list[DeferredCheck],
) -> MMSinkhornResult | None:
    """The factorized sweeps (:func:`_factorized_sweep`) from ``init`` (zeros if None) in blocks, in
    ``log_factors``' dtype, or None on numerical trouble (an underflowing marginal, a non-finite value)."""
    k, n = log_factors.shape[0], log_factors.shape[2]
    dtype, device = log_factors.dtype, log_factors.device
    tiny = torch.finfo(dtype).tiny * float(n) ** k / _REL_UNDERFLOW
    g = torch.zeros(k, n, dtype=dtype, device=device)
    if init is not None:
        g.copy_(init)
    fac, bs = _pairwise_factors(log_factors, g)
    consts = (fac.be, fac.xe, fac.last, fac.absorbed, bs - offset, _limits(tol, max_iter, tiny, device))
    history: tuple[torch.Tensor, ...] = ()
    if anderson > 0:
        rings = torch.zeros(2, anderson + 1, (k - 1) * n, dtype=torch.float64, device=device)
        count = torch.zeros((), dtype=torch.int64, device=device)
        history = (rings[0], rings[1], count, torch.full((), math.inf, dtype=torch.float64, device=device))
    warm = init is not None
    first = functools.partial(_factorized_sweep, check=warm, warm_first=warm, mix=False)
    steady = functools.partial(_factorized_sweep, check=True, warm_first=False, mix=anderson > 0)
    problem = ("pairwise", k, n, dtype, device.type)
    loop = (max_iter, hints, block, deferred)
    solved = _solve_blocks(
        problem, (first, steady), (warm, anderson), (consts, (g, *history)), _factorized_outputs, loop
    )
    return None if solved is None else MMSinkhornResult(*solved, "factorized", potentials_finite=True)


# --------------------------------------------------------------------------- the solver
def mm_sinkhorn_pairwise(
    log_factors: torch.Tensor,
    offset: float,
    tol: float,
    max_iter: int,
    *,
    init: torch.Tensor | None = None,
    chunk_elems: int = 1 << 24,
    anderson: int = 0,
    hints: LoopHints | None = None,
    block: int = 0,
    deferred: list[DeferredCheck] | None = None,
) -> MMSinkhornResult:
    """Alg. 1 for ``A[i_1..i_k] = sum_{l<m} log_factors[l, m][i_l, i_m] - offset``, in sweep blocks.

    ``log_factors``: ``(k, k, n, n)``, only ``l < m`` entries are read. ``init``: starting log-potentials ``(k, n)``
    (warm start; zeros by default). With ``init`` the stopping rule is also checked before the first sweep (a plan
    that already meets ``tol`` costs 0 sweeps). ``anderson``: Anderson depth of the factorized sweeps (``k = 3``
    runs its closed-form sweeps plain). ``hints`` carries the block size between calls of one problem
    (:class:`LoopHints`); ``block`` > 0 fixes the first block. ``deferred``: 0-d tensors read back with the first
    block, each with the function that raises on a bad value (a caller's input checks without a read of their
    own). Nothing else is read by Python: one host read per block.

    Escalation (reported in ``path``): ``k = 3`` runs the closed-form blocks (``"factorized-k3"``); on trouble,
    and for ``k != 3``, the factorized blocks in the input dtype (``"factorized"``); a float32 solve in trouble
    re-runs them in float64 (``"factorized->float64"``, exponent range e^+-709 instead of e^+-87, e.g. at tiny
    epsilon); if that fails too, the exact dense log-domain solver (``"...->dense"``, memory ``n^k``).
    """
    k = log_factors.shape[0]
    checks = _init_checks(init, k, log_factors.shape[2], deferred)
    hints = hints if hints is not None else LoopHints()
    if k == 3:
        result = _three_view_device(log_factors, offset, tol, max_iter, init, hints, block, checks)
        if result is not None:
            return result
        checks = []  # read back (and passed) with the first block
    result = _pairwise_device(log_factors, offset, tol, max_iter, init, anderson, hints, block, checks)
    if result is not None:
        return result
    return _escalate(log_factors, offset, (tol, max_iter, hints, block), init, anderson, chunk_elems)


def _init_checks(
    init: torch.Tensor | None, k: int, n: int, deferred: list[DeferredCheck] | None
) -> list[DeferredCheck]:
    """The caller's deferred checks plus the warm start's: its shape ``(k, n)`` checked now, its finiteness read
    back with the first block; one ``ValueError`` naming both."""

    def raise_on_bad_init(finite: float | bool) -> None:
        if init is not None and (tuple(init.shape) != (k, n) or not finite):
            raise ValueError(f"mm_sinkhorn_pairwise: init must be finite of shape {(k, n)}, got {tuple(init.shape)}")

    raise_on_bad_init(True)  # the shape
    checks = list(deferred or [])
    if init is not None:
        checks.append((torch.isfinite(init).all(), raise_on_bad_init))
    return checks


def _escalate(
    log_factors: torch.Tensor, offset: float, loop: tuple, init: torch.Tensor | None, anderson: int, chunk_elems: int
) -> MMSinkhornResult:
    """After the blocks' trouble: a float32 solve re-runs them in float64, then the dense exact solver
    (``loop = (tol, max_iter, hints, block)``)."""
    tol, max_iter, hints, block = loop
    path = "factorized->dense"
    if log_factors.dtype != torch.float64:  # the float64 retry: the same blocks in float64
        init64 = None if init is None else init.double()
        result = _pairwise_device(log_factors.double(), offset, tol, max_iter, init64, anderson, hints, block, [])
        if result is not None:
            result.log_potentials = result.log_potentials.to(log_factors.dtype)
            result.pair_marginals = result.pair_marginals.to(log_factors.dtype)
            result.path = "factorized->float64"
            return result
        path = "factorized->float64->dense"
    k, n = log_factors.shape[0], log_factors.shape[2]
    start = torch.zeros(k, n, dtype=log_factors.dtype, device=log_factors.device) if init is None else init
    result = mm_sinkhorn_dense(
        pairwise_sum_tensor(log_factors, offset), tol, max_iter, init=start, chunk_elems=chunk_elems
    )
    result.path = path
    return result
