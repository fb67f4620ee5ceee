"""Result tables written by the command that measures them.

A measuring command (``mvapp experiment ... --publish``) writes its table to ``docs/results/<name>.md``
(with the numbers in ``<name>.json``) and copies it into every page holding the block
``<!-- table: <name> -->`` ... ``<!-- /table -->`` (the README). ``tests/test_docs_tables.py`` checks that each
block equals its file, so a hand-edited or stale row fails CI.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

TABLES = Path("docs") / "results"
"""Where the published tables live, relative to the repository root."""
PAGES = (Path("README.md"),)
"""The pages whose table blocks are kept equal to the published files."""
BLOCK = re.compile(r"<!-- table: (?P<name>[\w-]+) -->\n(?P<body>.*?)\n<!-- /table -->", re.DOTALL)


def blocks(text: str) -> dict[str, str]:
    """``{name: body}`` of every table block in a page's text."""
    return {m["name"]: m["body"] for m in BLOCK.finditer(text)}


def replace_block(text: str, name: str, body: str, page: Path) -> str:
    """``text`` with block ``name``'s body replaced; ``page`` names the file in the error when it has none."""
    if name not in blocks(text):
        raise ValueError(f"{page}: no block '<!-- table: {name} -->' ... '<!-- /table -->' to write the table into")
    pattern = re.compile(rf"(<!-- table: {re.escape(name)} -->\n).*?(\n<!-- /table -->)", re.DOTALL)
    return pattern.sub(lambda m: m[1] + body.strip("\n") + m[2], text, count=1)


def publish(name: str, markdown: str, data: dict[str, Any], root: Path) -> list[Path]:
    """Write ``docs/results/<name>.md`` / ``.json`` under ``root`` and copy the table into every page of
    :data:`PAGES` that has its block; returns the files written."""
    out = root / TABLES
    out.mkdir(parents=True, exist_ok=True)
    written = [out / f"{name}.md", out / f"{name}.json"]
    written[0].write_text(markdown.strip("\n") + "\n")
    written[1].write_text(json.dumps(data, indent=1, default=str) + "\n")
    for page in PAGES:
        path = root / page
        text = path.read_text()
        if name in blocks(text):
            path.write_text(replace_block(text, name, markdown, page))
            written.append(path)
    return written


__all__ = ["BLOCK", "PAGES", "TABLES", "blocks", "publish", "replace_block"]
