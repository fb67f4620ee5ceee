"""numba kernels of the fused ``k > 3`` MM-Sinkhorn (imported only by :mod:`.sinkhorn_fast`).

This module imports numba at import time; :func:`.sinkhorn_fast._kernel` imports it lazily, so the
package runs without numba. Every function is compiled on first use and cached on disk.

Layout (as :class:`.sinkhorn._PairwiseFactors`): ``r = k - 1`` rest views, view ``q = k - 1`` summed
out; a row index ``I' = (i_0, .., i_{r-2})`` (row-major, ``i_0`` most significant) of ``R = n^(r-1)``
rows; ``xe`` / ``be`` / ``q0`` ``(R, n)``. All arithmetic in float64.
"""
from __future__ import annotations

import math

import numba
import numpy as np

# sweep / solve status codes
OK, DONE, TROUBLE = 0, 1, 2

_jit = numba.njit(cache=True, nogil=True)


@_jit
def _digits(row: int, n: int, count: int, out: np.ndarray) -> None:
    """``out[:count]``: the base-``n`` digits of ``row`` (most significant first)."""
    for pos in range(count - 1, -1, -1):
        out[pos] = row % n
        row //= n


@_jit
def absorb(log_factors: np.ndarray, absorbed: np.ndarray, xe: np.ndarray, be: np.ndarray) -> float:
    """Exp-domain factors ``xe`` / ``be`` ``(R, n)`` with the potentials ``absorbed`` ``(k, n)``
    folded in (in place); returns the global shift ``bs`` of ``be``.

    ``xe[I', i_q] = exp(sum_{l<r-1} L_lq[i_l, i_q] + a_q[i_q] - xs[I'])`` (row max ``xs``);
    ``be[I', j] = exp(sum_{l<m<q} L_lm[i_l, i_m] + sum_{l<r} a_l[i_l] + xs[I'] - bs)``, ``j = i_{r-1}``.
    """
    k, n = absorbed.shape
    r = k - 1
    q = k - 1
    rows = xe.shape[0]
    digits = np.zeros(max(r - 1, 1), dtype=np.int64)
    logs = np.empty(n)
    bs = -np.inf
    for row in range(rows):
        _digits(row, n, r - 1, digits)
        for iq in range(n):
            total = absorbed[q, iq]
            for l in range(r - 1):
                total += log_factors[l, q, digits[l], iq]
            logs[iq] = total
        shift = -np.inf
        for iq in range(n):
            shift = max(shift, logs[iq])
        for iq in range(n):
            xe[row, iq] = math.exp(logs[iq] - shift)
        base = shift
        for l in range(r - 1):
            base += absorbed[l, digits[l]]
            for m in range(l + 1, r - 1):
                base += log_factors[l, m, digits[l], digits[m]]
        for j in range(n):
            total = base + absorbed[r - 1, j]
            for l in range(r - 1):
                total += log_factors[l, r - 1, digits[l], j]
            be[row, j] = total
            bs = max(bs, total)
    for row in range(rows):
        for j in range(n):
            be[row, j] = math.exp(be[row, j] - bs)
    return bs


@_jit
def left_vector(v: np.ndarray, count: int, out: np.ndarray) -> None:
    """``out[:n^count] = prod_{a<count} v[a][i_a]`` (row-major; ``[1.]`` when ``count == 0``)."""
    n = v.shape[1]
    out[0] = 1.0
    size = 1
    for a in range(count):
        for pos in range(size - 1, -1, -1):  # expand in place, back to front
            head = out[pos]
            for i in range(n - 1, -1, -1):
                out[pos * n + i] = head * v[a, i]
        size *= n


@_jit
def gemm1(
    last: np.ndarray, g_q: np.ndarray, a_q: np.ndarray, xe: np.ndarray, be: np.ndarray,
    m1_shift: np.ndarray, m1_rows: np.ndarray, m1_cols: np.ndarray, q0: np.ndarray,
) -> None:
    """GEMM 1 of a sweep: ``m1_shift[j] = max_iq (last[j, iq] + (g_q - a_q)[iq])``,
    ``m1_rows[j, iq] = exp(last[j, iq] + (g_q - a_q)[iq] - m1_shift[j])`` (= ``M1^T``), ``m1_cols`` its
    transpose, and the rest plan ``q0[I', j] = be[I', j] sum_iq xe[I', iq] M1[iq, j]``."""
    n = last.shape[0]
    for j in range(n):
        shift = -np.inf
        for iq in range(n):
            val = last[j, iq] + (g_q[iq] - a_q[iq])
            m1_rows[j, iq] = val
            shift = max(shift, val)
        m1_shift[j] = shift
        for iq in range(n):
            m1_rows[j, iq] = math.exp(m1_rows[j, iq] - shift)
            m1_cols[iq, j] = m1_rows[j, iq]
    acc = np.empty(n)
    for row in range(xe.shape[0]):
        acc[:] = 0.0
        for iq in range(n):
            x = xe[row, iq]
            for j in range(n):
                acc[j] += x * m1_cols[iq, j]
        for j in range(n):
            q0[row, j] = be[row, j] * acc[j]


@_jit
def last_marginal(
    xe: np.ndarray, be: np.ndarray, rows: np.ndarray, v_last: np.ndarray, m1_rows: np.ndarray, out: np.ndarray
) -> None:
    """GEMM 2: ``out[iq] = sum_{I', j} rows[I'] be[I', j] xe[I', iq] v_last[j] M1[iq, j]`` (view ``q``'s
    marginal up to ``exp(log_scale)``)."""
    n = xe.shape[1]
    out[:] = 0.0
    t = np.empty(n)
    for row in range(xe.shape[0]):
        weight = rows[row]
        t[:] = 0.0
        for j in range(n):
            b = be[row, j] * v_last[j]
            for iq in range(n):
                t[iq] += b * m1_rows[j, iq]
        for iq in range(n):
            out[iq] += weight * xe[row, iq] * t[iq]


@_jit
def rest_scalings(g: np.ndarray, absorbed: np.ndarray, m1_shift: np.ndarray, h: np.ndarray, h_max: np.ndarray,
                  v: np.ndarray) -> None:
    """``h = (g - a)[:r]`` with ``m1_shift`` added to view ``r-1``, its row max ``h_max`` and
    ``v = exp(h - h_max)`` (in place, ``(r, n)``)."""
    r, n = h.shape
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


@_jit
def anderson_mix(
    inputs: np.ndarray, outputs: np.ndarray, error: float, hist_out: np.ndarray, hist_res: np.ndarray,
    state: np.ndarray, regularization: float, mixed: np.ndarray,
) -> bool:
    """:class:`.sinkhorn.AndersonMixer.mix` on flat ``(D,)`` vectors: history rings ``hist_out`` /
    ``hist_res`` ``(depth + 1, D)``, ``state = [count, last_error]``. Writes the extrapolation to
    ``mixed`` and returns True, or returns False (plain sweep)."""
    depth_plus = hist_out.shape[0]
    size = inputs.shape[0]
    count = int(state[0])
    if not error < state[1]:  # the last extrapolation made the plan worse: restart
        count = 0
    state[1] = error
    if count == depth_plus:  # drop the oldest
        for a in range(depth_plus - 1):
            hist_out[a, :] = hist_out[a + 1, :]
            hist_res[a, :] = hist_res[a + 1, :]
        count -= 1
    for i in range(size):
        hist_out[count, i] = outputs[i]
        hist_res[count, i] = outputs[i] - inputs[i]
    count += 1
    state[0] = count
    if count < 2:
        return False
    m = count - 1
    d_res = np.empty((size, m))
    d_out = np.empty((size, m))
    for c in range(m):
        for i in range(size):
            d_res[i, c] = hist_res[c + 1, i] - hist_res[c, i]
            d_out[i, c] = hist_out[c + 1, i] - hist_out[c, i]
    gram = np.zeros((m, m))
    rhs = np.zeros(m)
    for a in range(m):
        for b in range(m):
            acc = 0.0
            for i in range(size):
                acc += d_res[i, a] * d_res[i, b]
            gram[a, b] = acc
        acc = 0.0
        for i in range(size):
            acc += d_res[i, a] * hist_res[m, i]
        rhs[a] = acc
    trace = 0.0
    for a in range(m):
        trace += gram[a, a]
    for a in range(m):
        gram[a, a] += regularization * trace + 1e-300
    gamma = _lu_solve(gram, rhs)
    finite = True
    for i in range(size):
        acc = hist_out[m, i]
        for c in range(m):
            acc -= d_out[i, c] * gamma[c]
        mixed[i] = acc
        finite = finite and np.isfinite(acc)
    if not finite:  # reset
        state[0] = 0.0
        state[1] = np.inf
        return False
    return True


@_jit
def _lu_solve(matrix: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """``matrix^-1 rhs`` by Gaussian elimination with partial pivoting (``(m, m)``, small ``m``;
    a zero pivot gives non-finite values, which the caller treats as a failed extrapolation)."""
    m = rhs.shape[0]
    a = matrix.copy()
    b = rhs.copy()
    for col in range(m):
        pivot = col
        for row in range(col + 1, m):
            if abs(a[row, col]) > abs(a[pivot, col]):
                pivot = row
        if pivot != col:
            for c in range(m):
                a[col, c], a[pivot, c] = a[pivot, c], a[col, c]
            b[col], b[pivot] = b[pivot], b[col]
        for row in range(col + 1, m):
            factor = a[row, col] / a[col, col]
            for c in range(col, m):
                a[row, c] -= factor * a[col, c]
            b[row] -= factor * b[col]
    out = np.empty(m)
    for row in range(m - 1, -1, -1):
        acc = b[row]
        for c in range(row + 1, m):
            acc -= a[row, c] * out[c]
        out[row] = acc / a[row, row]
    return out


@_jit
def pair_marginals(
    xe: np.ndarray, be: np.ndarray, q0: np.ndarray, v: np.ndarray, m1_rows: np.ndarray, log_scale: float,
    pairs: np.ndarray,
) -> bool:
    """All pair marginals ``pairs[l, m]`` (``l < m``, ``(n, n)``; zeros elsewhere) of the plan with rest
    scalings ``v`` ``(r, n)``; False when ``|log_scale| >= 700`` (the general path's bound)."""
    k = pairs.shape[0]
    r = k - 1
    q = k - 1
    n = v.shape[1]
    pairs[:] = 0.0
    if not abs(log_scale) < 700.0:
        return False
    rows = xe.shape[0]
    lv = np.empty(rows)
    left_vector(v, r - 1, lv)
    digits = np.zeros(max(r - 1, 1), dtype=np.int64)
    qn = np.empty(n)
    t = np.empty(n)
    last_pair = np.zeros((n, n))
    for row in range(rows):
        _digits(row, n, r - 1, digits)
        row_sum = 0.0
        for j in range(n):
            val = q0[row, j] * lv[row] * v[r - 1, j]  # rest plan P[I', j] summed over view q
            row_sum += val
            for l in range(r - 1):
                pairs[l, r - 1, digits[l], j] += val
            qn[j] = be[row, j] * lv[row] * v[r - 1, j]
        for l in range(r - 1):
            for m in range(l + 1, r - 1):
                pairs[l, m, digits[l], digits[m]] += row_sum
        t[:] = 0.0
        for j in range(n):
            b = qn[j]
            for iq in range(n):
                t[iq] += b * m1_rows[j, iq]
                last_pair[j, iq] += b * xe[row, iq]
        for iq in range(n):
            val = xe[row, iq] * t[iq]
            for l in range(r - 1):
                pairs[l, q, digits[l], iq] += val
    for j in range(n):
        for iq in range(n):
            pairs[r - 1, q, j, iq] = last_pair[j, iq] * m1_rows[j, iq]
    scale = math.exp(log_scale)
    for l in range(k):
        for m in range(l + 1, k):
            for i in range(n):
                for j in range(n):
                    pairs[l, m, i, j] *= scale
    return True


@_jit
def _at_least(values: np.ndarray, tiny: float) -> bool:
    """Every entry finite and ``>= tiny`` (NaN fails)."""
    for val in values:
        if not val >= tiny or not np.isfinite(val):
            return False
    return True


@_jit
def solve(
    log_factors: np.ndarray, offset: float, tol: float, max_iter: int, g: np.ndarray, check_first: bool,
    depth: int, regularization: float, tiny: float, pairs: np.ndarray,
) -> tuple:
    """:func:`.sinkhorn._pairwise_solve` fused: factorized Gauss-Seidel sweeps of Alg. 1 from the
    potentials ``g`` ``(k, n)`` (updated in place), stopping rule ``sum_l ||m_l(P) - 1/n||_1 < tol``
    on the incoming plan after every sweep (and before the first when ``check_first``), Anderson
    mixing of depth ``depth`` (0: none), the same underflow checks and one re-absorption per sweep.

    Returns ``(status, iterations, error, converged, mass)``; ``pairs`` ``(k, k, n, n)`` is filled on
    ``DONE``. ``TROUBLE``: a second underflow in one sweep (the caller runs the general path).
    """
    k, n = g.shape
    r = k - 1
    q = k - 1
    rows = n ** (r - 1)
    log_n = math.log(n)
    target = 1.0 / n
    xe = np.empty((rows, n))
    be = np.empty((rows, n))
    q0 = np.empty((rows, n))
    absorbed = np.zeros((k, n))
    if np.abs(g).max() > 0:
        absorbed[:, :] = g
    bs = absorb(log_factors, absorbed, xe, be)
    last = log_factors[r - 1, q].copy()
    absorbed_at = -1
    size = r * n
    hist_out = np.zeros((max(depth, 0) + 1, size))
    hist_res = np.zeros((max(depth, 0) + 1, size))
    mix_state = np.array([0.0, np.inf])
    mixed = np.empty(size)
    # right[l] (l < r - 1): q0 contracted on the axes after l, n^(l+1) entries at right_off[l]
    right_off = np.zeros(r, dtype=np.int64)
    for l in range(1, r):
        right_off[l] = right_off[l - 1] + n ** l
    right = np.empty(right_off[r - 1])
    m1_shift = np.empty(n)
    m1_rows = np.empty((n, n))
    m1_cols = np.empty((n, n))
    h = np.empty((r, n))
    h_max = np.empty(r)
    v = np.empty((r, n))
    v_in = np.empty((r, n))
    lv = np.empty(rows)
    lv_in = np.empty(rows)
    partial = np.empty(n)
    incoming = np.empty((r, n))
    col = np.empty(n)
    g_in = g.copy()
    iterations = 0
    error = np.inf
    while True:
        g_in[:, :] = g
        # ---- one sweep (status OK: continue, DONE: result, TROUBLE: underflow)
        status = OK
        converged = False
        finished = False
        gemm1(last, g[q], absorbed[q], xe, be, m1_shift, m1_rows, m1_cols, q0)
        rest_scalings(g, absorbed, m1_shift, h, h_max, v)
        log_scale = bs - offset + h_max.sum()
        v_in[:, :] = v
        log_scale_in = log_scale
        if r >= 2:
            start = right_off[r - 2]
            for row in range(rows):
                acc = 0.0
                for j in range(n):
                    acc += q0[row, j] * v[r - 1, j]
                right[start + row] = acc
            for a in range(r - 2, 0, -1):  # right[a-1] = right[a] @ v[a]
                src, dst = right_off[a], right_off[a - 1]
                for p in range(n ** a):
                    acc = 0.0
                    for i in range(n):
                        acc += right[src + p * n + i] * v[a, i]
                    right[dst + p] = acc
        for l in range(r):
            if l < r - 1:
                left_vector(v, l, lv)
                base = right_off[l]
                for i in range(n):
                    acc = 0.0
                    for p in range(n ** l):
                        acc += lv[p] * right[base + p * n + i]
                    partial[i] = acc
                if l > 0:
                    left_vector(v_in, l, lv_in)
                    for i in range(n):
                        acc = 0.0
                        for p in range(n ** l):
                            acc += lv_in[p] * right[base + p * n + i]
                        incoming[l, i] = acc
                else:
                    incoming[0, :] = partial
            else:  # incoming and updated plan in one pass over q0
                left_vector(v_in, l, lv_in)
                left_vector(v, l, lv)
                partial[:] = 0.0
                incoming[l, :] = 0.0
                for row in range(rows):
                    w_in, w_new = lv_in[row], lv[row]
                    for j in range(n):
                        incoming[l, j] += w_in * q0[row, j]
                        partial[j] += w_new * q0[row, j]
                if not _at_least(incoming[l], tiny):
                    status = TROUBLE
                    break
                if iterations > 0 or check_first:
                    if not abs(log_scale_in) < 700.0:
                        status = TROUBLE
                        break
                    scale_in = math.exp(log_scale_in)
                    err = 0.0
                    for a in range(r):
                        for i in range(n):
                            err += abs(incoming[a, i] * v_in[a, i] * scale_in - target)
                    if iterations == 0:  # warm start: view q's marginal is not exact yet
                        left_vector(v_in, r - 1, lv_in)
                        last_marginal(xe, be, lv_in, v_in[r - 1], m1_rows, col)
                        for i in range(n):
                            err += abs(col[i] * scale_in - target)
                    error = err
                    if not np.isfinite(error):
                        status = TROUBLE
                        break
                    converged = error < tol
                finished = converged or iterations >= max_iter
                if finished:
                    break
            if not _at_least(partial, tiny):
                status = TROUBLE
                break
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
        if status == OK and finished:  # the incoming plan is the output
            g[:, :] = g_in
            if not pair_marginals(xe, be, q0, v_in, m1_rows, log_scale_in, pairs):
                status = TROUBLE
            else:
                mass = pairs[0, 1].sum()
                if not (np.isfinite(mass) and np.isfinite(pairs.sum())):
                    status = TROUBLE
                else:
                    return DONE, iterations, error, converged, mass
        if status == OK:
            if depth > 0 and iterations > 0:  # g_in[q] is then view q's update for g_in[:r]
                if anderson_mix(g_in[:r].ravel(), g[:r].ravel().copy(), error, hist_out, hist_res, mix_state,
                                regularization, mixed):
                    for l in range(r):
                        for i in range(n):
                            g[l, i] = mixed[l * n + i]
                    rest_scalings(g, absorbed, m1_shift, h, h_max, v)
                    log_scale = bs - offset + h_max.sum()
            # ---- GEMM 2: marginal of view q with the new rest potentials
            left_vector(v, r - 1, lv)
            last_marginal(xe, be, lv, v[r - 1], m1_rows, col)
            if not _at_least(col, tiny):
                status = TROUBLE
            else:
                for i in range(n):
                    g[q, i] += -log_n - math.log(col[i]) - log_scale
        if status == TROUBLE:
            g[:, :] = g_in
            mix_state[0] = 0.0
            mix_state[1] = np.inf
            if absorbed_at == iterations:
                return TROUBLE, iterations, error, False, 0.0
            absorbed[:, :] = g
            bs = absorb(log_factors, absorbed, xe, be)
            absorbed_at = iterations
            continue
        iterations += 1
