"""``mvapp experiment synth-check night-structure``: the generator's hypnograms against the 20 real Sleep-EDF SC
hypnograms (``sleep-edf-hypnograms/SC4*-Hypnogram.edf`` under ``--real-psg``, read in place). Synthetic nights:
``synth_hypnogram`` of ``--hours`` (subject s: traits ``default_rng([seed, s])``, night ``default_rng([seed, s,
1])``). Both sets go through the readers' 30-min wake crop; excluded / unscored epochs are removed. Writes
``OUT/night_structure.md`` (table), ``.json`` (every number) and ``OUT/night_structure_bouts.png`` (bout-length
distributions per stage)."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from ...data.eeg.night_structure import compare_nights, comparison_rows, night_metrics
from ...data.eeg.sleep_edf import hypnogram_epochs
from ...data.eeg.stages import STAGES
from ...data.eeg.synth import SubjectTraits, synth_hypnogram
from ..reproduce import new_figure
from .common import markdown_table, real_folder, write_report

NAME = "night_structure"


def real_nights(folder: Path) -> tuple[list[np.ndarray], list[str]]:
    """The real SC hypnograms' epoch codes ``(e,)`` each and file names; ``FileNotFoundError`` when none."""
    files = sorted(folder.glob("SC4*-Hypnogram.edf"))
    if not files:
        raise FileNotFoundError(f"{folder}: no SC4*-Hypnogram.edf files (expected the real Sleep-EDF hypnograms)")
    return [hypnogram_epochs(path)[0] for path in files], [path.name for path in files]


def synthetic_nights(count: int, hours: float, seed: int) -> list[np.ndarray]:
    """``count`` synthetic hypnograms ``(hours * 120,)`` (subject s: traits ``default_rng([seed, s])``, night
    ``default_rng([seed, s, 1])``)."""
    epochs = int(round(hours * 120))
    return [
        synth_hypnogram(
            epochs, SubjectTraits.sample(np.random.default_rng([seed, s])), np.random.default_rng([seed, s, 1])
        )
        for s in range(count)
    ]


def bout_figure(nights: dict[str, list[np.ndarray]], summary: dict, path: Path) -> None:
    """``path`` (PNG): per stage, the empirical CDF of bout lengths (minutes, pooled over nights) of each set of
    nights, with the KS statistic between the two sets in the title."""
    fig, axes = new_figure(len(STAGES), (3.2 * len(STAGES), 3.0))
    bouts = {name: [night_metrics(labels)["bouts"] for labels in group] for name, group in nights.items()}
    for ax, stage in zip(axes, STAGES):
        for name, per_night in bouts.items():
            lengths = np.sort(np.concatenate([b[stage] for b in per_night]))
            steps = np.arange(1, lengths.size + 1) / lengths.size
            ax.step(lengths, steps, where="post", label=f"{name} (n {lengths.size})")
        ax.set_xscale("log")
        ax.set_title(f"{stage} bouts: KS {summary['bout_ks'][stage]['statistic']:.2f}")
        ax.set_xlabel("bout length (min)")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("share of bouts <= length")
    fig.tight_layout()
    fig.savefig(path, dpi=80)


def run(args: argparse.Namespace, command: str) -> str:
    """Compare, write the table, numbers and figure under ``args.out``; return the table."""
    real, names = real_nights(real_folder(args.real_psg, "sleep-edf-hypnograms"))
    nights = {"synthetic": synthetic_nights(args.nights, args.hours, args.seed), "real": real}
    summary = compare_nights(nights)
    summary["real_files"] = names
    summary["command"] = command
    table = markdown_table(*comparison_rows(summary))
    write_report(args.out, NAME, f"`{command}`\n\n{table}", summary)
    bout_figure(nights, summary, args.out / f"{NAME}_bouts.png")
    return table
