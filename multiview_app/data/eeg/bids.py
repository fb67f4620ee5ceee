"""BIDS route: ``sub-*/[ses-*/]eeg/*_eeg.{edf,bdf}`` with ``*_events.tsv`` (onset, duration, trial_type = a
stage or an event) and ``*_channels.tsv`` (types), read with mne-bids into the generic reader (:mod:`.generic`).

mne-bids finds the recordings and parses their sidecars (``channels.tsv`` types, ``events.tsv`` rows as
annotations); the samples are read by :func:`.generic.read_psg` so units, channel quality, stage maps and
events follow the same rules as for a plain EDF::

    for path in find_bids_recordings(root):
        recording, report = read_bids(path, stage_map="aasm")
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .generic import Annotation, ReadReport, StageSource, read_psg
from .recording import Recording
from .signals import SIGNAL_TYPES
from .stage_maps import DEFAULT_STAGE_MAP, StageMap

EXTENSIONS = (".edf", ".bdf")
"""Data files of the BIDS route (EDF / BDF: the formats the generic reader reads)."""


def find_bids_recordings(root: Path) -> list[Any]:
    """Every ``*_eeg.edf`` / ``*_eeg.bdf`` of the BIDS dataset ``root`` as an ``mne_bids.BIDSPath`` (sorted);
    ``ValueError`` naming ``root`` when it is not a BIDS dataset."""
    from mne_bids import find_matching_paths

    if not (root / "dataset_description.json").exists():
        raise ValueError(f"--source {root}: not a BIDS dataset (no dataset_description.json)")
    paths = find_matching_paths(root, datatypes="eeg", suffixes="eeg", extensions=list(EXTENSIONS))
    return sorted(paths, key=lambda p: str(p.fpath))


def bids_sidecars(bids_path: Any) -> tuple[dict[str, str], list[Annotation]]:
    """``(label -> MNE type, events.tsv rows as (onset s, duration s, trial_type))`` of one recording, as
    mne-bids reads them."""
    from mne_bids import read_raw_bids

    try:
        raw = read_raw_bids(bids_path, verbose="error")
    except Exception as err:  # mne-bids raises many types on malformed datasets
        raise ValueError(f"{bids_path.fpath}: mne-bids cannot read it ({err})") from None
    types = {name: kind for name, kind in zip(raw.ch_names, raw.get_channel_types()) if kind in SIGNAL_TYPES}
    annotations = raw.annotations
    rows = [(float(a["onset"]), float(a["duration"]), str(a["description"])) for a in annotations]
    return types, rows


def read_bids(
    bids_path: Any, stage_map: str | Path | StageMap = DEFAULT_STAGE_MAP, channels: list[str] | None = None
) -> tuple[Recording, ReadReport]:
    """One BIDS recording -> ``(Recording, ReadReport)``: stages and events from ``events.tsv`` (through
    ``stage_map``), channel types from ``channels.tsv``; subject ``sub-<label>``."""
    types, rows = bids_sidecars(bids_path)
    return read_psg(
        bids_path.fpath,
        stages=StageSource("annotations"),
        stage_map=stage_map,
        channels=channels,
        types=types,
        annotations=rows,
        subject=f"sub-{bids_path.subject}",
    )


def events_tsv(bids_path: Any) -> Path:
    """The ``events.tsv`` beside a recording (its checksum goes into the cache with the data file)."""
    return bids_path.copy().update(suffix="events", extension=".tsv").fpath
