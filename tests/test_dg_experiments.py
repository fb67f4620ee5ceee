"""Domain generalization's "train unless done" (pretraining and ERM runs): a finished run is reused as it
is (nothing trained, no timing), an interrupted one resumes from its latest checkpoint, a folder with
neither is refused (never deleted), and a finished run whose saved config differs is reused as it is."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

import multiview_app.train.trainer as trainer
from multiview_app.eval.domain_generalization import ensure_pretrained
from multiview_app.train.checkpoint import STATE_FILE

from _train_helpers import tiny_config


def test_finished_run_is_reused_and_an_interrupted_one_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tiny_config(tmp_path, "run", train={"max_steps": 2, "checkpoint_every": 0})
    wall, cpu = ensure_pretrained(cfg, progress=False)
    assert wall is not None and wall > 0 and cpu is not None
    model = cfg.run_dir / "model.safetensors"
    stamp = model.stat().st_mtime_ns
    assert ensure_pretrained(cfg, progress=False) == (None, None)  # finished: reused, nothing trained
    other = tiny_config(tmp_path, "run", optim={"lr": 0.01}, train={"max_steps": 2, "checkpoint_every": 0})
    assert ensure_pretrained(other, progress=False) == (None, None)  # a differing config is not looked at
    assert model.stat().st_mtime_ns == stamp

    calls: list[dict] = []
    monkeypatch.setattr(trainer, "train", lambda c, resume=None: calls.append(
        {"run": c.run_dir, "resume": resume, "existed": c.run_dir.exists()}) or SimpleNamespace(
        steps=2, final_loss=0.5, items_per_s=1.0))
    interrupted = tiny_config(tmp_path, "interrupted")
    (interrupted.run_dir / "checkpoints" / "step_00000002").mkdir(parents=True)
    (interrupted.run_dir / "checkpoints" / "step_00000002" / STATE_FILE).write_text("{}")
    wall, _ = ensure_pretrained(interrupted, progress=False)
    assert wall is not None and calls == [{"run": interrupted.run_dir, "resume": "latest", "existed": True}]

    stale = tiny_config(tmp_path, "stale")
    stale.run_dir.mkdir(parents=True)
    (stale.run_dir / "config.yaml").write_text("{}")
    with pytest.raises(FileExistsError, match="unfinished run without checkpoint"):
        ensure_pretrained(stale, progress=False)
    assert stale.run_dir.is_dir() and len(calls) == 1  # never deleted, nothing trained
