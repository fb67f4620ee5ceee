"""Train the image-text configs (configs/pairs_*.yaml) and tabulate retrieval recall.

    .venv/bin/python scripts/results_pairs.py [--steps 400] [--configs pairs_m3g,pairs_clip_k2]
        [--runs-dir runs/results_pairs] [--out runs/results_pairs/table.md]

Resumable (``multiview_app.experiments.reproduce.train_unless_done``): a config whose run has its results row is taken as
it is; a finished model (model.safetensors) is reused, never retrained, and only evaluated; an
interrupted attempt resumes from its latest checkpoint (``--fresh`` retrains); the Markdown table is
rewritten (atomically) after every config.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from multiview_app.config import load_config  # noqa: E402
from multiview_app.eval.retrieval import run_retrieval  # noqa: E402
from multiview_app.experiments.reproduce import ROOT, RunSummary, results_row  # noqa: E402
from multiview_app.train.run_io import atomic_write_text  # noqa: E402

CONFIGS = ("pairs_clip_k2", "pairs_infonce_pwe", "pairs_pvc_geometric", "pairs_m3g")
METRICS = ("i2t_R@1", "i2t_R@5", "i2t_R@10", "t2i_R@1", "t2i_R@5", "t2i_R@10", "zero_shot_acc")


def run_one(name: str, steps: int, runs_dir: Path, fresh: bool, overrides: list[str]) -> dict:
    """Train (unless done), evaluate retrieval, return the table row."""
    cfg = load_config(
        ROOT / "configs" / f"{name}.yaml",
        [f"train.max_steps={steps}", f"output.runs_dir={runs_dir}", *overrides],
        name=name,
    )

    def make_row(run: RunSummary) -> dict:
        ev = run_retrieval(cfg.run_dir)
        return {
            "config": name,
            "loss": cfg.loss.name,
            "k": cfg.views.k,
            "text_views": ev["text_views"],
            "steps": run.steps,
            "batch_size": cfg.train.batch_size,
            "train_s": run.train_s,
            "final_loss": run.final_loss,
            "reused_model": run.reused,
            "trained": ev["results"]["trained"],
            "random_init": ev["results"]["random_init"],
            "images": ev["images"],
            "captions": ev["captions"],
        }

    return results_row(cfg, fresh, make_row)


def write_table(rows: list[dict], failures: dict[str, str], command: str, out: Path) -> str:
    head = "| config | loss | views (image + text) | steps | train time (s) | " + " | ".join(METRICS) + " |"
    lines = [f"Command: `{command}`", "", head, "|---|---|---|---|---|" + "---:|" * len(METRICS)]
    for r in rows:
        views = f"{r['k'] - r['text_views']} + {r['text_views']}"
        lines.append(
            f"| {r['config']} | {r['loss']} | {views} | {r['steps']} | {r['train_s']:.0f} | "
            + " | ".join(f"{r['trained'][m]:.3f}" for m in METRICS)
            + " |"
        )
    if rows:
        ri = rows[0]["random_init"]
        lines.append(
            "| random init (reference) | - | - | 0 | - | " + " | ".join(f"{ri[m]:.3f}" for m in METRICS) + " |"
        )
    for name, err in failures.items():
        lines.append(f"| {name} | failed: {err} |" + " |" * (4 + len(METRICS)))
    text = "\n".join(lines) + "\n"
    atomic_write_text(out, text)
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated config stems")
    parser.add_argument("--runs-dir", type=Path, default=ROOT / "runs" / "results_pairs")
    parser.add_argument("--out", type=Path, default=None, help="Markdown table (default: <runs-dir>/table.md)")
    parser.add_argument("--fresh", action="store_true")
    parser.add_argument("overrides", nargs="*", help="dotted overrides for every config")
    args = parser.parse_args()
    out = args.out or args.runs_dir / "table.md"
    command = "python scripts/results_pairs.py " + " ".join(sys.argv[1:])
    rows, failures = [], {}
    for name in args.configs.split(","):
        print(f"== {name}", flush=True)
        try:
            rows.append(run_one(name, args.steps, args.runs_dir, args.fresh, args.overrides))
        except Exception as exc:  # noqa: BLE001 - record and go on
            failures[name] = " ".join(str(exc).split())[:200]
            print(f"!! {name} failed: {failures[name]}", flush=True)
        text = write_table(rows, failures, command, out)
    print(text)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
