"""M3G solver variants inside training: MM-Sinkhorn sweeps per step, step time and final metrics.

    .venv/bin/python scripts/bench/bench_m3g_warm.py --preset eeg      # the EEG demo (scripts/run_eeg_demo.sh settings)
    .venv/bin/python scripts/bench/bench_m3g_warm.py --preset digits   # configs/digits_m3g.yaml
    .venv/bin/python scripts/bench/bench_m3g_warm.py --variant anderson --out anderson.json   # one variant per process
    .venv/bin/python scripts/bench/bench_m3g_warm.py --merge cold.json anderson.json          # the table
    .venv/bin/python scripts/bench/bench_m3g_warm.py --batches-from runs/<trained run>       # variants on its batches

Runs the real trainer on the same config and seed once per variant (``cold``: plain Alg. 1 from zero
potentials; ``warm``: ``loss.warm_start=true``; ``anderson``: ``loss.anderson=5``; ``train.log_every=1``
so every step's ``last_stats`` lands in ``metrics.jsonl``), then the config's evaluation: few-shot
sleep staging (EEG) or the linear / kNN probe (digits). Prints a Markdown table: mean sweeps per
step (all steps, first and last 10%), share of converged steps, mean step time and the loss phase's
share of it, final loss and metrics; the ratio cold / variant of the sweeps. The runs are sequential
(not interleaved) or, with one ``--variant`` per process and ``--merge``, side by side: on a shared
machine compare sweeps, not seconds.

``--batches-from RUN``: no training; the finished run's model embeds ``--batches`` random training
batches (late-stage problems) and every variant solves each of them in this process, interleaved
(order rotated per batch, one warm-up call each): sweeps, forward+backward milliseconds and the
largest value difference to ``cold``. Here the time ratios are comparable.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]

from multiview_app.config import load_config  # noqa: E402
from multiview_app.train.metrics import read_metrics  # noqa: E402
from multiview_app.train.trainer import train  # noqa: E402

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


def run(config: str, overrides: list[str], name: str, runs_dir: str, evaluation: str) -> dict[str, Any]:
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="eeg")
    parser.add_argument("--steps", type=int, default=None, help="override train.max_steps")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("--out", default=None, help="also write the summaries as JSON here")
    parser.add_argument(
        "--variant",
        nargs="+",
        choices=sorted(VARIANTS),
        default=["cold", "warm"],
        help="variants to run in this process, in order (default: cold warm); one per process "
        "side by side, then --merge",
    )
    parser.add_argument("--batches-from", default=None, help="a finished run: time the variants on its batches")
    parser.add_argument("--batches", type=int, default=12, help="batches for --batches-from")
    parser.add_argument("--runs-dir", default=None, help="keep the run folders here (default: a temporary folder)")
    parser.add_argument("--merge", nargs="+", default=None, help="print the table of earlier --out JSON files")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    preset = PRESETS[args.preset]
    overrides = list(preset["overrides"]) + ([f"train.max_steps={args.steps}"] if args.steps else [])
    if args.batches_from:
        offline(str(Path(args.batches_from).resolve()), args.variant, args.batches, seed=0)
        return 0
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
                summaries[name] = run(preset["config"], overrides, name, runs_dir, preset["eval"])
        if args.out:
            Path(args.out).write_text(json.dumps(summaries, indent=2))
        if "cold" not in summaries or len(summaries) < 2:
            return 0
    others = [name for name in summaries if name != "cold"]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\n{preset['config']} {' '.join(overrides)} (torch threads {args.threads}, load average {load:.1f})\n")
    print("| measurement | cold | " + " | ".join(f"{name} | cold / {name}" for name in others) + " |")
    print("|---|---|" + "---|---|" * len(others))
    for key in summaries["cold"]:
        cold = summaries["cold"][key]
        cells = [f"{cold:.4g}"]
        for name in others:
            value = summaries[name].get(key, float("nan"))
            ratio = f"{cold / value:.2f}" if (key.startswith("sweeps") or key == "step_time_s") and value else ""
            cells += [f"{value:.4g}", ratio]
        print(f"| {key} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
