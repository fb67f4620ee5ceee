"""``mvapp config show --config FILE [overrides...]``: the resolved, validated config as YAML.

Kept apart from :mod:`multiview_app.config` so that building the ``mvapp`` parser (``--help``) does
not import pydantic.
"""

from __future__ import annotations

import argparse
import sys

from .cli import describe

EXAMPLE = "mvapp config show --config configs/digits_m3g.yaml loss.epsilon=0.1"


def add_subparser(subparsers: argparse._SubParsersAction) -> None:
    """``mvapp config show --config FILE [overrides...]``."""
    group = subparsers.add_parser("config", **describe("inspect configs", EXAMPLE))
    sub = group.add_subparsers(dest="config_command", required=True, metavar="CONFIG_COMMAND")
    show = sub.add_parser(
        "show", **describe("print the resolved, validated config (overrides applied) as YAML", EXAMPLE)
    )
    show.add_argument("--config", required=True, help="YAML config file")
    show.add_argument("overrides", nargs="*", help="dotted overrides, e.g. loss.epsilon=0.1")
    show.set_defaults(func=_cmd_show)


def _cmd_show(args: argparse.Namespace) -> int:
    from .config import dump_config, load_config

    cfg = load_config(args.config, args.overrides)
    for note in cfg.load_notes:
        print(f"mvapp: note: {note}", file=sys.stderr)
    print(dump_config(cfg), end="")
    return 0
