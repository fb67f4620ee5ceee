"""``mvapp experiment digits``: the linear-probe table of every loss on scikit-learn's digits.

Each loss trains ``configs/digits_<loss>.yaml`` (the knob ``configs``) for ``steps`` steps once per seed
(run ``digits_<loss>``, seed s > 0: ``digits_<loss>_seed<s>``), then its frozen features are probed
(logistic regression and cosine kNN, trained and random init). The supervised ceiling (``supervised_ce``:
the same encoder trained with cross-entropy on the training labels) joins unless ``supervised: false``.
With more than one seed the table ends with mean +- std (population) over seeds, including the collapse
statistics of the last logged step (BYOL rows only). Resumable: a run with its saved results row is taken
as it is, a finished model is reused, an interrupted one resumes (:func:`.sweeps.results_row`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

SUPERVISED = "supervised_ce"
"""The supervised ceiling's row (configs/digits_supervised_ce.yaml)."""
COLLAPSE_KEYS = (
    "stats/collapse/embedding_std",
    "stats/collapse/rankme",
    "stats/collapse/feature_std",
    "stats/collapse/feature_rankme",
)
"""Collapse stats of the BYOL method, read from the last metrics row that has them."""
TABLE = "digits"
"""The table's file stem under the output folder (``digits.md`` / ``digits.json``)."""


@dataclass(frozen=True)
class DigitsKnobs:
    """Knobs of ``mvapp experiment digits`` (keys of ``configs/experiment_digits.yaml``)."""

    steps: int = 400  #: training steps per run (train.max_steps)
    losses: tuple[str, ...] = ()  #: losses compared (empty: every self-supervised loss)
    seeds: tuple[int, ...] = (0,)  #: train.seed values, one run per loss and seed
    supervised: bool = True  #: add the supervised ceiling row (supervised_ce)
    configs: str = "configs/digits_{loss}.yaml"  #: training config of each loss ({loss} is replaced)
    overrides: tuple[str, ...] = ()  #: training config overrides applied to every run


def losses_of(knobs: DigitsKnobs) -> list[str]:
    """The rows' losses: the knob's (or every self-supervised loss), then the supervised ceiling."""
    from ..losses import available_losses

    losses = list(knobs.losses) or available_losses()
    return losses + ([SUPERVISED] if knobs.supervised and SUPERVISED not in losses else [])


def run_one(knobs: DigitsKnobs, loss: str, seed: int, runs_dir: Path, fresh: bool) -> dict[str, Any]:
    """Train ``loss`` with ``seed`` unless done and return its table row (probe accuracies, timing, collapse
    stats of the last logged step)."""
    from ..config import load_config
    from ..train.metrics import read_metrics
    from .sweeps import linear_probe_results, results_row

    overrides = [f"train.max_steps={knobs.steps}", f"output.runs_dir={runs_dir}", "eval.linear_probe=true"]
    name = f"digits_{loss}" + (f"_seed{seed}" if seed else "")
    cfg = load_config(knobs.configs.format(loss=loss), [*overrides, f"train.seed={seed}", *knobs.overrides], name=name)

    def make_row(run: Any) -> dict[str, Any]:
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
        }

    return results_row(cfg, fresh, make_row)


def row_line(r: dict[str, Any]) -> str:
    """One loss and seed as a Markdown table line."""
    t, ri = r["trained"], r["random_init"]
    name = r["loss"] + (" (supervised ceiling)" if r["loss"] == SUPERVISED else "")
    return (
        f"| {name} | {r['seed']} | {r['steps']} | {r['batch_size']} x {r['k']} | {'EMA' if r['teacher'] else '-'} | "
        f"{r['wall_s']:.0f} | {r['items_per_s']:.0f} | {t['logreg_acc']:.3f} | {ri['logreg_acc']:.3f} | "
        f"{t['knn_acc']:.3f} | {ri['knn_acc']:.3f} | {t['logreg_acc'] - ri['logreg_acc']:+.3f} |"
    )


def table(rows: list[dict[str, Any]], failures: dict[str, str], command: str) -> str:
    """The Markdown page: the command, one line per run, failed runs, and the seed summary when several seeds."""
    lines = [
        f"Produced by `{command}`. Data: scikit-learn's handwritten digits up-sampled to 32 px (1,437 train / 360 "
        "test, fixed split); frozen encoder features -> standardize -> logistic regression / cosine kNN (k = 20). "
        "`random init` is the same encoder at its initial weights; wall time includes the evaluation; "
        f"`{SUPERVISED}` is the supervised ceiling (cross-entropy on the training labels, probed the same way).",
        "",
        "| loss | seed | steps | batch x k | teacher | wall time (s) | items/s | logreg acc | random-init logreg "
        "| kNN acc | random-init kNN | logreg gain |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
        *(row_line(r) for r in rows),
        *(f"| {name} | failed: {err} |" + " |" * 10 for name, err in failures.items()),
    ]
    if len({r["seed"] for r in rows}) > 1:
        lines += ["", *seed_summary(rows)]
    return "\n".join(lines) + "\n"


def _cell(values: list[float], digits: int = 3) -> str:
    """``mean +- std`` (population) of ``values``, ``-`` when empty."""
    return f"{np.mean(values):.{digits}f} +- {np.std(values):.{digits}f}" if values else "-"


def seed_summary(rows: list[dict[str, Any]]) -> list[str]:
    """Per loss: mean +- std over its seeds of the probe accuracies, the kNN gain and the collapse stats."""
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
            (w, m): [r[w][m] for r in group] for w in ("trained", "random_init") for m in ("knn_acc", "logreg_acc")
        }
        gain = [r["trained"]["knn_acc"] - r["random_init"]["knn_acc"] for r in group]
        stats = [[r["collapse"][key] for r in group if key in r["collapse"]] for key in COLLAPSE_KEYS]
        cells = [_cell(score["trained", "knn_acc"]), _cell(score["random_init", "knn_acc"]), _cell(gain)]
        cells += [_cell(score["trained", "logreg_acc"]), _cell(score["random_init", "logreg_acc"])]
        cells += [_cell(values, 1 if "rankme" in key else 3) for key, values in zip(COLLAPSE_KEYS, stats, strict=True)]
        lines.append(f"| {loss} | {','.join(str(r['seed']) for r in group)} | " + " | ".join(cells) + " |")
    return lines


def experiment(knobs: DigitsKnobs, out: Path, command: str, fresh: bool = False) -> dict[str, Any]:
    """Every loss x seed trained unless done under ``out``; ``out/digits.md`` and ``.json`` rewritten after
    each run (an interrupted sweep leaves a table of what finished). Returns the summary (rows, failures)."""
    from ..fileio import atomic_write_json, atomic_write_text
    from .knobs import knobs_dict

    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    failures: dict[str, str] = {}
    for seed in knobs.seeds:
        for loss in losses_of(knobs):
            print(f"== {loss} seed {seed}", flush=True)
            try:
                rows.append(run_one(knobs, loss, seed, out, fresh))
            except Exception as exc:  # noqa: BLE001 - recorded in the table; the other losses go on
                failures[f"{loss} (seed {seed})"] = " ".join(str(exc).split())[:200]
                print(f"!! {loss} seed {seed} failed: {failures[f'{loss} (seed {seed})']}", flush=True)
            atomic_write_text(out / f"{TABLE}.md", table(rows, failures, command))
    summary = {"command": command, "knobs": knobs_dict(knobs), "rows": rows, "failures": failures}
    atomic_write_json(out / f"{TABLE}.json", summary)
    return summary


__all__ = ["COLLAPSE_KEYS", "SUPERVISED", "TABLE", "DigitsKnobs", "experiment", "losses_of", "seed_summary", "table"]
