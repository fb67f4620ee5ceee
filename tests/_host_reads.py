"""Counting tensor-to-Python conversions on the CPU: each one is a host synchronization on a GPU
(used by tests/test_train_host_reads.py and tests/test_augment.py)."""

from __future__ import annotations

import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch

#: The ``torch.Tensor`` methods through which Python reads a tensor's value.
CONVERSIONS = ("item", "tolist", "__bool__", "__float__", "__int__")
#: Copies to the host (``transfers=True``): each waits for the device.
TRANSFERS = ("cpu", "numpy")


def _has_bool_index(index: Any) -> bool:
    """Whether a ``Tensor.__getitem__`` / ``__setitem__`` index holds a boolean tensor (a mask: the
    result's size is data-dependent, so a GPU reports it to the host)."""
    parts = index if isinstance(index, tuple) else (index,)
    return any(isinstance(part, torch.Tensor) and part.dtype == torch.bool for part in parts)


class HostReads:
    """Counts tensor-to-Python conversions (with a short stack of each), except inside :meth:`excluded`
    blocks of the same thread."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self._local = threading.local()

    @contextmanager
    def excluded(self) -> Iterator[None]:
        depth = getattr(self._local, "depth", 0)
        self._local.depth = depth + 1
        try:
            yield
        finally:
            self._local.depth = depth

    def record(self, name: str) -> None:
        if getattr(self._local, "depth", 0):
            return
        frames = [f for f in traceback.extract_stack()[:-2] if "multiview_app" in f.filename]
        where = " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(frames[-4:]))
        self.seen.append(f"{threading.current_thread().name}: Tensor.{name} at {where or '(torch internals)'}")

    def patch(self, monkeypatch: pytest.MonkeyPatch, nonzero: bool = False, transfers: bool = False) -> None:
        """Count the conversions; with ``nonzero`` also ``torch.nonzero`` / ``Tensor.nonzero`` and
        ``torch.masked_select`` (whose output size a GPU must report to the host); with ``transfers``
        also ``Tensor.cpu`` / ``Tensor.numpy`` and indexing with a boolean mask (read or write)."""
        if nonzero:
            for owner in (torch, torch.Tensor):
                self._count(monkeypatch, owner, "nonzero")
            self._count(monkeypatch, torch, "masked_select")
        for name in CONVERSIONS + (TRANSFERS if transfers else ()):
            self._count(monkeypatch, torch.Tensor, name)
        if transfers:
            for name in ("__getitem__", "__setitem__"):
                self._count_bool_index(monkeypatch, name)

    def _count_bool_index(self, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
        original = getattr(torch.Tensor, name)

        def counted(tensor: torch.Tensor, index: Any, *rest: Any) -> Any:
            if _has_bool_index(index):
                self.record(f"{name}[bool mask]")
            return original(tensor, index, *rest)

        monkeypatch.setattr(torch.Tensor, name, counted)

    def _count(self, monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> None:
        original = getattr(owner, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.record(name)
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, counted)

    def exclude_method(self, monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> None:
        original = getattr(owner, name)

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with self.excluded():
                return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, wrapped)

    def exclude_generator(self, monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> None:
        original = getattr(owner, name)

        def wrapped(*args: Any, **kwargs: Any) -> Iterator[Any]:
            iterator = original(*args, **kwargs)
            while True:
                with self.excluded():
                    try:
                        item = next(iterator)
                    except StopIteration:
                        return
                yield item

        monkeypatch.setattr(owner, name, wrapped)
