"""``torch.compile`` for the MM-Sinkhorn sweep blocks, with one eager fallback.

:func:`compiled` returns a function compiled once per key (``fullgraph=True``, static shapes;
``mode="reduce-overhead"`` on CUDA: the block replays as one CUDA graph). If compiling or running the
compiled function fails (an old torch, no C++ compiler, an unsupported op), every block from then on
runs eagerly -- the same function, hence the same result -- after ONE warning naming the reason.
``MVAPP_M3G_COMPILE=0`` runs eagerly from the start (debugging, quick tests).

The compiled functions must be pure (no in-place change of an input): a failed compiled call is
simply re-run eagerly.
"""

from __future__ import annotations

import os
import types
import warnings
from collections.abc import Callable, Hashable
from typing import Any

import torch

#: ``MVAPP_M3G_COMPILE=0``: eager sweeps (same values).
ENV_SWITCH = "MVAPP_M3G_COMPILE"

_CACHE: dict[Hashable, Callable[..., Any]] = {}
_FAILURE: list[str] = []  # the reason compiling failed (then everything runs eagerly)


def compile_enabled() -> bool:
    """Whether blocks are compiled (not switched off, no earlier failure)."""
    return os.environ.get(ENV_SWITCH, "1") != "0" and not _FAILURE


def compile_failure() -> str | None:
    """Why compiling was given up in this process (None: it was not)."""
    return _FAILURE[0] if _FAILURE else None


def reset() -> None:
    """Forget the compiled functions and any failure (tests)."""
    _CACHE.clear()
    _FAILURE.clear()


def _give_up(reason: str) -> None:
    if not _FAILURE:
        _FAILURE.append(reason)
        warnings.warn(
            f"M3G solver: torch.compile failed ({reason}); the sweeps run eagerly from now on (same result, more launches)",
            RuntimeWarning,
            stacklevel=3,
        )


def compiled(key: Hashable, fn: Callable[..., Any], device_type: str) -> Callable[..., Any]:
    """``fn`` compiled once per ``key`` (or ``fn`` itself when compiling is off or failed)."""
    if not compile_enabled():
        return fn
    found = _CACHE.get(key)
    if found is None:
        found = _CACHE[key] = _Compiled(fn, device_type)
    return found


class _Compiled:
    """Calls the compiled ``fn``; on the first failure gives up compiling and calls ``fn``."""

    def __init__(self, fn: Callable[..., Any], device_type: str) -> None:
        self.fn, self.device_type = _fresh_code(fn), device_type
        self.compiled: Callable[..., Any] | None = None

    def __call__(self, *args: Any) -> Any:
        if _FAILURE:
            return self.fn(*args)
        try:
            if self.compiled is None:
                mode = "reduce-overhead" if self.device_type == "cuda" else None
                self.compiled = torch.compile(self.fn, fullgraph=True, dynamic=False, mode=mode)
            if self.device_type == "cuda":  # graph replays overwrite their outputs: keep copies
                torch.compiler.cudagraph_mark_step_begin()
                return _clone(self.compiled(*args))
            return self.compiled(*args)
        except Exception as error:  # noqa: BLE001 - any compiler failure: eager, same function
            _give_up(f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}")
            return self.fn(*args)


def _fresh_code(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with a code object of its own: dynamo caches compiled graphs (and counts recompiles) per
    code object, so each key's function must not share one with another key's."""
    if not isinstance(fn, types.FunctionType):
        return fn
    copy = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    return copy


def _clone(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, tuple | list):
        return type(value)(_clone(item) for item in value)
    return value
