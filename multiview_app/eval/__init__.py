"""Evaluators of trained runs.

``EVALUATORS`` maps a name (``linear-probe``, ``sleep-staging``, ...) to a class with
``add_arguments(parser)`` and ``run(run_dir, args) -> dict`` (which writes ``eval/<kind>.json``).
``mvapp eval <name> --run DIR`` is generated from this registry (``eval/cli.py``). Evaluator modules
listed in ``EVALUATOR_MODULES`` are imported (so that they register) before the registry is used;
add new evaluators there.
"""
from __future__ import annotations

from ..registry import Registry

#: Modules that register evaluators (imported on the registry's first lookup); add new ones here.
EVALUATOR_MODULES: tuple[str, ...] = (
    "multiview_app.eval.linear_probe",
    "multiview_app.eval.sleep_staging",
    "multiview_app.eval.retrieval",
    "multiview_app.eval.domain_generalization",
)
EVALUATORS: Registry[type] = Registry("evaluator", modules=EVALUATOR_MODULES)


def available_evaluators() -> list[str]:
    """Names accepted by ``mvapp eval``, sorted."""
    return EVALUATORS.names()


def get_evaluator(name: str) -> type:
    """The evaluator class registered as ``name`` (ValueError listing the valid names)."""
    return EVALUATORS.get(name)


__all__ = ["EVALUATORS", "EVALUATOR_MODULES", "available_evaluators", "get_evaluator"]
