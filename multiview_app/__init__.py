"""multiview_app: multi-view and multimodal representation learning."""

from __future__ import annotations

from typing import Any


def _installed_version() -> str:
    """The version pyproject.toml declares (its one home), as installed; ``0+unknown`` from a bare source tree."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("multiview_app")
    except PackageNotFoundError:
        return "0+unknown"


__version__ = _installed_version()


def __getattr__(name: str) -> Any:  # lazy: ``mvapp --help`` / ``--version`` import this package without torch
    if name == "load_encoder":
        from .export.encoder import load_encoder

        return load_encoder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["__version__", "load_encoder"]
