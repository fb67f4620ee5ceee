"""``mvapp experiment synth-check physiology``: heart, breathing and oximetry of synthetic whole-PSG nights, per
sleep stage, beside published ranges.

Synthesizes ``--subjects`` full nights (``synth-psg --format physionet2018 --signals psg --compress 1``, the
young-adult cohort, subjects 0 .. n-1 of ``--seed``) into ``--data`` (default ``OUT/nights``; nights already there
are read again, not rewritten), reads each back with ``read_physionet2018`` (every signal, the ``-arousal.mat``
stages, the ``.arousal`` events) and runs ``physiology_table`` per night. The pooled table weights each night's
value by its analysed minutes (stage bouts >= 5 min; events per hour by time in the stage). Writes
``OUT/physiology_table.md`` / ``.json``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ...data.eeg.events import ahi, event_counts, severity
from ...data.eeg.physionet2018 import read_physionet2018
from ...data.eeg.recording import Recording
from ...data.eeg.stages import STAGES
from ...data.eeg.synth import synth_psg
from ...data.eeg.synth.formats import WRITER_COHORT
from ...data.eeg.synth.psg import draw_cardio_traits
from ...eval.physiology import PUBLISHED_RANGES, PhysiologyRow, physiology_table
from .common import markdown_table, write_report

NAME = "physiology_table"

FORMAT = "physionet2018"


def record_path(data: Path, subject: int) -> Path:
    """The WFDB record of subject ``subject``'s first night (``tr03-<SSSS>``)."""
    return data / f"tr03-{subject:04d}"


def synthesize(data: Path, subjects: int, hours: float, seed: int) -> list[Path]:
    """Write the nights missing from ``data`` (all with one ``synth_psg`` call) and return every record path."""
    records = [record_path(data, s) for s in range(subjects)]
    if not all(r.with_suffix(".hea").exists() for r in records):
        synth_psg(data, subjects, 1, FORMAT, hours=hours, seed=seed, compress=1, progress=False, signals="psg")
    return records


def night_rows(recording: Recording) -> list[PhysiologyRow]:
    """``physiology_table`` of one read-back night (its signals ``(n,)`` each, 30-s labels and events)."""
    if len(set(recording.sfreqs)) != 1:
        raise ValueError(f"{recording.recording}: signals at several rates {sorted(set(recording.sfreqs))}")
    signals = dict(zip(recording.channel_names, recording.signals))
    events = [(e.onset, e.duration, e.label) for e in recording.events or []]
    return physiology_table(signals, recording.sfreqs[0], recording.epoch_labels, events)


def pooled(rows: Sequence[PhysiologyRow]) -> list[PhysiologyRow]:
    """One row per (stage, measure) of ``rows`` from several nights: the mean weighted by analysed minutes."""
    groups: dict[tuple[str, str], list[PhysiologyRow]] = {}
    for row in rows:
        groups.setdefault((row.stage, row.measure), []).append(row)
    out = []
    for group in groups.values():
        values, minutes = np.array([r.value for r in group]), np.array([r.minutes for r in group])
        ok = np.isfinite(values)
        value = float(np.average(values[ok], weights=minutes[ok])) if ok.any() and minutes[ok].sum() else np.nan
        first = group[0]
        out.append(PhysiologyRow(first.stage, first.measure, value, first.low, first.high, first.source, minutes.sum()))
    return sorted(out, key=lambda r: (STAGES.index(r.stage), list(PUBLISHED_RANGES).index(r.measure)))


def night_summary(recording: Recording, seed: int, subject: int) -> dict:
    """The night's subject AHI class (drawn by the generator) beside the AHI and events read back."""
    traits = draw_cardio_traits(seed, subject, WRITER_COHORT[FORMAT])
    realised = ahi(recording.events or [], recording.epoch_labels)
    return {
        "record": recording.recording,
        "ahi_class": traits.ahi_class,
        "drawn_ahi": round(traits.ahi, 1),
        "realised_ahi": round(realised, 1),
        "realised_class": severity(realised),
        "events": event_counts(recording.events or []),
    }


def table_markdown(rows: Sequence[PhysiologyRow], nights: Sequence[dict]) -> str:
    """The pooled per-stage table, the per-night AHI lines and the sources, as Markdown."""
    table = markdown_table(
        ["stage", "measure", "value", "published range", "flag", "minutes"],
        [(r.stage, r.measure, f"{r.value:.2f}", f"{r.low:g}-{r.high:g}", r.flag, f"{r.minutes:.0f}") for r in rows],
    )
    ahi_table = markdown_table(
        ["record", "subject class (drawn AHI)", "realised AHI", "realised class", "events"],
        [
            (n["record"], f"{n['ahi_class']} ({n['drawn_ahi']})", n["realised_ahi"], n["realised_class"], n["events"])
            for n in nights
        ],
    )
    sources = sorted({(r.measure, r.source) for r in rows})
    return "\n\n".join([table, ahi_table, "\n".join(f"- {measure}: {source}" for measure, source in sources)])


def run(args: argparse.Namespace, command: str) -> str:
    """Synthesize the missing nights, read them back, pool; write the table and numbers; return the table."""
    rows, nights = [], []
    for subject, record in enumerate(
        synthesize(args.data or args.out / "nights", args.subjects, args.hours, args.seed)
    ):
        recording = read_physionet2018(record, None)
        rows += night_rows(recording)
        nights.append(night_summary(recording, args.seed, subject))
    table = pooled(rows)
    text = table_markdown(table, nights)
    numbers = {"command": command, "rows": [vars(r) | {"flag": r.flag} for r in table], "nights": nights}
    write_report(args.out, NAME, f"`{command}`\n\n{text}", numbers)
    return text
