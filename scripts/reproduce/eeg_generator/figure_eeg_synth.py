"""Figure + table of the synthetic PSG against reference values (docs/eeg.md, "Synthetic polysomnography").

    .venv/bin/python scripts/reproduce/eeg_generator/figure_eeg_synth.py [--subjects 10] [--hours 9] [--compress 3] [--seed 0]
        [--out runs/figures/eeg_synth_spectra]

Generates Sleep-EDF-format nights in memory (Fpz-Cz, Pz-Oz at 100 Hz; no files), band-passes them
0.5-30 Hz as ``mvapp data prepare`` does, and writes ``<out>.png`` (mean Welch spectrum per stage of
Fpz-Cz and Pz-Oz; median relative band powers of Fpz-Cz per stage against the plausibility ranges
of ``multiview_app/data/eeg/reference.py``) and ``<out>.md`` (stage proportions after the 30-min wake
crop vs Sleep-EDF SC, and the relative band powers with their ranges).
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy.signal import welch

from multiview_app.data.eeg.preprocess import DEFAULT_BAND, bandpass, wake_crop_mask  # noqa: E402
from multiview_app.data.eeg.reference import BANDS, FPZ_CZ_RELATIVE_POWER_RANGES, SLEEP_EDF_SC_EPOCHS  # noqa: E402
from multiview_app.data.eeg.stages import STAGES  # noqa: E402
from multiview_app.data.eeg.synth import SubjectTraits, synth_night  # noqa: E402
from multiview_app.eval.bandpower import relative_band_powers  # noqa: E402
from multiview_app.experiments.reproduce import ROOT, new_figure, write_outputs  # noqa: E402

CHANNELS = ["EEG Fpz-Cz", "EEG Pz-Oz"]
FS = 100.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subjects", type=int, default=10)
    parser.add_argument("--hours", type=float, default=9.0)
    parser.add_argument("--compress", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(ROOT / "runs" / "figures" / "eeg_synth_spectra"))
    args = parser.parse_args()

    stages, spectra, rel = [], [], []
    for subject in range(args.subjects):
        traits = SubjectTraits.sample(np.random.default_rng([args.seed, subject]))
        night = synth_night(
            CHANNELS + ["EOG horizontal", "EMG submental"],
            args.hours,
            FS,
            traits,
            np.random.default_rng([args.seed, subject, 0, 1]),
            compress=args.compress,
        )
        x = bandpass(np.stack([night.signals[c] for c in CHANNELS]), FS, *DEFAULT_BAND)
        windows = x.reshape(len(CHANNELS), -1, int(30 * FS)).transpose(1, 0, 2)  # (e, 2, 3000)
        kept = wake_crop_mask(night.stages, 30.0)
        freqs, psd = welch(windows[kept], fs=FS, nperseg=int(4 * FS), axis=-1)  # (e, 2, F)
        stages.append(night.stages[kept])
        spectra.append(psd)
        rel.append(relative_band_powers(windows[kept], FS))
    stage, psd, rel = np.concatenate(stages), np.concatenate(spectra), np.concatenate(rel)

    published = np.array(list(SLEEP_EDF_SC_EPOCHS.values()), dtype=float)
    share = np.bincount(stage, minlength=5) / stage.size
    lines = [
        f"Synthetic nights: {args.subjects} subjects, {args.hours:g}-h nights, --compress {args.compress}, "
        f"seed {args.seed}; {stage.size} epochs after the 30-min wake crop.",
        "",
        "| stage share | " + " | ".join(STAGES) + " |",
        "|---" * 6 + "|",
        "| Sleep-EDF SC (Supratak et al. 2017, Table I; recomputed from the hypnograms, reference.py) | "
        + " | ".join(f"{100 * v:.1f} %" for v in published / published.sum())
        + " |",
        "| synthetic | " + " | ".join(f"{100 * v:.1f} %" for v in share) + " |",
        "",
        "| Fpz-Cz, median relative power | " + " | ".join(BANDS) + " |",
        "|---" * 6 + "|",
    ]
    medians = {}
    for k, name in enumerate(STAGES):
        medians[name] = np.median(rel[stage == k, 0], axis=0)
        cells = [f"{m:.3f} ({lo:g}-{hi:g})" for m, (lo, hi) in zip(medians[name], FPZ_CZ_RELATIVE_POWER_RANGES[name])]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Cells: synthetic median (plausibility range, UNVERIFIED, reference.py).")

    fig, axes = new_figure(3, (15, 3.8))
    for c, ax in enumerate(axes[:2]):
        for k, name in enumerate(STAGES):
            ax.semilogy(freqs, psd[stage == k, c].mean(0), label=name)
        ax.set_xlim(0, 30)
        ax.set_ylim(0.1, 1e4)
        ax.set_xlabel("Hz")
        ax.set_ylabel("uV^2 / Hz")
        ax.set_title(f"synthetic {CHANNELS[c]}: mean spectrum per stage")
        ax.legend(fontsize=8)
    ax = axes[2]
    width = 0.15
    for k, name in enumerate(STAGES):
        x = np.arange(len(BANDS)) + (k - 2) * width
        lows, highs = zip(*FPZ_CZ_RELATIVE_POWER_RANGES[name])
        ax.bar(x, np.array(highs) - np.array(lows), width, bottom=lows, alpha=0.3, color=f"C{k}")
        ax.plot(x, medians[name], "o", color=f"C{k}", label=f"{name} synthetic")
    ax.set_yscale("log")
    ax.set_xticks(np.arange(len(BANDS)), BANDS)
    ax.set_title("Fpz-Cz relative power: synthetic (dots) vs range (bars)")
    ax.legend(fontsize=7)
    write_outputs(args.out, lines, fig)


if __name__ == "__main__":
    main()
