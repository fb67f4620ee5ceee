"""M3G Table 3 ordering on synthetic EEG: few-shot sleep staging of M3G vs infonce_pwe vs
pvc_geometric (k = 6 EEG channels as views) at s in {10, 50, 100} labelled windows per stage,
over several pretraining seeds, subject folds and few-shot draws.

    .venv/bin/python scripts/reproduce/m3g/reproduce_m3g_eeg.py [--pretrain-seeds 0,1,2] [--losses m3g,infonce_pwe,pvc_geometric]
        [--protocol cross-dataset|in-domain|both] [--folds 5] [--in-domain-folds 2] [--draws 3]
        [--config configs/eeg_synthetic_m3g_long.yaml] [--epochs E] [--width W] [--set key=value ...]
        [--data demo_data/repro_m3g_long] [--runs-dir runs/repro_m3g_eeg] [--out runs/figures/m3g_eeg]

The paper's protocol (M3G Sec. 4.3, Table 3) is cross-dataset: pretrain on PhysioNet 2018, stage
Sleep-EDF. So the script synthesizes PhysioNet-2018-format nights (pretraining, generator seed 0)
and Sleep-EDF-format nights (staging, disjoint seed 1000) and prepares both caches (each step
skipped when its output exists). Per loss and pretraining seed it trains ``--config`` (default
``configs/eeg_synthetic_m3g_long.yaml``; a baseline takes only its ``loss`` section and
``train.batch_size`` from ``configs/eeg_synthetic_<loss>.yaml`` plus a warmup over the same windows:
same windows seen, the paper's batch sizes; see the config's comments) and runs the sleep-staging evaluator (``--folds`` subject
folds of the staging cache x ``--draws`` few-shot draws; C tuned on validation subjects). Then it
pools every loss's runs (``pool_results``, as ``mvapp eval sleep-staging --pool-runs``): mean +- std
over pretraining seeds x folds x draws; the paired differences to M3G use the same folds and draws.

Resumable: a finished run (``model.safetensors``) is not retrained, an interrupted one resumes from
its last checkpoint, and an evaluation whose stored result has the same settings is reused.
Writes ``<out>.md`` (tables), ``<out>.json`` (pooled results + per-seed means) and ``<out>.png``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from multiview_app.config import Config, load_config, read_yaml  # noqa: E402
from multiview_app.experiments.reproduce import ROOT, new_figure, parse_list, write_outputs  # noqa: E402
from multiview_app.experiments.staging import (  # noqa: E402
    paired_over_runs,
    pool_losses,
    protocol_summary,
    staging_result,
    table_lines,
)
from multiview_app.experiments.sweeps import grid, sweep  # noqa: E402
from multiview_app.train.run_io import atomic_write_json  # noqa: E402

LOSSES = ("m3g", "infonce_pwe", "pvc_geometric")
SHOTS = (10, 50, 100)
PROTOCOLS = ("cross-dataset", "in-domain")
DEFAULT_CONFIG = ROOT / "configs" / "eeg_synthetic_m3g_long.yaml"
TRAIN_POLICY = "refuse-mismatch"
"""A finished run is reused only if its saved config holds the same values (else an error names the
keys); an interrupted run resumes (multiview_app.experiments.training)."""
PRETRAIN_SEED, STAGING_SEED = 0, 1000
"""Generator seeds of the pretraining and staging nights (disjoint subjects, as the demo)."""


def prepare_data(data: Path, args: argparse.Namespace) -> dict[str, Path]:
    """Synthetic PhysioNet-2018-format (pretraining) and, for the cross-dataset protocol, Sleep-EDF-format (staging)
    nights -> their prepared caches, made as the EEG demo makes its own (``mvapp data synth-psg`` then ``prepare``:
    :func:`~multiview_app.experiments.eeg_demo.demo_data`; each step skipped when its output exists). Returns
    ``{dataset: cache}``."""
    from multiview_app.experiments.eeg_demo import demo_data

    settings = {"subjects": args.pretrain_subjects, "edf_subjects": args.staging_subjects, "hours": args.hours}
    settings.update(compress=args.compress, psg_seed=PRETRAIN_SEED, edf_seed=STAGING_SEED)
    cross = "cross-dataset" in protocols(args.protocol)
    return demo_data(data, {key: str(value) for key, value in settings.items()}, sleep_edf=cross)


def protocols(choice: str) -> tuple[str, ...]:
    """``--protocol`` -> the protocols to evaluate."""
    return PROTOCOLS if choice == "both" else (choice,)


def loss_overrides(loss: str, config: dict[str, Any]) -> list[str]:
    """A baseline's own settings: the ``loss`` section and ``train.batch_size`` of
    ``configs/eeg_synthetic_<loss>.yaml``, and the warmup rescaled to cover the same number of
    windows as the config's (``warmup_steps * batch / own batch``, rounded, at least 1), so the
    learning-rate schedule is the same function of windows seen (the cosine decay already spans
    each run's own steps). Nothing for the config's own loss."""
    if loss == config["loss"]["name"]:
        return []
    own = read_yaml(ROOT / "configs" / f"eeg_synthetic_{loss}.yaml")
    batch = own["train"]["batch_size"]
    warmup = max(1, round(config["optim"]["warmup_steps"] * config["train"]["batch_size"] / batch))
    return [f"loss={json.dumps(own['loss'])}", f"train.batch_size={batch}", f"optim.warmup_steps={warmup}"]


def run_config(loss: str, seed: int, cache: Path, args: argparse.Namespace) -> Config:
    """The resolved config of one (loss, pretraining seed) run."""
    overrides = [f"data.options.cache={cache}", f"train.seed={seed}", f"output.runs_dir={args.runs_dir}"]
    overrides += [f"train.epochs={args.epochs}", "train.max_steps=null"] if args.epochs else []
    overrides += [f"model.encoders.eeg.width={args.width}"] if args.width else []
    overrides += loss_overrides(loss, read_yaml(args.config)) + list(args.set)
    return load_config(args.config, overrides, name=f"{Path(args.config).stem}_{loss}_seed{seed}")


def evaluate(cfg: Config, protocol: str, caches: dict[str, Path], args: argparse.Namespace) -> dict[str, Any]:
    """The sleep-staging result of one run and protocol (reused when stored with the same settings)."""
    cache = caches["sleep-edf"] if protocol == "cross-dataset" else None
    folds = args.folds if protocol == "cross-dataset" else args.in_domain_folds
    return staging_result(cfg.run_dir, cache=cache, folds=folds, shots=list(args.shots), draws=args.draws)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="the M3G config every loss shares")
    parser.add_argument("--losses", default=",".join(LOSSES))
    parser.add_argument("--pretrain-seeds", default="0,1,2", help="train.seed of the pretraining runs, comma-separated")
    parser.add_argument(
        "--protocol",
        choices=[*PROTOCOLS, "both"],
        default="cross-dataset",
        help="cross-dataset = the paper's (pretrain PhysioNet format, stage Sleep-EDF format)",
    )
    parser.add_argument("--folds", type=int, default=5, help="subject folds of the staging cache (cross-dataset)")
    parser.add_argument("--in-domain-folds", type=int, default=2, help="folds of the run's held-out subjects")
    parser.add_argument("--draws", type=int, default=3, help="few-shot draws per fold and s")
    parser.add_argument("--shots", default=",".join(map(str, SHOTS)))
    parser.add_argument("--epochs", type=int, default=None, help="override train.epochs for every loss")
    parser.add_argument("--width", type=int, default=None, help="override the encoder width for every loss")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="extra config overrides (every loss)")
    parser.add_argument("--pretrain-subjects", type=int, default=8)
    parser.add_argument("--staging-subjects", type=int, default=10)
    parser.add_argument("--hours", type=float, default=9.0)
    parser.add_argument("--compress", type=int, default=3)
    parser.add_argument("--data", type=Path, default=ROOT / "demo_data" / "repro_m3g_long")
    parser.add_argument("--runs-dir", type=Path, default=ROOT / "runs" / "repro_m3g_eeg")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "figures" / "m3g_eeg")
    args = parser.parse_args(argv)
    losses = parse_list(parser, "--losses", args.losses, str)
    unknown = sorted(set(losses) - set(LOSSES))
    if unknown:
        parser.error(f"--losses: unknown {', '.join(unknown)}; expected some of {', '.join(LOSSES)}")
    seeds = parse_list(parser, "--pretrain-seeds", args.pretrain_seeds, int)
    args.shots = parse_list(parser, "--shots", args.shots, int)
    caches = prepare_data(args.data, args)

    timings: dict[str, dict[str, Any]] = {}
    per_seed: dict[str, dict[str, list[dict[str, Any]]]] = {
        p: {loss: [] for loss in losses} for p in protocols(args.protocol)
    }
    points = grid(seed=seeds, loss=losses)  # seed-major: an early stop still leaves every loss with the same seeds
    configs = sweep(points, lambda p: run_config(p["loss"], p["seed"], caches["physionet2018"], args), TRAIN_POLICY)
    for point, cfg, run in configs:
        timings[cfg.output.name] = {"train_s": run.train_s, "steps": run.steps, "reused": run.reused}
        for protocol in per_seed:
            per_seed[protocol][point["loss"]].append(evaluate(cfg, protocol, caches, args))
        print(
            f"done {cfg.output.name} ({run.steps} steps, training {run.train_s:.0f} s"
            f"{', reused' if run.reused else ''})",
            flush=True,
        )

    lines: list[str] = []
    summary: dict[str, Any] = {
        "losses": losses,
        "pretrain_seeds": seeds,
        "shots": args.shots,
        "draws": args.draws,
        "config": str(args.config),
        "training": timings,
        "protocols": {},
    }
    fig, axes = new_figure(len(per_seed), (4.6 * len(per_seed), 3.4))
    for ax, (protocol, results) in zip(axes, per_seed.items()):
        pooled = pool_losses(results)
        paired = paired_over_runs(results, "balanced_accuracy", args.shots)
        lines += table_lines(protocol, pooled, results, paired, args.shots)
        summary["protocols"][protocol] = protocol_summary(pooled, results, paired, args.shots)
        for loss, p in pooled.items():
            mean = [p["results"]["trained"][str(s)]["balanced_accuracy"]["mean"] for s in args.shots]
            std = [p["results"]["trained"][str(s)]["balanced_accuracy"]["std"] for s in args.shots]
            ax.errorbar(args.shots, mean, yerr=std, marker="o", capsize=3, label=loss)
        bp = next(iter(pooled.values()))["results"]["bandpower"]
        ax.plot(args.shots, [bp[str(s)]["balanced_accuracy"]["mean"] for s in args.shots], "k--", label="band power")
        ax.set(
            xlabel="labelled windows per stage s",
            ylabel="balanced accuracy",
            xscale="log",
            title=f"{protocol}, {len(seeds)} pretraining seeds",
        )
        ax.legend(fontsize=8)
    write_outputs(args.out, lines, fig)
    atomic_write_json(Path(args.out).with_suffix(".json"), summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
