"""Signal types, units, modality groups and their preprocessing: the PSG channel vocabulary.

The facts live in ``datasets/modalities/psg.yaml`` (data, not code): which channel labels are which
signal type (MNE's vocabulary: eeg, eog, emg, ecg, resp, bio for SpO2, misc), which modality group a
type belongs to (brain, eyes, muscle, heart, breathing, oximetry), each group's rate, band and scaling,
and named presets that group modality groups into model views (SleepFM's three groups: ``sleepfm``)::

    vocabulary = load_vocabulary()
    vocabulary.type_of("C3-M2")          # "eeg"
    vocabulary.group_of("SaO2")          # "oximetry"
    vocabulary.groups["breathing"].sfreq  # 10.0
    vocabulary.presets["sleepfm"]        # {"brain": ["brain", "eyes"], "heart": ["heart"], ...}
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..catalog import catalog_dir, validation_message

SIGNAL_TYPES: tuple[str, ...] = ("eeg", "eog", "emg", "ecg", "resp", "bio", "misc")
"""Channel types, in MNE's vocabulary (``bio``: SpO2 and other slow physiological signals)."""

CHANNEL_PREFIXES = ("EEG ", "EOG ", "EMG ", "ECG ")

VOLTAGE_FACTORS = {("mV", "uV"): 1000.0, ("uV", "mV"): 0.001}
"""Factor from one canonical voltage unit into the other."""


class UnknownChannelError(ValueError):
    """A channel label that matches no alias (the message names the file, the label and the known aliases)."""


class GroupSpec(BaseModel):
    """One modality group's signal types and preprocessing."""

    model_config = ConfigDict(extra="forbid")

    types: list[str] = Field(min_length=1)
    sfreq: float = Field(gt=0, description="rate (Hz) of the group's cached windows")
    l_freq: float | None = Field(None, ge=0, description="band-pass low edge (Hz); None: no high-pass")
    h_freq: float | None = Field(None, gt=0, description="band-pass high edge (Hz); None: no low-pass")
    scaling: Literal["window", "robust", "affine", "none"] = Field(
        description="window: per-window z-score; robust: per-recording median and IQR; "
        "affine: (x - offset) / scale, fixed across recordings; none: as read"
    )
    offset: float = 0.0
    scale: float = Field(1.0, gt=0)
    valid_range: tuple[float, float] | None = Field(None, description="values outside it mark their windows invalid")
    note: str | None = None

    @model_validator(mode="after")
    def _check_band(self) -> GroupSpec:
        if self.h_freq is not None and self.h_freq >= self.sfreq / 2:
            raise ValueError(f"h_freq={self.h_freq} must be below the Nyquist frequency {self.sfreq / 2}")
        bad = [t for t in self.types if t not in SIGNAL_TYPES]
        if bad:
            raise ValueError(f"types {bad} are not among {SIGNAL_TYPES}")
        return self


class Vocabulary(BaseModel):
    """The parsed ``datasets/modalities/psg.yaml``."""

    model_config = ConfigDict(extra="forbid")

    groups: dict[str, GroupSpec]
    presets: dict[str, dict[str, list[str]]]
    units: dict[str, tuple[str, float]]
    canonical_units: dict[str, str]
    aliases: dict[str, list[str]]
    envelopes: dict[str, list[str]] = {}
    events: dict[str, str]
    unit_valid_ranges: dict[str, tuple[float, float]] = {}

    def valid_range(self, kind: str, unit: str) -> tuple[float, float] | None:
        """The physiological range of a channel of type ``kind`` in ``unit``: its modality group's
        ``valid_range``, else ``unit_valid_ranges`` of its unit (ungrouped channels such as a pulse rate)."""
        group = self.group_of_type(kind)
        spec = self.groups[group] if group else None
        if spec is not None and spec.valid_range is not None:
            return spec.valid_range
        return self.unit_valid_ranges.get(unit)

    @model_validator(mode="after")
    def _check_references(self) -> Vocabulary:
        for name, preset in self.presets.items():
            unknown = sorted({g for groups in preset.values() for g in groups} - set(self.groups))
            if unknown:
                raise ValueError(f"presets.{name}: unknown groups {unknown}; groups: {sorted(self.groups)}")
        missing = [t for t in SIGNAL_TYPES if t not in self.canonical_units]
        if missing:
            raise ValueError(f"canonical_units: no unit for types {missing}")
        for key in ("aliases", "envelopes"):
            bad = sorted(set(getattr(self, key)) - set(SIGNAL_TYPES))
            if bad:
                raise ValueError(f"{key}: unknown types {bad}; types: {SIGNAL_TYPES}")
        return self

    def type_of(self, label: str, mne_type: str | None = None) -> str | None:
        """The signal type of ``label`` by its aliases, else ``mne_type`` when it is a known type, else None."""
        key = normalize_label(label)
        for table in (self.aliases, self.envelopes):
            for kind, labels in table.items():
                if key in {normalize_label(a) for a in labels}:
                    return kind
        return mne_type if mne_type in SIGNAL_TYPES and mne_type != "misc" else None

    def is_envelope(self, label: str) -> bool:
        """Whether channel ``label`` is listed under ``envelopes`` (an amplitude envelope: no band-pass)."""
        key = normalize_label(label)
        return any(key in {normalize_label(a) for a in labels} for labels in self.envelopes.values())

    def group_of_type(self, kind: str) -> str | None:
        """The modality group holding signal type ``kind`` (None: ``misc`` and other ungrouped types)."""
        return next((name for name, spec in self.groups.items() if kind in spec.types), None)

    def group_of(self, label: str, mne_type: str | None = None) -> str | None:
        """The modality group of channel ``label`` (None when its type is unknown or ungrouped)."""
        kind = self.type_of(label, mne_type)
        return None if kind is None else self.group_of_type(kind)

    def aliases_of_group(self, group: str) -> list[str]:
        """Every known label of the types of modality group ``group``."""
        tables = (self.aliases, self.envelopes)
        return [a for kind in self.groups[group].types for table in tables for a in table.get(kind, [])]

    def canonical_unit(self, unit_text: str) -> tuple[str, float]:
        """``(canonical unit, factor)`` for a file's unit text; raises ``ValueError`` for an unknown unit."""
        key = unit_text.strip().lower()
        if key not in self.units:
            raise ValueError(f"unit '{unit_text}' is unknown; known: {', '.join(repr(u) for u in self.units)}")
        unit, factor = self.units[key]
        return unit, float(factor)

    def conversion(self, unit_text: str, kind: str) -> tuple[str, float] | None:
        """``(unit, factor)`` turning a signal of type ``kind`` written in ``unit_text`` into the type's
        canonical unit (``canonical_units``): voltages convert between uV and mV, a type whose canonical
        unit is ``arbitrary`` takes any unit as read; None when the unit does not fit the type (a
        temperature for an EEG channel) or is unknown."""
        target = self.canonical_units[kind]
        try:
            unit, factor = self.canonical_unit(unit_text)
        except ValueError:
            return (target, 1.0) if target == "arbitrary" else None
        if unit == target or target == "arbitrary":
            return target, factor if unit == target else 1.0
        if {unit, target} == {"uV", "mV"}:
            return target, factor * VOLTAGE_FACTORS[(unit, target)]
        return None

    def card_type(self, label: str, card: str | None) -> str:
        """Signal type of channel ``label``: the dataset card ``card``'s channel ``kind`` when the card
        lists the label (name or alias) with a kind of the vocabulary, else by the aliases, else ``misc``."""
        kind = card_kinds(card).get(normalize_label(label)) if card else None
        return kind or self.type_of(label) or "misc"

    def conversions(
        self, source: Path | str, labels: list[str], unit_texts: list[str], card: str | None
    ) -> tuple[list[str], list[str], list[float]]:
        """Per channel: ``(types, canonical units, factors)`` that turn each channel (written in
        ``unit_texts``) into its type's canonical unit (a ``misc`` channel in a voltage unit stays a
        voltage, in uV). ``ValueError`` naming ``source``, the units and channels that fit no type."""
        types = [self.card_type(label, card) for label in labels]
        units, factors, bad = [], [], []
        for label, text, kind in zip(labels, unit_texts, types):
            fit = self.conversion(text, kind)
            if kind == "misc":
                fit = self.conversion(text, "eeg") or fit
            if fit is None:
                bad.append((label, text, kind))
                continue
            units.append(fit[0])
            factors.append(fit[1])
        if bad:
            targets = sorted({self.canonical_units[k] for _, _, k in bad})
            what = "voltages" if set(targets) <= {"uV", "mV"} else f"in {' / '.join(targets)}"
            raise ValueError(
                f"{source}: unit(s) {sorted({t.strip().lower() for _, t, _ in bad})} of channels "
                f"{[label for label, _, _ in bad]} (types {sorted({k for _, _, k in bad})}) are not {what}; "
                f"expected one of {', '.join(u for u, (c, _) in self.units.items() if c in targets) or targets}"
            )
        return types, units, factors


def normalize_label(label: str) -> str:
    """Lower-case label without an ``EEG `` / ``EOG `` / ``EMG `` / ``ECG `` prefix."""
    label = label.strip()
    for prefix in CHANNEL_PREFIXES:
        if label.upper().startswith(prefix) and len(label) > len(prefix):
            label = label[len(prefix) :]
    return label.strip().lower()


@cache
def card_kinds(card: str) -> dict[str, str]:
    """Normalized label (name and aliases) -> signal type, for the channels of dataset card ``card``
    whose ``kind`` is a type of the vocabulary ({} for an unknown card)."""
    from ..catalog import load_catalog

    found = load_catalog().get(card)
    if found is None:
        return {}
    return {
        normalize_label(label): channel.kind
        for channel in found.channels
        if channel.kind in SIGNAL_TYPES
        for label in [channel.name, *channel.aliases]
    }


def vocabulary_path() -> Path:
    """``datasets/modalities/psg.yaml`` under the catalog folder (``$MVAPP_DATASETS_DIR`` when set)."""
    return catalog_dir() / "modalities" / "psg.yaml"


@cache
def load_vocabulary(path: str | None = None) -> Vocabulary:
    """Parse and validate the vocabulary (default :func:`vocabulary_path`); errors name the file and key."""
    file = Path(path) if path else vocabulary_path()
    try:
        raw = yaml.safe_load(file.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ValueError(f"{file}: unreadable PSG vocabulary ({err})") from None
    try:
        return Vocabulary.model_validate(raw)
    except ValidationError as err:
        raise ValueError(validation_message(file, err)) from None


@dataclass(frozen=True)
class SignalInfo:
    """One channel of a recording: its label in the file, type, unit (after the reader's conversion),
    sampling rate and modality group (None: ungrouped, e.g. ``misc``)."""

    label: str
    type: str
    unit: str
    sfreq: float
    group: str | None
