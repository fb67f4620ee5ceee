"""The synthetic PSG generator stays readable: no function or method in ``data/eeg/synth/`` exceeds 60 lines
(docstring included, as ``tests/test_trainer_function_length.py`` counts them)."""

from __future__ import annotations

import ast
from pathlib import Path

import multiview_app.data.eeg.synth as synth

MAX_LINES = 60
PACKAGE = Path(synth.__file__).parent


def test_no_synth_function_exceeds_60_lines() -> None:
    lengths: dict[str, int] = {}
    for path in sorted(PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lengths[f"{path.name}:{node.name}"] = node.end_lineno - node.lineno + 1
    assert "brain.py:synth_night" in lengths and "jobs.py:synth_psg" in lengths  # the parse saw the package
    too_long = {name: n for name, n in lengths.items() if n > MAX_LINES}
    assert not too_long, f"functions over {MAX_LINES} lines in data/eeg/synth/: {too_long}"
