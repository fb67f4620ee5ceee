"""Choices of ``mvapp export`` (no heavy imports: the CLI reads them when building ``--help``)."""

from __future__ import annotations

ALL_SPLITS = "all"
VIEW_MODES: tuple[str, ...] = ("per-view", "mean", "concat")
FILE_FORMATS: tuple[str, ...] = ("npy", "parquet")
#: ``eval.features.FEATURE_KINDS`` (checked equal in tests; eval.features imports torch).
FEATURE_KINDS: tuple[str, ...] = ("encoder", "projector")
DEFAULT_MAX_SHARD_MB = 1024.0
