"""Scored events of a night (respiratory events, arousals): what readers return beside the stages."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ScoredEvent:
    """One scored event: onset and duration in seconds from the recording start, and its label in the
    PhysioNet 2018 ``.arousal`` vocabulary (e.g. ``resp_obstructiveapnea``, ``arousal_spontaneous``;
    ``datasets/modalities/psg.yaml`` ``events`` maps labels to per-window target classes)."""

    onset: float
    duration: float
    label: str

    @property
    def end(self) -> float:
        return self.onset + self.duration
