"""M3G Table 3 ordering on synthetic EEG: few-shot sleep staging of M3G vs infonce_pwe vs
pvc_geometric (k = 6 EEG channels as views) at s in {10, 50, 100} labelled windows per stage.

    .venv/bin/python scripts/reproduce_m3g_eeg.py [--subjects 6] [--hours 1.5] [--steps 150] [--width 32]
        [--seeds 3] [--data demo_data/repro_m3g] [--runs-dir runs/repro_m3g_eeg] [--out docs/figures/m3g_eeg]

Synthesizes PhysioNet-2018-format nights and prepares the window cache (skipped when present), trains
``configs/eeg_synthetic_<loss>.yaml`` for ``--steps`` steps (encoder width ``--width``, each config's
own batch size: 16 for M3G as in the paper, 64 for the contrastive losses), then runs the
sleep-staging evaluator (held-out subjects, ``--seeds`` draws per s). Writes ``<out>.md`` and
``<out>.png`` (accuracy and kappa vs s, mean +- std over draws, random-init encoder for reference).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from repro_common import ROOT, new_figure, write_outputs  # noqa: E402

from multiview_app.config import load_config  # noqa: E402
from multiview_app.eval.sleep_staging import run_sleep_staging  # noqa: E402
from multiview_app.train.trainer import train  # noqa: E402

LOSSES = ("m3g", "infonce_pwe", "pvc_geometric")
SHOTS = (10, 50, 100)


def prepare_cache(data: Path, subjects: int, hours: float) -> Path:
    """Synthetic nights -> prepared cache (each step skipped when its output exists)."""
    raw, cache = data / "raw", data / "cache"
    cli = [sys.executable, "-m", "multiview_app.cli", "data"]
    if not any(raw.glob("*.hea")) and not any(raw.glob("**/*.hea")):
        subprocess.run(cli + ["synth-psg", "--subjects", str(subjects), "--nights", "1", "--format", "physionet2018",
                              "--hours", str(hours), "--out", str(raw), "--seed", "0"], check=True)
    subprocess.run(cli + ["prepare", "physionet2018", "--source", str(raw), "--out", str(cache)], check=True)
    return cache


def run_one(loss: str, cache: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Train (unless finished) and score one loss; returns the evaluator's result."""
    name = f"{loss}_s{args.steps}_w{args.width}"
    cfg = load_config(ROOT / "configs" / f"eeg_synthetic_{loss}.yaml", [
        f"data.options.cache={cache}", f"train.max_steps={args.steps}", f"model.encoders.eeg.width={args.width}",
        "model.encoders.eeg.dropout=0.0", "train.checkpoint_every=0", "train.log_every=10",
        f"output.runs_dir={args.runs_dir}"] + (["loss.max_iter=300"] if loss == "m3g" else []), name=name)
    if not (cfg.run_dir / "model.safetensors").is_file():
        if cfg.run_dir.exists():
            import shutil

            shutil.rmtree(cfg.run_dir)
        train(cfg)
    return run_sleep_staging(cfg.run_dir, shots=SHOTS, seeds=args.seeds, baselines=False, progress=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subjects", type=int, default=6)
    parser.add_argument("--hours", type=float, default=1.5)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--data", default=str(ROOT / "demo_data" / "repro_m3g"))
    parser.add_argument("--runs-dir", default=str(ROOT / "runs" / "repro_m3g_eeg"))
    parser.add_argument("--out", default=str(ROOT / "docs" / "figures" / "m3g_eeg"))
    args = parser.parse_args(argv)
    cache = prepare_cache(Path(args.data), args.subjects, args.hours)
    results = {loss: run_one(loss, cache, args)["results"] for loss in LOSSES}
    lines = ["| loss | encoder | " + " | ".join(f"acc s={s}" for s in SHOTS) + " | " + " | ".join(f"kappa s={s}" for s in SHOTS) + " |",
             "|---|---|" + "---|" * (2 * len(SHOTS))]
    for loss, res in results.items():
        for encoder in ("trained", "random_init"):
            if encoder not in res:
                continue
            acc = [f"{res[encoder][str(s)]['accuracy']['mean']:.3f} +- {res[encoder][str(s)]['accuracy']['std']:.3f}" for s in SHOTS]
            kap = [f"{res[encoder][str(s)]['kappa']['mean']:.3f}" for s in SHOTS]
            lines.append(f"| {loss} | {encoder} | " + " | ".join(acc + kap) + " |")
    fig, axes = new_figure(2, (9, 3.4))
    for ax, metric in zip(axes, ("accuracy", "kappa")):
        for loss, res in results.items():
            mean = [res["trained"][str(s)][metric]["mean"] for s in SHOTS]
            std = [res["trained"][str(s)][metric]["std"] for s in SHOTS]
            ax.errorbar(SHOTS, mean, yerr=std, marker="o", capsize=3, label=loss)
        ax.set(xlabel="labelled windows per stage s", ylabel=metric, xscale="log", title=f"sleep staging {metric}")
        ax.legend(fontsize=8)
    write_outputs(args.out, lines, fig)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
