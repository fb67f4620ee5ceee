"""Sweeps over seeds / folds / held-out domains / losses, and the saved results row of a run.

A sweep trains every point of a grid under one :class:`~multiview_app.experiments.training.TrainPolicy`
(:func:`sweep`) in the grid's order: the first axis outermost, so an early stop of a seed-major sweep
still leaves every loss with the same seeds.
"""

from __future__ import annotations

import itertools
import json
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from ..config import Config
from ..train.run_io import atomic_write_json
from .training import RunSummary, TrainPolicy, ensure_trained

P = TypeVar("P")

#: a run's saved row of a results table (written once its evaluation is done)
ROW_FILE = Path("eval") / "results_row.json"


def grid(**axes: Iterable[Any]) -> list[dict[str, Any]]:
    """Every combination of the axes' values as ``{axis: value}``, the first axis outermost:
    ``grid(seed=[0, 1], loss=["a", "b"])`` -> seed 0 with a, b, then seed 1 with a, b."""
    names = list(axes)
    return [dict(zip(names, values)) for values in itertools.product(*(list(v) for v in axes.values()))]


def sweep(
    points: Iterable[P], make_config: Callable[[P], Config], policy: str | TrainPolicy = "reuse"
) -> Iterator[tuple[P, Config, RunSummary]]:
    """For every point in order: its config (``make_config(point)``), trained by
    :func:`~multiview_app.experiments.training.ensure_trained` under ``policy``; yields
    ``(point, cfg, summary)`` so the caller evaluates each run as soon as it is trained."""
    for point in points:
        cfg = make_config(point)
        yield point, cfg, ensure_trained(cfg, policy)


def results_row(
    cfg: Config, fresh: bool, make_row: Callable[[RunSummary], dict[str, Any]], policy: str | TrainPolicy = "reuse"
) -> dict[str, Any]:
    """The run's row of a results table: the saved ``eval/results_row.json`` when present, else
    :func:`ensure_trained` then ``make_row(summary)`` (evaluates the run folder), saved atomically.
    ``fresh`` removes the whole run folder first (retrain)."""
    if fresh and cfg.run_dir.exists():
        shutil.rmtree(cfg.run_dir)
    path = cfg.run_dir / ROW_FILE
    if path.is_file():
        return json.loads(path.read_text())
    row = make_row(ensure_trained(cfg, policy))
    atomic_write_json(path, row)
    return row


def linear_probe_results(run_dir: Path) -> dict[str, Any]:
    """``results`` of the run's ``eval/linear_probe.json`` (trained and random_init); the probe is run
    on the folder when training did not write it (a reused model whose evaluation was interrupted)."""
    from ..eval.linear_probe import run_linear_probe

    probe_path = run_dir / "eval" / "linear_probe.json"
    if not probe_path.is_file():
        run_linear_probe(run_dir)
    return json.loads(probe_path.read_text())["results"]


__all__ = ["ROW_FILE", "grid", "linear_probe_results", "results_row", "sweep"]
