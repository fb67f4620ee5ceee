"""Embeddings of a trained run for downstream classifiers (``mvapp export``).

``export_embeddings(run_dir, out_dir, ...)`` writes an export folder (``embeddings*.npy`` or
``embeddings*.parquet``, ``metadata.parquet``, ``manifest.json`` last); ``load_embeddings(dir)``
returns ``(embeddings (rows, dim), metadata table, manifest)`` memory-mapped. Options, the folder's
files and common errors: the user guide docs/export.md, "``mvapp export``: embeddings".
"""

from __future__ import annotations

from typing import Any

_LAZY = {
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
}


def __getattr__(name: str) -> Any:  # lazy: ``mvapp --help`` imports export.cli without torch / pyarrow
    if name in _LAZY:
        from . import export

        return getattr(export, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = sorted(_LAZY)
