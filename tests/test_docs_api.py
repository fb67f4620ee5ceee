"""The API reference renders the numpy-style docstrings as sections: ``mkdocs.yml`` parses them as ``numpy``,
and the losses page built with the project's own mkdocstrings options shows ``Parameters`` and ``Returns`` as
section tables, not as text with underlines. The build needs the ``docs`` extra (skipped without it)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _python_handler_options() -> dict:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    plugins = {next(iter(p)): p[next(iter(p))] for p in config["plugins"] if isinstance(p, dict)}
    return plugins["mkdocstrings"]["handlers"]["python"]["options"]


def test_the_api_reference_parses_numpy_docstrings() -> None:
    assert _python_handler_options()["docstring_style"] == "numpy"


def test_losses_page_renders_parameters_and_returns_as_sections(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings_handlers.python")
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    docs = tmp_path / "docs" / "api"
    docs.mkdir(parents=True)
    shutil.copy(ROOT / "docs" / "api" / "losses.md", docs / "losses.md")
    (tmp_path / "mkdocs.yml").write_text(
        yaml.safe_dump(
            {
                "site_name": "api page",
                "docs_dir": "docs",
                "site_dir": "site",
                "plugins": [
                    {
                        "mkdocstrings": {
                            "handlers": {"python": {"paths": [str(ROOT)], "options": _python_handler_options()}}
                        }
                    }
                ],
            }
        )
    )
    build(load_config(str(tmp_path / "mkdocs.yml"), strict=True))
    page = (tmp_path / "site" / "api" / "losses" / "index.html").read_text()
    titles = re.findall(r'doc-section-title">\s*([A-Za-z]+)', page)
    assert titles.count("Parameters") >= 5 and titles.count("Returns") >= 5, sorted(set(titles))
    assert not re.search(r"Parameters\s*-{4,}|Returns\s*-{4,}", re.sub(r"<[^>]+>", " ", page))  # no raw underlines
