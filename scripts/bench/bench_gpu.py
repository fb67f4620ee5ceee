"""GPU benchmark of the loss head and training step (issue 28): one command, four tables.

1. M3G forward+backward (cost cv, float32, eps 0.2, tol 1e-3, same embeddings): the device-resident
   MM-Sinkhorn loop (``solver_loop="device"``) vs the host loop (``"host"``) vs ott-jax's
   ``MMSinkhorn`` (``jax.jit(jax.value_and_grad)`` after warm-up, same embeddings) when ``jax`` and
   ``ott`` import in this interpreter; median of ``--repeats`` and ratios.
2. Kernel launches and host synchronizations per M3G call from ``torch.profiler`` (CUDA kernel
   events; ``aten::item`` / ``aten::_local_scalar_dense`` / ``cudaStreamSynchronize`` /
   ``cudaMemcpyAsync`` events), and tensor-to-Python conversions counted in Python (any device).
3. Training steps/s of configs/eeg_synthetic_m3g.yaml (k = 6, n = 16) on a tiny synthesized window
   cache and of configs/digits_m3g.yaml, with the data share of a step (the trainer's ``time/data``).
4. Peak memory of one MVEB and one contrastive (pvc_geometric) forward+backward: CUDA
   ``max_memory_allocated`` at n k = 131,072, d = 256; on CPU (``--device cpu``) small sizes and the
   process's peak RSS growth.

    .venv/bin/python scripts/bench/bench_gpu.py --out bench_out [--device cuda|cpu] [--quick]

``--quick``: small sizes, 2 repeats, 3 training steps (smoke run; the CPU test runs it). Prints
Markdown tables plus the machine and command lines (``multiview_app.bench``) and writes them to
``OUT/bench_gpu.md``.
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from multiview_app.bench import command_line, machine_line, markdown_table, peak_rss_growth, ratio, synchronize, time_call
from multiview_app.losses import build_loss

M3G_SIZES = [(16, 6), (32, 3), (64, 3), (64, 4), (128, 3), (128, 4), (512, 3)]
QUICK_SIZES = [(16, 3), (16, 4)]
SYNC_EVENTS = ("aten::item", "aten::_local_scalar_dense", "cudaStreamSynchronize", "cudaDeviceSynchronize")
EEG_CHANNELS = ["F3-M2", "F4-M1", "C3-M2", "C4-M1", "O1-M2", "O2-M1"]


def make_embeddings(n: int, k: int, d: int = 128, seed: int = 0) -> torch.Tensor:
    """``(n, k, d)`` float32: a shared direction per item plus unit view noise (as bench_m3g.py)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 1, d, generator=g) + torch.randn(n, k, d, generator=g)


def m3g_call(z: torch.Tensor, loop: str, eps: float = 0.2, tol: float = 1e-3) -> Callable[[], None]:
    """One M3G forward+backward on a fresh leaf copy of ``z`` (a module kept across calls: the
    device loop's block size adapts after the first call, as in training)."""
    loss = build_loss("m3g", epsilon=eps, tol=tol, solver_loop=loop)

    def call() -> None:
        x = z.detach().clone().requires_grad_()
        loss(x).backward()

    return call


def ott_call(z: torch.Tensor, eps: float = 0.2, tol: float = 1e-3) -> Callable[[], None] | None:
    """ott-jax's M3G value and gradient on the same embeddings (jit, on jax's default device), or
    None when jax / ott do not import."""
    try:
        import jax
        import jax.numpy as jnp
        from ott.experimental.mmsinkhorn import MMSinkhorn
    except Exception:  # noqa: BLE001 - optional comparison
        return None
    raw = jnp.asarray(z.detach().cpu().numpy())
    n, k, _ = raw.shape
    scale = 2.0 / (k - 1)  # SqEuclidean on scaled unit vectors = the cv cost
    solver = MMSinkhorn(threshold=tol, max_iterations=1000)

    def m3g(x: Any) -> Any:
        unit = x / jnp.linalg.norm(x, axis=-1, keepdims=True)
        xs = tuple(scale * unit[:, view] for view in range(k))
        out = solver(xs, epsilon=eps)
        diag = sum(jnp.sum((xs[a] - xs[b]) ** 2) for a in range(k) for b in range(a + 1, k)) / n
        return diag - eps * jnp.log(n) - out.ent_reg_cost

    fn = jax.jit(jax.value_and_grad(m3g))

    def call() -> None:
        jax.block_until_ready(fn(raw))

    return call


def host_reads(fn: Callable[[], None]) -> int:
    """Tensor-to-Python conversions (``item``, ``tolist``, ``bool``, ``float``, ``int``, ``index``)
    during one ``fn()`` -- every one is a host synchronization on a GPU."""
    names = ("item", "tolist", "__bool__", "__float__", "__int__", "__index__")
    originals = {name: getattr(torch.Tensor, name) for name in names}
    count = [0]

    def wrap(original: Callable) -> Callable:
        def method(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            count[0] += 1
            return original(self, *args, **kwargs)

        return method

    try:
        for name, original in originals.items():
            setattr(torch.Tensor, name, wrap(original))
        fn()
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)
    return count[0]


def profile_counts(fn: Callable[[], None], device: torch.device) -> dict[str, int | str]:
    """Kernel launches, sync-type and device-to-host copy events of one ``fn()`` (torch.profiler)."""
    if device.type != "cuda":
        return {"kernels": "-", "syncs": "-", "dtoh": "-"}
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize(device)
    counts: Counter[str] = Counter()
    for event in prof.events():
        name = event.name
        on_gpu = event.device_type == torch.autograd.DeviceType.CUDA
        if on_gpu and not name.startswith(("Memcpy", "Memset")):
            counts["kernels"] += 1
        if name in SYNC_EVENTS:
            counts["syncs"] += 1
        if on_gpu and name.startswith("Memcpy DtoH"):  # the copy of a cudaMemcpyAsync to the host
            counts["dtoh"] += 1
    return {"kernels": counts["kernels"], "syncs": counts["syncs"], "dtoh": counts["dtoh"]}


def m3g_tables(device: torch.device, sizes: list[tuple[int, int]], repeats: int) -> tuple[str, str]:
    """Table 1 (times and ratios) and table 2 (kernels / syncs per call)."""
    timing_rows, count_rows = [], []
    for n, k in sizes:
        z = make_embeddings(n, k).to(device)
        calls = {loop: m3g_call(z, loop) for loop in ("device", "host")}
        times = {loop: time_call(call, repeat=repeats, warmup=2, device=device) for loop, call in calls.items()}
        ott = ott_call(z)
        ott_time = time_call(ott, repeat=repeats, warmup=2) if ott is not None else None
        timing_rows.append([
            n, k, times["device"].ms(), times["host"].ms(), ratio(times["host"].median, times["device"].median),
            ott_time.ms() if ott_time else "-",
            ratio(ott_time.median, times["device"].median) if ott_time else "-",
        ])
        for loop, call in calls.items():
            counts = profile_counts(call, device)
            count_rows.append([n, k, loop, counts["kernels"], counts["syncs"], counts["dtoh"], host_reads(call)])
    table1 = markdown_table(
        ["n", "k", "device loop ms", "host loop ms", "host/device", "ott-jax ms", "ott/device"], timing_rows
    )
    table2 = markdown_table(
        ["n", "k", "loop", "CUDA kernels", "sync events", "DtoH copies", "tensor->Python reads"], count_rows
    )
    return table1, table2


def fake_eeg_cache(folder: Path, subjects: int, windows: int) -> Path:
    """A prepared 6-channel EEG window cache (synthetic noise, labels cycling 0..4), the format of
    tests/_eeg_helpers.py with the channels of configs/eeg_synthetic_base.yaml."""
    from multiview_app.data.eeg.cache import CACHE_FORMAT

    (folder / "windows").mkdir(parents=True, exist_ok=True)
    recordings = []
    for s in range(subjects):
        data = np.random.default_rng(s).standard_normal((windows, len(EEG_CHANNELS), 3000)).astype(np.float32)
        np.save(folder / "windows" / f"r{s}.npy", data)
        recordings.append({
            "recording": f"r{s}", "subject": f"S{s}", "file": f"windows/r{s}.npy", "n_windows": windows,
            "labels": [i % 5 for i in range(windows)], "epochs": list(range(windows)), "sources": [], "counts": {},
        })
    manifest = {
        "format": CACHE_FORMAT, "dataset": "physionet2018", "options": {}, "dtype": "float32",
        "channels": EEG_CHANNELS, "sfreq": 100.0, "window_seconds": 30.0,
        "stages": ["W", "N1", "N2", "N3", "REM"], "recordings": recordings, "duplicates": [],
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def train_rate(config: str, overrides: list[str], runs: Path, name: str) -> tuple[float, float]:
    """``(steps/s, data share)`` of a short run: median step time and ``time/data`` of the logged
    windows after the first (warm-up) one."""
    from multiview_app.config import load_config
    from multiview_app.train.trainer import train

    cfg = load_config(config, [*overrides, f"output.runs_dir={runs}"], name=name)
    result = train(cfg)
    rows = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rows = [row for row in rows if "step_time_s" in row]
    timed = rows[1:] or rows
    step_time = statistics.median(row["step_time_s"] for row in timed)
    data_share = statistics.median(row.get("time/data", float("nan")) for row in timed)
    return 1.0 / step_time, data_share


def training_table(device: torch.device, quick: bool, tmp: Path) -> str:
    steps, log_every = (3, 1) if quick else (60, 10)
    common = [f"train.max_steps={steps}", f"train.log_every={log_every}", "train.checkpoint_every=0",
              "train.diagnostics=false", "eval.linear_probe=false"]
    cache = fake_eeg_cache(tmp / "eeg_cache", subjects=4, windows=8 if quick else 40)
    runs = [
        ("configs/eeg_synthetic_m3g.yaml", [f"data.options.cache={cache}", "data.options.test_fraction=0.25",
                                            "model.encoders.eeg.width=32", "train.batch_size=16"], "eeg_m3g k=6 n=16"),
        ("configs/digits_m3g.yaml", [], "digits_m3g"),
    ]
    rows = []
    for config, extra, label in runs:
        try:
            rate, share = train_rate(config, common + extra, tmp / "runs", label.split()[0])
            rows.append([label, f"{rate:.2f}", f"{share:.2f}"])
        except Exception as err:  # noqa: BLE001 - one failing run is a row, not the end of the bench
            rows.append([label, "failed", f"{type(err).__name__}: {str(err)[:80]}"])
    return markdown_table(["run", "steps/s", "data share of a step"], rows)


def peak_memory(device: torch.device, quick: bool) -> str:
    """Peak extra memory of one forward+backward of MVEB and pvc_geometric."""
    if device.type == "cuda":
        sizes = [(16384, 8, 256), (32768, 4, 256)] if not quick else [(1024, 4, 64)]
    else:
        sizes = [(256, 4, 64)] if quick else [(2048, 4, 256)]
    rows = []
    for name in ("mveb", "pvc_geometric"):
        for n, k, d in sizes:
            z = torch.randn(n, k, d, device=device, requires_grad=True)
            loss = build_loss(name)
            try:
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                    torch.cuda.reset_peak_memory_stats(device)
                    base = torch.cuda.memory_allocated(device)
                    start = time.perf_counter()
                    loss(z).backward()
                    synchronize(device)
                    took = time.perf_counter() - start
                    peak = (torch.cuda.max_memory_allocated(device) - base) / 2**30
                    rows.append([name, n, k, d, f"{peak:.2f} GiB (CUDA allocated)", f"{took:.2f}"])
                else:
                    grown, took, _ = peak_rss_growth(lambda: loss(z).backward())
                    rows.append([name, n, k, d, f"{grown / 1024:.2f} GiB (peak RSS growth)", f"{took:.2f}"])
            except torch.cuda.OutOfMemoryError:
                rows.append([name, n, k, d, "out of memory", "-"])
            del z
    return markdown_table(["loss", "n", "k", "d", "peak extra memory", "fwd+bwd s"], rows)


def main(argv: list[str] | None = None) -> dict[str, str]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for bench_gpu.md (and scratch runs)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="cuda (default when available) or cpu")
    parser.add_argument("--quick", action="store_true", help="smoke run: small sizes, 2 repeats, 3 training steps")
    parser.add_argument("--repeats", type=int, default=None, help="timed calls per M3G row (default 5, quick 2)")
    parser.add_argument("--sizes", default=None, help="M3G sizes as n:k,n:k (default: the issue's seven)")
    parser.add_argument("--skip", default="", help="comma list of parts to skip: m3g,train,memory")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here (use --device cpu)")
    sizes = QUICK_SIZES if args.quick else M3G_SIZES
    if args.sizes:
        sizes = [tuple(int(v) for v in item.split(":")) for item in args.sizes.split(",")]
    repeats = args.repeats or (2 if args.quick else 5)
    skip = set(filter(None, args.skip.split(",")))
    args.out.mkdir(parents=True, exist_ok=True)
    tables: dict[str, str] = {}
    if "m3g" not in skip:
        tables["m3g"], tables["counts"] = m3g_tables(device, sizes, repeats)
    if "train" not in skip:
        with tempfile.TemporaryDirectory(dir=args.out) as tmp:
            tables["train"] = training_table(device, args.quick, Path(tmp))
    if "memory" not in skip:
        tables["memory"] = peak_memory(device, args.quick)
    titles = {
        "m3g": "M3G fwd+bwd, float32, eps 0.2, tol 1e-3 (median ms)",
        "counts": "Per M3G call: kernels and host synchronizations",
        "train": "Training steps/s",
        "memory": "Peak memory of one fwd+bwd",
    }
    text = "\n\n".join(f"### {titles[key]}\n\n{table}" for key, table in tables.items())
    text += f"\n\n{machine_line()}\n{command_line()}\n"
    print(text)
    (args.out / "bench_gpu.md").write_text(text)
    return tables


if __name__ == "__main__":
    main()
