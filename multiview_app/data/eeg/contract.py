"""The EEG input contract: what an encoder trained on a prepared window cache expects of its input.

An :class:`EEGInputContract` names the channels (and their derivations: active and reference
electrode), sampling rate, band-pass, units, window length and scaling of the windows an encoder was
trained on, plus how the encoder treats channel names (``channel_mode``). It is taken from the cache
manifest and the run's config (:func:`contract_for`), written next to a run (``input_contract.json``)
and into an exported encoder's ``config.json``.

:func:`compare_input` lists how another cache differs, field by field, with what would be done about
each difference; :func:`check_input` refuses blocking differences (rate, band, units, window, scaling;
channel groups of a stacked encoder) in one message naming every differing field and the
``mvapp data prepare`` options that would give a matching cache. Channels that differ are not an error
for per-channel encoders (cross-dataset transfer is a use of this project): each is reported with how
the encoder handles it; a missing channel gets no view (never a zero-filled one).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

CONTRACT_FORMAT = "multiview_app.eeg_input_contract/1"
UNKNOWN = "unknown"
"""Value of a field the cache manifest does not record (never equal to a recorded value; compared as a note)."""
SOURCE_UNITS = "uV"
"""Units of the signals before scaling: every reader converts to microvolts (data/eeg/recording.py)."""
FILTER = "zero-phase 4th-order Butterworth (scipy sosfiltfilt)"
"""The band-pass of ``mvapp data prepare`` (data/eeg/preprocess.py:bandpass)."""
SCALING_TEXT = {
    "window": "z-score per window and channel (unitless)",
    "recording": "per recording and channel: minus the median, divided by IQR / 1.349 (unitless)",
    "microvolts": "per recording and channel: minus the median, in units of 25 uV (absolute amplitude kept)",
}


class InputContractError(ValueError):
    """A cache does not fit an encoder's input contract (the message names every differing field)."""


def derivation(channel: str) -> dict[str, str | None]:
    """``"EEG Fpz-Cz"`` -> ``{"name": "EEG Fpz-Cz", "active": "Fpz", "reference": "Cz"}``; a name without
    ``-`` (``"C3"``) has ``reference`` None (referenced as recorded)."""
    name = channel.strip()
    bare = name[4:].strip() if name.upper().startswith("EEG ") else name
    active, sep, reference = bare.partition("-")
    return {"name": channel, "active": active.strip(), "reference": reference.strip() if sep else None}


def _normalized(channel: str) -> str:
    item = derivation(channel)
    return f"{item['active']}-{item['reference']}".lower() if item["reference"] else str(item["active"]).lower()


@dataclass
class EEGInputContract:
    """What an EEG encoder's input must be: windows ``(n, len(channels), window_samples)`` float32.

    ``views``: the eval views' names in order (one per channel, or ``A+B`` channel groups of a
    stacked encoder); ``l_freq`` / ``h_freq`` None = no high / low-pass; a field the cache did not
    record holds ``"unknown"``.
    """

    dataset: str
    channels: list[str]
    derivations: list[dict[str, str | None]]
    views: list[str]
    sfreq: float | str
    window_seconds: float | str
    window_samples: int | str
    l_freq: float | None | str
    h_freq: float | None | str
    scaling: str
    units: str
    filter: str = FILTER
    channel_mode: str = "agnostic"
    channel_vocab: list[str] = field(default_factory=list)
    unknown_rate: float = 0.0
    in_channels: int = 1
    source_cache: str | None = None
    format: str = CONTRACT_FORMAT

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "contract") -> EEGInputContract:
        if data.get("format") != CONTRACT_FORMAT:
            raise ValueError(f"{where}: format {data.get('format')!r}, expected {CONTRACT_FORMAT!r}")
        names = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"{where}: unknown keys {unknown}")
        try:
            return cls(**data)
        except TypeError as err:
            raise ValueError(f"{where}: {err}") from None

    def describe(self) -> list[str]:
        """Lines of a model card: one per field."""
        band = _band_text(self.l_freq, self.h_freq)
        rows = [
            f"channels ({len(self.channels)}, in this order): "
            + ", ".join(
                f"{d['name']} ({d['active']} - {d['reference'] or 'recording reference'})" for d in self.derivations
            ),
            f"views of the encoder: {', '.join(self.views)}",
            f"sampling rate: {_hz(self.sfreq)}",
            f"band-pass: {band}" + (" (not recorded by the cache)" if band == UNKNOWN else f" ({self.filter})"),
            f"units: {self.units}",
            f"window: {self.window_seconds} s = {self.window_samples} samples",
            f"scaling: {self.scaling} ({SCALING_TEXT.get(self.scaling, 'not recorded by the cache')})",
            f"channel names: {self.channel_mode}"
            + (
                f" (learned embedding of {', '.join(self.channel_vocab)}; other names use the 'unknown' row, "
                f"trained with unknown_rate {self.unknown_rate:g})"
                if self.channel_mode == "embedding"
                else " (embedding computed from each derivation's electrode positions, 10-05 montage)"
                if self.channel_mode == "montage"
                else " (one network shared by every channel; names are not used)"
            ),
        ]
        if self.in_channels > 1:
            rows.append(f"input channels per view: {self.in_channels} (stacked channel groups, in the order above)")
        return rows


def _hz(value: Any) -> str:
    return f"{value:g} Hz" if isinstance(value, (int, float)) else str(value)


def _band_text(low: Any, high: Any) -> str:
    if UNKNOWN in (low, high):
        return UNKNOWN
    if low is None and high is None:
        return "none"
    return f"{'DC' if low is None else f'{low:g}'}-{'Nyquist' if high is None else f'{high:g}'} Hz"


def cache_facts(manifest: dict[str, Any]) -> dict[str, Any]:
    """Rate, window, band, scaling and units of a cache manifest (``"unknown"`` where it does not say)."""
    options = manifest.get("options") or {}
    sfreq = manifest.get("sfreq", options.get("sfreq", UNKNOWN))
    window_seconds = manifest.get("window_seconds", UNKNOWN)
    samples: int | str = UNKNOWN
    if isinstance(sfreq, (int, float)) and isinstance(window_seconds, (int, float)):
        samples = int(round(float(sfreq) * float(window_seconds)))
    return {
        "sfreq": float(sfreq) if isinstance(sfreq, (int, float)) else UNKNOWN,
        "window_seconds": float(window_seconds) if isinstance(window_seconds, (int, float)) else UNKNOWN,
        "window_samples": samples,
        "l_freq": options.get("l_freq", UNKNOWN),
        "h_freq": options.get("h_freq", UNKNOWN),
        "scaling": options.get("scaling", UNKNOWN),
        "units": manifest.get("units", SOURCE_UNITS),
    }


def contract_for(
    manifest: dict[str, Any],
    channels: list[str],
    views: list[str],
    encoder: dict[str, Any],
    cache_dir: str | Path | None = None,
) -> EEGInputContract:
    """The contract of an encoder (``encoder``: its config, ``{"name": "conv", "channel_mode": ...}``)
    trained on ``channels`` of the cache of ``manifest``, seen as ``views``."""
    facts = cache_facts(manifest)
    mode = str(encoder.get("channel_mode", "embedding" if encoder.get("name") == "conv" else "agnostic"))
    vocab = encoder.get("channel_vocab")
    if vocab is None and mode == "embedding":
        from .stages import PHYSIONET2018_EEG  # the conv encoder's default vocabulary

        vocab = list(PHYSIONET2018_EEG)
    return EEGInputContract(
        dataset=str(manifest.get("dataset", UNKNOWN)),
        channels=list(channels),
        derivations=[derivation(c) for c in channels],
        views=list(views),
        units=f"{facts['units']} before scaling",
        **{k: facts[k] for k in ("sfreq", "window_seconds", "window_samples", "l_freq", "h_freq", "scaling")},
        channel_mode=mode,
        channel_vocab=[str(c) for c in vocab or []] if mode == "embedding" else [],
        unknown_rate=float(encoder.get("unknown_rate", 0.0)),
        in_channels=int(encoder.get("in_channels", 1)),
        source_cache=None if cache_dir is None else str(cache_dir),
    )


@dataclass
class Difference:
    """One field where a cache differs from a contract, and what would be done about it."""

    field: str
    contract: Any
    cache: Any
    action: str
    blocking: bool

    def text(self) -> str:
        return f"{self.field}: encoder {self.contract}, cache {self.cache} -> {self.action}"


def _prepare_flags(contract: EEGInputContract) -> str:
    """The ``mvapp data prepare`` options that reproduce the contract's preprocessing."""
    flags = []
    if isinstance(contract.sfreq, float):
        flags.append(f"--sfreq {contract.sfreq:g}")
    for flag, value in (("--l-freq", contract.l_freq), ("--h-freq", contract.h_freq)):
        if value != UNKNOWN:
            flags.append(f"{flag} {'none' if value is None else f'{value:g}'}")
    if contract.scaling != UNKNOWN:
        flags.append(f"--scaling {contract.scaling}")
    flags.append(f"--channels {' '.join(contract.channels)}")
    return " ".join(flags)


def _band_action(contract: EEGInputContract, low: Any, high: Any) -> str:
    """Re-filtering to the contract's band works when the cache kept every frequency of it."""
    wanted = _band_text(contract.l_freq, contract.h_freq)
    lost = []
    if low is not None and (contract.l_freq is None or low > contract.l_freq):
        lost.append(f"{contract.l_freq or 0:g}-{low:g} Hz")
    if high is not None and (contract.h_freq is None or high < contract.h_freq):
        lost.append(f"{high:g}-{'Nyquist' if contract.h_freq is None else f'{contract.h_freq:g}'} Hz")
    if lost:
        return (
            f"would band-pass to {wanted} from the source recordings: the cache has lost {', '.join(lost)} "
            "(a filter on the cached windows cannot restore it)"
        )
    return f"would band-pass to {wanted} ({FILTER})"


def _differs(ours: Any, theirs: Any) -> bool:
    """Unequal, with floats equal to 1e-9 (rates and lengths from JSON)."""
    if isinstance(ours, (int, float)) and isinstance(theirs, (int, float)):
        return abs(float(ours) - float(theirs)) > 1e-9
    return ours != theirs


def compare_input(contract: EEGInputContract, manifest: dict[str, Any], channels: list[str]) -> list[Difference]:
    """Every difference between ``contract`` and ``channels`` of the cache of ``manifest`` (empty: they match).

    Blocking: rate, window, band, units and scaling (the encoder would see other signals), and any channel
    difference of a stacked encoder (``in_channels > 1``: its groups are positional). A field unknown on one
    side only is a non-blocking note. Channel differences of a per-channel encoder are non-blocking notes
    saying how each channel is encoded.
    """
    facts = cache_facts(manifest)
    return [
        *_timing_differences(contract, facts),
        *_signal_differences(contract, facts),
        *_channel_differences(contract, channels),
    ]


def _blocking_or_note(name: str, ours: Any, theirs: Any, blocking: Callable[[], Difference]) -> Difference:
    """A non-blocking note when ``ours`` or ``theirs`` was not recorded, else the ``blocking`` difference."""
    if UNKNOWN in (ours, theirs):
        return Difference(name, ours, theirs, "cannot be checked (not recorded); assumed equal", False)
    return blocking()


def _timing_differences(contract: EEGInputContract, facts: dict[str, Any]) -> list[Difference]:
    """Sampling rate and window length (in seconds, else in samples) of ``contract`` against the cache's ``facts``."""
    found: list[Difference] = []
    if _differs(contract.sfreq, facts["sfreq"]):
        found.append(
            _blocking_or_note(
                "sampling rate",
                contract.sfreq,
                facts["sfreq"],
                lambda: Difference(
                    "sampling rate",
                    _hz(contract.sfreq),
                    _hz(facts["sfreq"]),
                    f"would resample {facts['sfreq']:g} -> {contract.sfreq:g} Hz (polyphase)",
                    True,
                ),
            )
        )
    seconds = contract.window_seconds, facts["window_seconds"]
    if _differs(*seconds):
        found.append(
            _blocking_or_note(
                "window length",
                *seconds,
                lambda: Difference(
                    "window length",
                    f"{seconds[0]:g} s",
                    f"{seconds[1]:g} s",
                    f"would cut {seconds[0]:g}-s windows",
                    True,
                ),
            )
        )
    if (not _differs(*seconds) or UNKNOWN in seconds) and _differs(contract.window_samples, facts["window_samples"]):
        found.append(
            _blocking_or_note(
                "window samples",
                contract.window_samples,
                facts["window_samples"],
                lambda: Difference(
                    "window samples",
                    contract.window_samples,
                    facts["window_samples"],
                    "follows the sampling rate (resample)",
                    True,
                ),
            )
        )
    return found


def _signal_differences(contract: EEGInputContract, facts: dict[str, Any]) -> list[Difference]:
    """Band-pass, units and scaling of ``contract`` against the cache's ``facts``."""
    found: list[Difference] = []
    band_ours, band_theirs = (contract.l_freq, contract.h_freq), (facts["l_freq"], facts["h_freq"])
    if band_ours != band_theirs:
        ours, theirs = _band_text(*band_ours), _band_text(*band_theirs)
        found.append(
            _blocking_or_note(
                "band-pass",
                ours,
                theirs,
                lambda: Difference("band-pass", ours, theirs, _band_action(contract, *band_theirs), True),
            )
        )
    units = f"{facts['units']} before scaling"
    if _differs(contract.units, units):
        found.append(
            Difference("units", contract.units, units, f"would convert the source signals to {contract.units}", True)
        )
    if _differs(contract.scaling, facts["scaling"]):
        action = f"would re-scale: {SCALING_TEXT.get(contract.scaling, contract.scaling)}"
        found.append(
            _blocking_or_note(
                "scaling",
                contract.scaling,
                facts["scaling"],
                lambda: Difference("scaling", contract.scaling, facts["scaling"], action, True),
            )
        )
    return found


def _channel_differences(contract: EEGInputContract, channels: list[str]) -> list[Difference]:
    ours = {_normalized(c): c for c in contract.channels}
    theirs = {_normalized(c): c for c in channels}
    if list(ours) == list(theirs):
        return []
    if contract.in_channels > 1:
        return [
            Difference(
                "channels",
                contract.channels,
                list(channels),
                f"would need the same channels in the same order: the stacked encoder reads groups of "
                f"{contract.in_channels} channels by position",
                True,
            )
        ]
    vocab = {_normalized(c) for c in contract.channel_vocab}
    found = []
    for key, name in theirs.items():
        if key in ours:
            continue
        if contract.channel_mode == "agnostic":
            how = "encoded by the shared channel-agnostic network"
        elif contract.channel_mode == "montage":
            how = "encoded with an embedding computed from its electrode positions (montage mode)"
        elif key in vocab:
            how = "encoded with its learned channel embedding (in the vocabulary, not in pretraining views)"
        elif contract.unknown_rate > 0:
            how = f"encoded with the 'unknown channel' embedding (trained with unknown_rate {contract.unknown_rate:g})"
        else:
            how = "encoded with the 'unknown channel' embedding, which was never trained (unknown_rate 0)"
        found.append(Difference(f"channel {name}", "not in pretraining", "present", how, False))
    for key, name in ours.items():
        if key not in theirs:
            found.append(
                Difference(
                    f"channel {name}",
                    "pretrained on it",
                    "absent",
                    "no view for it: features of the other channels only (nothing zero-filled)",
                    False,
                )
            )
    if not found:  # same channels, other order
        found.append(
            Difference(
                "channel order",
                contract.channels,
                list(channels),
                "features follow the cache's order (per-channel encoder)",
                False,
            )
        )
    return found


def check_input(
    contract: EEGInputContract,
    manifest: dict[str, Any],
    channels: list[str],
    *,
    cache: str | Path,
    whose: str,
    accept: bool = False,
    accept_hint: str = "",
) -> list[str]:
    """Refuse a cache whose blocking fields differ from ``contract`` (:class:`InputContractError` naming
    every differing field, what would be done and the prepare options of a matching cache) unless
    ``accept``; returns the lines to report: none when nothing differs, else the heading ``input contract
    of <whose> vs cache <cache>:`` once, then one line per difference (blocking ones marked accepted)."""
    differences = compare_input(contract, manifest, channels)
    blocking = [d for d in differences if d.blocking]
    if blocking and not accept:
        notes = [d for d in differences if not d.blocking]
        raise InputContractError(
            f"cache {cache} does not match the input contract of {whose}: "
            + "; ".join(d.text() for d in blocking)
            + (f" (also: {'; '.join(d.text() for d in notes)})" if notes else "")
            + f". Prepare a matching cache from the source recordings: mvapp data prepare {manifest.get('dataset', '<dataset>')} "
            f"--source <source folder> --out <new cache> {_prepare_flags(contract)}"
            + (f"; {accept_hint}" if accept_hint else "")
        )
    if not differences:
        return []
    return [
        f"input contract of {whose} vs cache {cache}:",
        *(d.text() + (" (accepted)" if d.blocking else "") for d in differences),
    ]


__all__ = [
    "Difference",
    "EEGInputContract",
    "InputContractError",
    "check_input",
    "compare_input",
    "contract_for",
    "derivation",
]
