"""Signals of the generator vs the real DREAMS excerpts, central derivation.

Usage: python scripts/reproduce/eeg_generator/compare_eeg_signals.py --out DIR [--real-psg DIR] [--subjects 6] [--seed 0]

Real: the 8 DREAMS excerpts (``--real-psg``, default ``$MVAPP_REAL_PSG``, holding ``dreams-spindles/``,
read in place) through the DREAMS reader (channel ``central``: C3-A1 or CZ-A1), 30-s epochs by the card's
rule. Synthetic: C3-M2 of ``--subjects`` 9-h nights (``--compress 4`` excerpts, 100 Hz; subject s:
traits ``default_rng([seed, s])``). Both resampled to 100 Hz and band-passed 0.5-30 Hz as prepared
windows (not z-scored): per stage relative band power and amplitude percentiles in uV; the real N2
spindle density from both experts' scorings, the DREAMS automatic detector and the project's detector
(``signal_stats.detect_spindles``), and that detector's sensitivity / precision against each scoring;
realism both ways: a band-power classifier fitted on real epochs stages synthetic ones and the reverse
(``eval.realism.cross_staging``, Cohen's kappa on W/N1/N2/N3), and that classifier's ceiling on real data:
fitted on the other real excerpts, it stages the held-out one (``eval.realism.leave_one_group_out_staging``,
pooled over the 8 excerpts; draw seeds ``--seed`` .. ``--seed`` + 2, per excerpt for ``--seed``). Writes
``DIR/eeg_signals.md``, ``DIR/eeg_signals.json`` and ``DIR/eeg_signals_bands.png`` (per stage W-N3: median
relative band power with interquartile range and median in-band rms, synthetic vs real) and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
from pathlib import Path

import numpy as np

from multiview_app.data.eeg.dreams import find_excerpts, read_dreams, read_spindle_scoring
from multiview_app.data.eeg.preprocess import resample
from multiview_app.data.eeg.signal_stats import (
    detect_spindles,
    events_per_minute_in_stage,
    match_events,
    stage_epochs,
    stage_signal_stats,
)
from multiview_app.data.eeg.stages import STAGES
from multiview_app.data.eeg.synth import SubjectTraits, synth_night
from multiview_app.eval.bandpower import BANDS
from multiview_app.eval.realism import cross_staging, leave_one_group_out_staging

# the bench helpers (``scripts/bench/common.py``; scripts are not a package)
_COMMON = runpy.run_path(str(Path(__file__).resolve().parents[2] / "bench" / "common.py"))
command_line, markdown_table = _COMMON["command_line"], _COMMON["markdown_table"]

REAL_PSG_ENV = "MVAPP_REAL_PSG"
SFREQ = 100.0
CEILING_ROW = "trained on the other real excerpts, stages the held-out one (ceiling)"
SCORINGS = {
    "expert 1": "Visual_scoring1_{}.txt",
    "expert 2": "Visual_scoring2_{}.txt",
    "DREAMS automatic detector": "Automatic_detection_{}.txt",
}


def real_epochs(
    folder: Path,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """DREAMS central epochs ``(e, 3000)`` uV, labels ``(e,)``, the excerpt name of each epoch ``(e,)``, N2 spindles per minute per scoring
    (pooled over the excerpts that scoring covers; "project detector": ``signal_stats.detect_spindles``
    at 100 Hz), and that detector against each scoring (overlap; counts pooled over the excerpts)."""
    excerpts, _ = find_excerpts(folder)
    if not excerpts:
        raise SystemExit(f"{folder}: no DREAMS excerpts (excerptN.txt) found")
    all_epochs, all_labels, all_groups = [], [], []
    spindles = {name: [0, 0.0, 0] for name in [*SCORINGS, "project detector"]}  # count, N2 minutes, excerpts
    agreement = {
        name: {"reference": 0, "detected": 0, "found": 0, "right": 0}
        for name in [*(f"project detector vs {n}" for n in SCORINGS), "expert 2 vs expert 1"]
    }
    for excerpt in excerpts:
        recording = read_dreams(excerpt, ["central"])
        epochs, labels = stage_epochs(recording.signals[0], recording.sfreqs[0], recording.epoch_labels, SFREQ)
        all_epochs.append(epochs)
        all_labels.append(labels)
        all_groups.append(np.full(labels.shape, excerpt.name))
        detected = detect_spindles(
            resample(recording.signals[0], recording.sfreqs[0], SFREQ), SFREQ, recording.epoch_labels
        )
        events = {"project detector": detected}
        for name, pattern in SCORINGS.items():
            path = folder / pattern.format(excerpt.name)
            if path.exists():
                events[name] = read_spindle_scoring(path)
                for key, value in match_events(detected, events[name]).items():
                    if key in agreement[f"project detector vs {name}"]:
                        agreement[f"project detector vs {name}"][key] += value
        if "expert 1" in events and "expert 2" in events:  # the two experts' own agreement, for scale
            for key, value in match_events(events["expert 2"], events["expert 1"]).items():
                if key in agreement["expert 2 vs expert 1"]:
                    agreement["expert 2 vs expert 1"][key] += value
        for name, (onsets, _) in events.items():
            count, minutes = events_per_minute_in_stage(onsets, recording.epoch_labels, STAGES.index("N2"))
            spindles[name][0] += count
            spindles[name][1] += minutes
            spindles[name][2] += 1
    density = {
        name: {"spindles": c, "n2_minutes": m, "excerpts": k, "per_minute": c / m if m else float("nan")}
        for name, (c, m, k) in spindles.items()
    }
    for counts in agreement.values():
        counts["sensitivity"] = counts["found"] / counts["reference"] if counts["reference"] else float("nan")
        counts["precision"] = counts["right"] / counts["detected"] if counts["detected"] else float("nan")
    return np.concatenate(all_epochs), np.concatenate(all_labels), np.concatenate(all_groups), density, agreement


def ceiling_train_range(result: dict) -> dict[str, str]:
    """Per class, the balanced training draw of the leave-one-excerpt-out folds as ``"min-max"`` (it
    depends on which excerpt is held out)."""
    per_fold = [r["train_per_class"] for r in result["per_group"].values()]
    return {c: f"{min(f[c] for f in per_fold)}-{max(f[c] for f in per_fold)}" for c in per_fold[0]}


def synthetic_epochs(subjects: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """C3-M2 epochs ``(e, 3000)`` uV and labels of ``subjects`` compressed synthetic nights."""
    all_epochs, all_labels = [], []
    for s in range(subjects):
        night = synth_night(
            ["C3-M2"],
            9.0,
            SFREQ,
            SubjectTraits.sample(np.random.default_rng([seed, s])),
            np.random.default_rng([seed, s, 2]),
            compress=4,
        )
        epochs, labels = stage_epochs(night.signals["C3-M2"], SFREQ, night.stages, SFREQ)
        all_epochs.append(epochs)
        all_labels.append(labels)
    return np.concatenate(all_epochs), np.concatenate(all_labels)


def table_rows(stats: dict[str, dict]) -> tuple[list[str], list[list[str]]]:
    """One row per stage and statistic: synthetic vs real medians (relative power) / percentiles (uV)."""
    rows = []
    for stage in STAGES:
        real, synthetic = stats["real"][stage], stats["synthetic"][stage]
        rows.append([stage, "epochs", str(synthetic["epochs"]), str(real["epochs"])])
        if not real["epochs"] or not synthetic["epochs"]:
            continue
        for band in BANDS:

            def cell(s):
                return "{:.3f} ({:.3f}-{:.3f})".format(s["relative_power"][band][1], *s["relative_power"][band][::2])  # noqa: E731

            rows.append([stage, f"relative {band} power, median (IQR)", cell(synthetic), cell(real)])

        def cell(s):
            return f"{s['amplitude_uv']['p5']:.1f} / {s['amplitude_uv']['p95']:.1f} / {s['epoch_sd_uv_median']:.1f}"  # noqa: E731

        rows.append([stage, "uV: 5th / 95th percentile / median epoch SD", cell(synthetic), cell(real)])
        cell = lambda s: " / ".join(f"{s['band_rms_uv_median'][b]:.1f}" for b in BANDS)  # noqa: E731
        rows.append([stage, "median in-band rms uV: delta / theta / alpha / sigma / beta", cell(synthetic), cell(real)])
    return ["stage", "statistic", "synthetic C3-M2", "real DREAMS central"], rows


def band_figure(stats: dict[str, dict], path: Path) -> None:
    """``path`` (PNG): top row, per stage W / N1 / N2 / N3, median relative band power (bars) with the
    interquartile range (whiskers), synthetic vs real; bottom row, the median in-band rms in uV."""
    from multiview_app.experiments.reproduce import new_figure

    stages, bands = STAGES[:4], list(BANDS)
    fig, axes = new_figure(len(stages), (3.2 * len(stages), 3.0))
    x = np.arange(len(bands))
    for ax, stage in zip(axes, stages):
        for offset, (name, label) in zip(
            (-0.2, 0.2), (("synthetic", "synthetic C3-M2"), ("real", "real DREAMS central"))
        ):
            s = stats[name][stage]
            q = np.array([s["relative_power"][b] for b in bands])  # (5, 3): 25th, 50th, 75th percentile
            ax.bar(x + offset, q[:, 1], width=0.4, yerr=[q[:, 1] - q[:, 0], q[:, 2] - q[:, 1]], label=label, capsize=2)
            for i, b in enumerate(bands):
                ax.annotate(
                    f"{s['band_rms_uv_median'][b]:.1f}", (x[i] + offset, q[i, 2]), fontsize=6, ha="center", va="bottom"
                )
        ax.set_yscale("log")
        ax.set_xticks(x, bands, fontsize=7)
        ax.set_title(f"{stage} (epochs {stats['synthetic'][stage]['epochs']} / {stats['real'][stage]['epochs']})")
        ax.legend(fontsize=6)
    axes[0].set_ylabel("relative power (numbers: rms uV)")
    fig.tight_layout()
    fig.savefig(path, dpi=80)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for eeg_signals.md / .json")
    parser.add_argument(
        "--real-psg",
        type=Path,
        default=os.environ.get(REAL_PSG_ENV),
        help=f"folder holding dreams-spindles/ (default ${REAL_PSG_ENV})",
    )
    parser.add_argument("--subjects", type=int, default=6, help="synthetic nights (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.real_psg is None:
        raise SystemExit(f"--real-psg not given and ${REAL_PSG_ENV} not set")
    epochs, labels, excerpt_of, density, agreement = real_epochs(Path(args.real_psg) / "dreams-spindles")
    syn_epochs, syn_labels = synthetic_epochs(args.subjects, args.seed)
    stats = {
        "real": stage_signal_stats(epochs, labels, SFREQ),
        "synthetic": stage_signal_stats(syn_epochs, syn_labels, SFREQ),
    }
    realism = {
        "trained on real, stages synthetic": cross_staging(
            (epochs, labels), (syn_epochs, syn_labels), SFREQ, seed=args.seed
        ),
        "trained on synthetic, stages real": cross_staging(
            (syn_epochs, syn_labels), (epochs, labels), SFREQ, seed=args.seed
        ),
    }
    ceiling = {
        "draws": [leave_one_group_out_staging(epochs, labels, excerpt_of, SFREQ, seed=args.seed + d) for d in range(3)]
    }
    ceiling["pooled_kappa_per_draw"] = [c["pooled"]["kappa"] for c in ceiling["draws"]]
    ceiling["pooled_balanced_accuracy_per_draw"] = [c["pooled"]["balanced_accuracy"] for c in ceiling["draws"]]
    first = ceiling["draws"][0]
    ceiling["row"] = {
        "name": CEILING_ROW,
        **first["pooled"],
        "test_per_class": first["test_per_class"],
        "train_per_class": ceiling_train_range(first),
    }
    summary = {
        "stats": stats,
        "real_n2_spindles": density,
        "project_detector_vs": agreement,
        "realism": realism,
        "real_ceiling": ceiling,
        "command": command_line(),
        "synthetic_subjects": args.subjects,
        "seed": args.seed,
    }
    headers, rows = table_rows(stats)
    table = markdown_table(headers, rows)
    spindle_table = markdown_table(
        ["scoring", "excerpts", "N2 minutes", "spindles in N2", "per minute of N2"],
        [
            [n, d["excerpts"], f"{d['n2_minutes']:.1f}", d["spindles"], f"{d['per_minute']:.2f}"]
            for n, d in density.items()
        ],
    )
    agreement_table = markdown_table(
        ["detector vs reference", "reference spindles", "detections", "sensitivity", "precision"],
        [
            [n, a["reference"], a["detected"], f"{a['sensitivity']:.2f}", f"{a['precision']:.2f}"]
            for n, a in agreement.items()
        ],
    )
    realism_table = markdown_table(
        [
            "band-power classifier (W/N1/N2/N3)",
            "kappa",
            "balanced accuracy",
            "F1 W / N1 / N2 / N3",
            "train per class",
            "test epochs",
        ],
        [
            [
                name,
                f"{r['kappa']:.2f}",
                f"{r['balanced_accuracy']:.2f}",
                " / ".join(f"{r['per_class_f1'].get(s, float('nan')):.2f}" for s in STAGES[:4]),
                next(iter(r["train_per_class"].values())),
                sum(r["test_per_class"].values()),
            ]
            for name, r in {**realism, CEILING_ROW: ceiling["row"]}.items()
        ],
    )
    ceiling_table = markdown_table(
        [
            f"held-out real excerpt (ceiling, draw seed {args.seed})",
            "kappa",
            "balanced accuracy",
            "test epochs W / N1 / N2 / N3",
        ],
        [
            [
                name,
                f"{r['kappa']:.2f}",
                f"{r['balanced_accuracy']:.2f}",
                " / ".join(map(str, r["test_per_class"].values())),
            ]
            for name, r in first["per_group"].items()
        ],
    )
    ceiling_line = "ceiling (leave one real excerpt out), pooled kappa / balanced accuracy per draw seed: " + ", ".join(
        f"{args.seed + d}: {k:.3f} / {b:.3f}"
        for d, (k, b) in enumerate(zip(ceiling["pooled_kappa_per_draw"], ceiling["pooled_balanced_accuracy_per_draw"]))
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "eeg_signals.md").write_text(
        f"`{summary['command']}`\n\n{table}\n\n{spindle_table}\n\n{agreement_table}\n\n{realism_table}\n\n"
        f"{ceiling_line}\n\n{ceiling_table}\n"
    )
    (args.out / "eeg_signals.json").write_text(json.dumps(summary, indent=1))
    print(table, spindle_table, agreement_table, realism_table, ceiling_line, ceiling_table, sep="\n\n")
    band_figure(stats, args.out / "eeg_signals_bands.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
