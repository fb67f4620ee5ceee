"""The staging table's per-subject block: each test subject's fits averaged first, then the mean over subjects
(how the README's headline counts), beside the mean over fits (each fit pooling its fold's subjects)."""

from __future__ import annotations

import numpy as np
import pytest

from multiview_app.eval.protocols.staging import METRICS
from multiview_app.eval.sleep_staging import format_table, subject_mean


def _fit(per_subject: dict[str, float]) -> dict:
    pooled = float(np.mean(list(per_subject.values())))
    return {**{m: pooled for m in METRICS}, "per_class_f1": {}, "per_subject": per_subject}


def test_subject_mean_averages_each_subjects_fits_first() -> None:
    # subject a is tested in two fits (two draws), b and c once: a's fits count once, not twice
    fits = [_fit({"a": 0.9, "b": 0.5}), _fit({"a": 0.7, "c": 0.6})]
    assert subject_mean(fits) == pytest.approx(np.mean([0.8, 0.5, 0.6]))
    assert subject_mean([{"balanced_accuracy": 0.5}]) != subject_mean([{"balanced_accuracy": 0.5}])  # NaN


def test_the_table_prints_the_per_subject_block() -> None:
    fits = [_fit({"a": 0.9, "b": 0.5}), _fit({"a": 0.7, "c": 0.6})]
    summary = {m: {"mean": 0.675, "std": 0.0} for m in METRICS}
    result = {
        "shots": [10],
        "results": {"trained": {"10": {**summary, "n_runs": 2, "runs": fits}}},
        "pretraining_cache": "cache",
        "protocol": "in-domain",
        "dataset": "toy",
        "folds": [0, 1],
        "subjects": {"test": ["a", "b"]},
        "windows": {"test": 40},
        "classifier": "logreg",
    }
    table = format_table(result)
    block = table.split("balanced_accuracy per test subject")[1].splitlines()
    assert block[2].split() == ["trained", "0.633"]  # mean of 0.8, 0.5, 0.6
