"""What a command shows: plain progress lines off a terminal (no carriage-return flood), notes held
until the command's first output and dropped when it fails (exactly one stderr line on bad input), and
extending a finished run through the console script (the kept model is named in the output)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _train_helpers import write_tiny_yaml

from multiview_app import console

ROOT = Path(__file__).resolve().parents[1]


def _mvapp(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MVAPP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "multiview_app.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=600,
    )


def test_plain_progress_prints_periodic_lines_without_carriage_returns(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(console, "PLAIN_EVERY_S", 1e9)
    bar = console.progress(total=200, desc="train x", unit="step", file=out)
    assert isinstance(bar, console.PlainProgress)  # a StringIO is no terminal
    for _ in range(200):
        bar.update(1)
    bar.set_postfix(loss="0.5000")
    bar.close()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue() and 9 <= len(lines) <= 11  # every 10 % and one at the end
    assert lines[0].startswith("train x: 20/200 step (10%)")
    assert lines[-1].startswith("train x: 200/200 step (100%)") and lines[-1].endswith("loss=0.5000")
    assert console.progress(range(3), disable=True, file=out).__class__.__name__ == "_Silent"
    assert list(console.progress(range(3), file=io.StringIO())) == [0, 1, 2]


def test_held_notes_print_before_the_first_output_and_are_dropped_on_failure(
    capsys: pytest.CaptureFixture[str],
) -> None:
    console.hold()
    console.info("torch threads: 1")
    print("result")
    console.release()
    assert capsys.readouterr().out == "torch threads: 1\nresult\n"
    console.hold()
    console.info("torch threads: 1")
    console.discard()
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(
    "args",
    [
        ("eval", "sleep-staging", "--run", "no_such_run"),
        ("export-model", "--run", "no_such_run", "--out", "out"),
        ("train", "--resume", "no_such_run"),
        ("train", "--config", "configs/digits_m3g.yaml", "train.max_steps=-1"),
    ],
)
def test_bad_input_prints_exactly_one_line_and_no_notes(args: tuple[str, ...], tmp_path: Path) -> None:
    """The thread choice (and any other note) is not printed before an error: one line, on stderr."""
    args = tuple(str(ROOT / a) if a.startswith("configs/") else a for a in args)
    proc = _mvapp(*args, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1 and proc.stderr.startswith("mvapp: error:"), proc.stderr


def test_training_off_a_terminal_logs_plain_lines_and_extends_from_the_final_state(tmp_path: Path) -> None:
    config = write_tiny_yaml(
        tmp_path / "tiny.yaml", tmp_path / "runs", train={"max_steps": 3, "seed": 0, "log_every": 1}
    )
    first = _mvapp("train", "--config", str(config), "--name", "run", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "\r" not in first.stderr and "train run: 3/3 step (100%)" in first.stderr
    assert first.stdout.startswith("torch threads: ")  # held until training started, then printed
    run = tmp_path / "runs" / "run"
    again = _mvapp("train", "--resume", str(run), "train.max_steps=5", "--accept-config-changes", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert f"resumed from {run / 'checkpoints' / 'step_00000003'} (step 3" in again.stdout
    assert f"the finished model is kept in {run / 'final_step3'}/" in again.stdout
    assert "train run: 5/5 step (100%)" in again.stderr and "\r" not in again.stderr


def test_an_interrupted_experiment_says_to_rerun_the_experiment_not_the_sub_run() -> None:
    import argparse
    import signal

    from multiview_app.experiments.cli import resumable
    from multiview_app.train.trainer import TrainingInterrupted

    def run(args: argparse.Namespace) -> int:
        raise TrainingInterrupted(
            "interrupted (SIGINT) after step 3 of 7; checkpoint runs/dg/m3g_sketch_s1/checkpoints/"
            "step_00000003; resume with: mvapp train --resume runs/dg/m3g_sketch_s1",
            signal.SIGINT,
        )

    line = [
        "experiment",
        "domain-generalization",
        "--config",
        "configs/domains_digits_m3g.yaml",
        "--run",
        "runs/dg",
        "--seeds",
        "0,1",
    ]
    with pytest.raises(TrainingInterrupted) as info:
        resumable(run)(argparse.Namespace(command_line=line))
    message = str(info.value)
    assert message.startswith("interrupted (SIGINT) after step 3 of 7; checkpoint runs/dg/m3g_sketch_s1/")
    assert message.endswith(
        "mvapp experiment domain-generalization --config configs/domains_digits_m3g.yaml --run runs/dg --seeds 0,1"
    )
    assert "mvapp train --resume" not in message and info.value.exit_code == 128 + signal.SIGINT


def test_sleep_staging_an_image_run_names_what_to_do_instead(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from _train_helpers import tiny_config

    from multiview_app.cli import main
    from multiview_app.train.trainer import train

    run = train(tiny_config(tmp_path, "digits", train={"max_steps": 1})).run_dir
    capsys.readouterr()
    assert main(["eval", "sleep-staging", "--run", str(run)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.splitlines()) == 1
    assert "has no EEG encoder" in captured.err and "--cache" not in captured.err
    assert "mvapp eval linear-probe" in captured.err and "configs/eeg_sleepedf_m3g.yaml" in captured.err
