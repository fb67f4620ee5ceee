"""Night structure of the synthetic generator vs the 20 real Sleep-EDF SC hypnograms.

Usage: python scripts/reproduce/eeg_generator/compare_night_structure.py --out DIR [--real-psg DIR] [--nights 20] [--hours 9] [--seed 0]

``--real-psg`` (default ``$MVAPP_REAL_PSG``) holds ``sleep-edf-hypnograms/SC4*-Hypnogram.edf``, read in
place (never copied). Synthetic nights: ``synth_hypnogram`` of ``--hours`` with subject traits drawn as
the generator's tests draw them (subject s: ``default_rng([seed, s])``). Both sets go through the
readers' 30-min wake crop; excluded / unscored epochs are removed. Writes ``DIR/night_structure.md``
(table), ``DIR/night_structure.json`` (every number) and ``DIR/night_structure_bouts.png`` (bout-length
distributions per stage, synthetic vs real), and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
from pathlib import Path

import numpy as np

from multiview_app.data.eeg.night_structure import compare_nights, comparison_rows, night_metrics
from multiview_app.data.eeg.sleep_edf import hypnogram_epochs
from multiview_app.data.eeg.stages import STAGES
from multiview_app.data.eeg.synth import SubjectTraits, synth_hypnogram

# the bench helpers (``scripts/bench/common.py``; scripts are not a package)
_COMMON = runpy.run_path(str(Path(__file__).resolve().parents[2] / "bench" / "common.py"))
command_line, markdown_table = _COMMON["command_line"], _COMMON["markdown_table"]

REAL_PSG_ENV = "MVAPP_REAL_PSG"


def real_nights(folder: Path) -> tuple[list[np.ndarray], list[str]]:
    """The real SC hypnograms' epoch codes and file names; ``SystemExit`` naming the folder when empty."""
    files = sorted(folder.glob("SC4*-Hypnogram.edf"))
    if not files:
        raise SystemExit(f"{folder}: no SC4*-Hypnogram.edf files (expected the real Sleep-EDF hypnograms)")
    return [hypnogram_epochs(path)[0] for path in files], [path.name for path in files]


def synthetic_nights(count: int, hours: float, seed: int) -> list[np.ndarray]:
    """``count`` synthetic nights of ``hours`` (subject s: traits ``default_rng([seed, s])``, night
    ``default_rng([seed, s, 1])``)."""
    epochs = int(round(hours * 120))
    return [
        synth_hypnogram(
            epochs, SubjectTraits.sample(np.random.default_rng([seed, s])), np.random.default_rng([seed, s, 1])
        )
        for s in range(count)
    ]


def bout_figure(nights: dict[str, list[np.ndarray]], summary: dict, path: Path) -> None:
    """``path`` (PNG): per stage, the empirical CDF of bout lengths (minutes, pooled over nights) of
    each set of nights, with the KS statistic between the first two in the title."""
    from multiview_app.experiments.reproduce import new_figure

    fig, axes = new_figure(len(STAGES), (3.2 * len(STAGES), 3.0))
    bouts = {name: [night_metrics(labels)["bouts"] for labels in group] for name, group in nights.items()}
    for ax, stage in zip(axes, STAGES):
        for name, per_night in bouts.items():
            lengths = np.sort(np.concatenate([b[stage] for b in per_night]))
            ax.step(
                lengths, np.arange(1, lengths.size + 1) / lengths.size, where="post", label=f"{name} (n {lengths.size})"
            )
        ax.set_xscale("log")
        ax.set_title(f"{stage} bouts: KS {summary['bout_ks'][stage]['statistic']:.2f}")
        ax.set_xlabel("bout length (min)")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("share of bouts <= length")
    fig.tight_layout()
    fig.savefig(path, dpi=80)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for night_structure.md / .json")
    parser.add_argument(
        "--real-psg",
        type=Path,
        default=os.environ.get(REAL_PSG_ENV),
        help=f"folder holding sleep-edf-hypnograms/ (default ${REAL_PSG_ENV})",
    )
    parser.add_argument("--nights", type=int, default=20, help="synthetic nights (default: %(default)s)")
    parser.add_argument(
        "--hours", type=float, default=9.0, help="length of each synthetic night (default: %(default)s)"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.real_psg is None:
        raise SystemExit(f"--real-psg not given and ${REAL_PSG_ENV} not set")
    real, names = real_nights(Path(args.real_psg) / "sleep-edf-hypnograms")
    nights = {"synthetic": synthetic_nights(args.nights, args.hours, args.seed), "real": real}
    summary = compare_nights(nights)
    summary["real_files"] = names
    summary["command"] = command_line()
    headers, rows = comparison_rows(summary)
    table = markdown_table(headers, rows)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "night_structure.md").write_text(f"`{summary['command']}`\n\n{table}\n")
    (args.out / "night_structure.json").write_text(json.dumps(summary, indent=1))
    print(table)
    bout_figure(nights, summary, args.out / "night_structure_bouts.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
