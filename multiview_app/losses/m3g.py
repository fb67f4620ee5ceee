"""Multi-marginal matching gap (M3G paper, Def. 3.1) with its Danskin gradient (Prop. 3.2).

For normalized embeddings ``z`` ``(n, k, d)`` and the Gram blocks ``G_lm = z_l z_m^T`` ``(n, n)``,
both costs are functions of the pairwise sum ``S[i_1..i_k] = sum_{l<m} G_lm[i_l, i_m]``:

* ``cv`` (Alg. 2): ``C = (2/(k-1))^2 sum_{l<m} (2 - 2 G_lm) = s (k(k-1) - 2 S)``, ``s = (2/(k-1))^2``;
* ``csd`` (Eq. 13): ``C = -log(R^2)``, ``R^2 = ||mean_l z_{i_l, l}||^2 = (k + 2 S) / k^2`` (clamped).

``M3G = (1/n) sum_i C[i,...,i] - epsilon (log n + 1) - OT`` with
``OT = (1/n) sum_l sum_i f_l[i] - epsilon sum(P)`` from MM-Sinkhorn (Alg. 1, log domain). The gradient
is ``dM3G/dC = J - P``; chained through ``S`` it becomes one ``(n, n)`` weight per view pair,
``W_lm = sum over the other axes of (J - P) * dC/dS``, and the returned tensor is
``value + sum_{l<m} <W_lm, G_lm(z)> - (same, detached)``: exact value, Danskin gradient, no
back-propagation through the iterations.

``cv`` uses the factorized solver (never ``n^k``, see :mod:`.sinkhorn`); ``csd`` and
:func:`m3g_materialized` (the reference) use the dense log-domain solver.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from . import LOSSES, m3g_fast, sinkhorn_fast
from .base import (
    LazyStats,
    MultiViewLoss,
    SolverTally,
    _Normalize,
    check_embeddings,
    check_positive,
    nonfinite_count,
    normalize,
)
from .sinkhorn import (
    DeferredCheck,
    LoopHints,
    MMSinkhornResult,
    mm_sinkhorn_dense,
    mm_sinkhorn_pairwise,
    pairwise_sum_tensor,
)

COSTS = ("cv", "csd")
# cold-start potentials of the factorized solver: zeros (Alg. 1) or the diagonal split
INIT_POTENTIALS = ("zeros", "diagonal")
# R^2 is clamped to at least this before the log of the csd cost (k antipodal-cancelling views).
_CSD_MIN_R2 = 1e-6

#: Backends of the solve (``M3GLoss(backend=...)``): ``blocks`` (torch sweeps, :mod:`.sinkhorn`; every device),
#: ``numba`` (CPU kernels, :mod:`.m3g_fast` for k = 3, :mod:`.sinkhorn_fast` for k > 3), ``dense`` (the
#: materialized ``n^k`` solver: the float64 reference and the only solver of cost ``csd``), ``auto``
#: (:func:`choose_backend`).
BACKENDS = ("auto", "blocks", "numba", "dense")
#: What ``auto`` runs on the CPU: numba up to this many items per view count k (where it measured faster than
#: the eager blocks, with plain sweeps and with the EEG demo's settings: Anderson 16, diagonal start), the eager
#: blocks above and on every other device / dtype. From ``python scripts/bench/bench_m3g_cpu.py --out OUT
#: --sizes 64x3 96x3 128x3 16x4 32x4 64x4 128x4 8x5 16x5 32x5 16x6 32x6 --settings plain demo --paths numba eager``
#: (docs/benchmarks.md, "M3G on the CPU"; k = 3: numba 3.7-4.8x at 96 items, 1.4-1.6x at 128).
AUTO_NUMBA_ON_CPU: dict[int, int] = {3: 128, 4: 64, 5: 32, 6: 32}
#: ``MVAPP_M3G_BACKEND=blocks|numba|dense`` replaces what ``auto`` picks for cost ``cv`` (benchmarks,
#: debugging); read once, at import. An explicit ``backend`` other than ``auto`` ignores it.
ENV_BACKEND = "MVAPP_M3G_BACKEND"
AUTO_OVERRIDE: str | None = os.environ.get(ENV_BACKEND) or None


def numba_available() -> bool:
    """Whether the numba backend can run (numba importable)."""
    return sinkhorn_fast.kernels() is not None


def choose_backend(backend: str, cost: str, device_type: str, dtype: torch.dtype, k: int, n: int) -> str:
    """The backend of one solve of ``n`` items x ``k`` views (the one dispatch of the solver).

    ``backend`` other than ``"auto"`` is used as given. ``"auto"``: ``dense`` for cost ``csd``; else
    :data:`AUTO_OVERRIDE` when set, else ``numba`` on the CPU (float32 / float64, numba installed) for the
    sizes of :data:`AUTO_NUMBA_ON_CPU`, else ``blocks``. A numba choice the input does not allow (another
    device or dtype) runs the blocks.
    """
    if backend == "auto":
        if cost != "cv":
            return "dense"
        if AUTO_OVERRIDE is not None:
            backend = AUTO_OVERRIDE
        else:
            backend = "numba" if n <= AUTO_NUMBA_ON_CPU.get(k, 0) else "blocks"
    numba_fits = device_type == "cpu" and dtype in (torch.float32, torch.float64) and numba_available()
    return "blocks" if backend == "numba" and not numba_fits else backend


def _check_backend(backend: str, cost: str) -> str:
    """Validate ``backend`` for ``cost``; one ``ValueError`` naming the problem."""
    if backend not in BACKENDS:
        raise ValueError(f"loss 'm3g': unknown backend {backend!r}; valid: {', '.join(BACKENDS)}")
    if cost != "cv" and backend in ("blocks", "numba"):
        raise ValueError(
            f"loss 'm3g': backend {backend!r} solves cost 'cv' only; cost {cost!r} needs 'dense' or 'auto'"
        )
    if backend == "numba" and not numba_available():
        raise ValueError("loss 'm3g': backend 'numba' needs numba: pip install 'multiview_app[fast]'")
    return backend


@dataclass(frozen=True)
class SolverOptions:
    """Parameters of one M3G solve (see :class:`M3GLoss`)."""

    epsilon: float = 0.2
    cost: str = "cv"
    tol: float = 1e-3
    max_iter: int = 1000
    anderson: int = 0
    init_potentials: str = "zeros"
    block: int = 0


@dataclass
class Solution:
    """One solve: the loss (0-d, Danskin gradient), its stats, the final log-potentials ``(k, n)`` and
    whether the solver already checked them finite (None: not checked)."""

    loss: torch.Tensor
    stats: LazyStats
    potentials: torch.Tensor
    finite: bool | None = None


def solve(
    z: torch.Tensor,
    options: SolverOptions,
    backend: str = "auto",
    *,
    init: torch.Tensor | None = None,
    hints: LoopHints | None = None,
    raw: bool = False,
) -> Solution:
    """M3G of embeddings ``z`` ``(n, k, d)`` on the backend :func:`choose_backend` picks.

    ``raw``: ``z`` is not yet checked / L2-normalized (done here; the numba ``k = 3`` kernels fuse both into
    the loss); else ``z`` is normalized (numba at ``k = 3`` then runs the blocks; numba has no ``k = 2`` kernel). ``init``: warm-start log-potentials ``(k, n)``; ``hints``: the
    block sizes of the last solve of this ``(n, k)`` (blocks). Numerical trouble falls back, never silently
    changing the value: numba -> the blocks; blocks in float32 -> the blocks in float64 -> dense
    (reported in ``stats``: ``fallback``, ``float64_retry``).
    """
    with one_cpu_thread(z.device):
        return _solve(z, options, backend, init, hints, raw)


@contextlib.contextmanager
def one_cpu_thread(device: torch.device) -> Iterator[None]:
    """Run a block at one torch intra-op thread when ``device`` is the CPU (restored after).

    The solver's operations are small (``n <= 128`` items, ``k <= 6`` views): a second thread gains little on
    a quiet machine, but on a busy one every parallel region waits at its barrier for a core another process
    holds, which made a fwd+bwd 10-30x slower (docs/benchmarks.md, "CPU under contention"). A switch costs
    well under a microsecond.
    """
    threads = torch.get_num_threads()
    if device.type != "cpu" or threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _solve(
    z: torch.Tensor,
    options: SolverOptions,
    backend: str,
    init: torch.Tensor | None,
    hints: LoopHints | None,
    raw: bool,
) -> Solution:
    """:func:`solve` at the thread count it runs with."""
    n, k = (z.shape[0], z.shape[1]) if z.dim() == 3 else (0, 0)
    backend = choose_backend(backend, options.cost, z.device.type, z.dtype, k, n)
    if backend == "numba" and raw and k == 3:
        fused = _fused(z, options, init)
        if fused is not None:
            return fused
    deferred = None
    if raw:
        z = check_embeddings(z, check_finite=False)
        deferred = [nonfinite_count(z)]
        z = _NormalizeOneThread.apply(z, 1e-12 if z.dtype == torch.float64 else 1e-6)
    if backend == "dense":
        _read_now(deferred)
        loss, stats, potentials = _materialized(z, options.epsilon, options.cost, options.tol, options.max_iter, init)
        return Solution(loss, stats, potentials)
    loss, stats, potentials, result = _factorized(
        z, options, init, hints=hints, deferred=deferred, numba=backend == "numba"
    )
    return Solution(loss, stats, potentials, result.potentials_finite)


class _NormalizeOneThread(_Normalize):
    """:func:`.base.normalize` whose backward also runs at one CPU thread (:func:`one_cpu_thread`)."""

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        with one_cpu_thread(grad.device):
            return _Normalize.backward(ctx, grad)


def _read_now(deferred: list[DeferredCheck] | None) -> None:
    """Run the deferred input checks at once (a read costs nothing on the CPU paths)."""
    for tensor, raise_on_bad in deferred or []:
        raise_on_bad(float(tensor))


def _fused(x: torch.Tensor, options: SolverOptions, init: torch.Tensor | None) -> Solution | None:
    """The numba ``k = 3`` loss on raw ``x`` ``(n, 3, d)`` (:mod:`.m3g_fast`), or None where it declines."""
    start = init
    if init is None and options.init_potentials == "diagonal":  # the blocks' cold start, as there
        grams = _pair_grams(normalize(x.detach()))
        start = _diagonal_split(grams, *_cv_log_kernel(3, options.epsilon))
    fused = m3g_fast.fused_three_view(x, options.epsilon, options.tol, options.max_iter, start)
    if fused is None:
        return None
    attach, diag_cost, result = fused
    stats = _value_and_stats(diag_cost, result, options.epsilon)
    return Solution(attach(stats["loss"]), stats, result.log_potentials.to(x.dtype))


def _cv_scale(k: int) -> float:
    """``s = (2 / (k - 1))^2`` of Alg. 2."""
    return (2.0 / (k - 1)) ** 2


def _pair_grams(z: torch.Tensor) -> torch.Tensor:
    """``G[l, m] = z[:, l] @ z[:, m].T`` as ``(k, k, n, n)`` from ``z`` ``(n, k, d)`` (one GEMM)."""
    n, k, d = z.shape
    flat = z.transpose(0, 1).reshape(k * n, d)
    return (flat @ flat.T).view(k, n, k, n).transpose(1, 2)


class _PairSurrogate(torch.autograd.Function):
    """0-d ``value`` whose gradient is that of ``sum_{l<m} <W_lm, z_l z_m^T>`` (Danskin).

    ``z`` ``(n, k, d)``, ``weights`` ``(k, k, n, n)`` (zero for ``l >= m``). Backward is one GEMM:
    ``grad[:, l] = sum_m (W + W^T)_lm z[:, m]`` with ``(W^T)_lm = W_ml^T``.
    """

    @staticmethod
    def forward(ctx, z: torch.Tensor, weights: torch.Tensor, value: float | torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(z, weights)
        if isinstance(value, torch.Tensor):  # device loop: the value stays on the device
            return value.detach().to(dtype=z.dtype, copy=True)
        return torch.tensor(value, dtype=z.dtype, device=z.device)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        z, weights = ctx.saved_tensors
        n, k, d = z.shape
        with one_cpu_thread(z.device):
            sym = (weights + weights.permute(1, 0, 3, 2)).transpose(1, 2).reshape(k * n, k * n)
            grad = (sym @ z.transpose(0, 1).reshape(k * n, d)).view(k, n, d).transpose(0, 1)
            return grad * grad_out, None, None


def _cost_of_sum(pair_sum: torch.Tensor, k: int, cost: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Cost ``C(S)`` and its derivative ``dC/dS`` (same shape as ``pair_sum``)."""
    if cost == "cv":
        s = _cv_scale(k)
        return s * (k * (k - 1) - 2.0 * pair_sum), torch.full_like(pair_sum, -2.0 * s)
    r2 = (k + 2.0 * pair_sum) / k**2
    clamped = r2.clamp_min(_CSD_MIN_R2)
    slope = torch.where(r2 > _CSD_MIN_R2, -(2.0 / k**2) / clamped, torch.zeros_like(r2))
    return -clamped.log(), slope


def _check_count(name: str, value: int, minimum: int) -> int:
    """``value`` if it is an integer >= ``minimum`` (not a bool), else one ``ValueError`` naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"loss 'm3g': parameter {name} must be an integer >= {minimum}, got {value!r}")
    return value


def _check_params(epsilon: float, cost: str, tol: float, max_iter: int) -> tuple[float, str, float, int]:
    """Validate the M3G parameters; one ``ValueError`` naming the bad one."""
    epsilon = check_positive("epsilon", epsilon, loss="m3g")
    tol = check_positive("tol", tol, loss="m3g")
    if cost not in COSTS:
        raise ValueError(f"loss 'm3g': unknown cost {cost!r}; valid: {', '.join(COSTS)}")
    return epsilon, cost, tol, _check_count("max_iter", max_iter, 1)


def _assemble(
    z: torch.Tensor,
    diag_cost: float | torch.Tensor,
    pair_weights: torch.Tensor,
    result: MMSinkhornResult,
    epsilon: float,
) -> tuple[torch.Tensor, LazyStats]:
    """Exact M3G value with the Danskin gradient attached, and the stats.

    ``diag_cost``: ``(1/n) sum_i C[i,...,i]`` (a float, or a float64 0-d tensor on the device
    loop: the value then stays on the device); ``pair_weights``: ``(k, k, n, n)`` ``dM3G/dG_lm`` for
    ``l < m`` (zeros elsewhere).
    """
    stats = _value_and_stats(diag_cost, result, epsilon)
    loss = _PairSurrogate.apply(z, pair_weights.to(z.dtype), stats.raw()["loss"])
    return loss, stats


def _value_and_stats(diag_cost: float | torch.Tensor, result: MMSinkhornResult, epsilon: float) -> LazyStats:
    """M3G value (``stats["loss"]``) from ``diag_cost = (1/n) sum_i C[i,...,i]`` and a solve;
    with a tensor ``diag_cost`` the value and ``ot`` are float64 0-d tensors (same arithmetic)."""
    n = result.log_potentials.shape[1]
    on_device = isinstance(diag_cost, torch.Tensor)
    potential_sum = result.log_potentials.sum()
    potential_sum = potential_sum.double() if on_device else float(potential_sum)
    ot = epsilon * potential_sum / n - epsilon * result.mass
    # an optimality gap: >= 0 exactly (the dual objective never exceeds OT); clip round-off
    gap = diag_cost - epsilon * (math.log(n) + 1.0) - ot
    value = gap.clamp_min(0.0) if on_device else max(gap, 0.0)
    return LazyStats(
        {
            "iterations": float(result.iterations),
            "marginal_error": float(result.marginal_error),
            "converged": float(result.converged),
            "ot": ot,
            "mass": float(result.mass),
            "fallback": float(result.path.endswith("->dense")),  # the factorized solve ended on the dense path
            "float64_retry": float("->float64" in result.path),  # a float32 solve was re-run in float64
            "loss": value,
        }
    )


def _pair_diagonal(grams: torch.Tensor) -> torch.Tensor:
    """``S[i,...,i] = sum_{l<m} G_lm[i, i]`` ``(n,)`` of the Gram blocks ``(k, k, n, n)``: half of all block
    diagonals minus the self blocks."""
    block_diagonals = grams.diagonal(dim1=-2, dim2=-1)  # (k, k, n)
    return (block_diagonals.sum(dim=(0, 1)) - block_diagonals.diagonal().sum(dim=1)) / 2


def m3g_materialized(
    z: torch.Tensor,
    epsilon: float = 0.2,
    cost: str = "cv",
    tol: float = 1e-3,
    max_iter: int = 1000,
    *,
    init: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """M3G on the full ``n^k`` cost tensor (dense log-domain Alg. 1, Danskin gradient).

    ``z``: normalized embeddings ``(n, k, d)`` (float32 / float64); ``init``: starting
    log-potentials ``(k, n)`` (warm start). Returns ``(loss, stats)``. This is the reference
    implementation and the ``csd`` path of :class:`M3GLoss`.
    """
    loss, stats, _ = _materialized(z, epsilon, cost, tol, max_iter, init)
    return loss, stats


def _materialized(
    z: torch.Tensor, epsilon: float, cost: str, tol: float, max_iter: int, init: torch.Tensor | None
) -> tuple[torch.Tensor, dict[str, float], torch.Tensor]:
    """:func:`m3g_materialized` plus the final log-potentials ``(k, n)``."""
    epsilon, cost, tol, max_iter = _check_params(epsilon, cost, tol, max_iter)
    n, k, _ = z.shape
    with torch.no_grad():
        grams = _pair_grams(z.detach())
        pair_sum = pairwise_sum_tensor(grams)
        cost_tensor, slope = _cost_of_sum(pair_sum, k, cost)
        del pair_sum
        log_kernel = cost_tensor.div_(-epsilon)
        result = mm_sinkhorn_dense(log_kernel, tol, max_iter, pair_weight=slope, init=init)
        del log_kernel
        diag_cost, diag_slope = _cost_of_sum(_pair_diagonal(grams), k, cost)
        # W_lm = sum (J - P) dC/dS: J puts 1/n on the diagonal of every pair block
        weights = -result.pair_marginals
        eye = torch.diag_embed(diag_slope / n)
        for l in range(k):
            for m in range(l + 1, k):
                weights[l, m] += eye
    loss, stats = _assemble(z, float(diag_cost.mean()), weights, result, epsilon)
    return loss, stats, result.log_potentials


def m3g_factorized(
    z: torch.Tensor,
    epsilon: float = 0.2,
    tol: float = 1e-3,
    max_iter: int = 1000,
    *,
    init: torch.Tensor | None = None,
    anderson: int = 0,
    init_potentials: str = "zeros",
) -> tuple[torch.Tensor, dict[str, float]]:
    """M3G with the ``cv`` cost, never materializing ``n^k`` (pairwise-factorized Alg. 1).

    ``z``: normalized embeddings ``(n, k, d)``; ``init``: starting log-potentials ``(k, n)`` (warm
    start); ``anderson``: Anderson acceleration depth of the sweeps (0 = plain Alg. 1);
    ``init_potentials``: cold start (no ``init``) from ``"zeros"`` or the ``"diagonal"`` split
    (see :func:`_diagonal_split`). Returns ``(loss, stats)``; ``stats["fallback"]`` is 1 when an
    underflow sent the solve to the exact dense path.
    """
    options = SolverOptions(
        epsilon, "cv", tol, max_iter, _check_count("anderson", anderson, 0), _check_init(init_potentials)
    )
    loss, stats, _, _ = _factorized(z, options, init)
    return loss, stats


def _check_init(init_potentials: str) -> str:
    if init_potentials not in INIT_POTENTIALS:
        raise ValueError(
            f"loss 'm3g': unknown init_potentials {init_potentials!r}; valid: {', '.join(INIT_POTENTIALS)}"
        )
    return init_potentials


def _cv_log_kernel(k: int, epsilon: float) -> tuple[float, float]:
    """``(scale, offset)`` of the ``cv`` log-kernel over the pairwise Gram blocks:
    ``-C / eps = sum_{l<m} scale G_lm - offset`` with ``scale = 2 s / eps``, ``offset = s k (k-1) / eps``."""
    s = _cv_scale(k)
    return 2.0 * s / epsilon, s * k * (k - 1) / epsilon


def _diagonal_split(grams: torch.Tensor, scale: float, offset: float) -> torch.Tensor:
    """Cold-start log-potentials ``(k, n)``: ``g_l[i] = -(A[i,...,i] + log n) / k`` for every view.

    ``A = scale sum_{l<m} G_lm - offset`` is the log-kernel; the split gives every diagonal entry
    of the plan the mass ``1/n`` -- the plan of perfectly aligned views -- and treats the views
    symmetrically (a zero start lets the first Gauss-Seidel update put everything on view 0, which
    the later sweeps redistribute slowly when the views are aligned).
    """
    k, n = grams.shape[0], grams.shape[2]
    log_diagonal = scale * _pair_diagonal(grams) - offset
    return (-(log_diagonal + math.log(n)) / k).expand(k, n).clone()


def _factorized(
    z: torch.Tensor,
    options: SolverOptions,
    init: torch.Tensor | None,
    *,
    hints: LoopHints | None = None,
    deferred: list[DeferredCheck] | None = None,
    numba: bool = False,
) -> tuple[torch.Tensor, LazyStats, torch.Tensor, MMSinkhornResult]:
    """:func:`m3g_factorized` plus the final log-potentials ``(k, n)`` and the solve, for normalized ``z``
    ``(n, k, d)``. ``numba``: ``k > 3`` sweeps on the numba kernels (:mod:`.sinkhorn_fast`; the blocks where
    they decline); else the blocks (:func:`.sinkhorn.mm_sinkhorn_pairwise`; ``hints`` / ``deferred`` as there:
    the value and the diagonal cost stay on the device)."""
    epsilon, _, tol, max_iter = _check_params(options.epsilon, "cv", options.tol, options.max_iter)
    n, k, _ = z.shape
    s = _cv_scale(k)
    with torch.no_grad():
        grams = _pair_grams(z.detach())
        scale, offset = _cv_log_kernel(k, epsilon)
        if init is None and options.init_potentials == "diagonal":
            init = _diagonal_split(grams, scale, offset)
        log_factors = grams * scale
        result = None
        valid_init = init is None or (tuple(init.shape) == (k, n) and bool(torch.isfinite(init).all()))
        if numba and k > 3 and valid_init and log_factors.layout == torch.strided:
            _read_now(deferred)
            deferred = None
            result = sinkhorn_fast.mm_sinkhorn_pairwise_numba(
                log_factors, offset, tol, max_iter, init, options.anderson
            )
        if result is None:
            result = mm_sinkhorn_pairwise(
                log_factors,
                offset,
                tol,
                max_iter,
                init=init,
                anderson=options.anderson,
                hints=hints,
                block=options.block,
                deferred=deferred,
            )
        diag_cost = s * (k * (k - 1) - 2.0 * _pair_diagonal(grams).double().mean())
        # W_lm = -2 s (I / n - P_lm) for l < m; pair_marginals is zero elsewhere
        weights = result.pair_marginals * (2.0 * s)
        weights.diagonal(dim1=-2, dim2=-1).sub_(_upper_mask(k, z.dtype, z.device) * (2.0 * s / n))
    loss, stats = _assemble(z, diag_cost, weights, result, epsilon)
    return loss, stats, result.log_potentials, result


@functools.lru_cache(maxsize=16)
def _upper_mask(k: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``(k, k, 1)``: 1 where ``l < m``."""
    return torch.triu(torch.ones(k, k, dtype=dtype, device=device), diagonal=1)[:, :, None]


@LOSSES.register("m3g")
class M3GLoss(MultiViewLoss):
    """Multi-marginal matching gap (registry name ``m3g``): Def. 3.1, Danskin gradient (Prop. 3.2).

    Piran, Klein, Thornton, Cuturi. *Contrasting Multiple Representations with the Multi-Marginal
    Matching Gap*. ICML 2024, arXiv:2405.19532.

    ``M3G = (1/n) sum_i C[i,...,i] - epsilon (log n + 1) - OT_epsilon(C)``: the cost of the identity
    matching of the ``k`` views minus the entropic multi-marginal optimal-transport cost (MM-Sinkhorn,
    Alg. 1, log domain), with the cost tensor of Alg. 2 (``cv``) or Eq. 13 (``csd``); >= 0 at convergence.
    The gradient is Danskin's (``dM3G/dC = J - P``), not back-propagated through the iterations.

    Deviations from the paper:

    * **cv scale.** Cost ``cv`` follows Alg. 2, ``C = (2/(k-1))^2 sum_{l<m} ||z_l - z_m||^2``, not Eq. 12's
      circular variance ``1 - R^2``. For unit vectors ``sum_{l<m} ||z_l - z_m||^2 = k^2 (1 - R^2)``, so
      ``C = a_k (1 - R^2)`` with ``a_k = 4 k^2 / (k-1)^2`` (16 at k = 2, 9 at k = 3, 7.1 at k = 4, 5.8 at
      k = 6). Since the objective is 1-homogeneous in ``(C, epsilon)``,
      ``M3G_alg2(z; epsilon) = a_k * M3G_eq12(z; epsilon / a_k)``: an ``epsilon`` used with Alg. 2's cost
      equals ``epsilon / a_k`` on the circular variance, so the same ``epsilon`` means a different entropic
      strength at each ``k`` and against cost ``csd`` (whose scale is that of ``-log R^2``, no ``a_k``).
      Carry a tuned ``epsilon`` from ``k`` to ``k'`` as ``epsilon * a_k' / a_k`` to keep its strength.
    * **entropy offset.** The identity term is ``h(J, C) = <J, C> + epsilon <J, log J - 1> =
      (1/n) sum_i C[i..i] - epsilon (log n + 1)``, as Eq. 8 defines ``h``; the printed Eq. 14 writes
      ``+ epsilon log n``. With Eq. 8's offset ``M3G >= 0`` and ``= 0`` exactly when the identity
      matching is the entropic optimum's value.
    * cost ``cv`` never materializes the ``n^k`` tensor (a factorized solver over the pairwise Gram blocks;
      same value); cost ``csd`` clamps ``R^2`` at 1e-6 before the log; the options below (warm start,
      Anderson acceleration, diagonal initial potentials, block size) change the speed, not the converged
      value or gradient.

    Parameters
    ----------
    epsilon : float, default 0.2
        Entropic regularization, > 0.
    cost : {"cv", "csd"}, default "cv"
    tol : float, default 1e-3
        Stop when ``sum_l ||m_l(P) - 1/n||_1 < tol``.
    max_iter : int, default 1000
        Sweep limit.
    warm_start, anderson, init_potentials, solver_block
        Solver options, described below.
    backend : {"auto", "blocks", "numba", "dense"}, default "auto"
        Which solver runs, described below.

    Returns
    -------
    torch.Tensor
        ``loss(z)`` for embeddings ``z`` of shape ``(n, k, d)`` (L2-normalized inside) is a 0-d tensor.

    Raises
    ------
    ValueError
        For an invalid parameter (named in the message); at call, for ``z`` that is not ``(n, k, d)`` with
        ``n >= 2``, ``k >= 2``, or that holds NaN / Inf.

    Warns
    -----
    RuntimeWarning
        Once per module when MM-Sinkhorn does not converge in ``max_iter`` sweeps (unless ``quiet_solver``).

    Notes
    -----
    Non-convergence sets ``last_stats["converged"] = 0``, is counted in ``solver_tally`` and warns once per
    module instance (not when ``quiet_solver``: the trainer reports the counts through the run's logger instead).

    ``warm_start``: start MM-Sinkhorn from the potentials of the previous call with the same
    ``(n, k)`` (else from zeros). The stopping rule is unchanged (and also checked before the first
    sweep), so value and Danskin gradient are those of a converged solve either way. The potentials
    ``(k, n)`` are module state: ``state_dict()["_extra_state"]["potentials"]`` (``None`` before the
    first call), restored by ``load_state_dict``. ``last_stats["warm_started"]`` says whether a call
    used them; ``last_stats["iterations"]`` counts its sweeps.

    ``anderson``: depth of the Anderson acceleration of the sweeps (0 = plain Alg. 1; 5 cuts the
    sweeps of aligned views several-fold). Cost ``cv`` with ``k != 3`` (the ``k = 3`` closed-form
    paths need few sweeps and run plain); the stopping rule on the plan is unchanged, so value
    and gradient equal the plain solve's at convergence.

    ``init_potentials``: where a cold solve starts, ``"zeros"`` (Alg. 1) or ``"diagonal"`` (every
    view ``-(A[i,...,i] + log n) / k``: the plan of aligned views; with ``anderson`` the fastest
    start on aligned views). Cost ``cv``, every ``k``; a warm start takes precedence.

    ``backend``: which solver runs (:func:`solve`, the one dispatch; same value and gradient on every backend,
    all tested against the dense float64 reference). ``"blocks"``: torch sweeps in blocks (:mod:`.sinkhorn`;
    compiled by ``torch.compile`` on a GPU, eager on the CPU unless ``MVAPP_M3G_COMPILE=1``: :mod:`._compile`),
    the stopping rule, checks and sweep counter on the device, one host read per block. ``"numba"``: CPU
    kernels, ``k = 3`` fused with the normalization and the backward (:mod:`.m3g_fast`), ``k > 3`` sweeps driven
    by a host loop (:mod:`.sinkhorn_fast`); where the input does not fit (another device, dtype) or the
    values underflow, the blocks run. ``"dense"``: the ``n^k`` log-domain solver (cost ``csd``'s only one).
    ``"auto"`` (default): the table :data:`AUTO_NUMBA_ON_CPU` (numba for small CPU problems, else the blocks;
    ``dense`` for ``csd``); ``MVAPP_M3G_BACKEND`` (read once at import) replaces what ``auto`` picks.
    ``solver_block``: sweeps in the first block (0 = adaptive: the last call's count for the same
    ``(n, k)``; then a second block sized per device type, doubling: :data:`.sinkhorn._SECOND_BLOCK`). The former ``solver_loop`` parameter is refused with
    an error saying so (there is one loop).

    Examples
    --------
    >>> import torch
    >>> from multiview_app.losses import M3GLoss
    >>> z = torch.randn(8, 3, 16, generator=torch.Generator().manual_seed(0), requires_grad=True)
    >>> m3g = M3GLoss(epsilon=0.2)
    >>> loss = m3g(z)
    >>> loss.shape, bool(loss >= 0), bool(m3g.last_stats["converged"])
    (torch.Size([]), True, True)
    >>> loss.backward()
    >>> z.grad.shape
    torch.Size([8, 3, 16])
    """

    gather_across_processes: ClassVar[bool] = False
    removed_parameters: ClassVar[dict[str, str]] = {
        "solver_loop": "the sweeps always run in device-resident blocks (CPU and GPU alike; numba kernels for "
        "the small CPU problems of the dispatch table, see backend): remove the key",
    }

    def __init__(
        self,
        epsilon: float = 0.2,
        cost: str = "cv",
        tol: float = 1e-3,
        max_iter: int = 1000,
        warm_start: bool = False,
        anderson: int = 0,
        init_potentials: str = "zeros",
        solver_block: int = 0,
        backend: str = "auto",
    ) -> None:
        super().__init__()
        self.epsilon, self.cost, self.tol, self.max_iter = _check_params(epsilon, cost, tol, max_iter)
        self.backend = _check_backend(backend, self.cost)
        if not isinstance(warm_start, bool):
            raise ValueError(f"loss 'm3g': parameter warm_start must be true or false, got {warm_start!r}")
        self.warm_start = warm_start
        self.anderson = _check_count("anderson", anderson, 0)
        self.init_potentials = _check_init(init_potentials)
        self.solver_block = _check_count("solver_block", solver_block, 0)
        self.solver_tally = SolverTally(
            "M3G MM-Sinkhorn", f"max_iter {self.max_iter}, tol {self.tol:g}, epsilon {self.epsilon:g}"
        )
        self._loop_hints: dict[tuple[int, int], LoopHints] = {}  # block sizes per (n, k)
        self.potentials: torch.Tensor | None = None  # (k, n) log-potentials of the last call (warm start)
        self._warned = False

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """Loss of raw embeddings ``z`` ``(n, k, d)`` (checked and L2-normalized by :func:`solve`; the blocks
        read the NaN / Inf check back with their first block, no read of its own)."""
        if not isinstance(z, torch.Tensor):
            return super().forward(z)
        return self._solve(z, raw=True)

    def compute(self, z: torch.Tensor) -> torch.Tensor:
        """M3G of normalized ``z`` ``(n, k, d)``."""
        return self._solve(z, raw=False)

    def _solve(self, z: torch.Tensor, *, raw: bool) -> torch.Tensor:
        init = self._init(z)
        if raw and self.cost != "cv":  # the dense path checks its input at once (check_finite as every loss)
            z = normalize(check_embeddings(z, min_views=self.min_views, check_finite=self.check_finite))
            raw = False
        hints = self._loop_hints.setdefault((z.shape[0], z.shape[1]), LoopHints()) if z.dim() == 3 else None
        options = SolverOptions(
            self.epsilon, self.cost, self.tol, self.max_iter, self.anderson, self.init_potentials, self.solver_block
        )
        solution = solve(z, options, self.backend, init=init, hints=hints, raw=raw)
        self.last_stats = self._finish(
            solution.stats, solution.potentials, warm_started=init is not None, finite=solution.finite
        )
        return solution.loss

    def _init(self, z: torch.Tensor) -> torch.Tensor | None:
        """Warm-start log-potentials ``(k, n)`` for ``z`` ``(n, k, d)``, or None (cold start)."""
        n, k = (z.shape[0], z.shape[1]) if isinstance(z, torch.Tensor) and z.dim() == 3 else (-1, -1)
        if self.warm_start and self.potentials is not None and tuple(self.potentials.shape) == (k, n):
            return self.potentials.to(device=z.device, dtype=z.dtype)
        return None

    def _finish(
        self, stats: LazyStats, potentials: torch.Tensor, *, warm_started: bool, finite: bool | None = None
    ) -> LazyStats:
        """Record the warm-start state and warn once on non-convergence; returns ``stats``.
        ``finite``: the solver already checked the potentials (None: check here)."""
        stats["warm_started"] = float(warm_started)
        if self.warm_start and (finite if finite is not None else bool(torch.isfinite(potentials).all())):
            self.potentials = _center(potentials.detach())
        converged = bool(stats["converged"])
        if self.solver_tally is not None:
            self.solver_tally.add(converged, stats["marginal_error"])
        if not converged and not self._warned and not self.quiet_solver:
            self._warned = True
            warnings.warn(
                f"m3g: MM-Sinkhorn did not converge in {self.max_iter} iterations (marginal error "
                f"{stats['marginal_error']:.3g} >= tol {self.tol:g}, epsilon {self.epsilon:g}); the "
                "Danskin gradient is approximate. Raise max_iter or epsilon. (warned once per module)",
                RuntimeWarning,
                stacklevel=4,
            )
        return stats

    def get_extra_state(self) -> dict[str, Any]:
        """Warm-start potentials ``(k, n)`` (or None) for checkpoints (``state_dict``)."""
        return {"potentials": None if self.potentials is None else self.potentials.clone()}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        potentials = state.get("potentials") if isinstance(state, dict) else None
        if potentials is not None and (
            not isinstance(potentials, torch.Tensor)
            or potentials.dim() != 2
            or not bool(torch.isfinite(potentials).all())
        ):
            raise ValueError(f"loss 'm3g': extra state 'potentials' must be a finite (k, n) tensor, got {potentials!r}")
        self.potentials = potentials

    def extra_repr(self) -> str:
        return f"epsilon={self.epsilon}, cost={self.cost!r}, tol={self.tol}, max_iter={self.max_iter}, warm_start={self.warm_start}, anderson={self.anderson}, init_potentials={self.init_potentials!r}, solver_block={self.solver_block}, backend={self.backend!r}"


def _center(potentials: torch.Tensor) -> torch.Tensor:
    """Fix the gauge of log-potentials ``(k, n)``: views ``0..k-2`` mean zero, the last one carries
    the total (the plan ``exp(A + g_1 (+) ... (+) g_k)`` is unchanged)."""
    means = potentials.mean(dim=1, keepdim=True)
    shift = means.clone()
    shift[-1] = -means[:-1].sum()
    return potentials - shift


__all__ = ["COSTS", "M3GLoss", "m3g_factorized", "m3g_materialized"]
