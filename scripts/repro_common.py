"""Shared pieces of the reproduction and results scripts (scripts/reproduce_*.py, scripts/results_*.py):
train-unless-done (:func:`train_unless_done`), the digits runner (train ``configs/digits_<loss>.yaml``
with overrides, reusing a finished run, and read back its metrics and linear-probe accuracies), the
saved results row of a run, comma-separated list options, and the table + figure outputs."""
from __future__ import annotations

import argparse
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

ROOT = Path(__file__).resolve().parents[1]

from multiview_app.config import Config, load_config  # noqa: E402
from multiview_app.train.checkpoint import latest_checkpoint  # noqa: E402
from multiview_app.train.metrics import read_metrics  # noqa: E402
from multiview_app.fileio import atomic_write_text  # noqa: E402
from multiview_app.train.trainer import train  # noqa: E402

T = TypeVar("T")

#: the reduced CPU budget: 16 px images, width-16 encoder
SMALL = ["data.options.load_size=16", "views.options.image_size=16", "model.encoders.image.width=16"]
#: a run's saved row of a results table (written once its evaluation is done)
ROW_FILE = Path("eval") / "results_row.json"


@dataclass
class RunSummary:
    """What the results tables need of a training run: steps, last logged loss, training seconds,
    items/s, and whether a model finished earlier was reused (``train_s`` / ``items_per_s`` then come
    from its ``metrics.jsonl``: the logged step times, without start-up and checkpoints)."""

    steps: int
    final_loss: float
    train_s: float
    items_per_s: float
    reused: bool


def train_unless_done(cfg: Config) -> RunSummary:
    """Bring the run folder ``cfg.run_dir`` to a finished model without repeating finished work.

    - ``model.safetensors`` present: the run finished training earlier; that model is reused as it
      is and **never retrained** (a missing results row or evaluation means the step after training
      failed or was interrupted: the caller evaluates the run folder again);
    - a checkpoint but no final model: an interrupted attempt, resumed from its latest checkpoint
      (exact continuation, see the trainer's resume contract);
    - anything else (no folder, or a folder without checkpoint or model): trained from scratch
      (the folder is removed first).
    """
    run_dir = cfg.run_dir
    if (run_dir / "model.safetensors").is_file():
        records = read_metrics(run_dir / "metrics.jsonl")
        if not records:
            raise ValueError(f"{run_dir}: a final model without metrics.jsonl; remove the folder to retrain")
        seconds, items, previous = 0.0, 0.0, 0
        for record in records:  # each row: mean step time and items/s over the steps since the previous row
            window = record["step"] - previous
            seconds += window * record["step_time_s"]
            items += window * record["step_time_s"] * record["items_per_s"]
            previous = record["step"]
        return RunSummary(records[-1]["step"], records[-1]["loss"], seconds, items / max(seconds, 1e-12), reused=True)
    resume = "latest" if run_dir.exists() and latest_checkpoint(run_dir) is not None else None
    if resume is None and run_dir.exists():
        shutil.rmtree(run_dir)
    began = time.perf_counter()
    result = train(cfg, resume=resume)
    return RunSummary(result.steps, result.final_loss, time.perf_counter() - began, result.items_per_s, reused=False)


def results_row(cfg: Config, fresh: bool, make_row: Callable[[RunSummary], dict[str, Any]]) -> dict[str, Any]:
    """The run's row of a results table: the saved ``eval/results_row.json`` when present, else
    :func:`train_unless_done` then ``make_row(summary)`` (evaluates the run folder), saved atomically.
    ``fresh`` removes the whole run folder first (retrain)."""
    from multiview_app.train.run_io import atomic_write_json

    if fresh and cfg.run_dir.exists():
        shutil.rmtree(cfg.run_dir)
    path = cfg.run_dir / ROW_FILE
    if path.is_file():
        return json.loads(path.read_text())
    row = make_row(train_unless_done(cfg))
    atomic_write_json(path, row)
    return row


def train_digits(loss: str, name: str, overrides: list[str], runs_dir: str | Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Train unless done (:func:`train_unless_done`) and return (metrics.jsonl records,
    linear_probe.json ``results``: trained and random_init)."""
    base = ["train.checkpoint_every=0", "eval.linear_probe=true", f"output.runs_dir={runs_dir}"]
    cfg = load_config(ROOT / "configs" / f"digits_{loss}.yaml", base + list(overrides), name=name)
    train_unless_done(cfg)
    return read_metrics(cfg.run_dir / "metrics.jsonl"), linear_probe_results(cfg.run_dir)


def linear_probe_results(run_dir: Path) -> dict[str, Any]:
    """``results`` of the run's ``eval/linear_probe.json`` (trained and random_init); the probe is run
    on the folder when training did not write it (a reused model whose evaluation was interrupted)."""
    from multiview_app.eval.linear_probe import run_linear_probe

    probe_path = run_dir / "eval" / "linear_probe.json"
    if not probe_path.is_file():
        run_linear_probe(run_dir)
    return json.loads(probe_path.read_text())["results"]


def parse_list(parser: argparse.ArgumentParser, flag: str, text: str, cast: Callable[[str], T]) -> list[T]:
    """``"2,4,8" -> [2, 4, 8]`` with ``cast``; a bad value is a one-line parser error naming ``flag``."""
    try:
        return [cast(v) for v in text.split(",")]
    except ValueError:
        parser.error(f"{flag}: expected comma-separated {getattr(cast, '__name__', 'value')}s, got {text!r}")
        raise  # unreachable: parser.error exits


def new_figure(ncols: int, size: tuple[float, float]) -> tuple[Any, Any]:
    """A matplotlib (Agg) figure with ``ncols`` axes in one row (axes always a 1-D array)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=size, squeeze=False)
    return fig, axes[0]


def write_outputs(out: str | Path, table_lines: list[str], fig: Any) -> Path:
    """``<out>.md`` (the Markdown table) and ``<out>.png`` (``fig``, grid on, tight), both atomic;
    prints the table. Returns the PNG path."""
    import matplotlib.pyplot as plt

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out.with_suffix(".md"), "\n".join(table_lines) + "\n")
    for ax in fig.axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    png = out.with_suffix(".png")
    tmp = png.with_name(f".{png.stem}.tmp.png")
    fig.savefig(tmp, dpi=80)
    plt.close(fig)
    tmp.replace(png)
    print("\n".join(table_lines))
    return png
