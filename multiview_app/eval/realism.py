"""Realism of synthetic EEG, both ways: a classifier fitted on one source's epochs (e.g. real DREAMS)
stages another's (synthetic), and the reverse (issue 25, item 3)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..data.eeg.stages import STAGES
from .bandpower import bandpower_features
from .protocols.probe import fit_linear_classifier
from .protocols.staging import balanced_sample, staging_metrics


def cross_staging(train: tuple[np.ndarray, np.ndarray], test: tuple[np.ndarray, np.ndarray], sfreq: float,
                  classes: tuple[int, ...] = (0, 1, 2, 3), seed: int = 0) -> dict[str, Any]:
    """Realism check: a classifier fitted on one source's epochs stages another's. ``train`` / ``test``:
    ``(epochs (e, T) uV, labels (e,))``; features: log relative band powers (``eval.bandpower``);
    classifier: standardized multinomial logistic regression (C = 1, no tuning) on a class-balanced draw
    of the training epochs of ``classes`` (as many per class as the rarest has). Returns the test
    metrics of ``eval.sleep_staging.staging_metrics`` (kappa, balanced accuracy, per-class F1) on every
    test epoch of ``classes``, and the epochs per class used on each side."""
    def pick(data: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        keep = np.isin(data[1], classes)
        return bandpower_features(data[0][keep][:, None, :].astype(np.float32), sfreq), data[1][keep]

    x_train, y_train = pick(train)
    x_test, y_test = pick(test)
    rarest = int(min((y_train == c).sum() for c in classes))
    if rarest == 0:
        raise ValueError(f"cross_staging: a class of {[STAGES[c] for c in classes]} has no training epoch")
    index, drawn = balanced_sample(y_train, rarest, np.random.default_rng(seed))
    model = fit_linear_classifier(x_train[index], y_train[index], seed=seed)
    return {**staging_metrics(y_test, model.predict(x_test)), "train_per_class": drawn,
            "test_per_class": {STAGES[c]: int((y_test == c).sum()) for c in classes}}
