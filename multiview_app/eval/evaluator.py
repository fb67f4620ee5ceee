"""The :class:`Evaluator` base class: what ``mvapp eval <name>`` needs of an evaluator.

An evaluator is thin: run folder -> features -> a protocol of :mod:`multiview_app.eval.protocols` ->
``eval/<kind>.json`` (+ plots). Its hooks are declared here, so the CLI reads attributes, never
``getattr(obj, "x", default)``. The name is declared once (``name = "linear-probe"``); the output
stem ``kind`` (``linear_probe``) is derived from it unless the class sets its own.
"""

from __future__ import annotations

import argparse
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar


class Evaluator(ABC):
    """Base class of the evaluators registered in ``EVALUATORS`` (with :func:`register_evaluator`).

    A subclass declares ``name`` (the ``mvapp eval <name>`` subcommand; ``kind``, the output stem, is
    derived from it), adds its options in :meth:`add_arguments` and implements :meth:`run`, which reads a
    finished run folder and writes ``eval/<kind>.json``. Decorated with :func:`register_evaluator` (and
    its module listed in ``EVALUATOR_MODULES``) it becomes a subcommand of ``mvapp eval``.

    Examples
    --------
    >>> import argparse
    >>> from multiview_app.eval import Evaluator
    >>> class StepCount(Evaluator):
    ...     name = "step-count"
    ...     def run(self, run_dir, args):
    ...         return {"run": str(run_dir), "steps": args.steps}
    >>> StepCount.kind
    'step_count'
    >>> StepCount().run("runs/digits_m3g", argparse.Namespace(steps=200))
    {'run': 'runs/digits_m3g', 'steps': 200}
    """

    #: CLI name (``mvapp eval <name>``) and registry key, e.g. ``linear-probe``.
    name: ClassVar[str]
    #: Output stem (``eval/<kind>.json``); derived from ``name`` (``-`` -> ``_``) when not set.
    kind: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__ and "kind" not in cls.__dict__:
            cls.kind = cls.name.replace("-", "_")

    @staticmethod  # noqa: B027 - optional hook, no options by default
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        """Add the evaluator's options to its ``mvapp eval <name>`` parser (``--run`` is added for it)."""

    @abstractmethod
    def run(self, run_dir: str | Path, args: argparse.Namespace) -> dict[str, Any]:
        """Evaluate ``run_dir`` with the parsed options; write ``eval/<kind>.json`` (or the file named
        by the result's ``output``) and return the result."""


__all__ = ["Evaluator"]
