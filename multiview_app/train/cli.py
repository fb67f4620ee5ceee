"""``mvapp train --config FILE [overrides...] [--resume latest|DIR] [--name NAME]``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the trainer (torch) is imported only when a training runs
    from .trainer import TrainResult


def _train_epilog() -> str:
    """Examples and the configs shipped with the checkout (the project's ``configs/`` folder), for ``--help``."""
    folder = Path(__file__).resolve().parents[2] / "configs"
    skipped = ("base_", "tune_", "demo_", "experiment_")
    names = sorted(p.name for p in folder.glob("*.yaml") if not p.name.startswith(skipped))
    shipped = (
        (
            f"configs shipped in {folder} (not listed: base_*.yaml shared bases, tune_*.yaml for mvapp tune, "
            "demo_*.yaml the demo scripts' settings, experiment_*.yaml the knobs of mvapp experiment):\n  "
            + "\n  ".join(", ".join(names[i : i + 4]) for i in range(0, len(names), 4))
        )
        if names
        else ""
    )
    return (
        "examples:\n"
        "  mvapp train --config configs/digits_m3g.yaml train.max_steps=200 loss.epsilon=0.1\n"
        "  mvapp train --config configs/eeg_synthetic_m3g.yaml --name eeg_m3g\n"
        "  mvapp train --resume runs/digits_m3g                      # continue an interrupted run\n"
        "  mvapp train --resume runs/digits_m3g train.max_steps=400 --accept-config-changes   # extend a run\n"
        + (f"\n{shipped}\n" if shipped else "")
    )


def add_subparser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train a model from a YAML config",
        description="Train a model from a YAML config (dotted overrides on top).",
        epilog=_train_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", help="YAML config file (default with --resume DIR: DIR/config.yaml)")
    parser.add_argument("overrides", nargs="*", help="dotted overrides, e.g. loss.epsilon=0.1 train.max_steps=50")
    parser.add_argument("--resume", help="'latest' (newest checkpoint of the run) or a run/checkpoint folder")
    parser.add_argument("--name", help="run name, one folder name (default: output.name or the config file's stem)")
    parser.add_argument(
        "--accept-config-changes",
        action="store_true",
        help="with --resume: apply changes of safe keys (run length, logging/checkpoint cadence, eval) to the "
        "saved config; they are logged in the run's config_history.jsonl",
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from ..config import ConfigError, load_config
    from .diagnostics import SUMMARY_FILE, collapse_warning, format_summary
    from .trainer import train

    config_path = args.config or _saved_config(args.resume, args.name)
    try:
        cfg = load_config(config_path, args.overrides, name=args.name)
    except ConfigError as exc:
        if args.config is not None:
            raise
        raise ConfigError(
            f"{Path(config_path).resolve()} (the saved config of the run given to --resume): {exc}"
        ) from None
    for note in cfg.load_notes:
        print(f"mvapp: note: {note}", file=sys.stderr)
    if args.accept_config_changes and args.resume is None:
        raise ValueError("--accept-config-changes only applies with --resume")
    result = train(cfg, resume=args.resume, accept_config_changes=args.accept_config_changes)
    if not result.is_main_process:  # multi-process launch: only the main process reports
        return 0
    if result.already_finished:  # resuming a finished run trains nothing (Trainer._finished_already)
        print(result.notes[-1])
        return 0
    print(trained_line(result))
    for report in result.reports:
        print(report)
    summary_path = result.run_dir / SUMMARY_FILE
    if summary_path.is_file():
        summary = json.loads(summary_path.read_text())
        print(format_summary(summary))
        warning = collapse_warning(summary)
        if warning:
            print(f"mvapp: {warning}", file=sys.stderr)
    print(f"outputs in {result.run_dir}")
    return 0


def trained_line(result: TrainResult) -> str:
    """What this process trained and, after a resume, what the run holds: ``trained 354 steps (46 -> 400) in
    70.1 s (...items/s), final loss 3.1; the run: 400 steps in 82.7 s`` (a new run: ``trained 400 steps in
    82.7 s (...items/s), final loss 3.1``)."""
    this = f"in {result.wall_time_s:.1f} s ({result.items_per_s:.1f} items/s), final loss {result.final_loss:.4f}"
    if not result.start_step:
        return f"trained {_steps(result.steps)} {this}"
    run_time = "time of earlier steps not recorded" if result.run_time_s is None else f"{result.run_time_s:.1f} s"
    return (
        f"trained {_steps(result.steps_run)} ({result.start_step} -> {result.steps}) {this}; "
        f"the run: {_steps(result.steps)} in {run_time}"
    )


def _steps(n: int) -> str:
    return f"{n} step" if n == 1 else f"{n} steps"


def _saved_config(resume: str | None, name: str | None) -> str:
    """The config of the run that ``--resume`` continues when no ``--config`` is given:
    ``--resume RUN_DIR|CHECKPOINT_DIR``, or ``--resume latest --name NAME`` (``<output.runs_dir>/NAME``)."""
    from ..config import OutputConfig

    if resume is None:
        raise ValueError("--config FILE is required (or --resume RUN_DIR, or --resume latest --name RUN)")
    if resume == "latest":
        if not name:
            raise ValueError("--resume latest needs --config FILE or --name RUN (the run to continue)")
        run_dir = Path(OutputConfig().runs_dir) / name
    else:
        candidate = Path(resume)
        if not candidate.exists():
            raise FileNotFoundError(f"--resume {resume}: no such checkpoint or run folder ({candidate.resolve()})")
        # a run folder, or a checkpoint folder inside one (<run>/checkpoints/step_N)
        run_dir = candidate if (candidate / "config.yaml").is_file() else candidate.parent.parent
    config = run_dir / "config.yaml"
    if not config.is_file():
        where = (Path(resume) if resume != "latest" else run_dir).resolve()
        raise FileNotFoundError(
            f"--resume {resume}: no run config at {where / 'config.yaml'}: {where} is not a run "
            "folder" + ("" if resume == "latest" else " (nor a checkpoint folder inside one)")
        )
    return str(config)
