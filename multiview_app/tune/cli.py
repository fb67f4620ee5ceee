"""``mvapp tune search --config FILE --trials N [overrides...]`` (``mvapp tune --config ...`` for short) and
``mvapp tune report --study-name S``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..argtypes import positive_float, positive_int
from ..cli import describe

SEARCH_EXAMPLES = (
    "mvapp tune search --config configs/tune_digits_m3g.yaml --trials 8 --workers 2",
    "mvapp tune --config configs/tune_digits_m3g.yaml --trials 8     # the same: search is the default",
)
REPORT_EXAMPLE = "mvapp tune report --study-name tune_digits_m3g"


def add_subparser(subparsers: argparse._SubParsersAction) -> None:
    group = subparsers.add_parser(
        "tune",
        **describe(
            "hyperparameter search with Optuna (search), and the outputs of a study (report)",
            *SEARCH_EXAMPLES,
            REPORT_EXAMPLE,
        ),
    )
    sub = group.add_subparsers(dest="tune_command", required=True, metavar="TUNE_COMMAND")
    parser = sub.add_parser(
        "search",
        **describe(
            "search tune.space of a config: every trial is a training run scored on the val split",
            *SEARCH_EXAMPLES,
        ),
    )
    parser.add_argument(
        "--config", required=True, help="YAML config (its tune.space; default: the loss's search space)"
    )
    parser.add_argument("overrides", nargs="*", help="dotted overrides, e.g. train.max_steps=60")
    parser.add_argument(
        "--trials", type=positive_int, default=20, help="finished (complete or pruned) trials the study should hold"
    )
    parser.add_argument("--study-name", help="study name (default: the config file's stem)")
    _add_storage(parser)
    parser.add_argument("--workers", type=positive_int, default=1, help="trials run at the same time by this process")
    parser.add_argument(
        "--timeout", type=positive_float, default=None, help="stop starting trials after this many seconds"
    )
    parser.add_argument(
        "--gpus", type=positive_int, default=1, help="processes per trial (>1: accelerate launch --multi_gpu)"
    )
    parser.add_argument(
        "--launcher",
        choices=["fork", "spawn"],
        default="fork",
        help="fork: trials fork from a process with the trainer imported (Linux, 1 process per "
        "trial); spawn: a fresh python per trial",
    )
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots of the report")
    parser.set_defaults(func=_run)
    _add_report_parser(sub)


def _add_storage(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--storage",
        help="RDB URL (postgresql://, mysql://) or journal .log path "
        "(default: the journal file in <runs_dir>/tune/<study>/)",
    )


def _add_report_parser(sub: argparse._SubParsersAction) -> None:
    """``mvapp tune report``: the outputs of a study, finished or still running."""
    report = sub.add_parser(
        "report",
        **describe(
            "write a study's outputs into <runs-dir>/tune/<study>/: best_config.yaml (ready for mvapp train), "
            "trials.csv, report.json and plots",
            REPORT_EXAMPLE,
        ),
    )
    report.epilog += (
        "\nplots: optimization history, parameter importances (Pareto front + pareto_front.csv with several "
        "objectives);\nbrowse a study live: optuna-dashboard <runs-dir>/tune/<study>/journal.log (or the RDB URL)"
    )
    report.add_argument("--study-name", required=True, help="the study to report")
    _add_storage(report)
    report.add_argument("--runs-dir", default="runs", help="runs folder holding tune/<study>/")
    report.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    report.set_defaults(func=_report)


def _run(args: argparse.Namespace) -> int:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # one line per trial is ours
    from ..config import load_config
    from .report import format_report, write_report
    from .runner import ForkServer, fork_supported
    from .study import Search, pruning_note

    study_name = args.study_name or Path(args.config).stem
    # the fork server imports the training stack while this process loads the config and the study
    server = ForkServer() if args.launcher == "fork" and args.gpus == 1 and fork_supported() else None
    try:
        cfg = load_config(args.config, args.overrides)
        note = pruning_note(cfg)
        if note:
            print(f"note: {note}", flush=True)
        search = Search(
            cfg,
            study_name,
            args.trials,
            storage=args.storage,
            workers=args.workers,
            timeout=args.timeout,
            gpus=args.gpus,
            launcher=args.launcher,
            fork_server=server,
        )
        summary = search.run()
    finally:
        if server is not None:
            server.close()
    if summary.recovered:
        print(f"recovered trials of dead workers (FAIL, re-queued): {summary.recovered}")
    report = write_report(search.study, search.folder, plots=not args.no_plots)
    print(format_report(report))
    if summary.stopped_because and search.done() < args.trials:
        print(
            f"mvapp: tune stopped with {search.done()} of {args.trials} trials finished: {summary.stopped_because}",
            file=sys.stderr,
        )
        return 1 if "failed" in summary.stopped_because else 0  # a timeout is a normal end
    return 0


def _report(args: argparse.Namespace) -> int:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    from .report import format_report, write_report
    from .study import open_storage

    folder = Path(args.runs_dir) / "tune" / args.study_name
    if args.storage is None and not (folder / "journal.log").is_file():
        raise FileNotFoundError(f"no study journal at {folder / 'journal.log'}; pass --runs-dir or --storage URL")
    storage = open_storage(args.storage, folder)
    try:
        study = optuna.load_study(study_name=args.study_name, storage=storage)
    except KeyError:
        names = optuna.get_all_study_names(storage)
        raise ValueError(
            f"no study {args.study_name!r} in the storage; studies: {', '.join(names) or '(none)'}"
        ) from None
    print(format_report(write_report(study, folder, plots=not args.no_plots)))
    return 0
