"""``mvapp eval sleep-staging``: few-shot linear sleep staging on frozen per-channel EEG features.

Protocol (M3G Table 3 / Brüsch et al. 2023): subject-wise train/test split (the run's
``eeg_windows`` adapter, or another prepared cache via ``--cache``); per-channel encoder features
combined (concatenated in channel order, or averaged); for every ``s`` in ``--shots`` and every
seed, ``s`` windows per class are drawn from the training subjects (class-balanced; capped by what
exists, reported), a standardized logistic regression is fitted and scored on every test window.
Rows: trained encoder, random-init encoder (``init.safetensors``), relative band powers.
Outputs ``eval/sleep_staging.json``, ``plots/sleep_staging_confusion.png`` and
``plots/sleep_staging_hypnogram.png`` (true vs predicted, one test night).
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Literal

import numpy as np
from sklearn.metrics import accuracy_score, balanced_accuracy_score, cohen_kappa_score, confusion_matrix, f1_score
from threadpoolctl import threadpool_limits
from torch.utils.data import DataLoader

from ..data.eeg.stages import STAGES
from ..argtypes import open_fraction, positive_float, positive_int
from ..train.run_io import atomic_write_json, load_run
from . import EVALUATORS
from .bandpower import bandpower_features
from .features import combine_views, extract_features
from .probe import fit_linear_classifier, mean_std

DEFAULT_SHOTS = (10, 50, 100, 1000)
ENCODER_WEIGHTS = {"trained": "final", "random_init": "init"}
METRICS = ("accuracy", "balanced_accuracy", "macro_f1", "kappa")


def balanced_sample(labels: np.ndarray, per_class: int, rng: np.random.Generator) -> tuple[np.ndarray, dict[str, int]]:
    """Up to ``per_class`` indices of every class present in ``labels (N,)`` (without replacement).

    Returns the sorted indices and the number actually drawn per class name (capped by availability).
    """
    chosen, drawn = [], {}
    for cls in np.unique(labels[labels >= 0]):
        pool = np.flatnonzero(labels == cls)
        take = min(per_class, pool.size)
        chosen.append(rng.choice(pool, size=take, replace=False))
        drawn[STAGES[int(cls)]] = int(take)
    return np.sort(np.concatenate(chosen)) if chosen else np.zeros(0, dtype=np.int64), drawn


def staging_metrics(y_true: np.ndarray, y_pred: np.ndarray) -> dict[str, Any]:
    """Accuracy, balanced accuracy, macro-F1, Cohen's kappa and per-class F1 (classes in the test set)."""
    present = sorted(set(np.unique(y_true).tolist()))
    per_class = f1_score(y_true, y_pred, labels=present, average=None, zero_division=0)
    return {
        "accuracy": float(accuracy_score(y_true, y_pred)),
        "balanced_accuracy": float(balanced_accuracy_score(y_true, y_pred)),
        "macro_f1": float(f1_score(y_true, y_pred, labels=present, average="macro", zero_division=0)),
        "kappa": float(cohen_kappa_score(y_true, y_pred)),
        "per_class_f1": {STAGES[c]: float(f) for c, f in zip(present, per_class)},
    }


def _windows(dataset: Any, batch_size: int) -> np.ndarray:
    """All raw windows of a split ``(N, C, T)`` (for the band-power baseline)."""
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False)
    return np.concatenate([batch["x"].numpy() for batch in loader])


def few_shot_protocol(
    features: dict[str, dict[str, np.ndarray]], y_train: np.ndarray, y_test: np.ndarray,
    shots: tuple[int, ...], seeds: int, C: float = 1.0,
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, int]], dict[str, np.ndarray]]:
    """Fit/score a linear classifier per feature set, ``s`` in ``shots`` and seed (same draws for all sets).

    ``features``: name -> {"train": (N_tr, F), "test": (N_te, F)}. Returns results
    ``[name][str(s)][metric] = {mean, std}`` (+ ``per_class_f1``), the windows drawn per class
    per ``s``, and the test predictions of every feature set at the largest ``s``, seed 0.
    """
    with threadpool_limits(1):  # small BLAS problems: multi-threading only oversubscribes (measured 60x slower)
        return _few_shot_protocol(features, y_train, y_test, shots, seeds, C)


def _few_shot_protocol(
    features: dict[str, dict[str, np.ndarray]], y_train: np.ndarray, y_test: np.ndarray,
    shots: tuple[int, ...], seeds: int, C: float,
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, int]], dict[str, np.ndarray]]:
    results: dict[str, dict[str, Any]] = {name: {} for name in features}
    drawn_per_shot: dict[str, dict[str, int]] = {}
    predictions: dict[str, np.ndarray] = {}
    for s in shots:
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in features}
        for seed in range(seeds):
            index, drawn = balanced_sample(y_train, s, np.random.default_rng([seed, s]))
            drawn_per_shot[str(s)] = drawn
            for name, split_feats in features.items():
                clf = fit_linear_classifier(split_feats["train"][index], y_train[index], C=C, seed=seed)
                predicted = clf.predict(np.nan_to_num(split_feats["test"]))
                runs[name].append(staging_metrics(y_test, predicted))
                if seed == 0 and s == max(shots):
                    predictions[name] = predicted
        for name, seed_runs in runs.items():
            summary: dict[str, Any] = {m: mean_std([r[m] for r in seed_runs]) for m in METRICS}
            classes = sorted({c for r in seed_runs for c in r["per_class_f1"]}, key=STAGES.index)
            summary["per_class_f1"] = {c: mean_std([r["per_class_f1"].get(c, 0.0) for r in seed_runs]) for c in classes}
            results[name][str(s)] = summary
    return results, drawn_per_shot, predictions


def run_sleep_staging(
    run_dir: str | Path, *, cache: str | None = None, channels: list[str] | None = None,
    test_fraction: float | None = None, shots: tuple[int, ...] = DEFAULT_SHOTS, seeds: int = 5,
    combine: Literal["concat", "mean"] = "concat", C: float = 1.0, batch_size: int = 256,
    baselines: bool = True, device: str = "cpu", progress: bool = True,
) -> dict[str, Any]:
    """Run the protocol above on ``run_dir``; write and return the result dict."""
    from ..data.adapters import build_adapter
    from ..data.eeg.views import ChannelViews

    run_dir = Path(run_dir)
    cfg, _ = load_run(run_dir, "init")
    if cfg.data.adapter != "eeg_windows" and cache is None:
        raise ValueError(f"run {run_dir} was trained on '{cfg.data.adapter}' data; pass --cache <prepared EEG cache>")
    options = dict(cfg.data.options) if cfg.data.adapter == "eeg_windows" else {}
    if cache is not None:
        options = {k: v for k, v in options.items() if k not in ("cache", "channels", "test_subjects")}
        options["cache"] = cache
    if channels is not None:
        options["channels"] = channels
    if test_fraction is not None:
        options["test_fraction"] = test_fraction
        options.pop("test_subjects", None)
    adapter = build_adapter("eeg_windows", options)
    if "test" not in adapter.splits:
        raise ValueError("sleep staging needs a subject-wise test split; set a test_fraction > 0")
    policy = ChannelViews(len(adapter.channel_names), ChannelViews.Options(), adapter)
    overlap = set(adapter.split_subjects["train"]) & set(adapter.split_subjects["test"])
    if overlap:  # the adapter guarantees disjoint splits; never score on training subjects
        raise RuntimeError(f"subjects in both the train and test split: {sorted(overlap)}")

    features: dict[str, dict[str, np.ndarray]] = {}
    labels: dict[str, np.ndarray] = {}
    meta_test: dict[str, list[Any]] = {}
    for name, weights in ENCODER_WEIGHTS.items():
        _, model = load_run(run_dir, weights)
        features[name] = {}
        for split in ("train", "test"):
            feats, y, meta = extract_features(model, adapter, policy, split, batch_size, device, progress)
            features[name][split] = combine_views(feats, combine)
            labels[split] = y
            if split == "test":
                meta_test = meta
    if baselines:
        features["bandpower"] = {split: bandpower_features(_windows(adapter.split(split), batch_size), adapter.sfreq)
                                 for split in ("train", "test")}

    results, drawn_per_shot, predictions = few_shot_protocol(features, labels["train"], labels["test"], shots, seeds, C)
    plots = _plots(run_dir, labels["test"], predictions["trained"], meta_test, max(shots))
    result = {
        "evaluator": "sleep-staging",
        "run": str(run_dir),
        "loss": cfg.loss.name,
        "cache": str(adapter.cache_dir),
        "channels": adapter.channel_names,
        "combine": combine,
        "subjects": adapter.split_subjects,
        "windows": {split: int(labels[split].size) for split in ("train", "test")},
        "test_windows_per_stage": {STAGES[c]: int((labels["test"] == c).sum()) for c in range(len(STAGES))},
        "shots": list(shots),
        "drawn_per_class": drawn_per_shot,
        "seeds": seeds,
        "C": C,
        "results": results,
        "plots": plots,
    }
    atomic_write_json(run_dir / "eval" / "sleep_staging.json", result)
    return result


def _plots(run_dir: Path, y_true: np.ndarray, y_pred: np.ndarray, meta: dict[str, list[Any]], shots: int) -> dict[str, str]:
    """Confusion matrix (row-normalized) and a true-vs-predicted hypnogram of the longest test night."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = run_dir / "plots"
    out.mkdir(parents=True, exist_ok=True)
    cm = confusion_matrix(y_true, y_pred, labels=list(range(len(STAGES))))
    normalized = cm / np.maximum(cm.sum(axis=1, keepdims=True), 1)
    fig, ax = plt.subplots(figsize=(4.5, 4))
    ax.imshow(normalized, cmap="Blues", vmin=0, vmax=1)
    for i in range(len(STAGES)):
        for j in range(len(STAGES)):
            ax.text(j, i, f"{cm[i, j]}", ha="center", va="center", color="black" if normalized[i, j] < 0.6 else "white")
    ax.set(xticks=range(len(STAGES)), yticks=range(len(STAGES)), xticklabels=STAGES, yticklabels=STAGES,
           xlabel="predicted", ylabel="true", title=f"trained encoder, s={shots}, seed 0")
    fig.tight_layout()
    confusion_path = out / "sleep_staging_confusion.png"
    fig.savefig(confusion_path, dpi=110)
    plt.close(fig)

    recordings = np.asarray(meta["recording"])
    names, counts = np.unique(recordings, return_counts=True)
    night = names[np.argmax(counts)]
    mask = recordings == night
    hours = np.asarray(meta["window"])[mask] * 30.0 / 3600.0
    depth = np.array([0, 2, 3, 4, 1])  # plot order top->bottom: W, REM, N1, N2, N3
    fig, axes = plt.subplots(2, 1, figsize=(9, 3.6), sharex=True)
    for ax, stages, title in ((axes[0], y_true[mask], "true"), (axes[1], y_pred[mask], "predicted")):
        ax.step(hours, depth[stages], where="post", lw=0.9)
        ax.set(yticks=range(5), yticklabels=["W", "REM", "N1", "N2", "N3"], ylim=(4.5, -0.5), ylabel=title)
    axes[0].set_title(f"{night}: trained encoder, s={shots}, seed 0")
    axes[1].set_xlabel("hours since recording start")
    fig.tight_layout()
    hypnogram_path = out / "sleep_staging_hypnogram.png"
    fig.savefig(hypnogram_path, dpi=110)
    plt.close(fig)
    return {"confusion": str(confusion_path), "hypnogram": str(hypnogram_path)}


def format_table(result: dict[str, Any]) -> str:
    """Accuracy (mean +- std over seeds) per s, then all metrics at the largest s."""
    shots = [str(s) for s in result["shots"]]
    lines = [f"sleep staging ({len(result['subjects']['test'])} test subjects, {result['windows']['test']} windows, "
             f"{result['seeds']} seeds): accuracy",
             f"{'features':<12}" + "".join(f"{'s=' + s:>17}" for s in shots)]
    for name, per_shot in result["results"].items():
        lines.append(f"{name:<12}" + "".join(
            f"{per_shot[s]['accuracy']['mean']:>10.3f} ± {per_shot[s]['accuracy']['std']:.3f}" for s in shots))
    top = shots[-1]
    lines += ["", f"at s={top} (drawn per class: {result['drawn_per_class'].get(top)})",
              f"{'features':<12}" + "".join(f"{m:>20}" for m in METRICS)]
    for name, per_shot in result["results"].items():
        lines.append(f"{name:<12}" + "".join(
            f"{per_shot[top][m]['mean']:>13.3f} ± {per_shot[top][m]['std']:.3f}" for m in METRICS))
    return "\n".join(lines)


@EVALUATORS.register("sleep-staging")
class SleepStaging:
    """Few-shot sleep staging on frozen per-channel EEG features (trained vs random-init vs band power)."""

    kind = "sleep_staging"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--cache", default=None, help="evaluate on another prepared cache (e.g. Sleep-EDF)")
        parser.add_argument("--channels", nargs="+", default=None, help="channels of the cache to use (default: all)")
        parser.add_argument("--test-fraction", type=open_fraction, default=None, help="share of subjects held out")
        parser.add_argument("--shots", type=positive_int, nargs="+", default=list(DEFAULT_SHOTS), help="windows per class")
        parser.add_argument("--seeds", type=positive_int, default=5, help="repetitions (different few-shot draws)")
        parser.add_argument("--combine", choices=["concat", "mean"], default="concat", help="per-channel features")
        parser.add_argument("--C", type=positive_float, default=1.0, help="inverse L2 strength of the logistic regression")
        parser.add_argument("--batch-size", type=positive_int, default=256)
        parser.add_argument("--no-baselines", action="store_true", help="skip the band-power baseline")
        parser.add_argument("--device", default="cpu")

    def run(self, run_dir: str | Path, args: argparse.Namespace) -> dict[str, Any]:
        if any(s < 1 for s in args.shots) or args.seeds < 1:
            raise ValueError(f"--shots and --seeds must be positive (got {args.shots}, {args.seeds})")
        result = run_sleep_staging(
            run_dir, cache=args.cache, channels=args.channels, test_fraction=args.test_fraction,
            shots=tuple(args.shots), seeds=args.seeds, combine=args.combine, C=args.C,
            batch_size=args.batch_size, baselines=not args.no_baselines, device=args.device,
        )
        print(format_table(result))
        print(f"plots: {', '.join(result['plots'].values())}")
        return result
