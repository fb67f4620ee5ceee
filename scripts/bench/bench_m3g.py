"""Benchmark the ``m3g`` loss: forward+backward time and peak memory, float32, d=128.

Rows: (n, k) in {(32,3), (64,3), (128,3), (32,4), (64,4), (128,4), (32,5), (16,6)} x epsilon in {0.2, 0.05}.
Columns: ours (``build_loss("m3g")``, factorized solver), the materialized PyTorch reference
(:func:`m3g_materialized`: full n^k tensor, log-domain Alg. 1, Danskin gradient) in the same
process on the same inputs, and optionally ott-jax's ``MMSinkhorn`` (threshold 1e-3, same cost,
jit, timed after warm-up, ``jax.value_and_grad``) in a subprocess of a separate venv
(``--ott-venv``, default ``$MVAPP_OTT_VENV`` or ``.bench-venvs/ott``; created on demand with
``--with-ott``; keep it outside the repository or git-ignored) on the same inputs saved as ``.npy``.

Time: median wall clock of forward+backward. Memory: peak resident-set growth during one
forward+backward (Linux ``VmHWM`` after resetting it through ``/proc/self/clear_refs``), i.e. what
the call adds on top of the process; same probe in the ott subprocess.

    .venv/bin/python scripts/bench/bench_m3g.py [--quick] [--with-ott] [--write-docs]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]

from common import DOCS, embeddings, machine_line, markdown_tables, section_body, write_docs_section  # noqa: E402

from multiview_app.losses import build_loss  # noqa: E402
from multiview_app.losses.base import normalize  # noqa: E402
from multiview_app.losses.m3g import m3g_materialized  # noqa: E402

SIZES = [(32, 3), (64, 3), (128, 3), (32, 4), (64, 4), (128, 4), (32, 5), (16, 6)]
QUICK_SIZES = [(16, 3), (16, 4)]
EPSILONS = [0.2, 0.05]
OTT_VENV = Path(os.environ.get("MVAPP_OTT_VENV", ROOT / ".bench-venvs" / "ott"))


# --------------------------------------------------------------------------- measurement
def _hwm_kib() -> int | None:
    """Peak RSS (``VmHWM``, KiB) of this process, or None off Linux."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _rss_kib() -> int | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _fixed_mmap_threshold() -> None:
    """Make glibc serve every allocation >= 64 KiB by mmap and unmap it on free.

    Otherwise freed tensors stay in the heap (dynamic mmap threshold) and a later call's peak RSS
    growth reads as ~0. ``mallopt(M_MMAP_THRESHOLD=-3, 65536)``; no-op off glibc.
    """
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").mallopt(-3, 64 * 1024)
    except (OSError, AttributeError):
        pass


def peak_memory_mb(fn: Callable[[], object]) -> float | None:
    """Peak RSS growth (MB) while running ``fn`` once (resets the high-water mark first)."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        return None
    base = _rss_kib()
    fn()
    peak = _hwm_kib()
    return None if base is None or peak is None else max(peak - base, 0) / 1024


def median_time(fn: Callable[[], object], repeats: int, budget_s: float, stat: str = "median") -> tuple[float, int]:
    """Median (or ``stat="min"``: minimum) wall time of ``fn`` over up to ``repeats`` runs (stops
    early past ``budget_s``). The minimum is the robust choice on an oversubscribed machine, where
    a ms-scale call is often preempted for a whole time slice."""
    times: list[float] = []
    start = time.perf_counter()
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if time.perf_counter() - start > budget_s:
            break
    return (min(times) if stat == "min" else statistics.median(times)), len(times)


# --------------------------------------------------------------------------- ott-jax subprocess
OTT_SCRIPT = r"""
import json, os, statistics, sys, time
import numpy as np
import jax, jax.numpy as jnp
from ott.experimental.mmsinkhorn import MMSinkhorn
from common import embeddings

def rss(key):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key):
                return int(line.split()[1])

def main(path, eps, repeats, budget):
    raw = jnp.asarray(np.load(path))  # (n, k, d)
    n, k, _ = raw.shape
    scale = (2.0 / (k - 1))  # sqrt of (2/(k-1))^2: SqEuclidean on unit vectors = 2 - 2<x, y>
    solver = MMSinkhorn(threshold=1e-3, max_iterations=1000)

    def m3g(x):
        z = x / jnp.linalg.norm(x, axis=-1, keepdims=True)
        xs = tuple(scale * z[:, l] for l in range(k))
        out = solver(xs, epsilon=eps)
        diag = sum(jnp.sum((xs[l] - xs[m]) ** 2) for l in range(k) for m in range(l + 1, k)) / n
        # ott's ent_reg_cost = sum <f, a> + eps (1 - sum P) = our OT + eps
        return diag - eps * jnp.log(n) - out.ent_reg_cost, (out.converged, out.n_iters)

    fn = jax.jit(jax.value_and_grad(m3g, has_aux=True))
    (val, aux), grad = fn(raw)
    jax.block_until_ready(grad)
    times = []
    start = time.perf_counter()
    for _ in range(repeats):
        t0 = time.perf_counter()
        (val, aux), grad = fn(raw)
        jax.block_until_ready(grad)
        times.append(time.perf_counter() - t0)
        if time.perf_counter() - start > budget:
            break
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    base = rss("VmRSS")
    (val, aux), grad = fn(raw)
    jax.block_until_ready(grad)
    peak = (rss("VmHWM") - base) / 1024
    print(json.dumps({"time": min(times) if os.environ.get("BENCH_STAT") == "min" else statistics.median(times),
                      "runs": len(times), "value": float(val),
                      "converged": bool(aux[0]), "iterations": int(aux[1]), "peak_mb": max(peak, 0.0)}))

main(sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
"""


def ensure_ott_venv(venv: Path = OTT_VENV) -> str | None:
    """Path of the ott venv's python (created on demand), or a reason string prefixed ``!``."""
    python = venv / "bin" / "python"
    check = [str(python), "-c", "import ott.experimental.mmsinkhorn, jax"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return str(python)
    print(f"creating {venv} (python3 -m venv + pip install jax ott-jax) ...", flush=True)
    try:
        subprocess.run(["python3", "-m", "venv", str(venv)], check=True, capture_output=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "jax", "ott-jax"], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as err:
        return f"!cannot create the ott venv: {err}"
    if subprocess.run(check, capture_output=True).returncode != 0:
        return "!ott-jax installed but MMSinkhorn does not import"
    return str(python)


def run_ott(
    python: str, path: Path, eps: float, repeats: int, budget: float, threads: int, timeout: float, stat: str = "median"
) -> dict:
    """Run :data:`OTT_SCRIPT` in the ott venv; returns its JSON dict or ``{"error": reason}``."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", BENCH_STAT=stat)
    if threads == 1:
        env["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    script = path.parent / "ott_m3g.py"
    script.write_text(OTT_SCRIPT)
    try:
        proc = subprocess.run(
            [python, str(script), str(path), str(eps), str(repeats), str(budget)],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout:.0f} s"}
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": f"ott failed: {tail[:120]}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- main
def fmt(x: float | None, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def ms(seconds: float | None) -> str:
    """Seconds as milliseconds with 3 significant digits (``-`` for None)."""
    return "-" if seconds is None else f"{seconds * 1e3:.3g}"


def ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2g}x"


def bench_row(n: int, k: int, eps: float, args: argparse.Namespace, ott_python: str | None, tmp: Path) -> dict:
    """Measure one (n, k, epsilon) row."""
    raw = embeddings(n, k, 128, seed=1000 * k + n, signal=args.signal)
    loss = build_loss("m3g", epsilon=eps)

    def ours() -> float:
        x = raw.clone().requires_grad_()
        out = loss(x)
        out.backward()
        return out.item()

    def reference() -> float:
        x = raw.clone().requires_grad_()
        out, _ = m3g_materialized(normalize(x), eps, "cv", 1e-3, 1000)
        out.backward()
        return out.item()

    row: dict = {"n": n, "k": k, "eps": eps}
    value = ours()  # warm-up
    row["ours_value"], row["ours_iters"] = value, int(loss.last_stats["iterations"])
    row["ours_converged"], row["fallback"] = bool(loss.last_stats["converged"]), bool(loss.last_stats["fallback"])
    row["ours_time"], row["ours_runs"] = median_time(ours, args.repeats, args.budget, args.stat)
    row["ours_mb"] = peak_memory_mb(ours) if args.memory else None
    if args.no_reference:
        row["ref_skip"] = "skipped: --no-reference"
    elif n**k > args.ref_max_entries:
        row["ref_skip"] = f"skipped: n^k = {n**k:.2e} > --ref-max-entries {args.ref_max_entries:.0e}"
    else:
        row["ref_value"] = reference()  # also the warm-up
        row["ref_time"], row["ref_runs"] = median_time(reference, args.ref_repeats, args.budget, args.stat)
        row["ref_mb"] = peak_memory_mb(reference) if args.memory else None
    if ott_python is not None and not ott_python.startswith("!"):
        path = tmp / f"z_{n}_{k}.npy"
        np.save(path, raw.numpy())
        row["ott"] = run_ott(
            ott_python, path, eps, args.repeats, args.budget, args.threads, args.ott_timeout, args.stat
        )
    return row


def render(rows: list[dict], args: argparse.Namespace, ott_note: str) -> str:
    """Markdown table (also printed)."""
    lines = [
        "| n | k | eps | ours ms | iters | ref ms | ref/ours | ours MB | ref MB | mem ref/ours | ott ms | ott/ours | ott iters | value ours | abs(ours-ref) | abs(ours-ott) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    for r in rows:
        ott = r.get("ott", {})
        if "error" in ott:
            notes.append(f"(n={r['n']}, k={r['k']}, eps={r['eps']}) ott: {ott['error']}")
        if "ref_skip" in r:
            notes.append(f"(n={r['n']}, k={r['k']}, eps={r['eps']}) reference {r['ref_skip']}")
        iters = (
            f"{r['ours_iters']}"
            + ("" if r["ours_converged"] else " (not conv.)")
            + (" fallback" if r["fallback"] else "")
        )
        lines.append(
            "| "
            + " | ".join(
                [
                    str(r["n"]),
                    str(r["k"]),
                    str(r["eps"]),
                    ms(r["ours_time"]),
                    iters,
                    ms(r.get("ref_time")),
                    ratio(r.get("ref_time"), r["ours_time"]),
                    fmt(r.get("ours_mb"), ".1f"),
                    fmt(r.get("ref_mb"), ".1f"),
                    ratio(r.get("ref_mb"), r.get("ours_mb")),
                    ms(ott.get("time")),
                    ratio(ott.get("time"), r["ours_time"]),
                    str(ott.get("iterations", "-")) + ("" if ott.get("converged", True) else " (not conv.)"),
                    f"{r['ours_value']:.5f}",
                    fmt(abs(r["ours_value"] - r["ref_value"]) if "ref_value" in r else None, ".1e"),
                    fmt(abs(r["ours_value"] - ott["value"]) if "value" in ott else None, ".1e"),
                ]
            )
            + " |"
        )
    text = "\n".join(lines)
    if ott_note:
        notes.append(ott_note)
    if notes:
        text += "\n\n" + "\n".join(f"- {note}" for note in notes)
    return text


def write_docs(table: str, command: str, args: argparse.Namespace) -> None:
    """The table between the ``bench_m3g`` markers of docs/benchmarks.md (``common.py``, the
    suite runner's ``--write-docs``); the section's prose stays as written."""
    machine = f"torch threads {args.threads}; {machine_line()}"
    write_docs_section("bench_m3g", section_body(command, machine, markdown_tables(table)))
    print(f"wrote the bench_m3g tables into {DOCS}")


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: two small sizes, 2 repeats, no ott")
    parser.add_argument("--with-ott", action="store_true", help="also run ott-jax MMSinkhorn (creates its venv)")
    parser.add_argument(
        "--ott-venv",
        type=Path,
        default=OTT_VENV,
        help="venv with jax + ott-jax (created there if missing; default $MVAPP_OTT_VENV or .bench-venvs/ott)",
    )
    parser.add_argument("--repeats", type=int, default=None, help="timed runs per row (default 5, quick 2)")
    parser.add_argument("--ref-repeats", type=int, default=3, help="timed runs of the reference")
    parser.add_argument("--budget", type=float, default=30.0, help="stop repeating a row after this many seconds")
    parser.add_argument(
        "--signal",
        type=float,
        default=0.0,
        help="weight of the shared per-item direction (0 = independent random views)",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("--eps", type=float, nargs="+", default=None, help="epsilons (default 0.2 0.05)")
    parser.add_argument("--sizes", type=str, default=None, help="e.g. '64x4,128x4' (default: the issue's list)")
    parser.add_argument("--ref-max-entries", type=float, default=2**25, help="skip the reference above this n^k")
    parser.add_argument("--no-reference", action="store_true", help="skip the materialized reference")
    parser.add_argument(
        "--no-memory",
        dest="memory",
        action="store_false",
        help="skip the peak-memory probes (they fix glibc's mmap threshold for the whole process, "
        "which slows allocation-heavy rows: take times from a --no-memory run)",
    )
    parser.add_argument("--ott-timeout", type=float, default=900.0, help="seconds per ott subprocess")
    parser.add_argument(
        "--stat",
        choices=["median", "min"],
        default="median",
        help="time statistic for every column (min: robust on a loaded machine)",
    )
    parser.add_argument("--write-docs", action="store_true", help="write the table into docs/benchmarks.md")
    args = parser.parse_args(argv)
    args.repeats = args.repeats or (2 if args.quick else 5)
    if args.quick:
        args.ref_repeats = min(args.ref_repeats, 2)
    torch.set_num_threads(args.threads)
    # the same thread budget for the BLAS behind numpy / numba (the k = 3 fused path): on a loaded
    # machine a multi-threaded tiny GEMM can wait a whole time slice for its second thread
    from threadpoolctl import threadpool_limits

    threadpool_limits(args.threads)
    if args.memory:
        _fixed_mmap_threshold()
    sizes = QUICK_SIZES if args.quick else SIZES
    if args.sizes:
        sizes = [tuple(int(v) for v in item.split("x")) for item in args.sizes.split(",")]
    epsilons = args.eps or EPSILONS

    ott_python, ott_note = None, ""
    if args.with_ott:
        ott_python = ensure_ott_venv(args.ott_venv)
        if ott_python.startswith("!"):
            ott_note = f"ott-jax cannot run: {ott_python[1:]}"
            print(ott_note)
    else:
        ott_note = "ott-jax not run (pass --with-ott)"

    print(f"m3g forward+backward, float32, d=128, torch threads {args.threads}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n, k in sizes:
            for eps in epsilons:
                row = bench_row(n, k, eps, args, ott_python, Path(tmp))
                rows.append(row)
                ott = row.get("ott", {})
                print(
                    f"  n={n:4d} k={k} eps={eps:<5} ours {ms(row['ours_time'])} ms ({row['ours_iters']} it)"
                    f"  ref {ms(row.get('ref_time'))} ms  ott {ms(ott.get('time'))} ms"
                    f" {ott.get('error', row.get('ref_skip', ''))}",
                    flush=True,
                )
    table = render(rows, args, ott_note)
    print()
    print(table)
    if args.write_docs:
        command = "python scripts/bench/bench_m3g.py " + " ".join(
            shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])
        )
        write_docs(table, command.strip(), args)
    return rows


if __name__ == "__main__":
    main()
