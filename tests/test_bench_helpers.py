"""multiview_app.bench: the timing / table helpers behind scripts/bench_*.py."""
from __future__ import annotations

import pytest

from multiview_app.bench import Timing, markdown_table, ratio, time_call


def test_time_call_runs_warmup_then_repeat_and_reports_median() -> None:
    calls: list[int] = []
    timing = time_call(lambda: calls.append(1), repeat=3, warmup=2)
    assert len(calls) == 5 and len(timing.runs) == 3
    assert Timing((3.0, 1.0, 2.0)).median == 2.0 and Timing((3.0, 1.0, 2.0)).best == 1.0
    with pytest.raises(ValueError, match="repeat"):
        time_call(lambda: None, repeat=0)


def test_ratio_and_table() -> None:
    assert ratio(2.0, 1.0) == "2.00x" and ratio(1.0, 0.0) == "n/a"
    table = markdown_table(["size", "ms"], [["(16,6)", 1.5], ["(64,3)", 12]]).splitlines()
    assert table[0].startswith("| size") and table[1].startswith("|---") and len(table) == 4
    assert all(line.count("|") == 3 for line in table)
    with pytest.raises(ValueError, match="expected 2"):
        markdown_table(["a", "b"], [[1]])
