"""Brute-force float64 references of the issue-2 loss formulas (losses 1-8).

Written straight from the equations with Python loops over items and views, independently of the
vectorized code in ``multiview_app.losses``. Inputs are ``(n, k, d)`` tensors; each function
normalizes them itself and returns a Python float (or tensors for the Stein pieces).
Only meant for small n, k, d.
"""

from __future__ import annotations

import math

import torch


def _unit(z: torch.Tensor) -> torch.Tensor:
    """float64 copy of ``z`` with unit rows along the last dimension."""
    z = z.detach().double()
    return z / z.norm(dim=-1, keepdim=True)


def _dot(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(sum(float(x) * float(y) for x, y in zip(a, b)))


def _lse(values: list[float]) -> float:
    m = max(values)
    return m + math.log(sum(math.exp(v - m) for v in values))


def _mean_rest(z: torch.Tensor, i: int, alpha: int, renormalize: bool) -> torch.Tensor:
    k = z.shape[1]
    total = torch.zeros(z.shape[2], dtype=torch.float64)
    for beta in range(k):
        if beta != alpha:
            total = total + z[i, beta]
    total = total / (k - 1)
    return total / total.norm() if renormalize else total


def infonce_pwe(z: torch.Tensor, tau: float = 0.1) -> float:
    z = _unit(z)
    n, k, _ = z.shape
    terms = []
    for a in range(k):
        for b in range(k):
            if a == b:
                continue
            per_item = []
            for i in range(n):
                logits = [_dot(z[i, a], z[j, b]) / tau for j in range(n)]
                per_item.append(-logits[i] + _lse(logits))
            terms.append(sum(per_item) / n)
    return sum(terms) / len(terms)


def infonce_ave(z: torch.Tensor, tau: float = 0.1) -> float:
    z = _unit(z)
    n, k, _ = z.shape
    terms = []
    for a in range(k):
        xbar = [_mean_rest(z, j, a, renormalize=True) for j in range(n)]
        per_item = []
        for i in range(n):
            logits = [_dot(z[i, a], xbar[j]) / tau for j in range(n)]
            per_item.append(-logits[i] + _lse(logits))
        terms.append(sum(per_item) / n)
    return sum(terms) / k


def byol_pwe(z: torch.Tensor) -> float:
    z = _unit(z)
    n, k, _ = z.shape
    terms = []
    for a in range(k):
        for b in range(k):
            if a != b:
                terms.append(2 - 2 / n * sum(_dot(z[i, a], z[i, b]) for i in range(n)))
    return sum(terms) / len(terms)


def byol_ave(z: torch.Tensor) -> float:
    z = _unit(z)
    n, k, _ = z.shape
    terms = []
    for a in range(k):
        terms.append(2 - 2 / n * sum(_dot(z[i, a], _mean_rest(z, i, a, renormalize=True)) for i in range(n)))
    return sum(terms) / k


def _negatives(
    z: torch.Tensor, anchor: torch.Tensor, i: int, tau: float, targets: torch.Tensor | None = None
) -> list[float]:
    """Logits of ``anchor`` against every view of every item ``j != i`` of ``targets`` (default z)."""
    targets = z if targets is None else targets
    n, k, _ = targets.shape
    return [_dot(anchor, targets[j, g]) / tau for j in range(n) if j != i for g in range(k)]


def pvc_log_l(z: torch.Tensor, i: int, a: int, b: int, tau: float) -> float:
    """log l(i, alpha, beta) of poly-view Eq. 14 (negatives anchored at (i, beta)); z unit float64."""
    pos = _dot(z[i, a], z[i, b]) / tau
    return pos - _lse([pos] + _negatives(z, z[i, b], i, tau))


def pvc_geometric(z: torch.Tensor, tau: float = 0.1) -> float:
    z = _unit(z)
    n, k, _ = z.shape
    values = [pvc_log_l(z, i, a, b, tau) for i in range(n) for a in range(k) for b in range(k) if a != b]
    return -sum(values) / len(values)


def pvc_arithmetic(z: torch.Tensor, tau: float = 0.1) -> float:
    z = _unit(z)
    n, k, _ = z.shape
    values = []
    for i in range(n):
        for a in range(k):
            mean_l = sum(math.exp(pvc_log_l(z, i, a, b, tau)) for b in range(k) if b != a) / (k - 1)
            values.append(math.log(mean_l))
    return -sum(values) / len(values)


def pvc_sufficient(z: torch.Tensor, tau: float = 0.1) -> float:
    z = _unit(z)
    n, k, _ = z.shape
    q = torch.stack([torch.stack([_mean_rest(z, j, g, renormalize=True) for g in range(k)]) for j in range(n)])
    values = []
    for i in range(n):
        for a in range(k):
            pos = _dot(z[i, a], q[i, a]) / tau
            values.append(pos - _lse([pos] + _negatives(z, z[i, a], i, tau, targets=q)))
    return -sum(values) / len(values)


def aggnce(z: torch.Tensor, tau: float = 0.1) -> float:
    z = _unit(z)
    n, k, _ = z.shape
    values = []
    for i in range(n):
        for a in range(k):
            pos = _dot(z[i, a], _mean_rest(z, i, a, renormalize=False)) / tau
            values.append(-pos + _lse([pos] + _negatives(z, z[i, a], i, tau)))
    return sum(values) / len(values)


def nt_xent(z: torch.Tensor, tau: float = 0.1) -> float:
    """SimCLR's NT-Xent for k = 2: each of the 2n samples against its partner, 2n - 2 negatives."""
    z = _unit(z)
    n, k, _ = z.shape
    assert k == 2
    samples = [z[i, v] for v in range(2) for i in range(n)]  # index v * n + i
    values = []
    for idx, anchor in enumerate(samples):
        partner = (idx + n) % (2 * n)
        logits = {j: _dot(anchor, samples[j]) / tau for j in range(2 * n) if j != idx}
        values.append(-logits[partner] + _lse(list(logits.values())))
    return sum(values) / len(values)


def flatnce_c(z: torch.Tensor, tau: float = 0.1) -> list[tuple[int, int, int, float]]:
    """All ``(i, alpha, beta, c)`` with ``c = logsumexp_neg(s(i a, j g) - s(i a, i b))``."""
    z = _unit(z)
    n, k, _ = z.shape
    out = []
    for i in range(n):
        for a in range(k):
            neg = _negatives(z, z[i, a], i, tau)
            for b in range(k):
                if b != a:
                    pos = _dot(z[i, a], z[i, b]) / tau
                    out.append((i, a, b, _lse([v - pos for v in neg])))
    return out


def flatnce_infonce(z: torch.Tensor, tau: float = 0.1) -> float:
    """Matching InfoNCE of FlatNCE: mean of ``log(1 + e^c)``."""
    cs = [c for *_, c in flatnce_c(z, tau)]
    return sum(math.log1p(math.exp(c)) for c in cs) / len(cs)


def flatnce_ess(z: torch.Tensor, tau: float = 0.1) -> float:
    """Mean over anchors (i, alpha) of 1 / (K sum_j w_j^2), w = softmax of the negatives' logits."""
    z = _unit(z)
    n, k, _ = z.shape
    values = []
    for i in range(n):
        for a in range(k):
            neg = _negatives(z, z[i, a], i, tau)
            m = max(neg)
            e = [math.exp(v - m) for v in neg]
            w = [x / sum(e) for x in e]
            values.append(1.0 / (len(neg) * sum(x * x for x in w)))
    return sum(values) / len(values)


def bandwidth(x: torch.Tensor) -> float:
    """Median of 1 - <x_i, x_j> over i != j, floored at 0.1; x (n, d) unit rows."""
    n = x.shape[0]
    values = sorted(1.0 - _dot(x[i], x[j]) for i in range(n) for j in range(n) if i != j)
    m = len(values)
    med = values[m // 2] if m % 2 else 0.5 * (values[m // 2 - 1] + values[m // 2])
    return max(med, 0.1)


def stein_pieces(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Kernel K (n, n), G (n, d) and Delta for one view's unit rows x (n, d), by loops."""
    n, d = x.shape
    delta = bandwidth(x)
    kernel = torch.zeros(n, n, dtype=torch.float64)
    for i in range(n):
        for j in range(n):
            kernel[i, j] = math.exp(_dot(x[i], x[j]) / delta)
    g = torch.zeros(n, d, dtype=torch.float64)
    for i in range(n):
        g[i] = x[i] / delta * float(sum(kernel[i, m] for m in range(n)))
    return kernel, g, delta


def mveb(z: torch.Tensor, beta: float = 0.01, eta: float = 0.01) -> float:
    z = _unit(z)
    n, k, _ = z.shape
    pairs = [(a, b) for a in range(k) for b in range(k) if a < b]
    alignment = sum(_dot(z[i, a], z[i, b]) for i in range(n) for a, b in pairs) / (n * len(pairs))
    surrogate = 0.0
    for a in range(k):
        kernel, g, _ = stein_pieces(z[:, a])
        score = -torch.linalg.inv(kernel + eta * torch.eye(n, dtype=torch.float64)) @ g  # explicit inverse on purpose
        surrogate += sum(_dot(score[i], z[i, a]) for i in range(n)) / n
    return -alignment + beta * surrogate / k


def flatnce_surrogate(z: torch.Tensor, tau: float = 0.1) -> torch.Tensor:
    """Differentiable loop version of FlatNCE's surrogate mean(exp(c - detach(c))) on raw z (any float dtype).

    Normalizes with autograd (unlike the float helpers above) so its gradient w.r.t. the raw input
    can be compared with the loss module's.
    """
    u = z / z.norm(dim=-1, keepdim=True)
    n, k, _ = u.shape
    cs = []
    for i in range(n):
        for a in range(k):
            neg = torch.stack([u[i, a] @ u[j, g] / tau for j in range(n) if j != i for g in range(k)])
            for b in range(k):
                if b != a:
                    cs.append(torch.logsumexp(neg - u[i, a] @ u[i, b] / tau, dim=0))
    c = torch.stack(cs)
    return torch.exp(c - c.detach()).mean()


def _ce_both_ways(a: list[torch.Tensor], b: list[torch.Tensor], scale: float) -> float:
    """``CE(L, I) + CE(L^T, I)`` of ``L[i][j] = scale * <a_i, b_j>``, each batch-averaged (loops)."""
    n = len(a)
    logits = [[scale * _dot(a[i], b[j]) for j in range(n)] for i in range(n)]
    rows = sum(-logits[i][i] + _lse(logits[i]) for i in range(n)) / n
    columns = sum(-logits[j][j] + _lse([logits[i][j] for i in range(n)]) for j in range(n)) / n
    return rows + columns


def sleepfm_loo(z: torch.Tensor, t: float = 0.0) -> float:
    """SleepFM leave-one-out: ``r_m`` = plain mean of the other views (not renormalized), scale ``exp(max(t, 0))``."""
    z = _unit(z)
    n, k, _ = z.shape
    scale = math.exp(max(t, 0.0))
    total = 0.0
    for m in range(k):
        rest = [_mean_rest(z, i, m, renormalize=False) for i in range(n)]
        total += _ce_both_ways([z[i, m] for i in range(n)], rest, scale)
    return total / (2 * k)


def sleepfm_pairwise(z: torch.Tensor, t: float = 0.0) -> float:
    """SleepFM pairwise: every ordered pair (m, j), both directions, mean of the 2 k (k - 1) cross-entropies."""
    z = _unit(z)
    n, k, _ = z.shape
    scale = math.exp(max(t, 0.0))
    total = 0.0
    for m in range(k):
        for j in range(k):
            if m != j:
                total += _ce_both_ways([z[i, m] for i in range(n)], [z[i, j] for i in range(n)], scale)
    return total / (2 * k * (k - 1))
