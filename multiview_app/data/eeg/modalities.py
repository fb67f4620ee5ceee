"""PSG modality groups of one recording: which channels each group takes, their checks and their windows.

``mvapp data prepare DATASET --modalities sleepfm`` (a preset of ``datasets/modalities/psg.yaml``) or
``--modalities brain,heart,oximetry`` (groups; ``group=LABEL+LABEL`` picks a group's channels by label)
reads every signal of a recording with its type and unit, then for each asked group:

* takes its channels: the labels asked for, else (brain) the dataset's EEG pick (``--channels`` or the
  card's default), else every channel of the group's signal types in the file;
* leaves out flat, saturated or (SpO2) mostly out-of-range channels
  (:func:`~.channel_quality.assess_channel`), reported with the reason, never used silently;
* refuses a group asked at a rate above a channel's recorded rate, unless the dataset card allows
  upsampling (``allow_upsampling``), then reports the upsampled channels;
* with a rate cap (``--max-rate``, :func:`group_specs`), prepares each group at ``min(rate, cap)`` with its
  band's high edge moved below the new Nyquist frequency (a 50-Hz recording: every group at 50 Hz or less);
* resamples, band-passes, cuts into 30-s windows on the shared epoch grid and scales per the group.

Every group of a recording keeps the same epochs (an epoch dropped in one group is dropped in all), so
windows align across modalities. A group without a usable channel is missing for that recording, with
its reason; nothing is zero-filled.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .channel_quality import assess_channel
from .preprocess import PrepareOptions, flat_windows, grid_offsets, plan_epochs, scale_windows, span_windows
from .recording import Recording
from .signals import GroupSpec, UnknownChannelError, Vocabulary, load_vocabulary, normalize_label
from .stages import EPOCH_SECONDS

if TYPE_CHECKING:
    from ..catalog import DatasetCard

NYQUIST_FRACTION = 0.9
"""A capped group's band high edge, as a fraction of its new Nyquist frequency (22.5 Hz at a 50-Hz cap)."""

WINDOW_SCALED = ("window",)
"""Scalings that divide each window by its own std: a flat window of such a group is dropped."""


def parse_modalities(spec: str, vocabulary: Vocabulary | None = None) -> dict[str, list[str] | None]:
    """``"sleepfm"`` / ``"brain,heart=ECG"`` -> ``{group: labels asked for, or None}`` in the
    vocabulary's group order. ``ValueError`` naming an unknown item and listing presets and groups."""
    vocabulary = vocabulary or load_vocabulary()
    asked: dict[str, list[str] | None] = {}
    for item in (part.strip() for part in spec.split(",")):
        name, sep, labels = item.partition("=")
        name = name.strip()
        if not sep and name in vocabulary.presets:
            asked.update({g: None for groups in vocabulary.presets[name].values() for g in groups if g not in asked})
        elif name in vocabulary.groups:
            picked = [label.strip() for label in labels.split("+") if label.strip()] if sep else None
            if sep and not picked:
                raise ValueError(f"--modalities: '{item}' names no channel; expected {name}=LABEL[+LABEL...]")
            asked[name] = picked
        else:
            raise ValueError(
                f"--modalities: '{item}' is neither a preset ({', '.join(vocabulary.presets)}) nor a modality "
                f"group ({', '.join(vocabulary.groups)}); expected a preset or a comma list of groups"
            )
    return {group: asked[group] for group in vocabulary.groups if group in asked}


def capped_spec(group: str, spec: GroupSpec, max_rate: float) -> GroupSpec:
    """``spec`` at ``min(spec.sfreq, max_rate)``; a high edge at or above the new Nyquist frequency moves to
    :data:`NYQUIST_FRACTION` of it. ``ValueError`` naming the group, its band and the cap when the low edge
    does not fit below the new high edge."""
    if spec.sfreq <= max_rate:
        return spec
    nyquist = max_rate / 2
    h_freq = spec.h_freq if spec.h_freq is None or spec.h_freq < nyquist else round(NYQUIST_FRACTION * nyquist, 6)
    if spec.l_freq is not None and h_freq is not None and spec.l_freq >= h_freq:
        raise ValueError(
            f"--max-rate {max_rate:g}: modality group {group}'s band {spec.l_freq:g}-{spec.h_freq:g} Hz does not fit "
            f"below the Nyquist frequency {nyquist:g} Hz (the high edge would be {h_freq:g} Hz, under the low edge); "
            f"expected --max-rate above {2 * spec.l_freq / NYQUIST_FRACTION:g} Hz, or leave {group} out of --modalities"
        )
    return GroupSpec.model_validate({**spec.model_dump(), "sfreq": float(max_rate), "h_freq": h_freq})


def group_specs(groups: list[str], max_rate: float | None = None) -> dict[str, GroupSpec]:
    """Each of ``groups``' preprocessing (``datasets/modalities/psg.yaml``), capped at ``max_rate`` Hz when
    given (:func:`capped_spec`); ``ValueError`` for a cap that is not positive or a band that cannot fit."""
    specs = load_vocabulary().groups
    if max_rate is None:
        return {group: specs[group] for group in groups}
    if not max_rate > 0:
        raise ValueError(f"--max-rate: expected a rate in Hz above 0, got {max_rate:g}")
    return {group: capped_spec(group, specs[group], float(max_rate)) for group in groups}


@dataclass
class ModalWindows:
    """One recording's windows per modality group, on shared epochs.

    Attributes:
        windows: group -> ``(w, c_g, T_g)`` float32.
        labels: ``(w,)`` stage labels; epochs: ``(w,)`` grid epoch of each window.
        channels: group -> ``{"channels", "types", "units", "native_sfreqs"}`` of its windows.
        missing: group -> why the recording has no windows of it.
        left_out: ``[{"channel", "group", "problem", "detail"}]`` flat / saturated / out-of-range channels.
        upsampled: channels resampled above their recorded rate (card ``allow_upsampling``).
        invalid: group -> ``(w,)`` bool, windows whose signal leaves the group's valid range (oximetry:
            SpO2 outside 50-100 %, or 0 for a sensor off); only groups with a ``valid_range``.
        counts: dropped epochs by reason (as :func:`~.preprocess.make_windows`).
    """

    windows: dict[str, np.ndarray]
    labels: np.ndarray
    epochs: np.ndarray
    channels: dict[str, dict[str, list]]
    missing: dict[str, str]
    left_out: list[dict[str, str]]
    upsampled: list[str]
    invalid: dict[str, np.ndarray]
    counts: Counter


def native_rate(recording: Recording, index: int) -> float:
    """Channel ``index``'s rate as recorded (``native_sfreqs`` when the reader knows it, else ``sfreqs``)."""
    rates = recording.native_sfreqs
    rate = rates[index] if index < len(rates) else float("nan")
    return float(rate) if np.isfinite(rate) else float(recording.sfreqs[index])


def _find_label(recording: Recording, label: str, card_aliases: dict[str, list[str]]) -> int | None:
    """Index of the recording channel named ``label`` (or one of its card aliases; exactly one), else None."""
    wanted = {normalize_label(name) for name in [label, *card_aliases.get(label, [])]}
    found = [i for i, name in enumerate(recording.channel_names) if normalize_label(name) in wanted]
    return found[0] if len(found) == 1 else None


def select_channels(
    recording: Recording, group: str, asked: list[str] | None, card_aliases: dict[str, list[str]]
) -> list[int]:
    """Indices of ``group``'s channels in ``recording``: the ``asked`` labels (``UnknownChannelError``
    naming the file, the label, the group's known aliases and the file's channels when one is absent
    or of another type), else every channel of the group's types."""
    vocabulary = load_vocabulary()
    types = vocabulary.groups[group].types
    if asked is None:
        return [i for i, kind in enumerate(recording.channel_types) if kind in types]
    indices = []
    for label in asked:
        index = _find_label(recording, label, card_aliases)
        if index is None or recording.channel_types[index] not in types:
            problem = "is not in the file" if index is None else f"is of type {recording.channel_types[index]}"
            raise UnknownChannelError(
                f"{recording.sources[0]}: channel '{label}' asked for modality {group} {problem}; known {group} "
                f"aliases: {', '.join(vocabulary.aliases_of_group(group))}; the file's channels: "
                f"{', '.join(recording.channel_names)}"
            )
        indices.append(index)
    return indices


def check_rates(
    recording: Recording, group: str, spec: GroupSpec, indices: list[int], allow_upsampling: bool
) -> list[str]:
    """Channels of ``indices`` recorded below the group's rate: an error naming the channel, its rate and
    the asked rate, unless ``allow_upsampling`` (then returned: the upsampled channels)."""
    slow = [i for i in indices if native_rate(recording, i) < spec.sfreq - 1e-9]
    if slow and not allow_upsampling:
        i = slow[0]
        raise ValueError(
            f"{recording.sources[0]}: channel '{recording.channel_names[i]}' is recorded at "
            f"{native_rate(recording, i):g} Hz, below the {spec.sfreq:g} Hz asked for modality {group}; "
            "leave the group out of --modalities (the dataset card does not allow upsampling)"
        )
    return [recording.channel_names[i] for i in slow]


def usable_channels(recording: Recording, group: str, spec: GroupSpec, indices: list[int]) -> tuple[list[int], list]:
    """``indices`` without the flat / saturated / out-of-range channels, and those left out (dicts)."""
    kept, left_out = [], []
    for i in indices:
        limits = recording.channel_limits[i] if i < len(recording.channel_limits) else None
        unit = recording.channel_units[i] if i < len(recording.channel_units) else "uV"
        quality = assess_channel(recording.channel_names[i], recording.signals[i], unit, limits, spec.valid_range)
        if quality.usable:
            kept.append(i)
        else:
            left_out.append(
                {
                    "channel": recording.channel_names[i],
                    "group": group,
                    "problem": quality.problem,
                    "detail": quality.detail,
                }
            )
    return kept, left_out


def card_aliases(card: DatasetCard | None) -> dict[str, list[str]]:
    """Card channel name -> its aliases (DREAMS ``central`` -> C3-A1, CZ-A1)."""
    return {channel.name: list(channel.aliases) for channel in card.channels} if card else {}


@dataclass
class GroupPicks:
    """Which channels (indices into the recording's) each asked group uses, and what was not used."""

    picks: dict[str, list[int]]
    missing: dict[str, str]
    left_out: list[dict[str, str]]
    upsampled: list[str]


def pick_groups(
    recording: Recording,
    asked: dict[str, list[str] | None],
    brain: list[str],
    card: DatasetCard | None,
    specs: dict[str, GroupSpec] | None = None,
) -> GroupPicks:
    """Channels of each ``asked`` group (``brain``: the EEG pick unless labels are asked for), their
    rate check (:func:`check_rates`, at the group's rate in ``specs``, default psg.yaml's) and quality
    check (:func:`usable_channels`)."""
    specs, aliases = specs or group_specs(list(asked)), card_aliases(card)
    result = GroupPicks({}, {}, [], [])
    for group, labels in asked.items():
        spec = specs[group]
        wanted = list(brain) if labels is None and group == "brain" else labels
        indices = select_channels(recording, group, wanted, aliases)
        if not indices:
            result.missing[group] = f"no {'/'.join(spec.types)} channel in the file"
            continue
        result.upsampled += check_rates(recording, group, spec, indices, bool(card and card.allow_upsampling))
        indices, bad = usable_channels(recording, group, spec, indices)
        result.left_out += bad
        if indices:
            result.picks[group] = indices
        else:
            result.missing[group] = (
                "every channel left out (" + ", ".join(f"{b['channel']}: {b['problem']}" for b in bad) + ")"
            )
    return result


def invalid_epochs(
    recording: Recording, indices: list[int], valid_range: tuple[float, float], epochs: np.ndarray
) -> np.ndarray:
    """``(w,)`` bool: grid ``epochs`` where a channel of ``indices`` (as read) leaves ``valid_range`` (SpO2
    50-100 %: 0 is a sensor off) or is not finite."""
    invalid = np.zeros(epochs.size, dtype=bool)
    if not epochs.size:
        return invalid
    for i, offset in zip(indices, grid_offsets(recording, [recording.sfreqs[j] for j in indices])):
        per_epoch = int(round(EPOCH_SECONDS * recording.sfreqs[i]))
        stop = int(epochs.max()) + 1
        grid = np.asarray(recording.signals[i][offset : offset + stop * per_epoch]).reshape(stop, per_epoch)[epochs]
        with np.errstate(invalid="ignore"):
            invalid |= ((grid < valid_range[0]) | (grid > valid_range[1]) | ~np.isfinite(grid)).any(axis=1)
    return invalid


def group_info(recording: Recording, indices: list[int]) -> dict[str, list]:
    """What the manifest records of a group's channels in one recording."""
    return {
        "channels": [recording.channel_names[i] for i in indices],
        "types": [recording.channel_types[i] for i in indices],
        "units": [recording.channel_units[i] for i in indices],
        "native_sfreqs": [native_rate(recording, i) for i in indices],
        "envelopes": [load_vocabulary().is_envelope(recording.channel_names[i]) for i in indices],
    }


def group_span(
    recording: Recording, indices: list[int], spec: GroupSpec, span: slice
) -> tuple[np.ndarray, np.ndarray, int]:
    """:func:`span_windows` of one group's channels ``indices`` at the group's rate and band, except that a
    channel the vocabulary lists under ``envelopes`` (a file's own EMG RMS envelope) takes no band-pass:
    ``(windows (span epochs, c, T) in the order of indices, nan (span epochs,), resampled channels)``."""
    vocabulary = load_vocabulary()
    envelope = np.array([vocabulary.is_envelope(recording.channel_names[i]) for i in indices], dtype=bool)
    parts, nan, n_resampled = [], np.zeros(span.stop - span.start, dtype=bool), 0
    for subset, band in ((~envelope, (spec.l_freq, spec.h_freq)), (envelope, (None, None))):
        if not subset.any():
            continue
        chosen = [indices[j] for j in np.flatnonzero(subset)]
        windows, nan_part, resampled = span_windows(
            recording,
            [recording.signals[i] for i in chosen],
            [recording.sfreqs[i] for i in chosen],
            span,
            spec.sfreq,
            band,
        )
        parts.append(windows)
        nan |= nan_part
        n_resampled += resampled
    order = np.argsort(np.r_[np.flatnonzero(~envelope), np.flatnonzero(envelope)], kind="stable")
    return np.concatenate(parts, axis=1)[:, order], nan, n_resampled


def modal_windows(
    recording: Recording,
    asked: dict[str, list[str] | None],
    options: PrepareOptions,
    card: DatasetCard | None,
    max_rate: float | None = None,
) -> ModalWindows:
    """Windows of every asked group of ``recording`` (read with every signal) on shared epochs: an epoch
    is kept when scored, not wake-cropped (``options``), finite in every group and not flat in a
    window-scaled group (brain, eyes); each group at its rate, capped at ``max_rate`` (:func:`group_specs`).
    ``ValueError`` (see :func:`pick_groups`) names file and channel."""
    groups = group_specs(list(asked), max_rate)
    chosen = pick_groups(recording, asked, options.channels, card, groups)
    used = sorted({i for indices in chosen.picks.values() for i in indices})
    plan = plan_epochs(
        recording, [recording.signals[i] for i in used], [recording.sfreqs[i] for i in used], options.crop_wake_minutes
    )
    counts, keep = Counter(plan.counts), plan.keep
    spans, nan = {}, np.zeros(keep.size, dtype=bool)
    for group, indices in chosen.picks.items():
        spans[group], nan_group, n_resampled = group_span(recording, indices, groups[group], plan.span)
        counts["resampled_channels"] += n_resampled
        nan |= nan_group
    counts["nan"] += int((nan & keep).sum())
    keep &= ~nan & bool(spans)  # no group: no windows
    stds, flat = {}, np.zeros(keep.size, dtype=bool)
    for group, windows in spans.items():
        flat_group, stds[group] = flat_windows(windows, keep, options.flat_ratio)
        flat |= flat_group if groups[group].scaling in WINDOW_SCALED else False
    counts["flat"] += int((flat & keep).sum())
    keep &= ~flat
    local = np.flatnonzero(keep)
    epochs = (local + plan.span.start).astype(np.int64)
    windows = {
        group: scale_windows(
            spans[group][local], stds[group][local], groups[group].scaling, groups[group].offset, groups[group].scale
        ).astype(np.float32)
        for group in spans
    }
    invalid = {
        group: invalid_epochs(recording, indices, groups[group].valid_range, epochs)
        for group, indices in chosen.picks.items()
        if groups[group].valid_range is not None
    }
    return ModalWindows(
        windows,
        plan.labels[epochs].astype(np.int64),
        epochs,
        {group: group_info(recording, indices) for group, indices in chosen.picks.items()},
        chosen.missing,
        chosen.left_out,
        chosen.upsampled,
        invalid,
        counts,
    )
