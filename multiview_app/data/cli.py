"""``mvapp data {list, synth-psg, prepare, info, synth-domains, caption-domains}``: the dataset catalog,
synthetic PSG, prepared EEG caches, cache summary, digit image domains in the DomainNet layout and
their captioned image-text pairs. Dataset facts
(default channels, licenses, how to obtain) come from the cards in ``datasets/``
(:mod:`multiview_app.data.catalog`)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..argtypes import Option, add_options, nonnegative_float, nonnegative_int, positive_float, positive_int
from ..cli import describe

PREPARE_BAND = (0.5, 30.0)
"""Default band-pass of ``data prepare`` = ``eeg.preprocess.DEFAULT_BAND`` (a literal here so that
``mvapp --help`` does not import the EEG stack; a test checks they are equal)."""


SYNTH_FORMATS = ("sleep-edf", "physionet2018")
"""Formats ``synth-psg`` writes = ``eeg.synth.WRITERS`` (a literal for the same reason; a test checks)."""
SYNTH_SIGNALS = ("eeg", "psg")
"""Signal sets ``synth-psg --signals`` takes = ``eeg.synth.SIGNAL_SETS`` (a literal; a test checks)."""


def default_channels() -> dict[str, list[str]]:
    """Default channels of every preparable dataset, from its catalog card (read on demand, so that
    ``mvapp --help`` does not load the catalog)."""
    from .catalog import preparable

    return {name: list(card.default_channels) for name, card in preparable().items()}


@dataclass(frozen=True)
class DataCommand:
    """A ``mvapp data`` subcommand: its name, one-line summary, example command line, handler (returns the exit
    code) and options as data."""

    name: str
    summary: str
    example: str
    handler: Callable[[argparse.Namespace], int]
    options: tuple[Option, ...]


def add_subparser(subparsers: argparse._SubParsersAction) -> None:
    """Register the ``data`` group on the ``mvapp`` parser (its subcommands: :data:`DATA_COMMANDS`)."""
    data = subparsers.add_parser(
        "data",
        **describe(
            "synthesize, prepare and inspect datasets",
            "mvapp data prepare sleep-edf --source demo_data/sleep_edf_raw --out demo_data/sleep_edf_cache",
        ),
    )
    commands = data.add_subparsers(dest="data_command", required=True, metavar="DATA_COMMAND")
    for command in DATA_COMMANDS:
        parser = commands.add_parser(command.name, **describe(command.summary, command.example))
        add_options(parser, command.options)
        parser.set_defaults(func=command.handler)


def _preparable() -> list[str]:
    """The dataset formats ``data prepare`` reads (the catalog's preparable cards, read on demand)."""
    return sorted(default_channels())


def refuse_non_empty_out(out: Path, overwrite: bool) -> None:
    """``synth-*`` commands write only into a new or empty ``--out`` unless ``--overwrite``."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out}: exists and is not a folder")
    if out.is_dir() and not overwrite:
        present = sorted(p.name for p in out.iterdir())
        if present:
            raise ValueError(
                f"--out {out}: folder is not empty ({len(present)} entries, e.g. {present[0]}); "
                "pass --overwrite to write into it or choose an empty folder"
            )


def _optional_float(text: str) -> float | None:
    return None if text.lower() in ("none", "off") else float(text)


def _synth(args: argparse.Namespace) -> int:
    from .eeg.synth import synth_psg

    refuse_non_empty_out(args.out, args.overwrite)
    files = synth_psg(
        args.out,
        args.subjects,
        args.nights,
        args.format,
        hours=args.hours,
        seed=args.seed,
        compress=args.compress,
        record_hours=args.record_hours,
        workers=args.workers,
        signals=args.signals,
    )
    print(f"wrote {len(files)} files ({args.subjects} subjects x {args.nights} nights, {args.format}) to {args.out}")
    return 0


def _synth_domains(args: argparse.Namespace) -> int:
    from .domains.synth import synth_domains

    if args.limit is not None and args.limit < 20:
        raise ValueError(f"--limit {args.limit}: need at least 20 digits (2 per class)")
    counts = synth_domains(args.out, seed=args.seed, limit=args.limit)
    print(
        f"wrote {sum(counts.values())} images in {len(counts)} domains ({', '.join(counts)}) with split files to {args.out}"
    )
    return 0


def _caption_domains(args: argparse.Namespace) -> int:
    from .text.captions import write_domain_digit_pairs

    refuse_non_empty_out(args.out, False)
    if args.samples_per_shard < 1:
        raise ValueError(f"--samples-per-shard {args.samples_per_shard}: must be >= 1")
    domains = [d.strip() for d in args.domains.split(",") if d.strip()] if args.domains else None
    out = write_domain_digit_pairs(args.domains_dir, args.out, domains, args.samples_per_shard)
    manifest = json.loads((out / "manifest.json").read_text())
    images = {split: sum(per.values()) for split, per in manifest["images"].items()}
    print(
        f"captioned {images['train']} train + {images['test']} test images of {', '.join(manifest['domains'])} "
        f"into {out} (train.tsv, test.tsv, images/, shards/)"
    )
    return 0


def _prepare(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from ..options import format_validation_error
    from .eeg.cache import prepare, summary_table
    from .eeg.preprocess import PrepareOptions

    if args.download:
        if args.dataset != "sleep-edf":
            raise ValueError("--download is only available for sleep-edf (mne.datasets.sleep_physionet)")
        from .eeg.sleep_edf import download_sleep_physionet

        args.source.mkdir(parents=True, exist_ok=True)
        download_sleep_physionet(args.download, [1, 2], args.source)
    reader_options = _reader_options(args)
    try:
        options = PrepareOptions(
            channels=args.channels or default_channels()[args.dataset],
            sfreq=args.sfreq,
            l_freq=args.l_freq,
            h_freq=args.h_freq,
            crop_wake_minutes=args.crop_wake_minutes,
            scaling=args.scaling,
        )
    except ValidationError as err:
        raise ValueError(f"prepare options: {format_validation_error(err, '', PrepareOptions)}") from None
    summary = prepare(
        args.dataset,
        args.source,
        args.out,
        options,
        dtype=args.dtype,
        on_error="skip" if args.skip_bad else "raise",
        include_st=args.include_st,
        modalities=args.modalities,
        reader_options=reader_options,
        max_rate=args.max_rate,
    )
    print(summary_table(summary))
    return 0


GENERIC_FORMATS = {"edf": "auto", "bids": "annotations"}
"""``prepare`` datasets that read the user's own PSG, with their default ``--stages``."""


def _reader_options(args: argparse.Namespace) -> dict[str, str] | None:
    """``--stages`` / ``--stage-map`` of ``edf`` and ``bids`` (with their defaults); refused for other datasets,
    as is an edf / bids run without ``--channels``."""
    if args.dataset not in GENERIC_FORMATS:
        given = [flag for flag, value in (("--stages", args.stages), ("--stage-map", args.stage_map)) if value]
        if given:
            raise ValueError(f"{', '.join(given)}: only for {' and '.join(GENERIC_FORMATS)}, not {args.dataset}")
        return None
    if not args.channels:
        raise ValueError(
            f"{args.dataset}: name the channels to prepare with --channels (e.g. --channels C3-M2 O1-M2; with "
            "--modalities they are the brain group's)"
        )
    return {"stages": args.stages or GENERIC_FORMATS[args.dataset], "stage_map": args.stage_map or "aasm"}


def _info(args: argparse.Namespace) -> int:
    from .catalog import load_catalog, preparable
    from .eeg.cache import info, info_table

    summary = info(args.cache)
    card = load_catalog().get(summary["dataset"]) or preparable().get(summary["dataset"])  # dreams -> dreams_spindles
    if card is not None:
        summary["card"] = card.summary()
    print(json.dumps(summary, indent=1) if args.json else info_table(summary))
    return 0


def _list(args: argparse.Namespace) -> int:
    from .catalog import catalog_dir, load_catalog

    cards = load_catalog()
    if args.json:
        for card in cards.values():
            print(json.dumps(card.summary()))
        return 0
    rows = [
        ("dataset", "kind", "modality", "adapters", "license"),
        *((c.name, c.kind, c.modality, ",".join(c.adapters), c.source.license) for c in cards.values()),
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    print(
        f"{len(cards)} datasets (cards in {catalog_dir()}); `mvapp data list --json` for sources and how to obtain each"
    )
    return 0


DATA_COMMANDS: tuple[DataCommand, ...] = (
    DataCommand(
        "list",
        "print the dataset catalog (datasets/*.yaml cards)",
        "mvapp data list --json",
        _list,
        ((("--json",), dict(action="store_true", help="one JSON object per dataset instead of a table")),),
    ),
    DataCommand(
        "synth-psg",
        "write synthetic polysomnography in Sleep-EDF or PhysioNet 2018 format",
        "mvapp data synth-psg --subjects 4 --format sleep-edf --hours 9 --compress 6 --out demo_data/sleep_edf_raw",
        _synth,
        (
            (("--subjects",), dict(type=positive_int, required=True, help="subjects (people) to write")),
            (("--nights",), dict(type=positive_int, default=1, help="nights per subject")),
            (("--format",), dict(choices=SYNTH_FORMATS, required=True, help="file layout of the dataset")),
            (("--out",), dict(type=Path, required=True, help="folder to write the recordings into")),
            (
                ("--hours",),
                dict(
                    type=positive_float,
                    default=9.0,
                    help="length of each full night, wake around sleep included (default: %(default)s)",
                ),
            ),
            (
                ("--compress",),
                dict(
                    type=positive_int,
                    default=1,
                    help="write K-times shorter excerpts keeping the full night's stage proportions "
                    "(every K-th epoch; default: %(default)s = full nights)",
                ),
            ),
            (
                ("--record-hours",),
                dict(
                    type=nonnegative_float,
                    default=None,
                    help="sleep-edf: pad each recording with wake to this length, as the ~20-h SC day-night "
                    "files (the readers crop it); 0 = no padding (default: 20 for full nights of >= 6 h, "
                    "else no padding)",
                ),
            ),
            (
                ("--signals",),
                dict(
                    choices=SYNTH_SIGNALS,
                    default="eeg",
                    help="eeg: EEG, EOG and chin EMG; psg: the whole PSG (physionet2018: ABD, CHEST, AIRFLOW, SaO2, ECG, "
                    "respiratory events and arousals in .arousal and -arousal.mat; sleep-edf: Resp oro-nasal at 1 Hz) "
                    "(default: %(default)s)",
                ),
            ),
            (("--seed",), dict(type=nonnegative_int, default=0)),
            (
                ("--workers",),
                dict(
                    type=positive_int,
                    default=1,
                    help="processes writing nights at the same time (the same files; default: %(default)s)",
                ),
            ),
            (
                ("--overwrite",),
                dict(action="store_true", help="write into a non-empty --out (files of the same name are replaced)"),
            ),
        ),
    ),
    DataCommand(
        "prepare",
        "read recordings into a memory-mapped window cache",
        "mvapp data prepare physionet2018 --source demo_data/physionet2018_raw --out demo_data/physionet2018_cache",
        _prepare,
        (
            (("dataset",), dict(choices=_preparable, help="the dataset's format (its card in datasets/)")),
            (
                ("--source",),
                dict(
                    type=Path,
                    required=True,
                    help="folder with the downloaded/synthesized files (dreams: the extracted DatabaseSpindles)",
                ),
            ),
            (
                ("--out",),
                dict(type=Path, required=True, help="cache folder (created; prepared recordings are skipped)"),
            ),
            (
                ("--channels",),
                dict(
                    nargs="+",
                    default=None,
                    help="channel names (default: Sleep-EDF Fpz-Cz Pz-Oz; PhysioNet 2018 the six EEG derivations; "
                    "DREAMS 'central', each excerpt's C3-A1 or CZ-A1; edf and bids: required)",
                ),
            ),
            (
                ("--stages",),
                dict(
                    default=None,
                    metavar="SOURCE",
                    help="edf / bids: where stages come from: auto (the CSV hypnogram <file>.csv beside the file, or the "
                    "EDF+ stage annotations, whichever exists), csv, annotations, channel:LABEL or channel:LABEL:SECONDS "
                    "(a stage signal; its scoring period is detected when not given) (default: edf auto, bids annotations)",
                ),
            ),
            (
                ("--stage-map",),
                dict(
                    default=None,
                    metavar="MAP",
                    help="edf / bids: stage and event label map: aasm, rk, dreams (datasets/modalities/stage-maps.yaml) "
                    "or a YAML file of the same form (default: aasm)",
                ),
            ),
            (("--sfreq",), dict(type=positive_float, default=100.0, help="target sampling rate (Hz)")),
            (
                ("--l-freq",),
                dict(
                    type=_optional_float,
                    default=PREPARE_BAND[0],
                    help="band-pass low edge in Hz, or 'none' (default: %(default)s, as the band-power baseline)",
                ),
            ),
            (
                ("--h-freq",),
                dict(
                    type=_optional_float,
                    default=PREPARE_BAND[1],
                    help="band-pass high edge in Hz, or 'none' (default: %(default)s, as the band-power baseline)",
                ),
            ),
            (
                ("--crop-wake-minutes",),
                dict(
                    type=_optional_float,
                    default=30.0,
                    help="wake kept before the first / after the last sleep epoch, or 'none' to keep all (default: %(default)s)",
                ),
            ),
            (("--dtype",), dict(choices=["float32", "float16"], default="float32")),
            (
                ("--include-st",),
                dict(
                    action="store_true",
                    help="sleep-edf: also read the ST (telemetry, temazepam study) nights; default: SC nights only",
                ),
            ),
            (
                ("--scaling",),
                dict(
                    choices=["window", "recording", "microvolts"],
                    default="recording",
                    help="per-recording robust scaling that keeps amplitude differences between windows (chosen "
                    "on validation subjects for the demo's encoder, docs/eeg.md); per-window z-scoring; or microvolts (median removed, units of 25 uV: absolute amplitude "
                    "kept across recordings) (default: %(default)s)",
                ),
            ),
            (
                ("--modalities",),
                dict(
                    default=None,
                    help="every PSG signal, one window file per modality group: a preset (sleepfm, six, eeg) or a comma "
                    "list of groups (brain, eyes, muscle, heart, breathing, oximetry; group=LABEL+LABEL picks channels); "
                    "brain takes --channels; rates, bands and scaling per group from datasets/modalities/psg.yaml "
                    "(default: EEG channels only, one window file per recording)",
                ),
            ),
            (
                ("--max-rate",),
                dict(
                    type=positive_float,
                    default=None,
                    metavar="HZ",
                    help="with --modalities: prepare each modality group at min(its rate, HZ), its band's high edge "
                    "moved below the new Nyquist frequency (e.g. 50 for a 50-Hz recording, and for training data "
                    "meant to match it; kept in the manifest) (default: each group's rate in psg.yaml)",
                ),
            ),
            (("--skip-bad",), dict(action="store_true", help="skip unreadable recordings (listed) instead of failing")),
            (
                ("--download",),
                dict(
                    nargs="+",
                    type=nonnegative_int,
                    metavar="SUBJECT",
                    default=None,
                    help="sleep-edf only: first fetch these SC subjects (night 1 and 2) into --source via mne (needs internet)",
                ),
            ),
        ),
    ),
    DataCommand(
        "synth-domains",
        "write six digit image domains (scikit-learn's handwritten digits) in the DomainNet layout",
        "mvapp data synth-domains --out data/digit-domains",
        _synth_domains,
        (
            (("--out",), dict(type=Path, required=True, help="folder to write <domain>/<class>/<image> + split files")),
            (("--seed",), dict(type=nonnegative_int, default=0, help="seed of the domains' renderings")),
            (("--limit",), dict(type=positive_int, default=None, help="only the first N digits (tiny test fixtures)")),
        ),
    ),
    DataCommand(
        "caption-domains",
        "caption the synth-domains images (digit, stroke, rendering): TSV + images + tar shards",
        "mvapp data caption-domains --domains-dir data/digit-domains --out data/digit-domain-pairs",
        _caption_domains,
        (
            (("--domains-dir",), dict(type=Path, required=True, help="a `mvapp data synth-domains` folder")),
            (("--out",), dict(type=Path, required=True, help="new folder: train.tsv, test.tsv, images/, shards/")),
            (("--domains",), dict(default=None, help="comma-separated subset (default: every domain present)")),
            (("--samples-per-shard",), dict(type=positive_int, default=500, help="image-text pairs per tar shard")),
        ),
    ),
    DataCommand(
        "info",
        "summarise a prepared cache (recordings, channels, windows per stage)",
        "mvapp data info demo_data/physionet2018_cache",
        _info,
        (
            (("cache",), dict(type=Path, help="a prepared cache folder (mvapp data prepare --out)")),
            (("--json",), dict(action="store_true", help="the full record as JSON (per subject, the dataset card)")),
        ),
    ),
)
"""The ``mvapp data`` subcommands in help order."""
