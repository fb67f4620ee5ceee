"""Synthetic-to-real transfer: the demo's pretrained EEG encoder stages the real DREAMS excerpts.

One command for a user with the DREAMS Sleep Spindles download:

    python scripts/transfer_dreams.py --real-psg DIR --out OUT [--run RUN ... | --pretrain-seeds 0,1,2]

1. prepares ``DIR/dreams-spindles`` into ``OUT/dreams_cache`` (``mvapp data prepare dreams``; reused when present);
2. without ``--run``: pretrains the demo's encoder once per seed in ``--pretrain-seeds`` exactly as
   ``scripts/run_eeg_demo.sh`` does (its synthetic PhysioNet-2018-format nights and its training settings,
   read from ``configs/demo_eeg.yaml`` as that script reads it, each overridden by a ``DEMO_X`` environment
   variable as the script itself does; not restated here) under ``OUT/``; a finished run with the same config is reused;
3. stages the excerpts few-shot, **leave-one-excerpt-out** (``mvapp eval sleep-staging --cache ... --folds F``
   with F = the number of excerpts: every excerpt is its own subject, so each fold tests one excerpt; the
   classifier and its C are fitted and tuned on the other excerpts only) on ``--stages`` (default W N1 N2 N3:
   DREAMS holds 5 REM windows, which are excluded and counted), pooled over pretraining runs x folds x draws,
   with the supervised-ceiling row (each run's encoder trained on its pretraining nights' stages; ``--no-ceiling``
   skips it) and the paired differences by excerpt (mean, 95 % bootstrap CI over excerpts, excerpts ahead);
4. writes ``OUT/transfer_dreams.md`` and ``OUT/transfer_dreams.json`` and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from multiview_app.argtypes import positive_int
from multiview_app.config import Config, load_config
from multiview_app.eval.sleep_staging import format_table, pool_results
from multiview_app.experiments import ensure_trained
from multiview_app.experiments.staging import staging_result, train_supervised_ceiling

REPO = Path(__file__).resolve().parents[1]
DEMO_SCRIPT = REPO / "scripts" / "run_eeg_demo.sh"
REAL_PSG_ENV = "MVAPP_REAL_PSG"
RUN_NAME = "eeg_synthetic_m3g_demo"


DEMO_KNOBS = (
    "DEMO_SUBJECTS",
    "DEMO_EDF_SUBJECTS",
    "DEMO_HOURS",
    "DEMO_COMPRESS",
    "DEMO_STEPS",
    "DEMO_LR",
    "DEMO_BATCH",
    "DEMO_ENCODER",
    "DEMO_EPSILON",
    "DEMO_DRAWS",
    "DEMO_PSG_SEED",
    "DEMO_EDF_SEED",
    "DEMO_AUGMENT",
    "DEMO_COMBINE",
)
"""The demo script's knobs that the pretraining data, the training and the evaluation read."""


def demo_defaults(script: Path = DEMO_SCRIPT) -> dict[str, str]:
    """``{"DEMO_STEPS": "400", ...}``: the default of every knob of the demo script (its demo config's value), so
    this transfer pretrains with exactly the demo's settings."""
    return {name: default for name, _, default in _demo_knobs(script)}


def _demo_knobs(script: Path) -> list[tuple[str, str, str]]:
    """``[(name, ":" or "", default)]`` of the script's ``${DEMO_X:-${CFG[x]}}`` / ``${DEMO_X-${CFG[x]}}`` knobs,
    each default the value of key ``x`` in the demo config the script reads (``$DEMO_CONFIG``, else
    ``configs/demo_eeg.yaml``); ``ValueError`` naming the script and any knob of :data:`DEMO_KNOBS` it lacks."""
    found = re.findall(r"\$\{(DEMO_[A-Z_]+)(:?)-\$\{CFG\[([a-z_]+)\]\}\}", script.read_text())
    if missing := sorted(set(DEMO_KNOBS) - {name for name, _, _ in found}):
        raise ValueError(f"{script}: expected the demo knobs {missing} (${{DEMO_X:-${{CFG[x]}}}})")
    config = yaml.safe_load((REPO / (os.environ.get("DEMO_CONFIG") or "configs/demo_eeg.yaml")).read_text())
    return [(name, colon, "" if config[key] is None else str(config[key])) for name, colon, key in found]


def demo_settings(script: Path = DEMO_SCRIPT, env: dict[str, str] | None = None) -> dict[str, str]:
    """The demo's settings as the demo script itself resolves them: each knob's default
    (:func:`demo_defaults`) unless the environment sets ``DEMO_X`` (``${DEMO_X:-d}``: a non-empty value;
    ``${DEMO_X-d}``, e.g. ``DEMO_AUGMENT``: any value, empty included). One mechanism for the demo,
    this transfer and ``scripts/compare_channel_modes.py``."""
    env = dict(os.environ if env is None else env)
    settings = {}
    for name, colon, default in _demo_knobs(script):
        value = env.get(name)
        settings[name] = default if value is None or (colon and value == "") else value
    return settings


def mvapp(*args: str) -> None:
    """Run ``mvapp ARGS`` (this interpreter's package) with one torch thread, as the demo does; raise on failure."""
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    subprocess.run([sys.executable, "-m", "multiview_app.cli", *args], check=True, env=env)


def prepare_dreams(real_psg: Path, out: Path) -> Path:
    """``OUT/dreams_cache`` prepared from ``REAL_PSG/dreams-spindles`` (reused when its manifest exists)."""
    source, cache = real_psg / "dreams-spindles", out / "dreams_cache"
    if not source.is_dir():
        raise FileNotFoundError(
            f"{source}: expected the DREAMS Sleep Spindles folder (see datasets/dreams_spindles.yaml)"
        )
    if not (cache / "manifest.json").is_file():
        mvapp("data", "prepare", "dreams", "--source", str(source), "--out", str(cache))
    return cache


def demo_data(data: Path, knobs: dict[str, str], sleep_edf: bool = False) -> dict[str, Path]:
    """The demo's synthetic nights, synthesized and prepared under ``data`` as ``scripts/run_eeg_demo.sh``
    does (existing files reused): ``{"physionet2018": cache}`` (``DEMO_SUBJECTS`` nights, generator seed
    ``DEMO_PSG_SEED``; pretraining) and, with ``sleep_edf``, ``"sleep-edf"`` (``DEMO_EDF_SUBJECTS`` nights,
    seed ``DEMO_EDF_SEED``; cross-dataset staging)."""
    wanted = [("physionet2018", "DEMO_SUBJECTS", "DEMO_PSG_SEED")]
    wanted += [("sleep-edf", "DEMO_EDF_SUBJECTS", "DEMO_EDF_SEED")] if sleep_edf else []
    caches = {}
    for fmt, subjects, seed in wanted:
        stem = fmt.replace("-", "_")
        raw, cache = data / f"{stem}_raw", data / f"{stem}_cache"
        if not raw.is_dir() or not any(raw.glob("*")):
            mvapp(
                "data",
                "synth-psg",
                "--subjects",
                knobs[subjects],
                "--nights",
                "1",
                "--format",
                fmt,
                "--hours",
                knobs["DEMO_HOURS"],
                "--compress",
                knobs["DEMO_COMPRESS"],
                "--out",
                str(raw),
                "--seed",
                knobs[seed],
            )
        if not (cache / "manifest.json").is_file():
            mvapp("data", "prepare", fmt, "--source", str(raw), "--out", str(cache))
        caches[fmt] = cache
    return caches


def demo_config(cache: Path, runs: Path, name: str, seed: int, knobs: dict[str, str], extra: list[str] = ()) -> Config:
    """The demo's training config (``configs/eeg_synthetic_m3g.yaml`` with the overrides
    ``scripts/run_eeg_demo.sh`` passes, from ``knobs``) for run ``runs/name`` with ``train.seed`` ``seed``;
    ``extra`` overrides last (e.g. another ``model.encoders.eeg.channel_mode``)."""
    overrides = [
        f"output.runs_dir={runs}",
        f"train.seed={seed}",
        f"data.options.cache={cache}",
        f"train.max_steps={knobs['DEMO_STEPS']}",
        f"train.batch_size={knobs['DEMO_BATCH']}",
        f"optim.lr={knobs['DEMO_LR']}",
        f"model.encoders.eeg={knobs['DEMO_ENCODER']}",
        "train.checkpoint_every=0",
        "train.log_every=10",
        f"loss.epsilon={knobs['DEMO_EPSILON']}",
        "loss.max_iter=300",
        *knobs["DEMO_AUGMENT"].split(),
        *extra,
    ]
    return load_config(REPO / "configs" / "eeg_synthetic_m3g.yaml", overrides, name=name)


def pretrain(out: Path, seed: int, data: Path | None = None) -> Path:
    """The demo's encoder pretrained with training seed ``seed`` on the demo's synthetic nights (generated once
    under ``data``, default ``OUT/demo_data``), settings :func:`demo_settings`; a finished run with the same config is reused
    (``ensure_trained(cfg, "refuse-mismatch")``: one trained with other settings is refused, naming them)."""
    knobs = demo_settings()
    cache = demo_data((data or out / "demo_data").resolve(), knobs)["physionet2018"]
    cfg = demo_config(cache, out / "runs", f"{RUN_NAME}_seed{seed}", seed, knobs)
    ensure_trained(cfg, "refuse-mismatch")
    return cfg.run_dir


def check_leave_one_out(result: dict, n_excerpts: int) -> None:
    """Every fold tests exactly one excerpt and trains (and chooses C inside its drawn windows) on the others;
    each excerpt is tested once."""
    tested = [fold["test"] for fold in result["folds"]]
    if any(len(t) != 1 for t in tested) or len({t[0] for t in tested}) != n_excerpts:
        raise AssertionError(f"not leave-one-excerpt-out: test folds {tested} for {n_excerpts} excerpts")
    for fold in result["folds"]:
        if fold["test"][0] in fold["train"]:
            raise AssertionError(f"excerpt {fold['test'][0]} both tested and used for the classifier")


def stage_dreams(
    run: Path, cache: Path, shots: list[int], draws: int, stages: list[str], combine: str, ceiling: bool = True
) -> dict:
    """``run``'s encoder stages the DREAMS excerpts of ``cache`` leave-one-excerpt-out (folds = excerpts;
    checked by :func:`check_leave_one_out`); a stored evaluation with the same settings is reused
    (``experiments.staging.staging_result``). ``ceiling``: the run's supervised ceiling (its encoder trained
    on the pretraining nights' stages, steps chosen on their validation subjects) is trained unless done
    first, so the table has its row."""
    if ceiling:
        train_supervised_ceiling(run, progress=False)
    n_excerpts = len(json.loads((cache / "manifest.json").read_text())["recordings"])
    result = staging_result(  # with YASA's pretrained stager as a zero-shot row (extra [yasa]; else a note says why)
        run,
        cache=cache.resolve(),
        folds=n_excerpts,
        shots=list(shots),
        draws=draws,
        combine=combine,
        stages=stages,
        yasa=True,
    )
    check_leave_one_out(result, n_excerpts)
    return result


def per_class_f1_table(result: dict) -> list[str]:
    """Markdown rows: per-class F1 (mean ± std over fits) of every row at every s."""
    stages = result["stages"]
    lines = ["| features | s | " + " | ".join(f"F1 {c}" for c in stages) + " |", "|---|---|" + "---|" * len(stages)]
    for name, per_shot in result["results"].items():
        for s, cell in per_shot.items():
            f1 = cell["per_class_f1"]
            lines.append(
                f"| {name} | {s} | "
                + " | ".join(f"{f1[c]['mean']:.2f} ± {f1[c]['std']:.2f}" if c in f1 else "-" for c in stages)
                + " |"
            )
    return lines


def markdown(result: dict, runs: list[Path], cache: Path, command: str) -> str:
    """The table block of ``docs/eeg.md``: command, runs, real windows per class, the evaluator's table."""
    manifest = json.loads((cache / "manifest.json").read_text())
    excluded = {k: n for k, n in result["excluded_windows_per_stage"].items() if n}
    per_stage = ", ".join(f"{k} {n}" for k, n in result["test_windows_per_stage"].items() if n)
    return "\n".join(
        [
            "# Synthetic-to-real transfer (DREAMS)",
            "",
            f"command: `{command}`",
            "",
            f"pretraining runs: {', '.join(str(r) for r in runs)}",
            "",
            f"real excerpts: {len(manifest['recordings'])} (one subject each), leave-one-excerpt-out; "
            f"staged windows per class: {per_stage}; excluded: {excluded or 'none'}",
            "",
            "```",
            format_table(result),
            "```",
            "",
            "per-class F1 (mean ± std over fits):",
            "",
            *per_class_f1_table(result),
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--real-psg",
        type=Path,
        default=os.environ.get(REAL_PSG_ENV),
        help=f"folder holding dreams-spindles/ (default: ${REAL_PSG_ENV})",
    )
    parser.add_argument("--out", type=Path, required=True, help="output folder (cache, runs, table, JSON)")
    parser.add_argument(
        "--run",
        type=Path,
        nargs="+",
        default=None,
        help="pretrained run(s) to transfer (default: pretrain the demo's encoder)",
    )
    parser.add_argument("--pretrain-seeds", default="0", help="comma-separated training seeds (default: %(default)s)")
    parser.add_argument(
        "--data",
        type=Path,
        default=None,
        help="folder of the demo's synthetic data, synthesized once and reused (default: OUT/demo_data)",
    )
    parser.add_argument("--shots", type=positive_int, nargs="+", default=[10, 20, 40])
    parser.add_argument("--draws", type=positive_int, default=3, help="few-shot draws per fold (default: %(default)s)")
    parser.add_argument("--stages", nargs="+", default=["W", "N1", "N2", "N3"])
    parser.add_argument(
        "--no-ceiling",
        action="store_true",
        help="skip the supervised-ceiling row (the encoder trained on the pretraining nights' stages)",
    )
    args = parser.parse_args(argv)
    if args.real_psg is None:
        parser.error(f"--real-psg DIR (or ${REAL_PSG_ENV}) is required")
    args.out.mkdir(parents=True, exist_ok=True)
    cache = prepare_dreams(Path(args.real_psg), args.out)
    runs = args.run or [pretrain(args.out.resolve(), int(s), args.data) for s in args.pretrain_seeds.split(",")]
    combine = demo_settings()["DEMO_COMBINE"]
    results = [
        stage_dreams(run, cache, args.shots, args.draws, args.stages, combine, not args.no_ceiling) for run in runs
    ]
    pooled = pool_results(results) if len(results) > 1 else results[0]
    command = "python scripts/transfer_dreams.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = markdown(pooled, runs, cache, command)
    (args.out / "transfer_dreams.md").write_text(text)
    (args.out / "transfer_dreams.json").write_text(json.dumps(pooled, indent=1, default=str))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
