"""GPU benchmark of the loss head and training step: one command, four tables, nothing it cannot measure.

1. M3G forward+backward (cost cv, float32, eps 0.2, tol 1e-3) on **fresh embeddings each call** (a pool
   of ``--pool`` pre-generated batches cycled, never the same tensor twice in a row) through the loss's
   sweep blocks, and ott-jax's ``MMSinkhorn`` (``jax.jit(jax.value_and_grad)``) on the
   same pool when ``jax`` and ``ott`` import: the **cold first call** (a fresh loss module / the jit
   compile) and the **steady state** (median of ``--repeats`` after warm-up) apart, and ott-jax's
   steady time over each candidate's. The jax backend and device are printed; a CPU jax is refused
   for the comparison on a CUDA run (one line says so); on a CPU run it is labelled CPU-vs-CPU.
   ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` is set before jax can be imported, so jax does not take
   ~75 % of the GPU and the memory table reads true.
2. Per M3G call from ``torch.profiler``: CUDA kernels, kernel-launch calls, **host syncs** (runtime
   ``cudaStreamSynchronize`` / ``cudaDeviceSynchronize`` / ``cudaEventSynchronize`` calls and blocking
   ``cudaMemcpy`` device-to-host copies: one ``.item()`` is one sync) and device-to-host copies, plus
   tensor-to-Python reads counted in Python. On CPU: aten ops per call (every dispatcher level, views
   included) as the stand-in for kernels, labelled so, and "n/a (CPU)" for syncs.
3. Training steps/s of the EEG demo's training (configs/eeg_synthetic_m3g.yaml with the settings of
   configs/demo_eeg.yaml: k = 6, n = 16, width 32, its view augmentations) on a synthesized 6-channel
   window cache, and of configs/digits_m3g.yaml (not with ``--quick``), with the data share of a step.
4. Peak memory of one MVEB and one contrastive (pvc_geometric) forward+backward: CUDA
   ``max_memory_allocated`` at n k = 131,072, d = 256; on CPU small sizes and the peak RSS growth.

    python scripts/bench/bench_gpu.py --out bench_out [--device cuda|cpu] [--quick] [--skip train,memory]

``--quick``: small sizes, 2 repeats, 3 training steps (the CPU test and ``scripts/gpu_check.sh
--cpu-smoke`` run it). Each table is printed as soon as it is done; all of them, the backend lines, the
machine and the command line (``scripts/bench/common.py``) are written to ``OUT/bench_gpu.md``.
"""

from __future__ import annotations

import os

# before anything can import jax: jax would otherwise preallocate ~75 % of the GPU's memory at its first use
os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
import argparse  # noqa: E402 - after the environment variable on purpose
import json  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterable, Sequence  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from types import ModuleType  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from common import (  # noqa: E402
    Timing,
    command_line,
    embeddings,
    machine_line,
    markdown_table,
    parse_sizes,
    peak_rss_growth,
    ratio,
    synchronize,
    time_call,
)
from ott_m3g import m3g_value_and_grad  # noqa: E402

from multiview_app.losses import build_loss  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
M3G_SIZES = [(16, 6), (32, 3), (64, 3), (64, 4), (128, 4)]
QUICK_SIZES = [(16, 3), (16, 4)]
EEG_CHANNELS = ["F3-M2", "F4-M1", "C3-M2", "C4-M1", "O1-M2", "O2-M1"]
# CUDA runtime calls after which the host has waited for the GPU
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
BLOCKING_COPY = "cudaMemcpy"  # the synchronous copy; cudaMemcpyAsync is followed by a cudaStreamSynchronize
LAUNCH_CALLS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaGraphLaunch")
CALL_MARK = "bench_gpu::call"  # record_function range around the profiled call
NOT_ON_CPU = "n/a (CPU)"
BACKEND = "blocks"
"""The M3G solver timed: the sweep blocks, the path a GPU takes (the numba kernels are CPU-only)."""


# ---------------------------------------------------------------- fresh embeddings


class EmbeddingPool:
    """``size`` pre-generated ``(n, k, d)`` batches (seeds ``seed .. seed + size - 1``) on ``device``,
    handed out in turn: every call of a timed function sees a batch other than the previous call's,
    like a training step, and generating it is not timed."""

    def __init__(self, n: int, k: int, *, size: int, device: torch.device | str, d: int = 128, seed: int = 0) -> None:
        if size < 2:
            raise ValueError(f"EmbeddingPool: size must be >= 2 (fresh embeddings each call), got {size}")
        self.batches = [embeddings(n, k, d, seed + i).to(device) for i in range(size)]
        self.position = 0

    def next(self) -> torch.Tensor:
        """The next batch (cycling), ``(n, k, d)``."""
        batch = self.batches[self.position]
        self.position = (self.position + 1) % len(self.batches)
        return batch


def m3g_call(pool: EmbeddingPool, eps: float = 0.2, tol: float = 1e-3) -> Callable[[], None]:
    """One M3G forward+backward on the pool's next batch; the loss module is kept across calls (the
    device loop's block size adapts from the previous call, as in training)."""
    loss = build_loss("m3g", epsilon=eps, tol=tol, backend=BACKEND)

    def call() -> None:
        x = pool.next().detach().requires_grad_()  # a new leaf view: no copy kernel, no gradient kept
        loss(x).backward()

    return call


def cold_and_steady(
    fn: Callable[[], Any], *, repeat: int, warmup: int, device: torch.device | str | None = None
) -> tuple[float, Timing]:
    """``(seconds of the first call, steady-state timings)``: the first ``fn()`` timed on its own, then
    ``warmup`` untimed and ``repeat`` timed calls (:func:`common.time_call`)."""
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    cold = time.perf_counter() - start
    return cold, time_call(fn, repeat=repeat, warmup=warmup, device=device)


# ---------------------------------------------------------------- jax / ott-jax


@dataclass(frozen=True)
class JaxComparison:
    """Whether ott-jax is compared, on which jax device, and the line that says so."""

    device: Any  # the jax device the comparison runs on; None: no comparison
    line: str
    label: str = ""  # "CUDA-vs-CUDA" / "CPU-vs-CPU"


def import_jax() -> ModuleType | str:
    """``jax`` (imported here, after ``XLA_PYTHON_CLIENT_PREALLOCATE=false``) or why it does not import."""
    try:
        import jax
    except Exception as err:  # noqa: BLE001 - an optional comparison
        return f"{type(err).__name__}: {err}"
    return jax


def jax_comparison(torch_device: torch.device, jax: ModuleType | str) -> JaxComparison:
    """The jax side of the comparison: a CUDA run needs a GPU jax (a CPU jax is refused), a CPU run
    compares on jax's CPU device (CPU-vs-CPU)."""
    if isinstance(jax, str):
        return JaxComparison(None, f"ott-jax comparison skipped: jax does not import ({jax})")
    backend = jax.default_backend()
    default = jax.devices()[0]
    backend_line = f"jax backend: {backend}, device: {default}"
    if torch_device.type == "cuda":
        if backend == "cpu":
            return JaxComparison(
                None,
                f"{backend_line}. ott-jax comparison refused: this jax runs on the CPU while torch runs on CUDA "
                "(install a CUDA jax, e.g. pip install 'jax[cuda12]', to compare)",
            )
        return JaxComparison(default, f"{backend_line}; comparison CUDA-vs-CUDA", "CUDA-vs-CUDA")
    cpu = jax.devices("cpu")[0]
    return JaxComparison(cpu, f"{backend_line}; comparison CPU-vs-CPU on jax device {cpu}", "CPU-vs-CPU")


def ott_call(pool: EmbeddingPool, jax_device: Any, eps: float = 0.2, tol: float = 1e-3) -> Callable[[], None] | str:
    """ott-jax's M3G value and gradient (``ott_m3g.py``, jit) on the pool's batches placed on ``jax_device``
    beforehand, cycled like the torch calls; or why ott does not import."""
    try:
        import jax

        fn = m3g_value_and_grad(eps, tol)
    except Exception as err:  # noqa: BLE001 - an optional comparison
        return f"{type(err).__name__}: {err}"
    batches = [jax.device_put(np.asarray(z.detach().cpu().numpy()), jax_device) for z in pool.batches]
    position = [0]

    def call() -> None:
        x = batches[position[0]]
        position[0] = (position[0] + 1) % len(batches)
        jax.block_until_ready(fn(x))

    return call


# ---------------------------------------------------------------- counting launches and syncs


@dataclass(frozen=True)
class ProfEvent:
    """What the counts need of one profiler event: its name, whether it ran on the GPU (a kernel or a
    copy) or on the host (an aten op, a CUDA runtime call), and the CUPTI correlation id that pairs a
    runtime call with its GPU activity."""

    name: str
    on_gpu: bool = False
    correlation: int = 0


@dataclass(frozen=True)
class CallCounts:
    """Per call: GPU kernels, launch calls, host syncs, device-to-host copies, and aten ops (every
    dispatcher level, views included: the CPU stand-in for kernels, as counted in the solver audit)."""

    kernels: int
    launches: int
    syncs: int
    dtoh: int
    aten_ops: int


def count_events(events: Iterable[ProfEvent]) -> CallCounts:
    """Count one call's events. A host sync is a ``cudaStreamSynchronize`` / ``cudaDeviceSynchronize`` /
    ``cudaEventSynchronize`` runtime call, or a blocking ``cudaMemcpy`` whose GPU copy (same correlation
    id) is device-to-host; ``aten::item`` / ``aten::_local_scalar_dense`` and the ``cudaMemcpyAsync``
    under them are parts of that same sync and are not counted again."""
    events = list(events)
    dtoh_ids = {e.correlation for e in events if e.on_gpu and e.name.startswith("Memcpy DtoH")}
    host = [e for e in events if not e.on_gpu]
    return CallCounts(
        kernels=sum(e.on_gpu and not e.name.startswith(("Memcpy", "Memset")) for e in events),
        launches=sum(e.name in LAUNCH_CALLS for e in host),
        syncs=sum(e.name in SYNC_CALLS or (e.name == BLOCKING_COPY and e.correlation in dtoh_ids) for e in host),
        dtoh=sum(e.on_gpu and e.name.startswith("Memcpy DtoH") for e in events),
        aten_ops=sum(e.name.startswith("aten::") for e in host),
    )


def profiled_events(fn: Callable[[], None], device: torch.device) -> list[ProfEvent]:
    """The events of one ``fn()`` under ``torch.profiler`` (CUDA activity on a CUDA device). Host
    events outside the ``fn()`` range (the bench's own closing synchronize) are left out."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        with record_function(CALL_MARK):
            fn()
        synchronize(device)
    raw = list(prof.events())
    marks = [e for e in raw if e.name == CALL_MARK and e.device_type == DeviceType.CPU]
    start, end = (marks[0].time_range.start, marks[0].time_range.end) if marks else (float("-inf"), float("inf"))
    out = []
    for e in raw:
        on_gpu = e.device_type == DeviceType.CUDA
        if e.name == CALL_MARK or (not on_gpu and not start <= e.time_range.start <= end):
            continue
        out.append(ProfEvent(e.name, on_gpu, int(e.id)))
    return out


def host_reads(fn: Callable[[], None]) -> int:
    """Tensor-to-Python conversions (``item``, ``tolist``, ``bool``, ``float``, ``int``, ``index``)
    during one ``fn()``, counted in Python on any device -- on a GPU each one is a host sync."""
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


def count_row(n: int, k: int, loop: str, counts: CallCounts, reads: int, device: torch.device) -> list[Any]:
    """A row of the counts table; on CPU the kernel column holds aten ops and syncs are n/a."""
    if device.type == "cuda":
        return [n, k, loop, counts.kernels, counts.launches, counts.syncs, counts.dtoh, reads]
    return [n, k, loop, counts.aten_ops, NOT_ON_CPU, NOT_ON_CPU, NOT_ON_CPU, reads]


def counts_headers(device: torch.device) -> list[str]:
    kernels = "CUDA kernels" if device.type == "cuda" else "aten ops (CPU stand-in for kernels)"
    return ["n", "k", "loop", kernels, "launch calls", "host syncs", "DtoH copies", "tensor->Python reads"]


# ---------------------------------------------------------------- table 1 and 2


def m3g_tables(
    device: torch.device,
    sizes: Sequence[tuple[int, int]],
    repeats: int,
    pool_size: int,
    jax_side: JaxComparison,
    show: Callable[[str], None] = print,
) -> tuple[str, str]:
    """Table 1 (cold first call and steady state per candidate, ott-jax ratio) and table 2 (counts
    per call), rows printed through ``show`` as they are measured."""
    timing_rows: list[list[Any]] = []
    count_rows: list[list[Any]] = []
    ott_name = f"ott-jax ({jax_side.label})" if jax_side.label else "ott-jax"
    for n, k in sizes:
        pool = EmbeddingPool(n, k, size=pool_size, device=device)
        results: dict[str, tuple[float, Timing]] = {}
        call = m3g_call(pool)
        results[f"m3g {BACKEND} loop"] = cold_and_steady(call, repeat=repeats, warmup=2, device=device)
        count_rows.append(
            count_row(n, k, BACKEND, count_events(profiled_events(call, device)), host_reads(call), device)
        )
        show(f"  counts {n},{k} {BACKEND}: {count_rows[-1][3:]}")
        ott = ott_call(pool, jax_side.device) if jax_side.device is not None else None
        if isinstance(ott, str):
            show(f"  ott-jax not timed: ott does not import ({ott})")
        elif ott is not None:
            results[ott_name] = cold_and_steady(ott, repeat=repeats, warmup=2)
        ott_steady = results[ott_name][1].median if ott_name in results else None
        for name, (cold, steady) in results.items():
            versus = ratio(ott_steady, steady.median) if ott_steady is not None and name != ott_name else "-"
            timing_rows.append([n, k, name, f"{cold * 1e3:.3g}", steady.ms(), versus])
            show(f"  time {n},{k} {name}: cold {cold * 1e3:.3g} ms, steady {steady.ms()} ms, ott/this {versus}")
    table1 = markdown_table(
        ["n", "k", "candidate", "cold first call ms", f"steady ms (median of {repeats})", "ott-jax / this"],
        timing_rows,
    )
    return table1, markdown_table(counts_headers(device), count_rows)


# ---------------------------------------------------------------- table 3: training steps/s


def fake_eeg_cache(folder: Path, subjects: int, windows: int) -> Path:
    """A prepared 6-channel EEG window cache (synthetic noise, labels cycling 0..4), the format of
    tests/_eeg_helpers.py with the channels of configs/eeg_synthetic_base.yaml."""
    from multiview_app.data.eeg.cache import CACHE_FORMAT

    (folder / "windows").mkdir(parents=True, exist_ok=True)
    recordings = []
    for s in range(subjects):
        data = np.random.default_rng(s).standard_normal((windows, len(EEG_CHANNELS), 3000)).astype(np.float32)
        np.save(folder / "windows" / f"r{s}.npy", data)
        recordings.append(
            {
                "recording": f"r{s}",
                "subject": f"S{s}",
                "file": f"windows/r{s}.npy",
                "n_windows": windows,
                "labels": [i % 5 for i in range(windows)],
                "epochs": list(range(windows)),
                "sources": [],
                "counts": {},
            }
        )
    manifest = {
        "format": CACHE_FORMAT,
        "dataset": "physionet2018",
        "options": {},
        "dtype": "float32",
        "channels": EEG_CHANNELS,
        "sfreq": 100.0,
        "window_seconds": 30.0,
        "stages": ["W", "N1", "N2", "N3", "REM"],
        "recordings": recordings,
        "duplicates": [],
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def train_rate(cfg: Any) -> tuple[float, float]:
    """``(steps/s, data share)`` of a short run of ``cfg`` (on the trainer's device: CUDA when present): median
    step time and ``time/data`` of the logged windows after the first (warm-up) one."""
    from multiview_app.train.metrics import read_metrics
    from multiview_app.train.trainer import train

    rows = [row for row in read_metrics(train(cfg).run_dir / "metrics.jsonl") if "step_time_s" in row]
    timed = rows[1:] or rows
    step_time = statistics.median(row["step_time_s"] for row in timed)
    data_share = statistics.median(row.get("time/data", float("nan")) for row in timed)
    return 1.0 / step_time, data_share


def training_table(quick: bool, tmp: Path) -> str:
    """Steps/s of the EEG demo's training (``make run``'s config: ``eeg_demo.demo_config``) and, without ``quick``,
    of digits_m3g, on the trainer's device."""
    from multiview_app.config import load_config
    from multiview_app.experiments.eeg_demo import demo_config, demo_settings

    steps, log_every = (3, 1) if quick else (60, 10)
    common = [f"train.max_steps={steps}", f"train.log_every={log_every}", "train.checkpoint_every=0"]
    common += ["train.diagnostics=false", "eval.linear_probe=false"]
    cache, runs = fake_eeg_cache(tmp / "eeg_cache", subjects=4, windows=8 if quick else 40), tmp / "runs"
    configs = {
        "eeg demo (m3g k=6 n=16)": lambda: demo_config(
            cache, runs, "eeg", 0, demo_settings(), ["data.options.test_fraction=0.25", *common]
        ),
        "digits_m3g": lambda: load_config(REPO / "configs/digits_m3g.yaml", [*common, f"output.runs_dir={runs}"]),
    }
    rows = []
    for label, config in list(configs.items())[: 1 if quick else 2]:
        try:
            rate, share = train_rate(config())
            rows.append([label, f"{rate:.2f}", f"{share:.2f}"])
        except Exception as err:  # noqa: BLE001 - one failing run is a row, not the end of the bench
            rows.append([label, "failed", f"{type(err).__name__}: {str(err)[:80]}"])
    trainer_device = "cuda" if torch.cuda.is_available() else "cpu"
    return markdown_table(["run", f"steps/s ({trainer_device})", "data share of a step"], rows)


# ---------------------------------------------------------------- table 4: peak memory


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
                    grown, took, _ = peak_rss_growth(lambda z=z, loss=loss: loss(z).backward())
                    rows.append([name, n, k, d, f"{grown / 1024:.2f} GiB (peak RSS growth)", f"{took:.2f}"])
            except torch.cuda.OutOfMemoryError:
                rows.append([name, n, k, d, "out of memory", "-"])
            del z
    return markdown_table(["loss", "n", "k", "d", "peak extra memory", "fwd+bwd s"], rows)


# ---------------------------------------------------------------- main

TITLES = {
    "m3g": "M3G fwd+bwd, float32, eps 0.2, tol 1e-3, fresh embeddings each call",
    "counts": "Per M3G call (fresh embeddings, after warm-up): kernels and host syncs",
    "train": "Training steps/s",
    "memory": "Peak memory of one fwd+bwd",
}


def device_lines(device: torch.device) -> list[str]:
    """The torch side: device and GPU model."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    return [f"torch {torch.__version__} device: {device} ({name})"]


def main(argv: list[str] | None = None) -> dict[str, str]:
    """Run the bench (its M3G rows use the sweep blocks on every device, :data:`BACKEND`); the tables by part."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for bench_gpu.md (and scratch runs)")
    parser.add_argument(
        "--device", default="cuda" if torch.cuda.is_available() else "cpu", help="cuda (default when available) or cpu"
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: small sizes, 2 repeats, 3 training steps")
    parser.add_argument("--repeats", type=int, default=None, help="timed calls per M3G row (default 5, quick 2)")
    parser.add_argument("--pool", type=int, default=8, help="pre-generated embedding batches cycled per size (>= 2)")
    parser.add_argument("--sizes", default=None, help="M3G sizes as n:k,n:k (default: 16:6,32:3,64:3,64:4,128:4)")
    parser.add_argument("--skip", default="", help="comma list of parts to skip: m3g,train,memory")
    parser.add_argument("--no-ott", action="store_true", help="do not import jax / ott-jax")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here (use --device cpu)")
    if args.pool < 2:
        parser.error(f"--pool must be >= 2 (fresh embeddings each call), got {args.pool}")
    sizes = QUICK_SIZES if args.quick else M3G_SIZES
    if args.sizes:
        sizes = parse_sizes(args.sizes)
    repeats = args.repeats or (2 if args.quick else 5)
    skip = set(filter(None, args.skip.split(",")))
    args.out.mkdir(parents=True, exist_ok=True)

    def show(text: str) -> None:
        print(text, flush=True)

    header = device_lines(device)
    if "m3g" not in skip:
        jax_side = (
            JaxComparison(None, "ott-jax comparison skipped: --no-ott")
            if args.no_ott
            else jax_comparison(device, import_jax())
        )
        header.append(jax_side.line)
    for line in header:
        show(line)
    tables: dict[str, str] = {}
    if "m3g" not in skip:
        tables["m3g"], tables["counts"] = m3g_tables(device, sizes, repeats, args.pool, jax_side, show)
        show(f"\n### {TITLES['m3g']}\n\n{tables['m3g']}\n\n### {TITLES['counts']}\n\n{tables['counts']}\n")
    if "train" not in skip:
        with tempfile.TemporaryDirectory(dir=args.out) as tmp:
            tables["train"] = training_table(args.quick, Path(tmp))
        show(f"\n### {TITLES['train']}\n\n{tables['train']}\n")
    if "memory" not in skip:
        tables["memory"] = peak_memory(device, args.quick)
        show(f"\n### {TITLES['memory']}\n\n{tables['memory']}\n")
    text = "\n".join(header) + "\n\n" + "\n\n".join(f"### {TITLES[key]}\n\n{table}" for key, table in tables.items())
    text += f"\n\n{machine_line()}\n{command_line()}\n"
    show(f"{machine_line()}\n{command_line()}")
    (args.out / "bench_gpu.md").write_text(text)
    return tables


if __name__ == "__main__":
    main()
