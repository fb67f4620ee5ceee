"""Training callbacks: what the trainer calls after every optimizer step and once at the end.

The trainer knows nothing about evaluators. Layers above it (``eval/``, ``tune``) plug in by
registering a callback factory in :data:`TRAIN_CALLBACKS`; a run names the callbacks it wants in
``train.callbacks`` (``eval.linear_probe: true`` adds ``"linear-probe"``; an entry ``{name: {options}}``
passes keyword options to the factory, checked against its ``Options`` model when it has one). Plain functions
``f(step, record)`` are accepted too (``train(cfg, callbacks=[f])``) and called after every step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

# Callback factories ``factory(cfg) -> TrainCallback`` by name; upper layers register here. The
# registry and the list of modules that fill it live in multiview_app.plugins (imported on first
# lookup), so ``train/`` names no upper layer, not even as a string.
from ..plugins import TRAIN_CALLBACKS

if TYPE_CHECKING:  # pragma: no cover
    from torch import nn

    from ..config import Config

#: ``callback(step, record)`` after every optimizer step (record: the logged metrics or None).
StepCallback = Callable[[int, "dict[str, Any] | None"], None]


@dataclass
class StepEvent:
    """What a callback sees after optimizer step ``step`` (1-based) of ``total_steps``.

    ``record`` is the metrics row logged at this step (None between ``train.log_every`` steps);
    ``model`` the unwrapped :class:`MultiViewModel` (train mode; switch back if you change it).
    """

    step: int
    total_steps: int
    record: dict[str, Any] | None
    model: nn.Module
    run_dir: Path
    is_main_process: bool


class TrainCallback:
    """Base of training callbacks; override what you need. ``name`` keys the result of
    :meth:`on_train_end` in ``TrainResult.evaluation``."""

    name: str = "callback"

    def on_step_end(self, event: StepEvent) -> None:
        """After every optimizer step, on every process."""

    def on_log_step(self, event: StepEvent) -> dict[str, float] | None:
        """On a logging step, before its metrics row is written (``event.record`` is None): values
        to add to the row (TensorBoard and ``metrics.jsonl``). The time spent here is left out of
        the row's ``items_per_s``. Called on every process; only the main process's values are logged."""
        return None

    def on_train_end(self, run_dir: Path, is_main_process: bool) -> dict[str, Any] | None:
        """After the final weights are written, on every process (return a result to report)."""
        return None

    def report(self, result: dict[str, Any]) -> str | None:
        """A short text of :meth:`on_train_end`'s result for the console (None: nothing to print)."""
        return None


class FunctionCallback(TrainCallback):
    """Adapts a plain ``f(step, record)`` function."""

    def __init__(self, fn: StepCallback) -> None:
        self.fn = fn
        self.name = getattr(fn, "__name__", "function")

    def on_step_end(self, event: StepEvent) -> None:
        self.fn(event.step, event.record)


def callbacks_for(cfg: Config, extra: Sequence[TrainCallback | StepCallback] = ()) -> list[TrainCallback]:
    """The callbacks a run uses: ``train.callbacks`` (+ ``linear-probe`` when ``eval.linear_probe``),
    then ``extra`` (functions are wrapped in :class:`FunctionCallback`)."""
    named = cfg.train.named_callbacks
    if cfg.eval.linear_probe and "linear-probe" not in [name for name, _ in named]:
        named.append(("linear-probe", {}))
    built = [TRAIN_CALLBACKS.get(name)(cfg, **options) for name, options in named]
    built += [cb if isinstance(cb, TrainCallback) else FunctionCallback(cb) for cb in extra]
    return built


__all__ = ["FunctionCallback", "StepCallback", "StepEvent", "TRAIN_CALLBACKS", "TrainCallback", "callbacks_for"]
