"""scripts/bench/common.py: the timing / table helpers behind scripts/bench/bench_*.py."""

from __future__ import annotations

import os

import pytest
from _train_helpers import load_script

common = load_script("bench/common", register=True)
Timing, kept_environment, markdown_table = common.Timing, common.kept_environment, common.markdown_table
ratio, time_call, peak_rss_growth = common.ratio, common.time_call, common.peak_rss_growth


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


def test_peak_rss_growth_sees_an_allocation_after_an_earlier_peak() -> None:
    """The peak is reset before the call: a 64 MiB buffer shows up even after a larger earlier peak
    (ru_maxrss would report 0 growth there)."""
    import numpy as np

    earlier = np.ones(32 * 2**20)  # 256 MiB touched, then freed
    del earlier
    mib, seconds, total = peak_rss_growth(lambda: float(np.ones(8 * 2**20).sum()))  # 64 MiB
    assert total == 8 * 2**20 and seconds >= 0
    assert 48 <= mib <= 256, mib


def test_kept_environment_restores_set_and_unset_keys(monkeypatch) -> None:
    monkeypatch.setenv("MVAPP_BENCH_SET", "before")
    monkeypatch.delenv("MVAPP_BENCH_UNSET", raising=False)
    with kept_environment("MVAPP_BENCH_SET", "MVAPP_BENCH_UNSET"):
        os.environ["MVAPP_BENCH_SET"] = "inside"
        os.environ["MVAPP_BENCH_UNSET"] = "inside"
    assert os.environ["MVAPP_BENCH_SET"] == "before"
    assert "MVAPP_BENCH_UNSET" not in os.environ
    with pytest.raises(RuntimeError), kept_environment("MVAPP_BENCH_SET"):
        os.environ["MVAPP_BENCH_SET"] = "inside"
        raise RuntimeError("a failing bench")
    assert os.environ["MVAPP_BENCH_SET"] == "before"


def test_time_call_stops_past_its_budget_after_at_least_one_run() -> None:
    import time

    timing = time_call(lambda: time.sleep(0.002), repeat=50, warmup=0, budget_s=0.0)
    assert len(timing.runs) == 1
    assert Timing((3.0, 1.0, 2.0)).of("min") == 1.0 and Timing((3.0, 1.0, 2.0)).of("median") == 2.0


def test_interleaved_alternates_the_functions_after_the_warmup_rounds() -> None:
    order: list[str] = []
    timings = common.interleaved([lambda: order.append("a"), lambda: order.append("b")], repeat=2, warmup=1)
    assert order == ["a", "b"] * 3 and [len(t.runs) for t in timings] == [2, 2]


def test_parse_sizes_reads_both_spellings_and_names_a_bad_item() -> None:
    assert common.parse_sizes("64x4, 128X3") == [(64, 4), (128, 3)]
    assert common.parse_sizes("16:6,32:3") == [(16, 6), (32, 3)]
    assert common.parse_sizes(["16x6", "8x3,4x2"]) == [(16, 6), (8, 3), (4, 2)]
    with pytest.raises(ValueError, match="size '64x': expected NxK"):
        common.parse_sizes("64x")
