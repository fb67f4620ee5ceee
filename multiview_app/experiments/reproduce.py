"""Shared pieces of the reproduction scripts (``scripts/reproduce/<paper>/*.py``): the digits runner (train
``configs/digits_<loss>.yaml`` with overrides, reusing a finished run, and read back its metrics and linear-probe
accuracies), comma-separated list options, the named override sets of the choice scripts (``--settings``), and the
table + figure outputs. Training unless done, saved results rows and sweeps are :mod:`multiview_app.experiments`
(``train_unless_done`` = ``ensure_trained(cfg, "reuse")``). The scripts run from a clone: :data:`ROOT` is the
repository root (its ``configs/``; outputs default under its ``runs/``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[2]

from multiview_app.config import Config, load_config  # noqa: E402
from multiview_app.experiments import RunSummary, ensure_trained  # noqa: E402
from multiview_app.experiments.sweeps import ROW_FILE, linear_probe_results, results_row  # noqa: E402
from multiview_app.fileio import atomic_write_text  # noqa: E402
from multiview_app.train.metrics import read_metrics  # noqa: E402

T = TypeVar("T")

#: the reduced CPU budget: 16 px images, width-16 encoder
SMALL = ["data.options.load_size=16", "views.options.image_size=16", "model.encoders.image.width=16"]


def train_unless_done(cfg: Config) -> RunSummary:
    """``ensure_trained(cfg, "reuse")``: a finished model (``model.safetensors``) is reused as it is and
    never retrained, an interrupted run resumes from its latest checkpoint, anything else is trained
    from scratch (the folder is removed first)."""
    return ensure_trained(cfg, "reuse")


def train_digits(
    loss: str, name: str, overrides: list[str], runs_dir: str | Path
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Train unless done (:func:`train_unless_done`) and return (metrics.jsonl records,
    linear_probe.json ``results``: trained and random_init)."""
    base = ["train.checkpoint_every=0", "eval.linear_probe=true", f"output.runs_dir={runs_dir}"]
    cfg = load_config(ROOT / "configs" / f"digits_{loss}.yaml", base + list(overrides), name=name)
    train_unless_done(cfg)
    return read_metrics(cfg.run_dir / "metrics.jsonl"), linear_probe_results(cfg.run_dir)


def parse_list(parser: argparse.ArgumentParser, flag: str, text: str, cast: Callable[[str], T]) -> list[T]:
    """``"2,4,8" -> [2, 4, 8]`` with ``cast``; a bad value is a one-line parser error naming ``flag``."""
    try:
        return [cast(v) for v in text.split(",")]
    except ValueError:
        parser.error(f"{flag}: expected comma-separated {getattr(cast, '__name__', 'value')}s, got {text!r}")
        raise  # unreachable: parser.error exits


def named_settings(text: str) -> dict[str, list[str]]:
    """Named override sets of a choice script's ``--settings "default;NAME=KEY=VALUE+KEY=VALUE;..."``:
    ``{name: overrides}``, ``default`` first (the config as it stands: no overrides; required once, the tie rule's
    reference), every other name an identifier with at least one override. ``ValueError`` naming the bad part."""
    settings: dict[str, list[str]] = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        name, _, overrides = part.partition("=")
        if name in settings:
            raise ValueError(f"--settings: '{name}' is named twice")
        if name == "default" and overrides:
            raise ValueError("--settings: 'default' takes no overrides (it is the config as it stands)")
        if name != "default" and (not name.isidentifier() or not overrides):
            raise ValueError(f"--settings: '{part}' is not NAME=KEY=VALUE[+KEY=VALUE...] (NAME: letters, digits, _)")
        settings[name] = [o for o in overrides.split("+") if o]
    if "default" not in settings:
        raise ValueError("--settings must name 'default' (the current config, the tie rule's reference)")
    return {"default": settings.pop("default"), **settings}


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


__all__ = [
    "ROOT",
    "ROW_FILE",
    "RunSummary",
    "SMALL",
    "linear_probe_results",
    "named_settings",
    "new_figure",
    "parse_list",
    "results_row",
    "train_digits",
    "train_unless_done",
    "write_outputs",
]
