"""The ``few-shot-staging`` protocol (M3G Table 3 / Brüsch et al. 2023) as pure maths on features.

For every ``s`` in ``shots`` and every seed, ``s`` windows per class are drawn from the classifier's
training windows (class-balanced; capped by what exists, the counts drawn are reported), a classifier
(standardized logistic regression, or the papers' channel-combination classifier) is fitted, its C /
learning rate (and the paper classifier's epochs) chosen by stratified cross-validation inside those same
drawn windows when a grid is given (``min(5, s)`` folds; fewer than 2 windows in a class: ``FIXED_C``), so
``s`` is every label the classifier ever sees; and every test window is scored: balanced accuracy and Cohen's kappa (headline), accuracy, macro-F1, per-class F1.
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
"""Logistic-regression C values, chosen by cross-validation inside the drawn windows (every row alike)."""

LR_GRID = (1e-3, 1e-2)
"""Learning rates of the paper classifier, chosen by cross-validation inside the drawn windows."""

INNER_FOLDS = 5
"""Stratified folds of the inner cross-validation: ``min(INNER_FOLDS, fewest windows of a drawn class)``."""

FIXED_C = 1.0
"""C used when a drawn class has fewer than 2 windows (no stratified split exists); printed once."""

FIXED_LR = 1e-3
"""The paper classifier's learning rate when no inner split exists (trained for ``FIXED_EPOCHS``)."""

FIXED_EPOCHS = 20
"""Epochs of the paper classifier when no inner split exists to stop early on."""

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
    classifier: Literal["logreg", "paper"] = "logreg",
    lr: float | None = None,
    test_subjects: np.ndarray | None = None,
) -> tuple[dict[str, dict[str, Any]], dict[str, list[dict[str, int]]], dict[str, np.ndarray]]:
    """Fit/score a classifier per feature set, ``s`` in ``shots`` and seed (same draws for all sets).

    ``features``: name -> {"train": (N_tr, ...), "test": (N_te, ...)} (2-D for ``logreg``, ``(N, C, F)``
    for ``paper``). ``C=None`` (``lr=None`` for ``paper``) chooses it by stratified cross-validation
    inside the drawn windows (:func:`select_by_inner_cv`) by balanced accuracy, for every row alike.
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
        return _few_shot_staging(features, y_train, y_test, shots, seeds, C, classifier, lr, test_subjects)


def _few_shot_staging(
    features: dict[str, dict[str, np.ndarray]],
    y_train: np.ndarray,
    y_test: np.ndarray,
    shots: tuple[int, ...],
    seeds: int,
    C: float | None,
    classifier: Literal["logreg", "paper"],
    lr: float | None,
    test_subjects: np.ndarray | None,
) -> dict[str, Any]:
    if test_subjects is not None and np.shape(test_subjects) != np.shape(y_test):
        raise ValueError(
            f"sleep staging: test_subjects {np.shape(test_subjects)} does not match the test labels {np.shape(y_test)}"
        )
    grid = ((C,) if C is not None else C_GRID) if classifier == "logreg" else ((lr,) if lr is not None else LR_GRID)
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
            for name, split_feats in features.items():
                predicted, chosen, source = _fit_predict(
                    classifier, grid, split_feats, index, y_train, seed, None if fitted is None else fitted[name]
                )
                fit = {**staging_metrics(y_test, predicted), "hyperparameter": chosen, "chosen_by": source}
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
    seed: int,
    fitted: dict[tuple[bytes, Any], Any] | None = None,
) -> tuple[np.ndarray, float, str]:
    """Choose the grid value by :func:`select_by_inner_cv` on the drawn windows ``index``, fit on all of
    them and predict the test windows. Returns predictions ``(N_te,)``, the value and how it was chosen
    (``given``, ``inner-cv`` or ``fixed``).

    ``fitted`` (logreg only: its lbfgs solver does not use the seed): the choices and final classifiers made
    so far for this row, by (drawn indices, value); a draw seen before (another seed drew the same windows, as
    every seed does when each class is capped) reuses both."""
    from .channel_classifier import fit_channel_classifier

    x, y = feats["train"][index], y_train[index]
    key = (index.tobytes(), "choice")  # the choice for this draw (logreg: the same for every seed)
    if fitted is not None and key in fitted:
        value, epochs, source = fitted[key]
    else:
        value, epochs, source = select_by_inner_cv(classifier, grid, x, y, seed)
        if fitted is not None:
            fitted[key] = (value, epochs, source)
    if classifier == "paper":
        model = fit_channel_classifier(x, y, None, None, lr=value, seed=seed, epochs=epochs)
    elif fitted is not None and (index.tobytes(), value) in fitted:
        model = fitted[index.tobytes(), value]
    else:
        model = fit_linear_classifier(x, y, C=value, seed=seed)
        if fitted is not None:
            fitted[index.tobytes(), value] = model
    return model.predict(np.nan_to_num(feats["test"])), float(value), source


def inner_folds(y: np.ndarray) -> int:
    """Stratified folds available inside drawn labels ``y (n,)``: ``min(INNER_FOLDS, fewest per class)``."""
    return int(min(INNER_FOLDS, np.unique(y, return_counts=True)[1].min())) if y.size else 0


def select_by_inner_cv(
    classifier: str, grid: tuple[float, ...], x: np.ndarray, y: np.ndarray, seed: int
) -> tuple[float, int | None, str]:
    """The grid value (C, or the paper classifier's learning rate) with the best mean balanced accuracy
    over stratified folds of the drawn windows ``x (n, ...)`` / ``y (n,)`` only, and for ``paper`` the
    epochs to train (mean of the folds' early-stopping epochs). One given value: ``given``; a class with
    fewer than 2 windows: :data:`FIXED_C` / :data:`FIXED_LR` (``fixed``)."""
    from sklearn.model_selection import StratifiedKFold

    from .channel_classifier import fit_channel_classifier

    if len(grid) == 1 and classifier == "logreg":
        return grid[0], None, "given"
    folds = inner_folds(y)
    if folds < 2:
        return (FIXED_C, None, "fixed") if classifier == "logreg" else (grid[0], FIXED_EPOCHS, "fixed")
    # the folds depend on the drawn windows only: a draw capped for every class gets the same choice every seed
    splits = list(StratifiedKFold(folds, shuffle=True, random_state=0).split(np.zeros(len(y)), y))
    if classifier == "logreg":
        scores = np.mean([_c_path_scores(grid, x, y, train, held, seed) for train, held in splits], axis=0)
        return grid[int(np.argmax(scores))], None, "inner-cv"
    best: tuple[float, float, int] | None = None
    for value in grid:
        scores, epochs = [], []
        for train, held in splits:
            model = fit_channel_classifier(x[train], y[train], x[held], y[held], lr=value, seed=seed)
            epochs.append(model.epochs)
            scores.append(_balanced_accuracy(y[held], model.predict(np.nan_to_num(x[held]))))
        if best is None or float(np.mean(scores)) > best[0]:
            best = (float(np.mean(scores)), value, max(1, int(round(np.mean(epochs)))))
    assert best is not None
    return best[1], best[2], "given" if len(grid) == 1 else "inner-cv"


def _balanced_accuracy(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="y_pred contains classes not in y_true")
        return float(balanced_accuracy_score(y_true, y_pred))


def _c_path_scores(
    grid: tuple[float, ...], x: np.ndarray, y: np.ndarray, train: np.ndarray, held: np.ndarray, seed: int
) -> list[float]:
    """Balanced accuracy on the held-out fold of the standardized logistic regression at each C of ``grid``,
    fitted on ``train`` along the C path in ascending order, each fit warm-started from the previous one
    (the same optimum as a cold fit, in fewer lbfgs iterations). Returns the scores in ``grid`` order."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(np.nan_to_num(x[train]))
    fit_x, held_x = scaler.transform(np.nan_to_num(x[train])), scaler.transform(np.nan_to_num(x[held]))
    # tol 1e-3: the path only ranks the C values (measured: the same ranking as 1e-4, ~20 % fewer iterations)
    model = LogisticRegression(max_iter=1000, tol=1e-3, random_state=seed, warm_start=True)
    scores = {}
    for value in sorted(grid):
        model.set_params(C=value).fit(fit_x, y[train])
        scores[value] = _balanced_accuracy(y[held], model.predict(held_x))
    return [scores[value] for value in grid]


def fixed_hyperparameter_note(results: dict[str, dict[str, Any]]) -> str | None:
    """One line when some fit used the fixed C / learning rate (a drawn class had < 2 windows), else None."""
    fixed = sorted(
        {
            (s, r["hyperparameter"])
            for per_s in results.values()
            for s, cell in per_s.items()
            for r in cell["runs"]
            if r.get("chosen_by") == "fixed"
        }
    )
    if not fixed:
        return None
    shots = sorted({s for s, _ in fixed}, key=int)
    values = sorted({v for _, v in fixed})
    return (
        f"s = {', '.join(shots)}: a drawn class had fewer than 2 windows, so no inner cross-validation; "
        f"used the fixed value {', '.join(f'{v:g}' for v in values)} (C = {FIXED_C:g} for logistic regression)"
    )


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
    inner = f"stratified {INNER_FOLDS}-fold (at most s) cross-validation inside the s drawn windows"
    if classifier == "paper":
        rate = f"lr {lr}" if lr is not None else f"lr over {list(LR_GRID)} by {inner}"
        return (
            f"paper: learned channel combination + linear classifier on {TIME_BINS} time bins, AdamW "
            f"({rate}; epochs: the inner folds' early-stopping epochs)"
        )
    strength = f"C={C}" if C is not None else f"C over {list(C_GRID)} by {inner}"
    return f"standardized logistic regression ({strength})"


def warning_note(caught: list[warnings.WarningMessage]) -> str | None:
    """All warnings raised while fitting/scoring, summarized in one line (or None)."""
    if not caught:
        return None
    kinds = Counter(f"{w.category.__name__}: {str(w.message).splitlines()[0][:80]}" for w in caught)
    return f"{len(caught)} warnings while fitting: " + "; ".join(f"{n}x {k}" for k, n in kinds.most_common(3))
