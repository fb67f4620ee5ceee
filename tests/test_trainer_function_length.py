"""The trainer stays readable: no function or method in ``train/trainer.py`` exceeds 60 lines."""

from __future__ import annotations

import ast
import inspect

from multiview_app.train import trainer

MAX_LINES = 60


def test_no_trainer_function_exceeds_60_lines() -> None:
    tree = ast.parse(inspect.getsource(trainer))
    lengths = {
        node.name: node.end_lineno - node.lineno + 1
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    assert "_run_epochs" in lengths and "_optimizer_step" in lengths  # the parse saw the trainer's methods
    too_long = {name: n for name, n in lengths.items() if n > MAX_LINES}
    assert not too_long, f"functions over {MAX_LINES} lines in train/trainer.py: {too_long}"
