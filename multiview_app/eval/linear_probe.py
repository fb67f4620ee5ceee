"""``mvapp eval linear-probe``: frozen encoder features of the train/test split -> logistic
regression + kNN accuracy, for the trained encoder and its random-init reference in one table."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from ..argtypes import positive_float, positive_int
from ..train.run_io import atomic_write_json, load_run
from . import EVALUATORS
from .features import Combine, combine_views, extract_features
from .probe import probe_accuracies

ENCODER_WEIGHTS = {"trained": "final", "random_init": "init"}


def _labelled(x: np.ndarray, y: np.ndarray, split: str, skipped: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    keep = y >= 0
    skipped[split] = int((~keep).sum())
    return x[keep], y[keep]


def run_linear_probe(
    run_dir: str | Path, *, batch_size: int | None = None, knn_k: int | None = None, C: float = 1.0,
    combine: Combine | None = None, max_train_items: int | None = None, device: str = "cpu", progress: bool = True,
) -> dict[str, Any]:
    """Evaluate ``run_dir`` (trained and random-init encoder); write ``eval/linear_probe.json``.
    Unset arguments come from the run's ``eval`` config section."""
    from ..data.adapters import build_adapter
    from ..data.views import build_view_policy

    run_dir = Path(run_dir)
    cfg, _ = load_run(run_dir, "init")  # config check before heavy work
    ecfg = cfg.eval
    batch_size = ecfg.batch_size if batch_size is None else batch_size
    knn_k = ecfg.knn_k if knn_k is None else knn_k
    combine = combine or ecfg.combine
    max_train_items = ecfg.max_train_items if max_train_items is None else max_train_items
    for label, value in (("batch_size", batch_size), ("knn_k", knn_k), ("max_train_items", max_train_items or 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"linear probe: {label} must be an integer >= 1, got {value!r}")
    if not C > 0:
        raise ValueError(f"linear probe: C must be > 0, got {C!r}")
    adapter = build_adapter(cfg.data.adapter, cfg.data.options)
    if "test" not in adapter.splits:
        raise ValueError(f"data adapter '{cfg.data.adapter}' has no 'test' split (splits: {', '.join(adapter.splits)})")
    policy = build_view_policy(cfg.views.policy, cfg.views.k, cfg.views.options, adapter)

    results: dict[str, dict[str, float]] = {}
    skipped: dict[str, int] = {}
    sizes: dict[str, int] = {}
    feature_dim = 0
    for label, weights in ENCODER_WEIGHTS.items():
        _, model = load_run(run_dir, weights)
        split_xy = {}
        for split in ("train", "test"):
            feats, labels, _ = extract_features(model, adapter, policy, split, batch_size, device, progress)
            split_xy[split] = _labelled(combine_views(feats, combine), labels, split, skipped)
        x_train, y_train = split_xy["train"]
        if max_train_items and len(x_train) > max_train_items:
            pick = np.random.default_rng(0).choice(len(x_train), max_train_items, replace=False)
            x_train, y_train = x_train[pick], y_train[pick]
        x_test, y_test = split_xy["test"]
        sizes = {"train": len(x_train), "test": len(x_test)}
        feature_dim = x_train.shape[1]
        results[label] = probe_accuracies(x_train, y_train, x_test, y_test, knn_k=knn_k, C=C)
    result = {
        "evaluator": "linear-probe",
        "run": str(run_dir),
        "loss": cfg.loss.name,
        "encoders": cfg.model.encoders,
        "items": sizes,
        "skipped_unlabelled": skipped,
        "feature_dim": int(feature_dim),
        "combine": combine,
        "knn_k": knn_k,
        "C": C,
        "results": results,
        "gain": {m: results["trained"][m] - results["random_init"][m] for m in results["trained"]},
    }
    atomic_write_json(run_dir / "eval" / "linear_probe.json", result)
    return result


def format_table(result: dict[str, Any]) -> str:
    """Plain-text table of a linear-probe result."""
    rows = [f"{'encoder':<12} {'logreg acc':>10} {'kNN acc':>8}"]
    for name, scores in result["results"].items():
        rows.append(f"{name:<12} {scores['logreg_acc']:>10.4f} {scores['knn_acc']:>8.4f}")
    return "\n".join(rows)


@EVALUATORS.register("linear-probe")
class LinearProbe:
    """Logistic regression + kNN on frozen features; trained vs random-init encoder."""

    kind = "linear_probe"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--batch-size", type=positive_int, default=None, help="feature-extraction batch (default: eval.batch_size)")
        parser.add_argument("--knn-k", type=positive_int, default=None, help="neighbours for kNN (default: eval.knn_k)")
        parser.add_argument("--C", type=positive_float, default=1.0, help="inverse L2 strength of the logistic regression")
        parser.add_argument("--combine", choices=["mean", "concat", "first"], default=None, help="how eval views are combined")
        parser.add_argument("--max-train-items", type=positive_int, default=None, help="subsample the train split (seed 0)")
        parser.add_argument("--device", default="cpu", help="torch device for feature extraction")

    def run(self, run_dir: str | Path, args: argparse.Namespace) -> dict[str, Any]:
        result = run_linear_probe(
            run_dir, batch_size=args.batch_size, knn_k=args.knn_k, C=args.C, combine=args.combine,
            max_train_items=args.max_train_items, device=args.device,
        )
        print(format_table(result))
        return result
