"""Electrode positions of EEG derivations, from mne's template 10-05 montage.

A derivation name is ``ACTIVE-REFERENCE`` (``C3-M2``, ``Fpz-Cz``, ``EEG Pz-Oz``, ``C3-A1``) or a single
electrode (``Cz``: reference unknown). Positions are the template head's coordinates in metres
(mne ``colin27_1005``, the same coordinates as the older name ``standard_1005``: 343 electrodes of the
10-05 system plus the mastoids M1/M2 and the ear lobes A1/A2). Used by the EEG encoder's montage-aware
channel embedding (``models/eeg.py``, ``channel_mode: montage``), so a derivation never seen in
pretraining still gets an embedding from where its electrodes sit.

A channel name that stands for one of several derivations (the DREAMS reader's ``central``: each excerpt's
C3-A1 or CZ-A1, named per recording but not per window in a cache) is a group of those derivations
(:func:`derivation_members`), whose features the montage embedding averages as for ``A+B`` views.
"""

from __future__ import annotations

import warnings
from functools import lru_cache

import numpy as np

from .contract import derivation

#: mne montage names tried in order (colin27_1005 replaces standard_1005 from mne 1.13).
MONTAGES = ("colin27_1005", "standard_1005")


@lru_cache(maxsize=1)
def electrode_positions() -> dict[str, np.ndarray]:
    """Lower-case electrode name -> ``(3,)`` position in metres (template 10-05 montage)."""
    import mne

    for name in MONTAGES:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)  # standard_1005's deprecation notice
                montage = mne.channels.make_standard_montage(name)
        except ValueError:
            continue
        positions = montage.get_positions()["ch_pos"]
        return {str(k).lower(): np.asarray(v, dtype=np.float64) for k, v in positions.items()}
    raise RuntimeError(f"mne has none of the montages {', '.join(MONTAGES)} (mne >= 1.6 ships standard_1005)")


def split_derivation(name: str) -> tuple[str, str | None]:
    """``"EEG C3-M2"`` -> ``("C3", "M2")``; ``"Cz"`` -> ``("Cz", None)`` (no reference in the name). Parsed by
    the input contract's :func:`~multiview_app.data.eeg.contract.derivation`, then held to one electrode on
    each side (``ValueError`` otherwise)."""
    parsed = derivation(name)
    active, reference = str(parsed["active"]), parsed["reference"]
    if not active or reference == "" or (reference is not None and "-" in reference):
        raise ValueError(f"EEG derivation {name!r}: expected 'ACTIVE-REFERENCE' (e.g. 'C3-M2') or one electrode name")
    return active, reference


def derivation_members(view_name: str) -> list[str]:
    """The derivations whose features a view's montage embedding averages: ``"C3-M2"`` -> ``["C3-M2"]``,
    an averaged group ``"A+B"`` -> ``["A", "B"]``, and the DREAMS channel ``central`` -> its card's
    aliases (``["C3-A1", "CZ-A1"]``: a cache names one channel for excerpts of either derivation)."""
    from .dreams import CENTRAL, known_derivations

    members: list[str] = []
    for part in view_name.split("+"):
        members += known_derivations() if part.strip().lower() == CENTRAL else [part]
    return members


def derivation_positions(name: str) -> tuple[np.ndarray, np.ndarray | None]:
    """Positions ``(3,)`` of a derivation's active electrode and of its reference (None when the name has
    no reference). ``ValueError`` naming the derivation and the electrode that the montage lacks."""
    positions = electrode_positions()
    active, reference = split_derivation(name)
    out: list[np.ndarray | None] = []
    for electrode in (active, reference):
        if electrode is None:
            out.append(None)
            continue
        try:
            out.append(positions[electrode.lower()])
        except KeyError:
            raise ValueError(
                f"EEG derivation {name!r}: electrode {electrode!r} is not in the 10-05 montage "
                f"({', '.join(MONTAGES)}); expected a 10-05 name such as C3, Fpz, M2 or A1"
            ) from None
    return out[0], out[1]  # type: ignore[return-value]


__all__ = ["MONTAGES", "derivation_members", "derivation_positions", "electrode_positions", "split_derivation"]
