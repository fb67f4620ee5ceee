"""Evaluations the trainer runs through its callback hook (``train.callbacks`` /
``eval.linear_probe``); registered here so that ``train/`` never imports ``eval/``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..config import Config
from ..train.callbacks import TRAIN_CALLBACKS, TrainCallback
from . import knn_monitor  # noqa: F401 - registers "knn-monitor"


@TRAIN_CALLBACKS.register("linear-probe")
class LinearProbeAtEnd(TrainCallback):
    """The linear probe (``eval/linear_probe.json``) on the final weights, main process only."""

    name = "linear_probe"

    def __init__(self, cfg: Config) -> None:
        self.batch_size = cfg.eval.batch_size

    def on_train_end(self, run_dir: Path, is_main_process: bool) -> dict[str, Any] | None:
        if not is_main_process:
            return None
        from .linear_probe import run_linear_probe

        return run_linear_probe(run_dir, batch_size=self.batch_size)

    def report(self, result: dict[str, Any]) -> str | None:
        from .linear_probe import format_table

        return format_table(result)


__all__ = ["LinearProbeAtEnd"]
