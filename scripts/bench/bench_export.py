"""``mvapp export`` benchmark (results go to docs/benchmarks.md, section "Export").

1. Throughput (rows/s) of the export (stream -> sharded files on disk) vs the evaluators' in-memory
   feature extraction (``eval.features.extract_features``, all rows kept in RAM) on the same model,
   data, split (``all``), batch size and rows, in the same process, interleaved, best of
   ``--repeats``. Goal: ratio >= 1.0x.
2. Peak RSS (``ru_maxrss`` of a fresh process per measurement) at ``--base`` (digits) /
   ``--eeg-base`` (EEG) dataset repetitions and ``--scale`` x more rows (the dataset repeated), for the export and, for contrast, the in-memory path.
   Goal: the export's peak RSS grows by < 10 % from base to scale.

Data: the digits default (``configs/digits_infonce_pwe.yaml``: small_cnn width 32, 128 features,
one eval view) and the EEG default (``configs/eeg_synthetic_m3g.yaml``: conv encoder width 256,
k = 6 channel views per window, per-view rows) on synthetic PhysioNet-2018-format nights; models
after one training step (weights do not change the speed).

Usage: .venv/bin/python scripts/bench/bench_export.py [--repeats 2] [--base 10] [--eeg-base 1] [--scale 10]
       [--eeg-items N] [--work DIR] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import ConcatDataset, Subset

ROOT = Path(__file__).resolve().parents[2]

from common import synthetic_eeg_cache  # noqa: E402

from multiview_app.config import load_config  # noqa: E402
from multiview_app.data.adapters import build_adapter  # noqa: E402
from multiview_app.data.views import build_view_policy  # noqa: E402
from multiview_app.eval.features import extract_features  # noqa: E402
from multiview_app.experiments import ensure_trained  # noqa: E402
from multiview_app.export import export_model  # noqa: E402
from multiview_app.train.run_io import load_run  # noqa: E402

BATCH = {"digits": 256, "eeg": 64}


class RepeatedAdapter:
    """The first ``limit`` items (default all) of every split of ``adapter``, repeated ``times``
    (more rows, same items; meta columns repeat)."""

    def __init__(self, adapter: Any, times: int, limit: int | None = None) -> None:
        self.inner, self.times, self.limit = adapter, times, limit
        self.splits, self.modality, self.class_names = adapter.splits, adapter.modality, adapter.class_names

    def split(self, name: str) -> ConcatDataset:
        dataset = self.inner.split(name)
        if self.limit is not None and self.limit < len(dataset):
            dataset = Subset(dataset, range(self.limit))
        return ConcatDataset([dataset] * self.times)


def make_runs(work: Path) -> dict[str, Path]:
    """One-step runs of the digits and EEG defaults (EEG: 3 synthetic 1-h nights, prepared), trained unless
    done (``ensure_trained(cfg, "reuse")``)."""
    runs = work / "runs"
    digits = load_config(
        ROOT / "configs/digits_infonce_pwe.yaml",
        [f"output.runs_dir={runs}", "train.max_steps=1", "train.checkpoint_every=0", "eval.linear_probe=false"],
        name="digits",
    )
    ensure_trained(digits, "reuse")
    cache = synthetic_eeg_cache(work, subjects=3, hours=1)
    eeg = load_config(
        ROOT / "configs/eeg_synthetic_m3g.yaml",
        [
            f"data.options.cache={cache}",
            "data.options.test_fraction=0.34",
            f"output.runs_dir={runs}",
            "train.max_steps=1",
            "train.checkpoint_every=0",
            "train.num_workers=0",
        ],
        name="eeg",
    )
    ensure_trained(eeg, "reuse")
    return {"digits": digits.run_dir, "eeg": eeg.run_dir}


def _setup(run: Path, times: int, limit: int | None) -> tuple[Any, Any, Any]:
    cfg, model = load_run(run, "final")
    adapter = build_adapter(cfg.data.adapter, cfg.data.options)
    policy = build_view_policy(cfg.views.policy, cfg.views.k, cfg.views.options, adapter)
    return model, RepeatedAdapter(adapter, times, limit), policy


def evaluator_path(model: Any, adapter: Any, policy: Any, batch: int, out: Path | None = None) -> int:
    """The evaluators' path: every split's features in memory, then per-view rows (``out`` unused). Returns rows."""
    parts = [extract_features(model, adapter, policy, split, batch, progress=False)[0] for split in adapter.splits]
    rows = np.concatenate([p.reshape(-1, p.shape[-1]) for p in parts])
    return int(rows.shape[0])


def export_path(model: Any, adapter: Any, policy: Any, batch: int, out: Path) -> int:
    manifest = export_model(model, adapter, policy, out, split="all", batch_size=batch, overwrite=True, progress=False)
    return int(manifest["rows"])


PATHS = {"export": export_path, "evaluator": evaluator_path}
"""The two measured paths: ``(model, adapter, policy, batch, out) -> rows``."""


def child(kind: str, path: str, times: int, limit: int | None, run: Path, out: Path) -> None:
    """Fresh process: one measurement; prints JSON with rows, seconds and peak RSS (MiB)."""
    torch.set_num_threads(1)
    model, adapter, policy = _setup(run, times, limit)
    start = time.perf_counter()
    rows = PATHS[path](model, adapter, policy, BATCH[kind], out)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux
    print(json.dumps({"rows": rows, "seconds": seconds, "peak_rss_mib": peak}))


def throughput(kind: str, run: Path, out: Path, repeats: int, limit: int | None, times: int = 1) -> dict[str, Any]:
    """Interleaved best-of-``repeats`` rows/s of both paths in this process (1 torch thread), per
    wall-clock second and per CPU second of this process (``time.process_time``: with one thread and
    no loader workers it counts the work itself, so it is far less disturbed by other jobs on the
    machine than the wall clock)."""
    model, adapter, policy = _setup(run, times, limit)
    best = {(path, clock): 0.0 for path in ("evaluator", "export") for clock in ("wall", "cpu")}
    rows = 0
    for _ in range(repeats):
        for path in ("evaluator", "export"):
            wall, cpu = time.perf_counter(), time.process_time()
            rows = PATHS[path](model, adapter, policy, BATCH[kind], out)
            best[path, "wall"] = max(best[path, "wall"], rows / (time.perf_counter() - wall))
            best[path, "cpu"] = max(best[path, "cpu"], rows / (time.process_time() - cpu))
    return {
        "rows": rows,
        "evaluator_rows_per_s": best["evaluator", "wall"],
        "export_rows_per_s": best["export", "wall"],
        "ratio": best["export", "wall"] / best["evaluator", "wall"],
        "evaluator_rows_per_cpu_s": best["evaluator", "cpu"],
        "export_rows_per_cpu_s": best["export", "cpu"],
        "ratio_cpu": best["export", "cpu"] / best["evaluator", "cpu"],
        "load_average": list(os.getloadavg()),
    }


def peak_rss(kind: str, path: str, times: int, limit: int | None, run: Path, out: Path) -> dict[str, Any]:
    cmd = [
        sys.executable,
        __file__,
        "--eeg-batch",
        str(BATCH["eeg"]),
        "--child",
        kind,
        path,
        str(times),
        str(limit or 0),
        str(run),
        str(out),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"child {kind} {path} x{times} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--base", type=int, default=10, help="digits: dataset repetitions of the base RSS measurement")
    parser.add_argument("--eeg-base", type=int, default=1, help="EEG: dataset repetitions of the base RSS measurement")
    parser.add_argument("--scale", type=int, default=10, help="rows factor of the second RSS measurement")
    parser.add_argument("--kinds", nargs="+", default=["digits", "eeg"], choices=["digits", "eeg"])
    parser.add_argument("--work", type=Path, default=None, help="keep runs / data here (default: a temp folder)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--eeg-items", type=int, default=None, help="EEG: first N items of every split (default all)")
    parser.add_argument(
        "--eeg-batch",
        type=int,
        default=BATCH["eeg"],
        help="EEG items per forward (keep <= --eeg-items so both RSS sizes run full batches)",
    )
    parser.add_argument("--speed-times", type=int, default=1, help="dataset repetitions of the throughput measurement")
    parser.add_argument("--no-memory", action="store_true", help="throughput only (skip the peak-RSS children)")
    parser.add_argument("--child", nargs=6, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    BATCH["eeg"] = args.eeg_batch
    if args.child:
        kind, path, times, limit, run, out = args.child
        child(kind, path, int(times), int(limit) or None, Path(run), Path(out))
        return
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        runs = make_runs(work)
        results: dict[str, Any] = {
            "torch": torch.__version__,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        }
        for kind in args.kinds:
            base = args.base if kind == "digits" else args.eeg_base
            limit = args.eeg_items if kind == "eeg" else None
            speed = throughput(kind, runs[kind], work / f"out_{kind}", args.repeats, limit, args.speed_times)
            memory = (
                {}
                if args.no_memory
                else {
                    f"{path}_x{times}": peak_rss(kind, path, times, limit, runs[kind], work / f"rss_{kind}")
                    for path in ("export", "evaluator")
                    for times in (base, base * args.scale)
                }
            )
            results[kind] = {"throughput": speed, "memory": memory}
            print(
                f"{kind}: {speed['rows']} rows; evaluator {speed['evaluator_rows_per_s']:.0f} rows/s, export "
                f"{speed['export_rows_per_s']:.0f} rows/s, ratio {speed['ratio']:.2f}x; per CPU second: evaluator "
                f"{speed['evaluator_rows_per_cpu_s']:.0f}, export {speed['export_rows_per_cpu_s']:.0f}, ratio "
                f"{speed['ratio_cpu']:.2f}x (load average {speed['load_average'][0]:.1f})",
                flush=True,
            )
            for path in ("export", "evaluator") if memory else ():
                lo, hi = memory[f"{path}_x{base}"], memory[f"{path}_x{base * args.scale}"]
                growth = hi["peak_rss_mib"] / lo["peak_rss_mib"] - 1.0
                print(
                    f"  {path}: peak RSS {lo['peak_rss_mib']:.0f} MiB at {lo['rows']} rows -> "
                    f"{hi['peak_rss_mib']:.0f} MiB at {hi['rows']} rows ({growth:+.1%})",
                    flush=True,
                )
        if args.json:
            args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
