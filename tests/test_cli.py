"""``mvapp``: config show, train -> eval end to end, and one clear error line (exit 2) per bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from _train_helpers import write_tiny_yaml
from PIL import Image

from multiview_app.cli import main

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def _error_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run ``mvapp argv``; assert exit code 2 and exactly one stderr line; return it."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    err = [line for line in err if line.startswith("mvapp: error:")]
    assert len(err) == 1, err
    return err[0]


def test_config_show_prints_resolved_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["config", "show", "--config", str(CONFIGS / "digits_m3g.yaml"), "loss.epsilon=0.1", "train.max_steps=50"])
        == 0
    )
    out = capsys.readouterr().out
    assert "name: m3g" in out and "epsilon: 0.1" in out and "max_steps: 50" in out and "name: digits_m3g" in out


@pytest.mark.slow
def test_train_then_eval_linear_probe(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_tiny_yaml(
        tmp_path / "tiny.yaml", tmp_path / "runs", train={"max_steps": 3}, eval={"linear_probe": True}
    )
    assert main(["train", "--config", str(config), "--name", "cli_run", "train.precision=bf16"]) == 0
    out = capsys.readouterr().out
    run = tmp_path / "runs" / "cli_run"
    assert f"outputs in {run}" in out and "random_init" in out
    assert "fp32" in out  # precision note on CPU
    first = json.loads((run / "eval" / "linear_probe.json").read_text())
    (run / "eval" / "linear_probe.json").unlink()
    assert main(["eval", "linear-probe", "--run", str(run), "--knn-k", "5"]) == 0
    out = capsys.readouterr().out
    assert f"wrote {run / 'eval' / 'linear_probe.json'}" in out
    again = json.loads((run / "eval" / "linear_probe.json").read_text())
    assert again["knn_k"] == 5
    assert again["results"]["trained"]["logreg_acc"] == pytest.approx(first["results"]["trained"]["logreg_acc"])
    # an existing run is not overwritten silently
    assert "already exists" in _error_line(capsys, ["train", "--config", str(config), "--name", "cli_run"])


def test_config_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = str(CONFIGS / "digits_infonce_pwe.yaml")
    assert "train.max_stpes: unknown key" in _error_line(
        capsys, ["config", "show", "--config", cfg, "train.max_stpes=3"]
    )
    assert "loss.taau: unknown parameter for loss 'infonce_pwe'; valid: tau" in _error_line(
        capsys, ["train", "--config", cfg, "loss.taau=1"]
    )
    assert "needs k >= 2 views" in _error_line(capsys, ["train", "--config", cfg, "views.k=1"])
    assert "config file not found" in _error_line(capsys, ["train", "--config", str(tmp_path / "nope.yaml")])
    assert "not a run folder" in _error_line(capsys, ["eval", "linear-probe", "--run", str(tmp_path)])


def _folder_config(tmp_path: Path, root: Path) -> str:
    return str(
        write_tiny_yaml(
            tmp_path / "folder.yaml",
            tmp_path / "runs",
            data={"adapter": "image_folder", "options": {"root": str(root), "load_size": 16, "max_bad_fraction": 0.2}},
        )
    )


def test_bad_data_folders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing"
    assert "does not exist" in _error_line(capsys, ["train", "--config", _folder_config(tmp_path, missing)])
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "has no images" in _error_line(capsys, ["train", "--config", _folder_config(tmp_path, empty)])
    # 3 of 6 images unreadable -> 50% > max_bad_fraction 0.2
    broken = tmp_path / "broken"
    for c in ("a", "b"):
        (broken / c).mkdir(parents=True)
        for i in range(2):
            Image.new("RGB", (8, 8), (i * 50, 0, 0)).save(broken / c / f"{i}.png")
    for i in range(3):
        (broken / "a" / f"bad{i}.png").write_bytes(b"not a png")
    line = _error_line(capsys, ["train", "--config", _folder_config(tmp_path, broken)])
    assert "unreadable" in line and "max_bad_fraction" in line


def test_console_script_exit_code_and_no_traceback(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "multiview_app.cli",
            "config",
            "show",
            "--config",
            str(CONFIGS / "digits_m3g.yaml"),
            "loss.epsiln=1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "mvapp: error: loss.epsiln: unknown parameter for loss 'm3g'; valid: epsilon, cost, tol, max_iter, warm_start, anderson, init_potentials, "
        "solver_block, backend"
    ]


def test_newcomer_messages_point_at_what_was_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 27's findings: --resume names the folder given; a missing extends target names the file that
    extends it; `mvapp train --help` lists the shipped configs and examples; `mvapp tune report --help` is the
    report's help, not the search's."""
    monkeypatch.chdir(tmp_path)
    line = _error_line(capsys, ["train", "--resume", "runs/nonexistent"])
    assert (
        f"no such checkpoint or run folder ({tmp_path / 'runs' / 'nonexistent'})" in line and "config.yaml" not in line
    )
    (tmp_path / "empty").mkdir()
    assert f"{tmp_path / 'empty'} is not a run folder" in _error_line(capsys, ["train", "--resume", "empty"])
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "config.yaml").write_text("lr: 0.1\n")  # another project's run folder
    line = _error_line(capsys, ["train", "--resume", "foreign"])
    assert f"{tmp_path / 'foreign' / 'config.yaml'} (the saved config of the run given to --resume)" in line, line
    (tmp_path / "child.yaml").write_text("extends: missing_base.yaml\n")
    line = _error_line(capsys, ["config", "show", "--config", str(tmp_path / "child.yaml")])
    assert f"{tmp_path / 'child.yaml'}: extends: missing_base.yaml -> {tmp_path / 'missing_base.yaml'}" in line
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    assert "examples:" in out and "digits_m3g.yaml" in out and "eeg_synthetic_m3g.yaml" in out
    with pytest.raises(SystemExit):
        main(["tune", "report", "--help"])
    out = capsys.readouterr().out
    assert out.startswith("usage: mvapp tune report") and "--study-name" in out and "--trials" not in out
    with pytest.raises(SystemExit):
        main(["tune", "search", "--help"])
    assert "--trials" in capsys.readouterr().out
