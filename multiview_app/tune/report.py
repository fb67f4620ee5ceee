"""Outputs of a study (``mvapp tune report``): best config as a ready-to-train YAML, trials table (CSV),
the Pareto front of a multi-objective study (CSV + PNG), optimization history / parameter importance
plots (PNG), ``report.json`` and notes on how far the numbers can be read (parameter importances from
few trials, the objective's resolution in validation items).

No parallel-coordinates PNG: with a few parameters on different scales (log-uniform learning rates,
integer k) Optuna's static plot draws overlapping unlabelled lines; optuna-dashboard draws it
interactively (``optuna-dashboard <runs>/tune/<study>/journal.log``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import yaml

from ..config import ConfigError, apply_overrides, config_from_dict, dump_config
from ..train.run_io import atomic_write_json, atomic_write_text
from .space import params_to_overrides

BEST_CONFIG_FILE = "best_config.yaml"
TRIALS_FILE = "trials.csv"
PARETO_FILE = "pareto_front.csv"
#: Below this many complete trials the parameter importances get a caveat (fANOVA on a handful of points).
IMPORTANCE_MIN_TRIALS = 20


def _base_raw(study: Any) -> dict[str, Any]:
    from .study import BASE_CONFIG_ATTR

    text = study.user_attrs.get(BASE_CONFIG_ATTR)
    if text is None:
        raise ConfigError(f"study {study.study_name!r} has no stored base config (not created by mvapp tune)")
    return yaml.safe_load(text)


def best_trials(study: Any) -> list[Any]:
    """The best trial (single objective) or the Pareto front sorted by the first objective."""
    from optuna.trial import TrialState

    if not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        return []
    if len(study.directions) == 1:
        return [study.best_trial]
    sign = 1.0 if study.directions[0].name == "MINIMIZE" else -1.0
    return sorted(study.best_trials, key=lambda t: sign * t.values[0])


def best_config_text(study: Any, trial: Any, name: str) -> str:
    """The base config with ``trial``'s params, validated, as YAML (``output.name = name``)."""
    raw = apply_overrides(_base_raw(study), params_to_overrides(trial.params) + [f"output.name={name}"])
    cfg = config_from_dict(raw)
    values = ", ".join(f"{v:.6g}" for v in trial.values)
    header = (
        f"# best of study {study.study_name!r}: trial {trial.number}, objective {values}\n"
        f"# params: {trial.params}\n# train it: mvapp train --config <this file>\n"
    )
    return header + dump_config(cfg)


def importance_caveat(complete: int) -> str | None:
    """The caveat of parameter importances computed from ``complete`` trials (None: enough of them)."""
    if complete >= IMPORTANCE_MIN_TRIALS:
        return None
    return (
        f"parameter importances from {complete} complete trial(s) are indicative only (fANOVA on so few "
        f"points is mostly noise; read them from >= {IMPORTANCE_MIN_TRIALS} trials)"
    )


def objective_resolution(study: Any) -> str | None:
    """What one validation item is worth in the first objective metric: ``N`` labelled val items ->
    ``100 / N`` points of accuracy (balanced accuracy: one item of the rarest class, ``100 / (C n_min)``).
    The val split is ``tune.val_cache``'s scored subjects when the study validates on another cache. None when
    the base config's val split cannot be read here or the metric is not item-scored."""
    from .study import METRICS_ATTR

    metric = (study.user_attrs.get(METRICS_ATTR) or [""])[0]
    if not metric.startswith(("linear_probe.", "sleep_staging.")):
        return None
    try:
        from ..data.adapters import build_adapter
        from ..eval.subsets import split_labels
        from .objective import cross_dataset_val_adapter

        cfg = config_from_dict(_base_raw(study))
        adapter = (
            cross_dataset_val_adapter(cfg)  # the scored half of the validation nights of tune.val_cache
            if cfg.tune.val_cache is not None
            else build_adapter(cfg.data.adapter, cfg.data.options)
        )
        labels = split_labels(adapter.split("val"))
    except Exception as exc:  # noqa: BLE001 - the data may live on another machine: say so, no number
        return f"objective resolution: val split not readable here ({type(exc).__name__}: {exc})"
    labels = labels[labels >= 0]
    if labels.size == 0:
        return None
    text = (
        f"objective resolution: {metric} is scored on {labels.size} labelled val items: one item = "
        f"{100.0 / labels.size:.2g} points of accuracy"
    )
    if metric.endswith("balanced_accuracy"):
        counts = np.unique(labels, return_counts=True)[1]
        text += (
            f"; balanced accuracy: one item of the rarest class ({counts.min()} items, {counts.size} classes) "
            f"= {100.0 / (counts.size * counts.min()):.2g} points"
        )
    return text + "; differences of that size between trials are one item"


def _pareto_csv(study: Any, best: list[Any], metrics: list[str]) -> str:
    """The Pareto front: trial number, one column per objective, the params, the run folder."""
    import csv
    import io

    params = sorted({name for trial in best for name in trial.params})
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["number", *metrics, *params, "run_dir"])
    for trial in best:
        writer.writerow(
            [
                trial.number,
                *trial.values,
                *(trial.params.get(p, "") for p in params),
                trial.user_attrs.get("run_dir", ""),
            ]
        )
    return buffer.getvalue()


def _plots(study: Any, folder: Path, metric: str, complete: int) -> tuple[dict[str, str], dict[str, str]]:
    """History, importance (and Pareto front) PNGs; skipped ones with the reason."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna.visualization.matplotlib as vis

    single = len(study.directions) == 1
    target = None if single else (lambda t: t.values[0])
    makers = {
        "optimization_history": lambda: vis.plot_optimization_history(study, target=target, target_name=metric),
        "param_importances": lambda: vis.plot_param_importances(study, target=target, target_name=metric),
    }
    if not single:
        makers["pareto_front"] = lambda: vis.plot_pareto_front(study)
    written, skipped = {}, {}
    out = folder / "plots"
    out.mkdir(parents=True, exist_ok=True)
    import warnings

    for name, make in makers.items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # optuna marks its matplotlib backend experimental
                ax = make()
            figure = ax.figure if hasattr(ax, "figure") else ax.flat[0].figure
            if name == "param_importances" and importance_caveat(complete):
                ax.set_title(f"{ax.get_title()}\n{complete} trials: indicative only", fontsize=9)
            figure.tight_layout()
            path = out / f"{name}.png"
            figure.savefig(path, dpi=100)
            plt.close(figure)
            written[name] = str(path)
        except Exception as exc:  # noqa: BLE001 - e.g. too few trials for importances: skip + report
            skipped[name] = f"{type(exc).__name__}: {exc}"
            plt.close("all")
    return written, skipped


def _write_trials_csv(study: Any, folder: Path) -> None:
    """Every trial of ``study`` (number, value(s), params, state, start, duration, user attributes) as
    ``folder/TRIALS_FILE``."""
    frame = study.trials_dataframe(
        attrs=(
            "number",
            "value" if len(study.directions) == 1 else "values",
            "params",
            "state",
            "datetime_start",
            "duration",
            "user_attrs",
        )
    )
    atomic_write_text(folder / TRIALS_FILE, frame.to_csv(index=False))


def _write_best_configs(study: Any, best: list[Any], folder: Path) -> list[str]:
    """The config of every best trial (``BEST_CONFIG_FILE`` for the first, ``pareto_trial_<n>.yaml`` for the
    others of a Pareto front) written into ``folder``; returns their paths."""
    best_files = []
    for rank, trial in enumerate(best):
        file = BEST_CONFIG_FILE if rank == 0 else f"pareto_trial_{trial.number}.yaml"
        atomic_write_text(
            folder / file,
            best_config_text(
                study, trial, f"{study.study_name}_best" if rank == 0 else f"{study.study_name}_trial_{trial.number}"
            ),
        )
        best_files.append(str(folder / file))
    return best_files


def collapse_note(trial: Any, attr: str) -> str | None:
    """A note when best ``trial``'s projections collapsed (its user attribute ``attr``), else None."""
    if attr not in trial.user_attrs:
        return None
    return (
        f"best trial {trial.number}'s projections collapsed (diag/uniformity {trial.user_attrs[attr]:.4f}): its "
        "embeddings sit at the loss's plateau, so its objective reads features of a head that learned nothing "
        "to align; prefer the best trial that did not collapse (trials.csv, column user_attrs_collapsed_uniformity)"
    )


def write_report(study: Any, folder: Path, plots: bool = True) -> dict[str, Any]:
    """Write the outputs into ``folder``; returns ``report.json``'s content."""
    from .study import COLLAPSED_ATTR, FAIL_REASON_ATTR, METRICS_ATTR

    folder.mkdir(parents=True, exist_ok=True)
    trials = study.get_trials(deepcopy=False)
    _write_trials_csv(study, folder)
    counts: dict[str, int] = {}
    for trial in trials:
        counts[trial.state.name] = counts.get(trial.state.name, 0) + 1
    best = best_trials(study)
    best_files = _write_best_configs(study, best, folder)
    metrics = study.user_attrs.get(METRICS_ATTR) or [f"objective_{i}" for i in range(len(study.directions))]
    complete = counts.get("COMPLETE", 0)
    written, skipped = _plots(study, folder, metrics[0], complete) if plots and best else ({}, {})
    notes = [
        note
        for note in (
            importance_caveat(complete) if "param_importances" in written else None,
            objective_resolution(study),
            *(collapse_note(t, COLLAPSED_ATTR) for t in best),
        )
        if note
    ]
    pareto = None
    if len(study.directions) > 1 and best:
        pareto = folder / PARETO_FILE
        atomic_write_text(pareto, _pareto_csv(study, best, metrics))
    report = {
        "study": study.study_name,
        "metrics": study.user_attrs.get(METRICS_ATTR),
        "directions": [d.name.lower() for d in study.directions],
        "trials": counts,
        "best": [{"number": t.number, "values": t.values, "params": t.params} for t in best],
        "best_configs": best_files,
        "failed": {t.number: t.user_attrs.get(FAIL_REASON_ATTR, "") for t in trials if t.state.name == "FAIL"},
        "collapsed": {t.number: t.user_attrs[COLLAPSED_ATTR] for t in trials if COLLAPSED_ATTR in t.user_attrs},
        "trials_csv": str(folder / TRIALS_FILE),
        "pareto_front_csv": None if pareto is None else str(pareto),
        "plots": written,
        "plots_skipped": skipped,
        "notes": notes,
    }
    atomic_write_json(folder / "report.json", report)
    return report


def format_report(report: dict[str, Any]) -> str:
    """Console summary of :func:`write_report`'s result."""
    counts = ", ".join(f"{n} {s.lower()}" for s, n in sorted(report["trials"].items()))
    lines = [
        f"study {report['study']}: {counts or 'no trials'}; metric(s) {report['metrics']} ({', '.join(report['directions'])})"
    ]
    for entry, path in zip(report["best"], report["best_configs"]):
        values = ", ".join(f"{v:.4f}" for v in entry["values"])
        lines.append(f"best trial {entry['number']}: {values} {entry['params']} -> {path}")
    if not report["best"]:
        lines.append("no complete trial yet: no best config")
    lines.append(f"trials table: {report['trials_csv']}")
    if report.get("pareto_front_csv"):
        lines.append(f"Pareto front ({len(report['best'])} trials): {report['pareto_front_csv']}")
    if report["plots"]:
        lines.append(f"plots: {', '.join(report['plots'].values())}")
    for name, reason in report["plots_skipped"].items():
        lines.append(f"plot {name} skipped: {reason}")
    lines += [f"note: {note}" for note in report.get("notes", [])]
    return "\n".join(lines)


__all__ = [
    "BEST_CONFIG_FILE",
    "IMPORTANCE_MIN_TRIALS",
    "PARETO_FILE",
    "TRIALS_FILE",
    "best_config_text",
    "best_trials",
    "format_report",
    "importance_caveat",
    "objective_resolution",
    "write_report",
]
