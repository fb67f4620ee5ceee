"""Poly-view Sec. 3.1 / App. E.6: One-vs-Rest MI lower bounds vs the closed form in the 1D Gaussian.

    .venv/bin/python scripts/reproduce/polyview/reproduce_polyview_gaussian.py [--steps 300] [--items 256] [--seeds 3]
        [--multiplicities 2,4,8,10] [--out runs/figures/polyview_gaussian]

Data: ``c_i ~ N(0, sigma0^2)``, views ``x_{i,alpha} ~ N(c_i, sigma^2)``, fresh ``K = --items``
items x ``M`` views every step. Critic: MLP 1 -> 32, GELU, 32 -> 32 (the loss normalizes, so
``f = cos / tau``), AdamW lr 5e-4, weight decay 5e-3 (paper values). Objectives and their bounds:

* multi-crop (``infonce_pwe``, poly-view Eq. 1-2): ``I >= log K - L``;
* arithmetic / geometric PVC (Eq. 12-13) and sufficient statistics (Eq. 22, Thm 2.4):
  ``I >= c(B, M) - L`` with ``B = K M`` and ``c(B, M) = log(B - M + 1)``: each anchor's softmax runs
  over its positive and the ``(K - 1) M`` views of the other items, ``B - M + 1`` candidates.

True One-vs-Rest MI (Eq. 26): ``I = 0.5 log[(1 + sigma0^2 / sigma^2)(1 - sigma0^2 / (sigma^2 + M sigma0^2))]``.
After training, loss and bound are averaged over ``--eval-batches`` fresh batches. Writes
``<out>.png`` (four panels: true MI and bounds, MI gap, relative MI = true / bound, loss; mean +- std
over seeds), ``<out>.md`` (table) and ``<out>.jsonl`` (one line per run; reruns skip finished runs).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path
from typing import Any

import torch
from torch import nn

from multiview_app.experiments.reproduce import ROOT, new_figure, parse_list, write_outputs  # noqa: E402
from multiview_app.losses import build_loss  # noqa: E402

#: objective name -> loss of the head
METHODS = {
    "multi_crop": "infonce_pwe",
    "arithmetic": "pvc_arithmetic",
    "geometric": "pvc_geometric",
    "sufficient": "pvc_sufficient",
}


def true_one_vs_rest_mi(m: int, sigma0: float, sigma: float) -> float:
    """Poly-view Eq. 26: ``I(x_alpha; X_{!=alpha})`` for ``M = m`` views, in nats."""
    r = sigma0**2 / sigma**2
    return 0.5 * math.log((1.0 + r) * (1.0 - sigma0**2 / (sigma**2 + m * sigma0**2)))


def pairwise_mi(sigma0: float, sigma: float) -> float:
    """``I(x_alpha; x_beta)`` of two views, ``-0.5 log(1 - rho^2)`` with ``rho = sigma0^2 / (sigma0^2 + sigma^2)``:
    what any bound built from one positive pair at a time (multi-crop, and the geometric PVC, whose
    terms are pairwise InfoNCE terms with ``(K - 1) M`` negatives) can reach at best."""
    rho = sigma0**2 / (sigma0**2 + sigma**2)
    return -0.5 * math.log(1.0 - rho**2)


def bound_constant(method: str, items: int, m: int) -> float:
    """The constant of the method's MI lower bound: ``log K`` (multi-crop) or ``c(B, M) = log(K M - M + 1)``."""
    return math.log(items) if method == "multi_crop" else math.log(items * m - m + 1)


def sample_views(items: int, m: int, sigma0: float, sigma: float, gen: torch.Generator) -> torch.Tensor:
    """``(K, M, 1)`` views ``x_{i,alpha} = c_i + sigma eps``, ``c_i = sigma0 eps'``."""
    centers = sigma0 * torch.randn(items, 1, 1, generator=gen)
    return centers + sigma * torch.randn(items, m, 1, generator=gen)


def critic() -> nn.Module:
    """The paper's MLP (1 -> 32, GELU, 32 -> 32)."""
    return nn.Sequential(nn.Linear(1, 32), nn.GELU(), nn.Linear(32, 32))


def run_one(
    method: str,
    m: int,
    seed: int,
    *,
    items: int,
    steps: int,
    tau: float,
    sigma0: float,
    sigma: float,
    eval_batches: int,
) -> dict[str, Any]:
    """Train one critic; returns the averaged final loss, bound, true MI and gap."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(10_000 + seed)
    net, loss_fn = critic(), build_loss(METHODS[method], tau=tau)
    optimizer = torch.optim.AdamW(net.parameters(), lr=5e-4, weight_decay=5e-3)
    for _ in range(steps):
        x = sample_views(items, m, sigma0, sigma, gen)
        loss = loss_fn(net(x))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    eval_gen = torch.Generator().manual_seed(99_991 + seed)
    with torch.no_grad():
        losses = [float(loss_fn(net(sample_views(items, m, sigma0, sigma, eval_gen)))) for _ in range(eval_batches)]
    final = statistics.mean(losses)
    bound = bound_constant(method, items, m) - final
    true = true_one_vs_rest_mi(m, sigma0, sigma)
    return {
        "method": method,
        "M": m,
        "seed": seed,
        "items": items,
        "steps": steps,
        "tau": tau,
        "sigma0": sigma0,
        "sigma": sigma,
        "eval_batches": eval_batches,
        "loss": final,
        "bound": bound,
        "true_mi": true,
        "gap": true - bound,
        "relative_mi": true / bound if bound > 0 else float("nan"),
    }


def run_grid(multiplicities: list[int], seeds: int, cache: Path | None = None, **settings: Any) -> list[dict[str, Any]]:
    """Every (method, M, seed); finished runs found in ``cache`` (jsonl, same settings) are reused."""
    from multiview_app.console import progress as tqdm

    done: dict[tuple, dict[str, Any]] = {}
    if cache is not None and cache.is_file():
        for line in cache.read_text().splitlines():
            row = json.loads(line)
            if all(row.get(k) == v for k, v in settings.items()):
                done[(row["method"], row["M"], row["seed"])] = row
    rows = []
    jobs = [(method, m, seed) for m in multiplicities for method in METHODS for seed in range(seeds)]
    for method, m, seed in tqdm(jobs, desc="gaussian runs", unit="run"):
        row = done.get((method, m, seed))
        if row is None:
            row = run_one(method, m, seed, **settings)
            if cache is not None:
                with cache.open("a") as fh:
                    fh.write(json.dumps(row) + "\n")
        rows.append(row)
    return rows


def aggregate(rows: list[dict[str, Any]], key: str) -> dict[str, dict[int, tuple[float, float]]]:
    """``{method: {M: (mean, std)}}`` of ``key`` over seeds."""
    out: dict[str, dict[int, tuple[float, float]]] = {}
    for method in METHODS:
        for m in sorted({r["M"] for r in rows}):
            values = [r[key] for r in rows if r["method"] == method and r["M"] == m]
            if values:
                out.setdefault(method, {})[m] = (statistics.mean(values), statistics.pstdev(values))
    return out


def table(rows: list[dict[str, Any]]) -> list[str]:
    """Markdown table: per method and M, true MI, bound, gap, relative MI, loss (mean +- std)."""
    lines = ["| method | M | true MI | lower bound | MI gap | true / bound | loss |", "|---|---|---|---|---|---|---|"]
    stats = {key: aggregate(rows, key) for key in ("true_mi", "bound", "gap", "relative_mi", "loss")}
    for method in METHODS:
        for m in sorted(stats["bound"].get(method, {})):
            cells = [
                f"{stats[k][method][m][0]:.3f} +- {stats[k][method][m][1]:.3f}"
                for k in ("bound", "gap", "relative_mi", "loss")
            ]
            lines.append(f"| {method} | {m} | {stats['true_mi'][method][m][0]:.3f} | " + " | ".join(cells) + " |")
    return lines


def figure(rows: list[dict[str, Any]]) -> Any:
    """The four panels of poly-view Fig. 2 (mean +- std over seeds)."""
    fig, axes = new_figure(4, (16, 3.6))
    ms = sorted({r["M"] for r in rows})
    truth = [true_one_vs_rest_mi(m, rows[0]["sigma0"], rows[0]["sigma"]) for m in ms]
    for ax, key, title in zip(
        axes,
        ("bound", "gap", "relative_mi", "loss"),
        (
            "One-vs-Rest MI: true (Eq. 26) and bounds",
            "MI gap = true - bound",
            "relative MI = true / bound",
            "final loss",
        ),
    ):
        for method, by_m in aggregate(rows, key).items():
            x = sorted(by_m)
            mean = [by_m[m][0] for m in x]
            std = [by_m[m][1] for m in x]
            ax.plot(x, mean, marker="o", label=method)
            ax.fill_between(x, [a - b for a, b in zip(mean, std)], [a + b for a, b in zip(mean, std)], alpha=0.2)
        if key == "bound":
            ax.plot(ms, truth, "k--", marker="s", label="true MI (Eq. 26)")
            ax.axhline(pairwise_mi(rows[0]["sigma0"], rows[0]["sigma"]), color="gray", ls=":", label="pairwise MI")
        ax.set_xlabel("multiplicity M")
        ax.set_title(title, fontsize=10)
    axes[0].legend(fontsize=8)
    return fig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--items", type=int, default=256, help="K items per batch (paper: 1024)")
    parser.add_argument("--seeds", type=int, default=3, help="runs per (method, M) (paper: 16)")
    parser.add_argument("--multiplicities", default="2,4,8,10")
    parser.add_argument("--tau", type=float, default=0.1)
    parser.add_argument("--sigma0", type=float, default=1.0)
    parser.add_argument("--sigma", type=float, default=0.5)
    parser.add_argument("--eval-batches", type=int, default=8)
    parser.add_argument("--out", default=str(ROOT / "runs" / "figures" / "polyview_gaussian"))
    args = parser.parse_args(argv)
    multiplicities = parse_list(parser, "--multiplicities", args.multiplicities, int)
    torch.set_num_threads(1)  # (K M, 32) MLPs: intra-op threads only add overhead
    if min(multiplicities) < 2:
        parser.error(f"--multiplicities: every M must be >= 2, got {multiplicities}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    settings = dict(
        items=args.items,
        steps=args.steps,
        tau=args.tau,
        sigma0=args.sigma0,
        sigma=args.sigma,
        eval_batches=args.eval_batches,
    )
    rows = run_grid(multiplicities, args.seeds, cache=out.with_suffix(".jsonl"), **settings)
    png = write_outputs(out, table(rows), figure(rows))
    print(f"wrote {png} and {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
