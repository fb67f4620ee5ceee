"""argparse ``type=`` converters that refuse out-of-range values (never replaced by defaults):
``--knn-k 0`` fails as ``argument --knn-k: expected an integer >= 1, got '0'``."""
from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """An integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1 or str(value) != text.strip().lstrip("+"):
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """A finite float > 0."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def open_fraction(text: str) -> float:
    """A float strictly between 0 and 1."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a fraction strictly between 0 and 1, got {text!r}")
    return value


__all__ = ["open_fraction", "positive_float", "positive_int"]
