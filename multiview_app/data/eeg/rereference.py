"""Bipolar re-referencing of referential EEG channels: ``F3-C3 = (F3-M2) - (C3-M2)`` (the shared
mastoid cancels), so pretraining on PhysioNet-2018-format nights also sees derivations close to
Sleep-EDF's Fpz-Cz / Pz-Oz. Used by the ``channels`` view policy's ``bipolar`` option."""

from __future__ import annotations

import torch

from .electrodes import split_derivation


def check_bipolar_pair(name: str, pair: tuple[str, str] | list[str]) -> None:
    """``ValueError`` naming ``views.options.bipolar.<name>`` unless ``pair`` is two referential channels
    with one shared reference (``[A-R, B-R]``) and ``name`` is ``A-B`` (the derivation's electrodes, as the
    encoder's channel handling reads them)."""
    where = f"views.options.bipolar.{name}"
    if len(pair) != 2:
        raise ValueError(f"{where}: expected two referential channels [ACTIVE-REF, ACTIVE-REF], got {list(pair)}")
    try:
        (first, first_ref), (second, second_ref) = split_derivation(pair[0]), split_derivation(pair[1])
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None
    if first_ref is None or second_ref is None:
        missing = pair[0] if first_ref is None else pair[1]
        raise ValueError(
            f"{where}: channel {missing!r} names no reference; expected 'ACTIVE-REF' (e.g. 'C3-M2') "
            f"so that the shared reference cancels"
        )
    if first_ref.lower() != second_ref.lower():
        raise ValueError(
            f"{where}: channels {pair[0]!r} and {pair[1]!r} have different references "
            f"({first_ref} vs {second_ref}); a bipolar derivation needs one shared reference, e.g. "
            f"[{first}-{first_ref}, <electrode>-{first_ref}]"
        )
    expected = f"{first}-{second}"
    if name.strip().lower() != expected.lower():
        raise ValueError(
            f"{where}: the derivation of {pair[0]!r} minus {pair[1]!r} is {expected!r}; name it {expected!r}"
        )


def bipolar_derivations(x: torch.Tensor, pairs: list[tuple[int, int]]) -> torch.Tensor:
    """``x (n, C, T)`` referential channels -> ``(n, len(pairs), T)``: ``x[:, a] - x[:, b]`` per pair ``(a, b)``."""
    return torch.stack([x[:, a] - x[:, b] for a, b in pairs], dim=1)


__all__ = ["bipolar_derivations", "check_bipolar_pair"]
