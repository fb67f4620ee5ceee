"""Domain generalization's "train unless done" (pretraining and ERM runs): a finished run is reused as it
is (nothing trained, no timing), an interrupted one resumes from its latest checkpoint, a folder with
neither is refused (never deleted), and a finished run whose saved config differs is reused as it is."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from _train_helpers import tiny_config

import multiview_app.train.trainer as trainer
from multiview_app.experiments.domains import ensure_pretrained
from multiview_app.train.checkpoint import STATE_FILE


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
    monkeypatch.setattr(
        trainer,
        "train",
        lambda c, resume=None: (
            calls.append({"run": c.run_dir, "resume": resume, "existed": c.run_dir.exists()})
            or SimpleNamespace(steps=2, final_loss=0.5, items_per_s=1.0)
        ),
    )
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


def test_experiment_reuses_finished_pretraining_and_erm_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The experiments-level path (train_and_evaluate): once a run and its ERM baseline are finished, a new
    evaluation of them trains nothing (the trainer would raise) and scores the same models."""
    import json

    from _domain_cases import tiny_domain_config

    from multiview_app.data.domains.synth import synth_domains
    from multiview_app.experiments.domains import train_and_evaluate

    root = tmp_path / "digits"
    synth_domains(root, seed=0, limit=40)
    config = tiny_domain_config(
        root,
        tmp_path / "tiny.yaml",
        width=4,
        num_features=8,
        loss={"name": "infonce_pwe", "tau": 0.2},
        train={"max_steps": 2, "batch_size": 8, "log_every": 1, "checkpoint_every": 1},
    )
    out = tmp_path / "dg"
    [first] = train_and_evaluate(config, out, ["sketch"], [0], erm_steps=2, progress=False)
    assert first["pretrain_s"] is not None and first["erm"]["steps"] == 2
    run_dir = out / "infonce_pwe_sketch_s0"
    (run_dir / "eval" / "domain_generalization.json").unlink()  # the evaluation is redone, the training is not

    def no_training(cfg, resume=None):
        raise AssertionError(f"trained {cfg.run_dir} again")

    monkeypatch.setattr(trainer, "train", no_training)
    [again] = train_and_evaluate(config, out, ["sketch"], [0], erm_steps=2, progress=False)
    assert again["pretrain_s"] is None and again["pretrain_cpu_s"] is None
    for encoder in ("trained", "random_init", "erm"):
        assert again["results"][encoder]["five_vs_one"] == first["results"][encoder]["five_vs_one"], encoder
    assert again["reference_ids"] == first["reference_ids"] and again["erm"] == first["erm"]
    saved = json.loads((run_dir / "eval" / "domain_generalization.json").read_text())
    assert saved["pretrain_s"] is None
    # the evaluator checks that an ERM folder handed to it is this run's baseline (another seed's is refused)
    from multiview_app.eval.erm import erm_run_summary
    from multiview_app.experiments.domains import run_config

    [erm_run] = list((out / "erm").iterdir())
    summary = erm_run_summary(run_config(config, out, "sketch", 0, "generalization"), erm_run)
    assert {k: v for k, v in summary.items() if k != "key"} == {
        k: v for k, v in first["erm"].items() if k != "selected_step"
    }
    with pytest.raises(ValueError, match="not the ERM baseline of this run"):
        erm_run_summary(run_config(config, out, "sketch", 1, "generalization"), erm_run)


def test_old_eval_spelling_forwards_to_the_experiment_command() -> None:
    from multiview_app.cli import build_parser, forward
    from multiview_app.experiments.cli import run_domain_generalization

    argv = ["eval", "domain-generalization", "--run", "out", "--config", "c.yaml", "--seeds", "0,1"]
    assert forward(argv) == ["experiment", *argv[1:]]
    assert forward(["eval", "linear-probe", "--run", "domain-generalization"]) == [
        "eval",
        "linear-probe",
        "--run",
        "domain-generalization",
    ]
    args = build_parser("experiment").parse_args(forward(argv))
    assert args.func is run_domain_generalization and args.seeds == [0, 1] and args.threads == 1


def test_eval_help_names_the_moved_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    from multiview_app.cli import main

    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    help_text = "".join(capsys.readouterr().out.split())  # argparse wraps lines (also at hyphens)
    assert "mvappevaldomain-generalization(nowmvappexperimentdomain-generalization" in help_text
