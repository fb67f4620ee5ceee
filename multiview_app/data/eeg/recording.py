"""What a reader hands to preprocessing: one recording's signals and per-epoch labels."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...fileio import sha256_file  # noqa: F401  (re-exported: the EEG cache's checksums)
from .events import ScoredEvent
from .stages import EPOCH_SECONDS, EXCLUDED, STAGES, UNSCORED

CHANNEL_PREFIXES = ("EEG ", "EOG ", "EMG ", "ECG ")


@dataclass
class Recording:
    """One night of one subject.

    Attributes:
        recording: unique id (e.g. "SC4001" or "tr03-0005").
        subject: subject id; the evaluator splits train/test by it.
        sources: signal file first, then annotation file(s).
        channel_names: picked channel names, as requested by the user.
        signals: one ``(n_c,)`` float64 array per channel in microvolts (NaN allowed).
        sfreqs: sampling rate of each channel (may differ: resampled later).
        epoch_labels: ``(E,)`` int label per 30-s epoch of the scored grid (0..4, ``EXCLUDED``,
            ``UNSCORED``), already truncated to the signal length.
        counts: reader-level counts (excluded epochs, hypnogram beyond signal, ...).
        grid_start_seconds: where epoch 0 starts in the signals (PhysioNet 2018: the first stage note).
        channel_types: signal type of each channel in MNE's vocabulary (``signals.SIGNAL_TYPES``); empty
            when the reader does not say (EEG-only readers).
        channel_units: unit of each signal array after the reader's conversion (``uV``, ``mV``, ``%``,
            ``arbitrary``); empty means every channel is in microvolts.
        native_sfreqs: rate of each channel as stored in the file (EDF readers hand signals at mne's common
            rate, the highest of the file); empty means ``sfreqs``.
        channel_limits: per channel, the lowest and highest value the file can store for it (in the
            channel's unit; None when unknown): a channel sitting at them is saturated.
        events: scored events (:class:`~multiview_app.data.eeg.events.ScoredEvent`); ``None`` when the
            dataset scores no events (Sleep-EDF), ``[]`` when it does and this night has none.
        arousal_unscored: ``[(start s, end s), ...]`` from the recording start where arousals were not
            scored (PhysioNet 2018: ``-1`` in ``data/arousals``, the apnea / hypopnea regions); ``None``
            when the dataset gives no such mask.
    """

    recording: str
    subject: str
    sources: list[Path]
    channel_names: list[str]
    signals: list[np.ndarray]
    sfreqs: list[float]
    epoch_labels: np.ndarray
    counts: Counter = field(default_factory=Counter)
    grid_start_seconds: float = 0.0
    channel_types: list[str] = field(default_factory=list)
    channel_units: list[str] = field(default_factory=list)
    events: list[ScoredEvent] | None = None
    native_sfreqs: list[float] = field(default_factory=list)
    channel_limits: list[tuple[float, float] | None] = field(default_factory=list)
    arousal_unscored: list[tuple[float, float]] | None = None


def _normalize(name: str) -> str:
    name = name.strip()
    for prefix in CHANNEL_PREFIXES:
        if name.upper().startswith(prefix):
            name = name[len(prefix) :]
    return name.strip().lower()


def resolve_channels(requested: list[str], available: list[str], source: Path) -> list[str]:
    """Map requested names to the file's names: exact, else case-insensitive ignoring an
    "EEG "/"EOG "/"EMG " prefix. Raises ``ValueError`` naming the file and the available channels."""
    resolved = []
    by_normalized: dict[str, list[str]] = {}
    for name in available:
        by_normalized.setdefault(_normalize(name), []).append(name)
    for name in requested:
        if name in available:
            resolved.append(name)
            continue
        matches = by_normalized.get(_normalize(name), [])
        if len(matches) != 1:
            problem = "is ambiguous" if matches else "not found"
            raise ValueError(f"{source}: channel '{name}' {problem}; available: {', '.join(available)}")
        resolved.append(matches[0])
    if len(set(resolved)) != len(resolved):
        raise ValueError(f"{source}: channels {requested} name the same channel twice")
    return resolved


def label_epochs_from_intervals(
    intervals: list[tuple[float, float, int]], n_signal_epochs: int, counts: Counter
) -> np.ndarray:
    """Per-epoch labels from (onset s, duration s, label code) intervals.

    Only epochs lying fully inside one interval get its label; everything else is ``UNSCORED``.
    Scored epochs beyond the signal are truncated and counted (``hypnogram_beyond_signal_epochs``);
    signal epochs after the last interval are counted (``signal_beyond_hypnogram_epochs``);
    intervals whose onset is not on the 30-s grid are counted (``misaligned_annotations``;
    the epochs they cut stay unscored). Returns ``(n_signal_epochs,)`` int64.
    """
    labels = np.full(n_signal_epochs, UNSCORED, dtype=np.int64)
    hypnogram_end = 0
    for onset, duration, code in intervals:
        first = int(np.ceil(onset / EPOCH_SECONDS - 1e-6))
        stop = int(np.floor((onset + duration) / EPOCH_SECONDS + 1e-6))
        if not np.isclose(onset / EPOCH_SECONDS, round(onset / EPOCH_SECONDS), atol=1e-4):
            counts["misaligned_annotations"] += 1
        hypnogram_end = max(hypnogram_end, stop)
        if stop > n_signal_epochs and code != UNSCORED and code >= 0:
            counts["hypnogram_beyond_signal_epochs"] += stop - max(first, n_signal_epochs)
        labels[max(first, 0) : min(stop, n_signal_epochs)] = code
    if hypnogram_end < n_signal_epochs:
        counts["signal_beyond_hypnogram_epochs"] += n_signal_epochs - hypnogram_end
    return labels


MAJORITY_SHARE = 2 / 3
"""Share of a 30-s epoch (20 s) one stage must cover to label an epoch scored in shorter periods (AASM's
majority rule; DREAMS: 4 of six 5-s labels)."""


def majority_votes(per_epoch: int) -> int:
    """Periods of ``per_epoch`` per 30-s epoch one stage needs: ``ceil(MAJORITY_SHARE * per_epoch)``."""
    return int(np.ceil(MAJORITY_SHARE * per_epoch - 1e-9))


def majority_epochs(codes: np.ndarray, per_epoch: int, prefix: str) -> tuple[np.ndarray, Counter]:
    """Stage codes of consecutive scoring periods ``(n,)`` -> 30-s codes ``(n // per_epoch,)``.

    ``codes`` hold 0..4 (a stage), ``EXCLUDED`` (movement / no stage) or any other negative code (unknown:
    votes for nothing). An epoch takes the stage that at least :func:`majority_votes` of its ``per_epoch``
    periods name, else ``EXCLUDED``. Counts ``{prefix}_epochs_{unanimous, majority, no_majority, movement}``
    (movement: ``EXCLUDED`` holds the majority) and ``{prefix}_labels_after_last_epoch``."""
    needed = majority_votes(per_epoch)
    n_epochs = codes.size // per_epoch
    grid = np.asarray(codes[: n_epochs * per_epoch], dtype=np.int64).reshape(n_epochs, per_epoch)
    votes = np.stack([(grid == stage).sum(axis=1) for stage in range(len(STAGES))], axis=1)  # (E, 5)
    top, best = votes.max(axis=1), votes.argmax(axis=1)
    movement = (grid == EXCLUDED).sum(axis=1) >= needed
    kept = top >= needed
    counts: Counter = Counter()
    counts[f"{prefix}_epochs_unanimous"] += int((top == per_epoch).sum())
    counts[f"{prefix}_epochs_majority"] += int((kept & (top < per_epoch)).sum())
    counts[f"{prefix}_epochs_movement"] += int(movement.sum())
    counts[f"{prefix}_epochs_no_majority"] += int((~kept & ~movement).sum())
    counts[f"{prefix}_labels_after_last_epoch"] += int(codes.size - n_epochs * per_epoch)
    return np.where(kept, best, EXCLUDED).astype(np.int64), counts
