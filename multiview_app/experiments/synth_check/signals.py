"""``mvapp experiment synth-check signals``: the generator's C3-M2 against the real DREAMS excerpts' central
derivation (C3-A1 or CZ-A1; ``dreams-spindles/`` under ``--real-psg``, read in place).

Synthetic: ``--subjects`` compressed 9-h nights (:func:`.common.synthetic_subject`). Both as prepared windows
(100 Hz, 0.5-30 Hz, not z-scored): per stage relative band power and amplitude percentiles in uV; the real N2
spindle density from both experts' scorings, the DREAMS automatic detector and the project's detector
(``signal_stats.detect_spindles``), and that detector's sensitivity / precision against each scoring; realism
both ways (``eval.realism.cross_staging``, kappa on W/N1/N2/N3) and the classifier's ceiling on real data, leave
one excerpt out (draw seeds ``--seed`` .. ``--seed`` + 2). Writes ``OUT/eeg_signals.md`` / ``.json`` and
``OUT/eeg_signals_bands.png``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from ...data.eeg.dreams import read_spindle_scoring
from ...data.eeg.preprocess import resample
from ...data.eeg.signal_stats import (
    detect_spindles,
    events_per_minute_in_stage,
    match_events,
    stage_epochs,
    stage_signal_stats,
)
from ...data.eeg.stages import STAGES
from ...eval.bandpower import BANDS
from ...eval.realism import cross_staging, leave_one_group_out_staging
from ..reproduce import new_figure
from .common import SFREQ, dreams_central, markdown_table, real_folder, synthetic_subject, write_report

NAME = "eeg_signals"
CEILING_ROW = "trained on the other real excerpts, stages the held-out one (ceiling)"
SCORINGS = {
    "expert 1": "Visual_scoring1_{}.txt",
    "expert 2": "Visual_scoring2_{}.txt",
    "DREAMS automatic detector": "Automatic_detection_{}.txt",
}
DETECTOR = "project detector"
EXPERTS = "expert 2 vs expert 1"


def excerpt_spindles(folder: Path, name: str, recording: Any) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """One excerpt's spindles ``(onsets s, durations s)`` per scoring present and of the project's detector
    (on the central derivation at 100 Hz)."""
    signal = resample(recording.signals[0], recording.sfreqs[0], SFREQ)
    events = {DETECTOR: detect_spindles(signal, SFREQ, recording.epoch_labels)}
    for scoring, pattern in SCORINGS.items():
        path = folder / pattern.format(name)
        if path.exists():
            events[scoring] = read_spindle_scoring(path)
    return events


def add_agreement(agreement: dict[str, dict[str, int]], events: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
    """Add one excerpt's overlap counts: the project detector against each scoring, expert 2 against expert 1."""
    pairs = [(f"{DETECTOR} vs {s}", events[DETECTOR], events[s]) for s in SCORINGS if s in events]
    if "expert 1" in events and "expert 2" in events:  # the two experts' own agreement, for scale
        pairs.append((EXPERTS, events["expert 2"], events["expert 1"]))
    for key, detected, reference in pairs:
        for field, value in match_events(detected, reference).items():
            if field in agreement[key]:
                agreement[key][field] += value


def real_spindles(folder: Path, excerpts: list) -> tuple[dict[str, dict], dict[str, dict]]:
    """N2 spindles per minute per scoring (pooled over the excerpts that scoring covers) and the project
    detector against each scoring (overlap; counts pooled over the excerpts)."""
    spindles = {name: [0, 0.0, 0] for name in [*SCORINGS, DETECTOR]}  # count, N2 minutes, excerpts
    fields = ("reference", "detected", "found", "right")
    agreement = {k: dict.fromkeys(fields, 0) for k in [*(f"{DETECTOR} vs {n}" for n in SCORINGS), EXPERTS]}
    for name, recording, _, _ in excerpts:
        events = excerpt_spindles(folder, name, recording)
        add_agreement(agreement, events)
        for scoring, (onsets, _) in events.items():
            count, minutes = events_per_minute_in_stage(onsets, recording.epoch_labels, STAGES.index("N2"))
            spindles[scoring] = [spindles[scoring][0] + count, spindles[scoring][1] + minutes, spindles[scoring][2] + 1]
    density = {
        name: {"spindles": c, "n2_minutes": m, "excerpts": k, "per_minute": c / m if m else float("nan")}
        for name, (c, m, k) in spindles.items()
    }
    for counts in agreement.values():
        counts["sensitivity"] = counts["found"] / counts["reference"] if counts["reference"] else float("nan")
        counts["precision"] = counts["right"] / counts["detected"] if counts["detected"] else float("nan")
    return density, agreement


def synthetic_epochs(subjects: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """C3-M2 epochs ``(e, 3000)`` uV and labels ``(e,)`` of ``subjects`` compressed synthetic nights."""
    pairs = []
    for s in range(subjects):
        night = synthetic_subject(["C3-M2"], seed, s)
        pairs.append(stage_epochs(night.signals["C3-M2"], SFREQ, night.stages, SFREQ))
    return np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs])


def real_ceiling(epochs: np.ndarray, labels: np.ndarray, groups: np.ndarray, seed: int) -> dict[str, Any]:
    """The band-power classifier fitted on the other real excerpts, staging the held-out one, per draw seed
    ``seed`` .. ``seed + 2``; ``row``: the first draw pooled, with the range of its balanced training draws."""
    draws = [leave_one_group_out_staging(epochs, labels, groups, SFREQ, seed=seed + d) for d in range(3)]
    per_fold = [r["train_per_class"] for r in draws[0]["per_group"].values()]  # depends on the held-out excerpt
    train_range = {c: f"{min(f[c] for f in per_fold)}-{max(f[c] for f in per_fold)}" for c in per_fold[0]}
    return {
        "draws": draws,
        "pooled_kappa_per_draw": [c["pooled"]["kappa"] for c in draws],
        "pooled_balanced_accuracy_per_draw": [c["pooled"]["balanced_accuracy"] for c in draws],
        "row": {
            "name": CEILING_ROW,
            **draws[0]["pooled"],
            "test_per_class": draws[0]["test_per_class"],
            "train_per_class": train_range,
        },
    }


def compare(real_psg: Path | None, subjects: int, seed: int) -> dict[str, Any]:
    """Every number of the check (the JSON written), without the command."""
    folder = real_folder(real_psg, "dreams-spindles")
    excerpts = dreams_central(folder)
    epochs, labels = np.concatenate([e[2] for e in excerpts]), np.concatenate([e[3] for e in excerpts])
    groups = np.concatenate([np.full(e[3].shape, e[0]) for e in excerpts])
    density, agreement = real_spindles(folder, excerpts)
    synthetic = synthetic_epochs(subjects, seed)
    return {
        "stats": {
            "real": stage_signal_stats(epochs, labels, SFREQ),
            "synthetic": stage_signal_stats(*synthetic, SFREQ),
        },
        "real_n2_spindles": density,
        "project_detector_vs": agreement,
        "realism": {
            "trained on real, stages synthetic": cross_staging((epochs, labels), synthetic, SFREQ, seed=seed),
            "trained on synthetic, stages real": cross_staging(synthetic, (epochs, labels), SFREQ, seed=seed),
        },
        "real_ceiling": real_ceiling(epochs, labels, groups, seed),
        "synthetic_subjects": subjects,
        "seed": seed,
    }


def _quartiles(s: dict, band: str) -> str:
    return "{:.3f} ({:.3f}-{:.3f})".format(s["relative_power"][band][1], *s["relative_power"][band][::2])


def _amplitude(s: dict) -> str:
    return f"{s['amplitude_uv']['p5']:.1f} / {s['amplitude_uv']['p95']:.1f} / {s['epoch_sd_uv_median']:.1f}"


def _band_rms(s: dict) -> str:
    return " / ".join(f"{s['band_rms_uv_median'][b]:.1f}" for b in BANDS)


def stats_table(stats: dict[str, dict]) -> str:
    """One row per stage and statistic: synthetic vs real medians (relative power) / percentiles (uV)."""
    rows = []
    for stage in STAGES:
        real, synthetic = stats["real"][stage], stats["synthetic"][stage]
        rows.append([stage, "epochs", synthetic["epochs"], real["epochs"]])
        if not real["epochs"] or not synthetic["epochs"]:
            continue
        rows += [
            [stage, f"relative {b} power, median (IQR)", _quartiles(synthetic, b), _quartiles(real, b)] for b in BANDS
        ]
        rows.append([stage, "uV: 5th / 95th percentile / median epoch SD", _amplitude(synthetic), _amplitude(real)])
        statistic = "median in-band rms uV: delta / theta / alpha / sigma / beta"
        rows.append([stage, statistic, _band_rms(synthetic), _band_rms(real)])
    return markdown_table(["stage", "statistic", "synthetic C3-M2", "real DREAMS central"], rows)


def spindle_tables(density: dict[str, dict], agreement: dict[str, dict]) -> list[str]:
    """The N2 spindle density per scoring and the detector agreement, as Markdown."""
    return [
        markdown_table(
            ["scoring", "excerpts", "N2 minutes", "spindles in N2", "per minute of N2"],
            [
                [n, d["excerpts"], f"{d['n2_minutes']:.1f}", d["spindles"], f"{d['per_minute']:.2f}"]
                for n, d in density.items()
            ],
        ),
        markdown_table(
            ["detector vs reference", "reference spindles", "detections", "sensitivity", "precision"],
            [
                [n, a["reference"], a["detected"], f"{a['sensitivity']:.2f}", f"{a['precision']:.2f}"]
                for n, a in agreement.items()
            ],
        ),
    ]


def realism_table(realism: dict[str, dict], ceiling_row: dict) -> str:
    """Each direction of the band-power classifier and the real ceiling: kappa, balanced accuracy, F1."""
    headers = ["band-power classifier (W/N1/N2/N3)", "kappa", "balanced accuracy", "F1 W / N1 / N2 / N3"]
    rows = [
        [
            name,
            f"{r['kappa']:.2f}",
            f"{r['balanced_accuracy']:.2f}",
            " / ".join(f"{r['per_class_f1'].get(s, float('nan')):.2f}" for s in STAGES[:4]),
            next(iter(r["train_per_class"].values())),
            sum(r["test_per_class"].values()),
        ]
        for name, r in {**realism, CEILING_ROW: ceiling_row}.items()
    ]
    return markdown_table([*headers, "train per class", "test epochs"], rows)


def ceiling_blocks(ceiling: dict[str, Any], seed: int) -> list[str]:
    """The ceiling's pooled kappa / balanced accuracy per draw seed and its first draw per held-out excerpt."""
    pairs = zip(ceiling["pooled_kappa_per_draw"], ceiling["pooled_balanced_accuracy_per_draw"])
    line = "ceiling (leave one real excerpt out), pooled kappa / balanced accuracy per draw seed: " + ", ".join(
        f"{seed + d}: {k:.3f} / {b:.3f}" for d, (k, b) in enumerate(pairs)
    )
    headers = [f"held-out real excerpt (ceiling, draw seed {seed})", "kappa", "balanced accuracy"]
    rows = [
        [name, f"{r['kappa']:.2f}", f"{r['balanced_accuracy']:.2f}", " / ".join(map(str, r["test_per_class"].values()))]
        for name, r in ceiling["draws"][0]["per_group"].items()
    ]
    return [line, markdown_table([*headers, "test epochs W / N1 / N2 / N3"], rows)]


def band_figure(stats: dict[str, dict], path: Path) -> None:
    """``path`` (PNG): per stage W / N1 / N2 / N3, median relative band power (bars) with the interquartile
    range (whiskers), synthetic vs real, each bar annotated with the median in-band rms in uV."""
    stages, bands = STAGES[:4], list(BANDS)
    fig, axes = new_figure(len(stages), (3.2 * len(stages), 3.0))
    x = np.arange(len(bands))
    for ax, stage in zip(axes, stages):
        for offset, name, label in ((-0.2, "synthetic", "synthetic C3-M2"), (0.2, "real", "real DREAMS central")):
            s = stats[name][stage]
            q = np.array([s["relative_power"][b] for b in bands])  # (5, 3): 25th, 50th, 75th percentile
            ax.bar(x + offset, q[:, 1], width=0.4, yerr=[q[:, 1] - q[:, 0], q[:, 2] - q[:, 1]], label=label, capsize=2)
            for i, b in enumerate(bands):
                rms = f"{s['band_rms_uv_median'][b]:.1f}"
                ax.annotate(rms, (x[i] + offset, q[i, 2]), fontsize=6, ha="center", va="bottom")
        ax.set_yscale("log")
        ax.set_xticks(x, bands, fontsize=7)
        ax.set_title(f"{stage} (epochs {stats['synthetic'][stage]['epochs']} / {stats['real'][stage]['epochs']})")
        ax.legend(fontsize=6)
    axes[0].set_ylabel("relative power (numbers: rms uV)")
    fig.tight_layout()
    fig.savefig(path, dpi=80)


def run(args: argparse.Namespace, command: str) -> str:
    """Compare, write the tables, numbers and figure under ``args.out``; return the tables."""
    summary = {**compare(args.real_psg, args.subjects, args.seed), "command": command}
    blocks = [
        stats_table(summary["stats"]),
        *spindle_tables(summary["real_n2_spindles"], summary["project_detector_vs"]),
        realism_table(summary["realism"], summary["real_ceiling"]["row"]),
        *ceiling_blocks(summary["real_ceiling"], args.seed),
    ]
    text = "\n\n".join(blocks)
    write_report(args.out, NAME, f"`{command}`\n\n{text}", summary)
    band_figure(summary["stats"], args.out / f"{NAME}_bands.png")
    return text
