"""Train every configs/digits_<loss>.yaml and write the linear-probe table to ``--out`` (default runs/results_digits/results.md).

Besides the self-supervised losses, the table has the supervised ceiling (``supervised_ce``,
configs/digits_supervised_ce.yaml): the same encoder trained with cross-entropy on the training labels, frozen and
probed the same way (``--no-supervised`` skips it).

    .venv/bin/python scripts/results_digits.py [--steps 400] [--losses m3g,mveb] [--runs-dir runs/results_digits]

Resumable (``multiview_app.experiments.reproduce.train_unless_done``): a loss whose run has its results row is taken as it
is; a finished model (model.safetensors) is reused, never retrained (its linear probe runs again when
eval/linear_probe.json is missing); an interrupted attempt resumes from its latest checkpoint (use
--fresh to retrain); the table is rewritten (atomically) after every loss.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from multiview_app.config import load_config  # noqa: E402
from multiview_app.experiments.reproduce import ROOT, RunSummary, linear_probe_results, results_row  # noqa: E402
from multiview_app.losses import available_losses  # noqa: E402
from multiview_app.train.metrics import read_metrics  # noqa: E402
from multiview_app.train.run_io import atomic_write_text  # noqa: E402

SUPERVISED = "supervised_ce"
"""The supervised ceiling's row (configs/digits_supervised_ce.yaml)."""


def run_one(loss: str, steps: int, runs_dir: Path, fresh: bool) -> dict:
    """Train (unless done) and return the row of the table."""
    cfg = load_config(
        ROOT / "configs" / f"digits_{loss}.yaml",
        [f"train.max_steps={steps}", f"output.runs_dir={runs_dir}", "eval.linear_probe=true"],
        name=f"digits_{loss}",
    )

    def make_row(run: RunSummary) -> dict:
        start = time.perf_counter()
        probe = linear_probe_results(cfg.run_dir)
        records = read_metrics(cfg.run_dir / "metrics.jsonl")
        return {
            "loss": loss,
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
        f"{steps}` (CPU, 2 shared cores; each config is `configs/digits_<loss>.yaml` with "
        f"`train.max_steps={steps}`). Data: scikit-learn's handwritten digits up-sampled to 32 px "
        "(1,437 train / 360 test, fixed split); encoder small_cnn (~0.1 M params); frozen features "
        "(128-d, before the projector) -> standardize -> logistic regression / cosine kNN (k=20). "
        "`random init` is the same encoder at its initial weights (`init.safetensors`). Wall time includes "
        "the evaluation. `supervised_ce` is the supervised ceiling: the same encoder, views and budget trained with "
        "cross-entropy on the training labels (a linear head on each view's features), frozen and probed the same way.",
        "",
        "| loss | steps | batch x k | teacher | wall time (s) | items/s | logreg acc | random-init logreg | kNN acc | random-init kNN | logreg gain |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        t, ri = r["trained"], r["random_init"]
        lines.append(
            f"| {r['loss'] + (' (supervised ceiling)' if r['loss'] == SUPERVISED else '')} | {r['steps']} | {r['batch_size']} x {r['k']} | {'EMA' if r['teacher'] else '-'} | "
            f"{r['wall_s']:.0f} | {r['items_per_s']:.0f} | {t['logreg_acc']:.3f} | {ri['logreg_acc']:.3f} | "
            f"{t['knn_acc']:.3f} | {ri['knn_acc']:.3f} | {t['logreg_acc'] - ri['logreg_acc']:+.3f} |"
        )
    for loss, err in failures.items():
        lines.append(f"| {loss} | failed: {err} | | | | | | | | | |")
    atomic_write_text(out, "\n".join(lines) + "\n")


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
    for loss in losses:
        print(f"== {loss}", flush=True)
        try:
            rows.append(run_one(loss, args.steps, args.runs_dir, args.fresh))
        except Exception as exc:  # noqa: BLE001 - record and go on with the other losses
            failures[loss] = " ".join(str(exc).split())[:200]
            print(f"!! {loss} failed: {failures[loss]}", flush=True)
        write_table(rows, failures, args.steps, args.out)
    print(f"wrote {args.out}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
