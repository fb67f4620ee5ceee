"""Resume keeps the run's own config (issue 16 §1): config differences refused or logged, a run
stopped before its first checkpoint restarts from step 0, SIGTERM checkpoints and names the resume
command, and the loss state (FlatNCE's scheduled tau) survives a resume bit-exactly."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import torch
from _train_helpers import tiny_config
from safetensors.torch import load_file

from multiview_app.config import ConfigError
from multiview_app.train.checkpoint import list_checkpoints
from multiview_app.train.metrics import read_metrics
from multiview_app.train.resume import HISTORY_FILE, config_differences
from multiview_app.train.trainer import TrainingInterrupted, train

SMALL_EPOCH = {"options": {"load_size": 16, "test_fraction": 0.9}}  # 5 steps per epoch
# FlatNCE whose tau follows the ESS schedule: every training forward moves tau by 1 +- 1 %
SCHEDULED_TAU = {"name": "flatnce", "tau": 0.2, "ess_target": 0.5, "ess_rate": 0.01}


class Crash(RuntimeError):
    pass


def crash_at(crash_step: int):
    """A training callback that raises :class:`Crash` when step ``crash_step`` ends."""

    def crash(step: int, record: dict | None) -> None:
        if step == crash_step:
            raise Crash("simulated crash")

    return crash


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run_dir / "model.safetensors"))


def _assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys()
    for key in wa:
        torch.testing.assert_close(wa[key], wb[key], rtol=0, atol=0, msg=key)


def test_config_differences_are_listed_by_dotted_key() -> None:
    saved = {"loss": {"name": "m3g", "epsilon": 0.2}, "train": {"max_steps": 200}}
    given = {"loss": {"name": "m3g", "epsilon": 0.1}, "train": {"max_steps": 400, "extra": 1}}
    assert config_differences(saved, given) == {
        "loss.epsilon": (0.2, 0.1),
        "train.extra": ("(unset)", 1),
        "train.max_steps": (200, 400),
    }


@pytest.mark.slow
def test_tau_scheduled_run_crashed_and_sigtermed_resumes_to_the_same_weights(tmp_path: Path) -> None:
    common = {"data": SMALL_EPOCH, "loss": SCHEDULED_TAU}
    section = {"max_steps": 7, "checkpoint_every": 2}
    full = train(tiny_config(tmp_path, "full", train=section, **common))
    taus = [r["stats/tau"] for r in read_metrics(full.run_dir / "metrics.jsonl")]
    assert len(set(taus)) == len(taus)  # the schedule really moves tau every step

    # crash after step 5: resume from the step-4 checkpoint, whose loss state holds the scheduled tau
    crashed = tiny_config(tmp_path, "crashed", train=section, **common)
    with pytest.raises(Crash):
        train(crashed, callbacks=[crash_at(5)])
    ckpt = list_checkpoints(crashed.run_dir)[-1]
    loss_state = torch.load(ckpt / "loss_state_0.pt", weights_only=True)
    assert loss_state["_extra_state"]["tau"] == pytest.approx(taus[4])  # tau used by step 5 = after step 4
    resumed = train(crashed, resume="latest")
    _assert_same_weights(full.run_dir, resumed.run_dir)

    # SIGTERM during step 3: the step finishes, a checkpoint is written, TrainingInterrupted says how to resume
    stopped = tiny_config(tmp_path, "stopped", train=section, **common)

    def terminate(step: int, record: dict | None) -> None:
        if step == 3:
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(TrainingInterrupted, match=r"after step 3 of 7.*resume with: mvapp train --resume") as info:
        train(stopped, callbacks=[terminate])
    assert info.value.exit_code == 128 + signal.SIGTERM
    assert [p.name for p in list_checkpoints(stopped.run_dir)] == ["step_00000002", "step_00000003"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers restored
    resumed = train(stopped, resume="latest")
    _assert_same_weights(full.run_dir, resumed.run_dir)
    assert [r["step"] for r in read_metrics(resumed.run_dir / "metrics.jsonl")] == list(range(1, 8))


def test_resume_refuses_a_different_config_and_logs_accepted_safe_changes(tmp_path: Path) -> None:
    cfg = tiny_config(tmp_path, "run", train={"max_steps": 3, "checkpoint_every": 2})
    train(cfg)
    saved_text = (cfg.run_dir / "config.yaml").read_text()
    changed = tiny_config(
        tmp_path, "run", overrides=("loss.tau=0.3", "optim.lr=0.01"), train={"max_steps": 3, "checkpoint_every": 2}
    )
    with pytest.raises(ConfigError, match=r"loss\.tau: 0\.2 -> 0\.3; optim\.lr: 0\.003 -> 0\.01"):
        train(changed, resume="latest")
    longer = tiny_config(tmp_path, "run", train={"max_steps": 5, "checkpoint_every": 2})
    with pytest.raises(ConfigError, match=r"train\.max_steps: 3 -> 5; pass --accept-config-changes"):
        train(longer, resume="latest")
    assert (cfg.run_dir / "config.yaml").read_text() == saved_text and not (cfg.run_dir / HISTORY_FILE).exists()
    result = train(longer, resume="latest", accept_config_changes=True)
    assert result.steps == 5
    history = [json.loads(line) for line in (cfg.run_dir / HISTORY_FILE).read_text().splitlines()]
    assert history[0]["changes"] == {"train.max_steps": {"saved": 3, "given": 5}} and history[0]["resumed_at_step"] == 3
    assert "max_steps: 5" in (cfg.run_dir / "config.yaml").read_text()


def test_run_stopped_before_its_first_checkpoint_restarts_from_step_zero(tmp_path: Path) -> None:
    cfg = tiny_config(tmp_path, "early", train={"max_steps": 3, "checkpoint_every": 10})

    def crash(step: int, record: dict | None) -> None:
        raise Crash("killed before any checkpoint")

    with pytest.raises(Crash):
        train(cfg, callbacks=[crash])
    assert list_checkpoints(cfg.run_dir) == [] and (cfg.run_dir / "config.yaml").is_file()
    result = train(cfg, resume="latest")
    assert result.steps == 3 and any("starting it from step 0" in note for note in result.notes)
    assert [r["step"] for r in read_metrics(cfg.run_dir / "metrics.jsonl")] == [1, 2, 3]
    fresh = train(tiny_config(tmp_path, "fresh", train={"max_steps": 3, "checkpoint_every": 10}))
    _assert_same_weights(fresh.run_dir, result.run_dir)


def test_interrupt_during_a_checkpoint_write_keeps_the_older_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second Ctrl-C while the step-2 checkpoint is being written: the half-written temp folder is
    removed, step 1 stays the newest checkpoint and resuming from it works."""
    from accelerate import Accelerator

    real_save = Accelerator.save_state
    calls = {"n": 0}

    def save_state(self, output_dir: str, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            (Path(output_dir) / "model.safetensors").write_bytes(b"half")
            raise KeyboardInterrupt
        return real_save(self, output_dir=output_dir, **kwargs)

    monkeypatch.setattr(Accelerator, "save_state", save_state)
    cfg = tiny_config(tmp_path, "ctrl_c", train={"max_steps": 4, "checkpoint_every": 1})
    with pytest.raises(KeyboardInterrupt):
        train(cfg)
    assert sorted(p.name for p in (cfg.run_dir / "checkpoints").iterdir()) == ["step_00000001"]
    monkeypatch.setattr(Accelerator, "save_state", real_save)
    assert train(cfg, resume="latest").steps == 4


def test_accepted_change_is_not_recorded_when_the_resume_fails(tmp_path: Path) -> None:
    """Shortening the run below its checkpoint is refused after the checkpoint is read; the saved config
    and the history stay as they were."""
    cfg = tiny_config(tmp_path, "short", train={"max_steps": 5, "checkpoint_every": 4})
    with pytest.raises(Crash):
        train(cfg, callbacks=[lambda step, record: (_ for _ in ()).throw(Crash()) if step == 5 else None])
    saved = (cfg.run_dir / "config.yaml").read_text()
    shorter = tiny_config(tmp_path, "short", train={"max_steps": 2, "checkpoint_every": 4})
    with pytest.raises(ValueError, match=r"step_00000004 is at step 4, beyond the run's 2 steps"):
        train(shorter, resume="latest", accept_config_changes=True)
    assert (cfg.run_dir / "config.yaml").read_text() == saved and not (cfg.run_dir / HISTORY_FILE).exists()


BYOL_TEACHER = {
    "encoders": {"image": {"name": "small_cnn", "width": 8, "num_features": 16}},
    "projector": {"hidden_dim": 32, "out_dim": 16},
    "predictor": {"hidden_dim": 32},
    "teacher": {"enabled": True, "momentum_base": 0.9, "views": "all"},
}


def test_checkpoints_hold_no_pickle_and_teacher_and_schedule_resume_exactly(tmp_path: Path) -> None:
    """LR schedule and EMA teacher are weights-only files (no ``custom_checkpoint_*.pkl``, which
    accelerate would unpickle with ``weights_only=False``); a resumed BYOL run equals the full run."""
    common = {"loss": {"name": "byol_pwe"}, "model": BYOL_TEACHER, "optim": {"warmup_steps": 3}}
    section = {"max_steps": 5, "checkpoint_every": 2}
    full = train(tiny_config(tmp_path, "full", train=section, **common))
    crashed = tiny_config(tmp_path, "crashed", train=section, **common)
    with pytest.raises(Crash):
        train(crashed, callbacks=[crash_at(3)])
    ckpt = list_checkpoints(crashed.run_dir)[-1]
    assert sorted(p.name for p in ckpt.glob("*.pkl")) == ["random_states_0.pkl"]  # RNG: read weights-only by accelerate
    assert {"state_lr_schedule.pt", "state_ema_teacher.pt"} <= {p.name for p in ckpt.iterdir()}
    for name in ("state_lr_schedule.pt", "state_ema_teacher.pt"):
        torch.load(ckpt / name, weights_only=True)
    resumed = train(crashed, resume="latest")
    _assert_same_weights(full.run_dir, resumed.run_dir)

    # a checkpoint of the older format (schedule pickled by accelerate) is refused, not half-restored
    ckpt = list_checkpoints(crashed.run_dir)[0]  # step 4 (the final one, step 5, is kept beside it)
    (ckpt / "state_lr_schedule.pt").rename(ckpt / "custom_checkpoint_0.pkl")
    with pytest.raises(ValueError, match=r"state_lr_schedule\.pt.*custom_checkpoint_0\.pkl.*not loaded"):
        train(crashed, resume=str(ckpt))


def test_extending_a_finished_run_continues_from_its_final_state_and_keeps_the_finished_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The final state is a full checkpoint; ``--resume RUN train.max_steps=<more> --accept-config-changes``
    starts from it (step counter, weights), never from an older periodic checkpoint, and moves the finished
    model into ``final_step<N>/`` instead of overwriting it."""
    from safetensors import safe_open

    from multiview_app.train.trainer import Trainer

    common = {"model": BYOL_TEACHER, "loss": {"name": "byol_pwe"}}  # teacher state in the checkpoint too
    cfg = tiny_config(tmp_path, "run", train={"max_steps": 3, "checkpoint_every": 2}, **common)
    train(cfg)
    assert [p.name for p in list_checkpoints(cfg.run_dir)] == ["step_00000002", "step_00000003"]
    final_ckpt = list_checkpoints(cfg.run_dir)[-1]
    assert {
        "model.safetensors",
        "optimizer.bin",
        "random_states_0.pkl",
        "state_lr_schedule.pt",
        "state_ema_teacher.pt",
        "trainer_state.json",
    } <= {p.name for p in final_ckpt.iterdir()}
    finished = _weights(cfg.run_dir)
    finished_bytes = (cfg.run_dir / "model.safetensors").read_bytes()
    with safe_open(str(cfg.run_dir / "model.safetensors"), framework="pt") as handle:
        assert handle.metadata() == {"step": "3"}

    at_start: dict[str, torch.Tensor] = {}
    real_run_epochs = Trainer._run_epochs

    def record_start(self, accelerator, plan, parts, at):  # the weights the extension's first step starts from
        at_start.update(
            {k: v.detach().clone() for k, v in accelerator.unwrap_model(parts.step_module).model.state_dict().items()}
        )
        at_start["__step"] = torch.tensor(at.step)
        return real_run_epochs(self, accelerator, plan, parts, at)

    monkeypatch.setattr(Trainer, "_run_epochs", record_start)
    longer = tiny_config(tmp_path, "run", train={"max_steps": 5, "checkpoint_every": 2}, **common)
    result = train(longer, resume=str(cfg.run_dir), accept_config_changes=True)
    assert int(at_start.pop("__step")) == 3 and result.steps == 5
    assert at_start.keys() == finished.keys()
    for key in finished:
        torch.testing.assert_close(at_start[key], finished[key], rtol=0, atol=0, msg=key)
    assert any(f"resumed from {final_ckpt} (step 3" in note for note in result.notes)
    kept = cfg.run_dir / "final_step3"
    assert any(f"the finished model is kept in {kept}/" in note for note in result.notes)
    assert (kept / "model.safetensors").read_bytes() == finished_bytes and (kept / "model.json").is_file()
    assert [r["step"] for r in read_metrics(cfg.run_dir / "metrics.jsonl")] == [1, 2, 3, 4, 5]
    with safe_open(str(cfg.run_dir / "model.safetensors"), framework="pt") as handle:
        assert handle.metadata() == {"step": "5"}
    assert [p.name for p in list_checkpoints(cfg.run_dir)] == ["step_00000004", "step_00000005"]


def test_extending_a_finished_run_without_a_final_checkpoint_is_refused(tmp_path: Path) -> None:
    """A run written before the final state became a checkpoint (newest checkpoint older than its model):
    extending it would silently retrain from the older checkpoint; refused, naming the explicit way."""
    cfg = tiny_config(tmp_path, "old", train={"max_steps": 3, "checkpoint_every": 2})
    train(cfg)
    import shutil

    shutil.rmtree(list_checkpoints(cfg.run_dir)[-1])  # as an older version left it: step 2 only
    before = (cfg.run_dir / "model.safetensors").read_bytes()
    longer = tiny_config(tmp_path, "old", train={"max_steps": 5, "checkpoint_every": 2})
    with pytest.raises(
        ValueError,
        match=r"finished at step 3 but its newest checkpoint is .*step_00000002 \(step 2\).*"
        r"name it: mvapp train --resume .*step_00000002",
    ):
        train(longer, resume="latest", accept_config_changes=True)
    assert (cfg.run_dir / "model.safetensors").read_bytes() == before and not (cfg.run_dir / HISTORY_FILE).exists()
    # naming the older checkpoint retrains steps 3-5 on purpose and still keeps the finished model
    result = train(longer, resume=str(list_checkpoints(cfg.run_dir)[-1]), accept_config_changes=True)
    assert result.steps == 5 and (cfg.run_dir / "final_step3" / "model.safetensors").read_bytes() == before


def test_the_final_message_counts_this_process_steps_and_the_runs_total(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A resumed run reports the steps this process ran (start -> end) and the run's total steps and training
    time (earlier processes' time is kept in the checkpoint); a new run reports its steps once."""
    from multiview_app.cli import main
    from multiview_app.train.cli import trained_line

    section = {"max_steps": 4, "checkpoint_every": 2}
    crashed = tiny_config(tmp_path, "run", train=section)
    with pytest.raises(Crash):
        train(crashed, callbacks=[crash_at(3)])
    ckpt = list_checkpoints(crashed.run_dir)[-1]
    before = json.loads((ckpt / "trainer_state.json").read_text())["train_time_s"]
    assert ckpt.name == "step_00000002" and before > 0

    assert main(["train", "--resume", str(crashed.run_dir)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("trained "))
    assert line.startswith("trained 2 steps (2 -> 4) in ") and "; the run: 4 steps in " in line

    longer = tiny_config(tmp_path, "run", train={"max_steps": 5, "checkpoint_every": 2})
    result = train(longer, resume=str(crashed.run_dir), accept_config_changes=True)
    assert (result.start_step, result.steps_run, result.steps) == (4, 1, 5)
    assert result.run_time_s is not None and result.run_time_s > before + result.wall_time_s
    assert trained_line(result).startswith("trained 1 step (4 -> 5) in ")

    fresh = train(tiny_config(tmp_path, "fresh", train={"max_steps": 2, "checkpoint_every": 0}))
    assert fresh.start_step == 0 and fresh.run_time_s == pytest.approx(fresh.wall_time_s)
    assert trained_line(fresh).startswith("trained 2 steps in ") and "the run" not in trained_line(fresh)
