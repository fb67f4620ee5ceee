"""EEG data: Sleep-EDF / PhysioNet 2018 readers, synthetic PSG writer, prepared window cache,
the ``eeg_windows`` adapter and the ``channels`` view policy (both registered on import)."""

from . import adapter, views  # noqa: F401  (registration side effects)
from .stages import STAGES

__all__ = ["STAGES", "adapter", "views"]
