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

import math
import warnings
from typing import ClassVar

import torch

from . import LOSSES
from .base import MultiViewLoss, check_positive
from .sinkhorn import MMSinkhornResult, mm_sinkhorn_dense, mm_sinkhorn_pairwise, pairwise_sum_tensor

COSTS = ("cv", "csd")
# R^2 is clamped to at least this before the log of the csd cost (k antipodal-cancelling views).
_CSD_MIN_R2 = 1e-6


def _cv_scale(k: int) -> float:
    """``s = (2 / (k - 1))^2`` of Alg. 2."""
    return (2.0 / (k - 1)) ** 2


def _pair_grams(z: torch.Tensor) -> torch.Tensor:
    """``G[l, m] = z[:, l] @ z[:, m].T`` as ``(k, k, n, n)`` from ``z`` ``(n, k, d)``."""
    return torch.einsum("ild,jmd->lmij", z, z)


def _cost_of_sum(pair_sum: torch.Tensor, k: int, cost: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Cost ``C(S)`` and its derivative ``dC/dS`` (same shape as ``pair_sum``)."""
    if cost == "cv":
        s = _cv_scale(k)
        return s * (k * (k - 1) - 2.0 * pair_sum), torch.full_like(pair_sum, -2.0 * s)
    r2 = (k + 2.0 * pair_sum) / k**2
    clamped = r2.clamp_min(_CSD_MIN_R2)
    slope = torch.where(r2 > _CSD_MIN_R2, -(2.0 / k**2) / clamped, torch.zeros_like(r2))
    return -clamped.log(), slope


def _check_params(epsilon: float, cost: str, tol: float, max_iter: int) -> tuple[float, str, float, int]:
    """Validate the M3G parameters; one ``ValueError`` naming the bad one."""
    epsilon = check_positive("epsilon", epsilon, loss="m3g")
    tol = check_positive("tol", tol, loss="m3g")
    if cost not in COSTS:
        raise ValueError(f"loss 'm3g': unknown cost {cost!r}; valid: {', '.join(COSTS)}")
    if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1:
        raise ValueError(f"loss 'm3g': parameter max_iter must be an integer >= 1, got {max_iter!r}")
    return epsilon, cost, tol, max_iter


def _assemble(
    z: torch.Tensor, diag_cost: torch.Tensor, pair_weights: torch.Tensor, result: MMSinkhornResult, epsilon: float
) -> tuple[torch.Tensor, dict[str, float]]:
    """Exact M3G value with the Danskin gradient attached, and the stats.

    ``diag_cost``: ``(n,)`` ``C[i,...,i]`` (no grad needed); ``pair_weights``: ``(k, k, n, n)``
    ``dM3G/dG_lm`` for ``l < m`` (zeros elsewhere).
    """
    n = z.shape[0]
    ot = epsilon * float(result.log_potentials.sum()) / n - epsilon * result.mass
    # an optimality gap: >= 0 exactly (the dual objective never exceeds OT); clip round-off
    value = max(float(diag_cost.mean()) - epsilon * (math.log(n) + 1.0) - ot, 0.0)
    surrogate = torch.einsum("lmij,ild,jmd->", pair_weights.to(z.dtype), z, z)
    loss = surrogate - surrogate.detach() + torch.tensor(value, dtype=z.dtype, device=z.device)
    stats = {
        "iterations": float(result.iterations),
        "marginal_error": float(result.marginal_error),
        "converged": float(result.converged),
        "ot": ot,
        "mass": float(result.mass),
        "fallback": float(result.path.endswith("->dense")),  # the factorized solve ended on the dense path
        "float64_retry": float("->float64" in result.path),  # a float32 solve was re-run in float64
        "loss": value,
    }
    return loss, stats


def _diagonal(grams: torch.Tensor) -> torch.Tensor:
    """``S[i,...,i] = sum_{l<m} G_lm[i, i]`` ``(n,)``."""
    k = grams.shape[0]
    upper = torch.triu(torch.ones(k, k, dtype=torch.bool, device=grams.device), diagonal=1)
    return torch.diagonal(grams[upper], dim1=-2, dim2=-1).sum(0)


def m3g_materialized(
    z: torch.Tensor, epsilon: float = 0.2, cost: str = "cv", tol: float = 1e-3, max_iter: int = 1000
) -> tuple[torch.Tensor, dict[str, float]]:
    """M3G on the full ``n^k`` cost tensor (dense log-domain Alg. 1, Danskin gradient).

    ``z``: normalized embeddings ``(n, k, d)`` (float32 / float64). Returns ``(loss, stats)``. This is
    the reference implementation and the ``csd`` path of :class:`M3GLoss`.
    """
    epsilon, cost, tol, max_iter = _check_params(epsilon, cost, tol, max_iter)
    n, k, _ = z.shape
    with torch.no_grad():
        grams = _pair_grams(z.detach())
        pair_sum = pairwise_sum_tensor(grams)
        cost_tensor, slope = _cost_of_sum(pair_sum, k, cost)
        del pair_sum
        log_kernel = cost_tensor.div_(-epsilon)
        result = mm_sinkhorn_dense(log_kernel, tol, max_iter, pair_weight=slope)
        del log_kernel
        diag_sum = _diagonal(grams)
        diag_cost, diag_slope = _cost_of_sum(diag_sum, k, cost)
        # W_lm = sum (J - P) dC/dS: J puts 1/n on the diagonal of every pair block
        weights = -result.pair_marginals
        eye = torch.diag_embed(diag_slope / n)
        for l in range(k):
            for m in range(l + 1, k):
                weights[l, m] += eye
    return _assemble(z, diag_cost, weights, result, epsilon)


def m3g_factorized(
    z: torch.Tensor, epsilon: float = 0.2, tol: float = 1e-3, max_iter: int = 1000
) -> tuple[torch.Tensor, dict[str, float]]:
    """M3G with the ``cv`` cost, never materializing ``n^k`` (pairwise-factorized Alg. 1).

    ``z``: normalized embeddings ``(n, k, d)``. Returns ``(loss, stats)``; ``stats["fallback"]`` is 1
    when an underflow sent the solve to the exact dense path.
    """
    epsilon, _, tol, max_iter = _check_params(epsilon, "cv", tol, max_iter)
    n, k, _ = z.shape
    s = _cv_scale(k)
    with torch.no_grad():
        grams = _pair_grams(z.detach())
        # -C/eps = sum_{l<m} (2 s / eps) G_lm - s k (k-1) / eps
        result = mm_sinkhorn_pairwise(grams * (2.0 * s / epsilon), s * k * (k - 1) / epsilon, tol, max_iter)
        diag_cost, _ = _cost_of_sum(_diagonal(grams), k, "cv")
        eye = torch.eye(n, dtype=z.dtype, device=z.device) / n
        weights = (-2.0 * s) * (eye - result.pair_marginals)
        weights = weights * torch.triu(torch.ones(k, k, dtype=z.dtype, device=z.device), diagonal=1)[:, :, None, None]
    return _assemble(z, diag_cost, weights, result, epsilon)


@LOSSES.register("m3g")
class M3GLoss(MultiViewLoss):
    """Multi-marginal matching gap (Def. 3.1), Danskin gradient (Prop. 3.2).

    ``epsilon``: entropic regularization; ``cost``: ``"cv"`` (Alg. 2, factorized solver) or
    ``"csd"`` (Eq. 13, dense solver); ``tol``: stop when ``sum_l ||m_l(P) - 1/n||_1 < tol``;
    ``max_iter``: sweep limit. Non-convergence sets ``last_stats["converged"] = 0`` and warns once
    per module instance.
    """

    name: ClassVar[str] = "m3g"
    gather_across_processes: ClassVar[bool] = False

    def __init__(self, epsilon: float = 0.2, cost: str = "cv", tol: float = 1e-3, max_iter: int = 1000) -> None:
        super().__init__()
        self.epsilon, self.cost, self.tol, self.max_iter = _check_params(epsilon, cost, tol, max_iter)
        self._warned = False

    def compute(self, z: torch.Tensor) -> torch.Tensor:
        """M3G of normalized ``z`` ``(n, k, d)``."""
        if self.cost == "cv":
            loss, stats = m3g_factorized(z, self.epsilon, self.tol, self.max_iter)
        else:
            loss, stats = m3g_materialized(z, self.epsilon, self.cost, self.tol, self.max_iter)
        self.last_stats = stats
        if not stats["converged"] and not self._warned:
            self._warned = True
            warnings.warn(
                f"m3g: MM-Sinkhorn did not converge in {self.max_iter} iterations (marginal error "
                f"{stats['marginal_error']:.3g} >= tol {self.tol:g}, epsilon {self.epsilon:g}); the "
                "Danskin gradient is approximate. Raise max_iter or epsilon. (warned once per module)",
                RuntimeWarning,
                stacklevel=3,
            )
        return loss


__all__ = ["COSTS", "M3GLoss", "m3g_factorized", "m3g_materialized"]
