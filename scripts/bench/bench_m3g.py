"""Benchmark the ``m3g`` loss: forward+backward time and peak memory, float32, d=128.

Rows: (n, k) in {(32,3), (64,3), (128,3), (32,4), (64,4), (128,4), (32,5), (16,6)} x epsilon in {0.2, 0.05}.
Columns: ours (``build_loss("m3g")``, factorized solver), the materialized PyTorch reference
(:func:`m3g_materialized`: full n^k tensor, log-domain Alg. 1, Danskin gradient) in the same
process on the same inputs, and optionally ott-jax's ``MMSinkhorn`` (threshold 1e-3, same cost,
jit, timed after warm-up, ``jax.value_and_grad``; ``ott_m3g.py``) in a subprocess of a separate venv
(``--ott-venv``, default ``$MVAPP_OTT_VENV`` or ``.bench-venvs/ott``; created on demand with
``--with-ott``; keep it outside the repository or git-ignored) on the same inputs saved as ``.npy``.

Time: median wall clock of forward+backward. Memory: peak resident-set growth during one
forward+backward (Linux ``VmHWM`` after resetting it through ``/proc/self/clear_refs``), i.e. what
the call adds on top of the process; same probe in the ott subprocess.

    .venv/bin/python scripts/bench/bench_m3g.py [--quick] [--with-ott] [--write-docs]

``--in-training``: solver variants inside training instead (docs/benchmarks.md, "Warm start of M3G inside
training"): MM-Sinkhorn sweeps per step, step time and final metrics.

    .venv/bin/python scripts/bench/bench_m3g.py --in-training --preset eeg      # the EEG demo's settings
    .venv/bin/python scripts/bench/bench_m3g.py --in-training --preset digits   # configs/digits_m3g.yaml
    .venv/bin/python scripts/bench/bench_m3g.py --in-training --variant anderson --out anderson.json  # one per process
    .venv/bin/python scripts/bench/bench_m3g.py --in-training --merge cold.json anderson.json          # the table
    .venv/bin/python scripts/bench/bench_m3g.py --in-training --batches-from runs/<trained run>       # on its batches

Runs the real trainer on the same config and seed once per variant (``cold``: plain Alg. 1 from zero potentials;
``warm``: ``loss.warm_start=true``; ``anderson``: ``loss.anderson=5``; ...; ``train.log_every=1`` so every step's
``last_stats`` lands in ``metrics.jsonl``), then the config's evaluation: few-shot sleep staging (EEG) or the
linear / kNN probe (digits). Prints a Markdown table: mean sweeps per step (all steps, first and last 10%), share
of converged steps, mean step time and the loss phase's share of it, final loss and metrics; the ratio cold /
variant of the sweeps. The runs are sequential or, with one ``--variant`` per process and ``--merge``, side by
side: on a shared machine compare sweeps, not seconds. ``--batches-from RUN``: no training; the finished run's
model embeds ``--batches`` random training batches (late-stage problems) and every variant solves each of them
in this process, interleaved (order rotated per batch, one warm-up call each): sweeps, forward+backward
milliseconds and the largest value difference to ``cold``; here the time ratios are comparable.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]

from common import (  # noqa: E402
    DOCS,
    embeddings,
    machine_line,
    markdown_table,
    markdown_tables,
    parse_sizes,
    peak_rss_growth,
    section_body,
    time_call,
    write_docs_section,
)
from ott_m3g import OTT_VENV, ensure_ott_venv, run_ott  # noqa: E402

from multiview_app.config import load_config  # noqa: E402
from multiview_app.losses import build_loss  # noqa: E402
from multiview_app.losses.base import normalize  # noqa: E402
from multiview_app.losses.m3g import m3g_materialized  # noqa: E402
from multiview_app.train.metrics import read_metrics  # noqa: E402
from multiview_app.train.trainer import train  # noqa: E402

SIZES = [(32, 3), (64, 3), (128, 3), (32, 4), (64, 4), (128, 4), (32, 5), (16, 6)]
QUICK_SIZES = [(16, 3), (16, 4)]
EPSILONS = [0.2, 0.05]


# --------------------------------------------------------------------------- measurement
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


def timed(fn: Callable[[], object], repeats: int, args: argparse.Namespace) -> tuple[float, int]:
    """``(--stat of the wall times, runs)``: up to ``repeats`` calls of ``fn``, fewer past ``--budget`` seconds."""
    timing = time_call(fn, repeat=repeats, warmup=0, budget_s=args.budget)
    return timing.of(args.stat), len(timing.runs)


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
    row["ours_time"], row["ours_runs"] = timed(ours, args.repeats, args)
    row["ours_mb"] = peak_rss_growth(ours)[0] if args.memory else None
    if args.no_reference:
        row["ref_skip"] = "skipped: --no-reference"
    elif n**k > args.ref_max_entries:
        row["ref_skip"] = f"skipped: n^k = {n**k:.2e} > --ref-max-entries {args.ref_max_entries:.0e}"
    else:
        row["ref_value"] = reference()  # also the warm-up
        row["ref_time"], row["ref_runs"] = timed(reference, args.ref_repeats, args)
        row["ref_mb"] = peak_rss_growth(reference)[0] if args.memory else None
    if ott_python is not None and not ott_python.startswith("!"):
        path = tmp / f"z_{n}_{k}.npy"
        np.save(path, raw.numpy())
        row["ott"] = run_ott(
            ott_python, path, eps, args.repeats, args.budget, args.threads, args.ott_timeout, args.stat
        )
    return row


HEADERS = ["n", "k", "eps", "ours ms", "iters", "ref ms", "ref/ours", "ours MB", "ref MB", "mem ref/ours", "ott ms"]
HEADERS += ["ott/ours", "ott iters", "value ours", "abs(ours-ref)", "abs(ours-ott)"]


def render(rows: list[dict], args: argparse.Namespace, ott_note: str) -> str:
    """Markdown table (also printed), then a note per skipped reference or failed ott run."""
    cells, notes = [], []
    for r in rows:
        ott, where = r.get("ott", {}), f"(n={r['n']}, k={r['k']}, eps={r['eps']})"
        notes += [f"{where} ott: {ott['error']}"] if "error" in ott else []
        notes += [f"{where} reference {r['ref_skip']}"] if "ref_skip" in r else []
        iters = (
            f"{r['ours_iters']}"
            + ("" if r["ours_converged"] else " (not conv.)")
            + (" fallback" if r["fallback"] else "")
        )
        cells.append(
            [
                r["n"],
                r["k"],
                r["eps"],
                ms(r["ours_time"]),
                iters,
                ms(r.get("ref_time")),
                ratio(r.get("ref_time"), r["ours_time"]),
            ]
            + [fmt(r.get("ours_mb"), ".1f"), fmt(r.get("ref_mb"), ".1f"), ratio(r.get("ref_mb"), r.get("ours_mb"))]
            + [ms(ott.get("time")), ratio(ott.get("time"), r["ours_time"])]
            + [str(ott.get("iterations", "-")) + ("" if ott.get("converged", True) else " (not conv.)")]
            + [
                f"{r['ours_value']:.5f}",
                fmt(abs(r["ours_value"] - r["ref_value"]) if "ref_value" in r else None, ".1e"),
            ]
            + [fmt(abs(r["ours_value"] - ott["value"]) if "value" in ott else None, ".1e")]
        )
    notes += [ott_note] if ott_note else []
    return markdown_table(HEADERS, cells) + ("\n\n" + "\n".join(f"- {note}" for note in notes) if notes else "")


def write_docs(table: str, command: str, args: argparse.Namespace) -> None:
    """The table between the ``bench_m3g`` markers of docs/benchmarks.md (``common.py``, the
    suite runner's ``--write-docs``); the section's prose stays as written."""
    machine = f"torch threads {args.threads}; {machine_line()}"
    write_docs_section("bench_m3g", section_body(command, machine, markdown_tables(table)))
    print(f"wrote the bench_m3g tables into {DOCS}")


# --------------------------------------------------------------------------- inside training (--in-training)

PRESETS: dict[str, dict[str, Any]] = {
    "eeg": {
        "config": "configs/eeg_synthetic_m3g.yaml",
        "overrides": [
            "data.options.cache=demo_data/physionet2018_cache",
            "train.max_steps=400",
            "train.batch_size=16",
            "model.encoders.eeg.width=32",
            "model.encoders.eeg.dropout=0.0",
            "loss.epsilon=0.2",
            "loss.max_iter=300",
        ],
        "eval": "sleep-staging",
    },
    "digits": {"config": "configs/digits_m3g.yaml", "overrides": [], "eval": "linear-probe"},
}


VARIANTS: dict[str, list[str]] = {
    "cold": ["loss.anderson=0", "loss.init_potentials=zeros"],  # plain Alg. 1 whatever the config's defaults
    "warm": ["loss.warm_start=true"],
    "anderson": ["loss.anderson=5"],
    "anderson16": ["loss.anderson=16"],
    "diagonal": ["loss.init_potentials=diagonal"],
    "anderson16_diagonal": ["loss.anderson=16", "loss.init_potentials=diagonal"],
}


def train_variant(config: str, overrides: list[str], name: str, runs_dir: str, evaluation: str) -> dict[str, Any]:
    """Train variant ``name`` once; summarize metrics.jsonl and the evaluation."""
    cfg = load_config(
        config,
        [
            *overrides,
            *VARIANTS[name],
            "train.log_every=1",
            "train.checkpoint_every=0",
            f"eval.linear_probe={str(evaluation == 'linear-probe').lower()}",
            f"output.runs_dir={runs_dir}",
        ],
        name=name,
    )
    result = train(cfg)
    records = read_metrics(Path(runs_dir) / name / "metrics.jsonl")
    sweeps = [r["stats/iterations"] for r in records]
    tenth = max(1, len(sweeps) // 10)
    summary: dict[str, Any] = {
        "steps": len(records),
        "sweeps_mean": statistics.mean(sweeps),
        "sweeps_first": statistics.mean(sweeps[:tenth]),
        "sweeps_last": statistics.mean(sweeps[-tenth:]),
        "converged": statistics.mean(r["stats/converged"] for r in records),
        "step_time_s": statistics.mean(r["step_time_s"] for r in records[1:]),
        "loss_share": statistics.mean(r["time/loss"] for r in records[1:]),
        "final_loss": statistics.mean(r["loss"] for r in records[-tenth:]),
        "wall_s": result.wall_time_s,
    }
    if evaluation == "sleep-staging":
        from multiview_app.eval.sleep_staging import run_sleep_staging

        staged = run_sleep_staging(
            Path(runs_dir) / name, shots=(10, 50, 100, 1000), seeds=3, baselines=False, progress=False
        )
        for shot, metrics in staged["results"]["trained"].items():
            summary[f"acc_s{shot}"] = metrics["accuracy"]["mean"]
    elif evaluation == "linear-probe":  # the end-of-training probe wrote eval/linear_probe.json
        probe = json.loads((Path(runs_dir) / name / "eval" / "linear_probe.json").read_text())
        for metric, value in probe["results"]["trained"].items():
            summary[metric] = value
    return summary


def offline(run_dir: str, variants: list[str], batches: int, seed: int) -> None:
    """Time the variants on a trained run's own training batches (see the module docstring)."""
    import yaml
    from torch.utils.data import default_collate

    from multiview_app.data.adapters import build_adapter
    from multiview_app.data.views import build_view_policy
    from multiview_app.losses import build_loss
    from multiview_app.train.run_io import load_run

    cfg, model = load_run(run_dir)
    adapter = build_adapter(cfg.data.adapter, cfg.data.options)
    policy = build_view_policy(cfg.views.policy, cfg.views.k, cfg.views.options, adapter)
    dataset = adapter.split("train")
    generator = torch.Generator().manual_seed(seed)
    embeddings = []
    with torch.no_grad():
        for _ in range(batches + 1):  # the first one only warms up
            items = torch.randint(len(dataset), (cfg.train.batch_size,), generator=generator).tolist()
            embeddings.append(model.embed(policy.train_views(default_collate([dataset[i] for i in items]), generator)))
    base = {
        key: value for key, value in cfg.loss.params.items() if key not in ("warm_start", "anderson", "init_potentials")
    }
    params = {
        name: {
            **base,
            **{o.split("=", 1)[0].removeprefix("loss."): yaml.safe_load(o.split("=", 1)[1]) for o in VARIANTS[name]},
        }
        for name in variants
    }
    names = ["cold", *[name for name in variants if name != "cold"]]
    params.setdefault("cold", base)
    losses = {name: build_loss(cfg.loss.name, **params[name]) for name in names}  # warm: previous batch's potentials
    warm_up, embeddings = embeddings[0], embeddings[1:]
    for name in names:  # allocator, first calls
        losses[name](warm_up)
    rows: dict[str, dict[str, list[float]]] = {name: {"sweeps": [], "ms": [], "value": []} for name in names}
    for index, z in enumerate(embeddings):
        for name in names[index % len(names) :] + names[: index % len(names)]:
            loss = losses[name]
            x = z.clone().requires_grad_()
            start = time.perf_counter()
            value = loss(x)
            value.backward()
            rows[name]["ms"].append((time.perf_counter() - start) * 1e3)
            rows[name]["sweeps"].append(loss.last_stats["iterations"])
            rows[name]["value"].append(value.item())
    cold = rows["cold"]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"\n{batches} training batches {tuple(embeddings[0].shape)} of {run_dir}, loss {cfg.loss.name} {base} "
        f"(torch threads {torch.get_num_threads()}, load average {load:.1f})\n"
    )
    print(
        "| variant | sweeps mean (min-max) | cold / variant | fwd+bwd ms mean | cold / variant | max abs(value - cold) |"
    )
    print("|---|---|---|---|---|---|")
    for name in names:
        row = rows[name]
        print(
            f"| {name} | {statistics.mean(row['sweeps']):.1f} ({min(row['sweeps']):.0f}-{max(row['sweeps']):.0f}) | "
            f"{statistics.mean(cold['sweeps']) / statistics.mean(row['sweeps']):.2f} | {statistics.mean(row['ms']):.0f} | "
            f"{sum(cold['ms']) / sum(row['ms']):.2f} | "
            f"{max(abs(a - b) for a, b in zip(row['value'], cold['value'])):.1e} |"
        )


def add_in_training_options(parser: argparse.ArgumentParser) -> None:
    """The options of ``--in-training`` (``--threads`` is shared)."""
    group = parser.add_argument_group("inside training (--in-training)")
    group.add_argument("--in-training", action="store_true", help="solver variants inside training (see above)")
    group.add_argument("--preset", choices=sorted(PRESETS), default="eeg", help="the training run (default: eeg)")
    group.add_argument("--steps", type=int, default=None, help="override train.max_steps")
    group.add_argument("--out", default=None, help="also write the summaries as JSON here")
    group.add_argument(
        "--variant",
        nargs="+",
        choices=sorted(VARIANTS),
        default=["cold", "warm"],
        help="variants to run in this process, in order (default: cold warm); one per process side by side, "
        "then --merge",
    )
    group.add_argument("--batches-from", default=None, help="a finished run: time the variants on its batches")
    group.add_argument("--batches", type=int, default=12, help="batches for --batches-from")
    group.add_argument("--runs-dir", default=None, help="keep the run folders here (default: a temporary folder)")
    group.add_argument("--merge", nargs="+", default=None, help="print the table of earlier --out JSON files")


def in_training(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Train (or merge, or time on a run's batches) the ``--variant`` runs and print their table."""
    preset = PRESETS[args.preset]
    overrides = list(preset["overrides"]) + ([f"train.max_steps={args.steps}"] if args.steps else [])
    if args.batches_from:
        offline(str(Path(args.batches_from).resolve()), args.variant, args.batches, seed=0)
        return
    os.chdir(ROOT)
    summaries: dict[str, dict[str, Any]] = {}
    if args.merge:
        for path in args.merge:
            summaries.update(json.loads(Path(path).read_text()))
        if "cold" not in summaries or len(summaries) < 2:
            parser.error(f"--merge needs a cold summary and at least one other, got {sorted(summaries)}")
    else:
        with tempfile.TemporaryDirectory() as tmp:
            runs_dir = str(Path(args.runs_dir).resolve()) if args.runs_dir else tmp
            for name in args.variant:
                summaries[name] = train_variant(preset["config"], overrides, name, runs_dir, preset["eval"])
        if args.out:
            Path(args.out).write_text(json.dumps(summaries, indent=2))
        if "cold" not in summaries or len(summaries) < 2:
            return
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\n{preset['config']} {' '.join(overrides)} (torch threads {args.threads}, load average {load:.1f})\n")
    print(variants_table(summaries))


def variants_table(summaries: dict[str, dict[str, Any]]) -> str:
    """Each measurement of the cold run beside every other variant's, with cold / variant for sweeps and time."""
    others = [name for name in summaries if name != "cold"]
    lines = ["| measurement | cold | " + " | ".join(f"{name} | cold / {name}" for name in others) + " |"]
    lines.append("|---|---|" + "---|---|" * len(others))
    for key in summaries["cold"]:
        cold = summaries["cold"][key]
        cells = [f"{cold:.4g}"]
        for name in others:
            value = summaries[name].get(key, float("nan"))
            ratio = f"{cold / value:.2f}" if (key.startswith("sweeps") or key == "step_time_s") and value else ""
            cells += [f"{value:.4g}", ratio]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


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
    add_in_training_options(parser)
    args = parser.parse_args(argv)
    if args.in_training:
        torch.set_num_threads(args.threads)
        in_training(args, parser)
        return []
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
        sizes = parse_sizes(args.sizes)
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
