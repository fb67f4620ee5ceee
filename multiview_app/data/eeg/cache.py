"""Prepared window cache: one memory-mappable ``.npy`` per recording + ``manifest.json``.

Layout of a cache directory::

    manifest.json            # options, channels, sfreq, units, stages, recordings (see below), duplicates
    windows/<recording>.npy  # (w, c, T) float32/float16, np.load(..., mmap_mode="r")
    windows/<recording>/<group>.npy  # a modality cache (prepare --modalities): (w, c_g, T_g) per group

A modality cache's manifest also holds ``modalities`` (the asked groups) and ``modality_groups`` (each
group's types, rate, band, scaling); each of its recordings ``modalities`` (per group: file, channels,
types, units, recorded rates), ``missing_modalities`` (group: reason), ``left_out_channels``,
``upsampled_channels`` and ``invalid_<group>`` (a boolean per window, for groups with a valid range).
A modality cache prepared with a rate cap (``--max-rate``) holds ``max_rate``, and each capped group in
``modality_groups`` its psg.yaml rate and band as ``capped_from``.
Every group of a recording holds the same windows (``epochs``).

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
from .modalities import group_specs, modal_windows, parse_modalities
from .physionet2018 import arousal_mat_path, find_records, read_physionet2018, signal_files
from .preprocess import DROP_REASONS, PrepareOptions, make_windows
from .provenance import read_provenance
from .recording import Recording
from .signals import load_vocabulary
from .sleep_edf import count_st_nights, find_pairs, read_sleep_edf, recording_id
from .stage_maps import DEFAULT_STAGE_MAP, load_stage_map
from .stages import EPOCH_SECONDS, STAGES

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


MODALITY_DATASETS = ("sleep-edf", "physionet2018", "dreams", "edf", "bids")
"""Datasets whose readers read every signal with its type and unit (``entry.read(None)``): ``--modalities``."""

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
    """Whether a manifest record's window file(s) (a modality cache: one per group) exist and hold
    ``n_windows`` windows."""
    groups = record.get("modalities")
    files = [g["file"] for g in groups.values()] if groups is not None else [record.get("file")]
    try:
        return all(int(np.load(cache_dir / f, mmap_mode="r").shape[0]) == int(record["n_windows"]) for f in files)
    except (OSError, ValueError, KeyError, IndexError, TypeError):
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


def _open_manifest(out: Path, settings: dict[str, Any], options: PrepareOptions) -> dict:
    """The manifest of cache ``out``: the existing one (refused when prepared with other ``settings``,
    marked partial while it changes) or a new one (written with the first prepared recording)."""
    if not (out / MANIFEST).exists():
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
        if "modalities" in settings:
            manifest["modality_groups"] = modality_groups(list(settings["modalities"]), settings.get("max_rate"))
        manifest["complete"] = False  # until the last write of prepare
        return manifest
    manifest = load_manifest(out, allow_partial=True)
    keys = [*settings, *(k for k in ("modalities", "max_rate") if k in manifest and k not in settings)]
    previous, current = {k: manifest.get(k) for k in keys}, {k: settings.get(k) for k in keys}
    if previous != current:
        raise ValueError(
            f"{out}: cache was prepared with {previous}, not {current}; use another --out or the same options"
        )
    manifest["complete"] = False
    save_manifest(out, manifest)  # an existing cache reads as partial while it changes
    return manifest


def modality_groups(groups: list[str], max_rate: float | None = None) -> dict[str, dict[str, Any]]:
    """What a modality cache's manifest says of each group: signal types, rate, band, scaling (and its
    offset / scale, valid range) and window length in samples, from ``datasets/modalities/psg.yaml``;
    with ``max_rate``, the capped rate and band (:func:`~.modalities.group_specs`) and, for a capped group,
    ``capped_from`` (its psg.yaml ``sfreq``, ``l_freq``, ``h_freq``)."""
    specs, table = group_specs(groups, max_rate), load_vocabulary().groups
    described = {
        group: {
            **specs[group].model_dump(exclude={"note"}),
            "window_samples": int(round(EPOCH_SECONDS * specs[group].sfreq)),
        }
        for group in groups
    }
    for group in groups:
        if specs[group] != table[group]:
            described[group]["capped_from"] = table[group].model_dump(include={"sfreq", "l_freq", "h_freq"})
    return described


@dataclass
class _Run:
    """One ``prepare`` run: the manifest being written, its indexes and the summary being gathered."""

    out: Path
    manifest: dict
    summary: dict[str, Any]
    options: PrepareOptions
    dtype: str
    asked: dict[str, list[str] | None] | None
    card: Any
    max_rate: float | None = None

    def __post_init__(self) -> None:
        self.by_id = {r["recording"]: r for r in self.manifest["recordings"]}
        self.by_checksum = {r["sources"][0]["sha256"]: r["recording"] for r in self.manifest["recordings"]}


def _already_done(run: _Run, entry: SourceEntry, checksums: list[dict[str, str]]) -> bool:
    """Whether ``entry`` is in the cache with the same sources (skipped) or duplicates another recording
    (recorded in the manifest's ``duplicates``)."""
    known, signal_sum = run.by_id.get(entry.recording), checksums[0]["sha256"]
    same = known is not None and [s["sha256"] for s in known["sources"]] == [c["sha256"] for c in checksums]
    if same and _windows_intact(run.out, known):
        run.summary["skipped_existing"].append(entry.recording)
        return True
    if signal_sum in run.by_checksum and run.by_checksum[signal_sum] != entry.recording:
        duplicate = {
            "recording": entry.recording,
            "duplicate_of": run.by_checksum[signal_sum],
            "file": str(entry.files[0]),
            "sha256": signal_sum,
        }
        run.summary["duplicates"].append(duplicate)
        if duplicate not in run.manifest["duplicates"]:
            run.manifest["duplicates"].append(duplicate)
            save_manifest(run.out, run.manifest)
        return True
    return False


def _save(run: _Run, file: str, windows: np.ndarray) -> None:
    atomic_write_bytes(run.out / file, lambda h: np.save(h, windows.astype(run.dtype)), suffix=".npy")


def _eeg_record(run: _Run, entry: SourceEntry) -> tuple[dict, Recording, Counter]:
    """Read and window ``entry``'s picked channels; write ``windows/<recording>.npy``; its manifest record."""
    recording = entry.read(run.options.channels)
    windows, labels, epochs, dropped = make_windows(recording, run.options)
    file = f"windows/{entry.recording}.npy"
    _save(run, file, windows)
    return _record(entry, recording, file, labels, epochs, dropped), recording, dropped


def _modal_record(run: _Run, entry: SourceEntry) -> tuple[dict, Recording, Counter]:
    """Read every signal of ``entry``, window each asked modality group on shared epochs
    (:func:`~.modalities.modal_windows`), write ``windows/<recording>/<group>.npy``; its manifest record
    (``modalities``: per group its file and channels; ``missing_modalities``, ``left_out_channels``,
    ``upsampled_channels``, ``invalid_<group>`` per window). Its ``file`` is the brain group's when that
    holds every ``--channels`` channel (the EEG view of the recording), else None."""
    recording = entry.read(None)
    result = modal_windows(recording, run.asked or {}, run.options, run.card, run.max_rate)
    files = {group: f"windows/{entry.recording}/{group}.npy" for group in result.windows}
    for group, windows in result.windows.items():
        _save(run, files[group], windows)
    dropped = Counter({k: v for k, v in result.counts.items() if v})
    whole_brain = result.channels.get("brain", {}).get("channels") == list(run.options.channels)
    record = _record(entry, recording, files["brain"] if whole_brain else None, result.labels, result.epochs, dropped)
    record["modalities"] = {group: {"file": files[group], **result.channels[group]} for group in files}
    record["missing_modalities"] = result.missing
    record["left_out_channels"] = result.left_out
    record["upsampled_channels"] = result.upsampled
    record.update({f"invalid_{group}": mask.tolist() for group, mask in result.invalid.items()})
    return record, recording, dropped


def _record(
    entry: SourceEntry, recording: Recording, file: str | None, labels: np.ndarray, epochs: np.ndarray, dropped: Counter
) -> dict:
    """The manifest record of one prepared recording (``file``: its windows)."""
    return {
        "recording": entry.recording,
        "subject": recording.subject,
        "file": file,
        "n_windows": int(len(labels)),
        "labels": labels.tolist(),
        "epochs": epochs.tolist(),
        "sources": [],  # set by the caller (checksums taken before reading)
        **_provenance(entry.files),
        **event_record(recording, epochs),
        "counts": {
            **dict(recording.counts),
            **{(f"dropped_{k}" if k in DROP_REASONS else k): v for k, v in dropped.items()},
        },
    }


def _prepare_entry(run: _Run, entry: SourceEntry, on_error: str) -> None:
    """Prepare one recording into the cache (skipped when already there or a duplicate; an unreadable
    one raises, or with ``on_error="skip"`` is listed in the summary's errors)."""
    checksums = [{"path": str(f), "sha256": sha256_file(f)} for f in entry.files]
    if _already_done(run, entry, checksums):
        return
    try:
        record, recording, dropped = (_modal_record if run.asked else _eeg_record)(run, entry)
    except ValueError as err:
        if on_error == "raise":
            raise
        named = str(err) if str(entry.files[0]) in str(err) else f"{entry.files[0]}: {err}"
        run.summary["errors"].append(named)
        return
    record["sources"] = checksums
    known = run.by_id.get(entry.recording)
    if known is not None:
        run.manifest["recordings"].remove(known)
    run.manifest["recordings"].append(record)
    run.by_id[entry.recording], run.by_checksum[checksums[0]["sha256"]] = record, entry.recording
    save_manifest(run.out, run.manifest)
    run.summary["prepared"].append(entry.recording)
    run.summary["dropped"].update({k: v for k, v in dropped.items() if k in DROP_REASONS})
    run.summary["reader_counts"].update(recording.counts)
    run.summary["events"].update(event_summary(record))
    run.summary["reader_counts"].update({k: v for k, v in dropped.items() if k not in DROP_REASONS})


def asked_modalities(
    dataset: str, modalities: str | None, max_rate: float | None
) -> dict[str, list[str] | None] | None:
    """The groups asked by ``modalities`` (:func:`~.modalities.parse_modalities`; None: an EEG cache), checked
    before anything is read: a dataset whose reader has no modalities, ``max_rate`` without ``modalities``
    and a band that does not fit the cap are ``ValueError`` naming the option."""
    asked = parse_modalities(modalities) if modalities else None
    if asked is not None and dataset not in MODALITY_DATASETS:
        raise ValueError(
            f"--modalities: available for {', '.join(MODALITY_DATASETS)}; prepare {dataset} without it (its reader "
            "hands the EEG window cache one microvolt channel per --channels name)"
        )
    if max_rate is not None and asked is None:
        raise ValueError("--max-rate caps the modality groups' rates: use it with --modalities")
    if asked is not None:
        group_specs(list(asked), max_rate)
    return asked


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
    modalities: str | None = None,
    max_rate: float | None = None,
) -> dict:
    """Prepare every recording of ``source`` into the cache ``out``; returns a summary dict
    (prepared, skipped_existing, duplicates, errors, not_selected, windows, dropped counts by reason).
    Sleep-EDF: SC nights only unless ``include_st``. DREAMS: every excerpt is checked before the first
    write (see :func:`dreams_entries`). ``reader_options``: ``stages`` / ``stage_map`` of ``edf`` and
    ``bids`` (kept in the manifest: a cache keeps one set). ``modalities`` (a preset or comma list of modality groups,
    :func:`~.modalities.parse_modalities`): one window file per group and recording, and the summary's
    ``modalities`` (missing groups, left-out channels, upsampled recordings, invalid windows). ``max_rate``
    (with ``modalities`` only): every group at ``min(its rate, max_rate)`` Hz, its band below the new
    Nyquist frequency (:func:`~.modalities.group_specs`; kept in the manifest)."""
    from ...console import progress as progress_display
    from ..catalog import preparable

    source, out = Path(source), Path(out)
    if not source.is_dir():
        raise ValueError(f"--source {source}: not a folder")
    asked = asked_modalities(dataset, modalities, max_rate)
    entries, not_selected = DATASETS.get(dataset)(source, include_st=include_st, **(reader_options or {}))
    if not entries:
        raise ValueError(f"--source {source}: no {dataset} recordings found ({SOURCE_PATTERNS[dataset]} files)")
    settings = {"dataset": dataset, "options": options.model_dump(), "dtype": dtype}
    if reader_options:
        settings["reader_options"] = dict(reader_options)
    if asked is not None:
        settings["modalities"] = asked
    if max_rate is not None:
        settings["max_rate"] = float(max_rate)
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
    manifest = _open_manifest(out, settings, options)
    run = _Run(out, manifest, summary, options, dtype, asked, preparable().get(dataset), max_rate)
    for entry in progress_display(entries, desc=f"prepare {dataset}", disable=not progress):
        _prepare_entry(run, entry, on_error)
    return _finish(run)


def _finish(run: _Run) -> dict:
    """Mark the cache complete (its last write), complete and save the summary."""
    out, manifest, summary = run.out, run.manifest, run.summary
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
    if run.asked is not None:
        summary["modalities"] = modality_summary(manifest)
    summary["summary_file"] = str(out / SUMMARY)
    atomic_write_bytes(out / SUMMARY, lambda h: h.write(json.dumps(summary, indent=1).encode()))
    return summary


def modality_summary(manifest: dict) -> dict[str, Any]:
    """Over a modality cache's recordings: the groups, recordings missing one (with the reason),
    channels left out (flat / saturated / out of range), upsampled recordings, invalid windows per group."""
    groups = list(manifest.get("modality_groups", {}))
    records = manifest["recordings"]
    return {
        "groups": groups,
        "missing": [
            {"recording": r["recording"], "group": g, "reason": reason}
            for r in records
            for g, reason in r.get("missing_modalities", {}).items()
        ],
        "left_out_channels": [
            {"recording": r["recording"], **c} for r in records for c in r.get("left_out_channels", [])
        ],
        "upsampled": {r["recording"]: r["upsampled_channels"] for r in records if r.get("upsampled_channels")},
        "invalid_windows": {
            g: int(sum(sum(r.get(f"invalid_{g}", [])) for r in records))
            for g in groups
            if any(f"invalid_{g}" in r for r in records)
        },
    }


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
    if "modalities" in summary:
        lines += modality_lines(summary["modalities"])
    if events_line := event_summary_line(summary.get("events", {})):
        lines.append(events_line)
    left_out = {k.split(":", 1)[1]: v for k, v in summary.get("reader_counts", {}).items() if k.startswith("left_out:")}
    if left_out:  # edf / bids: channels:reason -> recordings
        lines.append(f"channels left out (channel:reason recordings): {_pairs(left_out)}")
    lines.append(f"details (reader counts, per recording): {summary['summary_file']}")
    lines += [f"  skipped (unreadable): {error}" for error in summary["errors"]]
    return "\n".join(lines)


def modality_lines(modal: dict[str, Any]) -> list[str]:
    """The prepare summary's lines on a modality cache (:func:`modality_summary`)."""
    missing = modal["missing"]
    lines = [
        f"modalities: {', '.join(modal['groups'])}; {len({m['recording'] for m in missing})} recordings miss a "
        f"modality ({len(missing)} recording-modality pairs{', listed below' if missing else ''}), "
        f"{len(modal['left_out_channels'])} channels left out, {len(modal['upsampled'])} recordings upsampled"
    ]
    by_recording: dict[str, list[str]] = {}
    for m in missing:
        by_recording.setdefault(m["recording"], []).append(f"{m['group']} ({m['reason']})")
    lines += [f"  {recording} misses {', '.join(groups)}" for recording, groups in by_recording.items()]
    lines += [
        f"  left out {c['channel']} ({c['group']}) of {c['recording']}: {c['problem']} ({c['detail']})"
        for c in modal["left_out_channels"]
    ]
    lines += [f"  upsampled {rec}: {', '.join(channels)}" for rec, channels in modal["upsampled"].items()]
    lines += [f"windows with invalid {group} (marked, kept): {n}" for group, n in modal["invalid_windows"].items()]
    return lines


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
    for recording, groups in summary.get("modalities", {}).items():
        lines.append(f"  {recording}: " + "; ".join(_group_text(name, g) for name, g in groups.items()))
    lines.append("per subject and the dataset card: mvapp data info --json")
    return "\n".join(lines)


def _group_text(name: str, group: dict[str, Any]) -> str:
    """``brain 6 ch 100 Hz uV`` / ``heart missing (reason)``, plus channels left out."""
    if "missing" in group:
        return f"{name} missing ({group['missing']})"
    text = f"{name} {len(group['channels'])} ch {group['sfreq']:g} Hz {'/'.join(sorted(set(group['units'])))}"
    left = ", ".join(f"{c['channel']} {c['problem']}" for c in group["left_out"])
    return f"{text} (left out: {left})" if left else text


def modality_info(manifest: dict) -> dict[str, dict[str, dict[str, Any]]]:
    """Per recording of a modality cache: per group its rate, channels, units and channels left out, or
    why it is missing."""
    rates = {g: spec["sfreq"] for g, spec in manifest["modality_groups"].items()}
    table: dict[str, dict[str, dict[str, Any]]] = {}
    for record in manifest["recordings"]:
        left = record.get("left_out_channels", [])
        table[record["recording"]] = {
            group: (
                {"missing": record["missing_modalities"][group], "left_out": [c for c in left if c["group"] == group]}
                if group not in record["modalities"]
                else {
                    "sfreq": rates[group],
                    **{k: record["modalities"][group][k] for k in ("channels", "units", "native_sfreqs")},
                    "left_out": [c for c in left if c["group"] == group],
                }
            )
            for group in rates
            if group in record["modalities"] or group in record.get("missing_modalities", {})
        }
    return table


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
        **({"modalities": modality_info(manifest)} if "modality_groups" in manifest else {}),
    }
