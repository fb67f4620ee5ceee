"""``mvapp experiment synth-check psg-night``: one synthetic whole-PSG night beside the real DREAMS excerpt3
recording: hypnogram, heart rate, breathing, SpO2 and scored events on a shared time axis per column.

The synthetic night (``synth-psg --format physionet2018 --signals psg --compress 1``, subject 0 of ``--seed``;
seed 11 draws a moderate sleep-apnoea subject) is written into ``--data`` (default: a temporary folder) and read
back with ``read_physionet2018``. The real column reads ``dreams-spindles/excerpt3.edf`` under ``--real-psg``
(default ``$MVAPP_REAL_PSG``) with ``read_psg`` (stages from its ``hypnogram`` channel, events from
``event_pneumo``); without it the column holds a note. Heart rate comes from NeuroKit2's R peaks of the ECG
(30-s means; 10-s over the 30-min real excerpt), breathing is the airflow's 10-s RMS over the night's median,
SpO2 is drawn where the reader kept it (excerpt3's SAO2 reads ~0 and is left out, so its panel says so).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...data.eeg.events import event_classes
from ...data.eeg.generic import ReadReport, read_psg
from ...data.eeg.physionet2018 import read_physionet2018
from ...data.eeg.recording import Recording
from ...data.eeg.stages import EPOCH_SECONDS, STAGES
from ...data.eeg.synth import synth_psg
from .common import REAL_PSG_ENV

REAL_FILE = Path("dreams-spindles") / "excerpt3.edf"
HYPNOGRAM_ORDER = ("N3", "N2", "N1", "REM", "W")
"""Hypnogram rows, bottom to top."""
EVENT_ROWS = {"apnea_hypopnea": ("apnoea / hypopnoea", "tab:red"), "arousal": ("arousal", "tab:purple")}
EVENT_ROWS["other_respiratory"] = ("other respiratory", "tab:orange")


@dataclass
class Column:
    """What one column draws; times in seconds from the recording start, each series ``(k,)``."""

    title: str
    unit: tuple[str, float]  # axis label and seconds per unit
    stages: np.ndarray  # (e,) per 30-s epoch, negative: unscored
    heart: tuple[np.ndarray, np.ndarray]  # time, bpm
    breathing: tuple[np.ndarray, np.ndarray]  # time, airflow RMS / night median
    breathing_label: str
    spo2: tuple[np.ndarray, np.ndarray] | str  # time, %; or why it is not drawn
    events: list[tuple[float, float, str]]  # onset s, duration s, target class


def heart_rate(ecg: np.ndarray, fs: float, bin_s: float = 30.0) -> tuple[np.ndarray, np.ndarray]:
    """Mean heart rate (bpm) per ``bin_s`` from NeuroKit2's R peaks of ``ecg (n,)``: bin centres and rates."""
    import neurokit2 as nk

    _, info = nk.ecg_peaks(ecg, sampling_rate=int(round(fs)))
    peaks = np.asarray(info["ECG_R_Peaks"]) / fs
    rr = np.diff(peaks)
    keep = (rr > 0.3) & (rr < 2.0)  # 30-200 bpm: drop missed / doubled beats
    bins = (peaks[1:][keep] // bin_s).astype(int)
    edges = np.arange(int(ecg.size / fs // bin_s))
    rate = np.array([60.0 / rr[keep][bins == b].mean() if (bins == b).any() else np.nan for b in edges])
    return (edges + 0.5) * bin_s, rate


def airflow_envelope(flow: np.ndarray, fs: float, block_s: float = 10.0) -> tuple[np.ndarray, np.ndarray]:
    """RMS of ``flow (n,)`` (mean removed) per ``block_s`` block over its median: block centres and values."""
    per = int(round(block_s * fs))
    blocks = (flow[: flow.size // per * per] - flow.mean()).reshape(-1, per)
    rms = np.sqrt((blocks**2).mean(axis=1))
    return (np.arange(rms.size) + 0.5) * block_s, rms / np.median(rms)


def _signal(recording: Recording, name: str) -> tuple[np.ndarray, float]:
    """Samples ``(n,)`` and rate of channel ``name``; ``ValueError`` naming the recording when absent."""
    if name not in recording.channel_names:
        raise ValueError(f"{recording.recording}: no channel {name!r} (has {recording.channel_names})")
    index = recording.channel_names.index(name)
    return np.asarray(recording.signals[index], dtype=float), recording.sfreqs[index]


def _classed(recording: Recording) -> list[tuple[float, float, str]]:
    """The recording's events as ``(onset s, duration s, target class)`` (labels without a class dropped)."""
    classes = event_classes()
    return [(e.onset, e.duration, classes[e.label]) for e in recording.events or [] if e.label in classes]


def synthetic_column(data: Path, hours: float, seed: int) -> Column:
    """Write (unless there) and read back subject 0's night of ``seed``."""
    record = data / "tr03-0000"
    if not record.with_suffix(".hea").exists():
        synth_psg(data, 1, 1, "physionet2018", hours=hours, seed=seed, compress=1, progress=False, signals="psg")
    night = read_physionet2018(record, None)
    spo2, fs = _signal(night, "SaO2")
    step = int(fs)  # one value a second
    return Column(
        f"synthetic night (seed {seed}, subject 0, {night.epoch_labels.size * EPOCH_SECONDS / 3600:.1f} h)",
        ("hours", 3600.0),
        night.epoch_labels,
        heart_rate(*_signal(night, "ECG")),
        airflow_envelope(*_signal(night, "AIRFLOW")),
        "AIRFLOW RMS / median",
        (np.arange(0, spo2.size, step) / fs, spo2[::step]),
        _classed(night),
    )


def real_column(path: Path) -> Column:
    """The usable channels of DREAMS excerpt3 (``read_psg``; 50 Hz)."""
    recording, report = read_psg(path, stages="channel:hypnogram", stage_map="dreams")
    return Column(
        f"real: DREAMS {path.name} ({recording.epoch_labels.size * EPOCH_SECONDS / 60:.0f} min)",
        ("minutes", 60.0),
        recording.epoch_labels,
        heart_rate(*_signal(recording, "ECG"), bin_s=10.0),
        airflow_envelope(*_signal(recording, "NAF1")),
        "NAF1 nasal flow RMS / median",
        _left_out_note(report, "SAO2"),
        _classed(recording),
    )


def _left_out_note(report: ReadReport, label: str) -> str:
    """Why the reader left ``label`` out, for the panel that would have drawn it."""
    reasons = [f"{o.reason}: {o.detail}" for o in report.left_out if o.label == label]
    return f"{label} not usable: reads ~0\n({reasons[0] if reasons else 'not read'})"


def draw_column(axes: np.ndarray, column: Column) -> None:
    """Five panels (hypnogram, heart rate, breathing, SpO2, events) of ``column`` down ``axes (5,)``."""
    name, per = column.unit
    epochs = np.arange(column.stages.size + 1) * EPOCH_SECONDS / per
    rows = [HYPNOGRAM_ORDER.index(STAGES[c]) if c >= 0 else np.nan for c in column.stages]
    axes[0].step(epochs, rows + rows[-1:], where="post", color="k", lw=0.8)
    axes[0].set(yticks=range(len(HYPNOGRAM_ORDER)), yticklabels=HYPNOGRAM_ORDER, title=column.title)
    axes[1].plot(column.heart[0] / per, column.heart[1], color="tab:red", lw=0.7)
    axes[1].set_ylabel("heart rate (bpm)")
    axes[2].plot(column.breathing[0] / per, column.breathing[1], color="tab:blue", lw=0.5)
    axes[2].set_ylabel(column.breathing_label, fontsize=8)
    if isinstance(column.spo2, str):
        axes[3].text(0.5, 0.5, column.spo2, ha="center", va="center", transform=axes[3].transAxes, fontsize=8)
        axes[3].set_yticks([])
    else:
        axes[3].plot(column.spo2[0] / per, column.spo2[1], color="tab:green", lw=0.6)
    axes[3].set_ylabel("SpO2 (%)")
    for onset, duration, kind in column.events:
        row = list(EVENT_ROWS).index(kind)
        axes[4].broken_barh([(onset / per, max(duration / per, 1e-3))], (row + 0.1, 0.8), color=EVENT_ROWS[kind][1])
        axes[2].axvspan(onset / per, (onset + duration) / per, color=EVENT_ROWS[kind][1], alpha=0.12, lw=0)
    axes[4].set(yticks=np.arange(len(EVENT_ROWS)) + 0.5, yticklabels=[v[0] for v in EVENT_ROWS.values()])
    axes[4].set(ylim=(0, len(EVENT_ROWS)), xlabel=f"time ({name})", xlim=(0, epochs[-1]))


def figure(synthetic: Column, real: Column | str, out: Path) -> None:
    """Both columns side by side (``real``: a note when the real file is absent), saved to ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(5, 2, figsize=(15, 11), sharex="col", gridspec_kw={"width_ratios": [2.6, 1.2]})
    draw_column(axes[:, 0], synthetic)
    if isinstance(real, Column):
        draw_column(axes[:, 1], real)
    else:
        for ax in axes[:, 1]:
            ax.axis("off")
        axes[2, 1].text(0.5, 0.5, real, ha="center", va="center", transform=axes[2, 1].transAxes)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def run(args: argparse.Namespace, command: str) -> str:
    """Draw both columns into ``args.out`` (a PNG); return what was written."""
    with tempfile.TemporaryDirectory() as tmp:
        synthetic = synthetic_column(args.data or Path(tmp), args.hours, args.seed)
    root = args.real_psg or (Path(os.environ[REAL_PSG_ENV]) if os.environ.get(REAL_PSG_ENV) else None)
    real_file = root / REAL_FILE if root else None
    if real_file is not None and real_file.exists():
        real: Column | str = real_column(real_file)
    else:
        real = f"real panel skipped: {REAL_FILE} not found\n(--real-psg DIR or ${REAL_PSG_ENV})"
    figure(synthetic, real, args.out)
    return f"wrote {args.out}"
