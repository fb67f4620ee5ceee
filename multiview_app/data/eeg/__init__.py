"""EEG data: Sleep-EDF / PhysioNet 2018 readers, synthetic PSG writer, prepared window cache,
the ``eeg_windows`` adapter and the ``channels`` view policy.

The adapter and the view policy (torch modules) register when the data registries load this package
(:data:`REGISTERING_MODULES`), not on its import: ``mvapp data synth-psg`` / ``prepare`` import the
writer and the readers without torch (~3 s of CPU per process)."""

from __future__ import annotations

import importlib
from types import ModuleType

from .stages import STAGES

REGISTERING_MODULES: tuple[str, ...] = ("adapter", "views", "modal_views")
"""Submodules whose import registers this package's entries (imported by the registries' lazy load)."""

__all__ = ["REGISTERING_MODULES", "STAGES", "adapter", "modal_views", "views"]


def __getattr__(name: str) -> ModuleType:
    """``multiview_app.data.eeg.adapter`` / ``.views`` on first access (importing registers them)."""
    if name in REGISTERING_MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
