"""Evaluation of PSG modalities as views, on frozen per-window features (arrays, no models):

* staging from each modality alone, each leave-one-out subset and all together (:mod:`.staging`), and
  with each modality removed at inference (the fused embedding of the others, ``missing_modalities``);
* apnea / hypopnea and arousal detection per window, and the per-night AHI (:mod:`.events`);
* cross-modal retrieval of the matching epoch for every ordered modality pair, beside what the scored
  state alone reaches (:mod:`.retrieval`);
* per-modality handcrafted baselines from the field's libraries (:mod:`.baselines`, :mod:`.cache`);
* Markdown tables (:mod:`.tables`) and one error, :class:`UnsupportedEvaluation`, for an evaluation the
  data cannot support (it names the dataset and what it lacks).

Every evaluator takes feature sets as named rows (``{name: (n, d)}``), so learned embeddings, their
random-init counterparts and handcrafted baselines share one table::

    windows, baseline_rows, info = cache_baselines("cache/psg")      # or EvalWindows(...) from arrays
    results = evaluate_modalities(embeddings, windows, extra_rows=baseline_rows)
    print(format_tables(results))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...data.eeg.events import APNEA_HYPOPNEA, AROUSAL
from .cache import cache_baselines, cache_windows
from .data import REQUIREMENTS, EvalWindows, TrainableRow, UnsupportedEvaluation, require, subject_folds, trainable
from .events import evaluate_events
from .retrieval import STATE_ORACLE, STATE_READER, evaluate_retrieval, evaluate_state_oracle, evaluate_state_reader
from .staging import (
    ALL,
    evaluate_missing_modalities,
    evaluate_staging,
    fused,
    missing_modality_rows,
    modality_subsets,
    subset_features,
)
from .tables import format_tables

NO_RESPIRATORY = ("brain", "heart", "muscle")
"""The modalities of the sleep-disordered-breathing row without airflow or SpO2."""


def breathing_rows(features: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Rows of the apnea / hypopnea table: every modality together, and brain + heart + muscle (those
    of them present) when that leaves some modality out."""
    rows = {ALL: np.concatenate(list(features.values()), axis=1)}
    kept = [m for m in NO_RESPIRATORY if m in features]
    if kept and len(kept) < len(features):
        rows[" + ".join(kept)] = np.concatenate([features[m] for m in kept], axis=1)
    return rows


def evaluate_modalities(
    features: dict[str, np.ndarray],
    windows: EvalWindows,
    *,
    extra_rows: dict[str, np.ndarray] | None = None,
    aligned: dict[str, np.ndarray] | None = None,
    tasks: tuple[str, ...] = ("staging", "missing_modalities", APNEA_HYPOPNEA, AROUSAL, "retrieval"),
    shots: int = 50,
    seeds: int = 3,
    folds: int | None = None,
    n_candidates: int = 1000,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Every asked evaluation of per-modality features ``{modality: (n, d)}`` on ``windows``; ``extra_rows``
    (baselines, random init, ...) join the staging and event tables. An asked task the data cannot support
    raises :class:`UnsupportedEvaluation` (leave it out of ``tasks``).

    ``aligned``: per-modality embeddings ``{modality: (n, d)}`` in the space the loss aligns across
    modalities (a run's projected embeddings), which retrieval ranks; default ``features``. Encoder
    features of different modality encoders are not in one space, so cross-modal retrieval on them is
    at chance by construction."""
    extra = dict(extra_rows or {})
    runs = {
        "staging": lambda: evaluate_staging(
            {**subset_features(features, modality_subsets(list(features))), **extra},
            windows,
            shots=shots,
            seeds=seeds,
            folds=folds,
        ),
        "missing_modalities": lambda: evaluate_missing_modalities(
            features, windows, shots=shots, seeds=seeds, folds=folds
        ),
        APNEA_HYPOPNEA: lambda: evaluate_events(
            {**breathing_rows(features), **extra}, windows, APNEA_HYPOPNEA, folds=folds
        ),
        AROUSAL: lambda: evaluate_events({**breathing_rows(features), **extra}, windows, AROUSAL, folds=folds),
        "retrieval": lambda: evaluate_retrieval(
            features if aligned is None else aligned, windows, n_candidates=n_candidates, seed=seed
        ),
    }
    unknown = [t for t in tasks if t not in runs]
    if unknown:
        raise ValueError(f"evaluate_modalities: unknown task(s) {unknown}; expected some of {list(runs)}")
    for task in tasks:  # every check first: one error before any fit
        require("ahi" if task == APNEA_HYPOPNEA and windows.night_ahi else task, windows, features)
    return [runs[task]() for task in tasks]


__all__ = [
    "REQUIREMENTS",
    "STATE_ORACLE",
    "STATE_READER",
    "EvalWindows",
    "TrainableRow",
    "UnsupportedEvaluation",
    "breathing_rows",
    "cache_baselines",
    "cache_windows",
    "evaluate_events",
    "evaluate_missing_modalities",
    "evaluate_modalities",
    "evaluate_retrieval",
    "evaluate_state_oracle",
    "evaluate_state_reader",
    "evaluate_staging",
    "format_tables",
    "fused",
    "missing_modality_rows",
    "modality_subsets",
    "require",
    "subject_folds",
    "subset_features",
    "trainable",
]
