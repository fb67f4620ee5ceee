"""Prepared window cache: one memory-mappable ``.npy`` per recording + ``manifest.json``.

Layout of a cache directory::

    manifest.json            # options, channels, sfreq, units, stages, recordings (see below), duplicates
    windows/<recording>.npy  # (w, c, T) float32/float16, np.load(..., mmap_mode="r")

Each manifest recording holds ``recording, subject, file, n_windows, labels (w,), epochs (w,),
sources [{path, sha256}], counts`` and, when the dataset scores events (PhysioNet 2018),
``event_targets {class: (w,)}, ahi, severity, event_counts {label: n}`` (:func:`.events.event_record`).
Preparation is incremental (recordings whose sources have the same checksums and an intact window
file are skipped), every write is atomic (temp file + ``os.replace``) and the manifest is rewritten
after each recording, so an interrupted run resumes where it stopped. While preparing, the manifest says ``"complete": false``; only the last write of a
finished ``prepare`` sets it to true, so a cache from an interrupted or failed run never reads as
complete (:func:`load_manifest` refuses it and names the command that finishes it).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ...fileio import atomic_write_bytes, sha256_file
from ...registry import Registry
from .bids import events_tsv, find_bids_recordings, read_bids
from .contract import SOURCE_UNITS
from .dreams import expected_checksums, find_excerpts, inspect_excerpt, read_dreams, verify_checksums
from .events import event_record, event_summary, event_summary_line
from .generic import StageSource, find_psg_files, for_cache, psg_recording_id, read_psg
from .physionet2018 import arousal_mat_path, find_records, read_physionet2018, signal_files
from .preprocess import DROP_REASONS, PrepareOptions, make_windows
from .provenance import read_provenance
from .recording import Recording
from .sleep_edf import count_st_nights, find_pairs, read_sleep_edf, recording_id
from .stage_maps import DEFAULT_STAGE_MAP, load_stage_map
from .stages import STAGES

MANIFEST = "manifest.json"
SUMMARY = "prepare_summary.json"  # the last `prepare` run's full summary (the terminal gets one line)
CACHE_FORMAT = "multiview_app.eeg_windows/1"


@dataclass
class SourceEntry:
    """One recording found in a source folder, before reading it."""

    recording: str
    files: list[Path]  # signal file first (its checksum detects duplicates), then annotations
    read: Callable[[list[str]], Recording]


DATASETS: Registry[Callable[..., tuple[list[SourceEntry], dict[str, int]]]] = Registry("EEG dataset")
"""dataset name -> ``entries(source, include_st=False, **reader_options) -> (entries, not_selected counts)``
(reader options: ``stages``, ``stage_map`` of ``edf`` and ``bids``)."""


@DATASETS.register("sleep-edf")
def sleep_edf_entries(source: Path, include_st: bool = False) -> tuple[list[SourceEntry], dict[str, int]]:
    pairs, problems = find_pairs(source, include_st)
    if problems:
        raise ValueError(problems[0])
    entries = [
        SourceEntry(
            recording_id(psg),
            [psg] + ([hyp] if hyp else []),
            lambda channels, psg=psg, hyp=hyp: read_sleep_edf(psg, hyp, channels),
        )
        for psg, hyp in pairs
    ]
    return entries, ({} if include_st else {"st_nights (--include-st to use)": count_st_nights(source)})


@DATASETS.register("physionet2018")
def physionet2018_entries(source: Path, include_st: bool = False) -> tuple[list[SourceEntry], dict[str, int]]:
    entries = []
    for record in find_records(source):
        files = [*signal_files(record), Path(f"{record}.arousal"), arousal_mat_path(record)]
        entries.append(
            SourceEntry(
                record.name,
                [f for f in files if f.exists()] or [Path(f"{record}.hea")],
                lambda channels, record=record: read_physionet2018(record, channels),
            )
        )
    return entries, {}


@DATASETS.register("dreams")
def dreams_entries(source: Path, include_st: bool = False) -> tuple[list[SourceEntry], dict[str, int]]:
    """DREAMS excerpts: every file is checked (checksums, lengths, rates, derivation) before the first
    one is read, so a bad excerpt is refused before anything is written."""
    excerpts, not_selected = find_excerpts(source)
    sums, where = expected_checksums(source)
    entries = []
    for excerpt in excerpts:
        unlisted = verify_checksums([excerpt.signal_file, excerpt.hypnogram], sums, where)
        layout = inspect_excerpt(excerpt)

        def read(channels: list[str], excerpt=excerpt, layout=layout, unlisted=unlisted) -> Recording:
            recording = read_dreams(excerpt, channels, layout)
            recording.counts["files_without_checksum"] += unlisted
            return recording

        entries.append(SourceEntry(excerpt.name, [excerpt.signal_file, excerpt.hypnogram], read))
    return entries, not_selected


@DATASETS.register("edf")
def edf_entries(
    source: Path, include_st: bool = False, stages: str = "auto", stage_map: str = DEFAULT_STAGE_MAP
) -> tuple[list[SourceEntry], dict[str, int]]:
    """Your own PSG: every ``*.edf`` / ``*.bdf`` under ``source`` (:mod:`.generic`); the CSV hypnogram beside a
    file and a user's stage-map file are among its checksummed sources."""
    source_kind, mapping = StageSource.parse(stages), load_stage_map(stage_map)  # a bad option fails first
    entries = []
    for path in find_psg_files(source):
        csv = path.with_suffix(".csv")
        files = [path, *([csv] if source_kind.kind in ("auto", "csv") and csv.exists() else [])]
        key = psg_recording_id(path, source)

        def read(channels: list[str], path: Path = path, key: str = key) -> Recording:
            return for_cache(*read_psg(path, source_kind, mapping, channels=channels), channels, key)

        entries.append(SourceEntry(key, files + ([mapping.file] if mapping.file else []), read))
    return entries, {}


@DATASETS.register("bids")
def bids_entries(
    source: Path, include_st: bool = False, stages: str = "annotations", stage_map: str = DEFAULT_STAGE_MAP
) -> tuple[list[SourceEntry], dict[str, int]]:
    """A BIDS EEG dataset (:mod:`.bids`): stages and events from each recording's ``events.tsv``."""
    if StageSource.parse(stages).kind not in ("auto", "annotations"):
        raise ValueError(f"bids: --stages {stages}: stages come from events.tsv (--stages annotations)")
    mapping, entries = load_stage_map(stage_map), []
    for bids_path in find_bids_recordings(source):
        events = events_tsv(bids_path)
        files = [bids_path.fpath, *([events] if events.exists() else []), *([mapping.file] if mapping.file else [])]

        def read(channels: list[str], bids_path=bids_path) -> Recording:
            return for_cache(*read_bids(bids_path, mapping, channels), channels, bids_path.fpath.stem)

        entries.append(SourceEntry(bids_path.fpath.stem, files, read))
    return entries, {}


SOURCE_PATTERNS = {
    "sleep-edf": "*-PSG.edf",
    "physionet2018": "*.hea",
    "dreams": "excerptN.txt or excerptN.edf",
    "edf": "*.edf or *.bdf",
    "bids": "sub-*/[ses-*/]eeg/*_eeg.edf or .bdf",
}
"""What ``prepare`` looks for in ``--source``, per dataset (for the "nothing found" message)."""


def load_manifest(cache_dir: str | Path, allow_partial: bool = False) -> dict:
    """Read and check ``manifest.json``; ``ValueError`` names the folder if it is not a (complete) cache."""
    path = Path(cache_dir) / MANIFEST
    if not path.exists():
        raise ValueError(f"{cache_dir}: not a prepared EEG cache (no {MANIFEST}); run `mvapp data prepare` first")
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: corrupt manifest ({err})") from None
    if manifest.get("format") != CACHE_FORMAT:
        raise ValueError(f"{path}: format '{manifest.get('format')}', expected '{CACHE_FORMAT}'")
    if not allow_partial and not manifest.get("complete", True):
        raise ValueError(
            f"{cache_dir}: partial cache ({len(manifest.get('recordings', []))} recordings; `mvapp data prepare` "
            f"was interrupted or failed); rerun `mvapp data prepare {manifest.get('dataset')} --out {cache_dir}` "
            "with the same options to finish it"
        )
    return manifest


def _windows_intact(cache_dir: Path, record: dict) -> bool:
    """Whether a manifest record's window file exists and holds ``n_windows`` windows."""
    try:
        return int(np.load(cache_dir / record["file"], mmap_mode="r").shape[0]) == int(record["n_windows"])
    except (OSError, ValueError, KeyError, IndexError):
        return False


def _provenance(files: list[Path]) -> dict[str, str]:
    """``{"provenance": text}`` when the recording's files carry the synthetic generator's provenance
    (``provenance.read_provenance``), else ``{}`` (real recordings: no key)."""
    text = read_provenance(files)
    return {"provenance": text} if text else {}


def save_manifest(cache_dir: Path, manifest: dict) -> None:
    atomic_write_bytes(cache_dir / MANIFEST, lambda h: h.write(json.dumps(manifest, indent=1).encode()))


def load_windows(cache_dir: str | Path, entry: dict) -> np.ndarray:
    """Memory-map one recording's windows ``(w, c, T)``."""
    return np.load(Path(cache_dir) / entry["file"], mmap_mode="r")


def prepare(
    dataset: str,
    source: str | Path,
    out: str | Path,
    options: PrepareOptions,
    dtype: Literal["float32", "float16"] = "float32",
    on_error: Literal["raise", "skip"] = "raise",
    progress: bool = True,
    include_st: bool = False,
    reader_options: dict[str, str] | None = None,
) -> dict:
    """Prepare every recording of ``source`` into the cache ``out``; returns a summary dict
    (prepared, skipped_existing, duplicates, errors, not_selected, windows, dropped counts by reason).
    Sleep-EDF: SC nights only unless ``include_st``. DREAMS: every excerpt is checked before the first
    write (see :func:`dreams_entries`). ``reader_options``: ``stages`` / ``stage_map`` of ``edf`` and
    ``bids`` (kept in the manifest: a cache keeps one set)."""
    from ...console import progress as progress_display

    source, out = Path(source), Path(out)
    if not source.is_dir():
        raise ValueError(f"--source {source}: not a folder")
    entries, not_selected = DATASETS.get(dataset)(source, include_st=include_st, **(reader_options or {}))
    if not entries:
        raise ValueError(f"--source {source}: no {dataset} recordings found ({SOURCE_PATTERNS[dataset]} files)")
    settings = {"dataset": dataset, "options": options.model_dump(), "dtype": dtype}
    if reader_options:
        settings["reader_options"] = dict(reader_options)
    if (out / MANIFEST).exists():
        manifest = load_manifest(out, allow_partial=True)
        previous = {k: manifest.get(k) for k in settings}
        if previous != settings:
            raise ValueError(
                f"{out}: cache was prepared with {previous}, not {settings}; use another --out or the same options"
            )
    else:
        manifest = {
            "format": CACHE_FORMAT,
            **settings,
            "channels": options.channels,
            "sfreq": options.sfreq,
            "units": SOURCE_UNITS,  # of the signals before scaling (every reader converts to microvolts)
            "window_seconds": options.window_samples / options.sfreq,
            "stages": list(STAGES),
            "recordings": [],
            "duplicates": [],
        }
    manifest["complete"] = False  # until the last write below
    if (out / MANIFEST).exists():
        save_manifest(out, manifest)  # an existing cache reads as partial while it changes
    # a new cache: its first write is the first prepared recording (a failure before leaves no trace)
    by_id = {r["recording"]: r for r in manifest["recordings"]}
    by_checksum = {r["sources"][0]["sha256"]: r["recording"] for r in manifest["recordings"]}
    summary: dict[str, Any] = {
        "prepared": [],
        "skipped_existing": [],
        "duplicates": [],
        "errors": [],
        "dropped": Counter(),
        "reader_counts": Counter(),
        "events": Counter(),
        "not_selected": {k: v for k, v in not_selected.items() if v},
    }
    for entry in progress_display(entries, desc=f"prepare {dataset}", disable=not progress):
        checksums = [{"path": str(f), "sha256": sha256_file(f)} for f in entry.files]
        signal_sum = checksums[0]["sha256"]
        known = by_id.get(entry.recording)
        if (
            known is not None
            and [s["sha256"] for s in known["sources"]] == [c["sha256"] for c in checksums]
            and _windows_intact(out, known)
        ):
            summary["skipped_existing"].append(entry.recording)
            continue
        if signal_sum in by_checksum and by_checksum[signal_sum] != entry.recording:
            duplicate = {
                "recording": entry.recording,
                "duplicate_of": by_checksum[signal_sum],
                "file": str(entry.files[0]),
                "sha256": signal_sum,
            }
            summary["duplicates"].append(duplicate)
            if duplicate not in manifest["duplicates"]:
                manifest["duplicates"].append(duplicate)
                save_manifest(out, manifest)
            continue
        try:
            recording = entry.read(options.channels)
            windows, labels, epochs, dropped = make_windows(recording, options)
        except ValueError as err:
            if on_error == "raise":
                raise
            named = str(err) if str(entry.files[0]) in str(err) else f"{entry.files[0]}: {err}"
            summary["errors"].append(named)
            continue
        file = f"windows/{entry.recording}.npy"
        atomic_write_bytes(out / file, lambda h, w=windows: np.save(h, w.astype(dtype)), suffix=".npy")
        record = {
            "recording": entry.recording,
            "subject": recording.subject,
            "file": file,
            "n_windows": int(len(labels)),
            "labels": labels.tolist(),
            "epochs": epochs.tolist(),
            "sources": checksums,
            **_provenance(entry.files),
            **event_record(recording, epochs),
            "counts": {
                **dict(recording.counts),
                **{(f"dropped_{k}" if k in DROP_REASONS else k): v for k, v in dropped.items()},
            },
        }
        if known is not None:
            manifest["recordings"].remove(known)
        manifest["recordings"].append(record)
        by_id[entry.recording], by_checksum[signal_sum] = record, entry.recording
        save_manifest(out, manifest)
        summary["prepared"].append(entry.recording)
        summary["dropped"].update({k: v for k, v in dropped.items() if k in DROP_REASONS})
        summary["reader_counts"].update(recording.counts)
        summary["events"].update(event_summary(record))
        summary["reader_counts"].update({k: v for k, v in dropped.items() if k not in DROP_REASONS})
    manifest["complete"] = True
    save_manifest(out, manifest)  # last write: from here on the cache reads as complete
    summary["windows"] = int(sum(r["n_windows"] for r in manifest["recordings"]))
    summary["cache"] = str(out)
    summary["dropped"] = dict(summary["dropped"])
    summary["reader_counts"] = {k: v for k, v in summary["reader_counts"].items() if v}
    summary["events"] = dict(summary["events"])
    summary["windows_per_stage"] = {
        stage: int(sum(r["labels"].count(i) for r in manifest["recordings"])) for i, stage in enumerate(STAGES)
    }
    summary["summary_file"] = str(out / SUMMARY)
    atomic_write_bytes(out / SUMMARY, lambda h: h.write(json.dumps(summary, indent=1).encode()))
    return summary


def stage_table(rows: dict[str, dict[str, int]]) -> list[str]:
    """Aligned lines: a header ``stage W N1 N2 N3 REM total`` then one row per ``{label: {stage: n}}``."""
    header = ["", *STAGES, "total"]
    body = [
        [label, *(str(counts.get(s, 0)) for s in STAGES), str(sum(counts.get(s, 0) for s in STAGES))]
        for label, counts in rows.items()
    ]
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(r, widths)))
        for r in [header, *body]
    ]


def _pairs(counts: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items() if v)


def summary_table(summary: dict) -> str:
    """What ``mvapp data prepare`` prints: recordings, windows per stage, what was dropped / not used and
    where the full summary (the readers' counts, per recording) is; unreadable files listed below."""
    lines = [
        f"prepared {len(summary['prepared'])} recordings into {summary['cache']} "
        f"({len(summary['skipped_existing'])} already there, {len(summary['duplicates'])} duplicates, "
        f"{len(summary['errors'])} unreadable{', skipped, listed below' if summary['errors'] else ''})"
    ]
    lines += stage_table({"windows": summary["windows_per_stage"]})
    for label, counts in (("dropped", summary["dropped"]), ("not used", summary["not_selected"])):
        if _pairs(counts):
            lines.append(f"{label}: {_pairs(counts)}")
    if events_line := event_summary_line(summary.get("events", {})):
        lines.append(events_line)
    left_out = {k.split(":", 1)[1]: v for k, v in summary.get("reader_counts", {}).items() if k.startswith("left_out:")}
    if left_out:  # edf / bids: channels:reason -> recordings
        lines.append(f"channels left out (channel:reason recordings): {_pairs(left_out)}")
    lines.append(f"details (reader counts, per recording): {summary['summary_file']}")
    lines += [f"  skipped (unreadable): {error}" for error in summary["errors"]]
    return "\n".join(lines)


def info_table(summary: dict) -> str:
    """What ``mvapp data info`` prints (``--json``: the full :func:`info` record)."""
    rate = f"{summary['sfreq']:g} Hz"
    lines = [
        f"{summary['cache']}: {summary['dataset']}, {summary['recordings']} recordings, {summary['subjects']} "
        f"subjects; channels {', '.join(summary['channels'])} at {rate}, {summary['window_seconds']:g} s windows"
    ]
    lines += stage_table({"windows": summary["windows_per_stage"]})
    if _pairs(summary["dropped_windows"]):
        lines.append(f"dropped windows: {_pairs(summary['dropped_windows'])}")
    if summary["duplicates"]:
        lines.append(f"duplicates skipped: {len(summary['duplicates'])}")
    lines.append("per subject and the dataset card: mvapp data info --json")
    return "\n".join(lines)


def info(cache_dir: str | Path) -> dict:
    """Summary of a cache: recordings, subjects, channels, windows per stage (total and per subject)."""
    manifest = load_manifest(cache_dir)
    per_subject: dict[str, Counter] = {}
    for record in manifest["recordings"]:
        counter = per_subject.setdefault(record["subject"], Counter())
        counter.update(STAGES[label] for label in record["labels"])
    total: Counter = Counter()
    for counter in per_subject.values():
        total.update(counter)
    dropped: Counter = Counter()
    for record in manifest["recordings"]:
        dropped.update({k[len("dropped_") :]: v for k, v in record["counts"].items() if k.startswith("dropped_")})
    return {
        "cache": str(cache_dir),
        "dataset": manifest["dataset"],
        "channels": manifest["channels"],
        "sfreq": manifest["sfreq"],
        "window_seconds": manifest["window_seconds"],
        "recordings": len(manifest["recordings"]),
        "subjects": len(per_subject),
        "windows": int(sum(total.values())),
        "windows_per_stage": {s: int(total.get(s, 0)) for s in STAGES},
        "windows_per_stage_per_subject": {
            subj: {s: int(c.get(s, 0)) for s in STAGES} for subj, c in sorted(per_subject.items())
        },
        "dropped_windows": dict(dropped),
        "duplicates": manifest["duplicates"],
    }
