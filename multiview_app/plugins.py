"""Plug-in registries filled from above: the one place, besides ``cli.py``, that names upper layers.

A lower layer (``train/``) owns the hook (:class:`multiview_app.train.callbacks.TrainCallback`) but
must not name the modules of the layers above it that implement the hook (``eval/``, ``tune``): that
list lives here, in a top-level module that imports nothing but the registry class. The registry
imports the listed modules lazily on its first lookup, so importing this module (from ``config.py``
to validate ``train.callbacks``, or from ``train/callbacks.py``) loads no upper layer.
tests/test_layout.py checks that layer folders and ``config.py`` name no upper layer, by import or
by a module-path string.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .registry import Registry

#: Modules whose import registers training callbacks (``@TRAIN_CALLBACKS.register(name)``).
TRAIN_CALLBACK_MODULES: tuple[str, ...] = ("multiview_app.eval.callbacks", "multiview_app.tune.objective")

#: Callback factories ``factory(cfg) -> TrainCallback`` by name (re-exported by ``train/callbacks.py``).
TRAIN_CALLBACKS: Registry[Callable[..., Any]] = Registry("training callback", modules=TRAIN_CALLBACK_MODULES)

__all__ = ["TRAIN_CALLBACKS", "TRAIN_CALLBACK_MODULES"]
