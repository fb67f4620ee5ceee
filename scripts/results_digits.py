"""Train every configs/digits_<loss>.yaml and write the linear-probe table to ``--out`` (default runs/results_digits/results.md).

Besides the self-supervised losses, the table has the supervised ceiling (``supervised_ce``,
configs/digits_supervised_ce.yaml): the same encoder trained with cross-entropy on the training labels, frozen and
probed the same way (``--no-supervised`` skips it).

    .venv/bin/python scripts/results_digits.py [--steps 400] [--losses m3g,mveb] [--runs-dir runs/results_digits]
        [--seeds 0,1,2]

``--seeds``: one run per loss and seed (``train.seed``; seed 0 is the run ``digits_<loss>``, seed s the run
``digits_<loss>_seed<s>``); with more than one seed the table ends with the mean +- std (population) over
seeds of each loss's accuracies and its collapse stats of the last logged step (BYOL rows only): embedding
std / RankMe of the online projections (``collapse/embedding_std`` / ``collapse/rankme``) and of the online
encoder's features, what the probe reads (``collapse/feature_std`` / ``collapse/feature_rankme``).

Resumable (``multiview_app.experiments.reproduce.train_unless_done``): a loss whose run has its results row is taken as it
is; a finished model (model.safetensors) is reused, never retrained (its linear probe runs again when
eval/linear_probe.json is missing); an interrupted attempt resumes from its latest checkpoint (use
--fresh to retrain); the table is rewritten (atomically) after every loss.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from multiview_app.config import load_config  # noqa: E402
from multiview_app.experiments.reproduce import ROOT, RunSummary, linear_probe_results, results_row  # noqa: E402
from multiview_app.losses import available_losses  # noqa: E402
from multiview_app.train.metrics import read_metrics  # noqa: E402
from multiview_app.train.run_io import atomic_write_text  # noqa: E402

SUPERVISED = "supervised_ce"
"""The supervised ceiling's row (configs/digits_supervised_ce.yaml)."""


COLLAPSE_KEYS = (
    "stats/collapse/embedding_std",
    "stats/collapse/rankme",
    "stats/collapse/feature_std",
    "stats/collapse/feature_rankme",
)
"""Collapse stats of the BYOL method, read from the last metrics row that has them."""


def run_one(loss: str, steps: int, runs_dir: Path, fresh: bool, seed: int = 0) -> dict:
    """Train (unless done) and return the row of the table."""
    cfg = load_config(
        ROOT / "configs" / f"digits_{loss}.yaml",
        [f"train.max_steps={steps}", f"output.runs_dir={runs_dir}", "eval.linear_probe=true", f"train.seed={seed}"],
        name=f"digits_{loss}" + (f"_seed{seed}" if seed else ""),
    )

    def make_row(run: RunSummary) -> dict:
        start = time.perf_counter()
        probe = linear_probe_results(cfg.run_dir)
        records = read_metrics(cfg.run_dir / "metrics.jsonl")
        collapse = [r for r in records if COLLAPSE_KEYS[0] in r]
        return {
            "loss": loss,
            "seed": seed,
            "collapse": {k: collapse[-1][k] for k in COLLAPSE_KEYS if k in collapse[-1]} if collapse else {},
            "steps": run.steps,
            "wall_s": run.train_s + time.perf_counter() - start,
            "items_per_s": run.items_per_s,
            "final_loss": run.final_loss,
            "reused_model": run.reused,
            "batch_size": cfg.train.batch_size,
            "k": cfg.views.k,
            "teacher": cfg.model.teacher.enabled,
            "trained": probe["trained"],
            "random_init": probe["random_init"],
            "data_share": sum(r.get("time/data", 0) for r in records) / max(1, len(records)),
        }

    return results_row(cfg, fresh, make_row)


def write_table(rows: list[dict], failures: dict[str, str], steps: int, out: Path) -> None:
    lines = [
        "# Linear-probe results on digits (every loss of the head)",
        "",
        "Produced by `.venv/bin/python scripts/results_digits.py --steps "
        f"{steps}{seeds_flag(rows)}` (CPU, 2 shared cores; each config is `configs/digits_<loss>.yaml` with "
        f"`train.max_steps={steps}`). Data: scikit-learn's handwritten digits up-sampled to 32 px "
        "(1,437 train / 360 test, fixed split); encoder small_cnn (~0.1 M params); frozen features "
        "(128-d, before the projector) -> standardize -> logistic regression / cosine kNN (k=20). "
        "`random init` is the same encoder at its initial weights (`init.safetensors`). Wall time includes "
        "the evaluation. `supervised_ce` is the supervised ceiling: the same encoder, views and budget trained with "
        "cross-entropy on the training labels (a linear head on each view's features), frozen and probed the same way.",
        "",
        "| loss | seed | steps | batch x k | teacher | wall time (s) | items/s | logreg acc | random-init logreg | kNN acc | random-init kNN | logreg gain |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        t, ri = r["trained"], r["random_init"]
        lines.append(
            f"| {r['loss'] + (' (supervised ceiling)' if r['loss'] == SUPERVISED else '')} | {r.get('seed', 0)} | {r['steps']} | {r['batch_size']} x {r['k']} | {'EMA' if r['teacher'] else '-'} | "
            f"{r['wall_s']:.0f} | {r['items_per_s']:.0f} | {t['logreg_acc']:.3f} | {ri['logreg_acc']:.3f} | "
            f"{t['knn_acc']:.3f} | {ri['knn_acc']:.3f} | {t['logreg_acc'] - ri['logreg_acc']:+.3f} |"
        )
    for loss, err in failures.items():
        lines.append(f"| {loss} | failed: {err} | | | | | | | | | | |")
    if len({r.get("seed", 0) for r in rows}) > 1:
        lines += ["", *seed_summary(rows)]
    atomic_write_text(out, "\n".join(lines) + "\n")


def seeds_flag(rows: list[dict]) -> str:
    """`` --seeds a,b`` when the rows are not all seed 0, else ``""``."""
    seeds = sorted({r.get("seed", 0) for r in rows})
    return "" if seeds in ([], [0]) else f" --seeds {','.join(map(str, seeds))}"


def seed_summary(rows: list[dict]) -> list[str]:
    """Per loss: mean +- std (population) over its seeds of the probe accuracies and collapse stats."""

    def cell(values: list[float], digits: int = 3) -> str:
        return f"{np.mean(values):.{digits}f} +- {np.std(values):.{digits}f}" if values else "-"

    lines = [
        "Mean +- std over seeds:",
        "",
        "| loss | seeds | kNN acc | random-init kNN | kNN gain | logreg acc | random-init logreg | "
        "embedding std | RankMe | feature std | feature RankMe |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for loss in dict.fromkeys(r["loss"] for r in rows):
        group = [r for r in rows if r["loss"] == loss]
        score = {
            f"{which}/{metric}": [r[which][metric] for r in group]
            for which in ("trained", "random_init")
            for metric in ("knn_acc", "logreg_acc")
        }
        gain = [r["trained"]["knn_acc"] - r["random_init"]["knn_acc"] for r in group]
        collapse = {key: [r["collapse"][key] for r in group if key in r.get("collapse", {})] for key in COLLAPSE_KEYS}
        stds, ranks, feature_stds, feature_ranks = collapse.values()
        lines.append(
            f"| {loss} | {','.join(str(r.get('seed', 0)) for r in group)} | {cell(score['trained/knn_acc'])} | "
            f"{cell(score['random_init/knn_acc'])} | {cell(gain)} | {cell(score['trained/logreg_acc'])} | "
            f"{cell(score['random_init/logreg_acc'])} | {cell(stds)} | {cell(ranks, 1)} | "
            f"{cell(feature_stds)} | {cell(feature_ranks, 1)} |"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--losses", default=None, help="comma-separated subset (default: all)")
    parser.add_argument("--runs-dir", type=Path, default=ROOT / "runs" / "results_digits")
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "runs" / "results_digits" / "results.md",
        help="Markdown table (docs/results.md only when given here)",
    )
    parser.add_argument("--seeds", default="0", help="comma-separated train.seed values (default: 0)")
    parser.add_argument("--fresh", action="store_true", help="retrain even if a finished run exists")
    parser.add_argument(
        "--no-supervised",
        action="store_true",
        help=f"skip the supervised ceiling ({SUPERVISED}: cross-entropy on the training labels)",
    )
    args = parser.parse_args()
    losses = args.losses.split(",") if args.losses else available_losses()
    if not args.no_supervised and SUPERVISED not in losses:
        losses.append(SUPERVISED)
    rows, failures = [], {}
    for seed in (int(s) for s in args.seeds.split(",")):
        for loss in losses:
            print(f"== {loss} seed {seed}", flush=True)
            try:
                rows.append(run_one(loss, args.steps, args.runs_dir, args.fresh, seed))
            except Exception as exc:  # noqa: BLE001 - record and go on with the other losses
                failures[f"{loss} (seed {seed})"] = " ".join(str(exc).split())[:200]
                print(f"!! {loss} seed {seed} failed: {failures[f'{loss} (seed {seed})']}", flush=True)
            write_table(rows, failures, args.steps, args.out)
    print(f"wrote {args.out}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
