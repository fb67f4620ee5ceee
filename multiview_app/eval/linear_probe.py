"""``mvapp eval linear-probe``: frozen encoder features of the train/test split -> logistic
regression + kNN accuracy, for the trained encoder and its random-init reference in one table."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from torch.utils.data import Subset

from ..argtypes import positive_float, positive_int
from ..train.run_io import atomic_write_json, load_run
from . import Evaluator, register_evaluator
from .features import Combine, combine_views, extract_features
from .protocols.probe import probe_accuracies

ENCODER_WEIGHTS = {"trained": "final", "random_init": "init"}


def _labelled(x: np.ndarray, y: np.ndarray, split: str, skipped: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    keep = y >= 0
    skipped[split] = int((~keep).sum())
    return x[keep], y[keep]


def probe_model(
    model: Any,
    adapter: Any,
    policy: Any,
    *,
    eval_split: str = "test",
    batch_size: int = 256,
    knn_k: int = 20,
    C: float = 1.0,
    combine: Combine = "mean",
    max_train_items: int | None = None,
    device: str = "cpu",
    progress: bool = True,
    train_items: Sequence[int] | None = None,
    eval_items: Sequence[int] | None = None,
) -> dict[str, Any]:
    """Linear probe + kNN of one model: fit on ``train`` features, score on ``eval_split``.

    ``max_train_items``: a seeded (0) subsample of the train split is encoded and fitted (unlabelled
    items in it are then dropped and counted). ``train_items`` / ``eval_items``: explicit item indices
    of the two splits (only those are encoded; ``train_items`` replaces the ``max_train_items`` draw).
    Returns ``{"scores": {"logreg_acc", "knn_acc"}, "items", "skipped_unlabelled", "feature_dim"}``.
    """
    if eval_split not in adapter.splits:
        raise ValueError(
            f"data adapter {type(adapter).__name__} has no '{eval_split}' split (splits: {', '.join(adapter.splits)})"
        )
    skipped: dict[str, int] = {}
    split_xy = {}
    n_train = len(adapter.split("train"))
    pick = None if train_items is None else list(train_items)
    if (
        pick is None and max_train_items and n_train > max_train_items
    ):  # drawn before extraction: only those are encoded
        pick = np.random.default_rng(0).choice(n_train, max_train_items, replace=False).tolist()
    for split, rows in (("train", pick), (eval_split, None if eval_items is None else list(eval_items))):
        subset = None if rows is None else Subset(adapter.split(split), rows)
        feats, labels, _ = extract_features(model, adapter, policy, split, batch_size, device, progress, dataset=subset)
        split_xy[split] = _labelled(combine_views(feats, combine), labels, split, skipped)
    x_train, y_train = split_xy["train"]
    x_eval, y_eval = split_xy[eval_split]
    return {
        "scores": probe_accuracies(x_train, y_train, x_eval, y_eval, knn_k=knn_k, C=C),
        "items": {"train": len(x_train), eval_split: len(x_eval)},
        "skipped_unlabelled": skipped,
        "feature_dim": int(x_train.shape[1]),
    }


def _probe_settings(
    ecfg: Any, batch_size: int | None, knn_k: int | None, combine: Combine | None, max_train_items: int | None
) -> tuple[int, int, Combine, int | None]:
    """``(batch_size, knn_k, combine, max_train_items)``: each argument, or the run's ``eval`` config value
    ``ecfg`` where it is unset; a count that is not an integer >= 1 is refused (ValueError naming it)."""
    batch_size = ecfg.batch_size if batch_size is None else batch_size
    knn_k = ecfg.knn_k if knn_k is None else knn_k
    combine = combine or ecfg.combine
    max_train_items = ecfg.max_train_items if max_train_items is None else max_train_items
    for label, value in (("batch_size", batch_size), ("knn_k", knn_k), ("max_train_items", max_train_items or 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"linear probe: {label} must be an integer >= 1, got {value!r}")
    return batch_size, knn_k, combine, max_train_items


def _probe_encoders(
    run_dir: Path, adapter: Any, policy: Any, **probe_options: Any
) -> tuple[dict[str, dict[str, float]], dict[str, Any]]:
    """``({encoder: scores}, the last probe's output)``: :func:`probe_model` of the trained and the random-init
    encoder of ``run_dir`` (``probe_options``: its keyword arguments)."""
    results: dict[str, dict[str, float]] = {}
    probed: dict[str, Any] = {}
    for label, weights in ENCODER_WEIGHTS.items():
        _, model = load_run(run_dir, weights)
        probed = probe_model(model, adapter, policy, **probe_options)
        results[label] = probed["scores"]
    return results, probed


def _adapter_and_views(cfg: Any, split: str) -> tuple[Any, Any]:
    """The run's data adapter and view policy (from its config ``cfg``); an adapter without ``split`` is
    refused (ValueError naming its splits)."""
    from ..data.adapters import build_adapter
    from ..data.views import build_view_policy

    adapter = build_adapter(cfg.data.adapter, cfg.data.options)
    if split not in adapter.splits:
        raise ValueError(
            f"data adapter '{cfg.data.adapter}' has no '{split}' split (splits: {', '.join(adapter.splits)})"
        )
    return adapter, build_view_policy(cfg.views.policy, cfg.views.k, cfg.views.options, adapter)


def run_linear_probe(
    run_dir: str | Path,
    *,
    batch_size: int | None = None,
    knn_k: int | None = None,
    C: float = 1.0,
    combine: Combine | None = None,
    max_train_items: int | None = None,
    device: str = "cpu",
    progress: bool = True,
    split: str = "test",
) -> dict[str, Any]:
    """Evaluate ``run_dir`` (trained and random-init encoder) on ``split`` (``test``; ``val`` for
    hyperparameter search); write ``eval/linear_probe.json`` (``eval/linear_probe_<split>.json``
    for another split). Unset arguments come from the run's ``eval`` config section."""
    run_dir = Path(run_dir)
    cfg, _ = load_run(run_dir, "init")  # config check before heavy work
    batch_size, knn_k, combine, max_train_items = _probe_settings(cfg.eval, batch_size, knn_k, combine, max_train_items)
    if not C > 0:
        raise ValueError(f"linear probe: C must be > 0, got {C!r}")
    adapter, policy = _adapter_and_views(cfg, split)

    results, probed = _probe_encoders(
        run_dir,
        adapter,
        policy,
        eval_split=split,
        batch_size=batch_size,
        knn_k=knn_k,
        C=C,
        combine=combine,
        max_train_items=max_train_items,
        device=device,
        progress=progress,
    )
    result = {
        "evaluator": "linear-probe",
        "run": str(run_dir),
        "loss": cfg.loss.name,
        "encoders": cfg.model.encoders,
        "split": split,
        "items": probed["items"],
        "skipped_unlabelled": probed["skipped_unlabelled"],
        "feature_dim": probed["feature_dim"],
        "combine": combine,
        "knn_k": knn_k,
        "C": C,
        "results": results,
        "gain": {m: results["trained"][m] - results["random_init"][m] for m in results["trained"]},
    }
    path = run_dir / "eval" / ("linear_probe.json" if split == "test" else f"linear_probe_{split}.json")
    result["output"] = str(path)
    atomic_write_json(path, result)
    return result


def format_table(result: dict[str, Any]) -> str:
    """Plain-text table of a linear-probe result."""
    rows = [f"{'encoder':<12} {'logreg acc':>10} {'kNN acc':>8}"]
    for name, scores in result["results"].items():
        rows.append(f"{name:<12} {scores['logreg_acc']:>10.4f} {scores['knn_acc']:>8.4f}")
    return "\n".join(rows)


@register_evaluator
class LinearProbe(Evaluator):
    """Logistic regression + kNN on frozen features; trained vs random-init encoder."""

    name = "linear-probe"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--batch-size", type=positive_int, default=None, help="feature-extraction batch (default: eval.batch_size)"
        )
        parser.add_argument("--knn-k", type=positive_int, default=None, help="neighbours for kNN (default: eval.knn_k)")
        parser.add_argument(
            "--C", type=positive_float, default=1.0, help="inverse L2 strength of the logistic regression"
        )
        parser.add_argument(
            "--combine", choices=["mean", "concat", "first"], default=None, help="how eval views are combined"
        )
        parser.add_argument(
            "--max-train-items", type=positive_int, default=None, help="subsample the train split (seed 0)"
        )
        parser.add_argument("--device", default="cpu", help="torch device for feature extraction")
        parser.add_argument("--split", default="test", help="split scored (test; val: the held-out part of train)")

    def run(self, run_dir: str | Path, args: argparse.Namespace) -> dict[str, Any]:
        result = run_linear_probe(
            run_dir,
            batch_size=args.batch_size,
            knn_k=args.knn_k,
            C=args.C,
            combine=args.combine,
            max_train_items=args.max_train_items,
            device=args.device,
            split=args.split,
        )
        print(format_table(result))
        return result
