"""One CLI grammar: every ``mvapp`` subcommand's ``--help`` has a one-line description, an example and every
default; ``--seeds`` is always a list of seeds (a count of draws is ``--draws``); ``tune report`` is a
subcommand of its own."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from multiview_app.argtypes import seed_list
from multiview_app.cli import build_parser, forward, group_commands, main


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(actions[0].choices) if actions else {}


def _walk(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield path, parser
    for name, child in _subparsers(parser).items():
        yield from _walk(child, f"{path} {name}")


def every_command() -> list[tuple[str, argparse.ArgumentParser]]:
    """``[("mvapp eval sleep-staging", parser), ...]``: every group built in full, walked recursively."""
    found = []
    for group in group_commands():
        found += list(_walk(_subparsers(build_parser(group))[group], f"mvapp {group}"))
    return found


def _problems(path: str, parser: argparse.ArgumentParser) -> list[str]:
    problems = []
    description = (parser.description or "").strip()
    if not description or "\n" in description:
        problems.append(f"{path}: description should be one line, got {description!r}")
    lines = [
        line.strip().removeprefix("examples:").removeprefix("example:") for line in (parser.epilog or "").splitlines()
    ]
    examples = [line.strip() for line in lines if line.strip().startswith("mvapp ")]
    if "example" not in (parser.epilog or "") or not any(line.startswith(path + " ") for line in examples):
        problems.append(f"{path}: no example ('example:' and a line '{path} ...' in the epilog)")
    for action in parser._actions:
        default = action.default
        if default is None or default is argparse.SUPPRESS or isinstance(default, bool) or not action.option_strings:
            continue
        text = action.help or ""
        if "%(default)" not in text and not ("default" in text and str(default) in text):
            problems.append(f"{path} {action.option_strings[0]}: its default {default!r} is not shown")
    return problems


def test_every_subcommand_help_has_a_description_an_example_and_its_defaults() -> None:
    commands = every_command()
    names = {path for path, _ in commands}
    assert {"mvapp eval sleep-staging", "mvapp export", "mvapp tune search", "mvapp tune report"} <= names
    problems = [problem for path, parser in commands for problem in _problems(path, parser)]
    assert not problems, "\n".join(problems)
    for _, parser in commands:
        parser.format_help()  # every %(default)s formats


def test_sleep_staging_counts_draws_and_seeds_there_names_draws(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser("eval")
    args = parser.parse_args(["eval", "sleep-staging", "--run", "r", "--draws", "3", "--folds", "2"])
    assert args.draws == 3 and not hasattr(args, "seeds")
    with pytest.raises(SystemExit) as exit_info:
        main(["eval", "sleep-staging", "--run", "r", "--seeds", "3"])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and len(err.splitlines()) == 1
    assert "--seeds" in err and "--draws N" in err
    assert "--seeds" not in _subparsers(_subparsers(parser)["eval"])["sleep-staging"].format_help()


def test_seeds_are_a_list_everywhere() -> None:
    assert seed_list("0") == [0] and seed_list("0, 1,2") == [0, 1, 2]
    for bad in ("", "1,", "a", "-1", "1.5"):
        with pytest.raises(argparse.ArgumentTypeError, match="comma-separated seeds"):
            seed_list(bad)
    parser = build_parser("experiment")
    args = parser.parse_args(["experiment", "domain-generalization", "--run", "o", "--config", "c.yaml"])
    assert args.seeds == [0]


def test_tune_report_is_a_subcommand_and_search_the_default(capsys: pytest.CaptureFixture[str]) -> None:
    assert forward(["tune", "--config", "c.yaml", "--trials", "2"]) == ["tune", "search", "--config", "c.yaml"] + [
        "--trials",
        "2",
    ]
    assert forward(["tune", "report", "--study-name", "s"]) == ["tune", "report", "--study-name", "s"]
    assert forward(["tune", "--help"]) == ["tune", "--help"]
    parser = build_parser("tune")
    args = parser.parse_args(forward(["tune", "--config", "c.yaml", "train.max_steps=4"]))
    assert args.tune_command == "search" and args.overrides == ["train.max_steps=4"]
    args = parser.parse_args(["tune", "report", "--study-name", "s"])
    assert args.tune_command == "report" and args.runs_dir == "runs" and not hasattr(args, "overrides")
    with pytest.raises(SystemExit):
        main(["tune", "report", "--study-name", "s", "train.max_steps=4"])
    assert "unrecognized arguments: train.max_steps=4" in capsys.readouterr().err


def test_train_help_lists_training_configs_only() -> None:
    from multiview_app.train.cli import _train_epilog

    listed = _train_epilog().split("):", 1)[1]
    assert "digits_m3g.yaml" in listed
    for prefix in ("base_", "tune_", "demo_", "experiment_"):
        assert prefix not in listed, prefix
