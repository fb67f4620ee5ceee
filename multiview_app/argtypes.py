"""argparse ``type=`` converters that refuse out-of-range values (never replaced by defaults):
``--knn-k 0`` fails as ``argument --knn-k: expected an integer >= 1, got '0'``.

The CLI's grammar: ``--seeds`` is always a list of seeds (``--seeds 0,1``, :func:`seed_list`); a count of
repetitions has its own name (``--draws N``). :func:`renamed_option` keeps an old spelling as an error
that names the new one.
"""

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


def seed_list(text: str) -> list[int]:
    """Comma-separated seeds, each an integer >= 0: ``"0,1"`` -> ``[0, 1]``."""
    items = [item.strip() for item in text.split(",")]
    if not all(item.isdigit() for item in items):
        raise argparse.ArgumentTypeError(f"expected comma-separated seeds (integers >= 0, e.g. 0,1), got {text!r}")
    return [int(item) for item in items]


class _Renamed(argparse.Action):
    """An option that was renamed: using it is an error naming the option to use instead."""

    def __init__(self, option_strings: list[str], dest: str, instead: str = "", **kwargs: object) -> None:
        super().__init__(option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        self.instead = instead

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: object, values: object, option: object = None
    ) -> None:
        parser.error(f"{option}: {self.instead}")


def renamed_option(parser: argparse.ArgumentParser, option: str, instead: str) -> None:
    """Make ``option`` (hidden from ``--help``) fail with ``instead``, a sentence naming what to use now."""
    parser.add_argument(option, nargs="?", action=_Renamed, instead=instead)


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


__all__ = [
    "nonnegative_float",
    "nonnegative_int",
    "open_fraction",
    "positive_float",
    "positive_int",
    "renamed_option",
    "seed_list",
]
