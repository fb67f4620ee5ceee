"""MVEB (Wen et al., Eq. 11) generalized to k views, with the Stein score estimator (App. A, Eq. 26).

    L = -A + beta * mean_alpha mean_i <stopgrad(S_i alpha), z_i alpha>
    A = mean_i mean_{alpha < beta} <z_i alpha, z_i beta>

``S_alpha`` ``(n, d)`` estimates the score of the batch of view ``alpha`` with the vMF kernel
``K_ij = exp(<z_i, z_j> / Delta)``: ``S = -(K + eta I)^{-1} G``, ``G_i = (z_i / Delta) sum_m K_im``,
solved (not inverted) without gradient in float64. ``Delta`` = median of ``1 - <z_i, z_j>`` over
``i != j``, floored at 0.1, per view.

The score is a constant of the loss (no gradient flows through it), so the backward pass only
sees ``-A + beta mean <S, z>`` (``O(n k d)``); the memory lies in the estimator. Two paths:

* dense (:func:`stein_score`): the ``(n, n)`` Gram and kernel matrices of every view at once, the
  median over the ``n (n - 1) / 2`` pairs, one LU solve (``O(n^2)`` memory per view, float64).
* blockwise (:func:`stein_score_blockwise`): one view at a time, one block of kernel rows at a
  time (:func:`multiview_app.losses.contrastive.block_rows`), never an ``(n, n)`` matrix. The
  bandwidth is the exact median, found by selection over blockwise passes
  (:func:`blockwise_bandwidth`: histogram refinement, then a sort of the few values left); the
  linear system ``(K + eta I) S = -G`` (symmetric positive definite: ``K`` is a positive definite
  kernel's Gram matrix) is solved by conjugate gradients whose products ``K V`` recompute each block
  of ``K`` (:func:`kernel_matmul`), preconditioned by a randomized Nystrom approximation of ``K``
  (:func:`nystrom_preconditioner`, rank 512), reading its residual back once every ``CG_BLOCK`` steps. Memory ``O(block + n (d + rank))``; time
  ``O(iterations n^2 d)`` per view (tens of iterations to a relative residual of 1e-12 on the
  embeddings tried, against the dense ``O(n^3)`` LU: where both fit, the dense path is faster).

``MVEBLoss(chunked=None)`` takes the dense path up to
:data:`~multiview_app.losses.contrastive.DENSE_MAX_LOGITS` kernel entries (``k n^2``) and the
blockwise path above; both give the same values and gradients to float64 tolerance (tests).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator

import torch

from . import LOSSES
from .base import MultiViewLoss, SolverTally, check_chunked, check_positive
from .contrastive import block_rows, use_blockwise

MIN_BANDWIDTH = 0.1
# Blockwise path: relative residual (per column, ||(K + eta I) S + G|| / ||G||) at which conjugate
# gradients stop; float64 reaches it for the kernels met in practice (tests: dense agreement).
CG_RTOL = 1e-12
# Rank of the Nystrom preconditioner of the blockwise solve (``n x rank`` float64: 128 MiB at n = 32,768):
# captures the kernel's large eigenvalues (which make plain CG slow for clustered or low-dimensional
# embeddings); its sketch costs about 2 kernel products at d = 256.
NYSTROM_RANK = 512
# Bins of one histogram pass of the blockwise median, and the largest number of candidate values
# that the last pass gathers and sorts (8 MiB of float64).
_MEDIAN_BINS = 4096
_MEDIAN_GATHER_MAX = 1 << 20
# Conjugate-gradient steps between host reads of the residual (the steps of a block past convergence
# are no-ops, so a larger block reads less and wastes up to block - 1 kernel products)
CG_BLOCK = 4


def median(values: torch.Tensor) -> torch.Tensor:
    """Median along the last dimension (mean of the two middle values for an even count):
    ``(..., m) -> (...)``."""
    m = values.shape[-1]
    low = torch.kthvalue(values, (m + 1) // 2, dim=-1).values
    high = torch.kthvalue(values, m // 2 + 1, dim=-1).values
    return 0.5 * (low + high)


def bandwidth_from_gram(gram: torch.Tensor, floor: float = MIN_BANDWIDTH) -> torch.Tensor:
    """Median of ``1 - gram[i, j]`` over ``i < j`` (== over ``i != j``), at least ``floor``:
    ``(..., n, n) -> (...)``."""
    n = gram.shape[-1]
    rows, cols = torch.triu_indices(n, n, offset=1, device=gram.device)
    return median(1.0 - gram[..., rows, cols]).clamp_min(floor)


def vmf_bandwidth(z: torch.Tensor, floor: float = MIN_BANDWIDTH) -> torch.Tensor:
    """Median pairwise cosine distance ``1 - <z_i, z_j>`` of unit rows ``z`` ``(..., n, d)``,
    floored: ``-> (...)``."""
    return bandwidth_from_gram(z @ z.transpose(-1, -2), floor)


@torch.no_grad()
def stein_score(z: torch.Tensor, eta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Stein score estimate with the vMF kernel, per batch of unit vectors ``z`` ``(..., n, d)``.

    Returns ``(S (..., n, d), bandwidth (...))`` with ``(K + eta I) S = -G``,
    ``K_ij = exp(<z_i, z_j> / Delta)``, ``G_i = (z_i / Delta) sum_m K_im``; computed in float64
    without gradient (batched linear solve), returned in ``z``'s dtype.
    """
    x = z.detach().double()
    gram = x @ x.transpose(-1, -2)  # (..., n, n)
    delta = bandwidth_from_gram(gram)[..., None, None]  # (..., 1, 1)
    kernel = torch.exp(gram / delta)
    g = x / delta * kernel.sum(dim=-1, keepdim=True)  # (..., n, d)
    n = x.shape[-2]
    eye = torch.eye(n, dtype=x.dtype, device=x.device)
    # symmetric positive definite (vMF kernel + ridge), with the ridge at least cholesky_safe_ridge(n): the
    # factorization cannot fail, so no host read decides a fallback
    system = kernel + max(eta, cholesky_safe_ridge(n)) * eye
    # Cholesky: half the flops of LU, and unlike the batched LU of torch's MKL build it stays correct
    # after torch.set_num_threads(1) -> (2) in one process (the batched getrf then returns bad pivots)
    factor, info = torch.linalg.cholesky_ex(system)
    score = -torch.cholesky_solve(g, factor)
    # info != 0 only for non-finite embeddings (the ridge rules out the rest): NaN, as the input
    score = torch.where((info == 0)[..., None, None], score, float("nan"))
    return score.to(z.dtype), delta[..., 0, 0].to(z.dtype)


def cholesky_safe_ridge(n: int) -> float:
    """Smallest ridge ``eta`` for which the float64 Cholesky factorization of ``K + eta I`` (``K`` the
    ``(n, n)`` vMF kernel matrix at bandwidth >= ``MIN_BANDWIDTH``) is guaranteed to run to completion
    (Demmel 1989: the diagonal-scaled matrix's smallest eigenvalue above ``n (n + 1) eps``, with a factor 2
    to spare; every diagonal entry of ``K`` is ``exp(1 / Delta) <= exp(1 / MIN_BANDWIDTH)``). About
    ``6e-7`` at ``n = 256`` and ``6e-4`` at ``n = 8192``: below the default ``eta`` (0.01) at every size
    the dense path takes; a smaller ``eta`` is raised to it."""
    return 2.0 * n * (n + 1) * torch.finfo(torch.float64).eps * math.exp(1.0 / MIN_BANDWIDTH)


# --------------------------------------------------------------------------- blockwise path
def _pair_distances(x: torch.Tensor, rows: int) -> Iterator[torch.Tensor]:
    """The ``n (n - 1) / 2`` distances ``1 - <x_i, x_j>``, ``i < j``, of ``x`` ``(n, d)``, as 1-D
    tensors, one block of ``rows`` rows at a time (row block ``[s, e)`` against columns ``s..n-1``)."""
    n = x.shape[0]
    for start in range(0, n - 1, rows):  # the last row has no pair of its own
        stop = min(n, start + rows)
        block = torch.mm(x[start:stop], x[start:].T)  # (stop - start, n - start)
        upper = torch.ones(block.shape, dtype=torch.bool, device=x.device).triu_(1)
        yield 1.0 - block[upper]


def blockwise_bandwidth(
    x: torch.Tensor, floor: float = MIN_BANDWIDTH, *, rows: int | None = None, gather_max: int = _MEDIAN_GATHER_MAX
) -> torch.Tensor:
    """:func:`vmf_bandwidth` of unit rows ``x`` ``(n, d)`` without the ``(n, n)`` Gram matrix: ``-> ()``.

    Exact selection of the two middle order statistics of the pair distances over blockwise passes:
    pass 1 counts the values below ``floor`` (if the upper middle one is among them the answer is
    ``floor``) and finds the range; each further pass histograms the values inside the current range
    (``_MEDIAN_BINS`` bins; per bin count, min and max) and narrows the range to the bin holding the
    lower middle rank; once at most ``gather_max`` values remain they are gathered and sorted (the
    upper middle rank, if beyond them, is the smallest value above the range, taken in that pass).
    Typically 3 passes of ``n^2 d / 2`` multiply-adds; memory one block.
    """
    n = x.shape[0]
    rows = rows or block_rows(n, n)
    pairs = n * (n - 1) // 2
    low_rank, high_rank = (pairs + 1) // 2 - 1, pairs // 2  # 0-based ranks of the two middle values
    below_floor, lo, hi = 0, math.inf, -math.inf
    for values in _pair_distances(x, rows):
        below_floor += int((values < floor).sum())
        lo, hi = min(lo, float(values.min())), max(hi, float(values.max()))
    if below_floor > high_rank:  # both middle values below the floor
        return x.new_tensor(floor)
    below, inside = 0, pairs  # values < lo, values in [lo, hi]
    while lo < hi and inside > gather_max:
        counts = torch.zeros(_MEDIAN_BINS, dtype=torch.long, device=x.device)
        mins = torch.full((_MEDIAN_BINS,), math.inf, dtype=x.dtype, device=x.device)
        maxs = torch.full((_MEDIAN_BINS,), -math.inf, dtype=x.dtype, device=x.device)
        width = (hi - lo) / _MEDIAN_BINS
        for values in _pair_distances(x, rows):
            values = values[(values >= lo) & (values <= hi)]
            bins = ((values - lo) / width).long().clamp_(0, _MEDIAN_BINS - 1)  # monotone in the value
            counts += torch.bincount(bins, minlength=_MEDIAN_BINS)
            mins.scatter_reduce_(0, bins, values, "amin")
            maxs.scatter_reduce_(0, bins, values, "amax")
        cumulative = counts.cumsum(0)
        chosen = int((cumulative <= low_rank - below).sum())  # the bin holding that rank (cumulative is sorted)
        below += int(cumulative[chosen - 1]) if chosen > 0 else 0
        inside = int(counts[chosen])
        lo, hi = float(mins[chosen]), float(maxs[chosen])  # the bin's values are exactly those in [lo, hi]
    low, high = _gather_middle(x, rows, lo, hi, inside, low_rank - below, high_rank - below)
    return x.new_tensor(max(0.5 * (low + high), floor))


def _gather_middle(
    x: torch.Tensor, rows: int, lo: float, hi: float, inside: int, low_index: int, high_index: int
) -> tuple[float, float]:
    """Order statistics ``low_index`` and ``high_index`` (``<= low_index + 1``) of the pair
    distances counted from ``lo``, given that ``inside`` of them lie in ``[lo, hi]``: those values
    sorted (only counted when ``lo == hi``), or, past their end, the smallest value above ``hi``."""
    kept: list[torch.Tensor] = []
    above = math.inf
    need_above = high_index >= inside
    if lo < hi or need_above:
        for values in _pair_distances(x, rows):
            if lo < hi:
                kept.append(values[(values >= lo) & (values <= hi)])
            if need_above and bool((values > hi).any()):
                above = min(above, float(values[values > hi].min()))
    if lo == hi:  # all equal: no values to gather
        return lo, (lo if not need_above else above)
    candidates = torch.sort(torch.cat(kept)).values
    low = float(candidates[low_index])
    high = float(candidates[high_index]) if not need_above else above
    return low, high


def kernel_matmul(x: torch.Tensor, delta: float, v: torch.Tensor, rows: int | None = None) -> torch.Tensor:
    """``K v`` for the vMF kernel ``K_ij = exp(<x_i, x_j> / delta)`` of ``x`` ``(n, d)`` and ``v``
    ``(n, c)`` -> ``(n, c)``, one block of ``rows`` kernel rows at a time (never ``(n, n)``)."""
    n = x.shape[0]
    rows = rows or block_rows(n, n)
    out = v.new_empty(n, v.shape[1])
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        block = torch.mm(x[start:stop], x.T).div_(delta).exp_()
        torch.mm(block, v, out=out[start:stop])
    return out


def nystrom_preconditioner(
    apply_kernel: Callable[[torch.Tensor], torch.Tensor], like: torch.Tensor, rank: int, eta: float, seed: int = 0
) -> Callable[[torch.Tensor], torch.Tensor]:
    """Randomized Nystrom preconditioner of ``K + eta I`` (``K`` PSD ``(n, n)``, ``apply_kernel(V) = K V``).

    Sketch ``Y = K Omega`` with an orthonormal Gaussian ``Omega`` ``(n, rank)`` (own generator seeded
    ``seed``: deterministic, global RNG untouched), stabilized by a tiny shift ``nu``;
    ``K ~ U diag(lam) U^T``. Returns ``V -> P^{-1} V`` with
    ``P^{-1} = (lam_min + eta) U (diag(lam) + eta)^{-1} U^T + (I - U U^T)``: the top ``rank``
    eigenvalues of ``K + eta I`` are mapped near ``lam_min + eta``, so CG only sees the tail.
    ``like`` ``(n, d)`` gives n, dtype and device. Memory ``O(n rank)``.
    """
    n = like.shape[0]
    generator = torch.Generator(device=like.device).manual_seed(seed)
    omega = torch.randn(n, rank, dtype=like.dtype, device=like.device, generator=generator)
    omega = torch.linalg.qr(omega).Q
    sketch = apply_kernel(omega)
    nu = torch.finfo(like.dtype).eps * float(sketch.norm())
    sketch.add_(omega, alpha=nu)
    factor = torch.linalg.cholesky(omega.T @ sketch)  # (rank, rank) lower
    basis = torch.linalg.solve_triangular(factor, sketch.T, upper=False).T  # (n, rank)
    eigvecs, singular, _ = torch.linalg.svd(basis, full_matrices=False)
    eigvals = (singular.square() - nu).clamp_min(0.0)
    weights = (eigvals[-1] + eta) / (eigvals + eta) - 1.0  # (rank,)

    def apply_inverse(v: torch.Tensor) -> torch.Tensor:
        return v + eigvecs @ (weights[:, None] * (eigvecs.T @ v))

    return apply_inverse


def conjugate_gradient(
    apply: Callable[[torch.Tensor], torch.Tensor],
    rhs: torch.Tensor,
    rtol: float,
    max_iter: int,
    precondition: Callable[[torch.Tensor], torch.Tensor] | None = None,
    block: int = CG_BLOCK,
) -> tuple[torch.Tensor, int, float]:
    """Solve ``A X = rhs`` (``A`` symmetric positive definite, given as ``apply(V) = A V``) for every
    column of ``rhs`` ``(n, c)`` at once (one preconditioned CG recurrence per column, shared
    products; ``precondition(V) = M^{-1} V``, symmetric positive definite, or None).

    Stops when every column's relative residual ``||A x - b|| / ||b||`` is ``<= rtol`` (or is NaN) or
    after ``max_iter`` products. The iterations run in blocks of ``block``: the residual stays on the
    device, the host reads it once per block, and the steps of a block after the stop are no-ops (step
    length 0), so the result is that of stopping at the first step that meets ``rtol``.
    Returns ``(X (n, c), products to the stop, worst relative residual)``.
    """
    precondition = precondition or (lambda v: v)
    solution = torch.zeros_like(rhs)
    residual = rhs.clone()
    rhs_norm = rhs.norm(dim=0).clamp_min(torch.finfo(rhs.dtype).tiny)
    preconditioned = precondition(residual)
    direction = preconditioned.clone()
    rho = (residual * preconditioned).sum(dim=0)
    worst = (residual.norm(dim=0) / rhs_norm).max()
    iterations = torch.zeros((), dtype=torch.long, device=rhs.device)
    launched = 0
    while launched < max_iter and float(worst) > rtol:  # one host read per block
        for _ in range(min(block, max_iter - launched)):
            active = worst > rtol  # False once stopped (and for NaN): the step below changes nothing
            product = apply(direction)
            curvature = (direction * product).sum(dim=0)
            alpha = torch.where(active & (curvature > 0), rho / curvature, torch.zeros_like(rho))
            solution.addcmul_(direction, alpha)
            residual.addcmul_(product, alpha, value=-1.0)
            worst = (residual.norm(dim=0) / rhs_norm).max()
            iterations += active
            preconditioned = precondition(residual)
            rho_next = (residual * preconditioned).sum(dim=0)
            beta = torch.where(rho > 0, rho_next / rho, torch.zeros_like(rho))
            direction = torch.where(active, direction * beta + preconditioned, direction)
            rho = torch.where(active, rho_next, rho)
        launched += block
    return solution, int(iterations), float(worst)


@torch.no_grad()
def stein_score_blockwise(
    z: torch.Tensor,
    eta: float,
    *,
    rows: int | None = None,
    rtol: float = CG_RTOL,
    max_iter: int | None = None,
    tally: SolverTally | None = None,
    warn: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`stein_score` without ``(n, n)`` matrices: ``z`` ``(..., n, d)`` unit rows ->
    ``(S (..., n, d), bandwidth (...))``, one batch (view) at a time, in float64.

    Bandwidth by :func:`blockwise_bandwidth`; ``(K + eta I) S = -G`` by :func:`conjugate_gradient`
    with blockwise products :func:`kernel_matmul`, preconditioned by a rank ``min(n, NYSTROM_RANK)``
    :func:`nystrom_preconditioner` (``rtol`` relative residual per column, at most ``max_iter``
    products, default ``2 n + 10``; a ``RuntimeWarning`` names the residual if it was not reached, unless
    ``warn`` is false; every solve is counted in ``tally`` when given).
    ``rows``: kernel rows per block (default :func:`~multiview_app.losses.contrastive.block_rows`).
    """
    lead, (n, d) = z.shape[:-2], z.shape[-2:]
    eta = max(eta, cholesky_safe_ridge(n))  # the dense path's ridge (same system)
    batches = z.detach().double().reshape(-1, n, d)
    scores = torch.empty_like(batches)
    bandwidths = batches.new_empty(batches.shape[0])
    for b, x in enumerate(batches):
        delta = float(blockwise_bandwidth(x, rows=rows))
        row_sums = kernel_matmul(x, delta, x.new_ones(n, 1), rows)  # (n, 1): sum_m K_im
        g = x / delta * row_sums
        apply_kernel = lambda v, x=x, delta=delta: kernel_matmul(x, delta, v, rows)  # noqa: E731
        precondition = nystrom_preconditioner(apply_kernel, x, min(n, NYSTROM_RANK), eta)
        solution, iterations, residual = conjugate_gradient(
            lambda v, a=apply_kernel: a(v).add_(v, alpha=eta), -g, rtol, max_iter or 2 * n + 10, precondition
        )
        converged = bool(residual <= rtol)  # False for NaN too
        if tally is not None:
            tally.add(converged, residual)
        if not converged and warn:
            warnings.warn(
                f"mveb: blockwise Stein solve stopped after {iterations} conjugate-gradient steps at "
                f"relative residual {residual:.2e} (target {rtol:.0e}); chunked=false solves densely",
                RuntimeWarning,
                stacklevel=2,
            )
        scores[b], bandwidths[b] = solution, delta
    return scores.view(*lead, n, d).to(z.dtype), bandwidths.view(lead).to(z.dtype)


@LOSSES.register("mveb")
class MVEBLoss(MultiViewLoss):
    """Multi-view entropy bottleneck for ``k`` views (registry name ``mveb``).

    Wen, Wang, Liu, Xu. *MVEB: Self-Supervised Learning with Multi-View Entropy Bottleneck*. IEEE TPAMI 2024,
    arXiv:2403.19078.

    Eq. 10-11: ``L = -A + beta * mean_alpha mean_i <stopgrad(S_i alpha), z_i alpha>`` with the alignment
    ``A = mean_i mean_{alpha < beta} <z_i alpha, z_i beta>`` and ``S_alpha`` ``(n, d)`` the Stein score
    estimate (Sec. 4.4, App. A, Eq. 26) of view ``alpha``'s batch under the von Mises-Fisher kernel
    ``K_ij = exp(<z_i, z_j> / Delta)``: ``S = -(K + eta I)^{-1} G``, ``G_i = (z_i / Delta) sum_m K_im``.
    ``last_stats``: ``alignment`` (A), ``entropy_surrogate`` (``mean <S, z>``), ``bandwidth`` (mean Delta).

    Deviations from the paper: the two-view objective is generalized to ``k`` views (alignment averaged over
    the ``k (k - 1) / 2`` view pairs, one score estimate per view); the bandwidth ``Delta`` is the median of
    ``1 - <z_i, z_j>`` over ``i != j`` floored at 0.1, per view; the linear system is solved (never
    inverted) in float64 without gradient, by Cholesky (dense path), with the ridge at least
    :func:`cholesky_safe_ridge` (``n``) so that the factorization cannot fail (below the default ``eta`` at
    every size the dense path takes). The dense path reads nothing back to the host; the blockwise path
    reads its median selection's passes and its conjugate-gradient residual once per ``CG_BLOCK`` steps.

    Parameters
    ----------
    beta : float, default 0.01
        Weight of the entropy term, >= 0 (0: pure alignment, which collapses).
    eta : float, default 0.01
        Ridge of the Stein system, > 0.
    chunked : bool or None, default None
        ``None``: dense Stein solve up to ``DENSE_MAX_LOGITS`` kernel entries (``k n^2``), blockwise
        conjugate gradients above (memory ``O(block + n k d)``); ``True`` / ``False`` force a path (same
        values and gradients to the solver's tolerance).

    Returns
    -------
    torch.Tensor
        ``loss(z)`` for embeddings ``z`` of shape ``(n, k, d)`` (L2-normalized inside) is a 0-d tensor.

    Raises
    ------
    ValueError
        For ``beta < 0`` or ``eta <= 0``; at call, for ``z`` that is not ``(n, k, d)`` with ``n >= 2``,
        ``k >= 2``, or that holds NaN / Inf.

    Examples
    --------
    >>> import torch
    >>> from multiview_app.losses import MVEBLoss
    >>> z = torch.randn(8, 3, 16, generator=torch.Generator().manual_seed(0), requires_grad=True)
    >>> loss = MVEBLoss(beta=0.01)(z)
    >>> loss.shape
    torch.Size([])
    >>> u = torch.nn.functional.normalize(z[:, :2], dim=-1)  # beta = 0: minus the mean cosine of the views
    >>> torch.allclose(MVEBLoss(beta=0.0)(z[:, :2]), -(u[:, 0] * u[:, 1]).sum(-1).mean())
    True
    """

    def __init__(self, beta: float = 0.01, eta: float = 0.01, chunked: bool | None = None) -> None:
        super().__init__()
        try:
            beta = float(beta)
        except (TypeError, ValueError):
            raise ValueError(f"loss '{self.name}': parameter beta must be a number, got {beta!r}") from None
        if not (0.0 <= beta < float("inf")):
            raise ValueError(f"loss '{self.name}': parameter beta must be >= 0, got {beta}")
        self.beta = beta
        self.eta = check_positive("eta", eta, loss=self.name)
        self.chunked = check_chunked(chunked, loss=self.name)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, eta={self.eta}, chunked={self.chunked}"

    def compute(self, z: torch.Tensor) -> torch.Tensor:
        k = z.shape[1]
        # sum_{alpha < beta} <z_alpha, z_beta> = (||sum_alpha z_alpha||^2 - sum_alpha ||z_alpha||^2) / 2
        pair_sum = 0.5 * (z.sum(dim=1).pow(2).sum(dim=-1) - z.pow(2).sum(dim=(1, 2)))  # (n,)
        alignment = pair_sum.mean() / (k * (k - 1) / 2)
        n = z.shape[0]
        if use_blockwise(self.chunked, k * n, n):  # an iterative solve: counted (the trainer reports it)
            if self.solver_tally is None:
                self.solver_tally = SolverTally(
                    "MVEB blockwise Stein solve", f"CG to relative residual {CG_RTOL:.0e}, at most 2 n + 10 steps"
                )
            score, bandwidth = stein_score_blockwise(
                z.transpose(0, 1), self.eta, tally=self.solver_tally, warn=not self.quiet_solver
            )
        else:
            score, bandwidth = stein_score(z.transpose(0, 1), self.eta)  # (k, n, d), (k,): one batch per view
        entropy_surrogate = (score.transpose(0, 1) * z).sum(dim=-1).mean()
        self.last_stats.update(  # device tensors until a logging step reads them
            alignment=alignment.detach(), entropy_surrogate=entropy_surrogate.detach(), bandwidth=bandwidth.mean()
        )
        return -alignment + self.beta * entropy_surrogate
