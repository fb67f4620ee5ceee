"""``mvapp experiment synth-check <check>``: checks of the synthetic polysomnography generator against reference
values and real recordings (not paper reproductions; docs/eeg.md cites their numbers).

- ``night-structure`` (:mod:`.night_structure`): hypnograms vs the 20 real Sleep-EDF SC hypnograms;
- ``signals`` (:mod:`.signals`): C3-M2 vs the real DREAMS central derivation: band powers, amplitudes, spindles,
  realism both ways;
- ``wake-n1`` (:mod:`.wake_n1`): wake and N1 per cohort vs the real DREAMS W / S1 epochs;
- ``yasa`` (:mod:`.yasa_check`): YASA's pretrained stager on full synthetic nights, per cohort;
- ``physiology`` (:mod:`.physiology`): heart, breathing, SpO2 and events per stage vs published ranges;
- ``spectra`` (:mod:`.spectra`): spectra, band powers and stage shares vs reference values (figure + table);
- ``psg-night`` (:mod:`.psg_night`): one synthetic whole-PSG night beside the real DREAMS excerpt3 (figure).

The real recordings are read in place from ``--real-psg`` (default ``$MVAPP_REAL_PSG``). Each check's module
holds a ``run(args, command) -> str``; this module holds only the options (``mvapp --help`` stays free of numpy).
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path
from typing import NamedTuple

from ...argtypes import Option, add_options, nonnegative_int, positive_float, positive_int
from ...cli import describe

EXAMPLE = "mvapp experiment synth-check {} --out runs/{} --real-psg ../shared/real-psg"


def out_dir(what: str) -> Option:
    """A required ``--out`` folder of ``what``."""
    return (("--out",), dict(type=Path, required=True, help=f"output folder: {what}"))


def seed(default: int) -> Option:
    """``--seed`` of the synthetic subjects."""
    return (("--seed",), dict(type=nonnegative_int, default=default, help="generator seed (default: %(default)s)"))


def count(flag: str, default: int, what: str) -> Option:
    """A positive count ``flag``."""
    return ((flag,), dict(type=positive_int, default=default, help=f"{what} (default: %(default)s)"))


def hours(default: float) -> Option:
    """``--hours`` of each synthetic night."""
    return (
        ("--hours",),
        dict(type=positive_float, default=default, help="night length in hours (default: %(default)s)"),
    )


REAL_PSG: Option = (
    ("--real-psg",),
    dict(type=Path, default=None, help="folder of the real recordings, read in place (default: $MVAPP_REAL_PSG)"),
)
DATA: Option = (("--data",), dict(type=Path, default=None, help="folder of the synthetic nights, kept (default: {})"))


class Check(NamedTuple):
    """One check: its one-line summary, example, options and module (holding ``run(args, command)``)."""

    summary: str
    example: str
    options: tuple[Option, ...]
    module: str


CHECKS: dict[str, Check] = {
    "night-structure": Check(
        "the generator's hypnograms (stage shares, transitions, bouts) vs the 20 real Sleep-EDF SC hypnograms",
        EXAMPLE.format("night-structure", "night_structure"),
        (
            out_dir("night_structure.md, .json, _bouts.png"),
            REAL_PSG,
            count("--nights", 20, "synthetic nights"),
            hours(9.0),
            seed(0),
        ),
        "night_structure",
    ),
    "signals": Check(
        "synthetic C3-M2 vs the real DREAMS central derivation: band powers, amplitudes, spindles, realism both ways",
        EXAMPLE.format("signals", "eeg_signals"),
        (out_dir("eeg_signals.md, .json, _bands.png"), REAL_PSG, count("--subjects", 6, "synthetic nights"), seed(0)),
        "signals",
    ),
    "wake-n1": Check(
        "synthetic wake and N1 per cohort vs the real DREAMS W / S1 epochs: spectra, band power, EOG, EMG, realism",
        EXAMPLE.format("wake-n1", "wake_n1"),
        (
            out_dir("wake_n1.md, .json"),
            (("--figure",), dict(type=Path, default=None, help="PNG path of the figure (default: OUT/wake_n1.png)")),
            REAL_PSG,
            count("--subjects", 6, "synthetic subjects per cohort"),
            seed(0),
        ),
        "wake_n1",
    ),
    "yasa": Check(
        "YASA's pretrained stager on full synthetic nights per cohort: kappa, recall, confusion, delta per stage",
        "mvapp experiment synth-check yasa --out runs/yasa_on_synthetic --seed 6000",
        (
            out_dir("nights/, yasa_on_synthetic.md, .json"),
            count("--subjects", 4, "nights per format"),
            hours(9.0),
            seed(0),
            (("--formats",), dict(nargs="+", default=None, help="night formats (default: sleep-edf physionet2018)")),
            (("--nights",), dict(type=Path, default=None, help="stage the nights under NIGHTS/<format> instead")),
        ),
        "yasa_check",
    ),
    "physiology": Check(
        "heart, breathing, SpO2 and events per stage of synthetic whole-PSG nights vs published ranges",
        "mvapp experiment synth-check physiology --out runs/physiology",
        (
            out_dir("physiology_table.md, .json"),
            (DATA[0], {**DATA[1], "help": DATA[1]["help"].format("OUT/nights")}),
            count("--subjects", 3, "nights"),
            hours(8.5),
            seed(0),
        ),
        "physiology",
    ),
    "spectra": Check(
        "synthetic EEG spectra, band powers and stage shares vs reference values (figure + table)",
        "mvapp experiment synth-check spectra --out runs/figures/eeg_synth_spectra",
        (
            (
                ("--out",),
                dict(
                    type=Path,
                    default=Path("runs/figures/eeg_synth_spectra"),
                    help="writes OUT.png and OUT.md (default: %(default)s)",
                ),
            ),
            count("--subjects", 10, "synthetic nights"),
            hours(9.0),
            count("--compress", 3, "keep every K-th epoch of a night"),
            seed(0),
        ),
        "spectra",
    ),
    "psg-night": Check(
        "one synthetic whole-PSG night (hypnogram, heart rate, airflow, SpO2, events) beside the real DREAMS excerpt3",
        "mvapp experiment synth-check psg-night --out runs/psg_night.png --real-psg ../shared/real-psg",
        (
            (("--out",), dict(type=Path, required=True, help="the PNG to write")),
            (DATA[0], {**DATA[1], "help": DATA[1]["help"].format("a temporary folder")}),
            hours(8.5),
            seed(11),
            REAL_PSG,
        ),
        "psg_night",
    ),
}
"""Every check by subcommand name."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One subcommand per check of :data:`CHECKS` under ``parser`` (``mvapp experiment synth-check``)."""
    sub = parser.add_subparsers(dest="check", required=True, metavar="CHECK")
    for name, check in CHECKS.items():
        add_options(sub.add_parser(name, **describe(check.summary, check.example)), check.options)


def run(args: argparse.Namespace, command: str) -> int:
    """Run the chosen check, print what it returns."""
    module = importlib.import_module(f"{__name__}.{CHECKS[args.check].module}")
    text = module.run(args, command)
    if text:
        print(text)
    return 0
