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

    def patch(self, monkeypatch: pytest.MonkeyPatch, nonzero: bool = False) -> None:
        """Count the conversions (and with ``nonzero`` also ``torch.nonzero`` / ``Tensor.nonzero``,
        whose output size a GPU must report to the host)."""
        if nonzero:
            for owner in (torch, torch.Tensor):
                self._count(monkeypatch, owner, "nonzero")
        for name in CONVERSIONS:
            self._count(monkeypatch, torch.Tensor, name)

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
