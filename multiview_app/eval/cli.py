"""``mvapp eval <evaluator> --run DIR [...]``, one subcommand per entry of ``EVALUATORS``."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..cli import describe
from . import EVALUATORS, available_evaluators, get_evaluator

#: ``--help`` examples by evaluator (an evaluator missing here gets ``mvapp eval NAME --run runs/RUN``)
EXAMPLES: dict[str, tuple[str, ...]] = {
    "linear-probe": ("mvapp eval linear-probe --run runs/digits_m3g",),
    "retrieval": ("mvapp eval retrieval --run runs/pairs_m3g",),
    "sleep-staging": (
        "mvapp eval sleep-staging --run runs/eeg_m3g --folds 2 --draws 3",
        "mvapp eval sleep-staging --run runs/eeg_m3g --cache demo_data/sleep_edf_cache --folds 5 --draws 3",
    ),
}


def add_subparser(subparsers: argparse._SubParsersAction) -> None:
    group = subparsers.add_parser(
        "eval", **describe("evaluate a trained run (one subcommand per evaluator)", *EXAMPLES["linear-probe"])
    )
    sub = group.add_subparsers(dest="evaluator", required=True, metavar="EVALUATOR")
    names = available_evaluators()
    group.error_hint = EVALUATORS.missing_hint()  # evaluators skipped for a missing extra: which one
    for name in names:
        cls = get_evaluator(name)
        summary = (cls.__doc__ or f"the {name} evaluator").strip().splitlines()[0].rstrip(".")
        parser = sub.add_parser(name, **describe(summary, *EXAMPLES.get(name, (f"mvapp eval {name} --run runs/RUN",))))
        parser.add_argument("--run", required=True, type=Path, help="run folder (runs/<name>)")
        cls.add_arguments(parser)
        parser.set_defaults(func=_run, evaluator_name=name)


def _run(args: argparse.Namespace) -> int:
    from ..threads import configure_torch_threads

    configure_torch_threads()  # MVAPP_NUM_THREADS > OMP_NUM_THREADS > auto; prints the choice
    args.run = args.run.expanduser().resolve()
    evaluator = get_evaluator(args.evaluator_name)()
    if not (args.run / "config.yaml").is_file():  # evaluators only read finished runs (training is experiments/)
        raise FileNotFoundError(f"--run {args.run}: not a run folder (no config.yaml)")
    result = evaluator.run(args.run, args)
    kind = evaluator.kind
    written = result.get("output") if isinstance(result, dict) else None  # evaluators may name their own file
    print(f"wrote {written or args.run / 'eval' / f'{kind}.json'}")
    return 0
