"""Evaluators of trained runs.

``EVALUATORS`` maps a name (``linear-probe``, ``sleep-staging``, ...) to an :class:`Evaluator` subclass
(``add_arguments(parser)``, ``run(run_dir, args) -> dict`` which writes ``eval/<kind>.json``), registered
with :func:`register_evaluator` under its declared ``name``. Evaluators are thin: features -> a protocol
of :mod:`multiview_app.eval.protocols` (the maths) -> JSON + plots.
``mvapp eval <name> --run DIR`` is generated from this registry (``eval/cli.py``). Evaluator modules
listed in ``EVALUATOR_MODULES`` are imported (so that they register) before the registry is used;
add new evaluators there. Domain generalization, which trains runs and ERM baselines first, is an
experiment (``mvapp experiment domain-generalization``, :mod:`multiview_app.experiments.domains`);
:mod:`.domain_generalization` evaluates its run folders.
"""

from __future__ import annotations

from typing import TypeVar

from ..registry import Registry
from .evaluator import Evaluator

#: Modules that register evaluators (imported on the registry's first lookup); add new ones here.
EVALUATOR_MODULES: tuple[str, ...] = (
    "multiview_app.eval.linear_probe",
    "multiview_app.eval.sleep_staging",
    "multiview_app.eval.retrieval",
)
EVALUATORS: Registry[type[Evaluator]] = Registry("evaluator", modules=EVALUATOR_MODULES)

E = TypeVar("E", bound=type[Evaluator])


def register_evaluator(cls: E) -> E:
    """Class decorator: register an :class:`Evaluator` subclass under its ``name``."""
    if not (isinstance(cls, type) and issubclass(cls, Evaluator)) or "name" not in cls.__dict__:
        raise TypeError(f"{cls!r}: an evaluator subclasses eval.Evaluator and declares its name")
    return EVALUATORS.register(cls.name)(cls)


def available_evaluators() -> list[str]:
    """Names accepted by ``mvapp eval``, sorted.

    Examples
    --------
    >>> from multiview_app.eval import available_evaluators
    >>> available_evaluators()
    ['linear-probe', 'retrieval', 'sleep-staging']
    """
    return EVALUATORS.names()


def get_evaluator(name: str) -> type[Evaluator]:
    """The evaluator class registered as ``name`` (ValueError listing the valid names); its
    ``run(run_dir, args)`` evaluates a finished run and writes ``eval/<name>.json``.

    Examples
    --------
    >>> from multiview_app.eval import get_evaluator
    >>> get_evaluator("linear-probe").name
    'linear-probe'
    >>> get_evaluator("knn")
    Traceback (most recent call last):
    ...
    ValueError: unknown evaluator 'knn'; available: linear-probe, retrieval, sleep-staging
    """
    return EVALUATORS.get(name)


# the public face (register_evaluator and EVALUATOR_MODULES stay importable for extensions)
__all__ = ["EVALUATORS", "Evaluator", "available_evaluators", "get_evaluator"]
