"""Wake and N1 of the generator vs the real DREAMS W / S1 epochs, young-adult and Sleep-EDF SC cohorts apart.

Usage: python scripts/reproduce/eeg_generator/compare_wake_n1.py --out DIR [--real-psg DIR] [--subjects 6] [--seed 0] [--figure PNG]

Real EEG: the central derivation (C3-A1 / CZ-A1) of the 8 DREAMS excerpts (``--real-psg``, default
``$MVAPP_REAL_PSG``; read in place), 30-s epochs by the card's rule; real EOG / EMG: ``excerpt3.edf``, the only
full PSG (EOG1-A1, EOG2-A1, EMG1 at 50 Hz; one person). Synthetic: C3-M2, E1-M2 and Chin1-Chin2 of ``--subjects``
compressed 9-h nights per cohort (``SubjectTraits.sample(default_rng([seed, s]))``, then ``with_cohort``: the
young-adult cohort of the PhysioNet-format nights, the SC cohort of the Sleep-EDF-format ones). EEG as prepared
windows (100 Hz, 0.5-30 Hz, not z-scored); EOG / EMG resampled to the real file's 50 Hz. Per stage W / N1 (N2 for
reference): median Welch spectrum (log10 uV^2/Hz), relative band power and the alpha (8-12 Hz) share, EEG epoch SD,
EOG rms in 0.3-4 Hz (eye movements, blinks) and EMG rms in 10-24 Hz (the band both rates hold), and each stage's
level relative to the same person's N2 (removes the gain of the recording). Excerpt 3 is sampled at 50 Hz: its
spectrum and beta power end at 25 Hz (the figure shows 0.5-24 Hz). Spread: per real excerpt / synthetic
subject, the median over people and the min-max range. Writes ``DIR/wake_n1.md`` / ``.json`` and the figure.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np
from scipy.signal import welch

from multiview_app.bench import command_line, markdown_table
from multiview_app.data.eeg.dreams import edf_microvolts, find_excerpts, read_dreams, read_rk_hypnogram, rk_epochs
from multiview_app.data.eeg.preprocess import bandpass, resample
from multiview_app.data.eeg.signal_stats import stage_epochs
from multiview_app.data.eeg.stages import EPOCH_SECONDS, STAGES
from multiview_app.data.eeg.synth import SubjectTraits, synth_night
from multiview_app.eval.bandpower import BANDS

REAL_PSG_ENV = "MVAPP_REAL_PSG"
SFREQ = 100.0
PERIPHERAL_SFREQ = 50.0  # the real EOG / EMG rate (excerpt3.edf)
EOG_BAND, EMG_BAND = (0.3, 4.0), (10.0, 24.0)
COMPARED = ("W", "N1", "N2")
COHORTS = ("young-adult", "sleep-edf-sc")
REAL_PERIPHERAL = {"eog": "EOG1-A1", "emg": "EMG1"}
SYNTH_PERIPHERAL = {"eog": "E1-M2", "emg": "Chin1-Chin2"}


def eeg_features(epochs: np.ndarray) -> dict[str, np.ndarray]:
    """Per epoch ``(e, T)`` at 100 Hz: Welch spectrum ``(e, f)`` (log10 uV^2/Hz, 0.5-30 Hz), relative band
    power ``(e, 5)``, SD ``(e,)`` uV."""
    freqs, psd = welch(epochs, fs=SFREQ, nperseg=int(2 * SFREQ), axis=-1)
    keep = (freqs >= 0.5) & (freqs <= 30)
    in_band = [(freqs >= lo) & (freqs < hi) for lo, hi in BANDS.values()]
    powers = np.stack([psd[:, m].sum(axis=1) for m in in_band], axis=1)
    return {
        "freqs": freqs[keep],
        "log_psd": np.log10(psd[:, keep] + 1e-12),
        "relative": powers / powers.sum(axis=1, keepdims=True),
        "sd": epochs.std(axis=1),
    }


def band_rms(signal: np.ndarray, fs: float, labels: np.ndarray, band: tuple[float, float]) -> np.ndarray:
    """rms uV in ``band`` of every 30-s epoch of one channel at ``fs`` (resampled to 50 Hz first)."""
    x = bandpass(resample(np.asarray(signal, dtype=np.float64), fs, PERIPHERAL_SFREQ), PERIPHERAL_SFREQ, *band)
    per_epoch = int(EPOCH_SECONDS * PERIPHERAL_SFREQ)
    n = min(labels.size, x.size // per_epoch)
    return np.sqrt((x[: n * per_epoch].reshape(n, per_epoch) ** 2).mean(axis=1))


def person_summary(
    eeg: tuple[np.ndarray, np.ndarray], peripheral: dict[str, np.ndarray] | None, labels30: np.ndarray | None
) -> dict[str, dict]:
    """Per stage of one person: epochs, median spectrum, median relative power, median SD, and (when given)
    median EOG / EMG rms, each also over the person's N2 median."""
    epochs, labels = eeg
    feats = eeg_features(epochs)
    out: dict[str, dict] = {}
    for stage in COMPARED:
        code = STAGES.index(stage)
        chosen = labels == code
        if not chosen.any():
            continue
        row = {
            "epochs": int(chosen.sum()),
            "log_psd": np.median(feats["log_psd"][chosen], axis=0).tolist(),
            "relative": dict(zip(BANDS, np.median(feats["relative"][chosen], axis=0).tolist())),
            "sd_uv": float(np.median(feats["sd"][chosen])),
        }
        if peripheral is not None and labels30 is not None:
            for name, rms in peripheral.items():
                picked = rms[labels30[: rms.size] == code]
                if picked.size:
                    row[f"{name}_rms_uv"] = float(np.median(picked))
        out[stage] = row
    for row in out.values():
        if "N2" in out:
            row["sd_over_n2"] = row["sd_uv"] / out["N2"]["sd_uv"]
            for name in ("eog", "emg"):
                if f"{name}_rms_uv" in row and f"{name}_rms_uv" in out["N2"]:
                    row[f"{name}_over_n2"] = row[f"{name}_rms_uv"] / out["N2"][f"{name}_rms_uv"]
    return out


def real_people(folder: Path) -> dict[str, dict]:
    """Per DREAMS excerpt: :func:`person_summary` of its central EEG (EOG / EMG for excerpt 3's full PSG)."""
    excerpts, _ = find_excerpts(folder)
    if not excerpts:
        raise SystemExit(f"{folder}: no DREAMS excerpts (excerptN.txt) found")
    people = {}
    for excerpt in excerpts:
        recording = read_dreams(excerpt, ["central"])
        eeg = stage_epochs(recording.signals[0], recording.sfreqs[0], recording.epoch_labels, SFREQ)
        edf = folder / f"{excerpt.name}.edf"
        peripheral = labels30 = None
        if edf.is_file():
            data, _ = edf_microvolts(edf, list(REAL_PERIPHERAL.values()))
            labels30, _ = rk_epochs(read_rk_hypnogram(folder / f"Hypnogram_{excerpt.name}.txt"))
            peripheral = {
                name: band_rms(row, PERIPHERAL_SFREQ, labels30, EOG_BAND if name == "eog" else EMG_BAND)
                for name, row in zip(REAL_PERIPHERAL, data)
            }
        people[excerpt.name] = person_summary(eeg, peripheral, labels30)
    return people


def synthetic_people(cohort: str, subjects: int, seed: int) -> dict[str, dict]:
    """Per synthetic subject of ``cohort``: :func:`person_summary` of C3-M2, E1-M2 and Chin1-Chin2."""
    people = {}
    channels = ["C3-M2", *SYNTH_PERIPHERAL.values()]
    for s in range(subjects):
        traits = SubjectTraits.sample(np.random.default_rng([seed, s])).with_cohort(
            cohort, np.random.default_rng([seed, s, 7])
        )
        night = synth_night(channels, 9.0, SFREQ, traits, np.random.default_rng([seed, s, 2]), compress=4)
        eeg = stage_epochs(night.signals["C3-M2"], SFREQ, night.stages, SFREQ)
        peripheral = {
            name: band_rms(night.signals[ch], SFREQ, night.stages, EOG_BAND if name == "eog" else EMG_BAND)
            for name, ch in SYNTH_PERIPHERAL.items()
        }
        people[f"{cohort}-{s}"] = person_summary(eeg, peripheral, night.stages)
    return people


def spread(people: dict[str, dict], stage: str, key: str, band: str | None = None) -> str:
    """``median (min-max)`` over people of one statistic (``n`` people when fewer than all have it)."""
    values = [p[stage][key][band] if band else p[stage][key] for p in people.values() if stage in p and key in p[stage]]
    if not values:
        return "-"
    v = np.asarray(values)
    text = f"{np.median(v):.3g} ({v.min():.3g}-{v.max():.3g})" if v.size > 1 else f"{v[0]:.3g}"
    return text + (f" n={v.size}" if v.size != len(people) else "")


def table(groups: dict[str, dict[str, dict]]) -> tuple[list[str], list[list[str]]]:
    rows = []
    for stage in COMPARED:
        rows.append([stage, "epochs per person"] + [spread(g, stage, "epochs") for g in groups.values()])
        for band in BANDS:
            rows.append(
                [stage, f"relative {band} power"] + [spread(g, stage, "relative", band) for g in groups.values()]
            )
        for key, label in (
            ("sd_uv", "EEG epoch SD uV"),
            ("sd_over_n2", "EEG SD / own N2"),
            ("eog_rms_uv", f"EOG rms uV {EOG_BAND[0]:g}-{EOG_BAND[1]:g} Hz"),
            ("eog_over_n2", "EOG / own N2"),
            ("emg_rms_uv", f"EMG rms uV {EMG_BAND[0]:g}-{EMG_BAND[1]:g} Hz"),
            ("emg_over_n2", "EMG / own N2"),
        ):
            rows.append([stage, label] + [spread(g, stage, key) for g in groups.values()])
    return ["stage", "statistic (median over people, min-max)", *groups], rows


def figure(groups: dict[str, dict[str, dict]], freqs: np.ndarray, path: Path) -> None:
    """Median spectra of W and N1 (per group: median over people, band = min-max of people) and the EOG / EMG
    level over the person's own N2."""
    from multiview_app.experiments.reproduce import new_figure

    fig, axes = new_figure(3, (13.0, 3.6))
    shown = freqs <= PERIPHERAL_SFREQ / 2 - 1  # excerpt 3 is sampled at 50 Hz: nothing above 25 Hz
    for ax, stage in zip(axes[:2], ("W", "N1")):
        for name, people in groups.items():
            curves = np.array([p[stage]["log_psd"] for p in people.values() if stage in p])[:, shown]
            ax.plot(freqs[shown], np.median(curves, axis=0), label=f"{name} (n={len(curves)})")
            ax.fill_between(freqs[shown], curves.min(axis=0), curves.max(axis=0), alpha=0.15)
        ax.set_title(f"{stage}: central EEG spectrum (median, min-max)", fontsize=9)
        ax.set_xlabel("Hz")
        ax.set_ylabel("log10 uV^2/Hz")
        ax.legend(fontsize=7)
    ax = axes[2]
    labels = [f"{kind} {stage}" for kind in ("EOG", "EMG") for stage in ("W", "N1")]
    x = np.arange(len(labels))
    for i, (name, people) in enumerate(groups.items()):
        values = [
            np.median(
                [p[s][f"{k.lower()}_over_n2"] for p in people.values() if f"{k.lower()}_over_n2" in p.get(s, {})]
                or [np.nan]
            )
            for k in ("EOG", "EMG")
            for s in ("W", "N1")
        ]
        ax.bar(x + (i - 1) * 0.27, values, width=0.27, label=name)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_yscale("log")
    ax.set_title("EOG / EMG rms over own N2 (real: excerpt 3)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder for wake_n1.md / .json")
    parser.add_argument("--figure", help="PNG path of the figure (default: DIR/wake_n1.png)")
    parser.add_argument(
        "--real-psg",
        default=os.environ.get(REAL_PSG_ENV),
        help=f"folder holding dreams-spindles/ (default ${REAL_PSG_ENV})",
    )
    parser.add_argument("--subjects", type=int, default=6, help="synthetic subjects per cohort")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not args.real_psg:
        raise SystemExit(f"--real-psg (or ${REAL_PSG_ENV}) is required: the folder holding dreams-spindles/")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    groups = {"real DREAMS": real_people(Path(args.real_psg) / "dreams-spindles")}
    for cohort in COHORTS:
        groups[f"synthetic {cohort}"] = synthetic_people(cohort, args.subjects, args.seed)
    freqs = eeg_features(np.zeros((1, int(EPOCH_SECONDS * SFREQ))))["freqs"]
    header, rows = table(groups)
    text = f"`{command_line()}`\n\n" + markdown_table(header, rows)
    (out / "wake_n1.md").write_text(text + "\n")
    (out / "wake_n1.json").write_text(json.dumps({"freqs": freqs.tolist(), "groups": groups}, indent=1))
    figure(groups, freqs, Path(args.figure) if args.figure else out / "wake_n1.png")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
