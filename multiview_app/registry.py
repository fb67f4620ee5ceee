"""A tiny name -> factory registry shared by losses, adapters, view policies and encoders."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator
from typing import Generic, TypeVar

from .extras import extra_for, install_hint

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to factories (classes or functions).

    ``kind`` is used in error messages, e.g. ``Registry("loss")`` raises
    ``ValueError("unknown loss 'foo'; available: a, b")``.

    ``modules`` names the modules whose import registers the entries; they are imported once,
    lazily, on the first lookup (so importing the registry stays cheap and cycle-free), each with the
    submodules its ``REGISTERING_MODULES`` names (a package whose registering parts need torch leaves them
    out of its own import, e.g. ``data/eeg``: its file writers and readers run without torch). A module that
    needs an optional package which is not installed (:mod:`multiview_app.extras`) is skipped: its
    entries are missing, and looking up a missing name says which ``pip install 'multiview_app[<extra>]'``
    brings the skipped modules. Any other import error propagates.

    ``name_attribute`` (e.g. ``"name"``): :meth:`register` sets that attribute of the registered
    class to its registry name, so the name is written once (in the decorator).
    """

    def __init__(self, kind: str, modules: Iterable[str] = (), name_attribute: str | None = None) -> None:
        self.kind = kind
        self.modules: tuple[str, ...] = tuple(modules)
        self.name_attribute = name_attribute
        self._entries: dict[str, T] = {}
        self._loaded = False
        #: modules skipped for a missing optional package: module -> (package, extra)
        self.skipped: dict[str, tuple[str, str]] = {}

    def _load(self) -> None:
        """Import ``self.modules`` once so that they register their entries."""
        if self._loaded:
            return
        self._loaded = True
        for module in self.modules:
            try:
                imported = importlib.import_module(module)
                for submodule in getattr(imported, "REGISTERING_MODULES", ()):
                    importlib.import_module(f"{module}.{submodule}")
            except ModuleNotFoundError as exc:
                extra = extra_for(exc.name or "")
                if extra is None:  # not an optional package: a real error
                    raise
                self.skipped[module] = ((exc.name or "").split(".")[0], extra)

    def missing_hint(self) -> str:
        """``""``, or ``"; not loaded: <module>, <module> (optional package 'PIL' missing: pip install
        'multiview_app[images]'); ..."`` for the modules skipped for a missing optional package."""
        if not self.skipped:
            return ""
        by_cause: dict[tuple[str, str], list[str]] = {}
        for module, cause in self.skipped.items():
            by_cause.setdefault(cause, []).append(module)
        parts = [
            f"{', '.join(modules)} (optional package {package!r} missing: {install_hint(extra)})"
            for (package, extra), modules in by_cause.items()
        ]
        return "; not loaded: " + "; ".join(parts)

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: ``@REG.register("name")`` on a class or function."""

        def decorator(obj: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} '{name}' is already registered")
            self._entries[name] = obj
            if self.name_attribute:
                setattr(obj, self.name_attribute, name)
            return obj

        return decorator

    def get(self, name: str) -> T:
        self._load()
        try:
            return self._entries[name]
        except KeyError:
            raise ValueError(
                f"unknown {self.kind} '{name}'; available: {', '.join(self.names())}{self.missing_hint()}"
            ) from None

    def names(self) -> list[str]:
        self._load()
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
