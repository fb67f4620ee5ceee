"""Training throughput and the share of step time in data / encoder / loss.

    .venv/bin/python scripts/bench/bench_train.py [--config configs/digits_infonce_pwe.yaml] [--steps 15] [--set KEY=VALUE ...]
    .venv/bin/python scripts/bench/bench_train.py --compare diagnostics [--log-every 10]

Runs the real trainer (Trainer.fit, no checkpoints, no eval) for 2 x --steps steps and reads the
second log window of metrics.jsonl (the first one holds the warm-up). Reference in the same process:
the same trainer with ``train.prefetch_views=false`` (views built in the step instead of in the
background thread). The two variants alternate (on, off, on, off) because the machine is shared;
the table shows the mean per variant. Prints a Markdown table, the machine and the command.

Data share of a step: ``time/data`` is the part of the step spent waiting for the next micro-batch
(what prefetching does not hide); ``data_build_s`` is the host time of fetching the batch
(DataLoader) plus building its views (device copy + view policy) per step, wherever it ran (in the
background thread when prefetching), shown against the step time. On CUDA both are host times: the
step's phases are timed (synchronized) on the logging steps only.

``--compare diagnostics``: reference = ``train.diagnostics=false``. One log window of ``--steps``
steps holds one diagnostics computation, so the overhead per step at ``train.log_every = L`` is
``diag/time_s / (L x step time)``, reported for ``--log-every`` (the default 10) next to the
throughput ratio of the two variants (which is noisier).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import torch
from common import command_line, machine_line

from multiview_app.config import load_config
from multiview_app.data.views import items_per_batch
from multiview_app.train.metrics import PHASES, read_metrics
from multiview_app.train.trainer import train

ROOT = Path(__file__).resolve().parents[2]


def measure(
    config: str, steps: int, prefetch: bool, diagnostics: bool = True, overrides: tuple[str, ...] = ()
) -> dict[str, float]:
    """The measured log window (items/s, step time, phase shares, data build time) of one short training run."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(
            config,
            [
                *overrides,
                f"train.max_steps={2 * steps}",
                f"train.log_every={steps}",
                "train.checkpoint_every=0",
                "eval.linear_probe=false",
                f"train.prefetch_views={str(prefetch).lower()}",
                f"train.diagnostics={str(diagnostics).lower()}",
                f"output.runs_dir={tmp}",
            ],
            name="bench",
        )
        train(cfg)
        return read_metrics(Path(tmp) / "bench" / "metrics.jsonl")[-1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "digits_infonce_pwe.yaml"))
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--compare", choices=("prefetch", "diagnostics"), default="prefetch")
    parser.add_argument("--log-every", type=int, default=10, help="train.log_every of the diagnostics overhead")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config override (dotted key), repeatable: e.g. --set data.options.cache=demo_data/physionet2018_cache",
    )
    args = parser.parse_args()
    args.overrides = tuple(args.overrides)
    if args.compare == "diagnostics":
        return diagnostics_table(args)
    runs: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    for _ in range(args.repeats):
        for prefetch in (True, False):
            runs[prefetch].append(measure(args.config, args.steps, prefetch, overrides=args.overrides))
    cfg = load_config(args.config, list(args.overrides))
    items = items_per_batch(cfg.views.batch_mode, cfg.train.batch_size, cfg.views.k)

    def mean(prefetch: bool, key: str) -> float:
        return statistics.mean(r[key] for r in runs[prefetch])

    print(
        f"config {Path(args.config).name}: {items} items x {cfg.views.k} views per step, "
        f"{torch.get_num_threads()} torch threads, {args.steps} measured steps x {args.repeats} repeats\n"
    )
    print("| measurement | prefetch on (default) | prefetch off (reference) | on / off |")
    print("|---|---|---|---|")
    on, off = mean(True, "items_per_s"), mean(False, "items_per_s")
    print(f"| throughput (items/s) | {on:.1f} | {off:.1f} | {on / off:.2f} |")
    print(f"| step time (s) | {mean(True, 'step_time_s'):.3f} | {mean(False, 'step_time_s'):.3f} | |")
    for phase in PHASES:
        print(f"| share of step: {phase} | {mean(True, f'time/{phase}'):.1%} | {mean(False, f'time/{phase}'):.1%} | |")
    for label, keys in (
        ("encoder (forward + backward)", ("forward", "backward")),
        ("data + loss (goal < 20%)", ("data", "loss")),
    ):
        shares = [sum(mean(p, f"time/{k}") for k in keys) for p in (True, False)]
        print(f"| share of step: {label} | {shares[0]:.1%} | {shares[1]:.1%} | |")
    build = [mean(p, "data_build_s") for p in (True, False)]
    print(f"| fetch + views per step (s, host) | {build[0]:.4f} | {build[1]:.4f} | |")
    print(
        f"| fetch + views / step time | {build[0] / mean(True, 'step_time_s'):.1%} | "
        f"{build[1] / mean(False, 'step_time_s'):.1%} | |"
    )
    per_step = items * cfg.train.grad_accum
    print(f"| steps/s (window wall time) | {on / per_step:.2f} | {off / per_step:.2f} | |")
    print(f"\n{machine_line()}\n{command_line()}")
    return 0


def diagnostics_table(args: argparse.Namespace) -> int:
    """Diagnostics on (default) vs off: throughput ratio and the measured diagnostics time per step."""
    runs: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    for _ in range(args.repeats):
        for diagnostics in (True, False):
            runs[diagnostics].append(measure(args.config, args.steps, True, diagnostics, args.overrides))
    on = statistics.mean(r["items_per_s"] for r in runs[True])
    off = statistics.mean(r["items_per_s"] for r in runs[False])
    step = statistics.mean(r["step_time_s"] for r in runs[True])
    diag = statistics.mean(r["diag/time_s"] for r in runs[True])
    print(
        f"config {Path(args.config).name}: {torch.get_num_threads()} torch threads, "
        f"{args.steps} measured steps x {args.repeats} repeats\n"
    )
    print("| measurement | diagnostics on (default) | diagnostics off (reference) | on / off |")
    print("|---|---|---|---|")
    print(f"| throughput (items/s) | {on:.1f} | {off:.1f} | {on / off:.3f} |")
    print(f"| step time (s) | {step:.3f} | {statistics.mean(r['step_time_s'] for r in runs[False]):.3f} | |")
    print(f"| one diagnostics computation (s) | {diag:.4f} | | |")
    print(f"| overhead per step at log_every={args.log_every} | {diag / (args.log_every * step):.2%} | | |")
    print(f"| overhead per step at log_every=1 | {diag / step:.2%} | | |")
    print(f"\n{machine_line()}\n{command_line()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
