"""A benchmark suite's tables into its marked section of docs/benchmarks.md (torch-free, so the suite runner
``scripts/bench/run.py`` stays light).

Every bench script owns one section of the docs page, delimited by two marker lines::

    <!-- bench:bench_losses -->
    ... replaced by each ``run.py SUITE --write-docs`` ...
    <!-- /bench:bench_losses -->

Only the text between a script's two markers changes; the prose around them is the maintainers'.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

from .fileio import atomic_write_text

DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
"""The benchmarks page of the documentation site."""


def markers(key: str) -> tuple[str, str]:
    """The opening and closing marker lines of the section of bench script ``key`` (its file stem)."""
    return f"<!-- bench:{key} -->", f"<!-- /bench:{key} -->"


def host_line() -> str:
    """The machine without torch: architecture, usable CPUs, load average."""
    try:
        load = "load {:.1f}/{:.1f}/{:.1f}".format(*os.getloadavg())
    except OSError:
        load = "load n/a"
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{platform.machine()} {cpus} usable CPUs, {load}"


def markdown_tables(output: str) -> list[str]:
    """The Markdown tables in a script's printed ``output``: every run of consecutive lines that start with
    ``|`` and has a ``|---`` separator line (one string per table, lines right-stripped)."""
    tables, block = [], []
    for line in [*output.splitlines(), ""]:
        if line.lstrip().startswith("|"):
            block.append(line.strip())
            continue
        if len(block) >= 2 and block[1].replace(" ", "").startswith("|-"):
            tables.append("\n".join(block))
        block = []
    return tables


def section_body(command: str, machine: str, tables: list[str]) -> str:
    """What goes between a script's markers: the command, the machine, then its tables."""
    if not tables:
        raise ValueError(f"{command}: printed no Markdown table, nothing to write")
    return "\n\n".join([f"Command: `{command}` ({machine}).", *tables])


def write_docs_section(key: str, body: str, docs: Path = DOCS) -> None:
    """Replace the text between the markers of ``key`` in ``docs`` with ``body``; nothing else changes.

    ``ValueError`` naming the file and the marker lines when they are missing, repeated or out of order."""
    start, end = markers(key)
    text = docs.read_text()
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise ValueError(
            f"{docs}: expected one line '{start}' and, after it, one line '{end}' (found {text.count(start)} and "
            f"{text.count(end)}): add them where the table of {key} belongs"
        )
    head = text[: text.index(start) + len(start)]
    tail = text[text.index(end) :]
    atomic_write_text(docs, f"{head}\n{body.strip(chr(10))}\n{tail}")
