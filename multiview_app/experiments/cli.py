"""``mvapp experiment <name>``: experiments that train runs unless done and evaluate them.

``psg-modalities``: PSG modalities as views, from synthetic nights to tables and a figure
(:mod:`.psg_modalities`).

``psg-real``: one real PSG night (an EDF, e.g. DREAMS excerpt 3 at 50 Hz) staged by a classifier trained
on synthetic nights' frozen per-modality features, every group at a capped rate (:mod:`.psg_real`).

``domain-generalization``: with ``--config``, one pretraining run per held-out domain, seed and protocol
under the ``--run`` folder, each evaluated, one combined table (:func:`.domains.train_and_evaluate`);
without it, the existing run folder ``--run`` is evaluated (its ERM baseline trained unless done first:
:func:`.domains.evaluate_with_erm`). The former spelling ``mvapp eval domain-generalization`` is forwarded
here by the console script (``multiview_app/cli.py``: ``FORWARDS``).

``digits``, ``pairs``, ``domains-grid``, ``channel-modes``: the results tables of docs/results.md
(:mod:`.digits_table`, :mod:`.pairs_table`, :mod:`.domains_grid`, :mod:`.channel_modes`), their knobs read from ``configs/experiment_<name>.yaml``
(:mod:`.knobs`) with ``--set KEY=VALUE`` overrides.

``synth-check <check>``: checks of the synthetic PSG generator against reference values and real recordings
(:mod:`.synth_check`).
"""

from __future__ import annotations

import argparse
import functools
import shlex
from collections.abc import Callable
from pathlib import Path

from ..argtypes import Option, add_options, nonnegative_int, positive_float, positive_int, seed_list
from ..cli import describe

DG_EXAMPLES = (
    "mvapp experiment domain-generalization --run runs/dg_m3g --config configs/domains_digits_m3g.yaml "
    "--holdout sketch --seeds 0,1",
    "mvapp experiment domain-generalization --run runs/dg_m3g        # evaluate an existing run",
)
CEILING_EXAMPLE = "mvapp experiment supervised-ceiling --run runs/eeg_m3g"
PSG_EXAMPLE = (
    "mvapp experiment psg-modalities --config configs/psg_modalities_sleepfm.yaml --sizes configs/demo_psg.yaml "
    "--out runs/psg_demo"
)

PSG_REAL_EXAMPLE = (
    "mvapp experiment psg-real --edf ../shared/real-psg/dreams-spindles/excerpt3.edf --stages channel:hypnogram "
    "--stage-map dreams --config configs/psg_modalities_sleepfm.yaml --out runs/psg_real"
)
PSG_REAL_SUMMARY = (
    "stage one real PSG night (an EDF): synthesize whole-PSG nights, prepare them and the file with the config's "
    "modality groups at a capped rate, train briefly on the synthetic nights, fit logistic regression on their "
    "frozen per-modality features, write the real night's confusion matrix, balanced accuracy and kappa"
)

PSG_SUMMARY = (
    "PSG modalities as views: synthesize whole-PSG nights unless present, train one run per loss and seed "
    "unless done, evaluate frozen per-modality features (staging, breathing events, AHI, cross-modal "
    "retrieval) beside random init and handcrafted baselines, write tables and a figure"
)
DG_SUMMARY = (
    "leave-one-domain-out with training-domain-validation model selection (DomainBed): "
    "pretrain one run per held-out domain and seed (--config) or evaluate --run"
)
CEILING_SUMMARY = (
    "train the supervised ceiling of an EEG run unless done: its encoder trained end to "
    "end on the pretraining nights' stages, its checkpoint chosen on validation subjects "
    "(the sleep-staging evaluator's supervised_ceiling row)"
)
EEG_DEMO_PARSER = dict(
    help="the README's EEG headline: the demo (make run) pretrained with several seeds, each staging the "
    "Sleep-EDF-format nights cross-dataset; mean, seeds x subjects interval and min-max over seeds",
    description="Pretrain the demo's encoder once per seed (configs/demo_eeg.yaml, DEMO_<KEY> overrides), "
    "stage the demo's Sleep-EDF-format nights with each run, and pool the seeds.",
    epilog="example: mvapp experiment eeg-demo --seeds 0,1,2 --publish",
)
DREAMS_PARSER = dict(
    help="synthetic-to-real: the demo's encoder (pretrained per seed) stages the real DREAMS excerpts "
    "leave-one-excerpt-out, beside band power, handcrafted features, the supervised ceiling and YASA",
    description="Prepare the DREAMS excerpts, pretrain the demo's encoder once per seed unless --run is "
    "given, stage the excerpts leave-one-excerpt-out and pool the seeds.",
    epilog="example: mvapp experiment dreams-transfer --real-psg ../shared/real-psg --out runs/dreams --publish",
)
CEILING_OPTIONS: tuple[Option, ...] = (
    (("--run",), dict(required=True, type=Path, help="the pretraining run folder (EEG windows)")),
    (
        ("--steps",),
        dict(
            type=positive_int,
            default=None,
            help="step budget of the selection run (default: the run's train.max_steps)",
        ),
    ),
)
"""Options of ``mvapp experiment supervised-ceiling``."""
EEG_DEMO_OPTIONS: tuple[Option, ...] = (
    (("--seeds",), dict(default="0,1,2", help="comma-separated pretraining seeds (default: %(default)s)")),
    (
        ("--data",),
        dict(
            type=Path,
            default=Path("demo_data"),
            help="the demo's data folder, made unless present (default: %(default)s, make run's)",
        ),
    ),
    (
        ("--runs",),
        dict(type=Path, default=Path("runs") / "eeg_demo_seeds", help="where the seed runs go (default: %(default)s)"),
    ),
    (("--no-ceiling",), dict(action="store_true", help="skip the supervised-ceiling row (~90 s per seed)")),
    (
        ("--publish",),
        dict(
            action="store_true",
            help="write the table to docs/results/eeg_cross_dataset.md and the README block (run from the repository root)",
        ),
    ),
)
"""Options of ``mvapp experiment eeg-demo``."""


def knob_options(name: str, out: str) -> tuple[Option, ...]:
    """``--config`` (the knobs file ``configs/experiment_<name>.yaml``), ``--set`` and ``--out`` of a results
    table experiment whose runs and table go to ``runs/<out>`` by default."""
    return (
        (
            ("--config",),
            dict(
                type=Path,
                default=Path("configs") / f"experiment_{name}.yaml",
                help="YAML file of the experiment's knobs (default: %(default)s)",
            ),
        ),
        (
            ("--set",),
            dict(
                nargs="*",
                default=[],
                metavar="KEY=VALUE",
                help="knob overrides, each value read as YAML, e.g. 'seeds=[0,1]'",
            ),
        ),
        (
            ("--out",),
            dict(type=Path, default=Path("runs") / out, help="folder of the runs and the table (default: %(default)s)"),
        ),
    )


FRESH: Option = (("--fresh",), dict(action="store_true", help="retrain every run even when a finished one exists"))
DIGITS_PARSER = describe(
    "linear probe (logistic regression, kNN) of every loss on digits beside the random init and the supervised "
    "ceiling, one run per loss and seed trained unless done",
    "mvapp experiment digits --set steps=400 'seeds=[0,1,2]' 'losses=[byol_pwe,byol_ave]'",
)
PAIRS_PARSER = describe(
    "image-text retrieval recall (R@1/5/10 both ways, zero-shot accuracy) of the paired configs, each trained "
    "unless done, beside the random init",
    "mvapp experiment pairs --set steps=800 --out runs/results_pairs_800",
)
GRID_PARSER = describe(
    "the leave-one-domain-out + adaptation grid on the digit domains (M3G Table 2 / Fig. 2): every loss, "
    "held-out domain and seed pretrained unless done, evaluated with training-domain validation, tables written "
    "between the domains markers of --docs",
    "mvapp experiment domains-grid --jobs 2 --docs docs/results.md --figures docs/figures",
)
GRID_OPTIONS: tuple[Option, ...] = (
    *knob_options("domains_grid", "results_domains"),
    (
        ("--docs",),
        dict(
            type=Path,
            default=None,
            help="Markdown file whose section between the domains markers is (re)written (default: OUT/results.md)",
        ),
    ),
    (("--figures",), dict(type=Path, default=None, help="figure folder (default: OUT/figures)")),
    (
        ("--mode",),
        dict(
            choices=("train", "no-train", "pretrain-only", "only-finished"),
            default="train",
            help="train and evaluate what is missing; no-train: evaluate finished pretraining only; pretrain-only; "
            "only-finished: tables from the evaluations already written (default: %(default)s)",
        ),
    ),
    (
        ("--jobs",),
        dict(
            type=positive_int,
            default=1,
            help="worker processes, each taking whole (held-out domain, seed) groups (default: %(default)s)",
        ),
    ),
    (("--groups",), dict(default=None, help=argparse.SUPPRESS)),  # a worker's share: domain:seed,...
)
"""Options of ``mvapp experiment domains-grid``."""
MODES_PARSER = describe(
    "the EEG encoder's channel modes (agnostic, embedding, montage) each pretrained as the demo per seed, staged "
    "cross-dataset and on the real DREAMS excerpts beside handcrafted and band-power rows",
    "mvapp experiment channel-modes --out runs/channel_modes --real-psg ../shared/real-psg",
)
MODES_OPTIONS: tuple[Option, ...] = (
    *knob_options("channel_modes", "channel_modes")[:2],
    (
        ("--out",),
        dict(
            type=Path,
            default=Path("runs") / "channel_modes",
            help="folder of the data, runs and table; shares its agnostic runs with dreams-transfer --out "
            "(default: %(default)s)",
        ),
    ),
    (
        ("--data",),
        dict(type=Path, default=None, help="the demo's data folder, made unless present (default: OUT/demo_data)"),
    ),
    (
        ("--real-psg",),
        dict(
            type=Path,
            default=None,
            help="folder holding dreams-spindles/ for the dreams protocol (default: $MVAPP_REAL_PSG)",
        ),
    ),
)
"""Options of ``mvapp experiment channel-modes``."""

SYNTH_CHECK_PARSER = describe(
    "checks of the synthetic PSG generator against reference values and real recordings (night structure, "
    "signals, wake and N1, YASA, physiology, spectra, one PSG night)",
    "mvapp experiment synth-check signals --out runs/eeg_signals --real-psg ../shared/real-psg",
)


PSG_REAL_OPTIONS: tuple[Option, ...] = (
    (("--edf",), dict(type=Path, required=True, help="the real recording (EDF / EDF+ / BDF), read in place")),
    (
        ("--stages",),
        dict(default="channel:hypnogram", metavar="SOURCE", help="its stages (as prepare edf) (default: %(default)s)"),
    ),
    (("--stage-map",), dict(default="dreams", metavar="MAP", help="its stage label map (default: %(default)s)")),
    (
        ("--channels",),
        dict(nargs="+", default=None, help="its brain channels (default: every channel the reader types as EEG)"),
    ),
    (
        ("--config",),
        dict(
            type=Path,
            default=Path("configs") / "psg_modalities_sleepfm.yaml",
            help="training config of a psg_modalities run (default: %(default)s)",
        ),
    ),
    (
        ("--max-rate",),
        dict(
            type=positive_float,
            default=50.0,
            metavar="HZ",
            help="every modality group prepared at min(its rate, HZ), synthetic and real (default: %(default)s)",
        ),
    ),
    (("--nights",), dict(type=positive_int, default=4, help="synthetic training nights (default: %(default)s)")),
    (("--hours",), dict(type=positive_float, default=2.0, help="synthetic night length (default: %(default)s)")),
    (("--compress",), dict(type=positive_int, default=3, help="every K-th epoch of a night (default: %(default)s)")),
    (("--steps",), dict(type=positive_int, default=200, help="training steps (default: %(default)s)")),
    (("--batch",), dict(type=positive_int, default=16, help="items per training step (default: %(default)s)")),
    (
        ("--seed",),
        dict(type=nonnegative_int, default=0, help="nights' generator and training seed (default: %(default)s)"),
    ),
    (("--loss",), dict(default=None, help="training loss (default: the config's)")),
    (
        ("--out",),
        dict(
            type=Path,
            default=Path("runs") / "psg_real",
            help="output folder: data/, runs/, psg_real.md and .json (default: %(default)s)",
        ),
    ),
    (("--set",), dict(nargs="*", default=[], metavar="KEY=VALUE", help="training config overrides")),
)
"""Options of ``mvapp experiment psg-real``."""


def add_subparser(subparsers: argparse._SubParsersAction) -> None:
    """Register the ``experiment`` group and its experiments on the ``mvapp`` parser."""
    group = subparsers.add_parser(
        "experiment",
        **describe(
            "train runs unless done, then evaluate them (domain-generalization, supervised-ceiling, psg-modalities, "
            "psg-real, digits, pairs, domains-grid, ...)",
            DG_EXAMPLES[0],
            CEILING_EXAMPLE,
        ),
    )
    sub = group.add_subparsers(dest="experiment", required=True, metavar="EXPERIMENT")
    experiments = (
        (
            "domain-generalization",
            describe(DG_SUMMARY, *DG_EXAMPLES),
            add_domain_generalization_arguments,
            run_domain_generalization,
        ),
        ("supervised-ceiling", describe(CEILING_SUMMARY, CEILING_EXAMPLE), CEILING_OPTIONS, run_supervised_ceiling),
        ("eeg-demo", EEG_DEMO_PARSER, EEG_DEMO_OPTIONS, run_eeg_demo_headline),
        ("dreams-transfer", DREAMS_PARSER, add_dreams_arguments, run_dreams_transfer),
        ("psg-modalities", describe(PSG_SUMMARY, PSG_EXAMPLE), add_psg_modalities_arguments, run_psg_modalities),
        ("psg-real", describe(PSG_REAL_SUMMARY, PSG_REAL_EXAMPLE), PSG_REAL_OPTIONS, run_psg_real),
        ("digits", DIGITS_PARSER, (*knob_options("digits", "results_digits"), FRESH), run_digits),
        ("pairs", PAIRS_PARSER, (*knob_options("pairs", "results_pairs"), FRESH), run_pairs),
        ("domains-grid", GRID_PARSER, GRID_OPTIONS, run_domains_grid),
        ("channel-modes", MODES_PARSER, MODES_OPTIONS, run_channel_modes),
        ("synth-check", SYNTH_CHECK_PARSER, add_synth_check_arguments, run_synth_check),
    )
    for name, keywords, options, run in experiments:
        parser = sub.add_parser(name, **keywords)
        if callable(options):  # built on demand: their defaults come from modules that load numpy
            options(parser)
        else:
            add_options(parser, options)
        parser.set_defaults(func=run)


def run_supervised_ceiling(args: argparse.Namespace) -> int:
    """Train the ceiling unless done; print the chosen steps and the candidates' validation scores."""
    from .staging import train_supervised_ceiling

    record = train_supervised_ceiling(args.run.expanduser().resolve(), steps=args.steps)
    scores = ", ".join(f"{s}: {v:.3f}" for s, v in record["validation_balanced_accuracy"].items())
    print(
        f"supervised ceiling: {record['chosen_steps']} steps chosen on validation subjects "
        f"{', '.join(record['validation_subjects'])} (balanced accuracy by step: {scores}); run {record['run']}, "
        f"weights {record['weights']}"
    )
    return 0


def resumable(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """``run`` whose interrupted training (Ctrl-C / SIGTERM in one of its runs) tells the user to run the
    same experiment command again (finished runs are reused, the interrupted one resumes from its
    checkpoint), not to resume the sub-run by hand."""

    @functools.wraps(run)
    def wrapped(args: argparse.Namespace) -> int:
        from ..train.trainer import TrainingInterrupted

        try:
            return run(args)
        except TrainingInterrupted as err:
            what = str(err).split("; resume with:")[0]
            command = " ".join(shlex.quote(a) for a in getattr(args, "command_line", None) or ["experiment", "..."])
            raise TrainingInterrupted(
                f"{what}; resume the experiment with the same command (finished runs are reused, this one continues "
                f"from its checkpoint): mvapp {command}",
                err.signum,
            ) from None

    return wrapped


def add_domain_generalization_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``mvapp experiment domain-generalization`` (built only when that command is named:
    the protocol module imported here loads numpy / scikit-learn)."""
    from ..eval.protocols.domains import DEFAULT_CS

    parser.add_argument(
        "--run",
        required=True,
        type=Path,
        help="run folder to evaluate; with --config the output folder the runs are trained in",
    )
    parser.add_argument(
        "--config",
        help="train from this config first (one run per held-out domain and seed); --run is then the output folder",
    )
    parser.add_argument(
        "--holdout",
        default=None,
        help="with --config: a domain name or 'all' (default: the config's data.options.holdout)",
    )
    parser.add_argument(
        "--seeds", type=seed_list, default="0", help="with --config: training seeds, comma-separated (e.g. 0,1)"
    )
    parser.add_argument(
        "--protocol",
        choices=["generalization", "adaptation", "both"],
        default="generalization",
        help="with --config: target held out (generalization), its train images in pretraining "
        "without labels (adaptation), or both in one table",
    )
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides for --config")
    parser.add_argument(
        "--C",
        type=positive_float,
        default=None,
        help="fixed inverse L2 strength of the probe (default: chosen with the checkpoint by "
        f"training-domain validation from {', '.join(map(str, DEFAULT_CS))})",
    )
    parser.add_argument(
        "--batch-size", type=positive_int, default=None, help="feature-extraction batch (default: eval.batch_size)"
    )
    parser.add_argument("--no-erm", action="store_true", help="skip the supervised ERM baseline")
    parser.add_argument(
        "--erm-steps",
        type=positive_int,
        default=None,
        help="ERM's own step budget (default 600; its checkpoint is chosen by training-domain "
        "validation, never the pretraining train.max_steps)",
    )
    parser.add_argument("--device", default="cpu", help="torch device of the evaluation")
    parser.add_argument(
        "--threads",
        type=nonnegative_int,
        default=1,
        help="torch threads of the evaluation (feature extraction, probes), the setting of "
        "multiview_app.threads: MVAPP_NUM_THREADS wins; 0 = the automatic choice; training "
        "runs (pretraining, ERM) use their config's train.num_threads",
    )


@resumable
def run_domain_generalization(args: argparse.Namespace) -> int:
    """Train unless done and evaluate (module docstring); print the whole table and what was written."""
    from ..config import load_config
    from ..eval.domain_report import KIND, write_summary
    from ..threads import configure_torch_threads
    from .domains import THREADS_OPTION, evaluate_with_erm, train_and_evaluate

    # MVAPP_NUM_THREADS > --threads > OMP_NUM_THREADS > auto; prints the choice (re-applied after each training)
    configure_torch_threads(args.threads or None, setting_name=THREADS_OPTION)
    run_dir = args.run.expanduser().resolve()
    if args.config is None:
        if not (run_dir / "config.yaml").is_file():
            raise FileNotFoundError(f"--run {run_dir}: not a run folder (no config.yaml)")
        if args.holdout is not None:
            raise ValueError("--holdout needs --config (the held-out domain of an existing run is in its config)")
        result = evaluate_with_erm(
            run_dir,
            C=args.C,
            batch_size=args.batch_size,
            erm=not args.no_erm,
            erm_steps=args.erm_steps,
            device=args.device,
            threads=args.threads or None,
        )
        print(write_summary([result], run_dir / "eval")["table"])
        print(f"wrote {run_dir / 'eval' / f'{KIND}.json'}")
        return 0
    options = load_config(args.config, args.set).data.options
    holdout = args.holdout or options.get("holdout") or options.get("adapt")
    if holdout is None:
        raise ValueError("--config: set data.options.holdout (or adapt) or pass --holdout DOMAIN|all")
    protocols = ("generalization", "adaptation") if args.protocol == "both" else (args.protocol,)
    results = train_and_evaluate(
        args.config,
        run_dir,
        "all" if holdout == "all" else [holdout],
        args.seeds,
        args.set,
        protocols=protocols,
        C=args.C,
        erm=not args.no_erm,
        erm_steps=args.erm_steps,
        device=args.device,
        threads=args.threads or None,
    )
    print(write_summary(results, run_dir)["table"])
    print(f"wrote {run_dir}")
    return 0


def parse_seeds(text: str) -> list[int]:
    """``"0,1,2"`` -> ``[0, 1, 2]``; one clear error otherwise."""
    try:
        seeds = [int(part) for part in str(text).split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"--seeds: expected comma-separated integers such as 0,1,2, got {text!r}") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds: expected distinct comma-separated integers such as 0,1,2, got {text!r}")
    return seeds


@resumable
def run_eeg_demo_headline(args: argparse.Namespace) -> int:
    """Pretrain per seed unless done, stage, pool; print the table; ``--publish`` writes it into the docs."""
    import json

    from .headline import TABLE, headline
    from .publish import publish

    seeds = parse_seeds(args.seeds)
    command = f"mvapp experiment eeg-demo --seeds {','.join(map(str, seeds))}" + (
        " --no-ceiling" if args.no_ceiling else ""
    )
    text, summary = headline(seeds, args.data, args.runs, command, ceiling=not args.no_ceiling)
    args.runs.mkdir(parents=True, exist_ok=True)
    (args.runs / f"{TABLE}.md").write_text(text + "\n")
    (args.runs / f"{TABLE}.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(text)
    if args.publish:
        for path in publish(TABLE, text, summary, Path.cwd()):
            print(f"wrote {path}")
    return 0


def add_dreams_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``mvapp experiment dreams-transfer``."""
    from .dreams import REAL_PSG_ENV, SHOTS, STAGES

    parser.add_argument(
        "--real-psg", type=Path, default=None, help=f"folder holding dreams-spindles/ (default: ${REAL_PSG_ENV})"
    )
    parser.add_argument("--out", type=Path, required=True, help="output folder (cache, runs, table, JSON)")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated pretraining seeds (default: %(default)s)")
    parser.add_argument(
        "--run", type=Path, nargs="+", default=None, help="pretrained run(s) to transfer instead (default: pretrain)"
    )
    parser.add_argument(
        "--data", type=Path, default=None, help="the demo's data folder, made unless present (default: OUT/demo_data)"
    )
    parser.add_argument(
        "--shots",
        type=positive_int,
        nargs="+",
        default=list(SHOTS),
        help="labelled windows per class (default: %(default)s)",
    )
    parser.add_argument("--stages", nargs="+", default=list(STAGES), help="stages staged (default: %(default)s)")
    parser.add_argument(
        "--draws", type=positive_int, default=None, help="few-shot draws per fold (default: configs/demo_eeg.yaml's)"
    )
    parser.add_argument("--no-ceiling", action="store_true", help="skip the supervised-ceiling row")
    parser.add_argument(
        "--publish", action="store_true", help="write the table to docs/results/dreams_transfer.md and the README block"
    )


@resumable
def run_dreams_transfer(args: argparse.Namespace) -> int:
    """Prepare, pretrain unless --run, stage, pool; print the page; ``--publish`` writes the table into the docs."""
    import json
    import os

    from . import dreams
    from .publish import publish

    real_psg = args.real_psg or os.environ.get(dreams.REAL_PSG_ENV)
    if real_psg is None:
        raise ValueError(f"--real-psg DIR (or ${dreams.REAL_PSG_ENV}) is required: the folder holding dreams-spindles/")
    seeds = parse_seeds(args.seeds)
    results, runs, cache = dreams.transfer(
        Path(real_psg),
        args.out,
        seeds=seeds,
        runs=args.run,
        data=args.data,
        shots=args.shots,
        stages=args.stages,
        ceiling=not args.no_ceiling,
        draws=args.draws,
    )
    if args.run is not None:  # the runs' own training seeds
        from ..train.run_io import load_run_config

        seeds = [load_run_config(run).train.seed for run in runs]
    text, summary = dreams.report(results, seeds, cache, command_text(args))
    summary["runs"] = [str(r) for r in runs]
    (args.out / f"{dreams.TABLE}.md").write_text(
        text + "\n\nper-class F1:\n\n" + "\n".join(summary["per_class_f1"]) + "\n"
    )
    (args.out / f"{dreams.TABLE}.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(text)
    if args.publish:
        for path in publish(dreams.TABLE, text, summary, Path.cwd()):
            print(f"wrote {path}")
    return 0


def add_psg_modalities_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``mvapp experiment psg-modalities``."""
    from .psg_modalities import LOSSES

    parser.add_argument(
        "--config", type=Path, required=True, help="training config of a psg_modalities run (e.g. k = 3 or k = 6)"
    )
    parser.add_argument(
        "--sizes",
        type=Path,
        default=None,
        help="YAML file of the experiment's sizes (nights, eval_nights, val_nights, hours, compress, seed, eval_seed, "
        "val_seed, steps, batch, candidates, shots, draws, seeds, losses, grid, e2e_*; default: none, i.e. 8 + 8 + 6 "
        "nights of 9 h, the config's steps, 3 seeds, every loss, each loss's setting chosen on the validation nights)",
    )
    parser.add_argument(
        "--seeds", type=seed_list, default=None, help="comma-separated pretraining seeds (default: the sizes', 0,1,2)"
    )
    parser.add_argument(
        "--losses",
        nargs="+",
        default=None,
        help=f"losses compared (default: the sizes', {' '.join(LOSSES)})",
    )
    parser.add_argument(
        "--data",
        type=Path,
        default=None,
        help="folder of the nights and caches, made unless present (default: OUT/data)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("runs") / "psg_modalities",
        help="output folder: runs/, psg_modalities.md, .json and .png (default: %(default)s)",
    )
    parser.add_argument(
        "--runs", type=Path, default=None, help="folder of the training runs, reused when finished (default: OUT/runs)"
    )
    parser.add_argument(
        "--train-only",
        action="store_true",
        help="choose the settings and train every run, then stop (e.g. loss subsets in parallel processes sharing "
        "--data and --runs, then one run without it evaluates them all; default: off)",
    )
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="training config overrides")


@resumable
def run_psg_modalities(args: argparse.Namespace) -> int:
    """Prepare, train unless done, evaluate, pool; print the page's tables and what was written."""
    import dataclasses

    from .psg_modalities import TABLE, experiment, load_sizes

    sizes = load_sizes(args.sizes)
    chosen = {"seeds": args.seeds, "losses": args.losses}
    sizes = dataclasses.replace(sizes, **{k: v for k, v in chosen.items() if v is not None})
    data = args.data or args.out / "data"
    summary = experiment(
        args.config, args.out, data, sizes, list(args.set), command_text(args), args.runs, args.train_only
    )
    if args.train_only:
        print("\n".join(f"trained {name}: {run}" for name, run in summary["runs"].items()))
        return 0
    print((args.out / f"{TABLE}.md").read_text().split("## Notes")[0])
    print(f"wrote {args.out / TABLE}.md, .json and {summary['figure']}")
    return 0


def command_text(args: argparse.Namespace) -> str:
    """The command line as typed (``mvapp experiment ...``), named in the tables it writes."""
    return "mvapp " + " ".join(shlex.quote(a) for a in getattr(args, "command_line", None) or ["experiment"])


def run_results_table(args: argparse.Namespace, module: str, knobs: str) -> int:
    """Run the results-table experiment of ``experiments.<module>`` with its knobs class ``knobs`` (read from
    ``--config`` and ``--set``), print its table; 1 when a run failed."""
    from importlib import import_module

    from .knobs import load_knobs

    table = import_module(f".{module}", __package__)
    options = load_knobs(getattr(table, knobs), args.config, args.set)
    summary = table.experiment(options, args.out, command_text(args), args.fresh)
    print((args.out / f"{table.TABLE}.md").read_text())
    print(f"wrote {args.out / table.TABLE}.md and .json")
    return 1 if summary["failures"] else 0


@resumable
def run_digits(args: argparse.Namespace) -> int:
    """Train every loss and seed unless done, probe, write ``OUT/digits.md`` / ``.json``; print the table."""
    return run_results_table(args, "digits_table", "DigitsKnobs")


@resumable
def run_pairs(args: argparse.Namespace) -> int:
    """Train every paired config unless done, score retrieval, write ``OUT/pairs.md`` / ``.json``; print it."""
    return run_results_table(args, "pairs_table", "PairsKnobs")


@resumable
def run_domains_grid(args: argparse.Namespace) -> int:
    """Plan, train and evaluate as ``--mode`` says, write the section into ``--docs`` (module docstring of
    :mod:`.domains_grid`)."""
    from ..threads import configure_torch_threads
    from .domains_grid import GridKnobs, GridRun, experiment
    from .knobs import load_knobs

    knobs = load_knobs(GridKnobs, args.config, args.set)
    configure_torch_threads(knobs.threads or None, setting_name="the knob threads")  # re-applied per evaluation
    worker_base = ["--config", str(args.config), *(["--set", *args.set] if args.set else [])]
    run = GridRun(
        out=args.out,
        docs=args.docs or args.out / "results.md",
        figures=args.figures or args.out / "figures",
        mode=args.mode,
        jobs=args.jobs,
        groups=args.groups,
        command=command_text(args),
        worker_base=(*worker_base, "--out", str(args.out), "--mode", args.mode),
    )
    return experiment(knobs, run)


@resumable
def run_channel_modes(args: argparse.Namespace) -> int:
    """Prepare, train every mode and seed unless done, evaluate, pool; print the page."""
    import os

    from .channel_modes import ChannelModesKnobs, experiment
    from .dreams import REAL_PSG_ENV
    from .knobs import load_knobs

    knobs = load_knobs(ChannelModesKnobs, args.config, args.set)
    real_psg = args.real_psg or (Path(os.environ[REAL_PSG_ENV]) if os.environ.get(REAL_PSG_ENV) else None)
    print(experiment(knobs, args.out, args.data, real_psg, command_text(args)))
    return 0


def add_synth_check_arguments(parser: argparse.ArgumentParser) -> None:
    """The checks of ``mvapp experiment synth-check`` (:mod:`.synth_check`)."""
    from .synth_check import add_arguments

    add_arguments(parser)


def run_synth_check(args: argparse.Namespace) -> int:
    """Run one generator check (:mod:`.synth_check`); print its tables."""
    from .synth_check import run

    return run(args, command_text(args))


@resumable
def run_psg_real(args: argparse.Namespace) -> int:
    """Prepare, train unless done, stage the real night; print the page and what was written."""
    import dataclasses

    from ..config import load_config
    from .psg_modalities import Sizes
    from .psg_real import TABLE, RealNight, experiment

    loss = args.loss or load_config(args.config, list(args.set)).loss.name
    sizes = Sizes(nights=args.nights, hours=args.hours, compress=args.compress, seed=args.seed, steps=args.steps)
    sizes = dataclasses.replace(sizes, batch=args.batch, seeds=[args.seed], losses=[loss])
    night = RealNight(args.edf, args.stages, args.stage_map, list(args.channels or []))
    experiment(args.config, night, args.out, sizes, args.max_rate, list(args.set), command_text(args))
    print((args.out / f"{TABLE}.md").read_text())
    print(f"wrote {args.out / TABLE}.md and .json")
    return 0
