"""``mvapp experiment synth-check yasa``: YASA's pretrained staging (Vallat & Walker, eLife 2021) on synthetic
nights, one cohort per format.

Writes ``--subjects`` full (uncompressed) ``--hours`` nights per format with ``synth_psg`` (Sleep-EDF format: the
SC cohort, Fpz-Cz + horizontal EOG; PhysioNet 2018 format: the young-adult cohort, C4-M1 + E1-M2) under
``OUT/nights/<format>`` (or stages the nights already under ``--nights DIR/<format>``), stages every night from
its source file with :func:`multiview_app.eval.yasa.stage_folder` (30 min of wake kept around sleep) and reports
per cohort: Cohen's kappa and accuracy of the pooled epochs, the median of the per-night kappas, per-stage recall,
the confusion matrix (rows: true stage, columns: YASA) and the relative delta power (0.5-4 Hz over 0.5-30 Hz,
Welch 2-s segments, raw microvolts) of the staged EEG lead per true stage (median over epochs). Writes
``OUT/yasa_on_synthetic.md`` / ``.json``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from ...data.eeg.bands import relative_band_powers
from ...data.eeg.stages import STAGES
from ...data.eeg.synth import WRITER_COHORT, synth_psg
from ...eval.yasa import StagedNight, agreement, stage_folder
from .common import markdown_table, write_report

NAME = "yasa_on_synthetic"

FORMATS = tuple(WRITER_COHORT)


def relative_delta_by_stage(nights: list[StagedNight]) -> dict[str, float | None]:
    """Median relative delta (0.5-4 / 0.5-30 Hz) of the staged EEG epochs ``(E, T)`` per true stage."""
    delta = np.concatenate([relative_band_powers(n.eeg_uv[:, None, :], n.sfreq)[:, 0, 0] for n in nights])
    labels = np.concatenate([n.labels for n in nights])
    return {s: (float(np.median(delta[labels == i])) if (labels == i).any() else None) for i, s in enumerate(STAGES)}


def cohort_summary(nights: list[StagedNight]) -> dict[str, Any]:
    """Pooled agreement, per-night kappas, relative delta per stage and the leads staged."""
    pooled = agreement(np.concatenate([n.labels for n in nights]), np.concatenate([n.predicted for n in nights]))
    per_night = {n.recording: agreement(n.labels, n.predicted)["kappa"] for n in nights}
    return {
        **pooled,
        "kappa_per_night": per_night,
        "kappa_median_night": float(np.median(list(per_night.values()))),
        "relative_delta": relative_delta_by_stage(nights),
        "leads": sorted({f"{n.eeg} + {n.eog}" if n.eog else n.eeg for n in nights}),
        "demographics_used": sum(n.age is not None for n in nights),
    }


def stage_cohorts(
    out: Path, subjects: int, hours: float, seed: int, formats: list[str], nights: Path | None
) -> dict[str, Any]:
    """Write (unless ``nights`` is given) and stage the nights of each format: ``{cohort: summary}``."""
    results: dict[str, Any] = {}
    for offset, fmt in enumerate(formats):
        folder = (nights or out / "nights") / fmt
        if nights is None:
            synth_psg(folder, subjects, 1, fmt, hours=hours, seed=seed + offset, progress=False, compress=1)
        staged = stage_folder(folder)
        if not staged:
            raise ValueError(f"no night of {folder} could be staged")
        results[WRITER_COHORT[fmt]] = {"format": fmt, "nights": len(staged), **cohort_summary(staged)}
    return results


def _cell(value: float | None) -> str:
    """``value`` to 2 decimals, ``-`` when missing."""
    return "-" if value is None else f"{value:.2f}"


def report(results: dict[str, Any]) -> str:
    """The markdown tables: agreement and recall per cohort, delta per stage, confusion matrices."""
    rows = [
        [cohort, r["nights"], r["epochs"], _cell(r["kappa"]), _cell(r["kappa_median_night"]), _cell(r["accuracy"])]
        + [_cell(r["recall"][s]) for s in STAGES]
        for cohort, r in results.items()
    ]
    head = ["cohort", "nights", "epochs", "kappa", "median night kappa", "accuracy"] + [f"recall {s}" for s in STAGES]
    delta = [
        [cohort, ", ".join(r["leads"])] + [_cell(r["relative_delta"][s]) for s in STAGES]
        for cohort, r in results.items()
    ]
    blocks = [markdown_table(head, rows), markdown_table(["cohort", "lead"] + [f"delta {s}" for s in STAGES], delta)]
    for cohort, r in results.items():
        confusion = [[s, *row] for s, row in zip(STAGES, r["confusion"])]
        blocks.append(f"{cohort} (rows: true, columns: YASA)\n" + markdown_table(["true"] + list(STAGES), confusion))
    return "\n\n".join(blocks)


def run(args: argparse.Namespace, command: str) -> str:
    """Write (unless ``--nights``) and stage the nights, write the tables and numbers; return the tables."""
    formats = args.formats or list(FORMATS)
    unknown = sorted(set(formats) - set(FORMATS))
    if unknown:
        raise ValueError(f"--formats: unknown {unknown}, expected some of {list(FORMATS)}")
    results = stage_cohorts(args.out, args.subjects, args.hours, args.seed, formats, args.nights)
    text = report(results)
    record = {"command": command, "seed": args.seed, "hours": args.hours, "results": results}
    write_report(args.out, NAME, f"`{command}`\n\n{text}", record)
    return text
