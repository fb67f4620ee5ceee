"""Trainer: resume after a crash gives the same weights, NaN stops with the last good checkpoint,
EMA teacher path, LR schedule, sampler partitioning. Tiny CPU runs (small_cnn, 16 px, few steps)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _train_helpers import tiny_config
from safetensors.torch import load_file

from multiview_app.train import trainer as trainer_mod
from multiview_app.train.checkpoint import list_checkpoints
from multiview_app.train.metrics import read_metrics
from multiview_app.train.run_io import load_run
from multiview_app.train.trainer import EpochBatchSampler, TrainingDivergedError, lr_lambda, train

# 180 train items (test_fraction 0.9) / 32 per batch = 5 steps per epoch: 7 steps cross an epoch.
SMALL_EPOCH = {"options": {"load_size": 16, "test_fraction": 0.9}}


class Crash(RuntimeError):
    pass


def _crash_at(step_to_crash: int):
    def callback(step: int, record: dict | None) -> None:
        if step == step_to_crash:
            raise Crash(f"simulated crash at step {step}")

    return callback


@pytest.mark.slow
def test_resume_after_crash_matches_uninterrupted_run(tmp_path: Path) -> None:
    train_section = {"max_steps": 7, "checkpoint_every": 2, "keep_checkpoints": 2}
    full = train(tiny_config(tmp_path, "full", data=SMALL_EPOCH, train=train_section))
    assert full.steps == 7

    crashed_cfg = tiny_config(tmp_path, "crashed", data=SMALL_EPOCH, train=train_section)
    with pytest.raises(Crash):
        train(crashed_cfg, callbacks=[_crash_at(5)])
    ckpts = list_checkpoints(crashed_cfg.run_dir)
    assert [p.name for p in ckpts] == ["step_00000002", "step_00000004"]  # keep_checkpoints=2
    assert not (crashed_cfg.run_dir / "model.safetensors").exists()
    state = json.loads((ckpts[-1] / "trainer_state.json").read_text())
    assert (state["step"], state["epoch"], state["batch_position"]) == (4, 0, 4)

    resumed = train(crashed_cfg, resume="latest")
    assert resumed.steps == 7 and any("resumed from" in n for n in resumed.notes)
    a = load_file(str(full.run_dir / "model.safetensors"))
    b = load_file(str(resumed.run_dir / "model.safetensors"))
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0, msg=key)
    # metrics continue without duplicated steps; the losses after the resume equal the full run's
    steps = [r["step"] for r in read_metrics(resumed.run_dir / "metrics.jsonl")]
    assert steps == list(range(1, 8))
    full_loss = [r["loss"] for r in read_metrics(full.run_dir / "metrics.jsonl")]
    resumed_loss = [r["loss"] for r in read_metrics(resumed.run_dir / "metrics.jsonl")]
    assert resumed_loss == pytest.approx(full_loss, rel=1e-6)


def test_run_folder_layout_and_init_weights(tmp_path: Path) -> None:
    result = train(tiny_config(tmp_path, "layout", train={"max_steps": 2}, output={"curves": True}))
    run = result.run_dir
    for name in ("config.yaml", "metrics.jsonl", "model.safetensors", "init.safetensors", "model.json", "curves.png"):
        assert (run / name).is_file(), name
    assert any((run / "tb").rglob("events.out.tfevents*"))
    record = read_metrics(run / "metrics.jsonl")[-1]
    for key in (
        "loss",
        "lr",
        "items_per_s",
        "time/data",
        "time/forward",
        "time/loss",
        "time/backward",
        "stats/grad_norm",
    ):
        assert key in record, key
    assert sum(record[f"time/{p}"] for p in ("data", "forward", "loss", "backward", "optim")) == pytest.approx(1.0)
    _, init_model = load_run(run, "init")
    _, final_model = load_run(run, "final")
    changed = [
        not torch.equal(a, b) for a, b in zip(init_model.state_dict().values(), final_model.state_dict().values())
    ]
    assert any(changed)
    with pytest.raises(FileExistsError, match="already exists"):
        train(tiny_config(tmp_path, "layout", train={"max_steps": 2}))


def test_nan_loss_stops_with_step_and_keeps_last_good_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_build_loss = trainer_mod.build_loss

    def build_poisoned_loss(name: str, **params):
        loss = real_build_loss(name, **params)
        calls = {"n": 0}
        original_forward = loss.forward

        def forward(z: torch.Tensor) -> torch.Tensor:
            calls["n"] += 1
            value = original_forward(z)
            return value * float("nan") if calls["n"] == 3 else value

        loss.forward = forward
        return loss

    monkeypatch.setattr(trainer_mod, "build_loss", build_poisoned_loss)
    cfg = tiny_config(tmp_path, "nan", train={"max_steps": 5, "checkpoint_every": 2})
    with pytest.raises(TrainingDivergedError, match=r"step 3: loss became NaN/Inf.*step_00000002"):
        train(cfg)
    assert [p.name for p in list_checkpoints(cfg.run_dir)] == ["step_00000002"]
    assert not (cfg.run_dir / "model.safetensors").exists()


def test_ema_teacher_with_predictor(tmp_path: Path) -> None:
    cfg = tiny_config(
        tmp_path,
        "byol",
        loss={"name": "byol_pwe"},
        model={
            "encoders": {"image": {"name": "small_cnn", "width": 8, "num_features": 16}},
            "projector": {"hidden_dim": 32, "out_dim": 16},
            "predictor": {"hidden_dim": 32},
            "teacher": {"enabled": True, "momentum_base": 0.9, "views": "all"},
        },
        train={"max_steps": 3},
    )
    result = train(cfg)
    records = read_metrics(result.run_dir / "metrics.jsonl")
    momenta = [r["stats/teacher_momentum"] for r in records]
    assert momenta[0] == pytest.approx(0.9) and momenta == sorted(momenta) and momenta[-1] < 1.0
    # collapse monitoring on every logged row: embedding std of the online projections and RankMe
    assert all(r["stats/collapse/embedding_std"] > 0 and r["stats/collapse/rankme"] >= 1 for r in records)
    assert all(r["stats/collapse/feature_std"] > 0 and r["stats/collapse/feature_rankme"] >= 1 for r in records)
    assert all(torch.isfinite(torch.tensor(r["loss"])) for r in records)
    _, model = load_run(result.run_dir)
    assert model.has_predictor


def test_teacher_loss_replaces_one_slot_per_teacher_view() -> None:
    from multiview_app.models import build_model
    from multiview_app.train.methods import EMATeacherMethod, StepOutputs, build_method
    from multiview_app.train.run_io import model_spec

    seen: list[torch.Tensor] = []

    def recording_loss(z: torch.Tensor) -> torch.Tensor:
        seen.append(z.detach().clone())
        return z.sum()

    cfg = tiny_config(
        Path("/nonexistent"),
        "x",
        views={"k": 3},
        loss={"name": "infonce_pwe"},
        model={"teacher": {"enabled": True, "views": [0, 2]}},
    )
    method = build_method(
        cfg, build_model(**model_spec(cfg)), trainer_mod.build_loss("infonce_pwe"), torch.device("cpu")
    )
    assert isinstance(method, EMATeacherMethod) and method.name == "ema_teacher"
    z = torch.zeros(4, 3, 2, requires_grad=True)
    z_teacher = torch.ones(4, 2, 2)
    loss, _ = method.loss(
        StepOutputs(z, target=z_teacher), recording_loss, lambda fn, *t, labels=None: fn(*t), lambda t: t, False
    )
    assert len(seen) == 2
    assert seen[0][:, 0].eq(1).all() and seen[0][:, 1:].eq(0).all()
    assert seen[1][:, 2].eq(1).all() and seen[1][:, :2].eq(0).all()
    loss.backward()
    # the student gets gradient only on the slots the teacher did not replace: (1 + 1 + 0) / 2 terms
    assert z.grad[:, 1].eq(1).all() and z.grad[:, 0].eq(0.5).all() and z.grad[:, 2].eq(0.5).all()


def test_lr_schedule_warmup_then_cosine() -> None:
    f = lr_lambda(warmup_steps=4, total_steps=14, min_ratio=0.1)
    assert [f(s) for s in range(4)] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert f(4) == pytest.approx(1.0)
    assert f(9) == pytest.approx(0.1 + 0.9 * 0.5)
    assert f(14) == pytest.approx(0.1) and f(20) == pytest.approx(0.1)


def test_epoch_sampler_partitions_and_resumes() -> None:
    ranks = [list(EpochBatchSampler(50, 4, 6, seed=3, epoch=1, rank=r, world=2)) for r in range(2)]
    flat = [i for r in ranks for b in r for i in b]
    assert len(flat) == len(set(flat)) == 48 and all(len(b) == 4 for r in ranks for b in r)
    assert list(EpochBatchSampler(50, 4, 6, seed=3, epoch=1, rank=1, world=2, start=4)) == ranks[1][4:]
    assert list(EpochBatchSampler(50, 4, 6, seed=3, epoch=2)) != list(EpochBatchSampler(50, 4, 6, seed=3, epoch=1))


def test_view_stream_prefetch_gives_the_same_views() -> None:
    from torch.utils.data import DataLoader, default_collate

    from multiview_app.data.adapters import build_adapter
    from multiview_app.data.views import build_view_policy

    adapter = build_adapter("digits", {"load_size": 16})
    policy = build_view_policy("augment", 2, {"stacks": "simclr", "image_size": 16}, adapter)
    sampler = EpochBatchSampler(len(adapter.split("train")), 8, 3, seed=0, epoch=0)

    def views(prefetch: bool, first_index: int) -> list[torch.Tensor]:
        loader = DataLoader(adapter.split("train"), batch_sampler=sampler, collate_fn=default_collate)
        stream = trainer_mod.ViewStream(loader, policy, torch.device("cpu"), lambda i: 1000 + i, first_index, prefetch)
        try:
            return [torch.stack(b.views) for b in iter(lambda: next(stream, None), None)]
        finally:
            stream.close()

    with_prefetch, without = views(True, 5), views(False, 5)
    assert len(with_prefetch) == 3
    for a, b in zip(with_prefetch, without):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.equal(views(True, 6)[0], with_prefetch[0])  # the index seeds the views


@pytest.mark.parametrize("deterministic", [False, True])
def test_deterministic_runs_build_views_in_the_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, deterministic: bool
) -> None:
    """train.deterministic turns the view-prefetch thread off (it shares the intra-op threads with the step)."""
    seen: list[bool] = []
    real = trainer_mod.ViewStream

    def recording(*args, **kwargs):
        stream = real(*args, **kwargs)
        seen.append(stream._pool is not None)
        return stream

    monkeypatch.setattr(trainer_mod, "ViewStream", recording)
    cfg = tiny_config(tmp_path, f"det{int(deterministic)}", train={"max_steps": 1, "deterministic": deterministic})
    train(cfg)
    assert seen and all(prefetching == (not deterministic) for prefetching in seen)


def test_grad_accum_and_epochs_bookkeeping(tmp_path: Path) -> None:
    """180 train items, 32 per micro-batch, 2 micro-batches per step -> 2 steps per epoch (1 dropped)."""
    states: dict[int, dict] = {}

    def record_state(step: int, record: dict | None) -> None:
        ckpt = list_checkpoints(cfg.run_dir)[-1]
        states[step] = json.loads((ckpt / "trainer_state.json").read_text())

    cfg = tiny_config(
        tmp_path,
        "accum",
        data=SMALL_EPOCH,
        train={"max_steps": None, "epochs": 2, "grad_accum": 2, "checkpoint_every": 1, "keep_checkpoints": 5},
    )
    result = train(cfg, callbacks=[record_state])
    assert result.steps == 4
    assert [(s["epoch"], s["batch_position"]) for s in (states[1], states[2], states[3])] == [(0, 2), (1, 0), (1, 2)]
    records = read_metrics(cfg.run_dir / "metrics.jsonl")
    assert [r["epoch"] for r in records] == [0, 0, 1, 1]
