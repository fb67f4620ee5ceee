"""scripts/: every script is listed in scripts/README.md, none edits sys.path (the package is installed),
and none writes into docs/ unless the command line asks for it (defaults of output options)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
SCRIPT_FILES = sorted(p for p in SCRIPTS.iterdir() if p.suffix in {".py", ".sh"})


def test_every_script_is_in_the_index() -> None:
    index = (SCRIPTS / "README.md").read_text()
    missing = [p.name for p in SCRIPT_FILES if f"`{p.name}`" not in index]
    assert not missing, f"scripts/README.md does not list {missing}"
    listed = {line.split("`")[1] for line in index.splitlines() if line.startswith("| `")}
    assert not listed - {p.name for p in SCRIPT_FILES}, f"scripts/README.md lists missing files {listed}"


@pytest.mark.parametrize("path", [p for p in SCRIPT_FILES if p.suffix == ".py"], ids=lambda p: p.name)
def test_script_does_not_edit_sys_path_or_default_to_docs(path: Path) -> None:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", "") == "sys":
            pytest.fail(f"{path.name}:{node.lineno} uses sys.path")
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            for kw in node.keywords:
                if kw.arg == "default" and "docs" in {getattr(n, "value", None) for n in ast.walk(kw.value)}:
                    pytest.fail(f"{path.name}:{node.lineno}: an output option defaults into docs/")
