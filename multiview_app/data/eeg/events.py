"""Scored events of a night (respiratory events, arousals): what readers return beside the stages,
the per-window targets they give the cache, and the per-night apnea-hypopnea index.

PhysioNet 2018 writes an event as two aux notes of its ``.arousal`` annotation, ``(label`` at the onset
and ``label)`` at the end (:func:`events_from_notes`); ``datasets/modalities/psg.yaml`` ``events`` maps
each label to a target class (:func:`event_classes`). A window is positive for a class when one event
of that class overlaps it by at least ``min_overlap`` seconds (:func:`window_targets`)::

    targets = window_targets(recording.events, epochs, recording.grid_start_seconds,
                             unscored=recording.arousal_unscored)
    targets["arousal"]        # (w,) int8: 1, 0, or -1 where the challenge did not score arousals
    severity(ahi(recording.events, recording.epoch_labels))   # "none" | "mild" | "moderate" | "severe"
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .stages import EPOCH_SECONDS, STAGES

if TYPE_CHECKING:
    from .recording import Recording

APNEA_HYPOPNEA = "apnea_hypopnea"
AROUSAL = "arousal"
TARGET_CLASSES: tuple[str, ...] = (APNEA_HYPOPNEA, AROUSAL)
"""Classes of the per-window targets (:func:`window_targets`)."""

MIN_OVERLAP_SECONDS = 5.0
"""Seconds an event must overlap a window for the window to be positive for its class."""

OVERLAP_TOLERANCE = 1e-6
"""Slack (s) of the overlap comparisons: onsets are sample indices / rate, not exact in binary."""

SEVERITY_BOUNDS: tuple[tuple[float, str], ...] = ((5.0, "none"), (15.0, "mild"), (30.0, "moderate"))
"""``(upper bound, class)`` of the AHI severity classes (events / hour); at and above 30: ``severe``."""

NO_SCORED_EVENTS = "recordings_without_scored_events"
"""Prepare-summary count of recordings whose dataset scores no events (``Recording.events is None``)."""


@dataclass(frozen=True)
class ScoredEvent:
    """One scored event: onset and duration in seconds from the recording start, and its label in the
    PhysioNet 2018 ``.arousal`` vocabulary (e.g. ``resp_obstructiveapnea``, ``arousal_spontaneous``;
    ``datasets/modalities/psg.yaml`` ``events`` maps labels to per-window target classes)."""

    onset: float
    duration: float
    label: str

    @property
    def end(self) -> float:
        return self.onset + self.duration


def event_classes() -> dict[str, str]:
    """Event label -> target class (``apnea_hypopnea``, ``arousal``, ``other_respiratory``), from the
    PSG vocabulary's ``events``."""
    from .signals import load_vocabulary

    return load_vocabulary().events


def events_from_notes(notes: Iterable[tuple[float, str]], counts: Counter) -> list[ScoredEvent]:
    """``(seconds, text)`` notes -> events sorted by onset: ``(label`` opens an event, ``label)`` closes
    the latest open event of that label (events of different labels may nest or overlap).

    Counted in ``counts``, never dropped silently: ``events_unmatched_close:<label>`` (a close with no open
    event), ``events_unmatched_open:<label>`` (an open never closed; not an event),
    ``events_unknown_label:<label>`` (a label outside the vocabulary; the event is kept, it is no
    target class) and ``events_unrecognized_note:<text>`` (neither an open nor a close).
    """
    known = event_classes()
    open_onsets: dict[str, list[float]] = {}
    events = []
    for seconds, text in sorted(notes, key=lambda note: note[0]):  # stable: file order at equal times
        text = text.strip()
        if text.startswith("(") and len(text) > 1:
            open_onsets.setdefault(text[1:], []).append(float(seconds))
        elif text.endswith(")") and len(text) > 1:
            label = text[:-1]
            if open_onsets.get(label):
                onset = open_onsets[label].pop()
                events.append(ScoredEvent(onset, float(seconds) - onset, label))
            else:
                counts[f"events_unmatched_close:{label}"] += 1
        else:
            counts[f"events_unrecognized_note:{text}"] += 1
    for label, onsets in open_onsets.items():
        if onsets:
            counts[f"events_unmatched_open:{label}"] += len(onsets)
    for event in events:
        if event.label not in known:
            counts[f"events_unknown_label:{event.label}"] += 1
    return sorted(events, key=lambda e: (e.onset, e.label))


def intervals_from_mask(mask: np.ndarray, fs: float) -> list[tuple[float, float]]:
    """Per-sample ``mask (n,)`` bool -> ``[(start s, end s), ...]`` of its runs of True (end exclusive)."""
    edges = np.diff(np.concatenate([[0], np.asarray(mask, dtype=np.int8), [0]]))
    starts, stops = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    return [(float(a) / fs, float(b) / fs) for a, b in zip(starts, stops)]


def _overlaps(spans: np.ndarray, starts: np.ndarray, length: float) -> np.ndarray:
    """Seconds of overlap ``(k, w)`` of ``spans (k, 2)`` ``[start, end)`` with the windows
    ``[starts, starts + length)`` (``starts (w,)``)."""
    low = np.maximum(spans[:, :1], starts[None, :])
    high = np.minimum(spans[:, 1:], starts[None, :] + length)
    return np.clip(high - low, 0.0, None)


def _merged(intervals: Sequence[tuple[float, float]]) -> np.ndarray:
    """Intervals ``[(start, end), ...]`` -> their union as disjoint sorted spans ``(k, 2)``."""
    merged: list[list[float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return np.array(merged, dtype=np.float64).reshape(-1, 2)


def window_targets(
    events: Sequence[ScoredEvent],
    epochs: Sequence[int] | np.ndarray,
    grid_start_seconds: float,
    window_seconds: float = EPOCH_SECONDS,
    min_overlap: float = MIN_OVERLAP_SECONDS,
    unscored: Sequence[tuple[float, float]] | None = None,
) -> dict[str, np.ndarray]:
    """Per-window targets ``{class: (w,) int8}`` for :data:`TARGET_CLASSES`.

    Window ``i`` covers ``[grid_start_seconds + epochs[i] * 30, ... + window_seconds)`` seconds from the
    recording start. It is 1 for a class when a single event of that class overlaps it by at least
    ``min_overlap`` s (4.9 s: 0, 5.0 s: 1), else 0. ``unscored``: the challenge's arousal-unscored
    regions (``-1`` in ``data/arousals``: apnea / hypopnea regions); a window overlapping their union by
    at least ``min_overlap`` s is ``-1`` in ``arousal`` (excluded, as the challenge excludes those
    samples: an arousal that long could lie there unscored), whatever its events.
    """
    if not 0 < min_overlap <= window_seconds:
        raise ValueError(f"window_targets: min_overlap {min_overlap} s must lie in (0, {window_seconds}] s")
    classes = event_classes()
    starts = grid_start_seconds + np.asarray(epochs, dtype=np.float64).reshape(-1) * EPOCH_SECONDS
    threshold = min_overlap - OVERLAP_TOLERANCE
    targets = {}
    for name in TARGET_CLASSES:
        spans = np.array([(e.onset, e.end) for e in events if classes.get(e.label) == name], dtype=np.float64)
        overlap = _overlaps(spans.reshape(-1, 2), starts, window_seconds)  # (k, w)
        targets[name] = (overlap >= threshold).any(axis=0).astype(np.int8)
    if unscored:
        hidden = _overlaps(_merged(unscored), starts, window_seconds).sum(axis=0) >= threshold
        targets[AROUSAL][hidden] = -1
    return targets


def ahi(events: Sequence[ScoredEvent], stage_labels: np.ndarray) -> float:
    """Apnea-hypopnea index: events of class ``apnea_hypopnea`` (every apnea and hypopnea of the night)
    per hour of scored sleep (epochs ``(E,)`` labelled N1, N2, N3 or REM, 30 s each); NaN without sleep."""
    classes = event_classes()
    sleep_epochs = int(np.isin(np.asarray(stage_labels), np.arange(1, len(STAGES))).sum())
    count = sum(1 for e in events if classes.get(e.label) == APNEA_HYPOPNEA)
    return count / (sleep_epochs * EPOCH_SECONDS / 3600.0) if sleep_epochs else float("nan")


def severity(index: float) -> str:
    """AHI severity, lower bounds inclusive: ``none`` < 5 <= ``mild`` < 15 <= ``moderate`` < 30 <= ``severe``
    (events per hour). ``ValueError`` for a NaN or negative index."""
    if not index >= 0:
        raise ValueError(f"severity: AHI {index} is not a number >= 0")
    return next((name for bound, name in SEVERITY_BOUNDS if index < bound), "severe")


def event_counts(events: Sequence[ScoredEvent]) -> dict[str, int]:
    """Events per label, labels sorted."""
    return dict(sorted(Counter(e.label for e in events).items()))


def event_record(recording: Recording, epochs: np.ndarray) -> dict[str, Any]:
    """The manifest fields of a recording's events for its kept windows (``epochs (w,)``): ``event_targets``
    ``{class: [w ints]}``, ``ahi`` and ``severity`` (None without sleep) and ``event_counts`` by label;
    ``{}`` when the dataset scores no events (``recording.events is None``)."""
    if recording.events is None:
        return {}
    targets = window_targets(
        recording.events, epochs, recording.grid_start_seconds, unscored=recording.arousal_unscored
    )
    index = ahi(recording.events, recording.epoch_labels)
    scored = bool(np.isfinite(index))
    return {
        "event_targets": {name: values.tolist() for name, values in targets.items()},
        "ahi": float(index) if scored else None,
        "severity": severity(index) if scored else None,
        "event_counts": event_counts(recording.events),
    }


def event_summary(record: dict[str, Any]) -> Counter:
    """Prepare-summary counts of one manifest record: events per target class, ``unknown_label:<label>``
    for labels outside the vocabulary, or :data:`NO_SCORED_EVENTS` when it has no event fields."""
    if "event_counts" not in record:
        return Counter({NO_SCORED_EVENTS: 1})
    classes = event_classes()
    summary: Counter = Counter(dict.fromkeys(TARGET_CLASSES, 0))  # the target classes show, even at 0
    for label, n in record["event_counts"].items():
        summary[classes.get(label, f"unknown_label:{label}")] += n
    return summary


def event_summary_line(counts: dict[str, int]) -> str | None:
    """The prepare table's events line: counts by class and unknown labels, and once, how many
    recordings come from a dataset that scores no events; None when there is nothing to say."""
    parts = [
        f"{name} {n}"
        for name, n in sorted(counts.items())
        if name != NO_SCORED_EVENTS and (n or name in TARGET_CLASSES)
    ]
    if n := counts.get(NO_SCORED_EVENTS, 0):
        parts.append(f"none scored by this dataset ({n} recording{'s' if n != 1 else ''})")
    return f"events: {', '.join(parts)}" if parts else None
