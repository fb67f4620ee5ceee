"""scripts/bench/bench_gpu.py runs on CPU (its quick mode, tiny sizes): the tables' shape, not times."""
from __future__ import annotations

from pathlib import Path

from _train_helpers import load_script


def test_bench_gpu_quick_cpu_tables(tmp_path: Path) -> None:
    bench = load_script("bench/bench_gpu")
    tables = bench.main(["--out", str(tmp_path), "--device", "cpu", "--quick", "--sizes", "6:3,5:4", "--skip", "train"])
    assert set(tables) == {"m3g", "counts", "memory"}
    m3g_rows = tables["m3g"].splitlines()[2:]
    assert len(m3g_rows) == 2 and all(row.count("|") == 8 for row in m3g_rows)
    count_rows = [row.split("|")[1:-1] for row in tables["counts"].splitlines()[2:]]
    assert [(r[0].strip(), r[1].strip(), r[2].strip()) for r in count_rows] == [
        ("6", "3", "device"), ("6", "3", "host"), ("5", "4", "device"), ("5", "4", "host")
    ]
    # the device loop's reads per call (after warm-up) are counted in Python on any device
    assert all(int(r[6]) <= 2 for r in count_rows if r[2].strip() == "device")
    assert len(tables["memory"].splitlines()) == 2 + 2  # mveb and the contrastive loss
    written = (tmp_path / "bench_gpu.md").read_text()
    assert "M3G fwd+bwd" in written and "usable CPUs" in written


def test_fake_eeg_cache_is_a_valid_six_channel_cache(tmp_path: Path) -> None:
    from multiview_app.data.adapters import build_adapter

    bench = load_script("bench/bench_gpu")
    cache = bench.fake_eeg_cache(tmp_path / "cache", subjects=2, windows=3)
    adapter = build_adapter("eeg_windows", {"cache": str(cache), "test_fraction": 0})
    assert adapter.channel_names == bench.EEG_CHANNELS
