"""Training diagnostics: cheap health measures of the embeddings, computed on the batch already
in memory every ``train.log_every`` steps (``train.diagnostics``), logged as ``diag/<name>``.

On the student embeddings ``z`` ``(n, k, d)`` of the step's last micro-batch (this process):

* ``diag/rankme`` -- RankMe effective rank (Garrido et al. 2023) of the ``(n k, d)`` raw embeddings:
  ``exp(-sum_j p_j log p_j)``, ``p_j = sigma_j / ||sigma||_1 + 1e-7`` over the singular values; in
  ``[1, min(n k, d)]``; a collapse drives it to 1.
* ``diag/alignment`` -- Wang & Isola (2020) alignment ``E ||u - v||^2`` over the positive pairs
  (two views of one item, all unordered view pairs) of the L2-normalized embeddings; in ``[0, 4]``.
* ``diag/uniformity`` -- Wang & Isola uniformity ``log E_{i != j} exp(-2 ||u_i - u_j||^2)`` over the
  items of one view, averaged over the views; in ``[-4, 0]``, lower is more uniform.
* ``diag/ess`` -- FlatNCE's effective sample size (Eq. 10) of the InfoNCE softmax over each anchor's
  ``(n - 1) k`` other-item negatives at the loss's ``tau`` (:data:`DEFAULT_TAU` for losses without
  one), in ``[1 / K, 1]``; near ``1 / K`` the InfoNCE gradient comes from a single negative.
* ``diag/pvc_mi_lower_bound`` -- poly-view's One-vs-Rest MI lower bound ``log(n k - k + 1) - L_geo``
  with the geometric PVC loss at the same ``tau`` (whatever loss trains).
* ``diag/grad_norm`` -- global L2 norm of the parameter gradients before clipping.
* ``diag/time_s`` -- wall time spent on the above (the overhead).

M3G's ``iterations`` / ``marginal_error`` and the losses' own ``mi_lower_bound`` / ``ess`` are in
``stats/*`` (``last_stats``). :func:`write_diagnostics_summary` summarizes every ``diag/*`` and
``stats/*`` series of ``metrics.jsonl`` into the run report ``diagnostics.json`` at the end of the run
(``mvapp train`` prints its first / last / min / max table, and :func:`collapse_warning` when the last
``diag/uniformity`` says the projections collapsed).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..fileio import atomic_write_json
from ..losses.base import MultiViewLoss, normalize
from ..losses.contrastive import PolyViewGeometricLoss
from ..losses.flatnce import batch_ess
from .metrics import read_metrics

#: Temperature of ``diag/ess`` and ``diag/pvc_mi_lower_bound`` for losses without ``tau`` (M3G, MVEB, BYOL).
DEFAULT_TAU = 0.1
#: RankMe's epsilon (Garrido et al. 2023).
RANKME_EPS = 1e-7
PREFIX = "diag/"


def effective_rank_tensor(features: torch.Tensor, eps: float = RANKME_EPS) -> torch.Tensor:
    """RankMe of ``features`` ``(N, d)`` as a 0-d tensor on their device:
    ``exp(entropy(sigma / ||sigma||_1 + eps))``."""
    sigma = torch.linalg.svdvals(features.float() if features.dtype != torch.float64 else features)
    p = sigma / sigma.sum().clamp_min(torch.finfo(sigma.dtype).tiny) + eps
    return torch.exp(-(p * p.log()).sum())


def effective_rank(features: torch.Tensor, eps: float = RANKME_EPS) -> float:
    """RankMe of ``features`` ``(N, d)`` (:func:`effective_rank_tensor` read back as a float)."""
    return float(effective_rank_tensor(features, eps))


def alignment(u: torch.Tensor) -> float:
    """Mean ``||u_i alpha - u_i beta||^2`` over items and view pairs ``alpha != beta`` of unit vectors
    ``u`` ``(n, k, d)``; uses ``sum_{alpha != beta} <u_alpha, u_beta> = ||sum u||^2 - sum ||u||^2``."""
    k = u.shape[1]
    norms = (u * u).sum(dim=-1)  # (n, k)
    cross = u.sum(dim=1).pow(2).sum(dim=-1) - norms.sum(dim=1)  # (n,) sum over ordered pairs
    # sum over ordered pairs of ||a - b||^2 = 2 (k - 1) sum ||u||^2 - 2 cross
    return float(((2.0 * (k - 1) * norms.sum(dim=1) - 2.0 * cross) / (k * (k - 1))).mean())


def uniformity(u: torch.Tensor, t: float = 2.0) -> float:
    """``mean_alpha log mean_{i != j} exp(-t ||u_i alpha - u_j alpha||^2)`` of unit vectors ``u`` ``(n, k, d)``."""
    n = u.shape[0]
    by_view = u.transpose(0, 1)  # (k, n, d)
    sq = (by_view * by_view).sum(dim=-1)  # (k, n)
    dist2 = (sq[:, :, None] + sq[:, None, :] - 2.0 * torch.bmm(by_view, by_view.transpose(1, 2))).clamp_min(0.0)
    logits = -t * dist2
    logits.diagonal(dim1=1, dim2=2).fill_(float("-inf"))
    return float((torch.logsumexp(logits.flatten(1), dim=1) - math.log(n * (n - 1))).mean())


def pvc_mi_lower_bound(u: torch.Tensor, tau: float) -> float:
    """Poly-view One-vs-Rest bound ``log(n k - k + 1) - L_geometric(u; tau)`` of unit vectors ``u`` ``(n, k, d)``."""
    n, k, _ = u.shape
    return math.log(n * k - k + 1) - float(PolyViewGeometricLoss(tau).compute(u))


def grad_norm(parameters: Iterable[nn.Parameter]) -> float:
    """Global L2 norm of the gradients of ``parameters`` (0.0 when none has a gradient)."""
    grads = [p.grad.detach() for p in parameters if p.grad is not None]
    if not grads:
        return 0.0
    return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads])))


@torch.no_grad()
def embedding_diagnostics(z: torch.Tensor, tau: float = DEFAULT_TAU) -> dict[str, float]:
    """``rankme, alignment, uniformity, ess, pvc_mi_lower_bound`` of embeddings ``z`` ``(n, k, d)``
    (raw; normalized here for all but RankMe). Views-only measures need ``k >= 2``, batch ones ``n >= 2``."""
    z = z.detach()
    z = z.float() if z.dtype not in (torch.float32, torch.float64) else z
    n, k, d = z.shape
    out = {"rankme": effective_rank(z.reshape(n * k, d))}
    u = normalize(z)
    if k >= 2:
        out["alignment"] = alignment(u)
    if n >= 2:
        out["uniformity"] = uniformity(u)
        if k >= 2:
            out["ess"] = batch_ess(u, tau)
            out["pvc_mi_lower_bound"] = pvc_mi_lower_bound(u, tau)
    return out


def loss_temperature(loss_fn: MultiViewLoss) -> float:
    """The loss's current temperature (:meth:`MultiViewLoss.temperature`: ``1 / scale`` with a (learnable)
    logit scale, else ``tau``), or :data:`DEFAULT_TAU` for a loss without one."""
    tau = loss_fn.temperature()
    return DEFAULT_TAU if tau is None else float(tau)


def step_diagnostics(z: torch.Tensor, loss_fn: MultiViewLoss, parameters: Iterable[nn.Parameter]) -> dict[str, float]:
    """Every ``diag/*`` value of one step: :func:`embedding_diagnostics` at :func:`loss_temperature`,
    :func:`grad_norm`, and ``time_s`` spent computing them."""
    start = time.perf_counter()
    values = embedding_diagnostics(z, loss_temperature(loss_fn))
    values["grad_norm"] = grad_norm(parameters)
    values["time_s"] = time.perf_counter() - start
    return {PREFIX + key: value for key, value in values.items()}


def summarize_metrics(records: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """``{key: {first, last, min, max, mean, count}}`` of every ``diag/*`` and ``stats/*`` series
    (finite values only; ``nonfinite`` counts the others)."""
    series: dict[str, list[float]] = {}
    for record in records:
        for key, value in record.items():
            if key.startswith((PREFIX, "stats/", "solver/")) and isinstance(value, (int, float)):
                series.setdefault(key, []).append(float(value))
    summary: dict[str, dict[str, float]] = {}
    for key, values in sorted(series.items()):
        finite = [v for v in values if math.isfinite(v)]
        entry: dict[str, float] = {"count": len(finite), "nonfinite": len(values) - len(finite)}
        if finite:
            entry.update(
                first=finite[0], last=finite[-1], min=min(finite), max=max(finite), mean=sum(finite) / len(finite)
            )
        summary[key] = entry
    return summary


def format_summary(summary: dict[str, dict[str, float]]) -> str:
    """A console table (first / last / min / max) of :func:`summarize_metrics`."""
    rows = [f"{'diagnostic':<32} {'first':>10} {'last':>10} {'min':>10} {'max':>10}"]
    for key, entry in summary.items():
        if "first" in entry:
            rows.append(f"{key:<32} " + " ".join(f"{entry[c]:>10.4g}" for c in ("first", "last", "min", "max")))
    return "training diagnostics (metrics.jsonl)\n" + "\n".join(rows)


SUMMARY_FILE = "diagnostics.json"
COLLAPSED_UNIFORMITY = -0.01
"""``diag/uniformity`` above this at a run's last log means collapse: the items of a view sit on nearly one
point (``E exp(-2 ||u_i - u_j||^2) >= 0.99``, a mean squared distance under about 0.005 against 2 for spread
embeddings), and the loss sits at its value for identical embeddings (``log(n k - k + 1)`` for geometric PVC,
``epsilon (k - 1) log n`` for M3G)."""


def collapsed_uniformity(summary: dict[str, dict[str, float]]) -> float | None:
    """The last ``diag/uniformity`` of a run's :func:`summarize_metrics` when it says the projections
    collapsed (above :data:`COLLAPSED_UNIFORMITY`), else None (also without diagnostics)."""
    last = summary.get(PREFIX + "uniformity", {}).get("last")
    return last if last is not None and last > COLLAPSED_UNIFORMITY else None


def run_collapse(run_dir: str | Path) -> float | None:
    """:func:`collapsed_uniformity` of a finished run's ``diagnostics.json`` (None when it has none)."""
    path = Path(run_dir) / SUMMARY_FILE
    return collapsed_uniformity(json.loads(path.read_text())) if path.is_file() else None


def collapse_warning(summary: dict[str, dict[str, float]]) -> str | None:
    """A one-line warning when a run's :func:`summarize_metrics` says its projections collapsed (last
    ``diag/uniformity`` above :data:`COLLAPSED_UNIFORMITY`), else None (also without diagnostics)."""
    last = collapsed_uniformity(summary)
    if last is None:
        return None
    return (
        f"warning: the projections collapsed (diag/uniformity {last:.4f} at the last log, above "
        f"{COLLAPSED_UNIFORMITY}): every item's embedding is nearly one point and the loss sits at its value for "
        "identical embeddings. Contrastive losses and M3G have a plateau there; a lower temperature or epsilon, "
        "or another seed, usually leaves it."
    )


def write_diagnostics_summary(run_dir: str | Path) -> dict[str, dict[str, float]]:
    """Summarize ``<run_dir>/metrics.jsonl`` into ``<run_dir>/diagnostics.json`` (atomic); returns it."""
    summary = summarize_metrics(read_metrics(Path(run_dir) / "metrics.jsonl"))
    atomic_write_json(Path(run_dir) / SUMMARY_FILE, summary)
    return summary


__all__ = [
    "COLLAPSED_UNIFORMITY",
    "DEFAULT_TAU",
    "SUMMARY_FILE",
    "alignment",
    "collapse_warning",
    "collapsed_uniformity",
    "effective_rank",
    "effective_rank_tensor",
    "embedding_diagnostics",
    "grad_norm",
    "loss_temperature",
    "pvc_mi_lower_bound",
    "run_collapse",
    "step_diagnostics",
    "summarize_metrics",
    "uniformity",
    "write_diagnostics_summary",
]
