"""The package stays readable: no function or method in ``multiview_app/`` exceeds 60 lines (decorators left out,
signature and docstring included). The test walks every module's AST and names each offender as ``path:qualname``.
There is no allowlist: a long function anywhere fails the test.
"""

from __future__ import annotations

import ast
from pathlib import Path

import multiview_app

MAX_LINES = 60
PACKAGE = Path(multiview_app.__file__).parent


def function_lengths(path: Path) -> dict[str, int]:
    """``{qualname: lines}`` of every function and method in the module at ``path`` (nested ones included, named
    ``outer.inner``; a method ``Class.method``)."""
    lengths: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lengths[prefix + child.name] = child.end_lineno - child.lineno + 1
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text(), filename=str(path)), "")
    return lengths


def package_lengths() -> dict[str, int]:
    """``{"path:qualname": lines}`` over every module under ``multiview_app/`` (path relative to the package)."""
    return {
        f"{path.relative_to(PACKAGE).as_posix()}:{name}": n
        for path in sorted(PACKAGE.rglob("*.py"))
        for name, n in function_lengths(path).items()
    }


def test_function_lengths_see_nested_functions_and_methods(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "class A:\n    def m(self):\n        def inner():\n            pass\n\n\ndef f():\n    return 1\n"
    )
    assert function_lengths(module) == {"A.m": 3, "A.m.inner": 2, "f": 2}


def test_no_package_function_exceeds_60_lines() -> None:
    lengths = package_lengths()
    # the walk saw the package, its subpackages and methods
    assert {"train/trainer.py:Trainer.fit", "data/eeg/synth/brain.py:synth_night"} <= set(lengths)
    too_long = {name: n for name, n in lengths.items() if n > MAX_LINES}
    assert not too_long, f"functions over {MAX_LINES} lines (split them by meaning): {too_long}"
