"""experiments/: ensure_trained's policies (reuse, refuse-mismatch, resume, retrain) and the sweep grid."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from _train_helpers import tiny_config

import multiview_app.train.trainer as trainer
from multiview_app.experiments import POLICIES, TrainPolicy, ensure_trained
from multiview_app.experiments.sweeps import grid, sweep
from multiview_app.train.checkpoint import STATE_FILE, latest_checkpoint


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """Replaces the trainer: records each call's resume argument and writes nothing."""
    seen: list[dict] = []

    def fake_train(cfg, resume=None):
        seen.append({"run": cfg.run_dir, "resume": resume, "existed": cfg.run_dir.exists()})
        return SimpleNamespace(steps=4, final_loss=0.5, items_per_s=10.0)

    monkeypatch.setattr(trainer, "train", fake_train)
    return seen


def test_finished_run_is_reused_or_refused_on_a_config_mismatch(tmp_path: Path) -> None:
    cfg = tiny_config(tmp_path, "run", train={"max_steps": 3, "checkpoint_every": 0})
    first = ensure_trained(cfg, "reuse")
    model = cfg.run_dir / "model.safetensors"
    stamp = model.stat().st_mtime_ns
    assert not first.reused and first.steps == 3 and first.cpu_s is not None
    again = ensure_trained(cfg, "reuse")
    assert again.reused and again.steps == 3 and again.final_loss == pytest.approx(first.final_loss)
    assert again.cpu_s is None and model.stat().st_mtime_ns == stamp
    assert ensure_trained(cfg, "refuse-mismatch").reused  # same config: reused
    other = tiny_config(tmp_path, "run", optim={"lr": 0.01}, train={"max_steps": 3, "checkpoint_every": 0})
    assert ensure_trained(other, "reuse").reused  # reuse does not look at the config
    with pytest.raises(ValueError, match=r"finished with another config \(optim.lr: 0.003 -> 0.01\)"):
        ensure_trained(other, "refuse-mismatch")
    assert model.stat().st_mtime_ns == stamp


def test_interrupted_and_stale_folders_follow_the_policy(tmp_path: Path, calls: list[dict]) -> None:
    real = tiny_config(tmp_path, "run", train={"max_steps": 2, "checkpoint_every": 2})
    # an interrupted run: a checkpoint, no final model (built by hand; the trainer is replaced)
    interrupted = real.run_dir
    (interrupted / "checkpoints" / "step_00000002").mkdir(parents=True)
    (interrupted / "checkpoints" / "step_00000002" / STATE_FILE).write_text("{}")
    assert latest_checkpoint(interrupted) is not None
    assert not ensure_trained(real, "reuse").reused
    assert calls[-1] == {"run": interrupted, "resume": "latest", "existed": True}
    ensure_trained(real, "resume")
    assert calls[-1]["resume"] == "latest"
    ensure_trained(real, "retrain")  # the interrupted folder is removed, trained from scratch
    assert calls[-1] == {"run": interrupted, "resume": None, "existed": False}

    stale = tiny_config(tmp_path, "stale")
    stale.run_dir.mkdir(parents=True)
    (stale.run_dir / "config.yaml").write_text("{}")
    with pytest.raises(FileExistsError, match="unfinished run without checkpoint"):
        ensure_trained(stale, "resume")
    assert stale.run_dir.is_dir()  # never deleted under "resume"
    ensure_trained(stale, "reuse")
    assert calls[-1] == {"run": stale.run_dir, "resume": None, "existed": False}
    with pytest.raises(ValueError, match="unknown training policy 'nope'; available: reuse, refuse-mismatch"):
        ensure_trained(stale, "nope")


def test_empty_leftover_folders_are_trained_into_and_held_folders_refused(tmp_path: Path, calls: list[dict]) -> None:
    """A run killed while starting leaves an empty folder (or one with only its lock file): every policy
    trains into it, "resume" too (nothing is deleted). A folder whose lock another process holds is neither
    removed nor trained into, under any policy."""
    import os

    from multiview_app.train.resume import LOCK_FILE, RunLock

    empty = tiny_config(tmp_path, "empty")
    empty.run_dir.mkdir(parents=True)
    ensure_trained(empty, "resume")
    assert calls[-1] == {"run": empty.run_dir, "resume": None, "existed": True}
    (empty.run_dir / LOCK_FILE).write_text("pid 1\n")  # a lock file nobody holds
    ensure_trained(empty, "resume")
    assert calls[-1] == {"run": empty.run_dir, "resume": None, "existed": True}

    held = tiny_config(tmp_path, "held")
    (held.run_dir).mkdir(parents=True)
    (held.run_dir / "config.yaml").write_text("{}")
    with RunLock(held.run_dir):  # another writer (flock: a second open file conflicts, same process or not)
        assert RunLock.holder(held.run_dir) == f"pid {os.getpid()}"
        for policy in ("reuse", "retrain", "resume"):
            with pytest.raises(
                RuntimeError, match=rf"{held.run_dir} is in use by another process \(pid {os.getpid()}\)"
            ):
                ensure_trained(held, policy)
    assert (held.run_dir / "config.yaml").is_file() and calls[-1]["run"] == empty.run_dir  # untouched, not trained
    assert RunLock.holder(held.run_dir) is None
    ensure_trained(held, "reuse")  # released: the stale folder is removed and trained afresh
    assert calls[-1] == {"run": held.run_dir, "resume": None, "existed": False}
    assert POLICIES["retrain"] == TrainPolicy(finished="retrain", interrupted="restart", stale="remove")


def test_finished_run_is_retrained_under_retrain(tmp_path: Path, calls: list[dict]) -> None:
    cfg = tiny_config(tmp_path, "run")
    cfg.run_dir.mkdir(parents=True)
    (cfg.run_dir / "model.safetensors").write_bytes(b"")
    ensure_trained(cfg, "retrain")
    assert calls == [{"run": cfg.run_dir, "resume": None, "existed": False}]


def test_grid_is_first_axis_major_and_sweep_trains_in_order(tmp_path: Path, calls: list[dict]) -> None:
    points = grid(seed=[0, 1], loss=["a", "b"])
    assert points == [
        {"seed": 0, "loss": "a"},
        {"seed": 0, "loss": "b"},
        {"seed": 1, "loss": "a"},
        {"seed": 1, "loss": "b"},
    ]
    done = [
        (p, cfg.run_dir.name)
        for p, cfg, _ in sweep(points, lambda p: tiny_config(tmp_path, f"{p['loss']}_s{p['seed']}"), "reuse")
    ]
    assert [name for _, name in done] == ["a_s0", "b_s0", "a_s1", "b_s1"]
    assert [c["run"].name for c in calls] == ["a_s0", "b_s0", "a_s1", "b_s1"]
