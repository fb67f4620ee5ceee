"""The dataset catalog: one YAML card per dataset in the top-level ``datasets/`` folder.

Facts about a dataset (source, license, layout, channels and sampling rates, label mapping, split
rule, checksums, how to obtain it) live in its card; readers, ``mvapp data prepare`` / ``info`` /
``list`` read them from here instead of repeating them in code::

    card = get_card("sleep-edf")
    card.label_codes()        # {"Sleep stage W": 0, ..., "Sleep stage ?": -1}
    card.default_channels     # ["Fpz-Cz", "Pz-Oz"]

Cards are found in ``$MVAPP_DATASETS_DIR`` when set, else in ``datasets/`` next to the package (a
source checkout or an editable install, as the README installs it).
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

#: Label code of epochs / items whose annotation is mapped to ``exclude`` (dropped and counted).
EXCLUDE = "exclude"


class _Card(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Source(_Card):
    url: str | None
    citation: str
    license: str
    license_url: str | None = None


class Channel(_Card):
    name: str
    sfreq: float | None = None
    kind: str = "eeg"
    aliases: list[str] = Field(default_factory=list)
    note: str | None = None


class Labels(_Card):
    classes: list[str]
    epoch_seconds: float | None = None
    mapping: dict[str, str] = Field(default_factory=dict)
    scored_seconds: float | None = Field(
        None,
        description="length of one scored label in the files when it differs from epoch_seconds "
        "(DREAMS: 5-s R&K labels, combined into epoch_seconds epochs by ``rule``)",
    )
    rule: str | None = None

    @model_validator(mode="after")
    def _targets_known(self) -> Labels:
        bad = {k: v for k, v in self.mapping.items() if v != EXCLUDE and v not in self.classes}
        if bad:
            raise ValueError(f"labels.mapping targets {bad} are neither a class of {self.classes} nor '{EXCLUDE}'")
        return self


class Splits(_Card):
    official: str | None
    rule: str


class Checksums(_Card):
    published: str | None
    files: dict[str, str] = Field(default_factory=dict)  # relative path -> sha256


class RecordingFacts(_Card):
    """Facts of one recording of a small fixed dataset that its files do not state (DREAMS excerpts:
    the text files carry no sampling rate)."""

    sfreq: float = Field(gt=0)
    channel: str


class Obtain(_Card):
    download: str | None
    generate: str | None
    notes: str | None = None


class DatasetCard(_Card):
    """One dataset's card (``datasets/<name>.yaml``)."""

    name: str
    title: str
    kind: Literal["real", "synthetic", "bundled", "format"]
    modality: str
    adapters: list[str]
    prepare: str | None = None  # the `mvapp data prepare` dataset name, when it has one
    source: Source
    size: str
    layout: str
    channels: list[Channel] = Field(default_factory=list)
    default_channels: list[str] = Field(default_factory=list)
    allow_upsampling: bool = Field(
        False,
        description="prepare --modalities may resample a channel above its recorded rate (reported per "
        "recording); otherwise a modality group asked at a higher rate than a channel's is an error",
    )
    domains: list[str] = Field(default_factory=list)
    recordings: dict[str, RecordingFacts] = Field(default_factory=dict)
    labels: Labels
    splits: Splits
    checksums: Checksums
    obtain: Obtain

    @model_validator(mode="after")
    def _defaults_are_channels(self) -> DatasetCard:
        names = {c.name for c in self.channels}
        missing = [c for c in self.default_channels if c not in names]
        if self.channels and missing:
            raise ValueError(f"default_channels {missing} are not among channels {sorted(names)}")
        return self

    def label_codes(self, excluded_code: int = -1) -> dict[str, int]:
        """Annotation text -> label index (position in ``labels.classes``), ``excluded_code`` for
        annotations mapped to ``exclude``."""
        classes = self.labels.classes
        return {
            text: excluded_code if target == EXCLUDE else classes.index(target)
            for text, target in self.labels.mapping.items()
        }

    def summary(self) -> dict[str, Any]:
        """The card's key facts as a flat dict (for ``mvapp data list`` / ``info``)."""
        return {
            "name": self.name,
            "title": self.title,
            "kind": self.kind,
            "modality": self.modality,
            "adapters": self.adapters,
            "license": self.source.license,
            "url": self.source.url,
            "classes": self.labels.classes,
            "default_channels": self.default_channels,
            "obtain": self.obtain.download or self.obtain.generate or self.obtain.notes,
        }


def validation_message(where: object, err: ValidationError) -> str:
    """``<where>: <dotted key>: <what is wrong>`` of a YAML file's first validation error (cards, the PSG
    vocabulary, stage maps)."""
    first = err.errors()[0]
    key = ".".join(str(p) for p in first["loc"]) or "(top level)"
    return f"{where}: {key}: {first['msg']}"


def catalog_dir() -> Path:
    """The folder holding the cards (see module docstring for the search order)."""
    env = os.environ.get("MVAPP_DATASETS_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "datasets"


def read_card(path: str | Path) -> DatasetCard:
    """Parse and validate one card; errors name the file and the key."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ValueError(f"{path}: unreadable dataset card ({err})") from None
    try:
        card = DatasetCard.model_validate(raw)
    except ValidationError as err:
        raise ValueError(validation_message(path, err)) from None
    if card.name != path.stem:
        raise ValueError(f"{path}: name '{card.name}' differs from the file name '{path.stem}'")
    return card


@cache
def load_catalog(folder: str | None = None) -> dict[str, DatasetCard]:
    """Every card of ``folder`` (default :func:`catalog_dir`) by name."""
    root = Path(folder) if folder else catalog_dir()
    if not root.is_dir():
        raise FileNotFoundError(f"dataset catalog folder {root} not found (set MVAPP_DATASETS_DIR)")
    return {card.name: card for card in map(read_card, sorted(root.glob("*.yaml")))}


def get_card(name: str) -> DatasetCard:
    """The card called ``name`` (ValueError listing the catalog)."""
    cards = load_catalog()
    if name not in cards:
        raise ValueError(f"unknown dataset '{name}'; the catalog ({catalog_dir()}) has: {', '.join(cards)}")
    return cards[name]


def cards_for_adapter(adapter: str) -> list[DatasetCard]:
    """Cards of the datasets that adapter ``adapter`` reads."""
    return [card for card in load_catalog().values() if adapter in card.adapters]


def preparable() -> dict[str, DatasetCard]:
    """Datasets ``mvapp data prepare`` knows, by prepare name."""
    return {card.prepare: card for card in load_catalog().values() if card.prepare}


__all__ = [
    "DatasetCard",
    "EXCLUDE",
    "cards_for_adapter",
    "catalog_dir",
    "get_card",
    "load_catalog",
    "preparable",
    "read_card",
]
