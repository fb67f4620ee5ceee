"""PSG modalities as views: the ``psg_modalities`` adapter and the ``modalities`` view policy.

A modality cache (``mvapp data prepare ... --modalities``) holds one window file per modality group
(brain, eyes, muscle, heart, breathing, oximetry; ``datasets/modalities/psg.yaml``) on shared 30-s epochs.
A model **view** is a *modality* here: one or more groups whose channels one encoder takes as input
channels, at one rate (``data.options.modalities``: a preset of psg.yaml, e.g. ``sleepfm`` = brain (EEG +
EOG), heart (ECG), breathing (belts, airflow + SpO2), or a mapping ``{modality: {groups, sfreq}}``).
A modality's rate is its ``sfreq`` or its fastest group's; a slower group (SpO2 at 1 Hz in ``breathing`` at
10 Hz) is upsampled by linear interpolation inside the model input, never in the cache.

Items: ``{"x/<group>": (c_g, T_g), "modalities": "brain,heart,breathing", "label", "index", "subject",
"recording", "window", "onset"}``. A modality is present for an item when every one of its groups is
in its recording (nothing is zero-filled), so ``k`` (the number of modalities present) varies between
recordings; the train split's ``batch_groups`` (one id per modality set, or per night) make the trainer draw every
batch from one set, so a batch has one ``k`` and the losses need no mask. Items with fewer than
``min_modalities`` modalities are left out of the train split (a contrastive loss needs two views).

The ``modalities`` view policy assembles the views of a raw batch: a shared temporal crop (``crop_seconds``:
the same span of the night in every group of an item, its start on the slowest group's sample grid), the
augmentations of each group (``datasets/modalities/augment.yaml``, overridable per group), then each
modality's groups at its rate, concatenated along channels: view ``(n, C_m, T_m)``.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from torch.utils.data import Dataset

from ..adapters import ADAPTERS
from ..batch import ViewBatch
from ..catalog import catalog_dir
from ..views import VIEW_POLICIES, PolicyOptions, ViewPolicy, draw_device
from . import augment
from .adapter import EEGWindowsAdapter, window_meta
from .signals import load_vocabulary
from .stages import EPOCH_SECONDS

SET_KEY = "modalities"
"""Item key naming the item's modality set (present modalities, comma-joined, in the configured order)."""
BatchWithin = Literal["modality_set", "night"]
"""What every item of a training batch shares (``data.options.batch_within``)."""


def group_key(group: str) -> str:
    """Item key of a modality group's window ``(c_g, T_g)``."""
    return f"x/{group}"


class ModalitySpec(BaseModel):
    """One model view: the cache groups it takes and its rate (None: its fastest group's)."""

    model_config = ConfigDict(extra="forbid")
    groups: list[str] = Field(min_length=1)
    sfreq: float | None = Field(None, gt=0)


class GroupAugment(BaseModel):
    """Training augmentations of one modality group (``datasets/modalities/augment.yaml``)."""

    model_config = ConfigDict(extra="forbid")
    amplitude_scale: tuple[float, float] | None = None
    noise_std: float | None = Field(None, gt=0)
    band_stop_hz: float | None = Field(None, gt=0)
    band_stop_p: float = Field(0.5, ge=0, le=1)
    band_stop_range: tuple[float, float] = (0.5, 30.0)

    @model_validator(mode="after")
    def _ranges(self) -> GroupAugment:
        if self.amplitude_scale is not None and not 0 < self.amplitude_scale[0] <= self.amplitude_scale[1]:
            raise ValueError(f"amplitude_scale: expected [low, high] with 0 < low <= high, got {self.amplitude_scale}")
        if not 0 <= self.band_stop_range[0] <= self.band_stop_range[1]:
            raise ValueError(f"band_stop_range: expected [low, high] Hz, 0 <= low <= high, got {self.band_stop_range}")
        return self


@cache
def augment_table() -> dict[str, GroupAugment]:
    """``datasets/modalities/augment.yaml``: group -> its training augmentations (errors name the file)."""
    path = catalog_dir() / "modalities" / "augment.yaml"
    try:
        raw = yaml.safe_load(path.read_text()) or {}
        return {group: GroupAugment.model_validate(spec or {}) for group, spec in raw.get("groups", {}).items()}
    except (OSError, yaml.YAMLError, ValidationError) as err:
        raise ValueError(f"{path}: unreadable augmentation table ({err})") from None


def check_group_augment(group: str, spec: GroupAugment, sfreq: float, where: str) -> None:
    """Refuse augmentations that make no sense for ``group`` at ``sfreq``: a band stop at or above the
    Nyquist frequency (none on 1 Hz SpO2), amplitude scaling of a physical level (a group with a valid
    range, SpO2) unless its scaling is affine (a gain around its reference level)."""
    vocabulary_group = load_vocabulary().groups[group]
    if spec.band_stop_hz is not None and spec.band_stop_range[1] + spec.band_stop_hz / 2 > sfreq / 2:
        raise ValueError(
            f"{where}.{group}: a band stop up to {spec.band_stop_range[1] + spec.band_stop_hz / 2:g} Hz does not fit "
            f"the group's {sfreq:g} Hz rate (Nyquist {sfreq / 2:g} Hz); leave band_stop_hz out for {group}"
        )
    level = vocabulary_group.valid_range is not None
    if spec.amplitude_scale is not None and level and vocabulary_group.scaling != "affine":
        raise ValueError(
            f"{where}.{group}: amplitude scaling of {group} (a physical level, valid range "
            f"{vocabulary_group.valid_range}) needs its affine scaling in psg.yaml, got '{vocabulary_group.scaling}'"
        )


def resolve_modalities(spec: str | dict[str, Any]) -> dict[str, ModalitySpec]:
    """``data.options.modalities``: a preset name of psg.yaml or a mapping (of :class:`ModalitySpec` or its
    dicts) -> ``{modality: ModalitySpec}``."""
    if isinstance(spec, dict):
        return {name: ModalitySpec.model_validate(value) for name, value in spec.items()}
    presets = load_vocabulary().presets
    if spec not in presets:
        raise ValueError(f"data.options.modalities: unknown preset '{spec}'; presets: {', '.join(presets)}")
    return {name: ModalitySpec(groups=list(groups)) for name, groups in presets[spec].items()}


def view_rate(name: str, spec: ModalitySpec, rates: dict[str, float]) -> float:
    """A modality's rate: ``spec.sfreq`` or its fastest group's; a group faster than it is an error."""
    rate = spec.sfreq if spec.sfreq is not None else max(rates[g] for g in spec.groups)
    fast = [g for g in spec.groups if rates[g] > rate + 1e-9]
    if fast:
        raise ValueError(
            f"data.options.modalities.{name}.sfreq: {rate:g} Hz is below group {fast[0]}'s {rates[fast[0]]:g} Hz "
            "(the model input only upsamples); raise sfreq or prepare the group at that rate"
        )
    return float(rate)


def group_channels(recordings: list[dict], group: str, cache_dir: Path) -> list[str]:
    """The channel names of ``group``, which must be the same count in every recording that has it."""
    named = {r["recording"]: r["modalities"][group]["channels"] for r in recordings if group in r["modalities"]}
    counts = {len(c) for c in named.values()}
    if len(counts) > 1:
        sizes = ", ".join(f"{rec}: {len(c)}" for rec, c in named.items())
        raise ValueError(
            f"{cache_dir}: modality group {group} has different channel counts per recording ({sizes}); an encoder "
            f"takes a fixed number of input channels: prepare with --modalities {group}=LABEL+LABEL"
        )
    return next(iter(named.values()), [])


class ModalWindowDataset(Dataset):
    """Windows of a modality cache's recordings, each item with the groups of its present modalities.

    ``set_ids`` ``(N,)``: the modality-set id of each item (``set_names[id]``). ``batch_groups`` ``(N,)``: the
    id the trainer's sampler (:func:`multiview_app.train.trainer.group_batches`) keeps together in a batch:
    the modality set (``batch_within="modality_set"``), or the night (``"night"``: every item of a batch from
    one recording, so a batch holds one set and its negatives are other times of the same night).
    """

    def __init__(
        self,
        cache_dir: Path,
        recordings: list[dict],
        modalities: dict[str, ModalitySpec],
        batch_within: BatchWithin = "modality_set",
    ) -> None:
        self.cache_dir, self.modalities = cache_dir, modalities
        present = [[m for m, s in modalities.items() if set(s.groups) <= set(r["modalities"])] for r in recordings]
        self.recordings = [r for r, p in zip(recordings, present) if p]
        self.present = [p for p in present if p]
        self.set_names = sorted({",".join(p) for p in self.present}, key=lambda s: (-s.count(","), s))
        counts = np.array([r["n_windows"] for r in self.recordings], dtype=np.int64)
        self.recording_of = np.repeat(np.arange(len(self.recordings)), counts)
        self.offset_of = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
        set_of_recording = np.array([self.set_names.index(",".join(p)) for p in self.present], dtype=np.int64)
        self.set_ids = set_of_recording[self.recording_of] if len(counts) else np.zeros(0, dtype=np.int64)
        self.batch_groups = self.set_ids if batch_within == "modality_set" else self.recording_of
        self.labels = np.concatenate([np.asarray(r["labels"], dtype=np.int64) for r in self.recordings] or [[]])
        self.epochs = np.concatenate([np.asarray(r["epochs"], dtype=np.int64) for r in self.recordings] or [[]])
        self._maps: dict[tuple[int, str], np.ndarray] = {}

    def __len__(self) -> int:
        return int(self.recording_of.size)

    def groups_of(self, recording: int) -> list[str]:
        """The cache groups an item of ``recording`` carries (those of its present modalities)."""
        return [g for m in self.present[recording] for g in self.modalities[m].groups]

    def _windows(self, recording: int, group: str) -> np.ndarray:
        key = (recording, group)
        if key not in self._maps:
            file = self.recordings[recording]["modalities"][group]["file"]
            self._maps[key] = np.load(self.cache_dir / file, mmap_mode="r")
        return self._maps[key]

    def __getitem__(self, index: int) -> dict[str, Any]:
        recording, offset = int(self.recording_of[index]), int(self.offset_of[index])
        record = self.recordings[recording]
        item: dict[str, Any] = {
            group_key(g): torch.from_numpy(np.array(self._windows(recording, g)[offset], dtype=np.float32))
            for g in dict.fromkeys(self.groups_of(recording))
        }
        return {
            **item,
            SET_KEY: ",".join(self.present[recording]),
            **window_meta(record, index, self.labels, self.epochs),
        }

    def __getstate__(self) -> dict[str, Any]:  # workers re-open their own memory maps
        return {**self.__dict__, "_maps": {}}


@ADAPTERS.register("psg_modalities")
class PSGModalitiesAdapter(EEGWindowsAdapter):
    """A modality cache (``mvapp data prepare --modalities``) with PSG modalities as views, split by subject
    as ``eeg_windows`` (the same split options).

    Options (besides the split's): ``cache``; ``modalities`` (a preset of psg.yaml, default ``sleepfm``, or
    ``{modality: {groups: [...], sfreq: Hz}}``); ``min_modalities`` (train items with fewer present
    modalities are left out; default 2); ``batch_within`` (what a training batch shares: ``modality_set``, the
    default, or ``night``: every batch from one night, whose other times are then each item's negatives, so
    a loss must tell times of one night apart rather than people; a night needs at least ``batch_size``
    windows). Attributes: ``modality_names`` (the configured modalities, in
    order), ``modality_rates``, ``modality_channels`` (channel names per modality, group by group).
    """

    modality = "psg"

    class Options(EEGWindowsAdapter.Options):
        modalities: str | dict[str, ModalitySpec] = "sleepfm"
        min_modalities: int = Field(2, ge=1)
        batch_within: BatchWithin = "modality_set"

    def __init__(self, options: Options) -> None:
        super().__init__(options)
        groups = self.manifest.get("modality_groups")
        if not groups:
            raise ValueError(
                f"data.options.cache: {self.cache_dir} is not a modality cache; prepare it with "
                "`mvapp data prepare ... --modalities sleepfm` (or six)"
            )
        self.modalities = resolve_modalities(options.modalities)
        unknown = sorted({g for s in self.modalities.values() for g in s.groups} - set(groups))
        if unknown:
            raise ValueError(
                f"data.options.modalities: groups {unknown} are not in cache {self.cache_dir}; it holds "
                f"{', '.join(groups)}"
            )
        self.group_rates = {g: float(spec["sfreq"]) for g, spec in groups.items()}
        self.group_scaling = {g: spec["scaling"] for g, spec in groups.items()}
        recordings = [r for r in self.manifest["recordings"] if r["n_windows"] > 0]
        self.group_channel_names = {g: group_channels(recordings, g, self.cache_dir) for g in groups}
        self.modality_names = list(self.modalities)
        self.modality_rates = {m: view_rate(m, s, self.group_rates) for m, s in self.modalities.items()}
        self.modality_channels = {
            m: [c for g in s.groups for c in self.group_channel_names[g]] for m, s in self.modalities.items()
        }

    def modality_contracts(self) -> dict[str, dict[str, Any]]:
        """Per modality, what its encoder takes: groups, channels, rate, window samples, upsampled groups."""
        return {
            m: {
                "groups": list(spec.groups),
                "channels": self.modality_channels[m],
                "in_channels": len(self.modality_channels[m]),
                "sfreq": self.modality_rates[m],
                "window_samples": int(round(EPOCH_SECONDS * self.modality_rates[m])),
                "upsampled": {
                    g: self.group_rates[g] for g in spec.groups if self.group_rates[g] < self.modality_rates[m]
                },
                "scaling": {g: self.group_scaling[g] for g in spec.groups},
                "source_cache": str(self.cache_dir),
            }
            for m, spec in self.modalities.items()
        }

    def input_contract(self, encoder: dict[str, Any], views: list[str]) -> dict[str, Any]:
        """Not used: a modality run's contract is per modality (:meth:`modality_contracts`)."""
        return {"modalities": self.modality_contracts()}

    def check_input_contract(
        self, contract: dict[str, Any], *, whose: str, accept: bool = False, accept_hint: str = ""
    ) -> list[str]:
        """Lines naming each modality whose channels or rate differ from ``contract`` (a ``ValueError`` unless
        ``accept``)."""
        lines = []
        ours = self.modality_contracts()
        for m, theirs in contract.get("modalities", {}).items():
            mine = ours.get(m)
            for key in ("channels", "sfreq", "groups"):
                if mine is None or mine[key] != theirs.get(key):
                    lines.append(
                        f"modality {m}: {key} {theirs.get(key)} in {whose}, {None if mine is None else mine[key]} here"
                    )
        if lines and not accept:
            raise ValueError(f"{self.cache_dir} does not fit {whose}: " + "; ".join(lines) + f" ({accept_hint})")
        return [f"{self.cache_dir} differs from {whose}:", *lines] if lines else []

    def _build_split(self, name: str) -> ModalWindowDataset:
        recordings = self._recordings[name]
        if name == "train":
            count = self.options.min_modalities
            recordings = [r for r in recordings if self._present_count(r) >= count]
        return ModalWindowDataset(self.cache_dir, recordings, self.modalities, self.options.batch_within)

    def _present_count(self, record: dict) -> int:
        return sum(set(s.groups) <= set(record["modalities"]) for s in self.modalities.values())


def shared_crop_starts(
    n: int, rates: list[float], window_s: float, crop_s: float, generator: torch.Generator | None, device: torch.device
) -> torch.Tensor:
    """``(n,)`` crop starts in seconds, one per item, on the slowest rate's sample grid (every group then
    starts its crop at a whole sample of the same instant)."""
    slowest = min(rates)
    slots = int(round((window_s - crop_s) * slowest)) + 1
    start = torch.randint(0, slots, (n,), generator=generator, device=draw_device(generator, device))
    return start.to(device).double() / slowest


def crop_group(x: torch.Tensor, starts_s: torch.Tensor, rate: float, crop_s: float) -> torch.Tensor:
    """``x (n, c, T)`` -> ``(n, c, crop_s * rate)`` from each item's start (seconds)."""
    length = int(round(crop_s * rate))
    first = torch.round(starts_s * rate).long()  # (n,)
    return augment.gather_time(x, first[:, None] + torch.arange(length, device=x.device)[None])


def augment_group(x: torch.Tensor, spec: GroupAugment, rate: float, generator: torch.Generator | None) -> torch.Tensor:
    """The group's augmentations (:class:`GroupAugment`, in its documented order) on ``x (n, c, T)``."""
    if spec.amplitude_scale is not None:
        x = augment.scale_amplitude(x, spec.amplitude_scale[0], spec.amplitude_scale[1], generator)
    if spec.noise_std is not None:
        x = augment.add_noise(x, spec.noise_std, generator)
    if spec.band_stop_hz is not None:
        x = augment.band_stop(x, rate, spec.band_stop_hz, spec.band_stop_p, *spec.band_stop_range, generator)
    return x


def to_rate(x: torch.Tensor, length: int) -> torch.Tensor:
    """``x (n, c, T)`` at ``length`` samples: unchanged, or upsampled by linear interpolation."""
    if x.shape[-1] == length:
        return x
    return F.interpolate(x, size=length, mode="linear", align_corners=False)


@VIEW_POLICIES.register("modalities")
class ModalityViews(ViewPolicy):
    """Raw batch of a ``psg_modalities`` adapter -> one view per present modality, ``(n, C_m, T_m)``, named
    by the modality (the model's encoder key). ``views.k`` = the number of configured modalities; a batch of
    items missing some has fewer views (every item of a batch has the same set: the trainer's grouped sampler).

    Options: ``crop_seconds`` (train only: the same span of every group of an item); ``augment`` (train
    only: the groups' augmentations of ``datasets/modalities/augment.yaml``; false: none); ``group_augment``
    (per group, replaces the table's entry). Eval views: full windows, no augmentation.
    """

    modality = "psg"

    class Options(PolicyOptions):
        crop_seconds: float | None = Field(None, gt=0)
        augment: bool = True
        group_augment: dict[str, GroupAugment] | None = None

    def __init__(self, k: int, options: Options, adapter: Any) -> None:
        super().__init__(k, options, adapter)
        self.specs: dict[str, ModalitySpec] = adapter.modalities
        if k != len(self.specs):
            raise ValueError(
                f"views.k = {k} but data.options.modalities configures {len(self.specs)} modalities "
                f"({', '.join(self.specs)}); set views.k to {len(self.specs)}"
            )
        self.rates, self.view_rates = adapter.group_rates, adapter.modality_rates
        self.window_s = float(adapter.window_seconds)
        self.augments = self._augments(options)
        self._check_crop(options.crop_seconds)

    def _augments(self, options: Options) -> dict[str, GroupAugment]:
        """Each used group's augmentations (none when ``augment`` is false), checked against its rate."""
        if not options.augment:
            return {}
        table = {**augment_table(), **(options.group_augment or {})}
        used = [g for s in self.specs.values() for g in s.groups]
        for group in used:
            if group in table:
                check_group_augment(group, table[group], self.rates[group], "views.options.group_augment")
        return {g: table[g] for g in used if g in table}

    def _check_crop(self, crop_s: float | None) -> None:
        if crop_s is None:
            return
        if crop_s > self.window_s:
            raise ValueError(f"views.options.crop_seconds: {crop_s:g} s is longer than the {self.window_s:g}-s windows")
        for group in {g for s in self.specs.values() for g in s.groups}:
            if abs(crop_s * self.rates[group] - round(crop_s * self.rates[group])) > 1e-6:
                raise ValueError(
                    f"views.options.crop_seconds: {crop_s:g} s is not a whole number of samples of group "
                    f"{group} at {self.rates[group]:g} Hz"
                )

    def present(self, raw: dict[str, Any]) -> list[str]:
        """The batch's modalities (one set for every item; a mixed batch is an error)."""
        sets = raw[SET_KEY]
        sets = [sets] if isinstance(sets, str) else list(sets)
        if len(set(sets)) != 1:
            raise ValueError(
                f"a batch mixes modality sets {sorted(set(sets))}; batches must be drawn per set (the train split's "
                "batch_groups; for evaluation see multiview_app.models.modal_embed)"
            )
        return sets[0].split(",")

    def _assemble(self, groups: dict[str, torch.Tensor], names: list[str], raw: dict[str, Any]) -> ViewBatch:
        """Each present modality's groups at its rate, concatenated on channels -> the ViewBatch."""
        views = []
        for name in names:
            parts = [groups[g] for g in self.specs[name].groups]
            length = max(
                p.shape[-1] * self.view_rates[name] / self.rates[g] for p, g in zip(parts, self.specs[name].groups)
            )
            views.append(torch.cat([to_rate(p, int(round(length))) for p in parts], dim=1))
        labels = raw.get("label")
        labels = None if labels is None else torch.as_tensor(labels).long()
        meta = {key: value for key, value in raw.items() if key != "label" and not key.startswith("x/")}
        return ViewBatch(views, list(names), list(names), labels, meta)

    def train_views(self, raw: dict[str, Any], generator: torch.Generator | None = None) -> ViewBatch:
        names = self.present(raw)
        used = list(dict.fromkeys(g for m in names for g in self.specs[m].groups))
        groups = {g: raw[group_key(g)].float() for g in used}
        crop = self.options.crop_seconds
        if crop is not None and crop < self.window_s:
            first = next(iter(groups.values()))
            starts = shared_crop_starts(
                first.shape[0], [self.rates[g] for g in used], self.window_s, crop, generator, first.device
            )
            groups = {g: crop_group(x, starts, self.rates[g], crop) for g, x in groups.items()}
        groups = {
            g: augment_group(x, self.augments[g], self.rates[g], generator) if g in self.augments else x
            for g, x in groups.items()
        }
        return self._assemble(groups, names, raw)

    def eval_views(self, raw: dict[str, Any]) -> ViewBatch:
        names = self.present(raw)
        used = dict.fromkeys(g for m in names for g in self.specs[m].groups)
        return self._assemble({g: raw[group_key(g)].float() for g in used}, names, raw)


__all__ = [
    "GroupAugment",
    "ModalWindowDataset",
    "ModalitySpec",
    "ModalityViews",
    "PSGModalitiesAdapter",
    "augment_table",
    "resolve_modalities",
]
