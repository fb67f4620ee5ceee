"""Heart, breathing and oximetry of synthetic whole-PSG nights, per sleep stage, beside published ranges.

Usage: python scripts/reproduce/eeg_generator/physiology_table.py --out DIR [--subjects 3] [--hours 8.5] [--seed 0]
       [--data DIR]

Synthesizes ``--subjects`` full nights (``synth-psg --format physionet2018 --signals psg --compress 1``, the
young-adult cohort, subjects 0 .. n-1 of ``--seed``) into ``--data`` (default ``DIR/nights``; nights already
there are read again, not rewritten), reads each back with ``read_physionet2018`` (every signal, the
``-arousal.mat`` stages, the ``.arousal`` events) and runs ``physiology_table`` per night. The pooled table
weights each night's value by its analysed minutes (stage bouts >= 5 min; events per hour by time in the stage).
Writes ``DIR/physiology_table.md`` and ``DIR/physiology_table.json`` and prints the table.
"""

from __future__ import annotations

import argparse
import json
import runpy
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from multiview_app.data.eeg.events import ahi, event_counts, severity
from multiview_app.data.eeg.physionet2018 import read_physionet2018
from multiview_app.data.eeg.recording import Recording
from multiview_app.data.eeg.stages import STAGES
from multiview_app.data.eeg.synth import synth_psg
from multiview_app.data.eeg.synth.formats import WRITER_COHORT
from multiview_app.data.eeg.synth.psg import draw_cardio_traits
from multiview_app.eval.physiology import PUBLISHED_RANGES, PhysiologyRow, physiology_table

# the bench helpers (``scripts/bench/common.py``; scripts are not a package)
_COMMON = runpy.run_path(str(Path(__file__).resolve().parents[2] / "bench" / "common.py"))
command_line, markdown_table = _COMMON["command_line"], _COMMON["markdown_table"]

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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder of the table (.md) and numbers (.json)")
    parser.add_argument("--data", type=Path, default=None, help="folder of the nights (default OUT/nights)")
    parser.add_argument("--subjects", type=int, default=3)
    parser.add_argument("--hours", type=float, default=8.5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    data = args.data or args.out / "nights"
    rows, nights = [], []
    for subject, record in enumerate(synthesize(data, args.subjects, args.hours, args.seed)):
        recording = read_physionet2018(record, None)
        rows += night_rows(recording)
        nights.append(night_summary(recording, args.seed, subject))
    table = pooled(rows)
    text = table_markdown(table, nights)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "physiology_table.md").write_text(f"`{command_line()}`\n\n{text}\n")
    numbers = {"command": command_line(), "rows": [vars(r) | {"flag": r.flag} for r in table], "nights": nights}
    (args.out / "physiology_table.json").write_text(json.dumps(numbers, indent=1, default=float))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
