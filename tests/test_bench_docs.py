"""A bench suite's tables land between the script's two markers in docs/benchmarks.md and nothing else on the
page changes (``scripts/bench/common.py``, ``scripts/bench/run.py --write-docs``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _train_helpers import load_script

common = load_script("bench/common", register=True)
DOCS, markdown_tables, markers = common.DOCS, common.markdown_tables, common.markers
section_body, write_docs_section = common.section_body, common.write_docs_section

PAGE = """# Benchmarks

## One

Prose about one.

<!-- bench:bench_one -->
| old | table |
|---|---|
| 1 | 2 |
<!-- /bench:bench_one -->

## Two

<!-- bench:bench_two -->
<!-- /bench:bench_two -->
tail text
"""

PRINTED = """bench one, 2 sizes
| size | ms |
|------|----|
| 8    | 1.5 |
note: not a table line
| a | b |
| c | d |

| second | table |
|---|---|
| x | y |
x86_64 2 usable CPUs, load 1.0/1.0/1.0, torch 2.0 (1 intra-op threads), no GPU
"""


def _outside(text: str, key: str) -> tuple[str, str]:
    start, end = markers(key)
    return text[: text.index(start)], text[text.index(end) :]


def test_markdown_tables_keeps_only_tables_with_a_separator_line() -> None:
    assert markdown_tables(PRINTED) == [
        "| size | ms |\n|------|----|\n| 8    | 1.5 |",
        "| second | table |\n|---|---|\n| x | y |",
    ]
    assert markdown_tables("no table\n| a | b |\n") == []


def test_table_lands_between_its_markers_and_nothing_else_changes(tmp_path: Path) -> None:
    page = tmp_path / "benchmarks.md"
    page.write_text(PAGE)
    body = section_body("python scripts/bench/bench_one.py", "the machine", markdown_tables(PRINTED))
    write_docs_section("bench_one", body, page)
    text = page.read_text()
    assert _outside(text, "bench_one") == _outside(PAGE, "bench_one")
    start, end = markers("bench_one")
    assert text[text.index(start) + len(start) : text.index(end)] == f"\n{body}\n"
    assert "| old | table |" not in text and "| 8    | 1.5 |" in text and "| second | table |" in text
    write_docs_section("bench_one", body, page)  # writing again gives the same page
    assert page.read_text() == text
    write_docs_section("bench_two", "| a |\n|---|", page)
    assert page.read_text().endswith("<!-- bench:bench_two -->\n| a |\n|---|\n<!-- /bench:bench_two -->\ntail text\n")


@pytest.mark.parametrize(
    "page_text", [PAGE.replace("<!-- /bench:bench_one -->", ""), PAGE + "<!-- bench:bench_one -->\n"]
)
def test_missing_or_repeated_markers_are_refused_naming_file_and_key(tmp_path: Path, page_text: str) -> None:
    page = tmp_path / "benchmarks.md"
    page.write_text(page_text)
    with pytest.raises(ValueError, match=r"benchmarks\.md.*<!-- bench:bench_one -->.*bench_one"):
        write_docs_section("bench_one", "| a |\n|---|", page)
    assert page.read_text() == page_text


def test_no_table_printed_is_an_error() -> None:
    with pytest.raises(ValueError, match="printed no Markdown table"):
        section_body("python x.py", "machine", [])


def test_every_suite_script_has_one_marker_pair_on_the_page() -> None:
    runner = load_script("bench/run", register=True)
    text = DOCS.read_text()
    for benches in runner.SUITES.values():
        for bench in benches:
            start, end = markers(bench.key)
            assert text.count(start) == 1 and text.count(end) == 1, bench.key
            assert text.index(start) < text.index(end), bench.key


def test_runner_writes_the_printed_tables_of_a_suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = load_script("bench/run", register=True)
    script = tmp_path / "bench_one.py"
    script.write_text(f"print({PRINTED!r})\n")
    failing = tmp_path / "bench_two.py"
    failing.write_text("print('| a |\\n|---|')\nraise SystemExit(3)\n")
    page = tmp_path / "benchmarks.md"
    page.write_text(PAGE)
    monkeypatch.setattr(runner, "HERE", tmp_path)
    monkeypatch.setattr(
        runner, "SUITES", {"toy": [runner.Bench("bench_one", "a toy"), runner.Bench("bench_two", "fails")]}
    )
    assert runner.main(["toy", "--write-docs", str(page)]) == 1  # bench_two failed: its section stays as it was
    text = page.read_text()
    assert _outside(text, "bench_one") == _outside(PAGE, "bench_one")
    start, end = markers("bench_one")
    written = text[text.index(start) + len(start) : text.index(end)]
    assert written.startswith(f"\nCommand: `python {script}` (")  # the command as the runner shows it
    assert "(x86_64 2 usable CPUs, load 1.0/1.0/1.0, torch 2.0 (1 intra-op threads), no GPU)" in written
    assert written.strip().endswith("| second | table |\n|---|---|\n| x | y |")
    assert text.endswith("<!-- bench:bench_two -->\n<!-- /bench:bench_two -->\ntail text\n")
