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

from ..catalog import catalog_dir

SIGNAL_TYPES: tuple[str, ...] = ("eeg", "eog", "emg", "ecg", "resp", "bio", "misc")
"""Channel types, in MNE's vocabulary (``bio``: SpO2 and other slow physiological signals)."""

CHANNEL_PREFIXES = ("EEG ", "EOG ", "EMG ", "ECG ")


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
    events: dict[str, str]

    @model_validator(mode="after")
    def _check_references(self) -> Vocabulary:
        for name, preset in self.presets.items():
            unknown = sorted({g for groups in preset.values() for g in groups} - set(self.groups))
            if unknown:
                raise ValueError(f"presets.{name}: unknown groups {unknown}; groups: {sorted(self.groups)}")
        missing = [t for t in SIGNAL_TYPES if t not in self.canonical_units]
        if missing:
            raise ValueError(f"canonical_units: no unit for types {missing}")
        bad = sorted(set(self.aliases) - set(SIGNAL_TYPES))
        if bad:
            raise ValueError(f"aliases: unknown types {bad}; types: {SIGNAL_TYPES}")
        return self

    def type_of(self, label: str, mne_type: str | None = None) -> str | None:
        """The signal type of ``label`` by its aliases, else ``mne_type`` when it is a known type, else None."""
        key = normalize_label(label)
        for kind, labels in self.aliases.items():
            if key in {normalize_label(a) for a in labels}:
                return kind
        return mne_type if mne_type in SIGNAL_TYPES and mne_type != "misc" else None

    def group_of_type(self, kind: str) -> str | None:
        """The modality group holding signal type ``kind`` (None: ``misc`` and other ungrouped types)."""
        return next((name for name, spec in self.groups.items() if kind in spec.types), None)

    def group_of(self, label: str, mne_type: str | None = None) -> str | None:
        """The modality group of channel ``label`` (None when its type is unknown or ungrouped)."""
        kind = self.type_of(label, mne_type)
        return None if kind is None else self.group_of_type(kind)

    def aliases_of_group(self, group: str) -> list[str]:
        """Every known label of the types of modality group ``group``."""
        return [a for kind in self.groups[group].types for a in self.aliases.get(kind, [])]

    def canonical_unit(self, unit_text: str) -> tuple[str, float]:
        """``(canonical unit, factor)`` for a file's unit text; raises ``ValueError`` for an unknown unit."""
        key = unit_text.strip().lower()
        if key not in self.units:
            raise ValueError(f"unit '{unit_text}' is unknown; known: {', '.join(repr(u) for u in self.units)}")
        unit, factor = self.units[key]
        return unit, float(factor)


def normalize_label(label: str) -> str:
    """Lower-case label without an ``EEG `` / ``EOG `` / ``EMG `` / ``ECG `` prefix."""
    label = label.strip()
    for prefix in CHANNEL_PREFIXES:
        if label.upper().startswith(prefix) and len(label) > len(prefix):
            label = label[len(prefix) :]
    return label.strip().lower()


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
        first = err.errors()[0]
        key = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise ValueError(f"{file}: {key}: {first['msg']}") from None


@dataclass(frozen=True)
class SignalInfo:
    """One channel of a recording: its label in the file, type, unit (after the reader's conversion),
    sampling rate and modality group (None: ungrouped, e.g. ``misc``)."""

    label: str
    type: str
    unit: str
    sfreq: float
    group: str | None
