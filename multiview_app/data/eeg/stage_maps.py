"""Stage maps: how a file's stage labels, event names and event-channel codes map to the project's vocabulary.

Presets (``aasm``, ``rk``, ``dreams``) live in ``datasets/modalities/stage-maps.yaml`` (data, not code); a
user's own map is one preset's body in its own YAML file::

    stage_map = load_stage_map("rk")             # or load_stage_map("my-lab.yaml")
    stage_map.stage_code("S4")                   # 3 (N3)
    stage_map.event_label("Obstructive Apnea")   # "resp_obstructiveapnea"
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from ..catalog import EXCLUDE, catalog_dir, get_card, validation_message
from .signals import SIGNAL_TYPES, load_vocabulary, normalize_label
from .stages import EXCLUDED, STAGES

PRESETS_FILE = "stage-maps.yaml"
DEFAULT_STAGE_MAP = "aasm"
ANY_CODE = "*"
"""Key of an event channel's code map that stands for every non-zero code."""


class StageMapSpec(BaseModel):
    """One stage map as written (see the header of ``datasets/modalities/stage-maps.yaml``)."""

    model_config = ConfigDict(extra="forbid")

    note: str | None = None
    stages: dict[str, str] = {}
    stages_from_card: str | None = None
    events: dict[str, str | dict[str, str]] = {}
    channels: dict[str, str] = {}
    not_signals: list[str] = []


def label_key(value: str | float) -> str:
    """Matching key of a label: stripped, lower case; a number in its shortest form (``5``, ``5.0``, ``5.00``
    alike; ``-1``)."""
    text = str(value).strip()
    try:
        number = float(text)
    except ValueError:
        return text.lower()
    return str(int(number)) if number.is_integer() else repr(number)


@dataclass(frozen=True)
class StageMap:
    """A parsed stage map; every key is a :func:`label_key` (channel labels: ``signals.normalize_label``).

    Attributes:
        name: the preset name or the file it was read from.
        stages: label -> stage code (0..4 in ``STAGES`` order, ``EXCLUDED``).
        events: annotation text -> event label (psg.yaml ``events``).
        event_channels: channel label -> {code or ``*`` -> event label}.
        channel_types: channel label -> signal type (before the vocabulary's aliases).
        not_signals: channel labels holding annotations that are not read.
        file: the user's YAML file (None for a preset).
    """

    name: str
    stages: dict[str, int]
    events: dict[str, str]
    event_channels: dict[str, dict[str, str]] = field(default_factory=dict)
    channel_types: dict[str, str] = field(default_factory=dict)
    not_signals: frozenset[str] = frozenset()
    file: Path | None = None

    def stage_code(self, label: str | float) -> int | None:
        """Stage code of ``label`` (None: not a stage label of this map)."""
        return self.stages.get(label_key(label))

    def event_label(self, text: str) -> str | None:
        """Event label of annotation ``text``: mapped, or already in psg.yaml's events; else None."""
        key = label_key(text)
        if key in self.events:
            return self.events[key]
        known = {label_key(name): name for name in load_vocabulary().events}
        return known.get(key)


def presets_path() -> Path:
    """``datasets/modalities/stage-maps.yaml`` under the catalog folder."""
    return catalog_dir() / "modalities" / PRESETS_FILE


def _read_yaml(path: Path, what: str) -> object:
    try:
        return yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ValueError(f"{path}: unreadable {what} ({err})") from None


def preset_names() -> list[str]:
    """Names of the shipped presets."""
    raw = _read_yaml(presets_path(), "stage-map presets")
    return sorted(raw) if isinstance(raw, dict) else []


def _stage_codes(spec: StageMapSpec, where: str) -> dict[str, int]:
    """label key -> code from ``stages`` (and ``stages_from_card``); ``ValueError`` naming ``where`` and key."""
    raw = dict(spec.stages)
    if spec.stages_from_card:
        card = get_card(spec.stages_from_card)
        raw = {**card.labels.mapping, **raw}
    codes = {}
    for label, target in raw.items():
        if target != EXCLUDE and target not in STAGES:
            raise ValueError(f"{where}: stages.{label}: '{target}', expected one of {', '.join(STAGES)} or {EXCLUDE}")
        codes[label_key(label)] = EXCLUDED if target == EXCLUDE else STAGES.index(target)
    return codes


def _check_event(label: str, key: str, where: str) -> str:
    known = load_vocabulary().events
    if label not in known:
        raise ValueError(
            f"{where}: events.{key}: '{label}' is not an event label of psg.yaml; known: {', '.join(known)}"
        )
    return label


def build_stage_map(spec: StageMapSpec, name: str, file: Path | None = None) -> StageMap:
    """Check a spec's targets (stages, event labels, channel types) and key it; errors name ``name`` and key."""
    events, channels = {}, {}
    for key, target in spec.events.items():
        if isinstance(target, dict):
            channels[normalize_label(key)] = {
                (ANY_CODE if code == ANY_CODE else label_key(code)): _check_event(label, f"{key}.{code}", name)
                for code, label in target.items()
            }
        else:
            events[label_key(key)] = _check_event(target, key, name)
    bad = {k: v for k, v in spec.channels.items() if v not in SIGNAL_TYPES}
    if bad:
        raise ValueError(f"{name}: channels: types {bad}, expected one of {', '.join(SIGNAL_TYPES)}")
    return StageMap(
        name=name,
        stages=_stage_codes(spec, name),
        events=events,
        event_channels=channels,
        channel_types={normalize_label(k): v for k, v in spec.channels.items()},
        not_signals=frozenset(normalize_label(label) for label in spec.not_signals),
        file=file,
    )


def _parse(raw: object, where: str) -> StageMapSpec:
    try:
        return StageMapSpec.model_validate(raw)
    except ValidationError as err:
        raise ValueError(validation_message(where, err)) from None


def load_stage_map(name: str | Path = DEFAULT_STAGE_MAP) -> StageMap:
    """A preset by name (``aasm``, ``rk``, ``dreams``) or a user's YAML file (one preset's body); ``ValueError``
    naming the file and the key for anything else."""
    presets = _read_yaml(presets_path(), "stage-map presets")
    if isinstance(presets, dict) and str(name) in presets:
        return build_stage_map(_parse(presets[str(name)], f"{presets_path()}: {name}"), str(name))
    path = Path(name)
    if path.suffix.lower() not in (".yaml", ".yml") or not path.is_file():
        raise ValueError(
            f"stage map '{name}': neither a preset ({', '.join(sorted(presets or {}))}) nor a YAML file (.yaml)"
        )
    return build_stage_map(_parse(_read_yaml(path, "stage map"), str(path)), str(path), path)
