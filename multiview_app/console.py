"""What a command shows while it runs: informational notes and progress.

* :func:`info` prints a note (the torch thread choice, a precision fallback, ``resumed from ...``). Inside
  the ``mvapp`` CLI the notes are held (:func:`hold`) until the command starts its real work (its first
  progress display) or ends well (:func:`release`); a command that fails drops them (:func:`discard`), so
  a bad input prints exactly one line, its error, on stderr. Outside the CLI (the Python API) a note is
  printed at once.
* :func:`progress` is the one progress display: a tqdm bar on a terminal; on anything else (a redirected
  log, a pipe, CI) plain lines ``desc: done/total unit (pct%), rate, postfix`` on stderr at most every
  :data:`PLAIN_EVERY_S` seconds or :data:`PLAIN_EVERY_PCT` percent, and one at the end (no carriage
  returns).
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, TextIO

PLAIN_EVERY_S = 30.0
PLAIN_EVERY_PCT = 10.0

_PLAIN_LINE = re.compile(r"^[^:]*: [\d.e+]+(/[\d.e+]+)? \S+( \(\d+%\))?(, |$)")
_held: list[str] | None = None  # None: not holding (notes print at once)
_stdout: TextIO | None = None  # the stdout that :func:`hold` wrapped
_proxies: list[Any] = []  # every proxy stays alive: print() borrows sys.stdout while a write swaps it back


class _ReleaseOnWrite:
    """Stands in for stdout while notes are held: the command's first output releases them first."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        if _held is not None:
            release()
        return self._stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def hold() -> None:
    """Hold :func:`info` notes until the command's first output or progress display, or until
    :func:`release` / :func:`discard` (the CLI calls it first)."""
    global _held, _stdout
    _held = []
    if _stdout is None:
        stream = sys.stdout
        while isinstance(stream, _ReleaseOnWrite):  # one left behind (e.g. restored by a test's capture)
            stream = stream._stream
        _stdout = stream
        if not _proxies or _proxies[-1]._stream is not stream:
            _proxies[:] = [*_proxies[-3:], _ReleaseOnWrite(stream)]
        sys.stdout = _proxies[-1]


def _stop_holding() -> list[str]:
    global _held, _stdout
    held, _held = _held or [], None
    if _stdout is not None:
        if isinstance(sys.stdout, _ReleaseOnWrite):
            sys.stdout = _stdout
        _stdout = None
    return held


def release() -> None:
    """Print the held notes (in order) and stop holding."""
    for line in _stop_holding():
        print(line, flush=True)


def discard() -> None:
    """Drop the held notes (the command failed: its error is the only line) and stop holding."""
    _stop_holding()


def info(line: str) -> None:
    """An informational line: printed now, or held while the CLI holds notes."""
    if _held is not None:
        _held.append(line)
    else:
        print(line, flush=True)


def is_terminal(stream: TextIO | None = None) -> bool:
    """Whether ``stream`` (default stderr, where progress goes) is an interactive terminal."""
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def is_progress_line(line: str) -> bool:
    """Whether a stderr line is progress (a tqdm bar or a :class:`PlainProgress` line), not a message."""
    return "%|" in line or bool(_PLAIN_LINE.match(line))


class PlainProgress:
    """The tqdm subset used here (``update``, ``set_postfix``, ``close``, iteration, context manager)
    printing plain periodic lines instead of a redrawn bar."""

    def __init__(
        self,
        iterable: Iterable[Any] | None = None,
        total: float | None = None,
        desc: str = "",
        unit: str = "it",
        initial: float = 0,
        file: TextIO | None = None,
        **_: Any,
    ) -> None:
        self.iterable = iterable
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)  # type: ignore[arg-type]
        self.total, self.desc, self.unit, self.n = total, desc, unit, initial
        self.file = file
        self.postfix = ""
        self._start_n, self._start = initial, time.monotonic()
        self._last_time, self._last_pct = self._start, self._pct()
        self._closed = False

    def _pct(self) -> float:
        return 100.0 * self.n / self.total if self.total else 0.0

    def _line(self) -> str:
        done = f"{self.n:g}/{self.total:g}" if self.total else f"{self.n:g}"
        pct = f" ({self._pct():.0f}%)" if self.total else ""
        elapsed = time.monotonic() - self._start
        rate = (
            f", {(self.n - self._start_n) / elapsed:.3g} {self.unit}/s"
            if elapsed > 0 and self.n > self._start_n
            else ""
        )
        postfix = f", {self.postfix}" if self.postfix else ""
        return f"{self.desc + ': ' if self.desc else ''}{done} {self.unit}{pct}{rate}{postfix}"

    def _emit(self) -> None:
        print(self._line(), file=self.file or sys.stderr, flush=True)
        self._last_time, self._last_pct = time.monotonic(), self._pct()

    def update(self, n: float = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self._last_time >= PLAIN_EVERY_S or (
            self.total and self._pct() - self._last_pct >= PLAIN_EVERY_PCT and self.n < self.total
        ):
            self._emit()

    def refresh(self) -> None:
        """After ``n`` was set directly (tqdm's way): a line when one is due."""
        self.update(0)

    def set_postfix(self, **values: Any) -> None:
        self.postfix = ", ".join(f"{key}={value}" for key, value in values.items())

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self.n > self._start_n:
                self._emit()

    def __iter__(self) -> Iterator[Any]:
        try:
            for item in self.iterable or ():
                yield item
                self.update(1)
        finally:
            self.close()

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Silent(PlainProgress):
    """A disabled display: counts, prints nothing."""

    def _emit(self) -> None:
        pass


def progress(iterable: Iterable[Any] | None = None, *, disable: bool | None = False, **kwargs: Any) -> Any:
    """A progress display with tqdm's interface (``total``, ``desc``, ``unit``, ``initial``, ``leave``, ...):
    a tqdm bar when stderr is a terminal, :class:`PlainProgress` lines otherwise, nothing when ``disable``
    is true (``None``, tqdm's "off when not a terminal", is treated like False: plain lines then). Starting
    one releases the notes the CLI holds (the command's real work has begun)."""
    if disable:
        return _Silent(iterable, **kwargs)
    release()
    if is_terminal(kwargs.get("file")):
        from tqdm.auto import tqdm

        return tqdm(iterable, **kwargs)
    return PlainProgress(iterable, **kwargs)


def write(line: str) -> None:
    """Print ``line`` without breaking a tqdm bar (``tqdm.write``; plain ``print`` off a terminal)."""
    if is_terminal():
        from tqdm.auto import tqdm

        tqdm.write(line)
    else:
        print(line, flush=True)


__all__ = [
    "PLAIN_EVERY_PCT",
    "PLAIN_EVERY_S",
    "PlainProgress",
    "discard",
    "hold",
    "info",
    "is_progress_line",
    "is_terminal",
    "progress",
    "release",
    "write",
]
