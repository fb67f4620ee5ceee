"""``mvapp experiment pairs``: image-text retrieval recall of the paired configs (``configs/pairs_*.yaml``).

Each config trains for ``steps`` steps unless done (run named after the config), then
:func:`multiview_app.eval.retrieval.run_retrieval` scores image-to-text and text-to-image recall and the
zero-shot accuracy, trained and random init. Resumable like every results table
(:func:`.sweeps.results_row`); the table is rewritten after every config.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

CONFIGS = ("pairs_clip_k2", "pairs_infonce_pwe", "pairs_pvc_geometric", "pairs_m3g")
"""The default rows: the k = 2 CLIP baseline, then the k = 3 mixed-view losses."""
METRICS = ("i2t_R@1", "i2t_R@5", "i2t_R@10", "t2i_R@1", "t2i_R@5", "t2i_R@10", "zero_shot_acc")
"""The retrieval metrics tabulated, in column order."""
TABLE = "pairs"
"""The table's file stem under the output folder (``pairs.md`` / ``pairs.json``)."""


@dataclass(frozen=True)
class PairsKnobs:
    """Knobs of ``mvapp experiment pairs`` (keys of ``configs/experiment_pairs.yaml``)."""

    steps: int = 400  #: training steps per run (train.max_steps)
    configs: tuple[str, ...] = CONFIGS  #: training configs: a stem under configs/ or a YAML path
    overrides: tuple[str, ...] = ()  #: training config overrides applied to every run


def config_path(name: str) -> Path:
    """``configs/<name>.yaml`` for a stem, ``name`` itself for a path ending in ``.yaml``."""
    return Path(name) if name.endswith((".yaml", ".yml")) else Path("configs") / f"{name}.yaml"


def run_one(knobs: PairsKnobs, name: str, runs_dir: Path, fresh: bool) -> dict[str, Any]:
    """Train config ``name`` unless done, evaluate retrieval, return its table row."""
    from ..config import load_config
    from ..eval.retrieval import run_retrieval
    from .sweeps import results_row

    overrides = [f"train.max_steps={knobs.steps}", f"output.runs_dir={runs_dir}", *knobs.overrides]
    stem = config_path(name).stem
    cfg = load_config(config_path(name), overrides, name=stem)

    def make_row(run: Any) -> dict[str, Any]:
        ev = run_retrieval(cfg.run_dir)
        return {
            "config": stem,
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


def table(rows: list[dict[str, Any]], failures: dict[str, str], command: str) -> str:
    """The Markdown page: the command, one line per config, the random-init reference, failed configs."""
    lines = [
        f"Produced by `{command}`.",
        "",
        "| config | loss | views (image + text) | steps | train time (s) | " + " | ".join(METRICS) + " |",
        "|---|---|---|---|---|" + "---:|" * len(METRICS),
    ]
    for r in rows:
        views = f"{r['k'] - r['text_views']} + {r['text_views']}"
        scores = " | ".join(f"{r['trained'][m]:.3f}" for m in METRICS)
        lines.append(f"| {r['config']} | {r['loss']} | {views} | {r['steps']} | {r['train_s']:.0f} | {scores} |")
    if rows:
        reference = " | ".join(f"{rows[0]['random_init'][m]:.3f}" for m in METRICS)
        lines.append(f"| random init (reference) | - | - | 0 | - | {reference} |")
    lines += [f"| {name} | failed: {err} |" + " |" * (4 + len(METRICS)) for name, err in failures.items()]
    return "\n".join(lines) + "\n"


def experiment(knobs: PairsKnobs, out: Path, command: str, fresh: bool = False) -> dict[str, Any]:
    """Every config trained unless done and evaluated under ``out``; ``out/pairs.md`` rewritten after each,
    ``out/pairs.json`` at the end. Returns the summary (rows, failures)."""
    from ..fileio import atomic_write_json, atomic_write_text
    from .knobs import knobs_dict

    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    failures: dict[str, str] = {}
    for name in knobs.configs:
        print(f"== {name}", flush=True)
        try:
            rows.append(run_one(knobs, name, out, fresh))
        except Exception as exc:  # noqa: BLE001 - recorded in the table; the other configs go on
            failures[name] = " ".join(str(exc).split())[:200]
            print(f"!! {name} failed: {failures[name]}", flush=True)
        atomic_write_text(out / f"{TABLE}.md", table(rows, failures, command))
    summary = {"command": command, "knobs": knobs_dict(knobs), "rows": rows, "failures": failures}
    atomic_write_json(out / f"{TABLE}.json", summary)
    return summary


__all__ = ["CONFIGS", "METRICS", "TABLE", "PairsKnobs", "config_path", "experiment", "table"]
