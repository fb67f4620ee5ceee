"""scripts/: every script (in any folder) is listed in scripts/README.md by its path under scripts/, every folder
of scripts/reproduce/ has a README, the benchmark runner's suites cover every bench script, each run with its own docs section, no script
edits sys.path (the package is installed), and none writes into docs/ unless the command line asks for it
(defaults of output options)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from _train_helpers import load_script

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
SCRIPT_FILES = sorted(p for p in SCRIPTS.rglob("*") if p.suffix in {".py", ".sh"} and "__pycache__" not in p.parts)


def test_every_script_is_in_the_index() -> None:
    index = (SCRIPTS / "README.md").read_text()
    names = {p.relative_to(SCRIPTS).as_posix() for p in SCRIPT_FILES}
    missing = sorted(name for name in names if f"`{name}`" not in index)
    assert not missing, f"scripts/README.md does not list {missing}"
    listed = {line.split("`")[1] for line in index.splitlines() if line.startswith("| `")}
    assert not listed - names, f"scripts/README.md lists missing files {sorted(listed - names)}"


def test_every_reproduction_folder_has_a_readme() -> None:
    folders = [p for p in (SCRIPTS / "reproduce").iterdir() if p.is_dir() and p.name != "__pycache__"]
    assert folders
    assert not [p.name for p in folders if not (p / "README.md").is_file()]


def test_bench_suites_cover_every_bench_script_and_docs_section_once() -> None:
    runner = load_script("bench/run", register=True)
    benches = [bench for benches in runner.SUITES.values() for bench in benches]
    on_disk = sorted(p.stem for p in (SCRIPTS / "bench").glob("bench_*.py"))
    assert sorted({bench.script for bench in benches}) == on_disk
    keys = [bench.key for bench in benches]
    assert len(keys) == len(set(keys)), keys  # one docs section per run of a script


@pytest.mark.parametrize(
    "path", [p for p in SCRIPT_FILES if p.suffix == ".py"], ids=lambda p: p.relative_to(SCRIPTS).as_posix()
)
def test_script_does_not_edit_sys_path_or_default_to_docs(path: Path) -> None:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", "") == "sys":
            pytest.fail(f"{path.name}:{node.lineno} uses sys.path")
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            for kw in node.keywords:
                if kw.arg == "default" and "docs" in {getattr(n, "value", None) for n in ast.walk(kw.value)}:
                    pytest.fail(f"{path.name}:{node.lineno}: an output option defaults into docs/")
