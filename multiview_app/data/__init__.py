"""Data adapters: a registry of datasets (images, EEG windows, image-text pairs, domains) by name.

``build_adapter(name, options)`` validates the options and returns a :class:`~multiview_app.data.adapters.DataAdapter`
whose ``split(name)`` is a torch ``Dataset``; the modality packages register their adapters on first lookup
(nothing heavy is imported with this package). A batch of ``k`` views of ``n`` items is a :class:`ViewBatch`;
:class:`DataAdapter` is the base of a new adapter.
"""
from __future__ import annotations

from .adapters import ADAPTERS, DataAdapter, available_adapters, build_adapter
from .batch import ViewBatch

__all__ = ["ADAPTERS", "DataAdapter", "ViewBatch", "available_adapters", "build_adapter"]
