"""Benchmark: per-trial overhead of ``mvapp tune`` and trials/hour for the digits and EEG defaults.

Usage: ``python scripts/bench/bench_tune.py [--steps 60] [--eeg-steps 21] [--out /tmp/bench_tune] [--eeg-cache DIR]``

A trial = ``python -m multiview_app.cli train`` in a subprocess (``tune.runner.run_trial``) with the
``tune-report`` callback: intermediate values on the report subset every ``tune.report_every`` steps
before the last, the objective on the full val split at the last step. ``--report-every`` /
``--report-items`` override ``tune.report_every`` / ``tune.report_items``; by default the config's
values (the defaults: every 20 steps, 128 items) are measured. The reference is the same config
trained in this process (``train(cfg)``, no evaluator). Overhead = trial wall time - (the trial's own
training loop time - its val evaluator time): process start + imports, data / cache opening, model
build, every val evaluation (they run inside the loop, in the ``tune-report`` callback), writing the
run folder; its share of the trial is the number to keep below 15 %. The difference to the
in-process reference is printed too (noisy on a shared machine). Trials/hour extrapolate the
default length L of each config (digits: ``train.max_steps``; EEG: ``train.epochs`` over the train
split) as set-up (overhead - evaluator) + L x s/step of the reference + (L - 1) // report_every
intermediate reports x their measured mean time + the measured final evaluation. ``--eeg-report-every``
sets the EEG trial's own cadence (fewer measured steps for one intermediate report: EEG steps are
slow); the extrapolation keeps the config's ``tune.report_every`` (or ``--report-every``).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import time
from pathlib import Path

import yaml
from common import synthetic_eeg_cache

from multiview_app.config import apply_overrides, config_from_dict, read_yaml
from multiview_app.train.trainer import train
from multiview_app.tune.objective import RESULT_FILE
from multiview_app.tune.runner import LOG_FILE, ForkServer, run_trial, train_command
from multiview_app.tune.space import override

ROOT = Path(__file__).resolve().parents[2]


def _raw(config: str, out: Path, name: str, steps: int, extra: list[str]) -> dict:
    overrides = [
        f"train.max_steps={steps}",
        "train.epochs=null",
        "train.checkpoint_every=0",
        "eval.linear_probe=false",
        override("output.runs_dir", str(out)),
        f"output.name={name}",
        *extra,
    ]
    return apply_overrides(read_yaml(ROOT / config), overrides)


def _evaluations(run_dir: Path) -> tuple[list[float], float]:
    """Seconds of each intermediate report and of the final evaluation (``tune_result.json``)."""
    evaluations = json.loads((run_dir / RESULT_FILE).read_text())["evaluations"]
    return [e["s"] for e in evaluations if not e["final"]], sum(e["s"] for e in evaluations if e["final"])


def measure(
    label: str,
    config: str,
    out: Path,
    steps: int,
    extra: list[str],
    server: ForkServer | None,
    spawn: bool = True,
    variants: tuple[str, ...] = (),
    measured: tuple[str, ...] = (),
) -> list[dict]:
    """Reference in-process training, then the same config as a tune trial: a fresh python process
    (``--launcher spawn``) and, with ``server``, a fork of the fork server (``--launcher fork``); each
    of ``variants`` (dotted overrides) adds one more forked trial (same process, same load).
    ``measured``: overrides of the measured runs only (rows keep ``extra`` + variant for the extrapolation)."""
    extra_measured = [*extra, *measured]
    ref_cfg = config_from_dict(_raw(config, out, f"{label}_ref", steps, extra_measured))
    began = time.perf_counter()
    ref = train(ref_cfg)
    reference_s = time.perf_counter() - began
    rows = []
    trials = [("spawn", None, None), ("fork", server, None), *(("fork", server, v) for v in variants)]
    for index, (launcher, fork_server, variant) in enumerate(trials):
        if (launcher == "fork" and server is None) or (launcher == "spawn" and not spawn):
            continue
        name = f"{label}_trial_{launcher}" + (f"_{index}" if variant else "")
        raw = _raw(
            config,
            out,
            name,
            steps,
            [*extra_measured, "train.callbacks=[tune-report]", "output.curves=false", *([variant] if variant else [])],
        )
        tune_cfg = config_from_dict(raw).tune
        config_file = out / f"{name}.yaml"
        config_file.write_text(yaml.safe_dump(raw))
        run_dir = out / name
        outcome = run_trial(train_command(config_file, []), run_dir, fork_server=fork_server)
        log = (run_dir / LOG_FILE).read_text()
        loop_s = float(re.search(r"trained \d+ steps in ([0-9.]+) s", log).group(1))
        overhead_s = outcome.wall_s - (loop_s - outcome.eval_s)  # everything but the training steps themselves
        reports_s, final_s = _evaluations(run_dir)
        rows.append(
            {
                "label": label,
                "config": config,
                "extra": [*extra, *([variant] if variant else [])],
                "launcher": launcher + (f" ({variant})" if variant else ""),
                "steps": steps,
                "report_every": tune_cfg.report_every,
                "report_items": tune_cfg.report_items,
                "reports_s": reports_s,
                "final_s": final_s,
                "reference_train_s": reference_s,
                "reference_loop_s": ref.wall_time_s,
                "trial_wall_s": outcome.wall_s,
                "trial_loop_s": loop_s,
                "eval_s": outcome.eval_s,
                "overhead_s": overhead_s,
                "overhead_share": overhead_s / outcome.wall_s,
                "vs_reference_s": outcome.wall_s - reference_s,
                "s_per_step": ref.wall_time_s / steps,
                "values": outcome.values,
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=60, help="length of the digits trial")
    parser.add_argument("--eeg-steps", type=int, default=21, help="steps measured for the EEG extrapolation")
    parser.add_argument("--out", type=Path, default=Path("/tmp/bench_tune"))
    parser.add_argument("--skip-eeg", action="store_true")
    parser.add_argument("--skip-digits", action="store_true")
    parser.add_argument(
        "--launcher", choices=["both", "spawn", "fork"], default="both", help="trial launchers measured"
    )
    parser.add_argument(
        "--report-every",
        type=int,
        default=None,
        help="tune.report_every of the trials (0: one val evaluation at the end; default: the config's)",
    )
    parser.add_argument(
        "--eeg-report-every",
        type=int,
        default=None,
        help="tune.report_every of the measured EEG trial only (default: as the digits trial)",
    )
    parser.add_argument(
        "--report-items", default=None, help="tune.report_items of the trials (null: every item; default: the config's)"
    )
    parser.add_argument("--eeg-cache", type=Path, default=None, help="a prepared EEG cache (default: synthesize one)")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        help="a dotted override (e.g. "
        "tune.report_items=null): one more forked trial with it, measured in the same process",
    )
    args = parser.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    server = None if args.launcher == "spawn" else ForkServer()
    spawn = args.launcher != "fork"
    tune_extra = [
        *([] if args.report_every is None else [f"tune.report_every={args.report_every}"]),
        *([] if args.report_items is None else [f"tune.report_items={args.report_items}"]),
    ]
    rows = (
        []
        if args.skip_digits
        else measure(
            "digits",
            "configs/digits_infonce_pwe.yaml",
            args.out,
            args.steps,
            ["data.options.val_fraction=0.1", *tune_extra],
            server,
            spawn,
            tuple(args.variant),
        )
    )
    default_steps = {"digits": int(read_yaml(ROOT / "configs/digits_infonce_pwe.yaml")["train"]["max_steps"])}
    if not args.skip_eeg:
        cache = args.eeg_cache or synthetic_eeg_cache(args.out, subjects=6, hours=1)
        eeg_extra = [
            override("data.options.cache", str(cache)),
            "data.options.val_fraction=0.2",
            "model.encoders.eeg.width=32",
            "train.batch_size=32",
            "tune.shots=20",
            *tune_extra,
        ]
        measured = () if args.eeg_report_every is None else (f"tune.report_every={args.eeg_report_every}",)
        rows += measure(
            "eeg",
            "configs/eeg_synthetic_m3g.yaml",
            args.out,
            args.eeg_steps,
            eeg_extra,
            server,
            spawn,
            tuple(args.variant),
            measured,
        )
        from multiview_app.data.adapters import build_adapter

        eeg_cfg = config_from_dict(_raw("configs/eeg_synthetic_m3g.yaml", args.out, "x", 1, eeg_extra))
        n_train = len(build_adapter(eeg_cfg.data.adapter, eeg_cfg.data.options).split("train"))
        epochs = int(read_yaml(ROOT / "configs/eeg_synthetic_base.yaml")["train"]["epochs"])
        default_steps["eeg"] = epochs * max(1, n_train // eeg_cfg.train.batch_size)
    print(
        "| config | launcher | steps | report every / items | trial wall s | its train loop s (with evaluator) "
        "| val evaluator s (reports + final) | overhead s (wall - loop + evaluator) | overhead share "
        "| in-process reference train s | trial - reference s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        reports = " + ".join(f"{s:.1f}" for s in r["reports_s"]) or "none"
        print(
            f"| {r['label']} | {r['launcher']} | {r['steps']} | {r['report_every']} / {r['report_items']} | "
            f"{r['trial_wall_s']:.1f} | {r['trial_loop_s']:.1f} | {r['eval_s']:.1f} ({reports} + {r['final_s']:.1f}) | "
            f"{r['overhead_s']:.1f} | {r['overhead_share']:.1%} | {r['reference_train_s']:.1f} | "
            f"{r['vs_reference_s']:.1f} |"
        )
    print()
    cadences = [config_from_dict(_raw(r["config"], args.out, "x", 1, r["extra"])).tune.report_every for r in rows]
    print(
        "| config | launcher | default length L (steps) | s/step | set-up s | reports x s each | final eval s "
        "| est. trial s | trials/hour |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r, cadence in zip(rows, cadences):
        steps = default_steps[r["label"]]
        n_reports = (steps - 1) // cadence if cadence else 0
        report_s = sum(r["reports_s"]) / len(r["reports_s"]) if r["reports_s"] else float("nan")
        setup_s = max(r["overhead_s"] - r["eval_s"], 0.0)
        trial_s = setup_s + steps * r["s_per_step"] + (n_reports * report_s if n_reports else 0.0) + r["final_s"]
        print(
            f"| {r['label']} | {r['launcher']} | {steps} | {r['s_per_step']:.3f} | {setup_s:.1f} | "
            f"{n_reports} x {report_s:.2f} | {r['final_s']:.1f} | {trial_s:.0f} | {3600 / trial_s:.1f} |"
        )
    if server is not None:
        server.close()
    (args.out / "bench_tune.json").write_text(json.dumps({"rows": rows, "default_steps": default_steps}, indent=2))


if __name__ == "__main__":
    main()
