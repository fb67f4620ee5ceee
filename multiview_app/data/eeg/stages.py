"""Sleep-stage vocabulary shared by readers, synthetic writer, cache and evaluator.

The datasets' own facts (annotation text -> stage, default channels) come from their cards in
``datasets/`` (:mod:`multiview_app.data.catalog`); this module only names them for the code.
"""

from __future__ import annotations

from ..catalog import get_card

STAGES: tuple[str, ...] = ("W", "N1", "N2", "N3", "REM")
"""Class names in label order (label i <-> STAGES[i])."""

EPOCH_SECONDS = 30.0
"""Length of one scored epoch (and one prepared window) in seconds."""

EXCLUDED = -1
"""Label code of epochs scored as unknown / movement (excluded, counted)."""

UNSCORED = -2
"""Label code of epochs not covered by any hypnogram annotation (dropped, counted)."""

SLEEP_EDF_LABELS: dict[str, int] = get_card("sleep-edf").label_codes(EXCLUDED)
"""Sleep-EDF hypnogram annotation text -> label code (card ``sleep-edf``: R&K 3 + 4 -> N3, ? and movement excluded)."""

PHYSIONET2018_LABELS: dict[str, int] = get_card("physionet2018").label_codes(EXCLUDED)
"""PhysioNet/CinC 2018 sleep-stage aux notes -> label code (other notes are arousals etc.); an
undefined note (``U``/``undefined``, card: exclude) ends the previous stage."""

DREAMS_LABELS: dict[str, int] = get_card("dreams_spindles").label_codes(EXCLUDED)
"""DREAMS R&K label (as written, one per 5 s) -> label code (card ``dreams_spindles``: S3 + S4 -> N3,
movement excluded; the 5-s -> 30-s rule is :func:`multiview_app.data.eeg.dreams.rk_epochs`)."""

PHYSIONET2018_MAT_STAGES: dict[str, int] = {
    "wake": 0,
    "nonrem1": 1,
    "nonrem2": 2,
    "nonrem3": 3,
    "rem": 4,
    "undefined": UNSCORED,
}
"""``data/sleep_stages`` vectors of a challenge ``-arousal.mat`` -> label code."""

PHYSIONET2018_EEG: tuple[str, ...] = tuple(get_card("physionet2018").default_channels)
"""The six EEG derivations of PhysioNet 2018 (M3G Sec. 4.3 uses them as k = 6 views)."""

SLEEP_EDF_EEG: tuple[str, ...] = tuple(get_card("sleep-edf").default_channels)
"""The two EEG derivations of Sleep-EDF Expanded."""
