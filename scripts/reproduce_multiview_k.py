"""More views per item on digits: AggNCE Table 1 (k - 1 positives at a fixed number of items) and
poly-view Fig. 3 (growing vs fixed batch).

    .venv/bin/python scripts/reproduce_multiview_k.py [--ks 2,3,5] [--steps 150] [--batch 64] [--small]
        [--runs-dir runs/repro_multiview_k] [--out docs/figures/multiview_k]

Runs, all with ``train.max_steps = --steps`` and the linear probe at the end:

* ``aggnce``, ``views.batch_mode=growing``, ``--batch`` items with k views each (k - 1 positives
  per anchor), k in ``--ks``;
* ``pvc_geometric`` growing (``--batch`` items x k views: compute grows with k) and fixed
  (``--batch`` views in total, ``--batch // k`` items: equal views, i.e. roughly equal encoder
  compute, per step), k in ``--ks``.

Writes ``<out>.png`` (probe accuracy vs k per family) and ``<out>.md``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from repro_common import ROOT, SMALL, new_figure, parse_list, train_digits, write_outputs  # noqa: E402

FAMILIES = (("aggnce", "growing"), ("pvc_geometric", "growing"), ("pvc_geometric", "fixed"))


def run_one(loss: str, mode: str, k: int, args: argparse.Namespace) -> dict[str, Any]:
    name = f"{loss}_{mode}_k{k}_b{args.batch}_s{args.steps}" + ("_small" if args.small else "")
    overrides = [f"train.max_steps={args.steps}", f"train.batch_size={args.batch}", f"views.k={k}",
                 f"views.batch_mode={mode}", "train.log_every=10"] + (SMALL if args.small else [])
    records, probe = train_digits(loss, name, overrides, args.runs_dir)
    last = records[-1]
    return {"loss": loss, "mode": mode, "k": k, "steps": args.steps, "logreg_acc": probe["trained"]["logreg_acc"],
            "knn_acc": probe["trained"]["knn_acc"], "random_init": probe["random_init"]["logreg_acc"],
            "rankme": last.get("diag/rankme", float("nan")), "step_time_s": last.get("step_time_s", float("nan"))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ks", default="2,3,5")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--families", default="aggnce:growing,pvc_geometric:growing,pvc_geometric:fixed")
    parser.add_argument("--small", action="store_true", help="16 px images, width-16 encoder")
    parser.add_argument("--runs-dir", default=str(ROOT / "runs" / "repro_multiview_k"))
    parser.add_argument("--out", default=str(ROOT / "docs" / "figures" / "multiview_k"))
    args = parser.parse_args(argv)
    ks = parse_list(parser, "--ks", args.ks, int)
    families = [tuple(f.split(":")) for f in parse_list(parser, "--families", args.families, str)]
    if any(len(f) != 2 for f in families):
        parser.error(f"--families: expected loss:mode pairs, got {args.families!r}")
    rows = [run_one(loss, mode, k, args) for loss, mode in families for k in ks]
    lines = ["| loss | batch mode | k | items x views per step | logreg acc | kNN acc | random-init logreg | RankMe (last) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        items = args.batch if r["mode"] == "growing" else args.batch // r["k"]
        lines.append(f"| {r['loss']} | {r['mode']} | {r['k']} | {items} x {r['k']} | {r['logreg_acc']:.3f} | "
                     f"{r['knn_acc']:.3f} | {r['random_init']:.3f} | {r['rankme']:.1f} |")
    fig, (ax,) = new_figure(1, (5, 3.4))
    for loss, mode in families:
        mine = [r for r in rows if r["loss"] == loss and r["mode"] == mode]
        ax.plot([r["k"] for r in mine], [r["logreg_acc"] for r in mine], marker="o", label=f"{loss} ({mode})")
    ax.set(xlabel="views per item k", ylabel="linear-probe accuracy", title=f"digits, {args.steps} steps")
    ax.legend(fontsize=8)
    write_outputs(args.out, lines, fig)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
