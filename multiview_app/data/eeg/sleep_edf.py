"""Sleep-EDF Expanded reader (SC and ST): ``*-PSG.edf`` + paired ``*-Hypnogram.edf`` via mne."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .recording import Recording, label_epochs_from_intervals, resolve_channels
from .signals import load_vocabulary
from .stages import EPOCH_SECONDS, SLEEP_EDF_LABELS, UNSCORED

if TYPE_CHECKING:
    import mne

CARD = "sleep-edf"

MNE_TO_FILE_UNITS = {"uV": 1e6, "\u00b5V": 1e6, "\u03bcV": 1e6, "mV": 1e3}
"""Factor from mne's EDF values back to the file's physical dimension: mne turns exactly these dimensions
into volts and reads every other one (``UV``, ``%``, ``DegC``, empty) as written."""

PAIR_KEY_LENGTH = 7  # SC4ssNE: the 8th character names the scorer and differs between the two files


@dataclass(frozen=True)
class EdfHeader:
    """The fields of an EDF(+) header the reader needs (parsed from the file's own bytes).

    Attributes:
        patient: local patient identification (80 characters, stripped).
        start: start date and time of the recording (EDF: ``dd.mm.yy`` + ``hh.mm.ss``; EDF+ files
            give the 4-digit year in the recording field).
        labels: signal labels, stripped, in file order.
        samples_per_record: samples of each signal per data record.
        n_records: number of data records (-1: unknown).
        record_seconds: duration of one data record.
        header_bytes: size of the header.
        physical_dimensions: unit of each signal as written (e.g. ``uV``, ``UV``, ``mV``).
        physical_ranges: ``(physical minimum, physical maximum)`` of each signal, in its unit.
    """

    patient: str
    start: dt.datetime
    labels: list[str]
    samples_per_record: list[int]
    n_records: int
    record_seconds: float
    header_bytes: int
    physical_dimensions: list[str] = field(default_factory=list)
    physical_ranges: list[tuple[float, float]] = field(default_factory=list)

    def native_rate(self, label: str) -> float:
        """Sampling rate (Hz) of signal ``label`` as stored in the file."""
        return self.samples_per_record[self.labels.index(label)] / self.record_seconds

    @property
    def duration_seconds(self) -> float:
        return max(self.n_records, 0) * self.record_seconds


def read_edf_header(path: Path) -> EdfHeader:
    """Parse the EDF(+) header of ``path``; ``ValueError`` naming the file when it is not EDF."""
    with open(path, "rb") as handle:
        head = handle.read(256)
        try:
            if len(head) < 256 or head[:8].strip() != b"0":
                raise ValueError("not an EDF header")
            n_signals = int(head[252:256])
            block = handle.read(n_signals * 256)
            if len(block) < n_signals * 256:
                raise ValueError(f"header announces {n_signals} signals but ends early")

            def column(offset, width, i):
                return block[n_signals * offset + i * width : n_signals * offset + (i + 1) * width]  # noqa: E731

            text = lambda offset, width, i: column(offset, width, i).decode("latin-1").strip()  # noqa: E731
            labels = [text(0, 16, i) for i in range(n_signals)]
            samples = [int(column(216, 8, i)) for i in range(n_signals)]
            start = _edf_start(head)
            header = EdfHeader(
                patient=head[8:88].decode("latin-1").strip(),
                start=start,
                labels=labels,
                samples_per_record=samples,
                n_records=int(head[236:244]),
                record_seconds=float(head[244:252]),
                header_bytes=int(head[184:192]),
                physical_dimensions=[text(96, 8, i) for i in range(n_signals)],
                physical_ranges=[(_number(column(104, 8, i)), _number(column(112, 8, i))) for i in range(n_signals)],
            )
        except ValueError as err:
            raise ValueError(f"{path}: corrupt EDF file ({err})") from None
    return header


def _number(field_bytes: bytes) -> float:
    """A numeric header field, NaN when it is not a number (the physical range is only needed to check
    a channel's unit; an odd value there must not make the whole file unreadable)."""
    try:
        return float(field_bytes)
    except ValueError:
        return float("nan")


def _edf_start(head: bytes) -> dt.datetime:
    """Start date/time of an EDF header (``dd.mm.yy`` ``hh.mm.ss``; 85-99 -> 19yy; EDF+ 4-digit year)."""
    day, month, year = (int(x) for x in head[168:176].decode("latin-1").split("."))
    hour, minute, second = (int(x) for x in head[176:184].decode("latin-1").split("."))
    year += 1900 if year >= 85 else 2000
    recording = head[88:168].decode("latin-1").split()
    if len(recording) >= 2 and recording[0] == "Startdate" and recording[1].count("-") == 2:
        tail = recording[1].rsplit("-", 1)[-1]
        if tail.isdigit() and len(tail) == 4:
            year = int(tail)
    return dt.datetime(year, month, day, hour, minute, second)


def check_edf_integrity(path: Path) -> EdfHeader:
    """Compare the file size with the size its header announces; raises ``ValueError`` naming
    the file when it is not EDF or is truncated (mne would silently read a truncated file).
    Returns the parsed header."""
    header = read_edf_header(path)
    if header.n_records < 0:
        return header  # "-1": length unknown (recording interrupted); the library decides
    expected = header.header_bytes + header.n_records * sum(header.samples_per_record) * 2
    size = path.stat().st_size
    if size < expected:
        raise ValueError(
            f"{path}: truncated EDF file: header announces {expected} bytes "
            f"({header.n_records} data records), found {size}"
        )
    return header


def _known(patient: str) -> bool:
    """A patient field that identifies someone (EDF+ writes ``X`` for every unknown subfield)."""
    return any(token != "X" for token in patient.split())


def check_pair(psg: Path, psg_header: EdfHeader, hypnogram: Path, hyp_header: EdfHeader) -> float:
    """Offset (s) of the hypnogram's start after the PSG's start, from the two headers.

    Raises ``ValueError`` naming both files when their patient fields differ (both known: not empty,
    not the anonymous ``X X X X``).
    """
    if _known(psg_header.patient) and _known(hyp_header.patient) and psg_header.patient != hyp_header.patient:
        raise ValueError(
            f"{hypnogram}: patient field '{hyp_header.patient}' does not match '{psg_header.patient}' of its PSG {psg}"
        )
    return (hyp_header.start - psg_header.start).total_seconds()


def find_pairs(source: Path, include_st: bool = False) -> tuple[list[tuple[Path, Path | None]], list[str]]:
    """Pair every ``*-PSG.edf`` under ``source`` with the ``*-Hypnogram.edf`` sharing its first 7
    characters. Only SC (sleep cassette) nights unless ``include_st`` (ST: telemetry, temazepam
    study), as in M3G / Brüsch et al. (153 SC nights of 78 subjects). Returns (pairs with ``None``
    where the hypnogram is missing, problems); see :func:`count_st_nights` for what was left out."""
    psgs = [p for p in sorted(source.rglob("*-PSG.edf")) if include_st or not is_st(p)]
    hypnograms: dict[str, list[Path]] = {}
    for path in sorted(source.rglob("*-Hypnogram.edf")):
        hypnograms.setdefault(path.name[:PAIR_KEY_LENGTH], []).append(path)
    pairs: list[tuple[Path, Path | None]] = []
    problems: list[str] = []
    for psg in psgs:
        matches = hypnograms.get(psg.name[:PAIR_KEY_LENGTH], [])
        if len(matches) > 1:
            problems.append(
                f"{psg}: several hypnograms match its first {PAIR_KEY_LENGTH} characters: "
                f"{', '.join(m.name for m in matches)}"
            )
            continue
        pairs.append((psg, matches[0] if matches else None))
    return pairs, problems


def is_st(psg: Path) -> bool:
    """True for a night of the ST (sleep telemetry) study: ``ST7ssN...``."""
    return psg.name.upper().startswith("ST")


def count_st_nights(source: Path) -> int:
    """ST nights under ``source`` (left out unless asked for; reported by ``prepare``)."""
    return sum(1 for p in source.rglob("*-PSG.edf") if is_st(p))


def recording_id(psg: Path) -> str:
    """ "SC4001E0-PSG.edf" -> "SC4001" (study, subject, night)."""
    return psg.name[:6]


def subject_id(psg: Path) -> str:
    """ "SC4001E0-PSG.edf" -> "SC400" (study + 2-digit subject); ST files likewise."""
    return psg.name[:5]


def edf_channels(path: Path, header: EdfHeader, picked: list[str], card: str) -> dict:
    """What :class:`Recording` says of the ``picked`` channels of an EDF: ``channel_types``,
    ``channel_units`` (each type's canonical unit), ``native_sfreqs``, ``channel_limits`` (the header's
    physical range in that unit), and ``factors`` from mne's values into those units."""
    rows = [header.labels.index(name) if name in header.labels else None for name in picked]
    dims = [header.physical_dimensions[i] if i is not None else "uV" for i in rows]
    types, units, factors = load_vocabulary().conversions(path, picked, dims, card)
    limits = [
        None
        if i is None or not np.isfinite(header.physical_ranges[i]).all()
        else tuple(sorted(v * f for v in header.physical_ranges[i]))
        for i, f in zip(rows, factors)
    ]
    return {
        "channel_types": types,
        "channel_units": units,
        "native_sfreqs": [header.native_rate(name) if i is not None else float("nan") for name, i in zip(picked, rows)],
        "channel_limits": limits,
        "factors": [MNE_TO_FILE_UNITS.get(dim.strip(), 1.0) * f for dim, f in zip(dims, factors)],
    }


def read_sleep_edf(psg: Path, hypnogram: Path | None, channels: list[str] | None) -> Recording:
    """Read the picked ``channels`` (every signal when None) of ``psg`` and the per-epoch labels of
    ``hypnogram``.

    Each signal is returned in its type's canonical unit (EEG, EOG, EMG: microvolts; types from the
    card ``datasets/sleep-edf.yaml`` and the PSG vocabulary, :func:`edf_channels`). The hypnogram is aligned to the PSG by the start date/time
    in each file's own EDF header (a hypnogram starting 90 s after its PSG shifts the labels by 3
    epochs; counted ``hypnogram_offset_seconds``). "Sleep stage ?" and "Movement time" become
    ``EXCLUDED`` (counted in ``excluded_epochs``); stages 3 and 4 become N3. Raises ``ValueError``
    naming the file on missing hypnogram, truncated/corrupt EDF, absent channel, and naming both
    files when the hypnogram's patient field differs from the PSG's or its stages do not overlap it.
    """
    import mne

    if hypnogram is None:
        raise ValueError(
            f"{psg}: no hypnogram found (expected '{psg.name[:PAIR_KEY_LENGTH]}?-Hypnogram.edf' next to it)"
        )
    psg_header = check_edf_integrity(psg)
    hyp_header = check_edf_integrity(hypnogram)
    shift = check_pair(psg, psg_header, hypnogram, hyp_header)
    try:
        raw = mne.io.read_raw_edf(psg, preload=False, verbose="error")
    except Exception as err:  # mne raises many types on bad files
        raise ValueError(f"{psg}: cannot read EDF ({err})") from None
    picked = resolve_channels(list(raw.ch_names) if channels is None else channels, list(raw.ch_names), psg)
    sfreq = float(raw.info["sfreq"])  # mne upsamples every channel to the highest native rate
    orig_rates = [psg_header.native_rate(name) if name in psg_header.labels else sfreq for name in picked]
    described = edf_channels(psg, psg_header, picked, CARD)
    factors = np.array(described.pop("factors"))[:, None]
    data = raw.get_data(picks=picked) * factors  # (c, n) -> canonical units; only the picked channels are read
    try:
        annotations = mne.read_annotations(hypnogram)
    except Exception as err:
        raise ValueError(f"{hypnogram}: cannot read hypnogram annotations ({err})") from None
    counts: Counter = Counter()
    if shift:
        counts["hypnograms_offset_from_psg"] += 1
        counts["hypnogram_offset_seconds"] += int(round(shift))
    if len(set(orig_rates)) > 1:
        counts["mixed_rate_channels"] += len(picked)
    intervals = stage_intervals(annotations, hypnogram, shift, counts)
    check_overlap(intervals, (psg, psg_header), (hypnogram, hyp_header), data.shape[1] / sfreq)
    n_epochs = int(data.shape[1] // (EPOCH_SECONDS * sfreq))
    labels = label_epochs_from_intervals(intervals, n_epochs, counts)
    counts["excluded_epochs"] += int((labels == -1).sum())
    counts["unscored_epochs"] += int((labels == UNSCORED).sum())
    return Recording(
        recording=recording_id(psg),
        subject=subject_id(psg),
        sources=[psg, hypnogram],
        channel_names=list(picked if channels is None else channels),
        signals=[row.astype(np.float64) for row in data],
        sfreqs=[sfreq] * len(picked),
        epoch_labels=labels,
        counts=counts,
        **described,
        events=None,  # Sleep-EDF scores stages only (the prepare summary says so)
    )


def check_overlap(
    intervals: list[tuple[float, float, int]],
    psg: tuple[Path, EdfHeader],
    hypnogram: tuple[Path, EdfHeader],
    psg_seconds: float,
) -> None:
    """``ValueError`` naming both files when the scored ``intervals`` (onset s, duration s, code) of the
    hypnogram do not overlap the ``psg_seconds`` of its PSG."""
    scored = [(onset, onset + duration) for onset, duration, code in intervals if code >= 0]
    if not scored or max(end for _, end in scored) <= 0 or min(start for start, _ in scored) >= psg_seconds:
        raise ValueError(
            f"{hypnogram[0]}: its scored stages (header start {hypnogram[1].start}) do not overlap its "
            f"PSG {psg[0]} (header start {psg[1].start}, {psg_seconds / 3600:.2f} h)"
        )


def stage_intervals(
    annotations: mne.Annotations, hypnogram: Path, shift: float, counts: Counter
) -> list[tuple[float, float, int]]:
    """``(onset s, duration s, label code)`` of the sleep-stage annotations (``mne.Annotations``) of
    ``hypnogram``, onsets moved by ``shift`` s (the hypnogram's start after its PSG's); other texts are
    counted ``ignored_annotation:<text>``. ``ValueError`` naming the file when there are none."""
    intervals = []
    for onset, duration, text in zip(annotations.onset, annotations.duration, annotations.description):
        code = SLEEP_EDF_LABELS.get(str(text))
        if code is None:
            counts[f"ignored_annotation:{text}"] += 1
            continue
        intervals.append((float(onset) + shift, float(duration), code))  # onsets count from the hypnogram's start
    if not intervals:
        raise ValueError(f"{hypnogram}: no sleep-stage annotations (expected texts like 'Sleep stage W')")
    return intervals


def hypnogram_epochs(hypnogram: Path) -> tuple[np.ndarray, Counter]:
    """A Sleep-EDF hypnogram alone -> ``(E,)`` label codes of the 30-s epochs from its start to its
    last annotation's end (the reader's mapping: 3 + 4 -> N3, "?" and movement ``EXCLUDED``, gaps
    ``UNSCORED``), and the reader's counts. For night-structure statistics of real hypnograms whose
    PSG is not at hand."""
    import mne

    check_edf_integrity(hypnogram)
    try:
        annotations = mne.read_annotations(hypnogram)
    except Exception as err:
        raise ValueError(f"{hypnogram}: cannot read hypnogram annotations ({err})") from None
    counts: Counter = Counter()
    intervals = stage_intervals(annotations, hypnogram, 0.0, counts)
    n_epochs = int(np.ceil(max(onset + duration for onset, duration, _ in intervals) / EPOCH_SECONDS - 1e-6))
    return label_epochs_from_intervals(intervals, n_epochs, counts), counts


def download_sleep_physionet(subjects: list[int], recording: list[int], path: Path) -> list[Path]:
    """Fetch Sleep-EDF SC files with ``mne.datasets.sleep_physionet.age.fetch_data`` (explicit opt-in).

    Raises ``RuntimeError`` with a clear message when offline.
    """
    from mne.datasets.sleep_physionet.age import fetch_data

    from ..catalog import get_card

    try:
        pairs = fetch_data(subjects=subjects, recording=recording, path=str(path), on_missing="raise")
    except Exception as err:
        raise RuntimeError(
            f"download of Sleep-EDF subjects {subjects} failed ({err}); are you offline? "
            f"Download manually from {get_card('sleep-edf').source.url} and pass --source"
        ) from None
    return [Path(p) for pair in pairs for p in pair]
