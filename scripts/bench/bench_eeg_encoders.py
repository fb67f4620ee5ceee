"""EEG encoders side by side: speed in one process, and (``--validation``) the choice of the demo's encoder on
validation subjects.

Speed (the default): parameters and CPU training steps/s of every encoder below on the demo's step (16 items x
6 channel views of 20-s crops at 100 Hz, encoder + projector forward, a mean-square stand-in loss, backward,
AdamW), as a ratio against the demo's ``eeg/conv`` (width 32, channel-agnostic); the loss head is left out (it
costs the same for every encoder).

``--validation --cache DIR``: M3G pretraining with the demo's budget per encoder and seed, then the tune
objective's few-shot staging score on the validation subjects (split and objective of
``configs/tune_eeg_demo.yaml``: the demo's 12 PhysioNet-2018-format nights, its 4 test subjects never read, 3
validation subjects, pretraining on the other 5; 50 windows per class from the training subjects, logistic
regression), trained and at random initialization, with each validation subject's balanced accuracy; resumes
(finished runs under ``--out`` are reused). Needs the extra ``eeg-models`` for the braindecode encoders.

    OMP_NUM_THREADS=1 python scripts/bench/bench_eeg_encoders.py [--steps 20 --repeats 3 --threads 1]
    OMP_NUM_THREADS=1 python scripts/bench/bench_eeg_encoders.py --validation --cache demo_data/physionet2018_cache \\
        --seeds 0,1 --out runs/compare_eeg_encoders
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from common import markdown_table

from multiview_app.argtypes import seed_list
from multiview_app.models import build_model

#: ``model.encoders.eeg`` of each encoder (the demo's conv and the braindecode encoders of the comparison).
ENCODERS: dict[str, dict[str, Any]] = {
    "conv": {
        "name": "conv",
        "width": 32,
        "out_dim": 64,
        "dropout": 0.0,
        "channel_mode": "agnostic",
        "unknown_rate": 0.0,
    },
    "chambon2018": {"name": "chambon2018", "out_dim": 64},
    "attnsleep": {"name": "attnsleep", "out_dim": 64, "dropout": 0.0},
}
VIEWS = ["F3-M2", "F4-M1", "C3-M2", "C4-M1", "O1-M2", "O2-M1"]
#: the demo's pretraining settings (scripts/run_eeg_demo.sh) over configs/tune_eeg_demo.yaml
DEMO = [
    *("train.max_steps=400", "train.batch_size=16", "optim.lr=0.002", "loss.epsilon=0.2", "loss.max_iter=300"),
    *("train.checkpoint_every=0", "views.options.crop_seconds=20", "views.options.amplitude_scale=[0.5,2.0]"),
    *("views.options.noise_std=0.1", "views.options.band_stop_hz=2.0"),
]
CONFIG = "configs/tune_eeg_demo.yaml"


def steps_per_second(model: torch.nn.Module, batch: int, samples: int, steps: int) -> float:
    """Training steps/s of ``model``'s EEG encoder + projector on ``(batch, samples)`` views (after 2 warm-up steps)."""
    from multiview_app.data.batch import ViewBatch

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(0)
    views = [torch.randn(batch, samples, generator=generator) for _ in VIEWS]
    item = ViewBatch(views=views, view_names=list(VIEWS), modalities=["eeg"] * len(VIEWS))
    model.train()
    start = 0.0
    for step in range(steps + 2):
        if step == 2:
            start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        model.embed(item).square().mean().backward()
        optimizer.step()
    return steps / (time.perf_counter() - start)


def speed(args: argparse.Namespace) -> None:
    """Print parameters and the best steps/s of each encoder over interleaved repeats, ratio vs conv."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    models = {name: build_model({"eeg": ENCODERS[name]}, {"hidden_dim": 256, "out_dim": 64}) for name in args.encoders}
    best = {name: 0.0 for name in models}
    for _ in range(args.repeats):  # interleaved: a load change hits every encoder alike
        for name, model in models.items():
            best[name] = max(best[name], steps_per_second(model, args.batch, int(args.seconds * 100), args.steps))
    print(
        f"torch threads {args.threads}; batch {args.batch} x {len(VIEWS)} views x {args.seconds:g} s at 100 Hz; "
        f"best of {args.repeats} x {args.steps} steps"
    )
    rows = []
    for name, model in models.items():
        params = sum(p.numel() for p in model.encoders["eeg"].parameters())
        rows.append(
            [name, f"{params:,d}", f"{best[name]:.2f}", f"{best[name] / best['conv']:.2f}x" if "conv" in best else "-"]
        )
    print(markdown_table(["encoder", "encoder params", "steps/s", "vs conv"], rows))


def train(name: str, seed: int, cache: str, out: Path) -> Path:
    """One pretraining run (subprocess, the ``mvapp train`` CLI); returns its folder (reused when finished)."""
    run_dir = out / f"{name}_seed{seed}"
    if not (run_dir / "model.safetensors").is_file():
        encoder = f"model.encoders.eeg={json.dumps(ENCODERS[name])}"  # JSON is YAML flow syntax
        cmd = [sys.executable, "-m", "multiview_app.cli", "train", "--config", CONFIG, "--name", run_dir.name]
        cmd += [f"output.runs_dir={out}", f"data.options.cache={cache}", encoder, f"train.seed={seed}", *DEMO]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return run_dir


def validation_scores(run_dir: Path, weights: str) -> dict[str, Any]:
    """The tune objective's few-shot staging fit (its shots, draw seed 0) on the validation subjects: pooled
    balanced accuracy and kappa, and the balanced accuracy of each validation subject."""
    from multiview_app.data.eeg.views import staging_views
    from multiview_app.eval.features import window_features
    from multiview_app.eval.protocols import get_protocol
    from multiview_app.eval.protocols.staging import shot_draw, staging_metrics
    from multiview_app.train.run_io import load_run
    from multiview_app.tune.objective import VAL_SPLIT, MetricState

    cfg, model = load_run(run_dir, weights)
    state = MetricState(cfg)  # the objective's adapter and labels: the same split, the same draw
    policy = staging_views(cfg.views, state.adapter)
    shots = cfg.tune.shots
    drawn, _ = shot_draw(state.labels("train"), shots, seed=0)
    train_x, train_y, _ = window_features(model, state.adapter, policy, "train", cfg.eval.batch_size, "cpu", rows=drawn)
    val_x, val_y, meta = window_features(model, state.adapter, policy, VAL_SPLIT, cfg.eval.batch_size, "cpu")
    fits = get_protocol("few-shot-staging")(
        {"trained": {"train": train_x, "test": val_x}}, train_y, val_y, (shots,), seeds=1
    )
    predicted = np.asarray(fits["predictions"]["trained"])
    subjects = np.asarray(meta["subject"])
    pooled = staging_metrics(val_y, predicted)
    per_subject = {
        str(s): staging_metrics(val_y[subjects == s], predicted[subjects == s])["balanced_accuracy"]
        for s in sorted(set(subjects.tolist()))
    }
    return {"balanced_accuracy": pooled["balanced_accuracy"], "kappa": pooled["kappa"], "per_subject": per_subject}


def validation(args: argparse.Namespace) -> None:
    """Every encoder at a seed before the next seed: train unless done, score final and init weights; rows
    go to ``--out``/results.json after every run."""
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for seed in args.seeds:
        for name in args.encoders:
            run_dir = train(name, seed, args.cache, out)
            for weights in ("final", "init"):
                score = validation_scores(run_dir, weights)
                rows.append({"encoder": name, "seed": seed, "weights": weights, **score})
                per = " ".join(f"{s}={v:.3f}" for s, v in score["per_subject"].items())
                print(
                    f"{name:12s} seed {seed} {weights:5s} val bal.acc {score['balanced_accuracy']:.3f} "
                    f"kappa {score['kappa']:.3f} | per subject {per}",
                    flush=True,
                )
            (out / "results.json").write_text(json.dumps(rows, indent=1))
    print(f"wrote {out / 'results.json'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--encoders", nargs="+", default=list(ENCODERS), choices=list(ENCODERS))
    parser.add_argument("--steps", type=int, default=20, help="speed: timed steps per repeat")
    parser.add_argument("--repeats", type=int, default=3, help="speed: interleaved repeats; the best of each is kept")
    parser.add_argument("--batch", type=int, default=16, help="speed: items per step")
    parser.add_argument("--seconds", type=float, default=20.0, help="speed: view length (the demo's crops: 20 s)")
    parser.add_argument("--threads", type=int, default=1, help="speed: torch threads")
    parser.add_argument("--validation", action="store_true", help="pretrain and score on validation subjects")
    parser.add_argument("--cache", help="--validation: the demo's prepared PhysioNet-2018-format cache")
    parser.add_argument("--seeds", type=seed_list, default="0,1", help="--validation: training seeds")
    parser.add_argument("--out", default="runs/compare_eeg_encoders", help="--validation: runs and results.json")
    args = parser.parse_args()
    if args.validation and not args.cache:
        parser.error("--validation needs --cache DIR (the demo's demo_data/physionet2018_cache)")
    (validation if args.validation else speed)(args)


if __name__ == "__main__":
    main()
