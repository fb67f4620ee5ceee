"""The ``mvapp`` console script.

Subcommand groups live next to their stage; each group module exposes ``add_subparser(subparsers)``
and sets ``func(args) -> int`` on its parsers. Add a group by appending its module to
``GROUP_MODULES``. Errors print one line on stderr and exit with code 2 (``--debug`` shows the
traceback); informational notes wait for the command's first output and are dropped when it fails
before any (``multiview_app/console.py``), so a bad input prints exactly that one line.

Contract for ``add_subparser``: its first call is ``subparsers.add_parser(<command>, help=...)``. Every
parser's ``--help`` has a one-line description and at least one example (:func:`describe` builds both),
and shows every default (:class:`HelpfulParser`); ``tests/test_cli_help.py`` walks every subcommand.
To keep ``mvapp --help`` / ``--version`` fast (no torch import), the parser is built in two passes:
every group module is only asked for that first call (the rest of its ``add_subparser`` is cut
short), and only the group named on the command line is then built in full. Group modules must
therefore not import heavy libraries at module level.

A subcommand that moved to another group keeps its old spelling: ``FORWARDS`` maps ``(old group,
subcommand)`` to the group that owns it now, and :func:`main` rewrites the command line before parsing
(``mvapp eval domain-generalization ...`` runs ``mvapp experiment domain-generalization ...``).
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from collections.abc import Iterable, Sequence
from typing import Any, NoReturn

from . import __version__

GROUP_MODULES: list[str] = [
    "multiview_app.train.cli",
    "multiview_app.eval.cli",
    "multiview_app.config_cli",
    "multiview_app.data.cli",
    "multiview_app.export.cli",
    "multiview_app.export.model_cli",
    "multiview_app.export.plot_cli",
    "multiview_app.tune.cli",
    "multiview_app.experiments.cli",
]
#: ``(old group, subcommand) -> new group``: old spellings of moved subcommands (rewritten by :func:`forward`)
FORWARDS: dict[tuple[str, str], str] = {("eval", "domain-generalization"): "experiment"}
#: ``group -> (its subcommands, the one an option right after the group means)``: ``mvapp tune --config F``
#: is ``mvapp tune search --config F`` (rewritten by :func:`forward`)
DEFAULT_SUBCOMMANDS: dict[str, tuple[tuple[str, ...], str]] = {"tune": (("search", "report"), "search")}


def describe(summary: str, *examples: str) -> dict[str, Any]:
    """``add_parser`` keywords of a command: ``summary`` (one line) as its ``help`` in the parent's list and as
    its description, and ``examples`` (command lines, ``# comment`` allowed) as its epilog."""
    heading = "example:" if len(examples) == 1 else "examples:"
    return {
        "help": summary,
        "description": summary[:1].upper() + summary[1:] + ("" if summary.endswith(".") else "."),
        "epilog": "\n".join([heading, *(f"  {line}" for line in examples)]),
    }


class HelpfulParser(argparse.ArgumentParser):
    """``ArgumentParser`` whose help shows every option's default and keeps the epilog's lines (examples)
    as written (sub-parsers inherit the class)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        default = action.default
        shown = default not in (None, argparse.SUPPRESS) and not isinstance(default, bool)
        if shown and action.help != argparse.SUPPRESS and "%(default)" not in (action.help or ""):
            action.help = f"{action.help} (default: %(default)s)" if action.help else "default: %(default)s"
        return action

    #: appended to this parser's errors (e.g. which extra brings the subcommands a registry skipped)
    error_hint: str = ""

    def error(self, message: str) -> NoReturn:  # one line, no usage block (the CLI's error format)
        self.exit(2, f"mvapp: error: {self.prog}: {message}{self.error_hint} (see {self.prog} --help)\n")


class _Announced(Exception):
    """Raised by :class:`_AnnounceOnly` after a group announced its command (ends ``add_subparser``)."""


class _AnnounceOnly:
    """Stand-in ``subparsers`` action that records ``add_parser(command, help=...)`` and stops."""

    def __init__(self) -> None:
        self.command: str | None = None
        self.help: str | None = None

    def add_parser(self, command: str, **kwargs: Any) -> Any:
        self.command, self.help = command, kwargs.get("help")
        raise _Announced


def group_commands() -> dict[str, tuple[str, str | None]]:
    """``{command: (group module, help)}`` from each group's first ``add_parser`` call (cheap)."""
    commands: dict[str, tuple[str, str | None]] = {}
    for module in GROUP_MODULES:
        probe = _AnnounceOnly()
        try:
            importlib.import_module(module).add_subparser(probe)
        except _Announced:
            pass
        if probe.command is None:
            raise RuntimeError(f"{module}.add_subparser must start with subparsers.add_parser(<command>, help=...)")
        commands[probe.command] = (module, probe.help)
    return commands


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``mvapp`` parser; only ``command``'s group is built in full (every group when None and
    the command line names none that exists, so that argparse reports the error)."""
    parser = HelpfulParser(
        prog="mvapp",
        description="Multi-view representation learning: train, evaluate, export (mvapp COMMAND --help for each).",
        epilog="examples:\n  mvapp train --config configs/digits_m3g.yaml\n  mvapp eval linear-probe --run runs/digits_m3g",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--version", action="version", version=f"mvapp {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in group_commands().items():
        if name == command:
            importlib.import_module(module).add_subparser(subparsers)
            moved = [
                f"mvapp {name} {sub} (now mvapp {group} {sub}; this spelling is forwarded)"
                for (old_group, sub), group in FORWARDS.items()
                if old_group == name
            ]
            if moved:
                group = subparsers.choices[name]
                group.epilog = "\n".join([*filter(None, [group.epilog]), "moved: " + "; ".join(moved)])
        else:
            subparsers.add_parser(name, help=help_text, add_help=False)
    return parser


def _command_of(argv: Sequence[str]) -> str | None:
    """The first argument that is not an option (the group's command), if any."""
    return next((a for a in argv if not a.startswith("-")), None)


def forward(argv: Iterable[str]) -> list[str]:
    """``argv`` with a moved subcommand's old group replaced by its new one (:data:`FORWARDS`), and a
    group's default subcommand inserted where an option or override follows the group directly
    (:data:`DEFAULT_SUBCOMMANDS`); the group and subcommand are the first two arguments that are not
    options (the top-level options take no value)."""
    argv = list(argv)
    words = [i for i, a in enumerate(argv) if not a.startswith("-")][:2]
    if len(words) == 2 and (argv[words[0]], argv[words[1]]) in FORWARDS:
        argv[words[0]] = FORWARDS[argv[words[0]], argv[words[1]]]
    if words and argv[words[0]] in DEFAULT_SUBCOMMANDS and len(argv) > words[0] + 1:
        subcommands, default = DEFAULT_SUBCOMMANDS[argv[words[0]]]
        following = argv[words[0] + 1]
        if following not in (*subcommands, "-h", "--help") and (following.startswith("-") or "=" in following):
            argv.insert(words[0] + 1, default)
    return argv


_OVERRIDE = re.compile(r"^[A-Za-z_][\w-]*(\.[\w-]+)*=")


def _take_overrides(parser: argparse.ArgumentParser, args: argparse.Namespace, extra: list[str]) -> None:
    """Dotted ``key=value`` overrides are accepted anywhere on the command line: argparse collects
    the positional ``overrides`` only up to the first option; later ones arrive in ``extra``."""
    if not extra:
        return
    if hasattr(args, "overrides") and all(_OVERRIDE.match(item) for item in extra):
        args.overrides = [*(args.overrides or []), *extra]
        return
    parser.error(f"unrecognized arguments: {' '.join(extra)}")


def main(argv: Sequence[str] | None = None) -> int:
    from . import console

    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv  # accepted anywhere on the command line
    console.hold()  # notes (torch threads, precision, ...) wait for the first output; an error drops them
    failed = True
    try:
        argv = forward(a for a in argv if a != "--debug")
        parser = build_parser(_command_of(argv))
        args, extra = parser.parse_known_args(argv)
        _take_overrides(parser, args, extra)
        args.command_line = argv  # what the user ran (e.g. how to resume an interrupted experiment)
        code = int(args.func(args) or 0)
        failed = False
        return code
    except KeyboardInterrupt:
        print("mvapp: error: interrupted", file=sys.stderr)  # the wording of an interrupted training too
        return 130
    except SystemExit:
        raise
    except Exception as exc:  # noqa: BLE001 - the CLI's single error boundary
        if debug:
            raise
        from .extras import missing_extra_message

        message = missing_extra_message(exc) or " ".join(str(exc).split()) or type(exc).__name__
        print(f"mvapp: error: {message}", file=sys.stderr)
        return int(getattr(exc, "exit_code", 2))  # e.g. 128 + signal for an interrupted training
    finally:
        console.discard() if failed else console.release()


if __name__ == "__main__":
    sys.exit(main())
