"""``mvapp experiment synth-check``: every check parses its own example and names a module with ``run``; a check
of real recordings without them says which folder it needs. The checks' numbers are tested on the real
recordings in tests/test_eeg_signal_stats.py and tests/test_night_structure.py."""

from __future__ import annotations

import importlib
import json
import shlex
from pathlib import Path

import pytest

from multiview_app.cli import build_parser, main
from multiview_app.experiments.synth_check import CHECKS
from multiview_app.experiments.synth_check.common import REAL_PSG_ENV, real_folder


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_every_check_parses_its_example_and_has_a_run(name: str) -> None:
    check = CHECKS[name]
    args = build_parser("experiment").parse_args(shlex.split(check.example)[1:])
    assert args.check == name and isinstance(args.out, Path)
    module = importlib.import_module(f"multiview_app.experiments.synth_check.{check.module}")
    assert callable(module.run)


def test_real_folder_names_what_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(REAL_PSG_ENV, raising=False)
    with pytest.raises(ValueError, match=r"--real-psg DIR \(or \$MVAPP_REAL_PSG\).*dreams-spindles/"):
        real_folder(None, "dreams-spindles")
    with pytest.raises(FileNotFoundError, match="sleep-edf-hypnograms"):
        real_folder(tmp_path, "sleep-edf-hypnograms")
    (tmp_path / "sleep-edf-hypnograms").mkdir()
    monkeypatch.setenv(REAL_PSG_ENV, str(tmp_path))
    assert real_folder(None, "sleep-edf-hypnograms") == tmp_path / "sleep-edf-hypnograms"


def test_physiology_check_end_to_end_on_a_short_night(tmp_path: Path) -> None:
    command = ["experiment", "synth-check", "physiology", "--out", str(tmp_path), "--subjects", "1", "--hours", "0.5"]
    assert main(command) == 0
    numbers = json.loads((tmp_path / "physiology_table.json").read_text())
    assert numbers["command"].startswith("mvapp experiment synth-check physiology")
    assert [n["record"] for n in numbers["nights"]] == ["tr03-0000"] and numbers["rows"]
    assert {"stage", "measure", "value", "low", "high", "flag", "minutes"} <= set(numbers["rows"][0])
    assert (tmp_path / "nights" / "tr03-0000.hea").is_file()  # kept: a second run reads it again
    text = (tmp_path / "physiology_table.md").read_text()
    header = next(line for line in text.splitlines() if line.startswith("| stage"))
    assert [cell.strip() for cell in header.strip("|").split("|")] == [
        "stage",
        "measure",
        "value",
        "published range",
        "flag",
        "minutes",
    ]
