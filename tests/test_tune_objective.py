"""Done-means of issue 24 item 1: ``mvapp tune`` scores the same values through the protocol registry
as before. The expected values were computed by the objective of commit c092083 (its hand-written
metric functions and sleep-staging feature path, before eval/protocols existed) on these exact inputs:
an untrained model (torch seed 0) on the tiny digits config and on a fake 6-subject EEG cache whose
windows carry a sine of a per-stage frequency (so that the scores depend on the fit: C, the draw);
intermediate report (the report subset) and final objective (the whole val split)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from _eeg_helpers import CHANNELS, fake_cache
from _train_helpers import tiny_raw

from multiview_app.config import config_from_dict
from multiview_app.eval.protocols import PROTOCOLS
from multiview_app.models.model import build_model
from multiview_app.threads import torch_threads
from multiview_app.train.run_io import model_spec
from multiview_app.tune.objective import METRICS, MetricState

# computed by the c092083 tree's tune.objective.METRICS on the inputs of _configs (same seeds, same threads)
BEFORE = {
    "digits/partial/linear_probe.logreg_acc": 0.6166666666666667,
    "digits/partial/linear_probe.knn_acc": 0.6333333333333333,
    "digits/final/linear_probe.logreg_acc": 0.7374301675977654,
    "digits/final/linear_probe.knn_acc": 0.7486033519553073,
    "eeg/partial/sleep_staging.accuracy": 0.8571428571428571,
    "eeg/partial/sleep_staging.balanced_accuracy": 0.9,
    "eeg/partial/sleep_staging.macro_f1": 0.8666666666666666,
    "eeg/partial/sleep_staging.kappa": 0.8205128205128205,
    "eeg/partial/linear_probe.logreg_acc": 0.2857142857142857,
    "eeg/partial/linear_probe.knn_acc": 0.14285714285714285,
    "eeg/final/sleep_staging.accuracy": 0.6666666666666666,
    "eeg/final/sleep_staging.balanced_accuracy": 0.65,
    "eeg/final/sleep_staging.macro_f1": 0.656043956043956,
    "eeg/final/sleep_staging.kappa": 0.5807860262008735,
    "eeg/final/linear_probe.logreg_acc": 0.75,
    "eeg/final/linear_probe.knn_acc": 0.6666666666666666,
}


def _configs(tmp: Path) -> dict[str, dict[str, Any]]:
    digits = tiny_raw(tmp / "runs", train={"max_steps": 2})
    digits["data"]["options"]["val_fraction"] = 0.2
    digits["tune"] = {"report_items": 60, "max_train_items": 300}
    cache = fake_cache(tmp / "cache", subjects=6, windows=12)
    seconds = np.arange(3000) / 100.0
    for path in sorted((cache / "windows").glob("*.npy")):  # window w (stage w % 5): + a (1 + 2 (w % 5)) Hz sine
        data = np.load(path)
        for w in range(len(data)):
            data[w, :, 1:] += 2.0 * np.sin(2 * np.pi * (1.0 + 2.0 * (w % 5)) * seconds[1:])
        np.save(path, data)
    eeg = {
        "data": {
            "adapter": "eeg_windows",
            "options": {"cache": str(cache), "test_subjects": ["S5"], "val_subjects": ["S3", "S4"]},
        },
        "views": {"policy": "channels", "k": 2},
        "model": {
            "encoders": {"eeg": {"name": "conv", "width": 8, "out_dim": 8, "groups": 4, "channel_vocab": CHANNELS}},
            "projector": {"hidden_dim": 16, "out_dim": 8},
        },
        "loss": {"name": "m3g", "epsilon": 0.2},
        "eval": {"batch_size": 64},
        "tune": {"shots": 3, "report_items": 8},
        "output": {"runs_dir": str(tmp / "runs"), "name": "eeg"},
    }
    return {"digits": digits, "eeg": eeg}


def test_tune_scores_the_same_values_through_the_protocol_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    called: list[str] = []
    for name in ("linear-probe", "knn", "few-shot-staging"):  # count the registry's calls
        real = PROTOCOLS.get(name)
        monkeypatch.setitem(
            PROTOCOLS._entries, name, lambda *a, _real=real, _name=name, **k: called.append(_name) or _real(*a, **k)
        )
    assert {m.protocol for m in METRICS.values()} == {"linear-probe", "knn", "few-shot-staging", None}
    values: dict[str, float] = {}
    for label, raw in _configs(tmp_path).items():
        cfg = config_from_dict(raw)
        torch.manual_seed(0)
        model = build_model(**model_spec(cfg))
        state = MetricState(cfg)
        for partial in (True, False):
            state.begin(partial)
            with torch_threads(1):
                for key in BEFORE:
                    stage, metric = key.split("/")[1:]
                    if key.startswith(label) and stage == ("partial" if partial else "final"):
                        values[key] = METRICS[metric].compute(model, state)
    assert values == {key: pytest.approx(value, abs=1e-12) for key, value in BEFORE.items()}
    assert set(called) == {"linear-probe", "knn", "few-shot-staging"}
    assert called.count("few-shot-staging") == 2  # one protocol run per evaluation serves every sleep_staging.* score
