"""Data adapters: a registry of datasets (images, EEG windows, image-text pairs, domains) by name.

``build_adapter(name, options)`` validates the options and returns a :class:`~multiview_app.data.adapters.DataAdapter`
whose ``split(name)`` is a torch ``Dataset``; the modality packages register their adapters on first lookup
(nothing heavy is imported with this package). A batch of ``k`` views of ``n`` items is a :class:`ViewBatch`;
:class:`DataAdapter` is the base of a new adapter.
"""

from __future__ import annotations

from typing import Any

_LAZY = {
    "ADAPTERS": "adapters",
    "DataAdapter": "adapters",
    "available_adapters": "adapters",
    "build_adapter": "adapters",
    "ViewBatch": "batch",
}


def __getattr__(name: str) -> Any:  # lazy: ``mvapp --help`` imports data.cli without torch
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ADAPTERS", "DataAdapter", "ViewBatch", "available_adapters", "build_adapter"]
