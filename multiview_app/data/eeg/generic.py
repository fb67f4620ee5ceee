"""Your own PSG: any EDF / EDF+ / BDF file -> a :class:`~.recording.Recording` with every signal.

Each signal gets a type (the stage map's ``channels``, then ``datasets/modalities/psg.yaml``'s aliases, then
the file's MNE type: a label prefix such as ``EEG Fpz-Cz`` or ``Resp chest``, or a BIDS ``channels.tsv`` type),
its type's canonical unit (psg.yaml's unit table applied to the EDF physical dimension text) and its rate.
Flat, saturated and out-of-range channels (:mod:`.channel_quality`) and channels whose unit cannot be
converted are left out and reported. Stages come from exactly one source (:class:`StageSource`): a CSV
hypnogram, the file's EDF+ annotations, or a stage channel scored in periods that divide 30 s (combined by
:func:`~.recording.majority_epochs`). Stage labels and events map through a stage map (:mod:`.stage_maps`)::

    recording, report = read_psg("night.edf", stages="channel:hypnogram", stage_map="dreams")
    report.left_out   # [LeftOut("VAB", "saturated", "31% of samples at the range ..."), ...]
"""

from __future__ import annotations

import csv
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from .channel_quality import assess_channel, edf_storable_limits
from .events import ScoredEvent
from .recording import Recording, label_epochs_from_intervals, majority_epochs, resolve_channels
from .signals import UnknownChannelError, Vocabulary, load_vocabulary, normalize_label
from .stage_maps import ANY_CODE, DEFAULT_STAGE_MAP, StageMap, label_key, load_stage_map
from .stages import EPOCH_SECONDS, UNSCORED

VOLTS = {"uV": 1e-6, "mV": 1e-3}
"""Voltage units in volts: an EEG written in mV is converted to its canonical uV (and an ECG the other way)."""


EDF_TYPE_PREFIXES = {"EEG": "eeg", "EOG": "eog", "EMG": "emg", "ECG": "ecg", "RESP": "resp", "BIO": "bio"}
EDF_TYPE_PREFIXES |= {"SAO2": "bio", "MISC": "misc", "TEMP": "misc"}
"""A label's first word that names its type, as mne's EDF reader reads it (``infer_types=True``)."""

SCORING_PERIODS = (30.0, 15.0, 10.0, 6.0, 5.0, 3.0, 2.0, 1.0)
"""Scoring periods (s) that divide 30 s, tried from the longest when a stage channel's period is detected."""

Annotation = tuple[float, float, str]
"""(onset s, duration s, text) of one annotation."""


@dataclass(frozen=True)
class StageSource:
    """Where stages come from: ``csv`` (``<file stem>.csv`` beside the file, or ``hypnogram``), ``annotations``
    (EDF+ / BIDS events), ``channel`` (a stage signal, ``scoring_seconds`` detected when None) or ``auto``
    (the one present of csv and annotations)."""

    kind: Literal["auto", "csv", "annotations", "channel"]
    channel: str | None = None
    scoring_seconds: float | None = None

    @classmethod
    def parse(cls, text: str) -> StageSource:
        """``auto``, ``csv``, ``annotations``, ``channel:LABEL`` or ``channel:LABEL:SECONDS``."""
        kind, _, rest = text.partition(":")
        if kind in ("auto", "csv", "annotations") and not rest:
            return cls(kind)  # type: ignore[arg-type]
        if kind == "channel" and rest:
            label, _, seconds = rest.partition(":")
            try:
                return cls("channel", label, float(seconds) if seconds else None)
            except ValueError:
                pass
        raise ValueError(f"--stages '{text}': expected auto, csv, annotations, channel:LABEL or channel:LABEL:SECONDS")


@dataclass
class FileSignal:
    """One signal as stored: ``data (n,)`` in the file's physical unit ``unit_text``, at ``sfreq`` Hz;
    ``limits``: the lowest / highest value the file can store for it; ``file_type``: its MNE type, if stated;
    ``step``: its quantization step (physical units per digital unit; 0: unknown)."""

    label: str
    data: np.ndarray
    sfreq: float
    unit_text: str
    limits: tuple[float, float] | None
    file_type: str | None
    step: float = 0.0

    def codes(self) -> np.ndarray:
        """``(n,)`` values as codes: within one quantization step of an integer -> that integer (a stage or
        event code stored with a physical range that does not map it exactly), else rounded to 6 decimals."""
        nearest = np.round(np.nan_to_num(self.data))
        snap = np.abs(self.data - nearest) <= max(self.step, 1e-6)
        return np.where(snap, nearest, np.round(np.nan_to_num(self.data), 6))


@dataclass(frozen=True)
class LeftOut:
    """A channel not used, why (``flat``, ``saturated``, ``out_of_range``, ``unit``) and the figure that decided."""

    label: str
    reason: str
    detail: str


@dataclass
class ReadReport:
    """What :func:`read_psg` did not use or could not map, beside ``Recording.counts``."""

    stage_source: str = ""
    left_out: list[LeftOut] = field(default_factory=list)
    misc: list[str] = field(default_factory=list)
    not_signals: list[str] = field(default_factory=list)
    unknown_stages: Counter = field(default_factory=Counter)
    unknown_events: Counter = field(default_factory=Counter)
    unknown_annotations: Counter = field(default_factory=Counter)


def edf_label_type(label: str) -> str | None:
    """MNE type named by a label's first word (``EEG Fpz-Cz`` -> eeg), else None."""
    first, _, rest = label.strip().partition(" ")
    return EDF_TYPE_PREFIXES.get(first.upper()) if rest else None


def read_psg_file(path: Path) -> tuple[list[FileSignal], list[Annotation]]:
    """Every signal of an EDF / EDF+ / BDF (physical values, via edfio) and its EDF+ annotations; a file edfio
    cannot read raises ``ValueError`` naming it."""
    import edfio

    try:
        with open(path, "rb") as handle:
            bdf = handle.read(1) == b"\xff"  # BDF's header starts with 0xFF "BIOSEMI", EDF's with "0"
    except OSError as err:
        raise ValueError(f"{path}: unreadable ({err})") from None
    try:
        edf = edfio.read_bdf(path) if bdf else edfio.read_edf(path)
        annotations = [(float(a.onset), float(a.duration or 0.0), str(a.text)) for a in edf.annotations]
    except Exception as err:  # edfio raises many types on malformed files
        raise ValueError(f"{path}: cannot read as {'BDF' if bdf else 'EDF'} ({err})") from None
    signals = []
    for signal in edf.signals:
        physical = (signal.physical_range.min, signal.physical_range.max)
        digital = (signal.digital_range.min, signal.digital_range.max)
        limits = edf_storable_limits(physical, digital, bits=24 if bdf else 16)
        signals.append(
            FileSignal(
                signal.label,
                np.asarray(signal.data, dtype=np.float64),
                float(signal.sampling_frequency),
                signal.physical_dimension,
                limits,
                edf_label_type(signal.label),
                abs(physical[1] - physical[0]) / max(abs(digital[1] - digital[0]), 1),
            )
        )
    return signals, annotations


def channel_type(signal: FileSignal, stage_map: StageMap, vocabulary: Vocabulary) -> str | None:
    """The stage map's type for the label, else psg.yaml's aliases, else the file's MNE type (None: unknown)."""
    override = stage_map.channel_types.get(normalize_label(signal.label))
    return override or vocabulary.type_of(signal.label, signal.file_type)


def canonical(signal: FileSignal, kind: str, vocabulary: Vocabulary, counts: Counter) -> tuple[str, float] | LeftOut:
    """``(unit, factor)`` taking ``signal`` into its type's canonical unit (types whose canonical unit is
    ``arbitrary`` keep a known unit of the table; an unknown unit text is taken as ``arbitrary``, counted); a
    unit that cannot be converted gives a :class:`LeftOut`."""
    target = vocabulary.canonical_units[kind]
    try:
        unit, factor = vocabulary.canonical_unit(signal.unit_text)
    except ValueError:
        unit, factor = "arbitrary", 1.0
        counts["channels_unit_unknown_taken_as_arbitrary"] += int(target == "arbitrary")
    if unit == target or target == "arbitrary":
        return unit, factor
    if unit in VOLTS and target in VOLTS:
        return target, factor * VOLTS[unit] / VOLTS[target]
    detail = f"unit '{signal.unit_text}' cannot be converted to {target} (type {kind})"
    return LeftOut(signal.label, "unit", detail)


def signal_channels(
    signals: list[FileSignal], stage_map: StageMap, types: dict[str, str], report: ReadReport, counts: Counter
) -> list[tuple[FileSignal, np.ndarray, str, str]]:
    """The usable signals as ``(signal, values (n,) in its canonical unit, type, unit)``; the others are
    reported (left out, misc) and counted. ``types``: label -> MNE type given with the file (BIDS)."""
    vocabulary = load_vocabulary()
    kept = []
    for signal in signals:
        if types.get(signal.label):
            signal.file_type = types[signal.label]
        kind = channel_type(signal, stage_map, vocabulary)
        if kind is None:  # no alias, no usable type: kept as misc, reported
            report.misc.append(signal.label)
            counts["channels_misc_unknown_label"] += 1
            kind = "misc"
        unit = canonical(signal, kind, vocabulary, counts)
        if isinstance(unit, LeftOut):
            verdict = unit
        else:
            unit_name, factor = unit
            limits = tuple(sorted(v * factor for v in signal.limits)) if signal.limits else None
            values = signal.data if factor == 1.0 else signal.data * factor
            quality = assess_channel(signal.label, values, unit_name, limits, vocabulary.valid_range(kind, unit_name))
            verdict = None if quality.usable else LeftOut(signal.label, str(quality.problem), quality.detail)
        if verdict is not None:
            report.left_out.append(verdict)
            counts[f"channels_left_out_{verdict.reason}"] += 1
            continue
        kept.append((signal, values, kind, unit_name))
    return kept


def read_stage_csv(path: Path) -> list[Annotation]:
    """A CSV hypnogram (header with ``onset``, ``duration``, ``stage``; seconds) -> ``(onset, duration, stage)``
    rows; ``ValueError`` naming the file and line otherwise."""
    try:
        rows = list(csv.reader(path.read_text(errors="replace").splitlines()))
    except OSError as err:
        raise ValueError(f"{path}: unreadable hypnogram ({err})") from None
    header = [cell.strip().lower() for cell in rows[0]] if rows else []
    missing = [c for c in ("onset", "duration", "stage") if c not in header]
    if missing:
        raise ValueError(f"{path}: header {header} lacks columns {missing}; expected onset,duration,stage (seconds)")
    columns = [header.index(c) for c in ("onset", "duration", "stage")]
    table = []
    for number, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        try:
            onset, duration, stage = (row[i].strip() for i in columns)
            table.append((float(onset), float(duration), stage))
        except (IndexError, ValueError):
            raise ValueError(f"{path}: line {number}: {row}, expected <onset s>,<duration s>,<stage>") from None
    return table


def _intervals_to_epochs(intervals: list[tuple[float, float, int]], n_epochs: int, counts: Counter) -> np.ndarray:
    """Stage intervals -> ``(n_epochs,)`` codes: intervals scored in a period shorter than 30 s that divides it
    are combined by the majority rule; others go through :func:`label_epochs_from_intervals`."""
    period = min((d for _, d, _ in intervals), default=EPOCH_SECONDS)
    aligned = all(np.isclose(v / period, round(v / period), atol=1e-6) for o, d, _ in intervals for v in (o, d))
    if period >= EPOCH_SECONDS or not aligned or not np.isclose(EPOCH_SECONDS / period, round(EPOCH_SECONDS / period)):
        return label_epochs_from_intervals(intervals, n_epochs, counts)
    per_epoch = int(round(EPOCH_SECONDS / period))
    codes = np.full(n_epochs * per_epoch, UNSCORED, dtype=np.int64)
    for onset, duration, code in intervals:
        first, stop = int(round(onset / period)), int(round((onset + duration) / period))
        codes[first:stop] = code
        counts["stage_periods_beyond_signal"] += max(0, stop - max(first, codes.size))
    epochs, rule_counts = majority_epochs(codes, per_epoch, "stage")
    counts.update(rule_counts)
    unscored = (codes.reshape(n_epochs, per_epoch) == UNSCORED).all(axis=1)
    counts["stage_epochs_no_majority"] -= int(unscored.sum())  # not scored at all: unscored, not excluded
    return np.where(unscored, UNSCORED, epochs)


def stages_from_annotations(
    rows: list[Annotation], stage_map: StageMap, n_epochs: int, report: ReadReport, counts: Counter, every_row: bool
) -> np.ndarray:
    """``(n_epochs,)`` codes from stage rows (``every_row``: a CSV, where a label the map lacks is an unknown
    stage; else annotations, where it is left to :func:`events_from_annotations`). A stage row without a
    duration covers one epoch (counted)."""
    intervals = []
    for onset, duration, text in rows:
        code = stage_map.stage_code(text)
        if code is None:
            if every_row:
                report.unknown_stages[text] += 1
                counts["unknown_stage_labels"] += 1
            continue
        if duration <= 0:
            counts["stage_rows_without_duration"] += 1
            duration = EPOCH_SECONDS
        intervals.append((onset, duration, code))
    return _intervals_to_epochs(intervals, n_epochs, counts)


def scoring_period(signal: FileSignal, path: Path) -> float:
    """The longest period of :data:`SCORING_PERIODS` in whose aligned blocks a stage channel is constant."""
    for period in SCORING_PERIODS:
        block = period * signal.sfreq
        if block < 1 or not np.isclose(block, round(block)):
            continue
        block = int(round(block))
        values = signal.data[: signal.data.size // block * block].reshape(-1, block)
        if values.size and (values == values[:, :1]).all():
            return period
    raise ValueError(
        f"{path}: stage channel '{signal.label}' ({signal.sfreq:g} Hz) is constant in no scoring period dividing "
        f"30 s ({', '.join(f'{p:g}' for p in SCORING_PERIODS)} s); give it: --stages channel:{signal.label}:SECONDS"
    )


def stages_from_channel(
    signal: FileSignal, stage_map: StageMap, seconds: float | None, path: Path, report: ReadReport, counts: Counter
) -> np.ndarray:
    """30-s codes from a stage channel: one label per scoring period (``seconds``, detected when None; a
    period's first sample, blocks that change inside counted), mapped, then :func:`majority_epochs`."""
    signal.data = signal.codes()
    period = seconds or scoring_period(signal, path)
    block, per_epoch = period * signal.sfreq, EPOCH_SECONDS / period
    if block < 1 or not np.isclose(block, round(block)) or not np.isclose(per_epoch, round(per_epoch)):
        raise ValueError(
            f"{path}: stage channel '{signal.label}': scoring period {period:g} s must divide 30 s and hold "
            f"whole samples at {signal.sfreq:g} Hz"
        )
    block = int(round(block))
    values = signal.data[: signal.data.size // block * block].reshape(-1, block)
    counts["stage_periods_not_constant"] += int((values != values[:, :1]).any(axis=1).sum())
    codes = np.full(values.shape[0], UNSCORED, dtype=np.int64)
    for value in np.unique(values[:, 0]):
        at = values[:, 0] == value
        code = stage_map.stage_code(float(value))
        if code is None:
            report.unknown_stages[label_key(float(value))] += int(at.sum())
            counts["unknown_stage_labels"] += int(at.sum())
        else:
            codes[at] = code
    counts[f"stage_scoring_seconds_{period:g}"] += 1
    epochs, rule_counts = majority_epochs(codes, int(round(per_epoch)), "stage")
    counts.update(rule_counts)
    return epochs


def events_from_annotations(
    rows: list[Annotation], stage_map: StageMap, report: ReadReport, counts: Counter
) -> list[ScoredEvent] | None:
    """Scored events of the annotations that are not stages (None when every annotation is a stage); a text
    the stage map knows neither as a stage nor as an event is counted (``unknown_annotation_labels``)."""
    others = [row for row in rows if row[2].strip() and stage_map.stage_code(row[2]) is None]
    events = []
    for onset, duration, text in others:
        label = stage_map.event_label(text)
        if label is None:
            report.unknown_annotations[text] += 1
            counts["unknown_annotation_labels"] += 1
        else:
            events.append(ScoredEvent(onset, duration, label))
    return events if others else None


def events_from_channel(signal: FileSignal, codes: dict[str, str], report: ReadReport, counts: Counter) -> list:
    """Scored events of an event channel: each run of one non-zero code is an event, labelled by ``codes``
    (``*``: any code); an unmapped code is counted (``unknown_event_labels``)."""
    values = signal.codes()
    change = np.flatnonzero(np.diff(values) != 0) + 1
    events = []
    for start, stop in zip(np.r_[0, change], np.r_[change, values.size]):
        if values[start] == 0:
            continue
        key = label_key(float(values[start]))
        label = codes.get(key, codes.get(ANY_CODE))
        if label is None:
            report.unknown_events[f"{signal.label}={key}"] += 1
            counts["unknown_event_labels"] += 1
            continue
        events.append(ScoredEvent(float(start / signal.sfreq), float((stop - start) / signal.sfreq), label))
        counts[f"events_from_channel_{signal.label}"] += 1
    return events


def resolve_stage_source(
    source: StageSource, path: Path, hypnogram: Path, rows: list[Annotation], stage_map: StageMap
) -> StageSource:
    """The one stage source to read (``auto``: the CSV hypnogram or the stage annotations, whichever exists);
    ``ValueError`` naming the file and what was expected when it is absent or ambiguous."""
    annotated = any(stage_map.stage_code(text) is not None for _, _, text in rows)
    if source.kind == "auto":
        if hypnogram.exists() and annotated:
            raise ValueError(
                f"{path}: two stage sources, {hypnogram} and the file's stage annotations; choose one with "
                "--stages csv or --stages annotations"
            )
        if not hypnogram.exists() and not annotated:
            seen = sorted({text for _, _, text in rows})[:8]
            raise ValueError(
                f"{path}: no stages found: expected a CSV hypnogram {hypnogram}, annotations the stage map "
                f"'{stage_map.name}' knows (annotations seen: {seen or 'none'}), or --stages channel:LABEL"
            )
        return StageSource("csv" if hypnogram.exists() else "annotations")
    if source.kind == "csv" and not hypnogram.exists():
        raise ValueError(f"{path}: --stages csv: hypnogram {hypnogram} not found (columns onset,duration,stage)")
    if source.kind == "annotations" and not annotated:
        seen = sorted({text for _, _, text in rows})[:8]
        raise ValueError(
            f"{path}: --stages annotations: no annotation is a stage of the stage map '{stage_map.name}' "
            f"(annotations seen: {seen or 'none'}); pass --stage-map or another --stages"
        )
    return source


def split_channels(
    signals: list[FileSignal], source: StageSource, stage_map: StageMap, path: Path, report: ReadReport
) -> tuple[FileSignal | None, list[FileSignal], list[FileSignal]]:
    """``(stage channel, event channels, signal channels)`` of a file: annotation channels are not signals
    (the stage map's ``not_signals`` are listed in ``report.not_signals``)."""
    stage = None
    if source.kind == "channel":
        label = resolve_channels([source.channel or ""], [s.label for s in signals], path)[0]
        stage = next(s for s in signals if s.label == label)
    events, rest = [], []
    for signal in signals:
        key = normalize_label(signal.label)
        if signal is stage:
            continue
        if key in stage_map.event_channels:
            events.append(signal)
        elif key in stage_map.not_signals:
            report.not_signals.append(signal.label)
        else:
            rest.append(signal)
    return stage, events, rest


def select_channels(
    kept: list[tuple[FileSignal, np.ndarray, str, str]], requested: list[str], path: Path, report: ReadReport
) -> list[tuple[FileSignal, np.ndarray, str, str]]:
    """The usable channels ``requested`` by label or modality group (psg.yaml ``groups``: every usable channel
    of it); ``UnknownChannelError`` naming the file, the label and the known aliases, or why it was left out."""
    vocabulary = load_vocabulary()
    labels = [k[0].label for k in kept]
    picked = []
    for name in requested:
        if name in vocabulary.groups:
            members = [k for k in kept if vocabulary.group_of_type(k[2]) == name]
            if not members:
                raise UnknownChannelError(
                    f"{path}: modality '{name}': no usable channel; its known aliases: "
                    f"{', '.join(vocabulary.aliases_of_group(name))}; usable channels: {', '.join(labels)}"
                )
            picked += members
            continue
        try:
            label = resolve_channels([name], labels, path)[0]
        except ValueError:
            left = [o for o in report.left_out if normalize_label(o.label) == normalize_label(name)]
            if left:
                problem = f"{left[0].reason} ({left[0].detail})"
                raise UnknownChannelError(f"{path}: channel '{name}' was left out: {problem}") from None
            kind = vocabulary.type_of(name)
            known = vocabulary.aliases.get(kind, []) if kind else sorted(vocabulary.aliases)
            what = f"known {kind} aliases" if kind else "no alias matches it; types with aliases"
            raise UnknownChannelError(
                f"{path}: channel '{name}' not found; usable channels: {', '.join(labels)}; {what}: {', '.join(known)}"
            ) from None
        picked.append(kept[labels.index(label)])
    return picked


def _stage_labels(
    source: StageSource,
    path: Path,
    hypnogram: Path,
    rows: list[Annotation],
    stage_signal: FileSignal | None,
    stage_map: StageMap,
    n_epochs: int,
    report: ReadReport,
    counts: Counter,
) -> np.ndarray:
    """``(n_epochs,)`` stage codes from the resolved ``source``."""
    if source.kind == "channel" and stage_signal is not None:
        labels = stages_from_channel(stage_signal, stage_map, source.scoring_seconds, path, report, counts)
    else:
        every_row = source.kind == "csv"
        table = read_stage_csv(hypnogram) if every_row else rows
        labels = stages_from_annotations(table, stage_map, n_epochs, report, counts, every_row)
        if every_row:
            counts["annotation_stages_not_used"] += sum(stage_map.stage_code(t) is not None for _, _, t in rows)
    report.stage_source = f"{source.kind}" + (f":{stage_signal.label}" if stage_signal is not None else "")
    counts[f"stages_from_{source.kind}"] += 1
    out = np.full(n_epochs, UNSCORED, dtype=np.int64)
    out[: min(n_epochs, labels.size)] = labels[:n_epochs]
    counts["stage_epochs_beyond_signal"] += max(0, labels.size - n_epochs)
    return out


def read_psg(
    path: str | Path,
    stages: str | StageSource = "auto",
    stage_map: str | Path | StageMap = DEFAULT_STAGE_MAP,
    hypnogram: Path | None = None,
    channels: list[str] | None = None,
    types: dict[str, str] | None = None,
    annotations: list[Annotation] | None = None,
    subject: str | None = None,
) -> tuple[Recording, ReadReport]:
    """Read an EDF / EDF+ / BDF into a :class:`Recording` (every usable signal, or the ``channels`` requested
    by label or modality group) and a :class:`ReadReport`. ``hypnogram``: the CSV (default ``<stem>.csv``
    beside the file); ``types``: label -> MNE type given with the file; ``annotations``: used instead of
    the file's own (BIDS ``events.tsv``); ``subject``: default the file stem."""
    path = Path(path)
    source = stages if isinstance(stages, StageSource) else StageSource.parse(stages)
    stage_map = stage_map if isinstance(stage_map, StageMap) else load_stage_map(stage_map)
    hypnogram = hypnogram or path.with_suffix(".csv")
    file_signals, file_rows = read_psg_file(path)
    rows = file_rows if annotations is None else annotations
    counts, report = Counter(), ReadReport()
    source = resolve_stage_source(source, path, hypnogram, rows, stage_map)
    stage_signal, event_signals, signals = split_channels(file_signals, source, stage_map, path, report)
    counts["annotation_channels_not_read"] += len(report.not_signals)
    duration = max((s.data.size / s.sfreq for s in file_signals), default=0.0)
    labels = _stage_labels(
        source, path, hypnogram, rows, stage_signal, stage_map, int(duration // EPOCH_SECONDS), report, counts
    )
    events = events_from_annotations(rows, stage_map, report, counts)
    for signal in event_signals:
        found = events_from_channel(signal, stage_map.event_channels[normalize_label(signal.label)], report, counts)
        events = (events or []) + found
    kept = signal_channels(signals, stage_map, types or {}, report, counts)
    kept = select_channels(kept, channels, path, report) if channels else kept
    counts["channels_read"] += len(kept)
    uses_csv = source.kind == "csv"
    return (
        Recording(
            recording=path.stem,
            subject=subject or path.stem,
            sources=[path] + ([hypnogram] if uses_csv else []) + ([stage_map.file] if stage_map.file else []),
            channel_names=[k[0].label for k in kept],
            signals=[k[1] for k in kept],
            sfreqs=[k[0].sfreq for k in kept],
            epoch_labels=labels,
            counts=counts,
            channel_types=[k[2] for k in kept],
            channel_units=[k[3] for k in kept],
            events=sorted(events, key=lambda e: e.onset) if events is not None else None,
        ),
        report,
    )


PSG_SUFFIXES = (".edf", ".bdf")
"""Files ``mvapp data prepare edf`` reads (case-insensitive)."""


def find_psg_files(source: Path) -> list[Path]:
    """Every EDF / BDF under ``source`` (recursive, sorted)."""
    return sorted(p for p in source.rglob("*") if p.suffix.lower() in PSG_SUFFIXES and p.is_file())


def psg_recording_id(path: Path, source: Path) -> str:
    """Recording id of ``path``: its path under ``source`` without suffix, ``/`` -> ``_`` (``night1``, ``lab_a_night1``)."""
    return "_".join(path.relative_to(source).with_suffix("").parts)


def for_cache(recording: Recording, report: ReadReport, requested: list[str] | None, recording_id: str) -> Recording:
    """The recording as the window cache takes it: for the EEG cache one channel per requested name
    (``channel_names`` = ``requested``), each in microvolts; for a modality cache (``requested`` None) every
    usable signal with its type and unit. The report goes into ``counts`` (``left_out:<label>:<reason>``,
    ``misc:<label>``, ``not_signal:<label>``, ``unknown_{stage,event,annotation}_label:<label>``)
    so the cache manifest keeps it. ``ValueError`` naming the file for a group of several channels or a
    channel not in microvolts."""
    path = recording.sources[0]
    if requested is None:
        recording.recording = recording_id
        _count_report(recording, report)
        return recording
    if len(recording.channel_names) != len(requested):
        raise ValueError(
            f"{path}: channels {requested} name {len(recording.channel_names)} channels "
            f"({', '.join(recording.channel_names)}); the window cache takes one channel per name"
        )
    other = [f"{n} ({u})" for n, u in zip(recording.channel_names, recording.channel_units) if u != "uV"]
    if other:
        raise ValueError(f"{path}: channels {', '.join(other)} are not in uV; the EEG window cache holds uV channels")
    recording.recording, recording.channel_names = recording_id, list(requested)
    _count_report(recording, report)
    return recording


def _count_report(recording: Recording, report: ReadReport) -> None:
    """The read report's left-out, misc, non-signal and unknown labels, counted into ``recording.counts``."""
    entries = [f"left_out:{o.label}:{o.reason}" for o in report.left_out]
    entries += [f"misc:{label}" for label in report.misc] + [f"not_signal:{label}" for label in report.not_signals]
    recording.counts.update(entries)
    recording.counts.update({f"unknown_stage_label:{k}": v for k, v in report.unknown_stages.items()})
    recording.counts.update({f"unknown_event_label:{k}": v for k, v in report.unknown_events.items()})
    recording.counts.update({f"unknown_annotation_label:{k}": v for k, v in report.unknown_annotations.items()})
