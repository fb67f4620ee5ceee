"""Sleep-stage vocabulary shared by readers, synthetic writer, cache and evaluator."""
from __future__ import annotations

STAGES: tuple[str, ...] = ("W", "N1", "N2", "N3", "REM")
"""Class names in label order (label i <-> STAGES[i])."""

EPOCH_SECONDS = 30.0
"""Length of one scored epoch (and one prepared window) in seconds."""

EXCLUDED = -1
"""Label code of epochs scored as unknown / movement (excluded, counted)."""

UNSCORED = -2
"""Label code of epochs not covered by any hypnogram annotation (dropped, counted)."""

SLEEP_EDF_LABELS: dict[str, int] = {
    "Sleep stage W": 0,
    "Sleep stage 1": 1,
    "Sleep stage 2": 2,
    "Sleep stage 3": 3,
    "Sleep stage 4": 3,  # R&K stages 3 and 4 are merged into N3 (AASM)
    "Sleep stage R": 4,
    "Sleep stage ?": EXCLUDED,
    "Movement time": EXCLUDED,
}
"""Sleep-EDF hypnogram annotation text -> label code."""

PHYSIONET2018_LABELS: dict[str, int] = {"W": 0, "N1": 1, "N2": 2, "N3": 3, "R": 4}
"""PhysioNet/CinC 2018 sleep-stage aux notes -> label code (other notes are arousals etc.)."""

PHYSIONET2018_EEG = ("F3-M2", "F4-M1", "C3-M2", "C4-M1", "O1-M2", "O2-M1")
"""The six EEG derivations of PhysioNet 2018 (M3G Sec. 4.3 uses them as k = 6 views)."""

SLEEP_EDF_EEG = ("Fpz-Cz", "Pz-Oz")
"""The two EEG derivations of Sleep-EDF Expanded."""
