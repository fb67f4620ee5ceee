"""Outputs of a study (``mvapp tune report``): best config as a ready-to-train YAML, trials table (CSV),
optimization history / parallel coordinates / parameter importance plots (PNG) and ``report.json``."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ..config import ConfigError, apply_overrides, config_from_dict, dump_config
from ..train.run_io import atomic_write_json, atomic_write_text
from .space import params_to_overrides

BEST_CONFIG_FILE = "best_config.yaml"
TRIALS_FILE = "trials.csv"


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
    header = (f"# best of study {study.study_name!r}: trial {trial.number}, objective {values}\n"
              f"# params: {trial.params}\n# train it: mvapp train --config <this file>\n")
    return header + dump_config(cfg)


def _plots(study: Any, folder: Path, metric: str) -> tuple[dict[str, str], dict[str, str]]:
    """History, parallel coordinates, importance (and Pareto front) PNGs; skipped ones with the reason."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna.visualization.matplotlib as vis

    single = len(study.directions) == 1
    target = None if single else (lambda t: t.values[0])
    makers = {
        "optimization_history": lambda: vis.plot_optimization_history(study, target=target, target_name=metric),
        "parallel_coordinates": lambda: vis.plot_parallel_coordinate(study, target=target, target_name=metric),
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
            figure.tight_layout()
            path = out / f"{name}.png"
            figure.savefig(path, dpi=100)
            plt.close(figure)
            written[name] = str(path)
        except Exception as exc:  # noqa: BLE001 - e.g. too few trials for importances: skip + report
            skipped[name] = f"{type(exc).__name__}: {exc}"
            plt.close("all")
    return written, skipped


def write_report(study: Any, folder: Path, plots: bool = True) -> dict[str, Any]:
    """Write the outputs into ``folder``; returns ``report.json``'s content."""
    from .study import FAIL_REASON_ATTR, METRICS_ATTR

    folder.mkdir(parents=True, exist_ok=True)
    trials = study.get_trials(deepcopy=False)
    frame = study.trials_dataframe(attrs=("number", "value" if len(study.directions) == 1 else "values", "params",
                                          "state", "datetime_start", "duration", "user_attrs"))
    atomic_write_text(folder / TRIALS_FILE, frame.to_csv(index=False))
    counts: dict[str, int] = {}
    for trial in trials:
        counts[trial.state.name] = counts.get(trial.state.name, 0) + 1
    best = best_trials(study)
    best_files = []
    for rank, trial in enumerate(best):
        file = BEST_CONFIG_FILE if rank == 0 else f"pareto_trial_{trial.number}.yaml"
        atomic_write_text(folder / file, best_config_text(study, trial, f"{study.study_name}_best" if rank == 0
                                                          else f"{study.study_name}_trial_{trial.number}"))
        best_files.append(str(folder / file))
    metric = (study.user_attrs.get(METRICS_ATTR) or ["objective"])[0]
    written, skipped = _plots(study, folder, metric) if plots and best else ({}, {})
    report = {
        "study": study.study_name,
        "metrics": study.user_attrs.get(METRICS_ATTR),
        "directions": [d.name.lower() for d in study.directions],
        "trials": counts,
        "best": [{"number": t.number, "values": t.values, "params": t.params} for t in best],
        "best_configs": best_files,
        "failed": {t.number: t.user_attrs.get(FAIL_REASON_ATTR, "") for t in trials if t.state.name == "FAIL"},
        "trials_csv": str(folder / TRIALS_FILE),
        "plots": written,
        "plots_skipped": skipped,
    }
    atomic_write_json(folder / "report.json", report)
    return report


def format_report(report: dict[str, Any]) -> str:
    """Console summary of :func:`write_report`'s result."""
    counts = ", ".join(f"{n} {s.lower()}" for s, n in sorted(report["trials"].items()))
    lines = [f"study {report['study']}: {counts or 'no trials'}; metric(s) {report['metrics']} ({', '.join(report['directions'])})"]
    for entry, path in zip(report["best"], report["best_configs"]):
        values = ", ".join(f"{v:.4f}" for v in entry["values"])
        lines.append(f"best trial {entry['number']}: {values} {entry['params']} -> {path}")
    if not report["best"]:
        lines.append("no complete trial yet: no best config")
    lines.append(f"trials table: {report['trials_csv']}")
    if report["plots"]:
        lines.append(f"plots: {', '.join(report['plots'].values())}")
    for name, reason in report["plots_skipped"].items():
        lines.append(f"plot {name} skipped: {reason}")
    return "\n".join(lines)


__all__ = ["BEST_CONFIG_FILE", "TRIALS_FILE", "best_config_text", "best_trials", "format_report", "write_report"]
