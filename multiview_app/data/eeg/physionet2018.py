"""PhysioNet/CinC Challenge 2018 reader: WFDB records (``.hea`` + signal file) with sleep-stage aux
notes in the ``.arousal`` annotation file (W/N1/N2/N3/R at each stage change)."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from .recording import Recording, resolve_channels
from .stages import EPOCH_SECONDS, PHYSIONET2018_LABELS, UNSCORED

BYTES_PER_SAMPLE = {"16": 2, "24": 3, "32": 4, "80": 1, "8": 1, "61": 2, "160": 2}


def find_records(source: Path) -> list[Path]:
    """Every WFDB header under ``source``, as record paths without extension."""
    return [h.with_suffix("") for h in sorted(source.rglob("*.hea"))]


def signal_files(record: Path) -> list[Path]:
    """The signal file(s) a record's header points to."""
    header = _read_header(record)
    return sorted({record.parent / name for name in header.file_name})


def _read_header(record: Path):
    import wfdb

    try:
        return wfdb.rdheader(str(record))
    except Exception as err:
        raise ValueError(f"{record}.hea: corrupt WFDB header ({err})") from None


def check_wfdb_integrity(record: Path) -> None:
    """Raise ``ValueError`` naming the file when a signal file is missing or shorter than the header says."""
    header = _read_header(record)
    per_file: dict[str, int] = {}
    for name, fmt in zip(header.file_name, header.fmt):
        if fmt not in BYTES_PER_SAMPLE:
            return  # packed formats (212, 310, ...): leave the check to wfdb
        per_file[name] = per_file.get(name, 0) + BYTES_PER_SAMPLE[fmt]
    for name, bytes_per_frame in per_file.items():
        path = record.parent / name
        if not path.exists():
            raise ValueError(f"{path}: signal file of record {record.name} is missing")
        if name.endswith(".mat"):
            continue  # MAT v4 files carry a header of their own
        expected = header.sig_len * bytes_per_frame
        if path.stat().st_size < expected:
            raise ValueError(f"{path}: truncated WFDB signal file: header announces {header.sig_len} samples "
                             f"({expected} bytes), found {path.stat().st_size}")


def subject_from_comments(comments: list[str], default: str) -> str:
    """``subject: X`` in the header comments, else ``default`` (PhysioNet 2018: one record per subject)."""
    for line in comments:
        key, _, value = line.partition(":")
        if key.strip().lower() == "subject" and value.strip():
            return value.strip()
    return default


def read_physionet2018(record: Path, channels: list[str]) -> Recording:
    """Read the picked ``channels`` of a WFDB record and its per-epoch stages.

    A stage note labels the samples up to the next stage note (the last one up to the end of the
    signal); epochs that straddle a stage change are ``UNSCORED`` (counted); notes beyond the signal
    are truncated and counted. Raises ``ValueError`` naming the file on corrupt/truncated records,
    a missing ``.arousal`` file, or an absent channel.
    """
    import wfdb

    check_wfdb_integrity(record)
    header = _read_header(record)
    picked = resolve_channels(channels, list(header.sig_name), Path(f"{record}.hea"))
    annotation_file = Path(f"{record}.arousal")
    if not annotation_file.exists():
        raise ValueError(f"{record}.hea: no sleep-stage annotation file '{annotation_file.name}' next to it")
    try:
        signal = wfdb.rdrecord(str(record), channel_names=picked)
    except Exception as err:
        raise ValueError(f"{record}: cannot read WFDB record ({err})") from None
    try:
        annotation = wfdb.rdann(str(record), "arousal")
    except Exception as err:
        raise ValueError(f"{annotation_file}: cannot read annotations ({err})") from None
    order = [list(signal.sig_name).index(p) for p in picked]
    data = np.asarray(signal.p_signal, dtype=np.float64)[:, order].T  # (c, n)
    fs = float(signal.fs)
    counts: Counter = Counter()
    notes = [(int(s), PHYSIONET2018_LABELS[str(t).strip()]) for s, t in
             zip(annotation.sample, annotation.aux_note or []) if str(t).strip() in PHYSIONET2018_LABELS]
    counts["non_stage_notes"] += len(annotation.sample) - len(notes)
    if not notes:
        raise ValueError(f"{annotation_file}: no sleep-stage notes (expected aux notes W, N1, N2, N3, R)")
    labels = stage_epochs_from_notes(notes, data.shape[1], fs, counts)
    counts["unscored_epochs"] += int((labels == UNSCORED).sum())
    return Recording(recording=record.name, subject=subject_from_comments(list(header.comments or []), record.name),
                     sources=[*signal_files(record), Path(f"{record}.hea"), annotation_file],
                     channel_names=list(channels), signals=list(data), sfreqs=[fs] * len(picked),
                     epoch_labels=labels, counts=counts)


def stage_epochs_from_notes(notes: list[tuple[int, int]], n_samples: int, fs: float, counts: Counter) -> np.ndarray:
    """(sample, label) stage notes -> ``(E,)`` labels of the signal's 30-s epochs."""
    notes = sorted(notes)
    samples = np.array([s for s, _ in notes])
    codes = np.array([c for _, c in notes])
    beyond = samples >= n_samples
    if beyond.any():
        counts["stage_notes_beyond_signal"] += int(beyond.sum())
        samples, codes = samples[~beyond], codes[~beyond]
    spe = int(round(EPOCH_SECONDS * fs))
    n_epochs = n_samples // spe
    starts = np.arange(n_epochs) * spe
    first = np.searchsorted(samples, starts, side="right") - 1  # note in force at the epoch start
    last = np.searchsorted(samples, starts + spe - 1, side="right") - 1  # ... and at its last sample
    labels = np.where(first >= 0, codes[np.maximum(first, 0)], UNSCORED)
    straddle = (first != last) & (first >= 0)
    labels[straddle & (codes[np.maximum(first, 0)] != codes[np.maximum(last, 0)])] = UNSCORED
    counts["epochs_straddling_stage_change"] += int((straddle & (labels == UNSCORED)).sum())
    counts["epochs_before_first_note"] += int((first < 0).sum())
    return labels.astype(np.int64)
