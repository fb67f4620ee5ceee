"""M3G warm start inside training: MM-Sinkhorn sweeps per step, step time and final metrics, cold vs warm.

    .venv/bin/python scripts/bench_m3g_warm.py --preset eeg      # the EEG demo (scripts/run_eeg_demo.sh settings)
    .venv/bin/python scripts/bench_m3g_warm.py --preset digits   # configs/digits_m3g.yaml

Runs the real trainer twice on the same config and seed, ``loss.warm_start=false`` then ``true``
(``train.log_every=1`` so every step's ``last_stats`` lands in ``metrics.jsonl``), then the config's
evaluation: few-shot sleep staging (EEG) or the linear / kNN probe (digits). Prints a Markdown
table: mean sweeps per step (all steps, first and last 10%), share of converged steps, mean step
time and the loss phase's share of it, final loss and metrics; the ratio cold / warm of the sweeps.
The two runs are sequential (not interleaved) or, with ``--variant cold`` / ``--variant warm`` in two
processes and ``--merge``, side by side: on a shared machine compare sweeps, not seconds.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from multiview_app.config import load_config  # noqa: E402
from multiview_app.train.metrics import read_metrics  # noqa: E402
from multiview_app.train.trainer import train  # noqa: E402

PRESETS: dict[str, dict[str, Any]] = {
    "eeg": {
        "config": "configs/eeg_synthetic_m3g.yaml",
        "overrides": ["data.options.cache=demo_data/physionet2018_cache", "train.max_steps=400", "train.batch_size=16",
                      "model.encoders.eeg.width=32", "model.encoders.eeg.dropout=0.0", "loss.epsilon=0.2",
                      "loss.max_iter=300"],
        "eval": "sleep-staging",
    },
    "digits": {"config": "configs/digits_m3g.yaml", "overrides": [], "eval": "linear-probe"},
}


def run(config: str, overrides: list[str], warm: bool, runs_dir: str, evaluation: str) -> dict[str, Any]:
    """Train once; summarize metrics.jsonl and the evaluation."""
    name = "warm" if warm else "cold"
    cfg = load_config(config, [*overrides, f"loss.warm_start={str(warm).lower()}", "train.log_every=1",
                               "train.checkpoint_every=0", f"eval.linear_probe={str(evaluation == 'linear-probe').lower()}",
                               f"output.runs_dir={runs_dir}"], name=name)
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

        staged = run_sleep_staging(Path(runs_dir) / name, shots=(10, 50, 100, 1000), seeds=3, baselines=False,
                                   progress=False)
        for shot, metrics in staged["results"]["trained"].items():
            summary[f"acc_s{shot}"] = metrics["accuracy"]["mean"]
    elif evaluation == "linear-probe":  # the end-of-training probe wrote eval/linear_probe.json
        probe = json.loads((Path(runs_dir) / name / "eval" / "linear_probe.json").read_text())
        for metric, value in probe["results"]["trained"].items():
            summary[metric] = value
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="eeg")
    parser.add_argument("--steps", type=int, default=None, help="override train.max_steps")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("--out", default=None, help="also write the summaries as JSON here")
    parser.add_argument("--variant", choices=["both", "cold", "warm"], default="both",
                        help="run one variant only (e.g. two processes side by side); combine with --merge")
    parser.add_argument("--merge", nargs="+", default=None, help="print the table of earlier --out JSON files")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    preset = PRESETS[args.preset]
    overrides = list(preset["overrides"]) + ([f"train.max_steps={args.steps}"] if args.steps else [])
    os.chdir(ROOT)
    summaries: dict[str, dict[str, Any]] = {}
    if args.merge:
        for path in args.merge:
            summaries.update(json.loads(Path(path).read_text()))
        if set(summaries) != {"cold", "warm"}:
            parser.error(f"--merge needs one cold and one warm summary, got {sorted(summaries)}")
    else:
        variants = {"both": (False, True), "cold": (False,), "warm": (True,)}[args.variant]
        with tempfile.TemporaryDirectory() as tmp:
            for warm in variants:
                summaries["warm" if warm else "cold"] = run(preset["config"], overrides, warm, tmp, preset["eval"])
        if args.out:
            Path(args.out).write_text(json.dumps(summaries, indent=2))
        if len(summaries) < 2:
            return 0
    keys = list(summaries["cold"])
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\n{preset['config']} {' '.join(overrides)} (torch threads {args.threads}, load average {load:.1f})\n")
    print("| measurement | cold start | warm start | cold / warm |")
    print("|---|---|---|---|")
    for key in keys:
        cold, warm = summaries["cold"][key], summaries["warm"][key]
        ratio = f"{cold / warm:.2f}" if key.startswith("sweeps") or key == "step_time_s" else ""
        print(f"| {key} | {cold:.4g} | {warm:.4g} | {ratio} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
