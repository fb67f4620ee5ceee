"""argparse ``type=`` converters that refuse out-of-range values (never replaced by defaults):
``--knn-k 0`` fails as ``argument --knn-k: expected an integer >= 1, got '0'``."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def _int_at_least(text: str, minimum: int) -> int:
    """``int(text)`` if it is a plain integer ``>= minimum``, else an ``ArgumentTypeError``."""
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < minimum or str(value) != text.strip().lstrip("+"):
        raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1."""
    return _int_at_least(text, 1)


def nonnegative_int(text: str) -> int:
    """An integer >= 0 (seeds, worker counts, subject numbers)."""
    return _int_at_least(text, 0)


def _float_in(text: str, accept: Callable[[float], bool], expected: str) -> float:
    """``float(text)`` if ``accept`` says so, else an ``ArgumentTypeError`` naming ``expected``."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not accept(value):  # NaN fails every comparison
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """A finite float > 0."""
    return _float_in(text, lambda v: 0.0 < v < float("inf"), "a number > 0")


def nonnegative_float(text: str) -> float:
    """A finite float >= 0."""
    return _float_in(text, lambda v: 0.0 <= v < float("inf"), "a number >= 0")


def open_fraction(text: str) -> float:
    """A float strictly between 0 and 1."""
    return _float_in(text, lambda v: 0.0 < v < 1.0, "a fraction strictly between 0 and 1")


__all__ = ["nonnegative_float", "nonnegative_int", "open_fraction", "positive_float", "positive_int"]
