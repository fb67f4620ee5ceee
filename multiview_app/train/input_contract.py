"""A run's input contract (``input_contract.json``): written when a run starts, checked on resume and
before features are extracted from other data (``mvapp export`` / ``mvapp eval`` on another cache).

The contract itself is the data adapter's (``adapter.input_contract(encoder config, view names)``;
``eeg_windows``: channels and derivations, rate, band-pass, units, window, scaling; see
``data/eeg/contract.py``); adapters without one (images, text) have none and nothing is checked.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..config import Config
from ..fileio import atomic_write_json

CONTRACT_FILE = "input_contract.json"
ACCEPT_HINT = "pass --accept-input-differences to go on with these differences (recorded in the output)"


def eval_view_names(adapter: Any, policy: Any) -> list[str]:
    """Names of the eval views the encoder sees (channel groups ``A+B`` of a stacked EEG policy)."""
    groups = getattr(policy, "eval_groups", None)
    if groups is not None:
        return ["+".join(group) for group in groups()]
    return list(getattr(adapter, "channel_names", []))


def run_input_contract(cfg: Config, adapter: Any, policy: Any) -> dict[str, Any] | None:
    """The contract of the encoder of ``adapter``'s modality trained under ``cfg`` (None: the adapter has none);
    for an adapter of several modalities (``modality_contracts``, PSG modalities as views), one per modality,
    each checked against its encoder (:func:`check_modality_encoders`)."""
    per_modality = getattr(adapter, "modality_contracts", None)
    if per_modality is not None:
        contracts = per_modality()
        check_modality_encoders(dict(cfg.model.encoders), contracts)
        return {"modalities": contracts}
    make = getattr(adapter, "input_contract", None)
    encoder = cfg.model.encoders.get(getattr(adapter, "modality", ""))
    if make is None or encoder is None:
        return None
    contract = make(dict(encoder), eval_view_names(adapter, policy))
    check_encoder_input(getattr(adapter, "modality", ""), dict(encoder), contract)
    return contract


def check_encoder_input(modality: str, encoder: dict[str, Any], contract: dict[str, Any]) -> None:
    """An encoder class built for one input (e.g. braindecode's: a rate and a window) refuses a contract it
    cannot read through its classmethod ``check_input_contract(options, contract)`` (one ``ValueError``)."""
    from ..models.encoders import ENCODERS, encoder_key

    key = encoder_key(modality, str(encoder.get("name")))
    check = getattr(ENCODERS.get(key), "check_input_contract", None) if key in ENCODERS else None
    if check is not None:
        check({k: v for k, v in encoder.items() if k != "name"}, contract)


def check_modality_encoders(encoders: dict[str, Any], contracts: dict[str, dict[str, Any]]) -> None:
    """Every modality of ``contracts`` has an encoder in ``encoders`` (``model.encoders``; else an error listing
    the registered encoders) whose rate and channel count, where it declares them
    (:func:`~multiview_app.models.encoders.encoder_input`), fit the modality's input; else an error naming both."""
    from ..models.encoders import available_encoders, encoder_input, encoder_key

    for modality, contract in contracts.items():
        spec = encoders.get(modality)
        if spec is None:
            raise ValueError(
                f"model.encoders: modality '{modality}' of the data ({', '.join(contract['groups'])}: "
                f"{len(contract['channels'])} channels at {contract['sfreq']:g} Hz) has no encoder; give "
                f"model.encoders.{modality}.name, one of the registered encoders: {', '.join(available_encoders())}"
            )
        key = encoder_key(modality, str(spec.get("name")))
        takes = encoder_input(key, {k: v for k, v in spec.items() if k != "name"})
        rate, channels = takes["sfreq"], takes["in_channels"]
        rate_differs = rate is not None and abs(float(rate) - float(contract["sfreq"])) > 1e-6
        if rate_differs or (channels is not None and int(channels) != contract["in_channels"]):
            takes_text = f"{channels if channels is not None else 'any number of'} channel(s) at " + (
                f"{rate:g} Hz" if rate is not None else "any rate"
            )
            has = (
                f"{contract['in_channels']} channel(s) ({', '.join(contract['channels'])}) at {contract['sfreq']:g} Hz"
            )
            raise ValueError(
                f"model.encoders.{modality}: encoder {key} takes {takes_text}, but modality '{modality}' of "
                f"{contract['source_cache']} has {has}; set model.encoders.{modality}.in_channels / sfreq to the data's"
            )


def write_run_contract(run_dir: str | Path, cfg: Config, adapter: Any, policy: Any) -> Path | None:
    """Write ``run_dir/input_contract.json`` when the adapter has a contract; returns its path."""
    contract = run_input_contract(cfg, adapter, policy)
    if contract is None:
        return None
    return atomic_write_json(Path(run_dir) / CONTRACT_FILE, contract)


def read_run_contract(run_dir: str | Path) -> dict[str, Any] | None:
    """``run_dir/input_contract.json`` as a dict (None when the run has none: not EEG, or older than it)."""
    path = Path(run_dir) / CONTRACT_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: corrupt input contract ({err})") from None


def check_run_input(
    run_dir: str | Path, adapter: Any, *, accept: bool = False, accept_hint: str = ACCEPT_HINT
) -> list[str]:
    """Check ``adapter``'s data against the run's recorded contract (see :func:`write_run_contract`).

    Raises the adapter's ``InputContractError`` naming every differing field unless ``accept``; returns
    the lines reporting every difference after one heading line naming the run and the cache (empty when
    the data match, the run has no contract, or the adapter has no contract check)."""
    contract = read_run_contract(run_dir)
    check = getattr(adapter, "check_input_contract", None)
    if contract is None or check is None:
        return []
    return check(contract, whose=f"run {run_dir} ({CONTRACT_FILE})", accept=accept, accept_hint=accept_hint)


def format_input_differences(lines: list[str]) -> str:
    """One note of :func:`check_run_input`'s lines: the heading, then each difference on its own
    indented line (the heading is not repeated per difference)."""
    return "\n  ".join(lines)


__all__ = [
    "ACCEPT_HINT",
    "CONTRACT_FILE",
    "check_modality_encoders",
    "check_run_input",
    "eval_view_names",
    "format_input_differences",
    "read_run_contract",
    "run_input_contract",
    "write_run_contract",
]
