"""MVEB Sec. 7.3 on digits: with beta = 0 (alignment only) the embeddings collapse, with beta = 0.01
(plus the Stein entropy term) they do not; measured by RankMe and the linear probe.

    .venv/bin/python scripts/reproduce/mveb/reproduce_mveb_beta.py [--betas 0,0.01] [--steps 150] [--small]
        [--runs-dir runs/repro_mveb] [--out runs/figures/mveb_beta]

Trains ``configs/digits_mveb.yaml`` with ``loss.beta`` in ``--betas``; the trainer's diagnostics
log ``diag/rankme`` (effective rank of the projector output of the batch), ``diag/uniformity`` and
``diag/alignment`` every 10 steps. Writes ``<out>.png`` (RankMe and uniformity vs step) and
``<out>.md`` (final RankMe / uniformity, probe accuracy of the trained and the random-init encoder).
"""

from __future__ import annotations

import argparse
from typing import Any

from multiview_app.experiments.reproduce import ROOT, SMALL, new_figure, parse_list, train_digits, write_outputs  # noqa: E402


def run_one(beta: float, args: argparse.Namespace) -> dict[str, Any]:
    """One MVEB run; its diagnostics curves and probe results."""
    name = f"mveb_beta{beta:g}_s{args.steps}" + ("_small" if args.small else "")
    overrides = [f"train.max_steps={args.steps}", f"loss.beta={beta}", "train.log_every=10"] + (
        SMALL if args.small else []
    )
    records, probe = train_digits("mveb", name, overrides, args.runs_dir)
    curves = {
        key: [(r["step"], r[f"diag/{key}"]) for r in records if f"diag/{key}" in r]
        for key in ("rankme", "uniformity", "alignment")
    }
    return {"beta": beta, "steps": args.steps, "curves": curves, "probe": probe}


def figure(rows: list[dict[str, Any]]) -> Any:
    """RankMe, uniformity and alignment vs step, one line per beta."""
    fig, axes = new_figure(3, (13, 3.4))
    for ax, key in zip(axes, ("rankme", "uniformity", "alignment")):
        for row in rows:
            steps, values = zip(*row["curves"][key])
            ax.plot(steps, values, label=f"beta={row['beta']:g}")
        ax.set(xlabel="step", title=f"diag/{key}")
        ax.legend(fontsize=8)
    return fig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--betas", default="0,0.01")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--small", action="store_true", help="16 px images, width-16 encoder")
    parser.add_argument("--runs-dir", default=str(ROOT / "runs" / "repro_mveb"))
    parser.add_argument("--out", default=str(ROOT / "runs" / "figures" / "mveb_beta"))
    args = parser.parse_args(argv)
    rows = [run_one(beta, args) for beta in parse_list(parser, "--betas", args.betas, float)]
    lines = [
        "| beta | steps | RankMe first -> last | uniformity last | alignment last | logreg acc | random-init logreg | kNN acc |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        c, t, ri = r["curves"], r["probe"]["trained"], r["probe"]["random_init"]
        lines.append(
            f"| {r['beta']:g} | {r['steps']} | {c['rankme'][0][1]:.2f} -> {c['rankme'][-1][1]:.2f} | "
            f"{c['uniformity'][-1][1]:.3f} | {c['alignment'][-1][1]:.4f} | {t['logreg_acc']:.3f} | "
            f"{ri['logreg_acc']:.3f} | {t['knn_acc']:.3f} |"
        )
    write_outputs(args.out, lines, figure(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
