"""``mvapp tune --config FILE --trials N [overrides...]`` and ``mvapp tune report --study-name S``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..argtypes import positive_float, positive_int

REPORT_HELP = """usage: mvapp tune report --study-name S [--storage URL] [--runs-dir DIR] [--no-plots]

Write the outputs of a study (finished or still running) into <runs-dir>/tune/<study>/: best_config.yaml
(the base config + the best parameters, ready for mvapp train), trials.csv, report.json, plots
(optimization history, parameter importances; Pareto front + pareto_front.csv with several objectives) and
notes (importances from few trials, the objective's resolution in val items). Browse the study live:
optuna-dashboard <runs-dir>/tune/<study>/journal.log (or the RDB URL).

options:
  --study-name S   the study to report (required)
  --storage URL    RDB URL (postgresql://, mysql://) or journal .log path (default: the journal file in
                   <runs-dir>/tune/<study>/)
  --runs-dir DIR   runs folder holding tune/<study>/ (default: runs)
  --no-plots       skip the PNG plots
"""


class _Help(argparse.Action):
    """``-h``: the ``report`` help after ``mvapp tune report``, else the search help."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: object) -> None:
        super().__init__(
            option_strings,
            dest=argparse.SUPPRESS,
            default=argparse.SUPPRESS,
            nargs=0,
            help="show this help message and exit ('mvapp tune report --help': the report's)",
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        if (getattr(namespace, "rest", None) or [])[:1] == ["report"]:
            print(REPORT_HELP, end="")
        else:
            parser.print_help()
        parser.exit()


def add_subparser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "tune",
        help="hyperparameter search with Optuna ('mvapp tune report --study-name S' for the outputs)",
        description="Search tune.space of a config: every trial is a training run scored on the val split. "
        "'mvapp tune report --study-name S [--storage URL]' writes the best YAML, trials CSV and plots.",
        add_help=False,
    )
    parser.add_argument("-h", "--help", action=_Help)
    parser.add_argument("--config", help="YAML config with a tune section (tune.space; default: the loss's space)")
    parser.add_argument(
        "--trials", type=positive_int, default=20, help="finished (complete or pruned) trials the study should hold"
    )
    parser.add_argument("--study-name", help="study name (default: the config file's stem)")
    parser.add_argument(
        "--storage",
        help="RDB URL (postgresql://, mysql://) or journal .log path "
        "(default: journal file in <runs_dir>/tune/<study>/)",
    )
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
    parser.add_argument("--runs-dir", default=None, help="report: runs folder holding tune/<study>/ (default: runs)")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument(
        "rest", nargs="*", metavar="overrides", help="dotted overrides (e.g. train.max_steps=60), or 'report'"
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # one line per trial is ours
    if args.rest[:1] == ["report"]:
        if args.rest[1:]:
            raise ValueError(f"mvapp tune report takes no overrides (got {' '.join(args.rest[1:])})")
        return _report(args)
    from ..config import load_config
    from .report import format_report, write_report
    from .runner import ForkServer, fork_supported
    from .study import Search, pruning_note

    if not args.config:
        raise ValueError("mvapp tune: --config FILE is required")
    study_name = args.study_name or Path(args.config).stem
    # the fork server imports the training stack while this process loads the config and the study
    server = ForkServer() if args.launcher == "fork" and args.gpus == 1 and fork_supported() else None
    try:
        cfg = load_config(args.config, args.rest)
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

    from ..config import OutputConfig
    from .report import format_report, write_report
    from .study import open_storage

    if not args.study_name:
        raise ValueError("mvapp tune report: --study-name is required")
    folder = Path(args.runs_dir or OutputConfig().runs_dir) / "tune" / args.study_name
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
