"""Choose the demo's EEG encoder on VALIDATION subjects: M3G pretraining with the demo's budget, then the
tune objective's few-shot staging score on the validation subjects, per encoder and seed, with the
balanced accuracy of every validation subject.

Split and objective are those of ``configs/tune_eeg_demo.yaml`` (``multiview_app/tune/objective.py``): the
demo's 12 PhysioNet-2018-format nights, its 4 test subjects held out (never read), 3 validation subjects,
pretraining on the other 5; 50 windows per class drawn from the training subjects (seed 0), logistic
regression, scored on every validation window. The demo's settings: 400 steps, batch 16, lr 0.002,
epsilon 0.2, the view augmentations of ``scripts/run_eeg_demo.sh``. Rows: each encoder trained, and at its
random initialization. Needs the extra ``eeg-models`` for the braindecode encoders.

    OMP_NUM_THREADS=1 python scripts/compare_eeg_encoders.py --cache demo_data/physionet2018_cache \\
        --seeds 0,1 --out runs/compare_eeg_encoders
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from multiview_app.argtypes import seed_list

#: The encoders compared, as ``model.encoders.eeg`` (the demo's conv encoder: width 32, dropout 0, agnostic).
ENCODERS: dict[str, str] = {
    "conv": "{name: conv, width: 32, out_dim: 64, dropout: 0.0, channel_mode: agnostic, unknown_rate: 0.0}",
    "chambon2018": "{name: chambon2018, out_dim: 64}",
    "attnsleep": "{name: attnsleep, out_dim: 64, dropout: 0.0}",
}
DEMO = [
    "train.max_steps=400",
    "train.batch_size=16",
    "optim.lr=0.002",
    "loss.epsilon=0.2",
    "loss.max_iter=300",
    "train.checkpoint_every=0",
    "views.options.crop_seconds=20",
    "views.options.amplitude_scale=[0.5,2.0]",
    "views.options.noise_std=0.1",
    "views.options.band_stop_hz=2.0",
]
CONFIG = "configs/tune_eeg_demo.yaml"


def train(name: str, seed: int, cache: str, out: Path) -> Path:
    """One pretraining run (subprocess, the ``mvapp train`` CLI); returns its folder (reused when finished)."""
    run_dir = out / f"{name}_seed{seed}"
    if (run_dir / "model.safetensors").is_file():
        return run_dir
    cmd = [
        sys.executable,
        "-m",
        "multiview_app.cli",
        "train",
        "--config",
        CONFIG,
        "--name",
        run_dir.name,
        f"output.runs_dir={out}",
        f"data.options.cache={cache}",
        f"model.encoders.eeg={ENCODERS[name]}",
        f"train.seed={seed}",
        *DEMO,
    ]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return run_dir


def validation_scores(run_dir: Path, weights: str) -> dict[str, Any]:
    """The tune objective's few-shot staging fit (50 shots, seed 0) on the validation subjects: pooled
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", required=True, help="the demo's prepared PhysioNet-2018-format cache")
    parser.add_argument("--seeds", type=seed_list, default="0,1", help="training seeds, comma-separated")
    parser.add_argument("--encoders", nargs="+", default=list(ENCODERS), choices=list(ENCODERS))
    parser.add_argument("--out", default="runs/compare_eeg_encoders")
    args = parser.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    rows = []
    for seed in args.seeds:  # every encoder at a seed before the next seed
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


if __name__ == "__main__":
    main()
