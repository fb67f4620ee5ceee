"""numba kernels of the fused ``k > 3`` factorized MM-Sinkhorn (imported only by :mod:`.sinkhorn_fast`).

This module imports numba at import time; :func:`.sinkhorn_fast.kernels` imports it lazily, so the
package runs without numba. Every function is compiled on first use (per input dtype) and cached on
disk. Plain loops only (no array expressions): short compile times.

Layout (as :class:`.sinkhorn._PairwiseFactors`): ``r = k - 1`` rest views, view ``q = k - 1`` summed
out; a row ``I' = (i_0, .., i_{r-2})`` (row-major, ``i_0`` most significant) of ``R = n^(r-1)`` rows;
``xe`` / ``be`` / ``q0`` ``(R, n)`` in the solve's dtype (float32 or float64). Sums over rows are
accumulated in float64.
"""

from __future__ import annotations

import math

import numba
import numpy as np

# reassociation / FMA contraction only (no finite-math assumptions: NaN / inf propagate as in torch)
_jit = numba.njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract"})


@_jit
def _row_digits(row: int, n: int, digits: np.ndarray) -> None:
    """``digits``: the base-``n`` digits of ``row`` (most significant first), i.e. ``(i_0, .., i_{r-2})``."""
    for pos in range(digits.shape[0] - 1, -1, -1):
        digits[pos] = row % n
        row //= n


# product form of :func:`absorb` while the summed log-ranges of a factor's terms stay below this (every
# product >= e^-600, inside float64's normal range; else one exp per entry, as the general path)
_PRODUCT_SPAN = 600.0


@_jit
def absorb(log_factors: np.ndarray, absorbed: np.ndarray, xe: np.ndarray, be: np.ndarray) -> float:
    """Fill the exp-domain factors ``xe`` / ``be`` ``(R, n)`` with the potentials ``absorbed`` ``(k, n)``
    folded in; returns the global shift ``bs`` of ``be`` (float64 arithmetic).

    ``xe[I', i_q] = exp(sum_{l<r-1} L_lq[i_l, i_q] + a_q[i_q] - xs[I'])`` (row max ``xs``);
    ``be[I', j] = exp(sum_{l<m<q} L_lm[i_l, i_m] + sum_{l<r} a_l[i_l] + xs[I'] - bs)``, ``j = i_{r-1}``.
    The exponentials of the row-varying sums are products of per-digit tables ``exp(L - max L)`` (two
    transcendental calls per row instead of ``2 n``) when their log-ranges allow (``_PRODUCT_SPAN``).
    """
    k, n = absorbed.shape
    r = k - 1
    q = k - 1
    rows = xe.shape[0]
    # tables[0]: terms of xe (l < r-1: L_lq; last: a_q); tables[1]: the j-terms of be (L_{l,r-1}; a_{r-1})
    tables = np.zeros((2, r, n, n))
    shifts = np.zeros(2)
    span = 0.0
    for side in range(2):
        col = q if side == 0 else r - 1
        side_span = 0.0
        for l in range(r):
            count = n if l < r - 1 else 1  # the potentials' term is one vector (row 0)
            top, low = -np.inf, np.inf
            for d in range(count):
                for i in range(n):
                    val = log_factors[l, col, d, i] if l < r - 1 else absorbed[col, i]
                    top = max(top, val)
                    low = min(low, val)
            side_span += top - low
            shifts[side] += top
            for d in range(count):
                for i in range(n):
                    val = log_factors[l, col, d, i] if l < r - 1 else absorbed[col, i]
                    tables[side, l, d, i] = math.exp(val - top)
        span = max(span, side_span)
    if not span < _PRODUCT_SPAN:
        return _absorb_exp(log_factors, absorbed, xe, be)
    digits = np.zeros(r - 1, dtype=np.int64)
    prod = np.empty(n)
    bases = np.empty(rows)  # log of be's row factor (before the global shift)
    bs = -np.inf
    for row in range(rows):
        _row_digits(row, n, digits)
        for side in range(2):
            for i in range(n):
                prod[i] = tables[side, r - 1, 0, i]
            for l in range(r - 1):
                for i in range(n):
                    prod[i] *= tables[side, l, digits[l], i]
            top = 0.0
            for i in range(n):
                top = max(top, prod[i])
            if side == 0:
                inv = 1.0 / top
                for i in range(n):
                    xe[row, i] = prod[i] * inv
                base = math.log(top) + shifts[0]  # xs[I']
                for l in range(r - 1):
                    base += absorbed[l, digits[l]]
                    for m in range(l + 1, r - 1):
                        base += log_factors[l, m, digits[l], digits[m]]
                bases[row] = base + shifts[1]
            else:
                bs = max(bs, bases[row] + math.log(top))
    for row in range(rows):
        _row_digits(row, n, digits)
        scale = math.exp(bases[row] - bs)
        for j in range(n):
            prod[j] = tables[1, r - 1, 0, j] * scale
        for l in range(r - 1):
            for j in range(n):
                prod[j] *= tables[1, l, digits[l], j]
        for j in range(n):
            be[row, j] = prod[j]
    return bs


@_jit
def _absorb_exp(log_factors: np.ndarray, absorbed: np.ndarray, xe: np.ndarray, be: np.ndarray) -> float:
    """:func:`absorb` with one exponential per entry (any log-range)."""
    k, n = absorbed.shape
    r = k - 1
    q = k - 1
    rows = xe.shape[0]
    digits = np.zeros(r - 1, dtype=np.int64)
    logs = np.empty(n)
    shifts = np.empty(rows)
    bs = -np.inf
    for row in range(rows):
        _row_digits(row, n, digits)
        shift = -np.inf
        for iq in range(n):
            total = absorbed[q, iq]
            for l in range(r - 1):
                total += log_factors[l, q, digits[l], iq]
            logs[iq] = total
            shift = max(shift, total)
        for iq in range(n):
            xe[row, iq] = math.exp(logs[iq] - shift)
        base = shift
        for l in range(r - 1):
            base += absorbed[l, digits[l]]
            for m in range(l + 1, r - 1):
                base += log_factors[l, m, digits[l], digits[m]]
        shifts[row] = base
        for j in range(n):
            total = base + absorbed[r - 1, j]
            for l in range(r - 1):
                total += log_factors[l, r - 1, digits[l], j]
            bs = max(bs, total)
    # second pass: be = exp(log_b - bs) (log_b recomputed: no (R, n) float64 temporary)
    for row in range(rows):
        _row_digits(row, n, digits)
        base = shifts[row] - bs
        for j in range(n):
            total = base + absorbed[r - 1, j]
            for l in range(r - 1):
                total += log_factors[l, r - 1, digits[l], j]
            be[row, j] = math.exp(total)
    return bs


@_jit
def _four_rows_times(a: np.ndarray, row: int, b: np.ndarray, out: np.ndarray) -> None:
    """``out[c, :] = a[row + c, :] @ b`` for ``c < 4`` (``b`` ``(n, n)``, ``out`` ``(4, n)``, the factors' dtype)."""
    n = b.shape[1]
    for c in range(4):
        for j in range(n):
            out[c, j] = 0.0
    for i in range(b.shape[0]):
        x0 = a[row, i]
        x1 = a[row + 1, i]
        x2 = a[row + 2, i]
        x3 = a[row + 3, i]
        for j in range(n):
            m = b[i, j]
            out[0, j] += x0 * m
            out[1, j] += x1 * m
            out[2, j] += x2 * m
            out[3, j] += x3 * m


@_jit
def rest_plan(
    xe: np.ndarray, be: np.ndarray, m1: np.ndarray, v_last: np.ndarray, q0: np.ndarray, right: np.ndarray
) -> None:
    """GEMM 1: ``q0[I', j] = be[I', j] sum_iq xe[I', iq] m1[iq, j]`` ``(R, n)`` (in the factors' dtype,
    as the general path's GEMM) and the first link of the right chain, ``right[I'] = sum_j q0[I', j]
    v_last[j]`` ``(R,)`` (float64). Four rows at a time."""
    rows, n = xe.shape
    acc = np.zeros((4, n), dtype=xe.dtype)
    full = rows - rows % 4
    for row in range(0, full, 4):
        _four_rows_times(xe, row, m1, acc)
        for a in range(4):
            total = 0.0
            for j in range(n):
                val = be[row + a, j] * acc[a, j]
                q0[row + a, j] = val
                total += np.float64(q0[row + a, j]) * v_last[j]
            right[row + a] = total
    for row in range(full, rows):
        total = 0.0
        for j in range(n):
            s = acc[0, 0] * 0.0  # the factors' dtype
            for iq in range(n):
                s += xe[row, iq] * m1[iq, j]
            q0[row, j] = be[row, j] * s
            total += np.float64(q0[row, j]) * v_last[j]
        right[row] = total


@_jit
def last_column(xe: np.ndarray, be: np.ndarray, left: np.ndarray, coupling: np.ndarray, out: np.ndarray) -> None:
    """GEMM 2, view ``q``'s marginal: ``out[iq] = sum_{I'} left[I'] xe[I', iq] sum_j be[I', j] coupling[j, iq]``
    (``coupling[j, iq] = v_{r-1}[j] M1[iq, j]``); the inner sums over ``j`` in the factors' dtype, the
    sum over rows in float64. Four rows at a time."""
    rows, n = xe.shape
    t = np.zeros((4, n), dtype=xe.dtype)
    acc = np.zeros(n, dtype=np.float64)
    full = rows - rows % 4
    for row in range(0, full, 4):
        _four_rows_times(be, row, coupling, t)
        for a in range(4):
            w = np.float64(left[row + a])
            for iq in range(n):
                acc[iq] += w * xe[row + a, iq] * t[a, iq]
    for row in range(full, rows):
        w = np.float64(left[row])
        for iq in range(n):
            s = t[0, 0] * 0.0  # the factors' dtype
            for j in range(n):
                s += be[row, j] * coupling[j, iq]
            acc[iq] += w * xe[row, iq] * s
    for iq in range(n):
        out[iq] = acc[iq]


@_jit
def pair_sums(
    xe: np.ndarray,
    be: np.ndarray,
    q0: np.ndarray,
    left: np.ndarray,
    v_last: np.ndarray,
    m1_t: np.ndarray,
    pairs: np.ndarray,
) -> None:
    """Pair marginals ``pairs[l, m]`` ``(n, n)``, ``l < m`` (float64, zeros elsewhere), of the plan with
    rest scalings ``left[I'] v_last[j]``, up to the factor ``exp(log_scale)``:

    * ``l < m <= r-1`` from the rest plan ``q0[I', j] left[I'] v_last[j]`` (view ``q`` summed out);
    * ``(l, q)``, ``l < r-1``: from ``xe[I', iq] sum_j qn[I', j] M1[iq, j]``, ``qn = be left v_last``;
    * ``(r-1, q)``: ``sum_I' qn[I', j] xe[I', iq] M1[iq, j]``.

    ``m1_t`` ``(n_j, n_q)`` is ``M1`` transposed.
    """
    k = pairs.shape[0]
    r = k - 1
    q = k - 1
    rows, n = xe.shape
    digits = np.zeros(r - 1, dtype=np.int64)
    qn = np.empty(n)
    rest = np.empty(n)
    t = np.empty(n)
    for a in range(k):
        for b in range(k):
            for i in range(n):
                for j in range(n):
                    pairs[a, b, i, j] = 0.0
    for row in range(rows):
        _row_digits(row, n, digits)
        w = np.float64(left[row])
        row_sum = 0.0
        for j in range(n):
            rest[j] = np.float64(q0[row, j]) * w * v_last[j]
            row_sum += rest[j]
            qn[j] = np.float64(be[row, j]) * w * v_last[j]
        for l in range(r - 1):
            for j in range(n):
                pairs[l, r - 1, digits[l], j] += rest[j]
            for m in range(l + 1, r - 1):
                pairs[l, m, digits[l], digits[m]] += row_sum
        for iq in range(n):
            t[iq] = 0.0
        for j in range(n):
            b = qn[j]
            for iq in range(n):
                x = np.float64(xe[row, iq])
                t[iq] += b * m1_t[j, iq]
                pairs[r - 1, q, j, iq] += b * x
        for iq in range(n):
            t[iq] *= xe[row, iq]
        for l in range(r - 1):
            for iq in range(n):
                pairs[l, q, digits[l], iq] += t[iq]
    for j in range(n):
        for iq in range(n):
            pairs[r - 1, q, j, iq] *= m1_t[j, iq]


@_jit
def left_vector(v: np.ndarray, count: int, out: np.ndarray) -> None:
    """``out[:n^count] = prod_{a<count} v[a][i_a]`` (row-major; ``[1.]`` when ``count == 0``)."""
    n = v.shape[1]
    out[0] = 1.0
    size = 1
    for a in range(count):
        for pos in range(size - 1, -1, -1):  # in place, back to front
            head = out[pos]
            for i in range(n - 1, -1, -1):
                out[pos * n + i] = head * v[a, i]
        size *= n


@_jit
def last_column_of(
    xe: np.ndarray,
    be: np.ndarray,
    v: np.ndarray,
    m1: np.ndarray,
    left: np.ndarray,
    coupling: np.ndarray,
    out: np.ndarray,
) -> None:
    """:func:`last_column` for rest scalings ``v`` ``(r, n)`` (float64) and ``M1`` ``(n_q, n_j)``:
    ``left`` ``(R,)`` float64 and ``coupling`` ``(n, n)`` (factors' dtype) are work buffers."""
    r, n = v.shape
    left_vector(v, r - 1, left)
    for j in range(n):
        for iq in range(n):
            coupling[j, iq] = v[r - 1, j] * m1[iq, j]
    last_column(xe, be, left, coupling, out)


@_jit
def sweep_rest(
    xe: np.ndarray,
    be: np.ndarray,
    q0: np.ndarray,
    m1: np.ndarray,
    m1_shift: np.ndarray,
    g: np.ndarray,
    absorbed: np.ndarray,
    bs: float,
    offset: float,
    iterations: int,
    check_first: bool,
    tol: float,
    max_iter: int,
    tiny: float,
    h: np.ndarray,
    h_max: np.ndarray,
    v: np.ndarray,
    v_in: np.ndarray,
    right: np.ndarray,
    left: np.ndarray,
    left_in: np.ndarray,
    coupling: np.ndarray,
    col: np.ndarray,
    scalars: np.ndarray,
) -> int:
    """The rest views' part of a sweep of :func:`.sinkhorn._pairwise_sweep` (host loop), compiled.

    From potentials ``g`` ``(k, n)`` (float64, rest views updated in place) and ``M1`` / ``m1_shift`` of
    view ``q``: rest scalings ``h, h_max, v``; GEMM 1 (``q0``) and the right chain; the Gauss-Seidel
    updates of views ``0..r-1``; before view ``r-1``'s update the stopping rule on the incoming plan
    (``iterations > 0`` or ``check_first``; on a warm start's first check view ``q``'s marginal too).
    ``scalars`` receives ``[error, converged, log_scale, log_scale_in]``. Returns 0 (updated: the
    caller mixes and updates view ``q``), 1 (finished: ``g`` unchanged, the incoming plan is the
    output, ``v_in`` its scalings) or 2 (underflow / non-finite: the caller's numerical trouble).
    """
    k, n = g.shape
    r = k - 1
    rows = xe.shape[0]
    log_n = math.log(n)
    target = 1.0 / n
    for l in range(r):
        top = -np.inf
        for i in range(n):
            val = g[l, i] - absorbed[l, i]
            if l == r - 1:
                val += m1_shift[i]
            h[l, i] = val
            top = max(top, val)
        h_max[l] = top
        for i in range(n):
            v[l, i] = math.exp(h[l, i] - top)
            v_in[l, i] = v[l, i]
    log_scale = bs - offset
    for l in range(r):
        log_scale += h_max[l]
    log_scale_in = log_scale
    scalars[0] = np.inf
    scalars[1] = 0.0
    # right chain: right[l] (n^(l+1) entries at offset sum_{a<l} n^(a+1)) = q0 contracted on the axes after l
    start = 0
    size = n
    for _ in range(r - 2):
        start += size
        size *= n
    rest_plan(xe, be, m1, v[r - 1], q0, right[start : start + rows])
    for a in range(r - 2, 0, -1):  # right[a-1] = right[a] @ v[a]
        src = start
        start -= n**a
        for p in range(n**a):
            acc = 0.0
            for i in range(n):
                acc += right[src + p * n + i] * v[a, i]
            right[start + p] = acc
    incoming = np.empty((r, n))
    partial = np.empty(n)
    base = 0
    error = np.inf
    converged = False
    for l in range(r):
        if l < r - 1:
            left_vector(v, l, left)
            for i in range(n):
                acc = 0.0
                for p in range(n**l):
                    acc += left[p] * right[base + p * n + i]
                partial[i] = acc
            if l > 0:
                left_vector(v_in, l, left_in)
                for i in range(n):
                    acc = 0.0
                    for p in range(n**l):
                        acc += left_in[p] * right[base + p * n + i]
                    incoming[l, i] = acc
            else:
                for i in range(n):
                    incoming[0, i] = partial[i]
            base += n ** (l + 1)
        else:  # incoming and updated plan in one pass over q0
            left_vector(v_in, l, left_in)
            left_vector(v, l, left)
            inc = np.zeros(n)
            for i in range(n):
                partial[i] = 0.0
            for row in range(rows):
                w_in, w_new = left_in[row], left[row]
                for j in range(n):
                    inc[j] += w_in * q0[row, j]
                    partial[j] += w_new * q0[row, j]
            for j in range(n):
                incoming[l, j] = inc[j]
                if not inc[j] >= tiny:  # underflow or NaN
                    return 2
            if iterations > 0 or check_first:
                if not abs(log_scale_in) < 700.0:
                    return 2
                scale_in = math.exp(log_scale_in)
                err = 0.0
                for a in range(r):
                    for i in range(n):
                        err += abs(incoming[a, i] * v_in[a, i] * scale_in - target)
                if iterations == 0:  # warm start: view q's marginal is not exact yet
                    last_column_of(xe, be, v_in, m1, left_in, coupling, col)
                    for i in range(n):
                        err += abs(col[i] * scale_in - target)
                error = err
                if not np.isfinite(error):
                    return 2
                converged = error < tol
            if converged or iterations >= max_iter:
                scalars[0] = error
                scalars[1] = 1.0 if converged else 0.0
                scalars[2] = log_scale
                scalars[3] = log_scale_in
                return 1
        for i in range(n):
            if not partial[i] >= tiny:
                return 2
        top = -np.inf
        for i in range(n):
            step = -log_n - (h[l, i] - h_max[l]) - math.log(partial[i]) - log_scale
            g[l, i] += step
            h[l, i] += step
            top = max(top, h[l, i])
        log_scale += top - h_max[l]
        h_max[l] = top
        for i in range(n):
            v[l, i] = math.exp(h[l, i] - top)
    scalars[0] = error
    scalars[1] = 1.0 if converged else 0.0
    scalars[2] = log_scale
    scalars[3] = log_scale_in
    return 0
