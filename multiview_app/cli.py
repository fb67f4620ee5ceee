"""The ``mvapp`` console script.

Subcommand groups live next to their stage; each group module exposes ``add_subparser(subparsers)``
and sets ``func(args) -> int`` on its parsers. Add a group by appending its module to
``GROUP_MODULES``. Errors print one line on stderr and exit with code 2 (``--debug`` shows the
traceback).
"""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

GROUP_MODULES: list[str] = [
    "multiview_app.train.cli",
    "multiview_app.eval.cli",
    "multiview_app.config",
    "multiview_app.data.cli",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mvapp", description="multi-view representation learning")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in GROUP_MODULES:
        importlib.import_module(module).add_subparser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv  # accepted anywhere on the command line
    try:
        args = build_parser().parse_args([a for a in argv if a != "--debug"])
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("mvapp: interrupted", file=sys.stderr)
        return 130
    except SystemExit:
        raise
    except Exception as exc:  # noqa: BLE001 - the CLI's single error boundary
        if debug:
            raise
        message = " ".join(str(exc).split()) or type(exc).__name__
        print(f"mvapp: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
