"""More views per item on digits: AggNCE Table 1 (k - 1 positives at a fixed number of items) and
poly-view Fig. 3 (growing vs fixed batch).

    .venv/bin/python scripts/reproduce/aggnce/reproduce_multiview_k.py [--ks 2,3,5] [--steps 150] [--batch 64] [--small]
        [--seeds 0,1,2] [--runs-dir runs/repro_multiview_k] [--out runs/figures/multiview_k]

Runs, all with ``train.max_steps = --steps`` and the linear probe at the end:

* ``aggnce``, ``views.batch_mode=growing``, ``--batch`` items with k views each (k - 1 positives
  per anchor), k in ``--ks``;
* ``pvc_geometric`` growing (``--batch`` items x k views: compute grows with k) and fixed
  (``--batch`` views in total, ``--batch // k`` items: equal views, i.e. roughly equal encoder
  compute, per step), k in ``--ks``.

Every run is repeated for each training seed in ``--seeds`` (``train.seed``); the table and the
figure give mean +- std over seeds (population std; a single seed shows +- 0).
Writes ``<out>.png`` (probe accuracy vs k per family) and ``<out>.md``.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from multiview_app.experiments.reproduce import ROOT, SMALL, new_figure, parse_list, train_digits, write_outputs  # noqa: E402

FAMILIES = (("aggnce", "growing"), ("pvc_geometric", "growing"), ("pvc_geometric", "fixed"))


def run_one(loss: str, mode: str, k: int, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    name = (
        f"{loss}_{mode}_k{k}_b{args.batch}_s{args.steps}"
        + ("_small" if args.small else "")
        + (f"_seed{seed}" if seed else "")
    )  # seed 0 keeps the name of the earlier single-seed runs
    overrides = [
        f"train.max_steps={args.steps}",
        f"train.batch_size={args.batch}",
        f"views.k={k}",
        f"views.batch_mode={mode}",
        "train.log_every=10",
        f"train.seed={seed}",
    ] + (SMALL if args.small else [])
    records, probe = train_digits(loss, name, overrides, args.runs_dir)
    last = records[-1]
    return {
        "loss": loss,
        "mode": mode,
        "k": k,
        "seed": seed,
        "steps": args.steps,
        "logreg_acc": probe["trained"]["logreg_acc"],
        "knn_acc": probe["trained"]["knn_acc"],
        "random_init": probe["random_init"]["logreg_acc"],
        "rankme": last.get("diag/rankme", float("nan")),
        "step_time_s": last.get("step_time_s", float("nan")),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ks", default="2,3,5")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--families", default=",".join(f"{loss}:{mode}" for loss, mode in FAMILIES))
    parser.add_argument("--small", action="store_true", help="16 px images, width-16 encoder")
    parser.add_argument("--seeds", default="0", help="training seeds, comma-separated")
    parser.add_argument("--runs-dir", default=str(ROOT / "runs" / "repro_multiview_k"))
    parser.add_argument("--out", default=str(ROOT / "runs" / "figures" / "multiview_k"))
    args = parser.parse_args(argv)
    ks = parse_list(parser, "--ks", args.ks, int)
    families = [tuple(f.split(":")) for f in parse_list(parser, "--families", args.families, str)]
    if any(len(f) != 2 for f in families):
        parser.error(f"--families: expected loss:mode pairs, got {args.families!r}")
    seeds = parse_list(parser, "--seeds", args.seeds, int)
    runs = [run_one(loss, mode, k, seed, args) for loss, mode in families for k in ks for seed in seeds]
    lines = [
        f"Training seeds {', '.join(map(str, seeds))}: mean +- std over seeds.",
        "",
        "| loss | batch mode | k | items x views per step | logreg acc | kNN acc | random-init logreg | RankMe (last) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    rows = []
    for loss, mode in families:
        for k in ks:
            mine = [r for r in runs if (r["loss"], r["mode"], r["k"]) == (loss, mode, k)]
            stat = {
                key: (float(np.mean([r[key] for r in mine])), float(np.std([r[key] for r in mine])))
                for key in ("logreg_acc", "knn_acc", "random_init", "rankme")
            }
            rows.append({"loss": loss, "mode": mode, "k": k, **stat})
            items = args.batch if mode == "growing" else args.batch // k
            lines.append(
                f"| {loss} | {mode} | {k} | {items} x {k} | "
                + " | ".join(
                    f"{stat[key][0]:.3f} +- {stat[key][1]:.3f}" for key in ("logreg_acc", "knn_acc", "random_init")
                )
                + f" | {stat['rankme'][0]:.1f} |"
            )
    fig, (ax,) = new_figure(1, (5, 3.4))
    for loss, mode in families:
        mine = [r for r in rows if r["loss"] == loss and r["mode"] == mode]
        ax.errorbar(
            [r["k"] for r in mine],
            [r["logreg_acc"][0] for r in mine],
            yerr=[r["logreg_acc"][1] for r in mine],
            marker="o",
            capsize=3,
            label=f"{loss} ({mode})",
        )
    ax.set(xlabel="views per item k", ylabel="linear-probe accuracy", title=f"digits, {args.steps} steps")
    ax.legend(fontsize=8)
    write_outputs(args.out, lines, fig)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
