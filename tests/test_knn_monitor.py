"""The kNN monitor callback: options checked by the config, validation split only, cadence, values in
metrics.jsonl and TensorBoard, eval mode during the probe with every module's mode and the BatchNorm
statistics unchanged afterwards, training unchanged by it, kNN maths against a plain numpy kNN."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from _train_helpers import tiny_config

from multiview_app.config import ConfigError
from multiview_app.eval.knn_monitor import ACC_KEY, TIME_KEY, KnnMonitor, knn_accuracy
from multiview_app.models.model import build_model
from multiview_app.train.callbacks import StepEvent
from multiview_app.train.metrics import read_metrics
from multiview_app.train.run_io import model_spec
from multiview_app.train.trainer import train

VAL = ("data.options.val_fraction=0.2",)


def _monitor(**options: object) -> str:
    return "train.callbacks=[{knn-monitor: " + json.dumps(options) + "}]"


def test_options_are_checked_and_a_test_split_is_refused(tmp_path: Path) -> None:
    assert tiny_config(tmp_path, overrides=(*VAL, "train.callbacks=[knn-monitor]")).train.named_callbacks == [
        ("knn-monitor", {})
    ]
    for options, message in [
        ({"evry": 3}, r"train.callbacks.knn-monitor.evry"),
        ({"split": "test"}, r"train.callbacks.knn-monitor.split.*validation split, got 'test'"),
        ({"split": "test_sketch"}, r"got 'test_sketch'"),
        ({"every": 0}, r"train.callbacks.knn-monitor.every"),
    ]:
        with pytest.raises(ConfigError, match=message):
            tiny_config(tmp_path, overrides=(*VAL, _monitor(**options)))
    with pytest.raises(ConfigError, match="linear-probe: this callback takes no options"):
        tiny_config(tmp_path, overrides=("train.callbacks=[{linear-probe: {k: 3}}]",))
    with pytest.raises(ConfigError, match="one name and its options"):
        tiny_config(tmp_path, overrides=("train.callbacks=[{knn-monitor: {}, linear-probe: {}}]",))
    with pytest.raises(ValueError, match="validation split"):
        KnnMonitor(tiny_config(tmp_path), split="test")


def test_missing_val_split_fails_at_the_first_step_naming_the_fix(tmp_path: Path) -> None:
    cfg = tiny_config(tmp_path, overrides=("train.callbacks=[knn-monitor]",))
    with pytest.raises(ValueError, match=r"knn-monitor: data adapter 'digits' has no 'val' split.*val_fraction"):
        train(cfg)
    assert not read_metrics(cfg.run_dir / "metrics.jsonl")[1:]  # stopped after step 1


def test_probes_at_the_cadence_log_to_metrics_and_tensorboard_and_leave_training_unchanged(tmp_path: Path) -> None:
    base = tiny_config(tmp_path, "plain", VAL, train={"max_steps": 8, "log_every": 2})
    plain = train(base)
    cfg = tiny_config(
        tmp_path,
        "monitored",
        (*VAL, _monitor(every=3, items=60, bank_items=120, k=5)),
        train={"max_steps": 8, "log_every": 2},
    )
    result = train(cfg)
    rows = read_metrics(result.run_dir / "metrics.jsonl")
    # log steps 2, 4, 6, 8: due at 3 -> 4, due at 6 -> 6, due at 9 -> the last step 8
    assert [r["step"] for r in rows if ACC_KEY in r] == [4, 6, 8]
    assert all(0.0 <= r[ACC_KEY] <= 1.0 and r[TIME_KEY] > 0 for r in rows if ACC_KEY in r)
    reference = read_metrics(plain.run_dir / "metrics.jsonl")
    assert [r["loss"] for r in rows] == [r["loss"] for r in reference]  # the probe changes nothing in training
    summary = result.evaluation["knn_monitor"]
    assert summary["split"] == "val" and summary["k"] == 5 and [h["step"] for h in summary["history"]] == [4, 6, 8]
    assert any("kNN monitor (val:" in text for text in result.reports)

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(next((result.run_dir / "tb").rglob("events.out.tfevents.*")).parent)).Reload()
    logged = [(e.step, e.value) for e in events.Scalars(ACC_KEY)]
    assert [s for s, _ in logged] == [4, 6, 8]
    assert np.allclose([v for _, v in logged], [r[ACC_KEY] for r in rows if ACC_KEY in r], atol=1e-6)


def _norm_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items() if "running" in k or "num_batches" in k}


def test_probe_runs_norm_layers_in_eval_mode_and_restores_modes_and_statistics(tmp_path: Path) -> None:
    cfg = tiny_config(tmp_path, overrides=VAL)
    model = build_model(**model_spec(cfg)).train()
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    assert norms, "the tiny model should have BatchNorm layers"
    norms[0].eval()  # a frozen norm layer inside a training model must stay frozen
    modes = {name: m.training for name, m in model.named_modules()}
    stats = _norm_state(model)
    seen: list[bool] = []
    hooks = [m.register_forward_hook(lambda mod, inp, out: seen.append(mod.training)) for m in norms]
    monitor = KnnMonitor(cfg, items=40, bank_items=80, k=3)
    values = monitor.on_log_step(StepEvent(4, 4, None, model, tmp_path, True))
    for hook in hooks:
        hook.remove()
    assert values is not None and 0.0 <= values[ACC_KEY] <= 1.0
    assert seen and not any(seen)  # every norm layer ran in eval mode
    assert {name: m.training for name, m in model.named_modules()} == modes
    after = _norm_state(model)
    assert after.keys() == stats.keys() and all(torch.equal(after[k], stats[k]) for k in stats)


def _numpy_knn(bank_x: np.ndarray, bank_y: np.ndarray, query_x: np.ndarray, k: int) -> np.ndarray:
    """Reference: standardize with the bank's statistics, cosine distance, 1/distance-weighted vote."""
    mean, std = bank_x.mean(0), bank_x.std(0)
    std[std == 0] = 1.0
    b, q = (bank_x - mean) / std, (query_x - mean) / std
    b /= np.linalg.norm(b, axis=1, keepdims=True)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    distance = 1.0 - q @ b.T
    predictions = []
    for row in distance:
        nearest = np.argsort(row, kind="stable")[:k]
        votes: dict[int, float] = {}
        for j in nearest:
            votes[int(bank_y[j])] = votes.get(int(bank_y[j]), 0.0) + 1.0 / max(row[j], 1e-12)
        predictions.append(max(votes, key=votes.get))
    return np.array(predictions)


def test_knn_accuracy_matches_a_numpy_knn() -> None:
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(4, 6)) * 1.5
    bank_y, query_y = rng.integers(0, 4, 200), rng.integers(0, 4, 80)
    bank_x = centres[bank_y] + rng.normal(size=(200, 6))
    query_x = centres[query_y] + rng.normal(size=(80, 6))
    expected = float((_numpy_knn(bank_x, bank_y, query_x, 7) == query_y).mean())
    assert knn_accuracy(bank_x, bank_y, query_x, query_y, k=7) == pytest.approx(expected)
    assert 0.3 < expected < 1.0  # a problem where neighbours matter, not a trivial one


def test_cadence_continues_after_a_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monitor = KnnMonitor(tiny_config(tmp_path, overrides=VAL), every=200)
    monkeypatch.setattr(monitor, "probe", lambda model: 0.5)
    probed = [
        step
        for step in range(260, 801, 10)  # a run resumed at step 250, logging every 10 steps of 800
        if monitor.on_log_step(StepEvent(step, 800, None, None, tmp_path, True)) is not None
    ]
    assert probed == [400, 600, 800]
