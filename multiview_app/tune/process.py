"""Process lifetime for trial processes: a child dies with the thread or server that started it (Linux
``PR_SET_PDEATHSIG``). Shared by the subprocess runner and the fork server (``runner`` -> ``forkserver`` ->
``process``: no import circle)."""

from __future__ import annotations

import signal
from typing import Any


def _load_prctl() -> Any:
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: the tune-report callback polls the worker pid
        return None


_PRCTL = _load_prctl()  # loaded in the parent: the pre-exec hook below only calls it (no imports after fork)


def die_with_parent() -> None:
    """In the child before exec: SIGTERM when the worker thread that started it dies (Linux)."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
