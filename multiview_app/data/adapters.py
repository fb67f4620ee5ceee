"""Data adapters: turn source files into a torch ``Dataset`` of item dicts per split.

Contract (docs/architecture.md, "How to add a dataset"; the item dict: "Contracts", "Views and batch")::

    adapter = build_adapter("digits", {"load_size": 32})
    adapter.modality      # "image"
    adapter.class_names   # ["0", ..., "9"]
    adapter.splits        # ("train", "test")
    ds = adapter.split("train")   # items {"x": Tensor, "label": int, "index": int, <meta>}

Each adapter is a :class:`DataAdapter` subclass registered in :data:`ADAPTERS` with a nested
pydantic ``Options`` model (``extra="forbid"``); :func:`build_adapter` validates the options and
turns a pydantic error into one ``ValueError`` naming ``data.options.<key>``
(:func:`multiview_app.options.format_validation_error`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from torch.utils.data import Dataset

from ..options import ComponentOptions, validate_options
from ..registry import Registry


class AdapterOptions(ComponentOptions):
    """Base of every adapter's ``Options`` model: unknown keys are rejected."""


class DataAdapter:
    """Base of all adapters.

    Subclasses set ``modality`` (class attribute), and in ``__init__`` fill ``class_names``
    (list of str; empty when unlabelled) and ``splits`` (tuple of split names, at least
    ``"train"``), then implement :meth:`_build_split`. Register one with ``@ADAPTERS.register("<name>")``
    (with a nested ``Options`` model, a subclass of ``AdapterOptions``) to use it as ``data.adapter``.

    Raises
    ------
    ValueError
        :meth:`split` of a name not in ``splits`` (listing them).

    Examples
    --------
    >>> import torch
    >>> from torch.utils.data import TensorDataset
    >>> from multiview_app.data.adapters import AdapterOptions, DataAdapter
    >>> class Noise(DataAdapter):
    ...     modality = "eeg"
    ...     def __init__(self, options):
    ...         super().__init__(options)
    ...         self.class_names, self.splits = ["W", "N2"], ("train", "test")
    ...     def _build_split(self, name):
    ...         return TensorDataset(torch.randn(6, 100))
    >>> adapter = Noise(AdapterOptions())
    >>> len(adapter.split("train")), adapter.num_classes
    (6, 2)
    >>> adapter.split("val")
    Traceback (most recent call last):
    ...
    ValueError: Noise has no split 'val'; available: train, test
    """

    modality: ClassVar[str] = ""
    Options: ClassVar[type[AdapterOptions]] = AdapterOptions
    #: ``mvapp tune``'s objective when ``tune.metric`` is not given (a name of ``tune/objective.METRICS``)
    default_tune_metric: ClassVar[str] = "linear_probe.logreg_acc"

    def __init__(self, options: AdapterOptions) -> None:
        self.options = options
        self.class_names: list[str] = []
        self.splits: tuple[str, ...] = ("train",)
        self._split_cache: dict[str, Dataset] = {}

    def split(self, name: str) -> Dataset:
        """The torch ``Dataset`` of split ``name`` (built once, then cached)."""
        if name not in self.splits:
            raise ValueError(f"{type(self).__name__} has no split '{name}'; available: {', '.join(self.splits)}")
        if name not in self._split_cache:
            self._split_cache[name] = self._build_split(name)
        return self._split_cache[name]

    def _build_split(self, name: str) -> Dataset:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def num_classes(self) -> int:
        return len(self.class_names)


#: One package per modality (``data/<modality>/``); importing one (with the submodules its
#: ``REGISTERING_MODULES`` names, if any) registers its adapters and view policies. A new modality is its
#: folder plus one line here.
MODALITY_PACKAGES: tuple[str, ...] = (
    "multiview_app.data.images",
    "multiview_app.data.eeg",
    "multiview_app.data.text",
    "multiview_app.data.domains",
)

#: Adapters by name; the modality packages register themselves on first lookup.
ADAPTERS: Registry[type[DataAdapter]] = Registry("data adapter", modules=MODALITY_PACKAGES)


def available_adapters() -> list[str]:
    """Names accepted by :func:`build_adapter`, sorted.

    Examples
    --------
    >>> from multiview_app.data import available_adapters
    >>> {"digits", "eeg_windows", "image_folder"} <= set(available_adapters())
    True
    """
    return ADAPTERS.names()


def adapter_options_model(name: str) -> type[AdapterOptions]:
    """The pydantic ``Options`` model of adapter ``name`` (for config docs / validation)."""
    return ADAPTERS.get(name).Options


def build_adapter(name: str, options: dict[str, Any] | None = None) -> DataAdapter:
    """Validate ``options`` against adapter ``name``'s ``Options`` and build the adapter.

    Raises ``ValueError`` for an unknown adapter (listing the available ones) or invalid options
    (naming ``data.options.<key>``, the value and what is allowed).

    Examples
    --------
    >>> from multiview_app.data import build_adapter
    >>> build_adapter("digits", {"bogus": 1})
    Traceback (most recent call last):
    ...
    ValueError: invalid options for data adapter 'digits': data.options.bogus: unknown option; allowed: ...
    """
    cls = ADAPTERS.get(name)
    parsed = validate_options(
        cls.Options, options, "data.options", prefix=f"invalid options for data adapter '{name}': "
    )
    return cls(parsed)


__all__ = [
    "ADAPTERS",
    "AdapterOptions",
    "DataAdapter",
    "MODALITY_PACKAGES",
    "adapter_options_model",
    "available_adapters",
    "build_adapter",
]
