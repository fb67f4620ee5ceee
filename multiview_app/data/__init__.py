"""Data adapters: a registry of datasets (images, EEG windows, image-text pairs, domains) by name.

``build_adapter(name, options)`` validates the options and returns a :class:`~multiview_app.data.adapters.DataAdapter`
whose ``split(name)`` is a torch ``Dataset``; the modality packages register their adapters on first lookup
(nothing heavy is imported with this package).
"""
from __future__ import annotations

from typing import Any

_LAZY = {"ADAPTERS", "available_adapters", "build_adapter"}


def __getattr__(name: str) -> Any:  # lazy: ``mvapp --help`` imports data.cli without torch
    if name in _LAZY:
        from . import adapters

        return getattr(adapters, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ADAPTERS", "available_adapters", "build_adapter"]
