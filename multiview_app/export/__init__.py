"""Embeddings of a trained run for downstream classifiers (``mvapp export``).

``export_embeddings(run_dir, out_dir, ...)`` writes an export folder (``embeddings*.npy`` or
``embeddings*.parquet``, ``metadata.parquet``, ``manifest.json`` last); ``load_embeddings(dir)``
returns ``(embeddings (rows, dim), metadata table, manifest)`` memory-mapped. See
docs/architecture.md, "Export".
"""
from __future__ import annotations

from .export import (
    ALL_SPLITS,
    VIEW_MODES,
    ExportError,
    ShardedRows,
    data_config,
    export_embeddings,
    export_model,
    feature_rows,
    load_embeddings,
    plan_shards,
)

__all__ = [
    "ALL_SPLITS",
    "VIEW_MODES",
    "ExportError",
    "ShardedRows",
    "data_config",
    "export_embeddings",
    "export_model",
    "feature_rows",
    "load_embeddings",
    "plan_shards",
]
