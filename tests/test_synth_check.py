"""``mvapp experiment synth-check``: every check parses its own example and names a module with ``run``; a check
of real recordings without them says which folder it needs. The checks' numbers are tested on the real
recordings in tests/test_eeg_signal_stats.py and tests/test_night_structure.py."""

from __future__ import annotations

import importlib
import shlex
from pathlib import Path

import pytest

from multiview_app.cli import build_parser
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
