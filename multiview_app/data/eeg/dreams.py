"""DREAMS Sleep Spindles reader: ``excerptN.txt`` (one central derivation in microvolts, rate from the
card) or ``excerptN.edf`` (the full PSG, when present) + ``Hypnogram_excerptN.txt`` (R&K every 5 s).

Dataset facts (label mapping, the 5-s -> 30-s rule, per-excerpt rates, known derivations, checksums)
live in the card ``datasets/dreams_spindles.yaml``. Everything that can be checked without reading
the samples (checksums, derivation line, lengths against the hypnogram, sampling rate) is checked by
:func:`inspect_excerpt` for every excerpt before ``prepare`` writes anything.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..catalog import get_card
from .physionet2018 import TO_MICROVOLTS
from .recording import Recording, majority_epochs, majority_votes, resolve_channels, sha256_file
from .sleep_edf import check_edf_integrity, edf_channels
from .stages import DREAMS_LABELS, EPOCH_SECONDS

CARD = "dreams_spindles"
SHA256SUMS = "SHA256SUMS"
CENTRAL = "central"
"""Channel name for "the excerpt's one central derivation" (C3-A1 or CZ-A1, see the card)."""

MAJORITY_LABELS = majority_votes(6)
"""Of the six 5-s labels of a 30-s epoch, at least this many (20 s) must name one stage to keep it."""

UNIT_TOLERANCE = 1e-3
"""Relative slack when comparing a channel's largest value with its header's physical range."""

VOLTAGE_UNITS = ("uV", "mV")

_SIGNAL_NAME = re.compile(r"^(excerpt\d+)\.(txt|edf)$", re.IGNORECASE)


@dataclass(frozen=True)
class Excerpt:
    """One excerpt's files: ``signal_file`` (``.edf`` when present, else ``.txt``) and its hypnogram."""

    name: str
    signal_file: Path
    hypnogram: Path


@dataclass(frozen=True)
class ExcerptLayout:
    """What :func:`inspect_excerpt` learned without reading the samples.

    Attributes:
        channels: channel names of the signal file (the ``.txt``: its one derivation).
        sfreq: sampling rate (Hz) the samples are read at (EDF: mne's common rate, the highest).
        n_samples: samples per channel at ``sfreq``.
        labels5: ``(n,)`` R&K labels, one per 5 s, as written.
        extra_samples: samples after the last 5-s label (fewer than one label's worth).
    """

    channels: list[str]
    sfreq: float
    n_samples: int
    labels5: np.ndarray
    extra_samples: int


def card_facts():
    """The DREAMS card (``datasets/dreams_spindles.yaml``)."""
    return get_card(CARD)


def scored_seconds() -> float:
    """Length of one R&K label in the hypnogram files (card: 5 s)."""
    return float(card_facts().labels.scored_seconds)


def known_derivations() -> list[str]:
    """Derivations an ``excerptN.txt`` may name on its first line (the aliases of ``central``)."""
    return [alias for c in card_facts().channels if c.name == CENTRAL for alias in c.aliases]


def find_excerpts(source: Path) -> tuple[list[Excerpt], dict[str, int]]:
    """Every excerpt under ``source`` (numeric order), preferring ``excerptN.edf`` over ``excerptN.txt``;
    returns the excerpts and what was not selected (text files replaced by an EDF). ``ValueError``
    naming the expected file when a hypnogram is missing."""
    signals: dict[str, dict[str, Path]] = {}
    for path in sorted(source.rglob("*")):
        match = _SIGNAL_NAME.match(path.name)
        if match and path.is_file():
            signals.setdefault(match.group(1).lower(), {})[match.group(2).lower()] = path
    excerpts, replaced = [], 0
    for name in sorted(signals, key=lambda n: int(n[len("excerpt") :])):
        files = signals[name]
        signal = files.get("edf", files.get("txt"))
        replaced += int("edf" in files and "txt" in files)
        hypnogram = signal.parent / f"Hypnogram_{name}.txt"
        if not hypnogram.exists():
            raise ValueError(f"{signal}: no hypnogram found (expected {hypnogram})")
        excerpts.append(Excerpt(name, signal, hypnogram))
    return excerpts, {"excerpt .txt files (read from the .edf beside them)": replaced}


def expected_checksums(source: Path) -> tuple[dict[str, str], str]:
    """File name -> sha256 from ``source/SHA256SUMS`` when present (lines ``<hex>  <path>``; the file
    name is the key), the card's sums filling in the files it does not list (the distributed SHA256SUMS
    lists the signal files only, not the hypnograms); else from the card; and where they came from."""
    sums_file = source / SHA256SUMS
    card = dict(card_facts().checksums.files)
    where_card = f"the card datasets/{CARD}.yaml"
    if not sums_file.exists():
        return card, where_card
    sums: dict[str, str] = {}
    for number, line in enumerate(sums_file.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split(maxsplit=1)
        if len(parts) != 2 or not re.fullmatch(r"[0-9a-fA-F]{64}", parts[0]):
            raise ValueError(f"{sums_file}: line {number}: expected '<64 hex digits>  <file>', found '{line.strip()}'")
        sums[Path(parts[1].strip().lstrip("*")).name] = parts[0].lower()
    return {**card, **sums}, f"{sums_file} (for files it does not list: {where_card})"


def verify_checksums(files: list[Path], sums: dict[str, str], where: str) -> int:
    """Refuse (``ValueError`` naming it) the first file whose sha256 differs from ``sums``; returns the
    number of files ``sums`` does not list (read unverified, counted)."""
    unlisted = 0
    for path in files:
        expected = sums.get(path.name)
        if expected is None:
            unlisted += 1
            continue
        actual = sha256_file(path)
        if actual != expected:
            raise ValueError(
                f"{path}: sha256 {actual} differs from {expected} in {where}; the file was modified "
                "or is another version (use the files as distributed)"
            )
    return unlisted


def read_rk_hypnogram(path: Path) -> np.ndarray:
    """``Hypnogram_excerptN.txt`` -> ``(n,)`` int R&K labels (``[Hypnogram]`` line, then one label per
    line); ``ValueError`` naming the file and line for anything else."""
    lines = path.read_text(errors="replace").splitlines()
    if not lines or lines[0].strip().lower() != "[hypnogram]":
        raise ValueError(f"{path}: first line '{lines[0].strip() if lines else ''}', expected '[Hypnogram]'")
    labels = []
    for number, line in enumerate(lines[1:], start=2):
        token = line.strip()
        if not token:
            continue
        try:
            value = int(float(token))
        except ValueError:
            value = None
        if value is None or str(value) not in DREAMS_LABELS:
            raise ValueError(
                f"{path}: line {number}: '{token}' is not an R&K label; expected one of {', '.join(DREAMS_LABELS)}"
            )
        labels.append(value)
    if not labels:
        raise ValueError(f"{path}: no labels after '[Hypnogram]'")
    return np.asarray(labels, dtype=np.int64)


def rk_epochs(labels5: np.ndarray) -> tuple[np.ndarray, Counter]:
    """5-s R&K labels ``(n,)`` -> 30-s stage codes ``(n // 6,)`` by the card's rule: S3 + S4 -> N3,
    movement is no stage; an epoch is kept with the stage at least :data:`MAJORITY_LABELS` of its six
    labels name (unanimous or majority), else ``EXCLUDED`` (:func:`~.recording.majority_epochs`). Returns
    the codes and the counts ``dreams_epochs_{unanimous, majority, no_majority, movement}``
    (+ ``dreams_labels_after_last_epoch``)."""
    per_epoch = int(round(EPOCH_SECONDS / scored_seconds()))
    codes = np.asarray([DREAMS_LABELS[str(int(v))] for v in labels5], dtype=np.int64)
    return majority_epochs(codes, per_epoch, "dreams")


def _text_header(path: Path) -> tuple[str, int]:
    """An ``excerptN.txt``'s derivation (first line, checked against the card) and its sample count."""
    data = path.read_bytes()
    first, _, rest = data.partition(b"\n")
    name = first.decode("latin-1").strip()
    known = {d.lower(): d for d in known_derivations()}
    if not (name.startswith("[") and name.endswith("]")) or name[1:-1].strip().lower() not in known:
        raise ValueError(
            f"{path}: first line '{name}' is not a known DREAMS derivation; expected one of "
            f"{', '.join(f'[{d}]' for d in known.values())}"
        )
    return name[1:-1].strip(), sum(1 for line in rest.splitlines() if line.strip())


def _check_rate(path: Path, sfreq: float) -> None:
    per_epoch = EPOCH_SECONDS * sfreq
    if sfreq <= 0 or abs(per_epoch - round(per_epoch)) > 1e-6:
        raise ValueError(
            f"{path}: sampling rate {sfreq:g} Hz does not give a whole number of samples per "
            f"{EPOCH_SECONDS:g}-s epoch ({per_epoch:g}); expected a rate with whole samples per epoch "
            "(DREAMS: 50, 100 or 200 Hz)"
        )


def inspect_excerpt(excerpt: Excerpt) -> ExcerptLayout:
    """Check an excerpt without reading its samples: derivation line (``.txt``) or EDF header
    integrity, a sampling rate that divides 30 s, a hypnogram that covers the signal: the signal may
    run past the last 5-s label by less than one label (excerpt 6: 0.7 s, counted), not be shorter
    (truncated) nor longer (hypnogram shorter than its signal). ``ValueError`` naming the file."""
    labels5 = read_rk_hypnogram(excerpt.hypnogram)
    if excerpt.signal_file.suffix.lower() == ".edf":
        header = check_edf_integrity(excerpt.signal_file)
        channels = [label for label in header.labels if label != "EDF Annotations"]
        sfreq = max(header.native_rate(label) for label in channels)  # mne reads every channel at the highest
        n_samples = int(round(header.duration_seconds * sfreq))
    else:
        facts = card_facts().recordings.get(excerpt.name)
        if facts is None:
            raise ValueError(
                f"{excerpt.signal_file}: no sampling rate known for '{excerpt.name}' (text files carry "
                f"none; the card datasets/{CARD}.yaml lists {', '.join(card_facts().recordings)})"
            )
        derivation, n_samples = _text_header(excerpt.signal_file)
        channels, sfreq = [derivation], facts.sfreq
    _check_rate(excerpt.signal_file, sfreq)
    label_samples = int(round(scored_seconds() * sfreq))
    covered = labels5.size * label_samples
    if n_samples < covered:
        raise ValueError(
            f"{excerpt.signal_file}: truncated: {excerpt.hypnogram.name} has {labels5.size} labels "
            f"({labels5.size * scored_seconds():g} s), expected at least {covered} samples at "
            f"{sfreq:g} Hz, found {n_samples}"
        )
    if n_samples - covered >= label_samples:
        raise ValueError(
            f"{excerpt.hypnogram}: hypnogram shorter than its signal: {labels5.size} labels cover "
            f"{labels5.size * scored_seconds():g} s, {excerpt.signal_file.name} holds "
            f"{n_samples / sfreq:g} s at {sfreq:g} Hz; expected {n_samples // label_samples} labels"
        )
    return ExcerptLayout(channels, sfreq, n_samples, labels5, n_samples - covered)


def edf_microvolts(path: Path, channels: list[str]) -> tuple[np.ndarray, Counter]:
    """The picked ``channels`` of an EDF in microvolts ``(c, n)``, read with mne and checked against the
    header: a channel whose largest value exceeds its header's physical range (converted to microvolts
    from its physical dimension, case-insensitively) by 1e3, 1e6 or 1e9 was read with the wrong unit
    (mne takes ``UV`` for volts: DREAMS excerpt 3 reads 1e6 too large) and is divided by that factor
    (counted ``unit_corrected_channels``). ``ValueError`` naming the file and channel otherwise."""
    import mne

    header = check_edf_integrity(path)
    try:
        raw = mne.io.read_raw_edf(path, preload=False, verbose="error")
    except Exception as err:  # mne raises many types on bad files
        raise ValueError(f"{path}: cannot read EDF ({err})") from None
    data = raw.get_data(picks=channels) * 1e6  # (c, n): mne's volts -> microvolts
    counts: Counter = Counter()
    for row, name in zip(data, channels):
        index = header.labels.index(name)
        unit = header.physical_dimensions[index]
        scale = TO_MICROVOLTS.get(unit.lower())
        if scale is None:
            raise ValueError(
                f"{path}: channel '{name}' has physical dimension '{unit}'; expected a voltage "
                f"({', '.join(TO_MICROVOLTS)})"
            )
        bound = max(abs(v) for v in header.physical_ranges[index]) * scale * (1 + UNIT_TOLERANCE)
        if not np.isfinite(bound):  # no usable physical range in the header: nothing to check against
            counts["unit_unchecked_channels"] += 1
            continue
        largest = float(np.nanmax(np.abs(row))) if row.size else 0.0
        if largest <= bound:
            continue
        factor = next((f for f in (1e3, 1e6, 1e9) if largest / f <= bound), None)
        if factor is None:
            raise ValueError(
                f"{path}: channel '{name}' reaches {largest:g} uV, beyond its header's physical range "
                f"{header.physical_ranges[index]} {unit} by more than 1e9"
            )
        row /= factor
        counts["unit_corrected_channels"] += 1
        counts[f"unit_divided_by_{factor:.0e}"] += 1
    return data, counts


def resolve_dreams_channels(requested: list[str], available: list[str], source: Path) -> list[str]:
    """As :func:`~.recording.resolve_channels`, where ``central`` names whichever central derivation
    (C3-A1 or CZ-A1) the file has."""
    central = [name for name in available if name.lower() in {d.lower() for d in known_derivations()}]
    if CENTRAL in requested and len(central) != 1:
        raise ValueError(
            f"{source}: channel '{CENTRAL}' needs exactly one of {', '.join(known_derivations())}; "
            f"available: {', '.join(available)}"
        )
    return resolve_channels([central[0] if name == CENTRAL else name for name in requested], available, source)


def edf_signals(path: Path, picked: list[str]) -> tuple[list[np.ndarray], dict, Counter]:
    """The ``picked`` channels of an excerpt's EDF, each ``(n,)`` in its type's canonical unit: voltages
    through :func:`edf_microvolts` (which corrects the ``UV`` dimension), SpO2 and other non-voltage
    signals as written; returns the signals, what :class:`Recording` says of the channels (types, units,
    native rates, limits; see :func:`~.sleep_edf.edf_channels`) and the unit counts."""
    import mne

    described = edf_channels(path, check_edf_integrity(path), picked, CARD)
    factors = described.pop("factors")
    volts = [name for name, unit in zip(picked, described["channel_units"]) if unit in VOLTAGE_UNITS]
    data, counts = edf_microvolts(path, volts) if volts else (np.zeros((0, 0)), Counter())
    by_name = {name: row for name, row in zip(volts, data)}
    others = [name for name in picked if name not in by_name]
    if others:
        raw = mne.io.read_raw_edf(path, preload=False, verbose="error")
        for name, row in zip(others, raw.get_data(picks=others)):
            by_name[name] = row * factors[picked.index(name)]
    signals = []
    for name, unit in zip(picked, described["channel_units"]):
        row = by_name[name].astype(np.float64)
        signals.append(row / 1000.0 if name in volts and unit == "mV" else row)  # ECG: microvolts -> mV
    return signals, described, counts


def read_dreams(excerpt: Excerpt, channels: list[str] | None, layout: ExcerptLayout | None = None) -> Recording:
    """Read the picked ``channels`` (every signal when None; EEG, EOG, EMG in microvolts, each signal in
    its type's canonical unit) and the 30-s labels of one excerpt (``layout``: from
    :func:`inspect_excerpt`, done here when not given). One recording per subject: subject = excerpt."""
    layout = layout or inspect_excerpt(excerpt)
    picked = resolve_dreams_channels(
        layout.channels if channels is None else channels, layout.channels, excerpt.signal_file
    )
    labels, counts = rk_epochs(layout.labels5)
    described: dict = {"channel_types": ["eeg"] * len(picked), "channel_units": ["uV"] * len(picked)}
    if excerpt.signal_file.suffix.lower() == ".edf":
        signals, described, unit_counts = edf_signals(excerpt.signal_file, picked)
        counts.update(unit_counts)
    else:
        try:
            samples = np.loadtxt(excerpt.signal_file, skiprows=1, dtype=np.float64, ndmin=1)
        except ValueError as err:
            raise ValueError(f"{excerpt.signal_file}: not one number per line after the derivation ({err})") from None
        if samples.size != layout.n_samples:
            raise ValueError(
                f"{excerpt.signal_file}: {samples.size} numbers read, {layout.n_samples} lines counted; "
                "expected one number per line"
            )
        signals = [samples]
    if channels is not None and CENTRAL in channels:
        counts[f"derivation_{picked[channels.index(CENTRAL)]}"] += 1
    counts["samples_after_hypnogram"] += layout.extra_samples
    return Recording(
        recording=excerpt.name,
        subject=excerpt.name,
        sources=[excerpt.signal_file, excerpt.hypnogram],
        channel_names=list(picked if channels is None else channels),
        signals=signals,
        sfreqs=[layout.sfreq] * len(picked),
        epoch_labels=labels,
        counts=counts,
        events=None,  # the excerpts carry no scored events (excerpt EDF event channels: the generic EDF reader)
        **described,
    )


def read_spindle_scoring(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """``Visual_scoring{1,2}_excerptN.txt`` / ``Automatic_detection_excerptN.txt``: a ``[...]`` line, then
    ``onset duration`` (s from the excerpt start) per spindle -> ``(onsets (k,), durations (k,))``;
    ``ValueError`` naming the file and line otherwise."""
    lines = path.read_text(errors="replace").splitlines()
    if not lines or not lines[0].strip().startswith("["):
        raise ValueError(f"{path}: first line '{lines[0].strip() if lines else ''}', expected '[<name>/<channel>]'")
    rows = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            onset, duration = (float(v) for v in line.split())
        except ValueError:
            raise ValueError(f"{path}: line {number}: '{line.strip()}', expected '<onset s> <duration s>'") from None
        rows.append((onset, duration))
    table = np.asarray(rows, dtype=np.float64).reshape(-1, 2)
    return table[:, 0], table[:, 1]
