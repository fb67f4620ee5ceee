"""Fused CPU fast path of the ``m3g`` loss (cost ``cv``) for ``k = 3`` views and small ``n``.

At ``n^3 <= 1e5`` the work of the whole loss (input check, L2 normalization, Gram blocks, a few
MM-Sinkhorn sweeps, Danskin weights, backward through the normalization) is tiny and its cost was
per-operation dispatch: ~25 tensor / numpy operations per sweep plus ~30 around the solve. Here the
forward and the backward are one compiled function each (numba, compiled on first use and cached on
disk), called on numpy views of the input's memory, plus one autograd node.

Same mathematics as the sweep blocks (:func:`.m3g._factorized` with
:func:`.sinkhorn._three_view_sweep`): normalization ``x / max(||x||, eps)`` (eps ``1e-6`` float32,
``1e-12`` float64, as :func:`.base.normalize`), Gram blocks and backward GEMMs in the input dtype,
the sweeps in float64 (exp-domain scalings ``u, v, w`` of the max-shifted kernels, Gauss-Seidel
order of Alg. 1, stopping rule ``sum_l ||m_l(P) - 1/n||_1 < tol`` after every sweep and, on a warm
start, before the first), hence the same sweep counts; values and gradients agree with the blocks
and the float64 reference to float32 round-off (tested).

The numba backend of :func:`.m3g.solve` at ``k = 3`` (which sizes: :data:`.m3g.AUTO_NUMBA_ON_CPU`).
:func:`fused_three_view` returns ``None`` whenever it does not apply (numba not installed, not CPU,
dtype not float32 / float64, a non-finite input -- the blocks then raise the usual error --, a kernel
log-range beyond float64, or an underflowing marginal); the caller then runs the sweep blocks, which
handle all of those. Anderson acceleration / the diagonal start (``anderson``, ``init_potentials``) do not
apply here (3-5 sweeps at epsilon 0.2).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from .sinkhorn import _REL_UNDERFLOW, _THREE_VIEW_SPAN_F64, MMSinkhornResult

# kernel status codes
_OK, _NOT_FINITE, _SPAN, _UNDERFLOW = 0, 1, 2, 3


# --------------------------------------------------------------------------- kernels (numba-compiled)
def _forward_kernel(
    x: np.ndarray,
    eps_norm: float,
    coef: float,
    offset: float,
    tol: float,
    max_iter: int,
    init: np.ndarray,
    warm: bool,
    span_max: float,
    rel_underflow: float,
) -> tuple:
    """Normalization, Gram blocks and the k = 3 sweeps for raw embeddings ``x`` ``(n, 3, d)``.

    ``coef = 2 s / epsilon``, ``offset = 6 s / epsilon`` (log-kernel ``A = coef sum_{l<m} G_lm -
    offset``); ``init`` ``(3, n)`` float64 starting log-potentials (read when ``warm``). Returns
    ``(status, z (3, n, d), norms (3, n), pairs (3, 3, n, n) float64, log-potentials (3, n),
    sweeps, marginal error, converged, (1/n) sum_i sum_{l<m} G_lm[i, i])``.
    """
    n, _, d = x.shape
    z = np.empty((3, n, d), dtype=x.dtype)
    norms = np.empty((3, n), dtype=np.float64)
    pairs = np.zeros((3, 3, n, n), dtype=np.float64)
    log_pot = np.zeros((3, n), dtype=np.float64)
    for l in range(3):
        for i in range(n):
            acc = 0.0
            for c in range(d):
                val = np.float64(x[i, l, c])
                acc += val * val
            if not np.isfinite(acc):
                return _NOT_FINITE, z, norms, pairs, log_pot, 0, np.inf, False, 0.0
            norm = math.sqrt(acc)
            norms[l, i] = norm
            inv = 1.0 / max(norm, eps_norm)
            for c in range(d):
                z[l, i, c] = x[i, l, c] * inv
    blocks = ((0, 1), (0, 2), (1, 2))
    kernels = np.empty((3, n, n), dtype=np.float64)
    const, span, pair_diag = -offset, 0.0, 0.0
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
    pair_diag /= n
    if not span <= span_max:
        return _SPAN, z, norms, pairs, log_pot, 0, np.inf, False, pair_diag
    k01, k02, k12 = kernels[0], kernels[1], kernels[2]
    k12_t = np.ascontiguousarray(k12.T)
    target = 1.0 / n
    tiny = np.finfo(np.float64).tiny * float(n) ** 3 / rel_underflow
    u, v, w = np.empty(n), np.empty(n), np.empty(n)
    for i in range(n):
        g0 = init[0, i] if warm else 0.0
        u[i] = math.exp(g0 + const)
        v[i] = math.exp(init[1, i]) if warm else 1.0
        w[i] = math.exp(init[2, i]) if warm else 1.0
    k02w = np.empty((n, n))
    a = np.empty((n, n))
    wm = np.zeros((n, n))
    iterations, error, converged = 0, np.inf, False
    while True:
        # Q = K01 * ((K02 w) K12^T): P01 / (u v^T) for the current w
        for i in range(n):
            for j in range(n):
                k02w[i, j] = k02[i, j] * w[j]
        q = np.dot(k02w, k12_t)
        for i in range(n):
            for j in range(n):
                q[i, j] *= k01[i, j]
        row = np.dot(q, v)
        if iterations > 0 or warm:  # stopping rule on the incoming plan
            col_in = np.dot(q.T, u)
            err = 0.0
            for i in range(n):
                err += abs(u[i] * row[i] - target) + abs(v[i] * col_in[i] - target)
            if iterations == 0:  # warm start: view 2 is not exact yet
                for i in range(n):
                    for j in range(n):
                        a[i, j] = k01[i, j] * u[i] * v[j]
                wm = np.dot(a, k12)
                for j in range(n):
                    acc = 0.0
                    for i in range(n):
                        acc += k02[i, j] * wm[i, j]
                    err += abs(w[j] * acc - target)
            error = err
            if not np.isfinite(error):
                return _UNDERFLOW, z, norms, pairs, log_pot, iterations, error, False, pair_diag
            converged = error < tol
            if converged or iterations >= max_iter:
                break
        smallest = np.inf
        for i in range(n):
            smallest = min(smallest, row[i])
            u[i] = target / row[i]
        col = np.dot(q.T, u)
        for j in range(n):
            smallest = min(smallest, col[j])
            v[j] = target / col[j]
        for i in range(n):
            for j in range(n):
                a[i, j] = k01[i, j] * u[i] * v[j]
        wm = np.dot(a, k12)  # (n_i, n_l): u_i sum_j K01 v_j K12[j, l]
        for j in range(n):
            acc = 0.0
            for i in range(n):
                acc += k02[i, j] * wm[i, j]
            smallest = min(smallest, acc)
            w[j] = target / acc
        if not smallest >= tiny:  # underflow or NaN
            return _UNDERFLOW, z, norms, pairs, log_pot, iterations, error, False, pair_diag
        iterations += 1
    for i in range(n):
        for j in range(n):
            pairs[0, 1, i, j] = u[i] * q[i, j] * v[j]
            pairs[0, 2, i, j] = k02[i, j] * wm[i, j] * w[j]
            a[i, j] = k01[i, j] * u[i]
    t = np.dot(a.T, k02)  # (n_j, n_l)
    for j in range(n):
        for l in range(n):
            pairs[1, 2, j, l] = v[j] * w[l] * k12[j, l] * t[j, l]
    for i in range(n):
        log_pot[0, i] = math.log(u[i]) - const
        log_pot[1, i] = math.log(v[i])
        log_pot[2, i] = math.log(w[i])
    return _OK, z, norms, pairs, log_pot, iterations, error, converged, pair_diag


def _backward_kernel(
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


@functools.lru_cache(maxsize=1)
def kernels() -> tuple[Callable[..., Any], Callable[..., Any]] | None:
    """The two kernels compiled by numba (on-disk cache), or None when numba is not installed."""
    try:
        import numba
    except ImportError:
        return None
    jit = numba.njit(cache=True, nogil=True)
    return jit(_forward_kernel), jit(_backward_kernel)


# --------------------------------------------------------------------------- autograd glue
class _FusedGradient(torch.autograd.Function):
    """0-d ``value`` whose backward is :func:`_backward_kernel` (Danskin + normalization)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, value: float, saved: tuple) -> torch.Tensor:
        ctx.saved = saved
        return torch.tensor(value, dtype=x.dtype)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        backward_kernel, z, norms, eps_norm, pairs, two_s = ctx.saved
        grad = backward_kernel(z, norms, eps_norm, pairs, two_s, float(grad_out))
        return torch.from_numpy(grad), None, None


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
) -> tuple[FusedForward, float, MMSinkhornResult] | None:
    """Forward of M3G (``cv``) on raw (not yet normalized) embeddings ``x`` ``(n, 3, d)``, fused.

    ``init``: warm-start log-potentials ``(3, n)`` or None. Returns ``(forward, diag_cost,
    result)``: ``diag_cost = (1/n) sum_i C[i, i, i]``, ``result`` the solve (``log_potentials``
    float64, ``pair_marginals`` ``(3, 3, n, n)`` float64, ``path = "fused-k3"``); the caller turns
    them into the M3G value and gets the loss tensor from ``forward.attach(value)``. ``None`` when
    the fast path does not apply (see the module docstring).
    """
    if not _applies(x):
        return None
    forward_kernel, backward_kernel = kernels()
    n = x.shape[0]
    s = 1.0  # cv scale (2 / (k - 1))^2 at k = 3
    eps_norm = 1e-12 if x.dtype == torch.float64 else 1e-6
    warm = init is not None
    init_np = init.detach().to(torch.float64).numpy() if warm else np.zeros((3, n))
    x_np = x.detach().contiguous().numpy()
    status, z, norms, pairs, log_pot, iterations, error, converged, pair_diag = forward_kernel(
        x_np,
        eps_norm,
        2.0 * s / epsilon,
        6.0 * s / epsilon,
        tol,
        max_iter,
        init_np,
        warm,
        _THREE_VIEW_SPAN_F64,
        _REL_UNDERFLOW,
    )
    if status != _OK or not (math.isfinite(float(pairs.sum())) and math.isfinite(float(log_pot.sum()))):
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
    diag_cost = s * (6.0 - 2.0 * pair_diag)
    return FusedForward(x, (backward_kernel, z, norms, eps_norm, pairs, 2.0 * s)), diag_cost, result


class FusedForward:
    """Input and saved state of a fused forward, waiting for its value."""

    __slots__ = ("x", "saved")

    def __init__(self, x: torch.Tensor, saved: tuple) -> None:
        self.x, self.saved = x, saved

    def attach(self, value: float) -> torch.Tensor:
        """0-d tensor ``value`` whose gradient w.r.t. the raw input is the Danskin gradient."""
        return _FusedGradient.apply(self.x, value, self.saved)


__all__ = ["FusedForward", "fused_three_view", "kernels"]
