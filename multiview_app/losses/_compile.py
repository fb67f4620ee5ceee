"""``torch.compile`` for the MM-Sinkhorn sweep blocks, with one eager fallback.

:func:`compiled` returns a function compiled once per key (``fullgraph=True``, static shapes;
``mode="reduce-overhead"`` on CUDA: the block replays as one CUDA graph). If compiling or running the
compiled function fails (an old torch, no C++ compiler, an unsupported op), every block from then on
runs eagerly -- the same function, hence the same result -- after ONE warning naming the reason.

Where it compiles by default (:data:`COMPILE_BY_DEFAULT`): on a GPU, not on the CPU, where inductor's first
compile of a problem size costs minutes that a training run does not win back (``scripts/bench/bench_m3g_cpu.py``).
``MVAPP_M3G_COMPILE=1`` compiles on every device, ``MVAPP_M3G_COMPILE=0`` on none (debugging, quick tests); read
once, at import (:data:`SWITCH`).

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

#: ``MVAPP_M3G_COMPILE=0``: eager sweeps everywhere (same values); ``1``: compiled everywhere; unset: the default.
ENV_SWITCH = "MVAPP_M3G_COMPILE"
#: the switch's value, read once at import ("" when unset)
SWITCH = os.environ.get(ENV_SWITCH, "")
#: Whether the blocks compile without ``MVAPP_M3G_COMPILE``, per device type (others: True). The CPU runs them
#: eagerly: a cold compile costs minutes per problem size and pays back only after ~1,000 calls of it
#: (``scripts/bench/bench_m3g_cpu.py --cold``; docs/benchmarks.md, "M3G on the CPU").
COMPILE_BY_DEFAULT = {"cpu": False}

_CACHE: dict[Hashable, Callable[..., Any]] = {}
_FAILURE: list[str] = []  # the reason compiling failed (then everything runs eagerly)


def compile_enabled(device_type: str) -> bool:
    """Whether blocks on ``device_type`` are compiled (switched on or the device's default, no earlier failure)."""
    switch = SWITCH
    wanted = switch == "1" if switch in ("0", "1") else COMPILE_BY_DEFAULT.get(device_type, True)
    return wanted and not _FAILURE


def compile_failure() -> str | None:
    """Why compiling was given up in this process (None: it was not)."""
    return _FAILURE[0] if _FAILURE else None


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
    if not compile_enabled(device_type):
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
