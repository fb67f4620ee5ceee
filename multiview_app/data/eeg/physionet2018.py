"""PhysioNet/CinC Challenge 2018 reader: WFDB records (``.hea`` + signal file) with sleep-stage aux
notes in the ``.arousal`` annotation file (W/N1/N2/N3/R at each stage change) and, when present,
the per-sample ``sleep_stages`` of the record's ``-arousal.mat`` (the authority). Scored events are
``(label`` ... ``label)`` aux-note pairs of the same file; the ``.mat``'s ``data/arousals`` marks where
arousals were not scored."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from .events import ScoredEvent, events_from_notes, intervals_from_mask
from .recording import Recording, resolve_channels
from .signals import load_vocabulary
from .stages import EPOCH_SECONDS, PHYSIONET2018_LABELS, PHYSIONET2018_MAT_STAGES, UNSCORED

TO_MICROVOLTS = {"uv": 1.0, "µv": 1.0, "mv": 1e3, "v": 1e6, "nv": 1e-3}
"""Scale from a voltage unit (lower-case) to microvolts."""

CARD = "physionet2018"

BYTES_PER_SAMPLE = {"16": 2, "24": 3, "32": 4, "80": 1, "8": 1, "61": 2, "160": 2}
SAMPLE_BITS = {"16": 16, "24": 24, "32": 32, "80": 8, "8": 8, "61": 16, "160": 16, "212": 12, "310": 10, "311": 10}


def find_records(source: Path) -> list[Path]:
    """Every WFDB header under ``source``, as record paths without extension."""
    return [h.with_suffix("") for h in sorted(source.rglob("*.hea"))]


def signal_files(record: Path, header: Any = None) -> list[Path]:
    """The signal file(s) a record's header (``header``: that header, already read) points to."""
    header = _read_header(record) if header is None else header
    return sorted({record.parent / name for name in header.file_name})


def _read_header(record: Path):
    import wfdb

    try:
        return wfdb.rdheader(str(record))
    except Exception as err:
        raise ValueError(f"{record}.hea: corrupt WFDB header ({err})") from None


def check_wfdb_integrity(record: Path, header: Any = None) -> None:
    """Raise ``ValueError`` naming the file when a signal file is missing or shorter than the header says
    (``header``: the record's header, already read)."""
    header = _read_header(record) if header is None else header
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
            raise ValueError(
                f"{path}: truncated WFDB signal file: header announces {header.sig_len} samples "
                f"({expected} bytes), found {path.stat().st_size}"
            )


def subject_from_comments(comments: list[str], default: str) -> str:
    """``subject: X`` in the header comments, else ``default`` (PhysioNet 2018: one record per subject)."""
    for line in comments:
        key, _, value = line.partition(":")
        if key.strip().lower() == "subject" and value.strip():
            return value.strip()
    return default


def arousal_mat_path(record: Path) -> Path:
    """``tr03-0005`` -> ``tr03-0005-arousal.mat`` (per-sample stages and arousals of the challenge)."""
    return record.parent / f"{record.name}-arousal.mat"


def _read_mat_entry(path: Path, key: str) -> dict[str, np.ndarray] | np.ndarray | None:
    """``data/<key>`` of a challenge ``-arousal.mat`` (MAT v7.3 / HDF5, or MAT v5): a group / struct as
    ``{field: (n,)}``, an array as ``(n,)``; None when the file has no such entry. ``ValueError`` naming
    the file and the entry when it cannot be read."""
    try:
        import h5py

        if h5py.is_hdf5(path):
            with h5py.File(path, "r") as handle:
                if key not in handle["data"]:
                    return None
                entry = handle["data"][key]
                if isinstance(entry, h5py.Group):
                    return {name: np.asarray(entry[name]).reshape(-1) for name in entry}
                return np.asarray(entry).reshape(-1)
        from scipy.io import loadmat

        data = loadmat(path, squeeze_me=True, struct_as_record=False)["data"]
        if key not in data._fieldnames:
            return None
        entry = getattr(data, key)
        if hasattr(entry, "_fieldnames"):
            return {name: np.asarray(getattr(entry, name)).reshape(-1) for name in entry._fieldnames}
        return np.asarray(entry).reshape(-1)
    except Exception as err:  # h5py / scipy raise many types on bad files
        raise ValueError(f"{path}: cannot read data/{key} ({type(err).__name__}: {err})") from None


def read_arousal_mat(path: Path) -> np.ndarray:
    """Per-sample stage codes ``(n,)`` (0..4, ``UNSCORED`` where ``undefined`` or no stage is set)
    from ``data/sleep_stages`` of a challenge ``-arousal.mat`` (MAT v7.3 / HDF5, or MAT v5).

    Raises ``ValueError`` naming the file when it cannot be read, a stage vector is missing, the
    vectors differ in length or a sample has two stages.
    """
    vectors = _read_mat_entry(path, "sleep_stages")
    if not isinstance(vectors, dict):
        found = "absent" if vectors is None else "an array, expected a group of stage vectors"
        raise ValueError(f"{path}: cannot read data/sleep_stages ({found})")
    missing = [name for name in PHYSIONET2018_MAT_STAGES if name not in vectors]
    lengths = {v.size for v in vectors.values()}
    if missing or len(lengths) != 1:
        raise ValueError(
            f"{path}: data/sleep_stages needs equally long vectors "
            f"{', '.join(PHYSIONET2018_MAT_STAGES)}; missing {missing}, lengths {sorted(lengths)}"
        )
    stacked = np.stack([vectors[name] != 0 for name in PHYSIONET2018_MAT_STAGES])  # (6, n)
    if (stacked.sum(axis=0) > 1).any():
        sample = int(np.flatnonzero(stacked.sum(axis=0) > 1)[0])
        raise ValueError(f"{path}: sample {sample} has more than one sleep stage set")
    codes = np.array([PHYSIONET2018_MAT_STAGES[name] for name in PHYSIONET2018_MAT_STAGES], dtype=np.int64)
    per_sample = np.full(stacked.shape[1], UNSCORED, dtype=np.int64)
    set_any = stacked.any(axis=0)
    per_sample[set_any] = codes[stacked[:, set_any].argmax(axis=0)]
    return per_sample


def read_arousal_targets(path: Path) -> np.ndarray | None:
    """Per-sample arousal targets ``(n,)`` int8 from ``data/arousals`` of a challenge ``-arousal.mat``:
    1 inside target arousals, 0 outside, -1 where arousals were not scored (apnea / hypopnea regions);
    None when the file has no ``data/arousals``. ``ValueError`` naming the file for other values."""
    values = _read_mat_entry(path, "arousals")
    if values is None:
        return None
    if isinstance(values, dict) or not np.isin(values, (-1, 0, 1)).all():
        raise ValueError(f"{path}: data/arousals must be one vector of -1, 0 and 1 per sample")
    return values.astype(np.int8)


def scored_events(
    notes: list[tuple[int, str]], fs: float, n_samples: int, mat: Path, counts: Counter
) -> tuple[list[ScoredEvent], list[tuple[float, float]] | None]:
    """The events of a record's non-stage ``.arousal`` aux ``notes`` ``(sample, text)`` (``(label`` ...
    ``label)`` pairs: :func:`~.events.events_from_notes`) and the arousal-unscored intervals (s) of its
    ``mat`` (``-1`` runs of ``data/arousals``; None when ``mat`` or that vector is absent). Counted:
    ``events_beyond_signal``, ``arousal_targets_length_differs_from_signal``."""
    events = events_from_notes([(s / fs, t) for s, t in notes], counts)
    beyond = sum(e.onset >= n_samples / fs for e in events)
    if beyond:
        counts["events_beyond_signal"] += beyond
    targets = read_arousal_targets(mat) if mat.exists() else None
    if targets is None:
        return events, None
    if targets.size != n_samples:
        counts["arousal_targets_length_differs_from_signal"] += 1
    return events, intervals_from_mask(targets < 0, fs)


def _labels_from_mat(mat: Path, labels: np.ndarray, grid_start: int, spe: int, counts: Counter) -> np.ndarray:
    """The ``(E,)`` epoch labels of ``mat``'s per-sample stages (the authority); epochs where the
    stage-note ``labels`` disagree are counted."""
    from_mat = stage_epochs_from_samples(read_arousal_mat(mat), grid_start, labels.size, spe, Counter())
    both = (labels >= 0) & (from_mat >= 0)
    counts["stage_notes_disagreeing_with_mat_epochs"] += int((labels[both] != from_mat[both]).sum())
    counts["epochs_scored_by_notes_undefined_in_mat"] += int(((labels >= 0) & (from_mat < 0)).sum())
    counts.pop("epochs_after_last_stage_note", None)  # the .mat decides the tail
    return from_mat


def stage_epochs_from_samples(
    per_sample: np.ndarray, start: int, n_epochs: int, spe: int, counts: Counter
) -> np.ndarray:
    """Per-sample stage codes -> ``(n_epochs,)`` labels of the grid starting at sample ``start``;
    an epoch whose samples hold more than one code is ``UNSCORED`` (counted)."""
    labels = np.full(n_epochs, UNSCORED, dtype=np.int64)
    usable = min(n_epochs, max(0, (per_sample.size - start) // spe))
    grid = per_sample[start : start + usable * spe].reshape(usable, spe)
    uniform = (grid == grid[:, :1]).all(axis=1)
    labels[:usable] = np.where(uniform, grid[:, 0], UNSCORED)
    counts["epochs_straddling_stage_change"] += int((~uniform).sum())
    return labels


def storable_limits(header: Any, index: int, factor: float) -> tuple[float, float] | None:
    """Lowest and highest physical value signal ``index`` of a WFDB ``header`` can store (its sample
    format's integer range through its ADC gain and baseline), times ``factor``; None when unknown."""
    bits, gain = SAMPLE_BITS.get(str(header.fmt[index])), float(header.adc_gain[index] or 0.0)
    if bits is None or gain <= 0:
        return None
    baseline = float(header.baseline[index])
    low, high = -(2 ** (bits - 1)) + 1, 2 ** (bits - 1) - 1  # the lowest code is WFDB's "no sample"
    return (low - baseline) / gain * factor, (high - baseline) / gain * factor


def read_physionet2018(record: Path, channels: list[str] | None) -> Recording:
    """Read the picked ``channels`` (every signal when None) of a WFDB record, each in its type's canonical
    unit (EEG, EOG, EMG uV, ECG mV, SaO2 %, effort and airflow as recorded: :func:`_read_signals`), and its stages.

    The 30-s grid starts at the first stage note (``Recording.grid_start_seconds``). A stage note
    labels the samples up to the next note (see :func:`stage_epochs_from_notes`); epochs that
    straddle a stage change are ``UNSCORED`` (counted); notes beyond the signal are truncated and
    counted. When ``<record>-arousal.mat`` exists its per-sample ``sleep_stages`` (``undefined``
    included) decide the labels and epochs where the notes disagree are counted. Scored events
    (``Recording.events``, a list) come from the other aux notes and the arousal-unscored intervals
    from the ``.mat``'s ``data/arousals`` (:func:`scored_events`). Raises
    ``ValueError`` naming the file on corrupt/truncated records, a missing ``.arousal`` file, or
    an absent channel.
    """
    import wfdb

    header = _read_header(record)  # parsed once here (wfdb's parser costs ~20 ms a header)
    check_wfdb_integrity(record, header)
    picked = resolve_channels(
        list(header.sig_name) if channels is None else channels, list(header.sig_name), Path(f"{record}.hea")
    )
    annotation_file = Path(f"{record}.arousal")
    if not annotation_file.exists():
        raise ValueError(f"{record}.hea: no sleep-stage annotation file '{annotation_file.name}' next to it")
    data, fs, described = _read_signals(record, header, picked)
    try:
        annotation = wfdb.rdann(str(record), "arousal")
    except Exception as err:
        raise ValueError(f"{annotation_file}: cannot read annotations ({err})") from None
    counts: Counter = Counter()
    texts = [(int(s), str(t).strip()) for s, t in zip(annotation.sample, annotation.aux_note or [])]
    notes = stage_notes(texts, len(annotation.sample), annotation_file, counts)
    spe = int(round(EPOCH_SECONDS * fs))
    grid_start = min(s for s, code in notes if code >= 0)  # the scored 30-s grid starts at the first stage note
    labels = stage_epochs_from_notes(notes, data.shape[1], fs, counts, start=grid_start)
    sources = [*signal_files(record, header), Path(f"{record}.hea"), annotation_file]
    mat = arousal_mat_path(record)
    if mat.exists():  # the per-sample stages are the authority; the notes are checked against them
        labels = _labels_from_mat(mat, labels, grid_start, spe, counts)
        sources.append(mat)
    other_notes = [(s, t) for s, t in texts if t not in PHYSIONET2018_LABELS]
    events, unscored = scored_events(other_notes, fs, data.shape[1], mat, counts)
    if grid_start:
        counts["grid_start_seconds"] += int(round(grid_start / fs))
    counts["unscored_epochs"] += int((labels == UNSCORED).sum())
    return Recording(
        recording=record.name,
        subject=subject_from_comments(list(header.comments or []), record.name),
        sources=sources,
        channel_names=list(picked if channels is None else channels),
        signals=list(data),
        sfreqs=[fs] * len(picked),
        epoch_labels=labels,
        counts=counts,
        grid_start_seconds=grid_start / fs,
        events=events,
        arousal_unscored=unscored,
        **described,
    )


def stage_notes(
    texts: list[tuple[int, str]], n_notes: int, annotation_file: Path, counts: Counter
) -> list[tuple[int, int]]:
    """``(sample, stage code)`` of the stage notes among the ``(sample, aux note)`` ``texts`` of an
    annotation file of ``n_notes`` annotations (the others counted ``non_stage_notes``); ``ValueError``
    naming ``annotation_file`` when it has none."""
    notes = [(s, PHYSIONET2018_LABELS[t]) for s, t in texts if t in PHYSIONET2018_LABELS]
    counts["non_stage_notes"] += n_notes - len(notes)
    if not any(code >= 0 for _, code in notes):
        raise ValueError(f"{annotation_file}: no sleep-stage notes (expected aux notes W, N1, N2, N3, R)")
    return notes


def _read_signals(record: Path, header: Any, picked: list[str]) -> tuple[np.ndarray, float, dict[str, list]]:
    """The ``picked`` signals of a WFDB record ``(c, n)`` float64, each in its type's canonical unit, the
    record's rate, and what :class:`Recording` says of them (``channel_types``, ``channel_units``,
    ``channel_limits``)."""
    import wfdb

    try:
        signal = wfdb.rdrecord(str(record), channel_names=picked)
    except Exception as err:
        raise ValueError(f"{record}: cannot read WFDB record ({err})") from None
    order = [list(signal.sig_name).index(p) for p in picked]
    data = np.asarray(signal.p_signal, dtype=np.float64).T  # (c, n) in the header's units
    if order != list(range(len(order))):
        data = data[order]  # a copy only when the picks are not in file order (every signal: none)
    units = [str(u).strip() for u in np.asarray(signal.units)[order]]
    types, canonical, factors = load_vocabulary().conversions(f"{record}.hea", picked, units, CARD)
    data *= np.array(factors)[:, None]  # -> each type's canonical unit (EEG: microvolts)
    indices = [list(header.sig_name).index(p) for p in picked]
    limits = [storable_limits(header, i, f) for i, f in zip(indices, factors)]
    return data, float(signal.fs), {"channel_types": types, "channel_units": canonical, "channel_limits": limits}


def stage_epochs_from_notes(
    notes: list[tuple[int, int]], n_samples: int, fs: float, counts: Counter, start: int = 0
) -> np.ndarray:
    """(sample, code) stage notes -> ``(E,)`` labels of the 30-s epochs of the grid starting at
    sample ``start`` (the first stage note: the scored grid).

    A note holds until the next note; an ``undefined``/``U`` note (a negative code: excluded) ends
    the previous stage. The last stage note holds until the end of the signal (the format has no end
    marker); the epochs it labels after the last note's own epoch are counted
    (``epochs_after_last_stage_note``) so the prepare summary shows them.
    """
    notes = sorted(notes)
    samples = np.array([s for s, _ in notes])
    codes = np.array([c for _, c in notes])
    beyond = samples >= n_samples
    if beyond.any():
        counts["stage_notes_beyond_signal"] += int(beyond.sum())
        samples, codes = samples[~beyond], codes[~beyond]
    spe = int(round(EPOCH_SECONDS * fs))
    n_epochs = max(0, (n_samples - start) // spe)
    starts = start + np.arange(n_epochs) * spe
    first = np.searchsorted(samples, starts, side="right") - 1  # note in force at the epoch start
    last = np.searchsorted(samples, starts + spe - 1, side="right") - 1  # ... and at its last sample
    labels = np.where(first >= 0, codes[np.maximum(first, 0)], UNSCORED)
    straddle = (first != last) & (first >= 0)
    labels[straddle & (codes[np.maximum(first, 0)] != codes[np.maximum(last, 0)])] = UNSCORED
    counts["epochs_straddling_stage_change"] += int((straddle & (labels == UNSCORED)).sum())
    counts["epochs_before_first_note"] += int((first < 0).sum())
    if samples.size and codes[-1] >= 0:
        tail = (starts > samples[-1]) & (labels >= 0)
        counts["epochs_after_last_stage_note"] += int(tail.sum())
    return labels.astype(np.int64)
