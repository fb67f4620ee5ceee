"""The ``few-shot-staging`` protocol (M3G Table 3 / Brüsch et al. 2023) as pure maths on features.

For every ``s`` in ``shots`` and every seed, ``s`` windows per class are drawn from the classifier's
training windows (class-balanced; capped by what exists, the counts drawn are reported), a classifier
(standardized logistic regression, or the papers' channel-combination classifier) is fitted, its C /
learning rate chosen on validation windows by balanced accuracy when a grid is given, and every test
window is scored: balanced accuracy and Cohen's kappa (headline), accuracy, macro-F1, per-class F1.
The same draws serve every feature set (row), so rows can be compared fit by fit
(:func:`paired_differences`). Fits are pooled over folds, seeds and pretraining runs by
:func:`pool_rows` / :func:`pool_results`.

No run folders, adapters or encoders here: the sleep-staging evaluator (``eval/sleep_staging.py``)
extracts the features and calls :func:`few_shot_staging` through the protocol registry.
"""

from __future__ import annotations

import warnings
from collections import Counter
from typing import Any, Literal

import numpy as np
from sklearn.metrics import accuracy_score, balanced_accuracy_score, cohen_kappa_score, confusion_matrix, f1_score
from threadpoolctl import threadpool_limits

from ...data.eeg.stages import STAGES
from . import PROTOCOLS
from .probe import fit_linear_classifier, mean_std
from .stats import paired_summary, unit_means

METRICS = ("balanced_accuracy", "kappa", "accuracy", "macro_f1")
"""Headline first: balanced accuracy and kappa do not reward the class prior."""

C_GRID = (0.01, 0.1, 1.0, 10.0)
"""Logistic-regression C values tuned on validation subjects (every row alike)."""

LR_GRID = (1e-3, 1e-2)
"""Learning rates of the paper classifier tuned on validation subjects (every row alike)."""

VALIDATION_FRACTION = 0.2
"""Share of the classifier-training subjects held out as validation subjects (at least one)."""

VALIDATION_PER_CLASS = 100
"""Windows per class of the (class-balanced) validation set drawn from the validation subjects."""

TIME_BINS = 4
"""The paper classifier pools encoder outputs into this many time bins."""

COMBINED_ROW = "bandpower+trained"
"""Row of the band-power features concatenated with the trained encoder's (per window, or per
channel for the paper classifier)."""


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


def shot_draw(y_train: np.ndarray, shots: int, seed: int) -> tuple[np.ndarray, dict[str, int]]:
    """The training windows :func:`few_shot_protocol` fits on for ``shots`` per class and ``seed``:
    sorted indices into ``y_train (N,)`` and the count drawn per class. Only these windows need features."""
    return balanced_sample(y_train, shots, np.random.default_rng([seed, shots]))


def staging_metrics(y_true: np.ndarray, y_pred: np.ndarray) -> dict[str, Any]:
    """Accuracy, balanced accuracy, macro-F1, Cohen's kappa and per-class F1 (classes in the test set)."""
    present = sorted(set(np.unique(y_true).tolist()))
    per_class = f1_score(y_true, y_pred, labels=present, average=None, zero_division=0)
    with warnings.catch_warnings():  # predicted classes absent from the test set: expected, not news
        warnings.filterwarnings("ignore", message="y_pred contains classes not in y_true")
        balanced = balanced_accuracy_score(y_true, y_pred)
    return {
        "accuracy": float(accuracy_score(y_true, y_pred)),
        "balanced_accuracy": float(balanced),
        "macro_f1": float(f1_score(y_true, y_pred, labels=present, average="macro", zero_division=0)),
        "kappa": float(cohen_kappa_score(y_true, y_pred)),
        "per_class_f1": {STAGES[c]: float(f) for c, f in zip(present, per_class)},
    }


def stage_mask(labels: np.ndarray, stages: list[str] | None) -> np.ndarray:
    """Boolean ``(N,)``: the windows of ``labels (N,)`` whose stage is in ``stages`` (all when ``None``).
    ``ValueError`` naming an unknown stage."""
    if stages is None:
        return np.ones(labels.shape, dtype=bool)
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        raise ValueError(f"--stages: unknown stage(s) {unknown}; expected some of {list(STAGES)}")
    return np.isin(labels, [STAGES.index(s) for s in stages])


def summarize_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-run metric dicts (one per fold x seed, possibly pooled over pretraining runs) ->
    ``{metric: {mean, std}, per_class_f1: {stage: {mean, std}}, n_runs}``."""
    summary: dict[str, Any] = {m: mean_std([r[m] for r in runs]) for m in METRICS}
    classes = sorted({c for r in runs for c in r["per_class_f1"]}, key=STAGES.index)
    summary["per_class_f1"] = {c: mean_std([r["per_class_f1"].get(c, 0.0) for r in runs]) for c in classes}
    summary["n_runs"] = len(runs)
    return summary


def few_shot_protocol(
    features: dict[str, dict[str, np.ndarray]],
    y_train: np.ndarray,
    y_test: np.ndarray,
    shots: tuple[int, ...],
    seeds: int,
    C: float | None = 1.0,
    *,
    y_val: np.ndarray | None = None,
    classifier: Literal["logreg", "paper"] = "logreg",
    lr: float | None = None,
    test_subjects: np.ndarray | None = None,
) -> tuple[dict[str, dict[str, Any]], dict[str, list[dict[str, int]]], dict[str, np.ndarray]]:
    """Fit/score a classifier per feature set, ``s`` in ``shots`` and seed (same draws for all sets).

    ``features``: name -> {"train": (N_tr, ...), "test": (N_te, ...)[, "val": (N_va, ...)]}
    (2-D for ``logreg``, ``(N, C, F)`` for ``paper``). ``C=None`` (``lr=None`` for ``paper``)
    tunes it on the validation windows (``y_val``, a class-balanced draw of up to
    ``VALIDATION_PER_CLASS`` per class and seed) by balanced accuracy, for every row alike.
    Returns results ``[name][str(s)]`` = :func:`summarize_runs` plus the per-seed ``runs`` (each
    with the ``hyperparameter`` used), the windows drawn per class for every seed
    (``[str(s)][seed]``), and the test predictions of every set at the largest ``s``, seed 0.
    (:func:`few_shot_staging`, the registered protocol, also returns confusion counts.)
    """
    out = few_shot_staging(
        features,
        y_train,
        y_test,
        shots,
        seeds,
        C,
        y_val=y_val,
        classifier=classifier,
        lr=lr,
        test_subjects=test_subjects,
    )
    return out["results"], out["drawn_per_class"], out["predictions"]


@PROTOCOLS.register("few-shot-staging")
def few_shot_staging(
    features: dict[str, dict[str, np.ndarray]],
    y_train: np.ndarray,
    y_test: np.ndarray,
    shots: tuple[int, ...],
    seeds: int,
    C: float | None = 1.0,
    *,
    y_val: np.ndarray | None = None,
    classifier: Literal["logreg", "paper"] = "logreg",
    lr: float | None = None,
    test_subjects: np.ndarray | None = None,
) -> dict[str, Any]:
    """The ``few-shot-staging`` protocol: :func:`few_shot_protocol`'s fits as one dict.

    ``test_subjects`` ``(N_te,)``: the subject (or excerpt) of every test window; every fit then also holds
    ``per_subject``: ``{subject: balanced accuracy on that subject's windows}`` (the unit of
    :func:`paired_differences`).

    Returns ``results`` and ``drawn_per_class`` (JSON-ready, as :func:`few_shot_protocol`),
    ``confusion``: ``[name]`` = true x predicted counts ``(5, 5)`` (rows and columns in ``STAGES``
    order, as nested lists) summed over the seeds at the largest ``s``, and ``predictions``: every
    set's test predictions ``(N_te,)`` at the largest ``s``, seed 0 (an array, for plots).
    """
    with threadpool_limits(1):  # small BLAS problems: multi-threading only oversubscribes (measured 60x slower)
        return _few_shot_staging(features, y_train, y_test, shots, seeds, C, y_val, classifier, lr, test_subjects)


def _few_shot_staging(
    features: dict[str, dict[str, np.ndarray]],
    y_train: np.ndarray,
    y_test: np.ndarray,
    shots: tuple[int, ...],
    seeds: int,
    C: float | None,
    y_val: np.ndarray | None,
    classifier: Literal["logreg", "paper"],
    lr: float | None,
    test_subjects: np.ndarray | None,
) -> dict[str, Any]:
    if test_subjects is not None and np.shape(test_subjects) != np.shape(y_test):
        raise ValueError(
            f"sleep staging: test_subjects {np.shape(test_subjects)} does not match the test labels {np.shape(y_test)}"
        )
    grid = ((C,) if C is not None else C_GRID) if classifier == "logreg" else ((lr,) if lr is not None else LR_GRID)
    if (len(grid) > 1 or classifier == "paper") and (y_val is None or y_val.size == 0):
        raise ValueError("sleep staging: tuning C / lr and the paper classifier need validation windows")
    results: dict[str, dict[str, Any]] = {name: {} for name in features}
    drawn_per_shot: dict[str, list[dict[str, int]]] = {}
    predictions: dict[str, np.ndarray] = {}
    confusion = {name: np.zeros((len(STAGES), len(STAGES)), dtype=np.int64) for name in features}
    # the logistic fits of every row by (drawn windows, C): a draw capped for every class is the same for every seed
    # (e.g. s=1000 on a few nights), and lbfgs ignores the seed, so such fits are made once and reused
    fitted: dict[str, dict[tuple[bytes, float], Any]] | None = (
        {name: {} for name in features} if classifier == "logreg" else None
    )
    for s in shots:
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in features}
        drawn_per_shot[str(s)] = []
        for seed in range(seeds):
            index, drawn = shot_draw(y_train, s, seed)
            drawn_per_shot[str(s)].append(drawn)
            val_index = (
                balanced_sample(y_val, VALIDATION_PER_CLASS, np.random.default_rng([seed, s, 7]))[0]
                if y_val is not None and y_val.size
                else None
            )
            for name, split_feats in features.items():
                predicted, chosen = _fit_predict(
                    classifier,
                    grid,
                    split_feats,
                    index,
                    y_train,
                    val_index,
                    y_val,
                    seed,
                    None if fitted is None else fitted[name],
                )
                fit = {**staging_metrics(y_test, predicted), "hyperparameter": chosen}
                if test_subjects is not None:
                    fit["per_subject"] = per_subject_balanced_accuracy(y_test, predicted, test_subjects)
                runs[name].append(fit)
                if s == max(shots):
                    confusion[name] += confusion_matrix(y_test, predicted, labels=list(range(len(STAGES))))
                    if seed == 0:
                        predictions[name] = predicted
        for name, seed_runs in runs.items():
            results[name][str(s)] = {**summarize_runs(seed_runs), "runs": seed_runs}
    return {
        "results": results,
        "drawn_per_class": drawn_per_shot,
        "predictions": predictions,
        "confusion": {name: counts.tolist() for name, counts in confusion.items()},
    }


def per_subject_balanced_accuracy(y_true: np.ndarray, y_pred: np.ndarray, subjects: np.ndarray) -> dict[str, float]:
    """``{subject: balanced accuracy of its windows}`` for labels / predictions / subjects ``(N,)`` (a
    subject's balanced accuracy averages the recall of the stages it has)."""
    out: dict[str, float] = {}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="y_pred contains classes not in y_true")
        for subject in np.unique(subjects):
            mask = subjects == subject
            out[str(subject)] = float(balanced_accuracy_score(y_true[mask], y_pred[mask]))
    return out


def row_normalized(counts: np.ndarray | list[list[int]]) -> np.ndarray:
    """Confusion counts ``(c, c)`` (true x predicted) -> each row divided by its total (a row
    without windows stays 0): the share of each true stage given each predicted stage."""
    counts = np.asarray(counts, dtype=np.float64)
    return counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)


def _fit_predict(
    classifier: str,
    grid: tuple[float, ...],
    feats: dict[str, np.ndarray],
    index: np.ndarray,
    y_train: np.ndarray,
    val_index: np.ndarray | None,
    y_val: np.ndarray | None,
    seed: int,
    fitted: dict[tuple[bytes, float], Any] | None = None,
) -> tuple[np.ndarray, float]:
    """Fit one classifier per grid value on the drawn windows; the best on the validation windows
    (balanced accuracy; the only one without tuning) predicts the test windows.

    ``fitted`` (logreg only: its lbfgs solver does not use the seed): the classifiers fitted so far for this
    row, by (drawn indices, grid value); a draw fitted before (another seed drew the same windows) is reused."""
    from .channel_classifier import fit_channel_classifier

    best: tuple[float, Any, float] | None = None
    x_val = feats["val"][val_index] if val_index is not None else None
    yv = y_val[val_index] if val_index is not None and y_val is not None else None
    for value in grid:
        if classifier == "paper":
            model = fit_channel_classifier(feats["train"][index], y_train[index], x_val, yv, lr=value, seed=seed)
        elif fitted is not None and (index.tobytes(), value) in fitted:
            model = fitted[index.tobytes(), value]
        else:
            model = fit_linear_classifier(feats["train"][index], y_train[index], C=value, seed=seed)
            if fitted is not None:
                fitted[index.tobytes(), value] = model
        if len(grid) == 1:
            best = (0.0, model, value)
            break
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="y_pred contains classes not in y_true")
            score = balanced_accuracy_score(yv, model.predict(np.nan_to_num(x_val)))
        if best is None or score > best[0]:
            best = (score, model, value)
    assert best is not None
    return best[1].predict(np.nan_to_num(feats["test"])), float(best[2])


def capped_shots(drawn: dict[str, list[dict[str, int]]]) -> list[str]:
    """The ``s`` columns where some class had fewer than ``s`` windows to draw (in any fold/seed)."""
    return [s for s, per_seed in drawn.items() if any(n < int(s) for d in per_seed for n in d.values())]


def missing_class_note(drawn: dict[str, list[dict[str, int]]], test_labels: list[np.ndarray]) -> str | None:
    """One line naming the classes present in a test set but absent from the classifier's training
    windows (their F1 is 0), or None."""
    present = {STAGES[int(c)] for y in test_labels for c in np.unique(y)}
    fits, missing = 0, Counter()
    for per_seed in drawn.values():
        for d in per_seed:
            fits += 1
            missing.update(sorted(present - set(d)))
    if not missing:
        return None
    classes = ", ".join(f"{c} ({n} of {fits} fits)" for c, n in missing.items())
    return f"training subjects have no windows of {classes}; those fits never predict them (F1 0)"


def combined_features(bandpower: np.ndarray, trained: np.ndarray) -> np.ndarray:
    """Band powers next to the trained encoder's features: ``(N, a) + (N, b) -> (N, a + b)`` (logreg),
    or per channel ``(N, C, a) + (N, C, b) -> (N, C, a + b)`` (paper classifier). A stacked run has
    fewer encoder views than channels: its per-channel rows cannot be paired (ValueError)."""
    if bandpower.shape[:-1] != trained.shape[:-1]:
        raise ValueError(
            f"{COMBINED_ROW}: band powers {bandpower.shape} and encoder features {trained.shape} "
            "do not pair up per channel; pass --no-combined"
        )
    return np.concatenate([bandpower, trained], axis=-1).astype(np.float32)


def paired_differences(
    table: dict[str, dict[str, Any]], row: str = "trained", metric: str = "balanced_accuracy"
) -> dict[str, dict[str, dict[str, Any]]]:
    """``row`` minus every other row by test subject: ``{other: {str(s): eval.protocols.stats.paired_summary}}``.

    The fits of both rows line up (same fold, seed, draw, pretraining run); within each fit the
    difference is taken per test subject (``per_subject`` balanced accuracy), the fits that share a
    subject (draws, pretraining runs) are averaged per subject first, and the mean over subjects gets its
    bootstrap CI; ``ahead`` counts the subjects where ``row`` is higher, ``n`` the subjects. Fits without
    ``per_subject`` (results of an older version) give no paired cells. Only ``balanced_accuracy`` is kept
    per subject."""
    if row not in table or metric != "balanced_accuracy":
        return {}
    paired: dict[str, dict[str, dict[str, Any]]] = {}
    for other, per_shot in table.items():
        if other == row:
            continue
        cells: dict[str, dict[str, Any]] = {}
        for s, cell in per_shot.items():
            mine, theirs = table[row][s]["runs"], cell["runs"]
            if len(mine) != len(theirs):
                raise ValueError(f"paired differences: {row} has {len(mine)} fits at s={s}, {other} {len(theirs)}")
            if not mine or not all("per_subject" in fit for fit in [*mine, *theirs]):
                continue
            per_subject = unit_means(
                (subject, score - b["per_subject"][subject])
                for a, b in zip(mine, theirs)
                for subject, score in a["per_subject"].items()
            )
            cells[s] = paired_summary(per_subject)
        if cells:
            paired[other] = cells
    return paired


def pool_rows(parts: list[dict[str, Any]], names: list[str], shots: Any) -> dict[str, dict[str, Any]]:
    """``[{row: {str(s): {"runs": [...]}}}]`` (folds, or whole runs) -> one table whose every cell
    summarizes all the parts' fits (:func:`summarize_runs`) and keeps them in ``runs``."""
    table: dict[str, dict[str, Any]] = {}
    for name in names:
        table[name] = {}
        for s in shots:
            runs = [fit for part in parts for fit in part[name][str(s)]["runs"]]
            table[name][str(s)] = {**summarize_runs(runs), "runs": runs}
    return table


def pool_results(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Pool the per-fit metrics of several runs' results of one protocol (e.g. pretraining seeds, or
    pretraining folds) into one result: mean +- std over pretraining runs x folds x seeds."""
    if len({(r["protocol"], r["dataset"], tuple(r["shots"])) for r in results}) != 1:
        raise ValueError(
            "--pool-runs: the runs' results differ in protocol, dataset or shots: "
            + ", ".join(f"{r['run']} ({r['protocol']}, {r['dataset']}, {r['shots']})" for r in results)
        )
    pooled = dict(results[0])
    names = [name for name in results[0]["results"] if all(name in r["results"] for r in results)]
    pooled["results"] = pool_rows([r["results"] for r in results], names, results[0]["shots"])
    pooled["paired"] = paired_differences(pooled["results"])
    pooled["pooled_runs"] = [r["run"] for r in results]
    pooled["drawn_per_class"] = {
        s: [d for r in results for d in r["drawn_per_class"][s]] for s in results[0]["drawn_per_class"]
    }
    pooled["capped_shots"] = capped_shots(pooled["drawn_per_class"])
    pooled["notes"] = sorted({note for r in results for note in r["notes"]})
    pooled["windows"] = {
        "train": sum(r["windows"]["train"] for r in results),
        "test": sum(r["windows"]["test"] for r in results),
    }
    return pooled


def classifier_description(classifier: str, C: float | None, lr: float | None) -> str:
    """What the table's classifier was, in one phrase (printed in the header, stored in the JSON)."""
    if classifier == "paper":
        rate = f"lr {lr}" if lr is not None else f"lr tuned on validation subjects over {list(LR_GRID)}"
        return (
            f"paper: learned channel combination + linear classifier on {TIME_BINS} time bins, AdamW "
            f"({rate}), early stopping on validation subjects"
        )
    strength = f"C={C}" if C is not None else f"C tuned on validation subjects over {list(C_GRID)}"
    return f"standardized logistic regression ({strength})"


def split_validation(subjects: list[str], seed: int) -> tuple[list[str], list[str]]:
    """Classifier-training subjects -> (fit subjects, validation subjects): ``VALIDATION_FRACTION``
    of them (at least one) drawn with ``seed``; ``ValueError`` when fewer than two subjects."""
    if len(subjects) < 2:
        raise ValueError(
            f"sleep staging: tuning C / lr or the paper classifier needs >= 2 classifier-training "
            f"subjects (one for validation), got {list(subjects)}; pass --C (logreg) instead"
        )
    order = np.random.default_rng(seed).permutation(len(subjects))
    n_val = min(len(subjects) - 1, max(1, int(round(VALIDATION_FRACTION * len(subjects)))))
    val = sorted(subjects[i] for i in order[:n_val])
    return sorted(set(subjects) - set(val)), val


def warning_note(caught: list[warnings.WarningMessage]) -> str | None:
    """All warnings raised while fitting/scoring, summarized in one line (or None)."""
    if not caught:
        return None
    kinds = Counter(f"{w.category.__name__}: {str(w.message).splitlines()[0][:80]}" for w in caught)
    return f"{len(caught)} warnings while fitting: " + "; ".join(f"{n}x {k}" for k, n in kinds.most_common(3))
