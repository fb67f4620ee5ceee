"""Overhead of the kNN monitor (``train.callbacks: [knn-monitor]``) on training time.

    .venv/bin/python scripts/bench/bench_knn_monitor.py [--config configs/digits_m3g.yaml] [--every 100]
        [--steps 200] [--repeats 2] [--out runs/bench_knn_monitor] [--set KEY=VALUE ...]

Trains the same config for ``--steps`` steps without and with the monitor (its default options but
``every``), alternating (off, on, off, on, ...) in one process because the machine is shared, and
compares the wall time of the training loop (``TrainResult.wall_time_s``: steps, logging, probes;
not start-up). Two estimates of the overhead at the cadence: the ratio of the median loop times
(noisy on a loaded machine), and the probes' own time (``knn/probe_s`` summed from metrics.jsonl)
over the loop time without them. No checkpoints, no end-of-training evaluation. The config needs a
``val`` split: ``data.options.val_fraction`` is set to 0.1 unless ``--set`` gives it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from common import command_line, machine_line, markdown_table, ratio

from multiview_app.config import load_config
from multiview_app.eval.knn_monitor import TIME_KEY, KnnMonitor
from multiview_app.train.metrics import read_metrics
from multiview_app.train.trainer import train

ROOT = Path(__file__).resolve().parents[2]


def run_once(
    config: str, steps: int, every: int | None, overrides: list[str], runs_dir: Path, name: str
) -> dict[str, float]:
    """One training run; ``every`` None: without the monitor. Returns loop seconds and probe seconds."""
    extra = [
        f"train.max_steps={steps}",
        "train.checkpoint_every=0",
        "eval.linear_probe=false",
        "output.curves=false",
        f"output.runs_dir={runs_dir}",
    ]
    if not any(o.startswith("data.options.val_fraction=") for o in overrides):
        extra.append("data.options.val_fraction=0.1")
    extra.append("train.callbacks=[]" if every is None else f"train.callbacks=[{{knn-monitor: {{every: {every}}}}}]")
    cfg = load_config(config, [*extra, *overrides], name=name)
    result = train(cfg)
    probes = [r[TIME_KEY] for r in read_metrics(result.run_dir / "metrics.jsonl") if TIME_KEY in r]
    return {"loop_s": result.wall_time_s, "probe_s": sum(probes), "probes": len(probes)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "digits_m3g.yaml"))
    parser.add_argument(
        "--every", type=int, default=KnnMonitor.Options().every, help="probe cadence (default: the monitor's)"
    )
    parser.add_argument("--steps", type=int, default=None, help="training steps per run (default: 2 x --every)")
    parser.add_argument("--repeats", type=int, default=2, help="runs per variant (alternating)")
    parser.add_argument("--out", default=None, help="folder for results.json (default: print only)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    steps = args.steps or 2 * args.every
    runs: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for variant in ("off", "on"):
                every = None if variant == "off" else args.every
                runs[variant].append(
                    run_once(args.config, steps, every, args.overrides, Path(tmp), f"{variant}_{repeat}")
                )
    off = statistics.median(r["loop_s"] for r in runs["off"])
    on = statistics.median(r["loop_s"] for r in runs["on"])
    probe = statistics.median(r["probe_s"] for r in runs["on"])
    probes = runs["on"][0]["probes"]
    own = probe / max(on - probe, 1e-12)
    rows = [
        ["without monitor", f"{off:.1f}", "-", "-"],
        [f"knn-monitor every {args.every}", f"{on:.1f}", f"{probes} probes, {probe:.2f} s", f"{100 * own:.1f} %"],
    ]
    print(
        markdown_table(
            [
                "variant",
                f"loop s ({steps} steps, median of {args.repeats})",
                "probe time",
                "probe time / training time",
            ],
            rows,
        )
    )
    print(f"loop time ratio without / with the monitor: {ratio(off, on)} (overhead {100 * (on / off - 1):+.1f} %)")
    print(machine_line())
    print(command_line())
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(
            json.dumps(
                {
                    "runs": runs,
                    "every": args.every,
                    "steps": steps,
                    "machine": machine_line(),
                    "command": command_line(),
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
