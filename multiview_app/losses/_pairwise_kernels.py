"""numba kernels of the CPU backend of M3G (imported lazily by :func:`.sinkhorn_fast.kernels`).

This module imports numba at import time; the package runs without numba. Every function is compiled on first use
(per input dtype) and cached on disk. Plain loops only (no array expressions): short compile times.

* ``k = 3`` (:mod:`.m3g_fast`): :func:`fused_forward` (normalization, Gram blocks and the closed-form sweeps of
  :func:`.sinkhorn._three_view_sweep` in float64) and :func:`fused_backward` (Danskin gradient through the
  normalization).
* ``k > 3`` (:mod:`.sinkhorn_fast`), laid out as :class:`.sinkhorn._FactorView`: ``r = k - 1`` rest views,
  view ``q = k - 1`` summed out; a row ``I' = (i_0, .., i_{r-2})`` (row-major, ``i_0`` most significant) of
  ``R = n^(r-1)`` rows; ``xe`` / ``be`` / ``q0`` ``(R, n)`` in the solve's dtype. Sums over rows in float64.
"""

from __future__ import annotations

import math

import numba
import numpy as np

# reassociation / FMA contraction only (no finite-math assumptions: NaN / inf propagate as in torch)
_jit = numba.njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract"})
# helpers of the row loops, inlined into their callers (as separate calls they cost absorb ~1.6x: 16 x 6)
_jit_inline = numba.njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract"}, inline="always")
# the k = 3 kernels: strict IEEE order; the helpers of the sweep loop inlined into it
_jit_k3 = numba.njit(cache=True, nogil=True)
_jit_k3_inline = numba.njit(cache=True, nogil=True, inline="always")

# status of :func:`fused_forward`
OK, NOT_FINITE, SPAN, UNDERFLOW = 0, 1, 2, 3
# outcome of :func:`sweep_rest`
UPDATED, FINISHED, TROUBLE = 0, 1, 2
# product form of :func:`absorb` while the summed log-ranges of a factor's terms stay below this (every
# product >= e^-600, inside float64's normal range; else one exp per entry)
_PRODUCT_SPAN = 600.0


# --------------------------------------------------------------------------- k = 3, fused
@_jit_k3
def _normalize_views(x: np.ndarray, eps_norm: float, z: np.ndarray, norms: np.ndarray) -> bool:
    """``z[l, i] = x[i, l] / max(||x[i, l]||, eps_norm)`` ``(3, n, d)``, ``norms`` ``(3, n)``; False on a
    non-finite norm."""
    n, _, d = x.shape
    for l in range(3):
        for i in range(n):
            acc = 0.0
            for c in range(d):
                val = np.float64(x[i, l, c])
                acc += val * val
            if not np.isfinite(acc):
                return False
            norm = math.sqrt(acc)
            norms[l, i] = norm
            inv = 1.0 / max(norm, eps_norm)
            for c in range(d):
                z[l, i, c] = x[i, l, c] * inv
    return True


@_jit_k3
def _exp_kernels(z: np.ndarray, coef: float, const: float, kernels: np.ndarray) -> tuple[float, float, float]:
    """Max-shifted kernels ``exp(coef G_lm - max)`` ``(3, n, n)`` of the pairs ``01, 02, 12``; returns ``const``
    plus the three maxima, the summed log-ranges and ``sum_i sum_{l<m} G_lm[i, i]``."""
    n = z.shape[1]
    blocks = ((0, 1), (0, 2), (1, 2))
    span, pair_diag = 0.0, 0.0
    for b in range(3):
        l, m = blocks[b]
        gram = np.dot(z[l], z[m].T)  # G_lm (n, n), input dtype
        hi, lo = -np.inf, np.inf
        for i in range(n):
            pair_diag += np.float64(gram[i, i])
            for j in range(n):
                val = coef * np.float64(gram[i, j])
                kernels[b, i, j] = val
                hi = max(hi, val)
                lo = min(lo, val)
        span += hi - lo
        const += hi
        for i in range(n):
            for j in range(n):
                kernels[b, i, j] = math.exp(kernels[b, i, j] - hi)
    return const, span, pair_diag


@_jit_k3_inline
def _k3_error(kernels: np.ndarray, q: np.ndarray, row: np.ndarray, uvw: tuple, warm_first: bool, work: tuple) -> float:
    """Stopping-rule error of the incoming plan; on a warm start's first check view 2's marginal too (``work =
    (a, wm)`` ``(n, n)`` buffers; ``wm`` then receives ``(K01 * u v^T) K12``)."""
    k01, k02, k12 = kernels[0], kernels[1], kernels[2]
    u, v, w = uvw
    a, wm = work
    n = u.shape[0]
    target = 1.0 / n
    col_in = np.dot(q.T, u)
    err = 0.0
    for i in range(n):
        err += abs(u[i] * row[i] - target) + abs(v[i] * col_in[i] - target)
    if warm_first:  # view 2 is not exact yet
        wm[:, :] = np.dot(_scaled(k01, u, v, a), k12)
        for j in range(n):
            acc = 0.0
            for i in range(n):
                acc += k02[i, j] * wm[i, j]
            err += abs(w[j] * acc - target)
    return err


@_jit_k3_inline
def _scaled(k01: np.ndarray, u: np.ndarray, v: np.ndarray, a: np.ndarray) -> np.ndarray:
    """``a = K01 * u v^T`` ``(n, n)``."""
    n = u.shape[0]
    for i in range(n):
        for j in range(n):
            a[i, j] = k01[i, j] * u[i] * v[j]
    return a


@_jit_k3_inline
def _k3_update(kernels: np.ndarray, q: np.ndarray, row: np.ndarray, uvw: tuple, a: np.ndarray) -> tuple:
    """Gauss-Seidel updates of ``uvw = (u, v, w)`` (in place; ``a`` an ``(n, n)`` buffer); returns the smallest
    marginal sum and ``wm = (K01 * u v^T) K12`` of the new ``u, v``."""
    k01, k02, k12 = kernels[0], kernels[1], kernels[2]
    u, v, w = uvw
    n = u.shape[0]
    target = 1.0 / n
    smallest = np.inf
    for i in range(n):
        smallest = min(smallest, row[i])
        u[i] = target / row[i]
    col = np.dot(q.T, u)
    for j in range(n):
        smallest = min(smallest, col[j])
        v[j] = target / col[j]
    wm = np.dot(_scaled(k01, u, v, a), k12)  # (n_i, n_l): u_i sum_j K01 v_j K12[j, l]
    for j in range(n):
        acc = 0.0
        for i in range(n):
            acc += k02[i, j] * wm[i, j]
        smallest = min(smallest, acc)
        w[j] = target / acc
    return smallest, wm


@_jit_k3
def _k3_sweeps(kernels: np.ndarray, uvw: tuple, tol: float, max_iter: int, warm: bool, tiny: float) -> tuple:
    """The ``k = 3`` sweeps on the scalings ``uvw = (u, v, w)`` (in place) until the stopping rule or ``max_iter``.
    Returns ``(status, sweeps, error, converged, Q, wm)``: ``Q = K01 * ((K02 w) K12^T)`` and ``wm`` of the
    final scalings."""
    k01, k02, k12 = kernels[0], kernels[1], kernels[2]
    u, v, w = uvw
    n = w.shape[0]
    k12_t = np.ascontiguousarray(k12.T)
    k02w = np.empty((n, n))
    a = np.empty((n, n))
    wm = np.zeros((n, n))
    iterations, error, converged = 0, np.inf, False
    while True:
        for i in range(n):  # Q = K01 * ((K02 w) K12^T): P01 / (u v^T) for the current w
            for j in range(n):
                k02w[i, j] = k02[i, j] * w[j]
        q = np.dot(k02w, k12_t)
        for i in range(n):
            for j in range(n):
                q[i, j] *= k01[i, j]
        row = np.dot(q, v)
        if iterations > 0 or warm:  # stopping rule on the incoming plan
            error = _k3_error(kernels, q, row, uvw, iterations == 0, (a, wm))
            if not np.isfinite(error):
                return UNDERFLOW, iterations, error, False, q, wm
            converged = error < tol
            if converged or iterations >= max_iter:
                return OK, iterations, error, converged, q, wm
        smallest, wm = _k3_update(kernels, q, row, uvw, a)
        if not smallest >= tiny:  # underflow or NaN
            return UNDERFLOW, iterations, error, False, q, wm
        iterations += 1


@_jit_k3
def _k3_pairs(kernels: np.ndarray, uvw: tuple, q: np.ndarray, wm: np.ndarray, pairs: np.ndarray) -> None:
    """Pair marginals ``pairs[l, m]`` ``(n, n)``, ``l < m``, of the plan of the scalings ``uvw = (u, v, w)``."""
    k01, k02, k12 = kernels[0], kernels[1], kernels[2]
    u, v, w = uvw
    n = u.shape[0]
    a = np.empty((n, n))
    for i in range(n):
        for j in range(n):
            pairs[0, 1, i, j] = u[i] * q[i, j] * v[j]
            pairs[0, 2, i, j] = k02[i, j] * wm[i, j] * w[j]
            a[i, j] = k01[i, j] * u[i]
    t = np.dot(a.T, k02)  # (n_j, n_l)
    for j in range(n):
        for l in range(n):
            pairs[1, 2, j, l] = v[j] * w[l] * k12[j, l] * t[j, l]


@_jit_k3
def fused_forward(x: np.ndarray, eps_norm: float, coef: float, offset: float, solver: tuple, init: np.ndarray) -> tuple:
    """Normalization, Gram blocks and the k = 3 sweeps for raw embeddings ``x`` ``(n, 3, d)``.

    ``coef = 2 s / epsilon``, ``offset = 6 s / epsilon`` (log-kernel ``A = coef sum_{l<m} G_lm - offset``);
    ``solver = (tol, max_iter, warm, span_max, rel_underflow)``; ``init`` ``(3, n)`` float64 starting
    log-potentials (read when ``warm``). Returns ``(status, z (3, n, d), norms (3, n), pairs (3, 3, n, n) float64,
    log-potentials (3, n), sweeps, marginal error, converged, (1/n) sum_i sum_{l<m} G_lm[i, i])``.
    """
    tol, max_iter, warm, span_max, rel_underflow = solver
    n, _, d = x.shape
    z = np.empty((3, n, d), dtype=x.dtype)
    norms = np.empty((3, n), dtype=np.float64)
    pairs = np.zeros((3, 3, n, n), dtype=np.float64)
    log_pot = np.zeros((3, n), dtype=np.float64)
    if not _normalize_views(x, eps_norm, z, norms):
        return NOT_FINITE, z, norms, pairs, log_pot, 0, np.inf, False, 0.0
    kernels = np.empty((3, n, n), dtype=np.float64)
    const, span, pair_diag = _exp_kernels(z, coef, -offset, kernels)
    pair_diag /= n
    if not span <= span_max:
        return SPAN, z, norms, pairs, log_pot, 0, np.inf, False, pair_diag
    u, v, w = np.empty(n), np.ones(n), np.ones(n)
    for i in range(n):
        u[i] = math.exp((init[0, i] if warm else 0.0) + const)
        if warm:
            v[i] = math.exp(init[1, i])
            w[i] = math.exp(init[2, i])
    tiny = np.finfo(np.float64).tiny * float(n) ** 3 / rel_underflow
    status, iterations, error, converged, q, wm = _k3_sweeps(kernels, (u, v, w), tol, max_iter, warm, tiny)
    if status != OK:
        return status, z, norms, pairs, log_pot, iterations, error, False, pair_diag
    _k3_pairs(kernels, (u, v, w), q, wm, pairs)
    for i in range(n):
        log_pot[0, i] = math.log(u[i]) - const
        log_pot[1, i] = math.log(v[i])
        log_pot[2, i] = math.log(w[i])
    return OK, z, norms, pairs, log_pot, iterations, error, converged, pair_diag


@_jit_k3
def fused_backward(
    z: np.ndarray, norms: np.ndarray, eps_norm: float, pairs: np.ndarray, two_s: float, grad_out: float
) -> np.ndarray:
    """Gradient ``(n, 3, d)`` w.r.t. the raw input of the Danskin surrogate
    ``sum_{l<m} <W_lm, z_l z_m^T>``, ``W_lm = 2 s (P_lm - I / n)``, through the normalization."""
    _, n, d = z.shape
    weights = np.empty((3, 3, n, n), dtype=z.dtype)  # weights[l, m] = W_lm (l < m) or W_ml^T (l > m)
    for l in range(3):
        for m in range(l + 1, 3):
            for i in range(n):
                for j in range(n):
                    val = two_s * (pairs[l, m, i, j] - (1.0 / n if i == j else 0.0))
                    weights[l, m, i, j] = val
                    weights[m, l, j, i] = val
    grad = np.empty((n, 3, d), dtype=z.dtype)
    for l in range(3):
        gz = np.zeros((n, d), dtype=z.dtype)
        for m in range(3):
            if m != l:
                gz += np.dot(weights[l, m], z[m])
        for i in range(n):
            if norms[l, i] > eps_norm:  # d(x/||x||) = (I - z z^T) / ||x||
                dot = 0.0
                for c in range(d):
                    dot += np.float64(z[l, i, c]) * np.float64(gz[i, c])
                scale = grad_out / norms[l, i]
                for c in range(d):
                    grad[i, l, c] = scale * (gz[i, c] - dot * z[l, i, c])
            else:  # x / eps
                for c in range(d):
                    grad[i, l, c] = grad_out * gz[i, c] / eps_norm
    return grad


# --------------------------------------------------------------------------- k > 3: factors
@_jit
def _row_digits(row: int, n: int, digits: np.ndarray) -> None:
    """``digits``: the base-``n`` digits of ``row`` (most significant first), i.e. ``(i_0, .., i_{r-2})``."""
    for pos in range(digits.shape[0] - 1, -1, -1):
        digits[pos] = row % n
        row //= n


@_jit_inline
def _row_base(log_factors: np.ndarray, absorbed: np.ndarray, digits: np.ndarray, start: float) -> float:
    """``start + sum_{l<r-1} (a_l[i_l] + sum_{l<m<r-1} L_lm[i_l, i_m])`` of the row with ``digits``."""
    base = start
    for l in range(digits.shape[0]):
        base += absorbed[l, digits[l]]
        for m in range(l + 1, digits.shape[0]):
            base += log_factors[l, m, digits[l], digits[m]]
    return base


@_jit
def _digit_tables(log_factors: np.ndarray, absorbed: np.ndarray, tables: np.ndarray, shifts: np.ndarray) -> float:
    """Per-digit tables ``exp(L - max L)`` ``(2, r, n, n)`` of :func:`absorb` (side 0: the terms of ``xe``,
    ``L_lq`` and ``a_q``; side 1: the ``j``-terms of ``be``, ``L_{l,r-1}`` and ``a_{r-1}``; the potentials' term
    in row 0 of entry ``r-1``), their summed maxima ``shifts`` ``(2,)``; returns the larger summed log-range."""
    k, n = absorbed.shape
    r = k - 1
    span = 0.0
    for side in range(2):
        col = r if side == 0 else r - 1
        side_span = 0.0
        for l in range(r):
            count = n if l < r - 1 else 1
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
    return span


@_jit_inline
def _product_row(tables: np.ndarray, side: int, digits: np.ndarray, scale: float, prod: np.ndarray) -> float:
    """``prod[i] = scale prod_l tables[side, l, i_l, i]`` ``(n,)`` of the row with ``digits``; returns
    ``max(0, max prod)``."""
    r = tables.shape[1]
    n = prod.shape[0]
    for i in range(n):
        prod[i] = tables[side, r - 1, 0, i] * scale
    for l in range(r - 1):
        for i in range(n):
            prod[i] *= tables[side, l, digits[l], i]
    top = 0.0
    for i in range(n):
        top = max(top, prod[i])
    return top


@_jit
def absorb(log_factors: np.ndarray, absorbed: np.ndarray, xe: np.ndarray, be: np.ndarray) -> float:
    """Fill the exp-domain factors ``xe`` / ``be`` ``(R, n)`` with the potentials ``absorbed`` ``(k, n)``
    folded in; returns the global shift ``bs`` of ``be`` (float64 arithmetic).

    ``xe[I', i_q] = exp(sum_{l<r-1} L_lq[i_l, i_q] + a_q[i_q] - xs[I'])`` (row max ``xs``);
    ``be[I', j] = exp(sum_{l<m<q} L_lm[i_l, i_m] + sum_{l<r} a_l[i_l] + xs[I'] - bs)``, ``j = i_{r-1}``.
    The exponentials of the row-varying sums are products of per-digit tables (:func:`_digit_tables`: two
    transcendental calls per row instead of ``2 n``) when their log-ranges allow (``_PRODUCT_SPAN``).
    """
    k, n = absorbed.shape
    rows = xe.shape[0]
    tables = np.zeros((2, k - 1, n, n))
    shifts = np.zeros(2)
    if not _digit_tables(log_factors, absorbed, tables, shifts) < _PRODUCT_SPAN:
        return _absorb_exp(log_factors, absorbed, xe, be)
    digits = np.zeros(k - 2, dtype=np.int64)
    prod = np.empty(n)
    bases = np.empty(rows)  # log of be's row factor (before the global shift)
    bs = -np.inf
    for row in range(rows):
        _row_digits(row, n, digits)
        top = _product_row(tables, 0, digits, 1.0, prod)
        inv = 1.0 / top
        for i in range(n):
            xe[row, i] = prod[i] * inv
        bases[row] = _row_base(log_factors, absorbed, digits, math.log(top) + shifts[0]) + shifts[1]
        bs = max(bs, bases[row] + math.log(_product_row(tables, 1, digits, 1.0, prod)))
    for row in range(rows):
        _row_digits(row, n, digits)
        _product_row(tables, 1, digits, math.exp(bases[row] - bs), prod)
        for j in range(n):
            be[row, j] = prod[j]
    return bs


@_jit
def _absorb_exp(log_factors: np.ndarray, absorbed: np.ndarray, xe: np.ndarray, be: np.ndarray) -> float:
    """:func:`absorb` with one exponential per entry (any log-range)."""
    k, n = absorbed.shape
    r = k - 1
    rows = xe.shape[0]
    digits = np.zeros(r - 1, dtype=np.int64)
    logs = np.empty(n)
    shifts = np.empty(rows)
    bs = -np.inf
    for row in range(rows):
        _row_digits(row, n, digits)
        shift = -np.inf
        for iq in range(n):
            total = absorbed[r, iq]
            for l in range(r - 1):
                total += log_factors[l, r, digits[l], iq]
            logs[iq] = total
            shift = max(shift, total)
        for iq in range(n):
            xe[row, iq] = math.exp(logs[iq] - shift)
        shifts[row] = _row_base(log_factors, absorbed, digits, shift)
        for j in range(n):
            bs = max(bs, _be_log(log_factors, absorbed, digits, shifts[row], j))
    for row in range(rows):  # be = exp(log_b - bs) (log_b recomputed: no (R, n) float64 temporary)
        _row_digits(row, n, digits)
        for j in range(n):
            be[row, j] = math.exp(_be_log(log_factors, absorbed, digits, shifts[row] - bs, j))
    return bs


@_jit_inline
def _be_log(log_factors: np.ndarray, absorbed: np.ndarray, digits: np.ndarray, base: float, j: int) -> float:
    """``base + a_{r-1}[j] + sum_{l<r-1} L_{l,r-1}[i_l, j]`` (log of ``be``'s entry ``j``)."""
    r = absorbed.shape[0] - 1
    total = base + absorbed[r - 1, j]
    for l in range(r - 1):
        total += log_factors[l, r - 1, digits[l], j]
    return total


# --------------------------------------------------------------------------- k > 3: sweeps
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
def _rest_scalings(g: np.ndarray, absorbed: np.ndarray, m1_shift: np.ndarray, base: float, scalings: tuple) -> float:
    """Log-scalings ``h`` ``(r, n)`` of the rest views (``(g - a)[:r]``, view ``r-1`` plus ``m1_shift``), their
    row max ``h_max`` ``(r,)`` and ``v = v_in = exp(h - h_max)`` into ``scalings = (h, h_max, v, v_in)``;
    returns ``log_scale = base + sum h_max``."""
    h, h_max, v, v_in = scalings
    r, n = v.shape
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
    log_scale = base
    for l in range(r):
        log_scale += h_max[l]
    return log_scale


@_jit
def _right_chain(
    xe: np.ndarray, be: np.ndarray, m1: np.ndarray, v: np.ndarray, q0: np.ndarray, right: np.ndarray
) -> None:
    """GEMM 1 (``q0``) and the right chain: ``right[l]`` (``n^(l+1)`` entries at offset ``sum_{a<l} n^(a+1)``)
    is ``q0`` contracted with ``v_{l+1}..v_{r-1}`` on the axes after ``l``."""
    r, n = v.shape
    start = 0
    size = n
    for _ in range(r - 2):
        start += size
        size *= n
    rest_plan(xe, be, m1, v[r - 1], q0, right[start : start + xe.shape[0]])
    for a in range(r - 2, 0, -1):  # right[a-1] = right[a] @ v[a]
        src = start
        start -= n**a
        for p in range(n**a):
            acc = 0.0
            for i in range(n):
                acc += right[src + p * n + i] * v[a, i]
            right[start + p] = acc


@_jit
def _contract(left: np.ndarray, right: np.ndarray, base: int, count: int, out: np.ndarray) -> None:
    """``out[i] = sum_{p<count} left[p] right[base + p n + i]`` ``(n,)``."""
    n = out.shape[0]
    for i in range(n):
        acc = 0.0
        for p in range(count):
            acc += left[p] * right[base + p * n + i]
        out[i] = acc


@_jit
def _last_rest_view(
    q0: np.ndarray, left_in: np.ndarray, left: np.ndarray, incoming: np.ndarray, partial: np.ndarray
) -> None:
    """View ``r-1``'s marginal sums of the incoming and the updated plan in one pass over ``q0``."""
    rows, n = q0.shape
    for j in range(n):
        incoming[j] = 0.0
        partial[j] = 0.0
    for row in range(rows):
        w_in, w_new = left_in[row], left[row]
        for j in range(n):
            incoming[j] += w_in * q0[row, j]
            partial[j] += w_new * q0[row, j]


@_jit
def _at_least(values: np.ndarray, tiny: float) -> bool:
    """Every entry ``>= tiny`` (False on NaN)."""
    for i in range(values.shape[0]):
        if not values[i] >= tiny:
            return False
    return True


@_jit
def _stop_error(
    factors: tuple, incoming: np.ndarray, v_in: np.ndarray, log_scale_in: float, warm_first: bool, work: tuple
) -> float:
    """Stopping-rule error of the incoming plan (``factors = (xe, be, m1)``; on a warm start's first check view
    ``q``'s marginal too, through the buffers ``work = (left, coupling, col)``)."""
    xe, be, m1 = factors
    left, coupling, col = work
    r, n = v_in.shape
    target = 1.0 / n
    scale_in = math.exp(log_scale_in)
    err = 0.0
    for a in range(r):
        for i in range(n):
            err += abs(incoming[a, i] * v_in[a, i] * scale_in - target)
    if warm_first:  # view q's marginal is not exact yet
        last_column_of(xe, be, v_in, m1, left, coupling, col)
        for i in range(n):
            err += abs(col[i] * scale_in - target)
    return err


@_jit
def _update_view(g: np.ndarray, scalings: tuple, l: int, partial: np.ndarray, log_scale: float) -> float:
    """Gauss-Seidel update of view ``l``'s potentials ``g[l]`` and scalings ``(h, h_max, v, _)`` from its
    marginal sum ``partial`` ``(n,)``; returns the new ``log_scale``."""
    h, h_max, v, _ = scalings
    n = partial.shape[0]
    log_n = math.log(n)
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
    return log_scale


@_jit
def sweep_rest(
    factors: tuple, m1_shift: np.ndarray, g: np.ndarray, absorbed: np.ndarray, base: float, loop: tuple, work: tuple
) -> int:
    """The rest views' part of a sweep of :func:`.sinkhorn._factorized_sweep` (host loop), compiled.

    ``factors = (xe, be, m1, q0)``: ``M1`` / ``m1_shift`` of view ``q``, ``q0`` ``(R, n)`` receives GEMM 1. From
    potentials ``g`` ``(k, n)`` (float64, rest views updated in place; ``base = bs - offset``): rest scalings, GEMM 1
    and the right chain; the Gauss-Seidel updates of views ``0..r-1``; before view ``r-1``'s update the stopping
    rule on the incoming plan (``loop = (sweeps done, check_first, tol, max_iter, tiny)``; ``sweeps > 0`` or
    ``check_first``). ``work = (h, h_max, v, v_in, right, left, left_in, coupling, col, scalars)``; ``scalars``
    receives ``[error, converged, log_scale, log_scale_in]``. Returns :data:`UPDATED` (the caller mixes and updates
    view ``q``), :data:`FINISHED` (``g`` unchanged; the incoming plan, scalings ``v_in``, is the output) or
    :data:`TROUBLE` (underflow / non-finite).
    """
    xe, be, m1, q0 = factors
    iterations, check_first, tol, max_iter, tiny = loop
    h, h_max, v, v_in, right, left, left_in, coupling, col, scalars = work
    r, n = v.shape
    scalings = (h, h_max, v, v_in)
    log_scale = log_scale_in = _rest_scalings(g, absorbed, m1_shift, base, scalings)
    _right_chain(xe, be, m1, v, q0, right)
    incoming, partial = np.empty((r, n)), np.empty(n)
    offset, error, converged = 0, np.inf, False
    for l in range(r):
        if l < r - 1:
            left_vector(v, l, left)
            _contract(left, right, offset, n**l, partial)
            left_vector(v_in, l, left_in)
            _contract(left_in, right, offset, n**l, incoming[l])
            offset += n ** (l + 1)
        else:
            left_vector(v_in, l, left_in)
            left_vector(v, l, left)
            _last_rest_view(q0, left_in, left, incoming[l], partial)
            if not _at_least(incoming[l], tiny):
                return TROUBLE
            if iterations > 0 or check_first:
                if not abs(log_scale_in) < 700.0:
                    return TROUBLE
                error = _stop_error(
                    (xe, be, m1), incoming, v_in, log_scale_in, iterations == 0, (left_in, coupling, col)
                )
                if not np.isfinite(error):
                    return TROUBLE
                converged = error < tol
            if converged or iterations >= max_iter:
                _store(scalars, error, converged, log_scale, log_scale_in)
                return FINISHED
        if not _at_least(partial, tiny):
            return TROUBLE
        log_scale = _update_view(g, scalings, l, partial, log_scale)
    _store(scalars, error, converged, log_scale, log_scale_in)
    return UPDATED


@_jit
def _store(scalars: np.ndarray, error: float, converged: bool, log_scale: float, log_scale_in: float) -> None:
    """``scalars[:] = [error, converged, log_scale, log_scale_in]``."""
    scalars[0] = error
    scalars[1] = 1.0 if converged else 0.0
    scalars[2] = log_scale
    scalars[3] = log_scale_in
