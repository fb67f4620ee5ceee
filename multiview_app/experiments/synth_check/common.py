"""What the generator checks share: the real-recordings folder, the DREAMS central derivation as 30-s epochs,
one synthetic subject's night, Markdown tables and the ``.md`` / ``.json`` outputs."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...data.eeg.dreams import find_excerpts, read_dreams
from ...data.eeg.recording import Recording
from ...data.eeg.signal_stats import stage_epochs
from ...data.eeg.synth import SubjectTraits, synth_night
from ...data.eeg.synth.brain import SyntheticNight
from ...fileio import atomic_write_text

REAL_PSG_ENV = "MVAPP_REAL_PSG"
"""Environment variable naming the folder of the real recordings (``dreams-spindles/``, ...)."""
SFREQ = 100.0
"""Rate (Hz) of the EEG epochs compared, as prepared windows."""


def real_folder(real_psg: Path | None, subfolder: str) -> Path:
    """``real_psg/subfolder`` (``real_psg`` default ``$MVAPP_REAL_PSG``); ``ValueError`` naming what is missing."""
    root = real_psg or (Path(os.environ[REAL_PSG_ENV]) if os.environ.get(REAL_PSG_ENV) else None)
    if root is None:
        raise ValueError(f"--real-psg DIR (or ${REAL_PSG_ENV}) is required: the folder holding {subfolder}/")
    folder = Path(root).expanduser() / subfolder
    if not folder.is_dir():
        raise FileNotFoundError(f"--real-psg: {folder} not found (expected the folder holding {subfolder}/)")
    return folder


def dreams_central(folder: Path) -> list[tuple[str, Recording, np.ndarray, np.ndarray]]:
    """Per DREAMS excerpt of ``folder``: its name, its central-derivation recording (C3-A1 / CZ-A1) and its
    scored 30-s epochs ``(e, 3000)`` uV at 100 Hz (band-passed as prepared windows, not z-scored) with labels
    ``(e,)``."""
    excerpts, _ = find_excerpts(folder)
    if not excerpts:
        raise FileNotFoundError(f"{folder}: no DREAMS excerpts (excerptN.txt) found")
    out = []
    for excerpt in excerpts:
        recording = read_dreams(excerpt, ["central"])
        epochs, labels = stage_epochs(recording.signals[0], recording.sfreqs[0], recording.epoch_labels, SFREQ)
        out.append((excerpt.name, recording, epochs, labels))
    return out


def synthetic_subject(channels: Sequence[str], seed: int, subject: int, cohort: str | None = None) -> SyntheticNight:
    """A compressed (every 4th epoch) 9-h night of ``channels`` at 100 Hz of subject ``subject``: traits
    ``default_rng([seed, subject])`` (moved to ``cohort`` with ``default_rng([seed, subject, 7])`` when
    given), night ``default_rng([seed, subject, 2])``."""
    traits = SubjectTraits.sample(np.random.default_rng([seed, subject]))
    if cohort is not None:
        traits = traits.with_cohort(cohort, np.random.default_rng([seed, subject, 7]))
    return synth_night(list(channels), 9.0, SFREQ, traits, np.random.default_rng([seed, subject, 2]), compress=4)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table of ``rows`` (cells ``str()``-ed) under ``headers``, widths padded for the console."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    bad = [row for row in cells if len(row) != len(headers)]
    if bad:
        raise ValueError(f"markdown_table: row {bad[0]} has {len(bad[0])} cells, expected {len(headers)}")
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |" for row in cells]
    return "\n".join([lines[0], "|" + "|".join("-" * (w + 2) for w in widths) + "|", *lines[1:]])


def write_report(out: Path, name: str, text: str, numbers: dict[str, Any]) -> None:
    """``out/<name>.md`` (``text``) and ``out/<name>.json`` (``numbers``), both atomic; ``out`` made."""
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / f"{name}.md", text + "\n")
    atomic_write_text(out / f"{name}.json", json.dumps(numbers, indent=1, default=float))
