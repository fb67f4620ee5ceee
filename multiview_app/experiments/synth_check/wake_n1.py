"""``mvapp experiment synth-check wake-n1``: wake and N1 of the generator against the real DREAMS W / S1 epochs,
the young-adult and Sleep-EDF SC cohorts apart.

Real EEG: the central derivation (C3-A1 / CZ-A1) of the 8 DREAMS excerpts (``dreams-spindles/`` under
``--real-psg``; read in place), 30-s epochs by the card's rule; real frontal bipolar EEG, EOG and EMG:
``excerpt3.edf``, the only full PSG (FP1-A1 minus C3-A1 = FP1-C3, the nearest real derivation to Sleep-EDF's
Fpz-Cz; EOG1-A1, EMG1; 50 Hz). Synthetic: C3-M2, EEG Fpz-Cz, E1-M2 and Chin1-Chin2 of ``--subjects`` compressed
9-h nights per cohort (:func:`.common.synthetic_subject` with the cohort: the young-adult cohort of the
PhysioNet-format nights, the SC cohort, aged 25-101, of the Sleep-EDF-format ones). EEG as prepared windows
(100 Hz, 0.5-30 Hz, not z-scored); EOG / EMG resampled to the real file's 50 Hz. Per stage (W and N1; N2, N3,
REM for context): median Welch spectrum, relative band power, EEG epoch SD, EOG rms in 0.3-2 Hz (slow eye
movements), fast eye movements per minute (|slope| of the 0.3-4 Hz EOG above 6 times its median in the person's
N2, onsets >= 0.3 s apart; blinks count too), EMG rms in 10-24 Hz, and each level relative to the same person's
N2. Spread: per real excerpt / synthetic subject, the median over people and the min-max range.

Realism per cohort: the band-power classifier of ``eval.realism`` fitted on one cohort's synthetic C3-M2 epochs
stages the real central epochs, and fitted on every real epoch stages the cohort's synthetic ones; beside them
the ceiling, leave one real excerpt out. Per draw seed ``--seed`` .. ``--seed`` + 2: pooled kappa, W / N1 recall
pooled and per real excerpt / synthetic subject. Writes ``OUT/wake_n1.md`` / ``.json`` and the figure.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from scipy.signal import welch

from ...data.eeg.dreams import edf_microvolts, read_rk_hypnogram, rk_epochs
from ...data.eeg.preprocess import bandpass, resample
from ...data.eeg.signal_stats import stage_epochs
from ...data.eeg.stages import EPOCH_SECONDS, STAGES
from ...eval.bandpower import BANDS
from ...eval.realism import cross_staging, leave_one_group_out_staging
from ..reproduce import new_figure
from .common import SFREQ, dreams_central, markdown_table, real_folder, synthetic_subject, write_report

NAME = "wake_n1"

PERIPHERAL_SFREQ = 50.0  # the real EOG / EMG rate (excerpt3.edf)
SEM_BAND, EMG_BAND = (0.3, 2.0), (10.0, 24.0)
FAST_EYE_BAND, FAST_EYE_SLOPE_X, FAST_EYE_GAP_S = (0.3, 4.0), 6.0, 0.3
COMPARED = ("W", "N1", "N2", "N3", "REM")
COHORTS = ("young-adult", "sleep-edf-sc")
REAL_CHANNELS = {"frontal": ("FP1-A1", "C3-A1"), "eog": "EOG1-A1", "emg": "EMG1"}
SYNTH_CHANNELS = {"central": "C3-M2", "frontal": "EEG Fpz-Cz", "eog": "E1-M2", "emg": "Chin1-Chin2"}
REALISM_CLASSES = (0, 1, 2, 3)
RECALL_MIN_EPOCHS = 3
DRAWS = 3


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
        "relative": powers / np.maximum(powers.sum(axis=1, keepdims=True), 1e-12),
        "sd": epochs.std(axis=1),
    }


def peripheral_epochs(signal: np.ndarray, fs: float, n_labels: int, band: tuple[float, float]) -> np.ndarray:
    """One channel at ``fs`` -> 50 Hz, band-passed to ``band``, cut into 30-s epochs ``(e, 1500)``."""
    x = bandpass(resample(np.asarray(signal, dtype=np.float64), fs, PERIPHERAL_SFREQ), PERIPHERAL_SFREQ, *band)
    per_epoch = int(EPOCH_SECONDS * PERIPHERAL_SFREQ)
    n = min(n_labels, x.size // per_epoch)
    return x[: n * per_epoch].reshape(n, per_epoch)


def fast_eye_movements_per_min(epochs: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Per 30-s EOG epoch ``(e, T)`` (50 Hz, 0.3-4 Hz): onsets of a ``|slope|`` above ``FAST_EYE_SLOPE_X``
    times the median ``|slope|`` of the person's N2 epochs (a threshold free of the recording's gain), at
    least ``FAST_EYE_GAP_S`` apart, per minute ``(e,)``."""
    slope = np.abs(np.diff(epochs, axis=1))
    n2 = labels[: len(epochs)] == STAGES.index("N2")
    steep = slope > FAST_EYE_SLOPE_X * np.median(slope[n2] if n2.any() else slope)
    gap = int(FAST_EYE_GAP_S * PERIPHERAL_SFREQ)
    counts = np.zeros(len(epochs))
    for i, row in enumerate(steep):
        last = -gap - 1
        for t in np.flatnonzero(row):
            if t - last > gap:
                counts[i] += 1
            last = t
    return counts * 60.0 / EPOCH_SECONDS


def peripheral_features(eog: np.ndarray, emg: np.ndarray, fs: float, labels: np.ndarray) -> dict[str, np.ndarray]:
    """Per 30-s epoch: slow-eye-movement rms, fast eye movements per minute, EMG rms (each ``(e,)``)."""
    rms = lambda x: np.sqrt((x**2).mean(axis=1))  # noqa: E731
    return {
        "sem_rms_uv": rms(peripheral_epochs(eog, fs, labels.size, SEM_BAND)),
        "fast_eye_per_min": fast_eye_movements_per_min(peripheral_epochs(eog, fs, labels.size, FAST_EYE_BAND), labels),
        "emg_rms_uv": rms(peripheral_epochs(emg, fs, labels.size, EMG_BAND)),
    }


PERIPHERAL_KEYS = ("sem_rms_uv", "fast_eye_per_min", "emg_rms_uv")


def person_summary(
    central: tuple[np.ndarray, np.ndarray],
    frontal: tuple[np.ndarray, np.ndarray] | None,
    peripheral: dict[str, np.ndarray] | None,
    labels30: np.ndarray | None,
) -> dict[str, dict]:
    """Per stage of one person: epochs, median central spectrum / relative power / SD, the same of the
    frontal bipolar derivation (when given, keys ``frontal_*``), median EOG / EMG features (when given), and
    SD / EOG / EMG over the person's N2 median."""
    out: dict[str, dict] = {stage: {} for stage in COMPARED}
    for prefix, eeg in (("", central), ("frontal_", frontal)):
        if eeg is None:
            continue
        epochs, labels = eeg
        feats = eeg_features(epochs)
        for stage in COMPARED:
            chosen = labels == STAGES.index(stage)
            if chosen.any():
                out[stage].update(
                    {
                        f"{prefix}epochs": int(chosen.sum()),
                        f"{prefix}log_psd": np.median(feats["log_psd"][chosen], axis=0).tolist(),
                        f"{prefix}relative": dict(zip(BANDS, np.median(feats["relative"][chosen], axis=0).tolist())),
                        f"{prefix}sd_uv": float(np.median(feats["sd"][chosen])),
                    }
                )
    if peripheral is not None and labels30 is not None:
        for stage in COMPARED:
            for name, values in peripheral.items():
                picked = values[labels30[: values.size] == STAGES.index(stage)]
                if picked.size:
                    out[stage][name] = float(np.median(picked))
    out = {stage: row for stage, row in out.items() if row}
    reference = out.get("N2", {})
    for row in out.values():
        for key in ("sd_uv", "frontal_sd_uv", *PERIPHERAL_KEYS):
            if key in row and reference.get(key):
                row[f"{key}_over_n2"] = row[key] / reference[key]
    return out


def real_people(folder: Path) -> tuple[dict[str, dict], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per DREAMS excerpt: :func:`person_summary` of its central EEG (frontal bipolar, EOG and EMG for
    excerpt 3's full PSG); and every central epoch ``(e, 3000)`` uV with its label and excerpt ``(e,)``."""
    people, pooled = {}, ([], [], [])
    for name, _, epochs, labels in dreams_central(folder):
        for store, values in zip(pooled, (epochs, labels, np.full(labels.shape, name))):
            store.append(values)
        edf = folder / f"{name}.edf"
        frontal = peripheral = labels30 = None
        if edf.is_file():
            active, reference = REAL_CHANNELS["frontal"]
            data, _ = edf_microvolts(edf, [active, reference, REAL_CHANNELS["eog"], REAL_CHANNELS["emg"]])
            labels30, _ = rk_epochs(read_rk_hypnogram(folder / f"Hypnogram_{name}.txt"))
            frontal = stage_epochs(data[0] - data[1], PERIPHERAL_SFREQ, labels30, SFREQ)
            peripheral = peripheral_features(data[2], data[3], PERIPHERAL_SFREQ, labels30)
        people[name] = person_summary((epochs, labels), frontal, peripheral, labels30)
    return people, tuple(np.concatenate(p) for p in pooled)


def synthetic_people(
    cohort: str, subjects: int, seed: int
) -> tuple[dict[str, dict], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per synthetic subject of ``cohort``: :func:`person_summary` of C3-M2, Fpz-Cz, E1-M2 and Chin1-Chin2;
    and every C3-M2 epoch ``(e, 3000)`` uV with its label and subject ``(e,)``."""
    people, epochs, labels, subject = {}, [], [], []
    for s in range(subjects):
        night = synthetic_subject(list(SYNTH_CHANNELS.values()), seed, s, cohort)
        central = stage_epochs(night.signals[SYNTH_CHANNELS["central"]], SFREQ, night.stages, SFREQ)
        frontal = stage_epochs(night.signals[SYNTH_CHANNELS["frontal"]], SFREQ, night.stages, SFREQ)
        peripheral = peripheral_features(
            night.signals[SYNTH_CHANNELS["eog"]], night.signals[SYNTH_CHANNELS["emg"]], SFREQ, night.stages
        )
        people[f"{cohort}-{s}"] = person_summary(central, frontal, peripheral, night.stages)
        epochs.append(central[0])
        labels.append(central[1])
        subject.append(np.full(central[1].shape, f"{cohort}-{s}"))
    return people, (np.concatenate(epochs), np.concatenate(labels), np.concatenate(subject))


def recall_by_excerpt(y_true: np.ndarray, y_pred: np.ndarray, groups: np.ndarray) -> dict[str, dict]:
    """W and N1 recall pooled and per group (real excerpt or synthetic subject; groups with >=
    ``RECALL_MIN_EPOCHS`` epochs of the stage)."""
    out = {}
    for stage in ("W", "N1"):
        code = STAGES.index(stage)
        per = {
            str(g): float((y_pred[(groups == g) & (y_true == code)] == code).mean())
            for g in sorted(set(groups.tolist()))
            if ((groups == g) & (y_true == code)).sum() >= RECALL_MIN_EPOCHS
        }
        out[stage] = {"pooled": float((y_pred[y_true == code] == code).mean()), "per_excerpt": per}
    return out


def realism(
    real: tuple[np.ndarray, np.ndarray, np.ndarray],
    synthetic: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
    seed: int,
) -> dict[str, list[dict]]:
    """Per direction and draw seed: fitted on each cohort's synthetic epochs, staging the real ones; fitted
    on every real epoch, staging each cohort's synthetic ones (the direction of a stager trained on real
    nights); fitted on the other real excerpts (ceiling). Pooled kappa on W/N1/N2/N3 and
    :func:`recall_by_excerpt` (per real excerpt or synthetic subject)."""
    epochs, labels, groups = real
    out: dict[str, list[dict]] = {}
    for name, (syn_epochs, syn_labels, _) in synthetic.items():
        for label, train, (test_epochs, test_labels, test_groups) in (
            (f"trained on synthetic {name}, stages real", (syn_epochs, syn_labels), real),
            (f"trained on real, stages synthetic {name}", (epochs, labels), synthetic[name]),
        ):
            keep = np.isin(test_labels, REALISM_CLASSES)
            out[label] = []
            for d in range(DRAWS):
                result = cross_staging(
                    train, (test_epochs, test_labels), SFREQ, REALISM_CLASSES, seed=seed + d, predictions=True
                )
                out[label].append(
                    {
                        "kappa": result["kappa"],
                        **recall_by_excerpt(test_labels[keep], result["predicted"], test_groups[keep]),
                    }
                )
    out["trained on the other real excerpts (ceiling)"] = []
    for d in range(DRAWS):
        result = leave_one_group_out_staging(
            epochs, labels, groups, SFREQ, REALISM_CLASSES, seed=seed + d, predictions=True
        )
        out["trained on the other real excerpts (ceiling)"].append(
            {"kappa": result["pooled"]["kappa"], **recall_by_excerpt(*result["predicted"])}
        )
    return out


def realism_rows(results: dict[str, list[dict]]) -> tuple[list[str], list[list[str]]]:
    """Per training source: kappa per draw, W / N1 recall pooled per draw and per excerpt (draw 1)."""

    def per_excerpt(stage: str, draws: list[dict]) -> str:
        values = np.array(list(draws[0][stage]["per_excerpt"].values()))
        return f"{np.median(values):.2f} ({values.min():.2f}-{values.max():.2f}) n={values.size}"

    rows = [
        [
            name,
            " / ".join(f"{d['kappa']:.2f}" for d in draws),
            " / ".join(f"{d['W']['pooled']:.2f}" for d in draws),
            per_excerpt("W", draws),
            " / ".join(f"{d['N1']['pooled']:.2f}" for d in draws),
            per_excerpt("N1", draws),
        ]
        for name, draws in results.items()
    ]
    header = [
        "band-power classifier (central lead, W/N1/N2/N3)",
        "kappa (draws)",
        "W recall pooled (draws)",
        f"W recall per excerpt / subject, median (min-max), >= {RECALL_MIN_EPOCHS} W epochs",
        "N1 recall pooled (draws)",
        f"N1 recall per excerpt / subject, median (min-max), >= {RECALL_MIN_EPOCHS} N1 epochs",
    ]
    return header, rows


def spread(people: dict[str, dict], stage: str, key: str, band: str | None = None) -> str:
    """``median (min-max)`` over people of one statistic (``n`` people when fewer than all have it)."""
    values = [p[stage][key][band] if band else p[stage][key] for p in people.values() if key in p.get(stage, {})]
    if not values:
        return "-"
    v = np.asarray(values)
    text = f"{np.median(v):.3g} ({v.min():.3g}-{v.max():.3g})" if v.size > 1 else f"{v[0]:.3g}"
    return text + (f" n={v.size}" if v.size != len(people) else "")


def table(groups: dict[str, dict[str, dict]]) -> tuple[list[str], list[list[str]]]:
    """Per stage and statistic, :func:`spread` of each group of people (real excerpts, synthetic cohorts)."""
    rows = []
    for stage in COMPARED:
        for prefix, lead in (("", "central"), ("frontal_", "frontal bipolar")):
            rows.append(
                [stage, f"{lead}: epochs per person"] + [spread(g, stage, f"{prefix}epochs") for g in groups.values()]
            )
            for band in BANDS:
                rows.append(
                    [stage, f"{lead}: relative {band} power"]
                    + [spread(g, stage, f"{prefix}relative", band) for g in groups.values()]
                )
            rows.append(
                [stage, f"{lead}: EEG epoch SD uV"] + [spread(g, stage, f"{prefix}sd_uv") for g in groups.values()]
            )
            rows.append(
                [stage, f"{lead}: EEG SD / own N2"]
                + [spread(g, stage, f"{prefix}sd_uv_over_n2") for g in groups.values()]
            )
        for key, label in (
            ("sem_rms_uv", f"EOG rms uV {SEM_BAND[0]:g}-{SEM_BAND[1]:g} Hz (slow eye movements)"),
            ("sem_rms_uv_over_n2", "slow-eye-movement rms / own N2"),
            ("fast_eye_per_min", f"fast eye movements / min (slope above {FAST_EYE_SLOPE_X:g} x own N2 median)"),
            ("emg_rms_uv", f"EMG rms uV {EMG_BAND[0]:g}-{EMG_BAND[1]:g} Hz"),
            ("emg_rms_uv_over_n2", "EMG rms / own N2"),
        ):
            rows.append([stage, label] + [spread(g, stage, key) for g in groups.values()])
    return ["stage", "statistic (median over people, min-max)", *groups], rows


def figure(groups: dict[str, dict[str, dict]], freqs: np.ndarray, path: Path) -> None:
    """Median spectra of W and N1, central (all excerpts) and frontal bipolar (real: excerpt 3), per group
    (median over people, band = min-max of people), and the EOG / EMG level over the person's own N2."""
    fig, axes = new_figure(5, (22.0, 3.8))
    shown = freqs <= PERIPHERAL_SFREQ / 2 - 1  # excerpt 3 is sampled at 50 Hz: nothing above 25 Hz
    panels = [(stage, prefix) for prefix in ("", "frontal_") for stage in ("W", "N1")]
    for ax, (stage, prefix) in zip(axes[:4], panels):
        for name, people in groups.items():
            curves = [p[stage][f"{prefix}log_psd"] for p in people.values() if f"{prefix}log_psd" in p.get(stage, {})]
            if not curves:
                continue
            curves = np.array(curves)[:, shown]
            ax.plot(freqs[shown], np.median(curves, axis=0), label=f"{name} (n={len(curves)})")
            ax.fill_between(freqs[shown], curves.min(axis=0), curves.max(axis=0), alpha=0.15)
        lead = "central C3/Cz" if not prefix else "frontal bipolar (FP1-C3 / Fpz-Cz)"
        ax.set_title(f"{stage}: {lead}", fontsize=9)
        ax.set_xlabel("Hz")
        ax.set_ylabel("log10 uV^2/Hz")
        ax.legend(fontsize=7)
    ax = axes[4]
    keys = {"SEM": "sem_rms_uv_over_n2", "fast eye": "fast_eye_per_min", "EMG": "emg_rms_uv_over_n2"}
    labels = [f"{kind} {stage}" for kind in keys for stage in ("W", "N1")]
    x = np.arange(len(labels))
    for i, (name, people) in enumerate(groups.items()):
        values = [
            np.median([p[s][key] for p in people.values() if key in p.get(s, {})] or [np.nan])
            for key in keys.values()
            for s in ("W", "N1")
        ]
        ax.bar(x + (i - 1) * 0.27, values, width=0.27, label=name)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(x, labels, fontsize=7, rotation=30)
    ax.set_yscale("log")
    ax.set_title("EOG / EMG over own N2; fast eye movements / min (real: excerpt 3)", fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80)


def run(args: argparse.Namespace, command: str) -> str:
    """Compare, write the tables, numbers and figure (``--figure``, default ``OUT/wake_n1.png``); return the text."""
    real_summary, real_epochs = real_people(real_folder(args.real_psg, "dreams-spindles"))
    groups, synthetic = {"real DREAMS": real_summary}, {}
    for cohort in COHORTS:
        groups[f"synthetic {cohort}"], synthetic[cohort] = synthetic_people(cohort, args.subjects, args.seed)
    results = realism(real_epochs, synthetic, args.seed)
    freqs = eeg_features(np.zeros((1, int(EPOCH_SECONDS * SFREQ))))["freqs"]
    text = (
        f"`{command}`\n\n"
        + markdown_table(*table(groups))
        + "\n\n"
        + markdown_table(*realism_rows(results))
        + f"\n\nkappa on W/N1/N2/N3 of every staged epoch; draw seeds {args.seed}..{args.seed + DRAWS - 1}; "
        "recall per excerpt / subject: the first draw."
    )
    write_report(args.out, NAME, text, {"freqs": freqs.tolist(), "groups": groups, "realism": results})
    figure(groups, freqs, args.figure or args.out / f"{NAME}.png")
    return text
