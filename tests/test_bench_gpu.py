"""scripts/bench/bench_gpu.py and scripts/gpu_check.sh on the CPU: the tables' shape (not times), the sync
counter on hand-made profiler events, fresh embeddings each call, the refusal of a CPU jax on a CUDA run, and
XLA preallocation switched off before jax is imported."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from _train_helpers import load_script

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "bench" / "bench_gpu.py"


@pytest.fixture(scope="module")
def bench():
    return load_script("bench/bench_gpu", register=True)


def test_bench_gpu_quick_cpu_tables(bench, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tables = bench.main(
        [
            "--out",
            str(tmp_path),
            "--device",
            "cpu",
            "--quick",
            "--sizes",
            "6:3,5:3",
            "--skip",
            "train",
            "--no-ott",
            "--pool",
            "3",
        ]
    )
    assert set(tables) == {"m3g", "counts", "memory"}
    loops = [bench.BACKEND]
    assert loops == ["blocks"]
    m3g_rows = [row.split("|")[1:-1] for row in tables["m3g"].splitlines()[2:]]
    assert [(r[0].strip(), r[1].strip(), r[2].strip()) for r in m3g_rows] == [
        (n, k, f"m3g {loop} loop") for n, k in (("6", "3"), ("5", "3")) for loop in loops
    ]
    for row in m3g_rows:  # cold first call and steady state are two numbers; no ott-jax here
        assert float(row[3]) > 0 and float(row[4]) > 0 and row[5].strip() == "-"
    count_rows = [[c.strip() for c in row.split("|")[1:-1]] for row in tables["counts"].splitlines()[2:]]
    assert [r[:3] for r in count_rows] == [[n, k, loop] for n, k in (("6", "3"), ("5", "3")) for loop in loops]
    assert "aten ops (CPU stand-in for kernels)" in tables["counts"].splitlines()[0]
    for row in count_rows:  # on the CPU: aten ops counted, syncs not measurable
        assert int(row[3]) > 0 and row[4:7] == ["n/a (CPU)"] * 3
    assert all(int(r[7]) >= 1 for r in count_rows)  # tensor->Python reads counted in Python on any device
    assert len(tables["memory"].splitlines()) == 2 + 2  # mveb and the contrastive loss
    written = (tmp_path / "bench_gpu.md").read_text()
    assert "fresh embeddings each call" in written and "usable CPUs" in written
    assert "device: cpu" in written and "ott-jax comparison skipped: --no-ott" in written
    assert "cold first call ms" in capsys.readouterr().out


def item_events(correlation: int) -> list:
    """What torch.profiler records for one ``.item()`` on CUDA: the aten ops, the async copy with its GPU
    copy, and the stream synchronize."""
    from_bench = load_script("bench/bench_gpu", register=True)
    event = from_bench.ProfEvent
    return [
        event("aten::item"),
        event("aten::_local_scalar_dense"),
        event("cudaMemcpyAsync", correlation=correlation),
        event("Memcpy DtoH (Device -> Pageable)", on_gpu=True, correlation=correlation),
        event("cudaStreamSynchronize", correlation=correlation + 1),
    ]


def test_one_item_is_one_sync(bench) -> None:
    counts = bench.count_events(item_events(7))
    assert (counts.syncs, counts.dtoh, counts.kernels, counts.launches, counts.aten_ops) == (1, 1, 0, 0, 2)
    assert bench.count_events(item_events(7) + item_events(20)).syncs == 2


def test_sync_counter_on_kernels_and_copies(bench) -> None:
    event = bench.ProfEvent
    events = [
        event("aten::mul"),
        event("cudaLaunchKernel", correlation=1),
        event("void at::native::vectorized_elementwise_kernel<4>", on_gpu=True, correlation=1),
        event("cudaGraphLaunch", correlation=2),
        event("triton_poi_fused_mul_0", on_gpu=True, correlation=2),
        event("triton_red_fused_sum_1", on_gpu=True, correlation=2),
        # a blocking copy to the host is a sync; one to the device, a memset and an async copy are not
        event("cudaMemcpy", correlation=3),
        event("Memcpy DtoH (Device -> Pinned)", on_gpu=True, correlation=3),
        event("cudaMemcpy", correlation=4),
        event("Memcpy HtoD (Pageable -> Device)", on_gpu=True, correlation=4),
        event("cudaMemsetAsync", correlation=5),
        event("Memset (Device)", on_gpu=True, correlation=5),
        event("cudaMemcpyAsync", correlation=6),
        event("Memcpy DtoD (Device -> Device)", on_gpu=True, correlation=6),
        event("cudaDeviceSynchronize", correlation=8),
    ]
    counts = bench.count_events(events)
    assert (counts.kernels, counts.launches, counts.syncs, counts.dtoh, counts.aten_ops) == (3, 2, 2, 1, 1)
    assert bench.count_events([]) == bench.CallCounts(0, 0, 0, 0, 0)


def test_profiled_events_on_cpu_count_aten_ops_and_no_syncs(bench) -> None:
    x = torch.randn(4, 4)
    events = bench.profiled_events(lambda: (x * 2).sum().item(), torch.device("cpu"))
    names = [e.name for e in events]
    assert bench.CALL_MARK not in names and {"aten::mul", "aten::sum", "aten::item"} <= set(names)
    counts = bench.count_events(events)
    assert counts.aten_ops == sum(name.startswith("aten::") for name in names) and counts.syncs == 0


def test_embedding_pool_hands_out_fresh_batches_in_turn(bench) -> None:
    pool = bench.EmbeddingPool(5, 3, size=3, device="cpu", d=8)
    seen = [pool.next() for _ in range(7)]
    for a, b in zip(seen, seen[1:]):  # never the same batch twice in a row
        assert a is not b and not torch.equal(a, b)
    assert seen[3] is seen[0] and seen[6] is seen[0] and seen[4] is seen[1]  # cycles through the pool
    assert seen[0].shape == (5, 3, 8)
    with pytest.raises(ValueError, match="size must be >= 2"):
        bench.EmbeddingPool(5, 3, size=1, device="cpu")


def test_m3g_call_takes_the_next_batch_each_call(bench, monkeypatch: pytest.MonkeyPatch) -> None:
    pool = bench.EmbeddingPool(4, 3, size=4, device="cpu", d=8)
    inputs: list[torch.Tensor] = []

    def fake_build_loss(name: str, **_: object):
        def loss(x: torch.Tensor) -> torch.Tensor:
            inputs.append(x)
            return x.sum()

        return loss

    monkeypatch.setattr(bench, "build_loss", fake_build_loss)
    call = bench.m3g_call(pool)
    for _ in range(5):
        call()
    pointers = [b.data_ptr() for b in pool.batches]
    assert [pointers.index(x.data_ptr()) for x in inputs] == [0, 1, 2, 3, 0]
    assert all(x.requires_grad and x.grad is not None for x in inputs)  # each call a leaf of its own
    assert all(not b.requires_grad and b.grad is None for b in pool.batches)  # no gradient piles up in the pool


def fake_jax(backend: str) -> SimpleNamespace:
    devices = {"cpu": ["TFRT_CPU_0"], "gpu": ["cuda(id=0)"]}
    return SimpleNamespace(default_backend=lambda: backend, devices=lambda kind=None: devices[kind or backend])


def test_a_cpu_jax_is_refused_on_a_cuda_run(bench) -> None:
    refused = bench.jax_comparison(torch.device("cuda"), fake_jax("cpu"))
    assert refused.device is None and "refused" in refused.line and "jax backend: cpu" in refused.line
    assert "\n" not in refused.line
    accepted = bench.jax_comparison(torch.device("cuda"), fake_jax("gpu"))
    assert accepted.device == "cuda(id=0)" and accepted.label == "CUDA-vs-CUDA"
    assert "jax backend: gpu, device: cuda(id=0)" in accepted.line


def test_a_cpu_run_compares_cpu_vs_cpu(bench) -> None:
    for backend in ("cpu", "gpu"):  # a GPU jax is put on its CPU device for a CPU torch run
        side = bench.jax_comparison(torch.device("cpu"), fake_jax(backend))
        assert side.device == "TFRT_CPU_0" and side.label == "CPU-vs-CPU" and "CPU-vs-CPU" in side.line
    missing = bench.jax_comparison(torch.device("cpu"), "ModuleNotFoundError: No module named 'jax'")
    assert missing.device is None and "skipped" in missing.line


def test_preallocation_is_off_before_jax_is_imported(tmp_path: Path) -> None:
    """A stand-in ``jax`` records the variable when it is imported: loading the bench (which must not
    import jax itself) and then importing jax sees ``false`` even where the caller had set ``true``."""
    fake = tmp_path / "fake" / "jax"
    fake.mkdir(parents=True)
    record = tmp_path / "seen.txt"
    (fake / "__init__.py").write_text(
        f"import os\nopen({str(record)!r}, 'a').write(os.environ.get('XLA_PYTHON_CLIENT_PREALLOCATE', 'unset') + '\\n')\n"
    )
    code = textwrap.dedent(f"""
        import importlib.util, sys
        spec = importlib.util.spec_from_file_location("bench_gpu", {str(SCRIPT)!r})
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_gpu"] = module
        spec.loader.exec_module(module)
        assert "jax" not in sys.modules, "bench_gpu imported jax at load time"
        assert module.import_jax() is sys.modules["jax"]
    """)
    env = {
        **os.environ,
        # the script's folder, as `python scripts/bench/bench_gpu.py` has it (its sibling common.py)
        "PYTHONPATH": os.pathsep.join([str(tmp_path / "fake"), str(REPO), str(SCRIPT.parent)]),
        "XLA_PYTHON_CLIENT_PREALLOCATE": "true",
    }
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=tmp_path, timeout=120)
    assert record.read_text().splitlines() == ["false"]
    source = SCRIPT.read_text()  # the assignment precedes every import but `os`
    assignment = source.index('os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"')
    assert source.index("import torch") > assignment and source.index("from multiview_app") > assignment


def test_fake_eeg_cache_is_a_valid_six_channel_cache(bench, tmp_path: Path) -> None:
    from multiview_app.data.adapters import build_adapter

    cache = bench.fake_eeg_cache(tmp_path / "cache", subjects=2, windows=3)
    adapter = build_adapter("eeg_windows", {"cache": str(cache), "test_fraction": 0})
    assert adapter.channel_names == bench.EEG_CHANNELS


@pytest.mark.slow
def test_gpu_check_cpu_smoke_runs_every_part(tmp_path: Path) -> None:
    """``scripts/gpu_check.sh --cpu-smoke``: every part runs (tiny sizes), each with its log, and the summary."""
    out = tmp_path / "check"
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_check.sh"), "--cpu-smoke", "--out", str(out)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = (out / "summary.md").read_text()
    for part in ("gpu_model", "pytest_cuda", "bench_m3g", "bench_train", "bench_memory"):
        assert f"| {part} | ok |" in summary and (out / f"{part}.log").is_file()
    assert "CPU smoke" in summary and "GPU model:" in summary
    assert "eeg demo" in (out / "bench_train" / "bench_gpu.md").read_text()
    assert "M3G fwd+bwd" in (out / "bench_m3g" / "bench_gpu.md").read_text()


def test_gpu_check_rejects_an_unknown_argument(tmp_path: Path) -> None:
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_check.sh"), "--bogus"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2 and "unknown argument '--bogus'" in done.stderr
