"""Shared runner of the digits reproduction scripts (reproduce_flatnce_ess.py, reproduce_mveb_beta.py):
train ``configs/digits_<loss>.yaml`` with overrides (reusing a finished run) and read back its
metrics and linear-probe accuracies."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from multiview_app.config import load_config  # noqa: E402
from multiview_app.train.metrics import read_metrics  # noqa: E402
from multiview_app.train.trainer import train  # noqa: E402

#: the reduced CPU budget: 16 px images, width-16 encoder
SMALL = ["data.options.load_size=16", "views.options.image_size=16", "model.encoders.image.width=16"]


def train_digits(loss: str, name: str, overrides: list[str], runs_dir: str | Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Train (unless ``<runs_dir>/<name>/eval/linear_probe.json`` exists; an unfinished folder is
    restarted) and return (metrics.jsonl records, linear_probe.json ``results``: trained and random_init)."""
    base = ["train.checkpoint_every=0", "eval.linear_probe=true", f"output.runs_dir={runs_dir}"]
    cfg = load_config(ROOT / "configs" / f"digits_{loss}.yaml", base + list(overrides), name=name)
    probe_path = cfg.run_dir / "eval" / "linear_probe.json"
    if not probe_path.is_file():
        if cfg.run_dir.exists():
            shutil.rmtree(cfg.run_dir)
        train(cfg)
    return read_metrics(cfg.run_dir / "metrics.jsonl"), json.loads(probe_path.read_text())["results"]
