"""Every result table in the README is the file its measuring command last wrote (docs/results/<name>.md,
``mvapp experiment ... --publish``): a hand-edited or stale row fails here."""

from __future__ import annotations

import json
from pathlib import Path

from multiview_app.experiments.publish import PAGES, TABLES, blocks

ROOT = Path(__file__).resolve().parents[1]


def test_readme_tables_equal_the_files_their_commands_wrote() -> None:
    for page in PAGES:
        found = blocks((ROOT / page).read_text())
        assert found, f"{page}: no published table blocks"
        for name, body in found.items():
            path = ROOT / TABLES / f"{name}.md"
            assert path.is_file(), (
                f"{page} holds table {name!r} but {path} does not exist: run its command with --publish"
            )
            assert body.strip() == path.read_text().strip(), (
                f"{page}: table {name!r} differs from {path}; re-run its command with --publish instead of editing it"
            )
            numbers = json.loads((ROOT / TABLES / f"{name}.json").read_text())
            assert numbers["command"] in body, f"{path}: the table must name the command that made it"
