"""FlatNCE (Chen et al.) on digits: InfoNCE's effective sample size vs FlatNCE's, and probe accuracy,
against the batch size.

    .venv/bin/python scripts/reproduce/flatnce/reproduce_flatnce_ess.py [--batch-sizes 16,128] [--steps 150] [--tau 0.1]
        [--runs-dir runs/repro_flatnce] [--out runs/figures/flatnce_ess] [--small]

Trains ``flatnce`` and its InfoNCE counterpart with the same negatives (``pvc_geometric``: at k = 2
it is InfoNCE over the positive and the ``2 (n - 1)`` views of the other items, exactly the
``infonce`` value FlatNCE reports) with ``configs/digits_<loss>.yaml`` at every batch size and
``loss.tau = --tau``. The trainer's diagnostics log ``diag/ess`` (FlatNCE Eq. 10: the ESS of the
InfoNCE softmax over the negatives at ``tau``, in ``[1 / K, 1]``) every 10 steps; the linear probe
runs at the end. ``--small`` uses 16 px images and a width-16 encoder (the reduced CPU budget).
Writes ``<out>.png`` (ESS vs step, final ESS vs batch size, probe accuracy vs batch size) and
``<out>.md``; runs with ``eval/linear_probe.json`` are reused.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from multiview_app.experiments.reproduce import ROOT, SMALL, new_figure, parse_list, train_digits, write_outputs  # noqa: E402

LOSSES = {"flatnce": "FlatNCE", "pvc_geometric": "InfoNCE (same negatives)"}


def run_one(loss: str, batch: int, args: argparse.Namespace) -> dict[str, Any]:
    """Train (unless finished) and return ESS curve, final ESS and probe accuracy."""
    name = f"{loss}_b{batch}_t{args.tau:g}_s{args.steps}" + ("_small" if args.small else "")
    overrides = [
        f"train.max_steps={args.steps}",
        f"train.batch_size={batch}",
        f"loss.tau={args.tau}",
        "train.log_every=10",
    ] + (SMALL if args.small else [])
    records, probe = train_digits(loss, name, overrides, args.runs_dir)
    curve = [(r["step"], r["diag/ess"]) for r in records if "diag/ess" in r]
    tail = [v for _, v in curve[-3:]]
    return {
        "loss": loss,
        "batch": batch,
        "tau": args.tau,
        "steps": args.steps,
        "curve": curve,
        "final_ess": statistics.mean(tail),
        "logreg_acc": probe["trained"]["logreg_acc"],
        "knn_acc": probe["trained"]["knn_acc"],
    }


def figure(rows: list[dict[str, Any]]) -> Any:
    """ESS vs step per run; final ESS and probe accuracy vs batch size per loss."""
    fig, axes = new_figure(3, (13, 3.6))
    for row in rows:
        steps, ess = zip(*row["curve"])
        axes[0].plot(steps, ess, label=f"{LOSSES[row['loss']]}, n={row['batch']}")
    axes[0].set(xlabel="step", ylabel="ESS (InfoNCE softmax over negatives)", title="ESS during training", yscale="log")
    for loss, label in LOSSES.items():
        mine = sorted((r for r in rows if r["loss"] == loss), key=lambda r: r["batch"])
        batches = [r["batch"] for r in mine]
        axes[1].plot(batches, [r["final_ess"] for r in mine], marker="o", label=label)
        axes[2].plot(batches, [r["logreg_acc"] for r in mine], marker="o", label=label)
    axes[1].set(xlabel="batch size n", ylabel="final ESS", title="final ESS vs batch", xscale="log", yscale="log")
    axes[2].set(xlabel="batch size n", ylabel="linear-probe accuracy", title="probe accuracy vs batch", xscale="log")
    sizes = sorted({r["batch"] for r in rows})
    for ax in axes[1:]:  # label exactly the batch sizes run (log-axis minor labels overlap)
        ax.set_xticks(sizes, [str(n) for n in sizes])
        ax.minorticks_off()
    for ax in axes:
        ax.legend(fontsize=7)
    return fig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", default="16,128")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--tau", type=float, default=0.1)
    parser.add_argument("--small", action="store_true", help="16 px images, width-16 encoder")
    parser.add_argument("--runs-dir", default=str(ROOT / "runs" / "repro_flatnce"))
    parser.add_argument("--out", default=str(ROOT / "runs" / "figures" / "flatnce_ess"))
    args = parser.parse_args(argv)
    batches = parse_list(parser, "--batch-sizes", args.batch_sizes, int)
    rows = [run_one(loss, batch, args) for batch in batches for loss in LOSSES]
    lines = [
        "| loss | batch n | tau | steps | first ESS | final ESS | logreg acc | kNN acc |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {LOSSES[r['loss']]} | {r['batch']} | {r['tau']:g} | {r['steps']} | {r['curve'][0][1]:.4f} | "
            f"{r['final_ess']:.4f} | {r['logreg_acc']:.3f} | {r['knn_acc']:.3f} |"
        )
    write_outputs(args.out, lines, figure(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
