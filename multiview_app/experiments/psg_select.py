"""Validation-chosen loss settings for ``mvapp experiment psg-modalities``.

Before the losses are compared, each loss's temperature-like setting is chosen on **validation nights**:
a third set of synthetic nights (other people again, generator seed ``val_seed``), used for nothing else.
For every loss, each value of its grid (:data:`DEFAULT_GRID`, or the sizes file's ``grid``) trains one run
per selection seed (the first ``select_seeds`` pretraining seeds, default 1) on the pretraining nights; their
frozen encoder features of the validation nights are scored by leave-one-subject-out staging with every
training label, and the value with the highest mean **macro-F1 of all modalities together** wins (ties: the
earlier value in the grid). A value with a run whose projections collapsed
(:func:`~multiview_app.train.diagnostics.run_collapse`: the loss at its value for identical embeddings, which
the encoder-feature criterion cannot see) is chosen only when every value has one. The criterion is fixed
before any run, and the test (evaluation) nights are never read. The chosen value's runs are reused as that
loss's runs of the comparison for those seeds.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Any

DEFAULT_GRID: dict[str, dict[str, list[float]]] = {
    "sleepfm_pairwise": {"init_log_scale": [0.0, 1.2, 2.3, 3.0]},
    "sleepfm_loo": {"init_log_scale": [0.0, 1.2, 2.3, 3.0]},
    "infonce_ave": {"tau": [0.05, 0.1, 0.2]},
    "pvc_geometric": {"tau": [0.025, 0.05, 0.1, 0.2]},
    "m3g": {"epsilon": [0.1, 0.2, 0.4, 0.8]},
    "mveb": {"beta": [0.001, 0.003, 0.01, 0.03]},
}
"""Loss -> ``{parameter: values}`` tried on the validation nights (the grid is the product of the lists).
Factors of about 2-3 around each loss's default, which every list holds, widened by one value where the
best validation score sat at an end (at the CPU-size comparison's nights; SleepFM's two losses share one grid). SleepFM's ``init_log_scale``
0.0 is its published start (logit scale 1); 2.3 is a temperature of 0.1, the others' default."""
CRITERION = ("staging, all labels", "all", "macro_f1")
"""(pooled table, row, metric) maximized on the validation nights."""


def settings_of(grid: dict[str, dict[str, list[Any]]], loss: str) -> list[dict[str, Any]]:
    """Every setting ``{parameter: value}`` of ``loss``'s grid (``[{}]``: no grid, the config's setting)."""
    params = grid.get(loss, {})
    return [dict(zip(params, values)) for values in itertools.product(*params.values())] or [{}]


def setting_tag(setting: dict[str, Any]) -> str:
    """A run-name tag of ``setting``: ``{"epsilon": 0.4}`` -> ``epsilon0.4`` (``""``: no setting)."""
    return "-".join(f"{k}{v:g}" if isinstance(v, int | float) else f"{k}{v}" for k, v in setting.items())


def setting_overrides(setting: dict[str, Any]) -> list[str]:
    """The training-config overrides of ``setting``: ``["loss.epsilon=0.4"]``."""
    return [f"loss.{k}={v}" for k, v in setting.items()]


def check_grid(grid: dict[str, Any], source: str) -> dict[str, dict[str, list[Any]]]:
    """``grid`` checked: loss -> parameter -> non-empty list; every parameter a parameter of its loss
    (``ValueError`` naming ``source``, the loss and the valid parameters)."""
    from ..losses import loss_parameters

    if not isinstance(grid, dict):
        raise ValueError(f"{source}: grid should map loss -> {{parameter: [values]}}, got {grid!r}")
    for loss, params in grid.items():
        valid = set(loss_parameters(loss))
        if not isinstance(params, dict) or not all(isinstance(v, list) and v for v in params.values()):
            raise ValueError(f"{source}: grid.{loss} should map parameter -> non-empty list of values, got {params!r}")
        unknown = sorted(set(params) - valid)
        if unknown:
            raise ValueError(f"{source}: grid.{loss}: unknown parameter(s) {unknown}; valid: {sorted(valid)}")
    return grid


COLLAPSED = " (collapsed)"
"""Marks a setting whose run's projections collapsed, in the progress line."""
COLLAPSE_NOTE = (
    "Projections: `collapsed (u)` where the run's last `diag/uniformity` u is above -0.01, every item's projected "
    "embedding nearly one point (the loss at its value for identical embeddings); the staging criterion reads the "
    "encoder features, so a collapsed run can still score; a value with a collapsed run (any seed) is chosen only when "
    "every value of its loss has one."
)
"""The selection table's note on the projections column."""

SCORE_FILE = "validation_score.json"
"""A run's validation score, kept in its folder with what it was measured on (reused when that matches)."""


def validation_score(run_dir: Path, cache: Path, windows: Any, sizes: Any) -> float:
    """:data:`CRITERION` of one run on the validation nights ``cache`` (``windows``: its ``EvalWindows``);
    kept in ``run_dir/validation_score.json`` and reused while the cache, criterion, shots and draws match."""
    from ..eval.modalities import evaluate_modalities
    from ..fileio import kept_json
    from .psg_modalities import embed

    def score() -> float:
        features = embed(run_dir, "final", cache, windows)
        result = evaluate_modalities(features, windows, tasks=("staging",), shots=sizes.shots, seeds=sizes.draws)[0]
        table, row, metric = CRITERION
        return float(result["settings"][table.split(", ", 1)[1]]["rows"][row][metric]["value"])

    key = {"cache": str(cache), "criterion": list(CRITERION), "shots": sizes.shots, "draws": sizes.draws}
    return float(kept_json(Path(run_dir) / SCORE_FILE, key, score, field="score"))


def score_setting(train: Any, loss: str, setting: dict, seeds: list[int], scoring: tuple) -> dict[str, Any]:
    """One grid value of ``loss`` trained with each of ``seeds`` and scored on the validation nights
    (``scoring``: ``(cache, windows, sizes)`` of :func:`validation_score`): its selection row, the score the mean
    over seeds, ``collapsed`` the first collapsed run's last uniformity (None when none collapsed)."""
    from ..train.diagnostics import run_collapse

    runs = [train(loss, seed, setting) for seed in seeds]
    per_seed = [validation_score(run, *scoring) for run in runs]
    collapsed = next((u for u in map(run_collapse, runs) if u is not None), None)
    return {
        "loss": loss,
        "setting": setting_tag(setting) or "config",
        "values": setting,
        "score": sum(per_seed) / len(per_seed),
        "seed_scores": per_seed,
        "collapsed": collapsed,
    }


def selection_seeds(sizes: Any) -> list[int]:
    """The pretraining seeds each grid value trains with: the first ``sizes.select_seeds`` (default 1)."""
    return list(sizes.seeds[: getattr(sizes, "select_seeds", 1)])


def select_settings(train: Any, cache: Path | None, sizes: Any) -> tuple[dict[str, dict[str, Any]], list[dict]]:
    """``({loss: chosen setting}, selection rows)``: every grid setting of every loss trained by
    ``train(loss, seed, setting) -> run folder`` with the first ``sizes.select_seeds`` pretraining seeds (default
    1) and scored on the validation nights ``cache`` (mean over those seeds; None: no selection, every loss at
    the config's setting); a setting with a collapsed run is chosen only when every setting of its loss has one."""
    if cache is None:
        return {loss: {} for loss in sizes.losses}, []
    from ..eval.modalities import cache_baselines

    windows = cache_baselines(cache, only=[])[0]
    seeds = selection_seeds(sizes)
    chosen, rows = {}, []
    for loss in sizes.losses:
        settings = settings_of(sizes.grid, loss)
        mine = [score_setting(train, loss, setting, seeds, (cache, windows, sizes)) for setting in settings]
        eligible = [i for i, r in enumerate(mine) if r["collapsed"] is None] or list(range(len(mine)))
        best = max(eligible, key=lambda i: (mine[i]["score"], -i))
        chosen[loss] = settings[best]
        mine[best]["chosen"] = True
        rows += mine
        tried = ", ".join(f"{r['setting']} {r['score']:.3f}{COLLAPSED * bool(r['collapsed'])}" for r in mine)
        print(f"{loss}: {setting_tag(chosen[loss]) or 'config'} chosen on validation nights ({tried})", file=sys.stderr)
    return chosen, rows


def seeds_text(sizes: Any) -> str:
    """``pretraining seed 0`` or ``pretraining seeds 0, 1`` (those the selection trains)."""
    seeds = selection_seeds(sizes)
    return f"pretraining seed{'s' * (len(seeds) > 1)} {', '.join(map(str, seeds))}"


def mean_text(sizes: Any) -> str:
    """``, mean over the seeds`` when the selection trains more than one."""
    return ", mean over the seeds" if len(selection_seeds(sizes)) > 1 else ""


def score_text(row: dict) -> str:
    """A selection row's score, bold when chosen, with its per-seed scores when there are several."""
    score = f"**{row['score']:.3f}**" if row.get("chosen") else f"{row['score']:.3f}"
    seeds = row.get("seed_scores") or []
    return score + (f" ({', '.join(f'{v:.3f}' for v in seeds)})" if len(seeds) > 1 else "")


def selection_markdown(rows: list[dict], sizes: Any) -> list[str]:
    """The page's selection section: one line per loss and setting, the chosen one in bold."""
    if not rows:
        return []
    from ..eval.modalities.tables import markdown

    table, row, metric = CRITERION
    lines = [
        "",
        "## Settings chosen on validation nights",
        "",
        f"{sizes.val_nights} validation nights (generator seed {sizes.val_seed}), {seeds_text(sizes)}; criterion: "
        f"{metric} of the `{row}` row of `{table}` (leave-one-subject-out){mean_text(sizes)}; ties go to the earlier "
        "value.",
        "",
    ]
    body = [[r["loss"], r["setting"], score_text(r)] for r in rows]
    for line, r in zip(body, rows):
        line.append("collapsed ({:.4f})".format(r["collapsed"]) if r.get("collapsed") is not None else "")
    lines = lines + markdown(["loss", "setting", f"validation {metric}", "projections"], body)
    return lines + ["", COLLAPSE_NOTE]


__all__ = ["CRITERION", "DEFAULT_GRID", "check_grid", "select_settings", "selection_markdown", "settings_of"]
