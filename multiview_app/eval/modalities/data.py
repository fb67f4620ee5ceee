"""What the modality evaluators take: the windows' labels and bookkeeping (:class:`EvalWindows`), the one
error for an evaluation the data cannot support (:class:`UnsupportedEvaluation`, checked through the
:data:`REQUIREMENTS` registry) and the subject folds every evaluator shares."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ...data.eeg.events import APNEA_HYPOPNEA, AROUSAL
from ...data.eeg.stages import STAGES


class UnsupportedEvaluation(ValueError):
    """An evaluation the data cannot support: the message names the dataset and what it lacks."""


@dataclass
class EvalWindows:
    """Per-window labels and bookkeeping of ``n`` windows (every array ``(n,)``), shared by every feature set.

    Attributes:
        dataset: the dataset's name (errors name it).
        subjects: subject of each window (the unit of the statistics and of the folds).
        nights: night (recording) of each window.
        onsets: window onset in seconds from its night's start.
        stages: stage code of each window (0 W .. 4 REM; negative: unscored, left out of staging).
        targets: event class (``apnea_hypopnea``, ``arousal``) -> ``(n,)`` int 1 / 0, ``-1`` excluded
            (arousal windows the challenge did not score); empty when the dataset scores no events.
        night_ahi: night -> true apnea-hypopnea index (events / hour of sleep); empty without events.
        sleep_hours: night -> hours of scored sleep (N1-REM) the index is taken over.
    """

    dataset: str
    subjects: np.ndarray
    nights: np.ndarray
    onsets: np.ndarray
    stages: np.ndarray
    targets: dict[str, np.ndarray] = field(default_factory=dict)
    night_ahi: dict[str, float] = field(default_factory=dict)
    sleep_hours: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.subjects = np.asarray(self.subjects).astype(str)
        self.nights = np.asarray(self.nights).astype(str)
        self.onsets = np.asarray(self.onsets, dtype=np.float64)
        self.stages = np.asarray(self.stages, dtype=np.int64)
        self.targets = {name: np.asarray(t, dtype=np.int64) for name, t in self.targets.items()}
        n = len(self.subjects)
        shapes = {"nights": self.nights, "onsets": self.onsets, "stages": self.stages, **self.targets}
        wrong = {name: a.shape for name, a in shapes.items() if a.shape != (n,)}
        if wrong:
            raise ValueError(f"{self.dataset}: per-window arrays must all be ({n},) like subjects; got {wrong}")

    def __len__(self) -> int:
        return len(self.subjects)


class TrainableRow(Protocol):
    """A row that learns from the labels instead of reading frozen features (the end-to-end model of the
    PSG experiment): the staging and event evaluators call it per fold, on the same training windows (and
    few-shot draws) as the feature rows."""

    def fit_predict(
        self, train: np.ndarray, labels: np.ndarray, test: np.ndarray, seed: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Train on windows ``train (m,)`` (indices into the evaluated windows) with ``labels (m,)``, then
        score windows ``test (t,)``: class probabilities ``(t, c)`` and their classes ``(c,)``."""
        ...


def trainable(row: Any) -> bool:
    """Whether a row is a :class:`TrainableRow` (else a feature array ``(n, d)``)."""
    return callable(getattr(row, "fit_predict", None))


def check_features(features: dict[str, Any], windows: EvalWindows) -> dict[str, Any]:
    """``features``: name -> ``(n, d)``, as float64 without NaN (a :class:`TrainableRow` passes as it is);
    ``ValueError`` naming a set whose windows do not match ``windows`` (``n``) or that is not 2-D."""
    out = {}
    for name, x in features.items():
        if trainable(x):
            out[name] = x
            continue
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or len(x) != len(windows):
            raise ValueError(f"{windows.dataset}: features '{name}' are {x.shape}, expected ({len(windows)}, d)")
        out[name] = np.nan_to_num(x)
    return out


def _needs_stages(windows: EvalWindows, _: dict[str, np.ndarray]) -> str | None:
    scored = np.unique(windows.stages[windows.stages >= 0])
    return None if scored.size >= 2 else f"scored sleep stages of at least 2 classes (has {scored.tolist()})"


def _needs_subjects(windows: EvalWindows, _: dict[str, np.ndarray]) -> str | None:
    n = np.unique(windows.subjects).size
    return None if n >= 2 else f"a second subject to hold out (has {n})"


def _needs_target(name: str, what: str) -> Callable[[EvalWindows, dict[str, np.ndarray]], str | None]:
    def check(windows: EvalWindows, _: dict[str, np.ndarray]) -> str | None:
        if name not in windows.targets:
            return f"scored {what} (no per-window '{name}' targets: the dataset scores no events)"
        scored = windows.targets[name][windows.targets[name] >= 0]
        return None if np.unique(scored).size == 2 else f"both positive and negative scored {what} windows"

    return check


def _needs_ahi(windows: EvalWindows, _: dict[str, np.ndarray]) -> str | None:
    missing = sorted(set(windows.nights) - set(windows.night_ahi))
    if missing or not windows.night_ahi:
        return f"a true AHI per night (none for {', '.join(missing[:3]) or 'any night'})"
    lacking = sorted(n for n in set(windows.nights) if windows.sleep_hours.get(n, 0.0) <= 0)
    return f"hours of scored sleep per night (none for {', '.join(lacking[:3])})" if lacking else None


def _needs_two_modalities(_: EvalWindows, features: dict[str, np.ndarray]) -> str | None:
    return None if len(features) >= 2 else f"a second modality to retrieve across or leave out (has {list(features)})"


def _needs_several_nights(windows: EvalWindows, _: dict[str, np.ndarray]) -> str | None:
    n = np.unique(windows.nights).size
    return None if n >= 2 else f"a second night for the other-night candidates (has {n})"


REQUIREMENTS: dict[str, tuple[Callable[[EvalWindows, dict[str, np.ndarray]], str | None], ...]] = {
    "staging": (_needs_stages, _needs_subjects),
    "missing_modalities": (_needs_stages, _needs_subjects, _needs_two_modalities),
    "apnea_hypopnea": (_needs_target(APNEA_HYPOPNEA, "breathing events (apnea / hypopnea)"), _needs_subjects),
    "ahi": (_needs_target(APNEA_HYPOPNEA, "breathing events (apnea / hypopnea)"), _needs_ahi, _needs_subjects),
    "arousal": (_needs_target(AROUSAL, "arousals"), _needs_subjects),
    "retrieval": (_needs_two_modalities, _needs_several_nights),
}
"""Evaluation -> the checks it needs; a check returns what the data lacks, or None."""


def require(evaluation: str, windows: EvalWindows, features: dict[str, np.ndarray] | None = None) -> None:
    """:class:`UnsupportedEvaluation` naming ``windows.dataset`` and everything it lacks for ``evaluation``
    (a key of :data:`REQUIREMENTS`; ``ValueError`` listing them for another name)."""
    if evaluation not in REQUIREMENTS:
        raise ValueError(f"unknown modality evaluation '{evaluation}'; available: {', '.join(REQUIREMENTS)}")
    lacks = [what for check in REQUIREMENTS[evaluation] if (what := check(windows, features or {})) is not None]
    if lacks:
        raise UnsupportedEvaluation(
            f"{windows.dataset} cannot support the '{evaluation}' evaluation: it lacks {'; '.join(lacks)}"
        )


def subject_folds(subjects: np.ndarray, folds: int | None, seed: int = 0) -> list[np.ndarray]:
    """Test subjects of each fold: the sorted distinct ``subjects`` permuted by ``seed`` and cut into
    ``folds`` parts (``None``: one subject per fold), as the sleep-staging evaluator's ``--folds``."""
    names = np.unique(subjects)
    folds = len(names) if folds is None else folds
    if not 2 <= folds <= len(names):
        raise ValueError(f"subject folds: {folds} folds need 2 .. {len(names)} subjects (have {len(names)})")
    order = np.random.default_rng(seed).permutation(len(names))
    return [names[np.sort(part)] for part in np.array_split(order, folds)]


def stage_names(codes: np.ndarray) -> list[str]:
    """Stage names of the codes ``(k,)``."""
    return [STAGES[int(c)] for c in codes]
