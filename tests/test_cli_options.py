"""Every numeric option of every ``mvapp`` subcommand parses through :mod:`multiview_app.argtypes`
(range-checked, never a bare ``type=int`` / ``type=float``), and every help text shows its default once."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

import pytest

from multiview_app import argtypes
from multiview_app.cli import build_parser, group_commands

# The converters a numeric option may use (each refuses out-of-range values with one clear message).
NUMERIC_TYPES = {getattr(argtypes, name) for name in argtypes.__all__}


def _walk(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, argparse.ArgumentParser, argparse.Action]]:
    """``(command path, owning parser, action)`` for every action of ``parser`` and its sub-parsers."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, f"{path} {name}")
        else:
            yield path, parser, action


def _all_actions() -> list[tuple[str, argparse.ArgumentParser, argparse.Action]]:
    actions = []
    for command in group_commands():
        parser = build_parser(command)
        actions += [item for item in _walk(parser, "mvapp") if item[0].split()[1:2] == [command]]
    return actions


ACTIONS = _all_actions()


def _label(path: str, action: argparse.Action) -> str:
    return f"{path} {'/'.join(action.option_strings) or action.dest}"


def test_the_walk_sees_every_command_group() -> None:
    seen = {path.split()[1] for path, _, _ in ACTIONS}
    assert seen == set(group_commands())
    assert any("--knn-k" in action.option_strings for _, _, action in ACTIONS)  # nested: mvapp eval linear-probe


def test_numeric_options_use_argtypes() -> None:
    bare = [_label(path, action) for path, _, action in ACTIONS if action.type in (int, float)]
    assert not bare, f"numeric options with a bare int/float type (use multiview_app.argtypes): {bare}"
    untyped = [
        _label(path, action)
        for path, _, action in ACTIONS
        if action.type is None
        and isinstance(action.default, (int, float))
        and not isinstance(action.default, bool)
        and action.option_strings
        and action.nargs != 0
    ]
    assert not untyped, f"options with a numeric default but no type (parsed as text): {untyped}"


def test_help_shows_each_default_once() -> None:
    twice = []
    for path, parser, action in ACTIONS:
        if not action.help or action.help == argparse.SUPPRESS:
            continue
        text = parser._get_formatter()._expand_help(action)
        if len(re.findall(r"\bdefault\b", text, flags=re.IGNORECASE)) > 1:
            twice.append(f"{_label(path, action)}: {text!r}")
    assert not twice, "help texts naming their default twice:\n" + "\n".join(twice)


@pytest.mark.parametrize(
    "converter, text",
    [
        (argtypes.nonnegative_int, "-1"),
        (argtypes.nonnegative_int, "1.5"),
        (argtypes.positive_int, "0"),
        (argtypes.positive_float, "nan"),
    ],
)
def test_converters_refuse_out_of_range(converter, text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=f"expected .*got '{re.escape(text)}'"):
        converter(text)
