"""ott-jax's M3G, the reference of the M3G benches, in one place: the objective, its venv and its subprocess.

The objective is ours written with ott-jax's ``MMSinkhorn`` (cost ``cv``: squared Euclidean on the unit vectors
scaled by ``2 / (k - 1)``; ott's ``ent_reg_cost`` is our OT value + epsilon), jitted with its gradient
(:func:`m3g_value_and_grad`). ``bench_gpu.py`` calls it in process when jax imports; ``bench_m3g.py`` and
``bench_m3g_cpu.py --contention`` run this file in a separate venv that holds jax and ott-jax
(:func:`ensure_ott_venv`, :func:`run_ott`), on inputs saved as ``.npy``::

    OTT_PYTHON scripts/bench/ott_m3g.py Z.npy EPSILON REPEATS BUDGET_S   # prints one JSON line

This file imports neither torch nor the project, so it runs in that venv as it is.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

OTT_VENV = Path(os.environ.get("MVAPP_OTT_VENV", Path(__file__).resolve().parents[2] / ".bench-venvs" / "ott"))
"""The venv with jax + ott-jax: ``$MVAPP_OTT_VENV``, else ``.bench-venvs/ott`` (keep it git-ignored)."""


def m3g_value_and_grad(eps: float, tol: float = 1e-3) -> Any:
    """``jit(value_and_grad)`` of the M3G loss of embeddings ``(n, k, d)``: ``((value, (converged, sweeps)), grad)``."""
    import jax
    import jax.numpy as jnp
    from ott.experimental.mmsinkhorn import MMSinkhorn

    solver = MMSinkhorn(threshold=tol, max_iterations=1000)

    def m3g(x: Any) -> Any:
        n, k, _ = x.shape
        unit = x / jnp.linalg.norm(x, axis=-1, keepdims=True)
        xs = tuple(2.0 / (k - 1) * unit[:, view] for view in range(k))
        out = solver(xs, epsilon=eps)
        diag = sum(jnp.sum((xs[a] - xs[b]) ** 2) for a in range(k) for b in range(a + 1, k)) / n
        return diag - eps * jnp.log(n) - out.ent_reg_cost, (out.converged, out.n_iters)

    return jax.jit(jax.value_and_grad(m3g, has_aux=True))


def ensure_ott_venv(venv: Path = OTT_VENV) -> str | None:
    """Path of the venv's python (created on demand: venv + pip install jax ott-jax), or a reason prefixed ``!``."""
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
    """This file in the ott venv on the embeddings saved at ``path``: its JSON (``time`` in seconds, ``runs``,
    ``value``, ``converged``, ``iterations``, ``peak_mb``), or ``{"error": reason}``. ``threads == 1``: one XLA
    thread; ``stat``: ``median`` or ``min`` of the timed calls."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", BENCH_STAT=stat)
    if threads == 1:
        env["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    command = [python, str(Path(__file__).resolve()), str(path), str(eps), str(repeats), str(budget)]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout:.0f} s"}
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": f"ott failed: {tail[:120]}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith(field + ":"))


def main(path: str, eps: float, repeats: int, budget: float) -> None:
    """In the ott venv: jit, one warm-up call, up to ``repeats`` timed calls (stopping past ``budget`` seconds), then
    the peak resident-set growth of one more call (``VmHWM`` reset through ``/proc/self/clear_refs``)."""
    import jax
    import numpy as np

    raw = jax.numpy.asarray(np.load(path))  # (n, k, d)
    fn = m3g_value_and_grad(eps)
    jax.block_until_ready(fn(raw))
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < repeats and (not times or time.perf_counter() - start <= budget):
        began = time.perf_counter()
        jax.block_until_ready(fn(raw))
        times.append(time.perf_counter() - began)
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    base = _status_kib("VmRSS")
    (value, (converged, iterations)), grad = fn(raw)
    jax.block_until_ready(grad)
    peak = (_status_kib("VmHWM") - base) / 1024
    seconds = min(times) if os.environ.get("BENCH_STAT") == "min" else statistics.median(times)
    found = {"time": seconds, "runs": len(times), "value": float(value), "converged": bool(converged)}
    print(json.dumps({**found, "iterations": int(iterations), "peak_mb": max(peak, 0.0)}))


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
