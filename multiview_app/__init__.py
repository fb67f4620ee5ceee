"""multiview_app: multi-view and multimodal representation learning."""
from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:  # lazy: ``mvapp --help`` / ``--version`` import this package without torch
    if name == "load_encoder":
        from .export.encoder import load_encoder

        return load_encoder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["__version__", "load_encoder"]
