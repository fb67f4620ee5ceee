"""``mvapp experiment synth-check spectra``: spectra, band powers and stage shares of synthetic Sleep-EDF-format
nights against reference values (docs/eeg.md, "Synthetic polysomnography").

Generates nights in memory (Fpz-Cz, Pz-Oz at 100 Hz; no files), band-passes them 0.5-30 Hz as ``mvapp data
prepare`` does, and writes ``<out>.png`` (mean Welch spectrum per stage of Fpz-Cz and Pz-Oz; median relative band
powers of Fpz-Cz per stage against the plausibility ranges of ``multiview_app/data/eeg/reference.py``) and
``<out>.md`` (stage proportions after the 30-min wake crop vs Sleep-EDF SC, and the relative band powers with
their ranges)."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
from scipy.signal import welch

from ...data.eeg.preprocess import DEFAULT_BAND, bandpass, wake_crop_mask
from ...data.eeg.reference import BANDS, FPZ_CZ_RELATIVE_POWER_RANGES, SLEEP_EDF_SC_EPOCHS
from ...data.eeg.stages import STAGES
from ...data.eeg.synth import SubjectTraits, synth_night
from ...eval.bandpower import relative_band_powers
from ..reproduce import new_figure, write_outputs

CHANNELS = ["EEG Fpz-Cz", "EEG Pz-Oz"]
FS = 100.0


def night_spectra(subjects: int, hours: float, compress: int, seed: int) -> dict[str, np.ndarray]:
    """Of every epoch kept by the 30-min wake crop: ``stage (e,)``, Welch ``psd (e, 2, F)`` with ``freqs (F,)``
    (4-s segments) and relative band powers ``relative (e, 2, 5)`` of Fpz-Cz and Pz-Oz."""
    stages, spectra, rel = [], [], []
    for subject in range(subjects):
        traits = SubjectTraits.sample(np.random.default_rng([seed, subject]))
        rng = np.random.default_rng([seed, subject, 0, 1])
        night = synth_night(CHANNELS + ["EOG horizontal", "EMG submental"], hours, FS, traits, rng, compress=compress)
        x = bandpass(np.stack([night.signals[c] for c in CHANNELS]), FS, *DEFAULT_BAND)
        windows = x.reshape(len(CHANNELS), -1, int(30 * FS)).transpose(1, 0, 2)  # (e, 2, 3000)
        kept = wake_crop_mask(night.stages, 30.0)
        freqs, psd = welch(windows[kept], fs=FS, nperseg=int(4 * FS), axis=-1)  # (e, 2, F)
        stages.append(night.stages[kept])
        spectra.append(psd)
        rel.append(relative_band_powers(windows[kept], FS))
    return {
        "stage": np.concatenate(stages),
        "freqs": freqs,
        "psd": np.concatenate(spectra),
        "relative": np.concatenate(rel),
    }


def table_lines(args: argparse.Namespace, stage: np.ndarray, medians: dict[str, np.ndarray]) -> list[str]:
    """Stage shares vs Sleep-EDF SC and Fpz-Cz median relative powers vs their ranges, as Markdown lines."""
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
    for name in STAGES:
        cells = [f"{m:.3f} ({lo:g}-{hi:g})" for m, (lo, hi) in zip(medians[name], FPZ_CZ_RELATIVE_POWER_RANGES[name])]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines + ["", "Cells: synthetic median (plausibility range, UNVERIFIED, reference.py)."]


def spectra_figure(data: dict[str, np.ndarray], medians: dict[str, np.ndarray]) -> Any:
    """Mean spectrum per stage of each channel and the Fpz-Cz medians (dots) against their ranges (bars)."""
    fig, axes = new_figure(3, (15, 3.8))
    for c, ax in enumerate(axes[:2]):
        for k, name in enumerate(STAGES):
            ax.semilogy(data["freqs"], data["psd"][data["stage"] == k, c].mean(0), label=name)
        ax.set(xlim=(0, 30), ylim=(0.1, 1e4), xlabel="Hz", ylabel="uV^2 / Hz")
        ax.set_title(f"synthetic {CHANNELS[c]}: mean spectrum per stage")
        ax.legend(fontsize=8)
    ax, width = axes[2], 0.15
    for k, name in enumerate(STAGES):
        x = np.arange(len(BANDS)) + (k - 2) * width
        lows, highs = zip(*FPZ_CZ_RELATIVE_POWER_RANGES[name])
        ax.bar(x, np.array(highs) - np.array(lows), width, bottom=lows, alpha=0.3, color=f"C{k}")
        ax.plot(x, medians[name], "o", color=f"C{k}", label=f"{name} synthetic")
    ax.set_yscale("log")
    ax.set_xticks(np.arange(len(BANDS)), BANDS)
    ax.set_title("Fpz-Cz relative power: synthetic (dots) vs range (bars)")
    ax.legend(fontsize=7)
    return fig


def run(args: argparse.Namespace, command: str) -> str:
    """Synthesize, write ``<out>.md`` and ``<out>.png``; return the table (``command`` is its first line)."""
    data = night_spectra(args.subjects, args.hours, args.compress, args.seed)
    medians = {name: np.median(data["relative"][data["stage"] == k, 0], axis=0) for k, name in enumerate(STAGES)}
    lines = [f"`{command}`", "", *table_lines(args, data["stage"], medians)]
    write_outputs(args.out, lines, spectra_figure(data, medians))
    return ""
