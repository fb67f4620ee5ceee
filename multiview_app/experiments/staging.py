"""Sleep staging across pretraining runs: a run's stored evaluation reused when its settings match,
pooling over pretraining seeds x folds x draws, paired differences between losses on the same fits,
and the Markdown table (scripts/reproduce/m3g/reproduce_m3g_eeg.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..data.eeg.stages import STAGES
from ..eval.protocols.probe import mean_std
from ..eval.protocols.staging import pool_results
from ..eval.protocols.stats import ci_text, paired_summary, smallest_sign_flip_p, unit_means
from ..eval.sleep_staging import run_sleep_staging

TABLE_METRICS = ("balanced_accuracy", "kappa")
"""Table metrics: the evaluator's headline (neither rewards the class prior)."""
REFERENCE_LOSS = "m3g"
"""The loss the paired differences are taken against."""


def staging_result(
    run_dir: Path,
    *,
    cache: Path | None,
    folds: int,
    shots: list[int],
    draws: int,
    combine: str = "concat",
    stages: list[str] | None = None,
    yasa: bool = False,
) -> dict[str, Any]:
    """The sleep-staging result of one run (in-domain, or on another dataset's ``cache``: cross-dataset,
    or e.g. the real DREAMS excerpts): the stored ``eval/sleep_staging[_<dataset>].json`` when it holds
    the same shots, draws, folds, cache, ``combine`` and ``stages``, per-subject scores in its fits, the
    supervised-ceiling checkpoint the run's record names now and (``yasa``) a ``yasa`` row, else a fresh
    evaluation (baselines included, C chosen inside the drawn windows)."""
    from ..data.eeg.cache import load_manifest
    from ..eval.sleep_staging import ceiling_description
    from ..eval.supervised_ceiling import CEILING_ROW, ceiling_record, ceiling_weights
    from ..eval.yasa import YASA_ROW

    stem = f"sleep_staging_{load_manifest(cache)['dataset']}" if cache else "sleep_staging"
    stored = run_dir / "eval" / f"{stem}.json"
    record = ceiling_record(run_dir)
    if stored.is_file():
        result = json.loads(stored.read_text())
        if (
            result["shots"] == list(shots)
            and result["seeds"] == draws
            and len(result["folds"]) == folds
            and _per_subject_fits(result)
            and result.get("combine") == combine
            and result.get("stages") == (list(stages) if stages else list(STAGES))
            and (cache is None or Path(result["cache"]).resolve() == cache.resolve())
            and result.get(CEILING_ROW) == ceiling_description(ceiling_weights(record) if record else None)
            and (not yasa or YASA_ROW in result["results"])
        ):
            return result
    return run_sleep_staging(
        run_dir,
        cache=str(cache) if cache else None,
        folds=folds,
        shots=tuple(shots),
        seeds=draws,
        baselines=True,
        progress=False,
        combine=combine,
        stages=stages,
        yasa=yasa,
    )


def train_supervised_ceiling(
    run_dir: str | Path, *, steps: int | None = None, progress: bool = True, batch_size: int = 16
) -> dict[str, Any]:
    """The supervised ceiling of the pretraining run ``run_dir`` (``eval.supervised_ceiling``), trained
    unless done: one run with validation subjects held out, ``steps`` budget (default the run's
    ``train.max_steps``), :data:`~multiview_app.eval.supervised_ceiling.CANDIDATES` checkpoints (fewer when
    the budget has fewer steps) scored on the validation subjects; the best checkpoint is the ceiling
    (``weights`` in the record). Writes and returns the record ``<run>/ceiling/supervised_ceiling.json``.
    Only the run's ``train`` split (the pretraining nights) is read; a second process waits for the first
    one's lock and reuses its run."""
    import fcntl

    from ..data.adapters import build_adapter
    from ..eval import supervised_ceiling as ceiling
    from ..train.run_io import atomic_write_json, load_run_config
    from .domains import ensure_pretrained

    run_dir = Path(run_dir)
    cfg = load_run_config(run_dir)
    budget = int(steps or cfg.train.max_steps or 0)
    if budget < 1:
        raise ValueError(
            f"supervised ceiling of {run_dir}: need a positive step budget (--steps); the run has "
            f"train.max_steps {cfg.train.max_steps}"
        )
    out = run_dir / ceiling.CEILING_DIR
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the in-domain and cross-dataset evaluations may ask at once
        pretraining = build_adapter(cfg.data.adapter, cfg.data.options).split_subjects["train"]
        val_subjects = ceiling.validation_subjects(pretraining, cfg.train.seed)
        record = ceiling.ceiling_record(run_dir)
        run_cfg = ceiling.ceiling_config(cfg, out, budget, val_subjects=val_subjects)
        if record and record.get("run") == str(run_cfg.run_dir) and ceiling.ceiling_weights(record) is not None:
            return record
        ensure_pretrained(run_cfg, progress=progress)
        candidates = dict(ceiling.candidate_weights(run_cfg.run_dir, budget))
        scores = {
            step: ceiling.validation_score(run_cfg.run_dir, weights, batch_size=batch_size)
            for step, weights in candidates.items()
        }
        chosen = max(scores, key=lambda step: (scores[step], -step))  # ties: the fewer steps
        record = {
            "run": str(run_cfg.run_dir),
            "weights": candidates[chosen],
            "budget": budget,
            "chosen_steps": chosen,
            "validation_balanced_accuracy": {str(k): v for k, v in scores.items()},
            "validation_subjects": val_subjects,
            "training_subjects": sorted(set(pretraining) - set(val_subjects)),
            "pretraining_subjects": pretraining,
            "recipe": ceiling.RECIPE,
            "encoder": cfg.model.encoders,
        }
        atomic_write_json(out / ceiling.CEILING_FILE, record)
        return record


def _per_subject_fits(result: dict[str, Any]) -> bool:
    """Whether every fit of a stored result holds per-subject scores (an older version's result has none)."""
    return all(
        "per_subject" in fit for rows in result["results"].values() for cell in rows.values() for fit in cell["runs"]
    )


def seed_means(result: dict[str, Any], row: str, metric: str, shots: list[int]) -> dict[str, float]:
    """Mean over folds x draws of one run's result: ``{str(s): mean}``."""
    return {str(s): result["results"][row][str(s)][metric]["mean"] for s in shots}


def paired_over_runs(
    per_seed: dict[str, list[dict[str, Any]]], metric: str, shots: list[int], reference: str = REFERENCE_LOSS
) -> dict[str, Any]:
    """Per loss != ``reference``: the reference minus that loss by test subject (``eval.protocols.stats``). The fits line
    up (same pretraining seed, staging split and draws); each fit's difference is taken per test subject,
    averaged per subject over the seeds and draws that share it, and summarized over subjects (mean, 95 %
    bootstrap CI, subjects ahead, n subjects). Only ``balanced_accuracy`` is kept per subject."""
    if metric != "balanced_accuracy":
        raise ValueError(
            f"paired differences by test subject: only balanced_accuracy is kept per subject, got {metric}"
        )
    out: dict[str, Any] = {}
    for loss, results in per_seed.items():
        if loss == reference or reference not in per_seed:
            continue
        out[loss] = {}
        for s in shots:
            per_subject = unit_means(
                (subject, score - b["per_subject"][subject])
                for ra, rb in zip(per_seed[reference], results)
                for a, b in zip(ra["results"]["trained"][str(s)]["runs"], rb["results"]["trained"][str(s)]["runs"])
                for subject, score in a["per_subject"].items()
            )
            out[loss][str(s)] = paired_summary(per_subject)
    return out


def pool_losses(per_seed: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Every loss's runs pooled into one result (mean +- std over pretraining runs x folds x draws)."""
    return {loss: pool_results(runs) for loss, runs in per_seed.items()}


def table_lines(
    protocol: str,
    pooled: dict[str, dict[str, Any]],
    per_seed: dict[str, list[dict[str, Any]]],
    paired: dict[str, dict[str, Any]],
    shots: list[int],
) -> list[str]:
    """Markdown: pooled mean +- std (seeds x folds x draws) per loss; std of the per-seed means;
    paired M3G differences."""
    cells = " | ".join(f"s={s}" for s in shots)
    lines = [
        f"### {protocol}",
        "",
        "balanced accuracy / kappa, mean ± std over pretraining seeds x folds x draws "
        "(in brackets: std of the per-pretraining-seed means, balanced accuracy)",
        "",
        f"| loss | encoder | seeds | {cells} |",
        "|---|---|---|" + "---|" * len(shots),
    ]
    for loss, result in pooled.items():
        for row in ("trained", "random_init", "bandpower"):
            if row == "bandpower" and loss != next(iter(pooled)):
                continue  # the band-power row does not depend on the run
            cell = []
            for s in shots:
                m = {k: result["results"][row][str(s)][k] for k in TABLE_METRICS}
                spread = mean_std([seed_means(r, row, "balanced_accuracy", [s])[str(s)] for r in per_seed[loss]])["std"]
                cell.append(
                    f"{m['balanced_accuracy']['mean']:.3f} ± {m['balanced_accuracy']['std']:.3f} "
                    f"[{spread:.3f}] / {m['kappa']['mean']:.3f}"
                )
            name = loss if row != "bandpower" else "(any)"
            lines.append(f"| {name} | {row} | {len(per_seed[loss])} | " + " | ".join(cell) + " |")
    if paired:
        n = max(cell["n"] for per_s in paired.values() for cell in per_s.values())
        lines += [
            "",
            "paired differences M3G - baseline (trained encoder, balanced accuracy) by test subject, the "
            "seeds and draws sharing a subject averaged first: mean [95 % BCa bootstrap CI over subjects], "
            f"exact sign-flip p, subjects with M3G ahead (n = {n}; smallest possible p "
            f"{smallest_sign_flip_p(n):.3g})",
            "",
            f"| baseline | {cells} |",
            "|---|" + "---|" * len(shots),
        ]
        for loss, per_s in paired.items():
            lines.append(f"| {loss} | " + " | ".join(ci_text(per_s[str(s)]) for s in shots) + " |")
    return lines + [""]


def protocol_summary(
    pooled: dict[str, dict[str, Any]],
    per_seed: dict[str, list[dict[str, Any]]],
    paired: dict[str, Any],
    shots: list[int],
) -> dict[str, Any]:
    """JSON summary of one protocol: pooled cells (without the per-fit ``runs``), per-seed means of the
    trained row, paired differences, number of folds."""
    first = next(iter(pooled))
    return {
        "pooled": {
            loss: {
                row: {s: {k: v for k, v in cell.items() if k != "runs"} for s, cell in rows.items()}
                for row, rows in p["results"].items()
            }
            for loss, p in pooled.items()
        },
        "per_seed_means": {
            loss: [seed_means(r, "trained", "balanced_accuracy", shots) for r in runs]
            for loss, runs in per_seed.items()
        },
        "paired_m3g_minus": paired,
        "folds": len(pooled[first]["folds"]),
    }


__all__ = [
    "TABLE_METRICS",
    "paired_over_runs",
    "pool_losses",
    "protocol_summary",
    "seed_means",
    "staging_result",
    "table_lines",
]
