"""``mvapp eval sleep-staging``: few-shot linear sleep staging on frozen per-channel EEG features.

Protocol (M3G Table 3 / Brüsch et al. 2023):

- **in-domain** (default): the run's own subject split. The classifier is trained on windows of the
  pretraining subjects and scored on the held-out subjects; ``--folds F`` splits the held-out
  subjects into F test folds (the classifier then also trains on the other folds). An option that
  would put a pretraining subject into a test set is refused with the subject names; any test
  recording whose source file has the sha256 of a pretraining recording's (the same night under
  another name, in this or another cache) is refused naming both files.
- **cross-dataset** (``--cache`` of another dataset, e.g. PhysioNet-2018-pretrained -> Sleep-EDF):
  the other cache's subjects are split on their own (``--test-fraction``, default 20 % as Brüsch
  et al., or ``--folds F``; a subject that shares a pretraining subject's name but not its
  recordings is another person and is accepted); results go to ``eval/sleep_staging_<dataset>.json`` and never
  overwrite the in-domain ``eval/sleep_staging.json``.

Per-channel encoder features are combined (concatenated in channel order, or averaged); for every
``s`` in ``--shots`` and every seed, ``s`` windows per class are drawn from the classifier's
training subjects (class-balanced; capped by what exists: the counts drawn for every fold and seed
are reported and a capped column is flagged), a standardized logistic regression is fitted and
scored on every test window. Rows: trained encoder, random-init encoder (``init.safetensors``), the supervised ceiling
(``supervised_ceiling``: the same encoder architecture trained end to end on the pretraining nights' stage
labels, :mod:`multiview_app.eval.supervised_ceiling`, when ``<run>/ceiling`` holds it),
relative band powers (5 bands, the weak baseline), the strong hand-crafted features of
:mod:`multiview_app.eval.handcrafted` (``handcrafted``), and band powers concatenated with the trained
encoder's features (``bandpower+trained``: does SSL add to the hand-made features?). Metrics: balanced accuracy and Cohen's kappa (headline), accuracy, macro-F1,
per-class F1, as mean +- std over folds x seeds. Paired differences (trained minus every other row) are taken
per test subject, the fits sharing a subject averaged first, with a 95 % bootstrap CI over subjects
(:mod:`multiview_app.eval.protocols.stats`).

The module plans (:mod:`.staging_plan`), runs (:func:`staging_windows`, :func:`fit_subject_folds`) and reports
(:func:`write_result`, :func:`format_table`).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch.utils.data import DataLoader

from ..argtypes import Option, add_options, open_fraction, positive_float, positive_int, renamed_option
from ..data.eeg.stages import STAGES
from ..train.input_contract import check_run_input, format_input_differences
from ..train.run_io import atomic_write_json, load_run
from . import Evaluator, register_evaluator
from .bandpower import bandpower_features, bandpower_time_bins
from .features import window_features
from .handcrafted import handcrafted_per_channel, handcrafted_row
from .protocols import get_protocol, stats
from .protocols.staging import (
    C_GRID,
    COMBINED_ROW,
    LR_GRID,
    METRICS,
    TIME_BINS,
    capped_shots,
    classifier_description,
    combined_features,
    fixed_hyperparameter_note,
    missing_class_note,
    paired_differences,
    pool_results,
    pool_rows,
    row_normalized,
    stage_mask,
    staging_metrics,
    warning_note,
)
from .staging_plan import CROSS_DATASET_TEST_FRACTION, plan_evaluation
from .supervised_ceiling import CEILING_DIR, CEILING_FILE, CEILING_ROW, ceiling_record, ceiling_weights
from .yasa import YASA_ROW

DEFAULT_SHOTS = (10, 50, 100, 1000)
ENCODER_WEIGHTS = {"trained": "final", "random_init": "init"}
FEATURE_BATCH = 16
"""Windows per feature-extraction batch (x every channel): small batches keep the conv activations
in cache (width-32 encoder on CPU, one thread: 96 channel-windows per batch ran ~3-4x faster than
1,536; docs/benchmarks.md)."""
HANDCRAFTED_ROW = "handcrafted"
"""Row of the strong hand-crafted features (eval/handcrafted.py: fine log spectrum, ratios, spectral edges,
Hjorth, moments, percentiles, within-window variation; per channel, for the paper classifier not time-binned)."""


def _ceiling_run(run_dir: Path, pretraining_subjects: list[str], notes: list[str]) -> tuple[Path, str] | None:
    """``(run folder, weights)`` of ``run_dir``'s supervised ceiling: the checkpoint its validation subjects
    chose (:func:`~multiview_app.eval.supervised_ceiling.ceiling_weights`), or None with a note saying how to
    train it. A record whose subjects are not the run's pretraining subjects is refused (ValueError)."""
    record = ceiling_record(run_dir)
    found = None if record is None else ceiling_weights(record)
    if found is None:
        notes.append(f"no {CEILING_ROW} row: train it with `mvapp experiment supervised-ceiling --run {run_dir}`")
        return None
    if sorted(record["pretraining_subjects"]) != sorted(pretraining_subjects):
        raise ValueError(
            f"{run_dir}/{CEILING_DIR}/{CEILING_FILE}: the ceiling trained on subjects "
            f"{record['pretraining_subjects']}, the run pretrained on {pretraining_subjects}; "
            f"train it again (mvapp experiment supervised-ceiling --run {run_dir})"
        )
    return found


def ceiling_description(source: tuple[Path, str] | None) -> dict[str, str] | None:
    """How a result names the supervised-ceiling checkpoint it probed (None: no ceiling row)."""
    return None if source is None else {"run": str(source[0]), "weights": source[1]}


def _windows(dataset: Any, batch_size: int) -> np.ndarray:
    """All raw windows of a split ``(N, C, T)`` (for the band-power baseline)."""
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False)
    return np.concatenate([batch["x"].numpy() for batch in loader])


@dataclass(frozen=True)
class StagingOptions:
    """The options of :func:`run_sleep_staging` (its keyword arguments).

    ``cache`` / ``channels`` / ``test_fraction`` / ``folds``: which windows and subjects (:func:`.staging_plan.plan_evaluation`).
    ``shots``: windows per class drawn for the classifier; ``seeds``: draws per fold (seeds 0 .. N-1).
    ``combine``: per-channel features concatenated or averaged. ``batch_size``: windows per feature batch.

    ``yasa``: add the ``yasa`` row, YASA's pretrained classifier staging every test night zero-shot from its
    source file (``eval.yasa``; the few-shot protocol does not apply to a fixed model, so every s column holds
    the same predictions). When a test recording cannot be staged (no EEG lead, source missing) the row is
    left out and a note gives the reason.

    ``ceiling`` (with ``baselines``): add the ``supervised_ceiling`` row, the run's encoder architecture
    trained end to end on the pretraining nights' stages (``<run>/ceiling``, trained by ``mvapp experiment
    supervised-ceiling``; without it a note says how), frozen and probed like the trained encoder.

    ``workers`` > 1 (``logreg``): the subject folds' classifier fits run in that many processes (the same
    fits and draws, so the same result; the features are extracted once, before).

    ``accept_input_differences``: go on when the cache differs from the run's input contract
    (``input_contract.json``: rate, band, units, window, scaling; refused otherwise, naming each field);
    every difference, channels included, is listed in ``input_differences``.

    ``stages``: stage every window of these classes only (e.g. ``["W", "N1", "N2", "N3"]`` when a cache
    holds too few REM windows); the other windows are removed before any split, and counted per stage in
    ``excluded_windows_per_stage``. ``None``: every stage.

    ``feature_kind``: the encoders' backbone features (default) or their normalized projector
    embeddings (logreg only). ``combined`` (with ``baselines``) adds the ``bandpower+trained`` row.

    ``classifier``: ``logreg`` (standardized logistic regression on concatenated/averaged channel
    features; ``C=None`` chooses C) or ``paper`` (learned channel combination + linear classifier on
    encoder outputs pooled into ``TIME_BINS`` time bins, AdamW; ``lr=None`` chooses the learning rate).
    C, the learning rate and the paper classifier's epochs are chosen by stratified cross-validation
    inside the s drawn windows per class, so s is every label a classifier sees.
    """

    cache: str | None = None
    channels: list[str] | None = None
    test_fraction: float | None = None
    folds: int | None = None
    shots: tuple[int, ...] = DEFAULT_SHOTS
    seeds: int = 5
    combine: Literal["concat", "mean"] = "concat"
    C: float | None = None
    batch_size: int = FEATURE_BATCH
    baselines: bool = True
    device: str = "cpu"
    progress: bool = True
    classifier: Literal["logreg", "paper"] = "logreg"
    lr: float | None = None
    feature_kind: Literal["encoder", "projector"] = "encoder"
    combined: bool = True
    stages: list[str] | None = None
    accept_input_differences: bool = False
    workers: int = 1
    ceiling: bool = True
    yasa: bool = False


@dataclass
class StagingWindows:
    """Every row's features over the kept windows and what describes them: ``features {row: (N, ...)}``,
    ``labels (N,)``, ``subjects (N,)``, ``meta {field: [N values]}``, the windows removed per stage by
    ``--stages``, the probed ceiling checkpoint (or None) and the notes on rows left out."""

    features: dict[str, np.ndarray]
    labels: np.ndarray
    subjects: np.ndarray
    meta: dict[str, list[Any]]
    excluded: dict[str, int]
    ceiling_source: tuple[Path, str] | None
    notes: list[str]


@dataclass
class StagingFits:
    """The subject folds' fits gathered: ``results`` per fold ``{row: ...}``, ``test_masks`` per fold ``(N,)``,
    the classes drawn per shot, the warnings caught, the test labels per fold, the first fold's predictions
    ``{row: (n_test,)}`` and test mask, and the trained row's confusion counts pooled over fits ``(5, 5)``."""

    results: list[dict[str, Any]]
    test_masks: list[np.ndarray]
    drawn: dict[str, list[dict[str, int]]]
    caught: list[warnings.WarningMessage]
    test_labels: list[np.ndarray]
    predictions: dict[str, np.ndarray]
    first_test: np.ndarray
    confusion: np.ndarray


def run_sleep_staging(run_dir: str | Path, **options: Any) -> dict[str, Any]:
    """Run the protocol above on ``run_dir``; write and return the result dict.

    ``options``: the fields of :class:`StagingOptions` (an unknown name raises TypeError). The steps: the plan
    (:func:`.staging_plan.plan_evaluation`), every row's features (:func:`staging_windows`), the subject folds' fits
    (:func:`fit_subject_folds`, then the optional ``yasa`` row) and the report (:func:`write_result`).
    """
    opts = StagingOptions(**options)
    run_dir = Path(run_dir)
    if opts.feature_kind != "encoder" and opts.classifier == "paper":
        raise ValueError(
            f"--features {opts.feature_kind}: the paper classifier needs the encoder's time bins (--features encoder)"
        )
    cfg, _ = load_run(run_dir, "init")
    plan = plan_evaluation(
        cfg, run_dir, cache=opts.cache, channels=opts.channels, test_fraction=opts.test_fraction, folds=opts.folds
    )
    input_differences = check_run_input(run_dir, plan["adapter"], accept=opts.accept_input_differences)
    windows = staging_windows(run_dir, cfg, plan, opts)
    fits = fit_subject_folds(windows, plan, opts)
    rows = list(windows.features)
    if opts.yasa and _add_yasa_row(plan["adapter"].cache_dir, windows, fits, opts):
        rows.append(YASA_ROW)
    return write_result(run_dir, cfg, plan, opts, windows, fits, rows, input_differences)


def _window_features(
    model: Any, adapter: Any, policy: Any, opts: StagingOptions, progress: bool = False
) -> tuple[np.ndarray, np.ndarray, dict[str, list[Any]]]:
    """One encoder's per-window features ``(N, ...)`` over the adapter's ``train`` split, with the labels
    ``(N,)`` and the window metadata."""
    return window_features(
        model,
        adapter,
        policy,
        "train",
        opts.batch_size,
        opts.device,
        combine=opts.combine,
        kind=opts.feature_kind,
        progress=progress,
    )


def _classifier_features(
    model: Any, adapter: Any, policy: Any, opts: StagingOptions, per_window: np.ndarray | None = None
) -> np.ndarray:
    """One encoder's features as ``opts.classifier`` reads them: time bins ``(N, k, d * TIME_BINS)`` for
    ``paper``, else the per-window features (``per_window`` when already extracted)."""
    if opts.classifier == "paper":
        return time_binned_features(model, adapter, policy, opts.batch_size, opts.device)
    return _window_features(model, adapter, policy, opts)[0] if per_window is None else per_window


def staging_windows(run_dir: Path, cfg: Any, plan: dict[str, Any], opts: StagingOptions) -> StagingWindows:
    """Every row's features over the plan's cache: the trained and random-init encoders, the supervised
    ceiling and the baselines (with ``opts.baselines``), restricted to ``opts.stages``."""
    from ..data.eeg.views import staging_views

    adapter = plan["adapter"]
    policy = staging_views(cfg.views, adapter)
    features: dict[str, np.ndarray] = {}
    labels, meta = np.zeros(0), {}
    for name, weights in ENCODER_WEIGHTS.items():
        _, model = load_run(run_dir, weights)
        per_window, labels, meta = _window_features(model, adapter, policy, opts, progress=opts.progress)
        features[name] = _classifier_features(model, adapter, policy, opts, per_window)
    notes: list[str] = []
    ceiling_source = None
    if opts.baselines and opts.ceiling:
        ceiling_source = _ceiling_run(run_dir, plan["pretraining_subjects"], notes)
        if ceiling_source is not None:
            _, model = load_run(*ceiling_source)
            features[CEILING_ROW] = _classifier_features(model, adapter, policy, opts)
    if opts.baselines:
        _add_baseline_rows(features, adapter, opts, notes)
    keep = stage_mask(labels, opts.stages)
    excluded = {STAGES[c]: int(((labels == c) & ~keep).sum()) for c in range(len(STAGES))}
    if not keep.all():
        notes.append(
            f"--stages {' '.join(opts.stages or [])}: excluded {int((~keep).sum())} windows ("
            + ", ".join(f"{k} {n}" for k, n in excluded.items() if n)
            + ")"
        )
    return StagingWindows(
        features={name: f[keep] for name, f in features.items()},
        labels=labels[keep],
        subjects=np.asarray(meta["subject"])[keep],
        meta={k: np.asarray(v)[keep].tolist() for k, v in meta.items()},
        excluded=excluded,
        ceiling_source=ceiling_source,
        notes=notes,
    )


def _add_baseline_rows(features: dict[str, np.ndarray], adapter: Any, opts: StagingOptions, notes: list[str]) -> None:
    """Add the band-power, hand-crafted and (with ``opts.combined``) ``bandpower+trained`` rows to
    ``features``; a combined row that cannot be paired per channel is left out with a note."""
    windows = _windows(adapter.split("train"), opts.batch_size)
    paper = opts.classifier == "paper"
    features["bandpower"] = (
        bandpower_time_bins(windows, adapter.sfreq, TIME_BINS) if paper else bandpower_features(windows, adapter.sfreq)
    )
    features[HANDCRAFTED_ROW] = (
        handcrafted_per_channel(windows, adapter.sfreq) if paper else handcrafted_row(windows, adapter.sfreq)
    )
    if not opts.combined:
        return
    try:
        features[COMBINED_ROW] = combined_features(features["bandpower"], features["trained"])
    except ValueError:  # a stacked run under the paper classifier: fewer encoder views than channels
        notes.append(
            f"{COMBINED_ROW} skipped: the paper classifier pairs features per channel and "
            f"this run's {features['trained'].shape[1]} encoder views are not the "
            f"{features['bandpower'].shape[1]} channels"
        )


def fit_subject_folds(windows: StagingWindows, plan: dict[str, Any], opts: StagingOptions) -> StagingFits:
    """Every row's few-shot fits on each subject fold of ``plan`` (C / lr chosen inside the drawn train
    windows), in ``opts.workers`` processes for ``logreg``, gathered in fold order."""
    fold_masks = [  # (train, test) window masks per fold
        (np.isin(windows.subjects, train_subjects), np.isin(windows.subjects, test_subjects))
        for train_subjects, test_subjects in plan["folds"]
    ]
    job = FoldJob(
        features=windows.features,
        labels=windows.labels,
        subjects=windows.subjects,
        masks=fold_masks,
        options={"shots": opts.shots, "seeds": opts.seeds, "C": opts.C, "classifier": opts.classifier, "lr": opts.lr},
    )
    gathered = StagingFits(
        results=[],
        test_masks=[test for _, test in fold_masks],
        drawn={},
        caught=[],
        test_labels=[],
        predictions={},
        first_test=np.zeros(0, dtype=bool),
        confusion=np.zeros((len(STAGES), len(STAGES)), dtype=np.int64),
    )
    # the paper classifier trains with torch: never in a fork of a process that ran torch threads
    for fold, (fits, caught) in enumerate(map_folds(job, opts.workers if opts.classifier == "logreg" else 1)):
        test = fold_masks[fold][1]
        gathered.caught += caught
        gathered.results.append(fits["results"])
        gathered.test_labels.append(windows.labels[test])
        gathered.confusion += np.asarray(fits["confusion"]["trained"], dtype=np.int64)
        for s, per_seed in fits["drawn_per_class"].items():
            gathered.drawn.setdefault(s, []).extend(per_seed)
        if fold == 0:
            gathered.predictions, gathered.first_test = fits["predictions"], test
    return gathered


def _add_yasa_row(cache_dir: Path, windows: StagingWindows, fits: StagingFits, opts: StagingOptions) -> bool:
    """Add the ``yasa`` row to every fold's results (True), or a note saying why it is left out (False)."""
    began = time.perf_counter()
    yasa_fits = _yasa_fold_fits(cache_dir, windows.meta, windows.labels, fits.test_masks, opts.shots, opts.seeds)
    if isinstance(yasa_fits, str):
        windows.notes.append(yasa_fits)
        return False
    n_nights = len(set(np.asarray(windows.meta["recording"])[np.any(fits.test_masks, axis=0)]))
    windows.notes.append(
        f"{YASA_ROW} row: {n_nights} test nights staged from their source files in "
        f"{time.perf_counter() - began:.0f} s (one process)"
    )
    for part, row in zip(fits.results, yasa_fits):
        part[YASA_ROW] = row
    return True


def write_result(
    run_dir: Path,
    cfg: Any,
    plan: dict[str, Any],
    opts: StagingOptions,
    windows: StagingWindows,
    fits: StagingFits,
    rows: list[str],
    input_differences: Any,
) -> dict[str, Any]:
    """Pool the fits of ``rows``, draw the plots and write ``<run>/eval/<plan name>.json``; return the result."""
    pooled = pool_rows(fits.results, rows, opts.shots)
    fixed_note = fixed_hyperparameter_note({name: row for part in fits.results for name, row in part.items()})
    notes = [
        note
        for note in [missing_class_note(fits.drawn, fits.test_labels), fixed_note, warning_note(fits.caught)]
        if note
    ] + windows.notes
    stem = plan["name"]
    title = (
        f"{plan['dataset']}, {classifier_label(opts.classifier, opts.C, opts.lr)}: trained encoder, "
        f"s={max(opts.shots)}, {len(plan['folds']) * opts.seeds} fits"
    )
    first_meta = {k: np.asarray(v)[fits.first_test].tolist() for k, v in windows.meta.items()}
    plots = _plots(
        run_dir,
        stem,
        windows.labels[fits.first_test],
        fits.predictions["trained"],
        first_meta,
        max(opts.shots),
        fits.confusion,
        title,
    )
    result = {
        **_describe_evaluation(run_dir, cfg, plan, opts, windows, fits),
        CEILING_ROW: ceiling_description(windows.ceiling_source),
        "results": pooled,
        "paired": paired_differences(pooled),
        "notes": notes,
        "input_differences": input_differences,
        "plots": plots,
        "output": str(run_dir / "eval" / f"{stem}.json"),
    }
    atomic_write_json(run_dir / "eval" / f"{stem}.json", result)
    return result


def _describe_evaluation(
    run_dir: Path, cfg: Any, plan: dict[str, Any], opts: StagingOptions, windows: StagingWindows, fits: StagingFits
) -> dict[str, Any]:
    """The result's leading fields: what was staged (run, caches, channels, subjects, folds, windows per
    split and stage) and how (classifier, shots, draws, features)."""
    adapter, test_labels = plan["adapter"], fits.test_labels
    return {
        "evaluator": "sleep-staging",
        "protocol": plan["protocol"],
        "run": str(run_dir),
        "loss": cfg.loss.name,
        "pretraining_cache": plan["pretraining_cache"],
        "cache": str(adapter.cache_dir),
        "dataset": plan["dataset"],
        "channels": adapter.channel_names,
        "combine": opts.combine,
        "classifier": classifier_description(opts.classifier, opts.C, opts.lr),
        "pretraining_subjects": plan["pretraining_subjects"],
        "subjects": {"train": sorted(set(plan["folds"][0][0])), "test": sorted(set(plan["folds"][0][1]))},
        "folds": [{"train": sorted(tr), "test": sorted(te)} for tr, te in plan["folds"]],
        "windows": {
            "train": int(np.isin(windows.subjects, plan["folds"][0][0]).sum()),
            "test": int(sum(y.size for y in test_labels)),
        },
        "test_windows_per_stage": {
            STAGES[c]: int(sum((y == c).sum() for y in test_labels)) for c in range(len(STAGES))
        },
        "stages": list(opts.stages) if opts.stages else list(STAGES),
        "excluded_windows_per_stage": windows.excluded,
        "shots": list(opts.shots),
        "drawn_per_class": fits.drawn,
        "capped_shots": capped_shots(fits.drawn),
        "seeds": opts.seeds,
        "C": opts.C,
        "features": opts.feature_kind,
    }


def _yasa_fold_fits(
    cache_dir: Path, meta: dict[str, list[Any]], labels: np.ndarray, tests: list[np.ndarray], shots: Any, seeds: int
) -> list[dict[str, Any]] | str:
    """The ``yasa`` row's fits per fold (``{str(s): {"runs": [fit] * seeds}}``: a fixed model, the same at
    every s and draw, so paired differences line up fit by fit), or the note saying why the row is left out."""
    from ..extras import MissingExtraError
    from .protocols.staging import per_subject_balanced_accuracy
    from .yasa import window_predictions

    recordings, subjects = np.asarray(meta["recording"]), np.asarray(meta["subject"])
    test_any = np.any(tests, axis=0)
    try:
        predicted, skipped = window_predictions(cache_dir, recordings[test_any], np.asarray(meta["window"])[test_any])
    except MissingExtraError as err:
        return f"no {YASA_ROW} row: {err}"
    if skipped or (predicted < 0).any():
        reasons = "; ".join(skipped) or f"{int((predicted < 0).sum())} test windows outside YASA's staged span"
        return f"no {YASA_ROW} row: {reasons}"
    every = np.full(len(labels), -1, dtype=np.int64)
    every[test_any] = predicted
    out = []
    for test in tests:
        fit = {
            **staging_metrics(labels[test], every[test]),
            "hyperparameter": None,
            "chosen_by": "pretrained",
            "per_subject": per_subject_balanced_accuracy(labels[test], every[test], subjects[test]),
        }
        out.append({str(s): {"runs": [fit] * seeds} for s in shots})
    return out


@dataclass(frozen=True)
class FoldJob:
    """The inputs of every subject fold's fits: features ``{row: (N, ...)}``, labels ``(N,)``, subjects
    ``(N,)``, per-fold ``(train, test)`` window masks and the protocol options."""

    features: dict[str, np.ndarray]
    labels: np.ndarray
    subjects: np.ndarray
    masks: list[tuple[np.ndarray, np.ndarray]]
    options: dict[str, Any]


FoldFits = tuple[dict[str, Any], list[warnings.WarningMessage]]


def fit_fold(job: FoldJob, fold: int) -> FoldFits:
    """The ``few-shot-staging`` fits of one subject fold of ``job``, with the warnings they raised."""
    train, test = job.masks[fold]
    opts = job.options
    split_feats = {name: {"train": f[train], "test": f[test]} for name, f in job.features.items()}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fits = get_protocol("few-shot-staging")(
            split_feats,
            job.labels[train],
            job.labels[test],
            opts["shots"],
            opts["seeds"],
            opts["C"],
            classifier=opts["classifier"],
            lr=opts["lr"],
            test_subjects=job.subjects[test],
        )
    # plain fields only: a worker process sends them back pickled
    return fits, [warnings.WarningMessage(w.message, w.category, w.filename, w.lineno) for w in caught]


def _fit_and_send(job: FoldJob, fold: int, connection: Any) -> None:
    """In a forked worker: :func:`fit_fold` and send ``("ok", fits)`` or ``("error", text)`` back."""
    try:
        connection.send(("ok", fit_fold(job, fold)))
    except BaseException as err:  # noqa: BLE001 - reported to the parent, which raises it
        connection.send(("error", f"{type(err).__name__}: {err}"))
    finally:
        connection.close()


def map_folds(job: FoldJob, workers: int) -> list[FoldFits]:
    """:func:`fit_fold` of every fold of ``job``, in fold order: in this process, or in at most ``workers``
    forked processes at a time (Linux; elsewhere in this process). A forked worker gets ``job`` as its
    argument without a copy (the fork shares the parent's memory); only its fits come back pickled."""
    import multiprocessing

    folds = len(job.masks)
    if workers <= 1 or folds <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        return [fit_fold(job, fold) for fold in range(folds)]
    context, pending, running, done = multiprocessing.get_context("fork"), list(range(folds)), [], {}
    while pending or running:
        while pending and len(running) < workers:
            fold = pending.pop(0)
            receive, send = context.Pipe(duplex=False)
            worker = context.Process(target=_fit_and_send, args=(job, fold, send))
            worker.start()
            send.close()
            running.append((fold, worker, receive))
        fold, worker, receive = running.pop(0)
        try:
            status, value = receive.recv()
        except EOFError:
            status, value = "error", "the worker process died without a result"
        worker.join()
        if status != "ok":
            raise RuntimeError(f"sleep staging, subject fold {fold + 1}: {value}")
        done[fold] = value
    return [done[fold] for fold in range(folds)]


@torch.no_grad()
def time_binned_features(model: Any, adapter: Any, policy: Any, batch_size: int, device: str) -> np.ndarray:
    """Per-view encoder outputs pooled into ``TIME_BINS`` bins: ``(N, k, out_dim * TIME_BINS)``
    over the adapter's ``train`` split (the encoder's ``time_bins`` on ``policy.eval_views``: one
    view per channel, or the channel groups of a stacked run)."""
    encoder = model.encoders["eeg"]
    if not hasattr(encoder, "time_bins"):
        raise ValueError(f"--classifier paper needs an EEG encoder with time_bins (got {type(encoder).__name__})")
    encoder.eval().to(device)
    out = []
    for batch in DataLoader(adapter.split("train"), batch_size=batch_size, shuffle=False):
        views = policy.eval_views({"x": batch["x"].to(device)})  # k views (n, T) or (n, g, T)
        per_view = [encoder.time_bins(v, name, TIME_BINS).flatten(1) for v, name in zip(views.views, views.view_names)]
        out.append(torch.stack(per_view, dim=1).cpu().numpy())
    return np.concatenate(out).astype(np.float32)


def classifier_label(classifier: str, C: float | None, lr: float | None) -> str:
    """The classifier in a few words, for plot titles (``logreg, C tuned``; ``paper classifier, lr 0.01``)."""
    if classifier == "paper":
        return f"paper classifier, lr {lr}" if lr is not None else "paper classifier, lr tuned"
    return f"logreg, C={C}" if C is not None else "logreg, C tuned"


def confusion_figure(counts: np.ndarray | list[list[int]], title: str) -> Any:
    """A matplotlib figure of true x predicted ``counts (5, 5)`` (``STAGES`` order), row-normalized:
    each cell is the share of the true stage's windows predicted as the column's stage."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    normalized = row_normalized(counts)
    fig, ax = plt.subplots(figsize=(5.2, 4.4))
    ax.imshow(normalized, cmap="Blues", vmin=0, vmax=1)
    for i in range(len(STAGES)):
        for j in range(len(STAGES)):
            ax.text(
                j,
                i,
                f"{normalized[i, j]:.2f}",
                ha="center",
                va="center",
                color="black" if normalized[i, j] < 0.6 else "white",
            )
    ax.set(
        xticks=range(len(STAGES)),
        yticks=range(len(STAGES)),
        xticklabels=STAGES,
        yticklabels=STAGES,
        xlabel="predicted",
        ylabel="true (rows sum to 1)",
    )
    ax.set_title(title, fontsize=8)
    fig.tight_layout()
    return fig


def _plots(
    run_dir: Path,
    stem: str,
    y_true: np.ndarray,
    y_pred: np.ndarray,
    meta: dict[str, list[Any]],
    shots: int,
    confusion: np.ndarray,
    title: str,
) -> dict[str, str]:
    """The confusion matrix ``confusion (5, 5)`` (counts pooled over fits, shown row-normalized, titled
    ``title``) and a true-vs-predicted hypnogram of the longest test night (``y_true`` / ``y_pred``:
    the first fold's test windows, seed 0)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = run_dir / "plots"
    out.mkdir(parents=True, exist_ok=True)
    fig = confusion_figure(confusion, title)
    confusion_path = out / f"{stem}_confusion.png"
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
    hypnogram_path = out / f"{stem}_hypnogram.png"
    fig.savefig(hypnogram_path, dpi=110)
    plt.close(fig)
    return {"confusion": str(confusion_path), "hypnogram": str(hypnogram_path)}


def format_table(result: dict[str, Any]) -> str:
    """One block per metric (balanced accuracy and kappa first), mean +- std over folds x seeds per
    s; capped columns are marked ``*`` and the counts drawn there are listed."""
    shots = [str(s) for s in result["shots"]]
    capped = set(result.get("capped_shots", []))
    n_runs = next(iter(next(iter(result["results"].values())).values()))["n_runs"]
    source = (
        f"pretrained on {result['pretraining_cache']}" if result.get("pretraining_cache") else "pretrained elsewhere"
    )
    if result.get("pooled_runs"):
        source += f", pooled over {len(result['pooled_runs'])} pretraining runs"
    lines = [
        f"sleep staging, {result['protocol']} ({result['dataset']}, {source}): {len(result['folds'])} fold(s), "
        f"{len(result['subjects']['test'])} test subjects in fold 1, {result['windows']['test']} test windows, "
        f"mean ± std over {n_runs} fits (folds x draws); classifier: {result['classifier']}"
        + (f"; {result['features']} outputs" if result.get("features", "encoder") != "encoder" else "")
    ]
    width = max(12, *(len(name) + 1 for name in result["results"]))
    header = f"{'features':<{width}}" + "".join(f"{'s=' + s + ('*' if s in capped else ''):>17}" for s in shots)
    for metric in METRICS:
        lines += ["", f"{metric}", header]
        for name, per_shot in result["results"].items():
            lines.append(
                f"{name:<{width}}"
                + "".join(f"{per_shot[s][metric]['mean']:>10.3f} ± {per_shot[s][metric]['std']:.3f}" for s in shots)
            )
    lines += subject_lines(result["results"], shots, header, width)
    if result.get("paired"):
        lines += paired_lines(result["paired"], shots, capped, width)
    for s in shots:
        if s in capped:
            draws = sorted(
                {tuple(sorted(d.items(), key=lambda kv: STAGES.index(kv[0]))) for d in result["drawn_per_class"][s]}
            )
            listed = " | ".join(", ".join(f"{c} {n}" for c, n in d) for d in draws)
            lines.append(f"* s={s} is capped by the windows that exist (imbalanced draw; drawn per class: {listed})")
    for note in result.get("notes", []):
        lines.append(f"note: {note}")
    return "\n".join(lines)


def subject_mean(fits: list[dict[str, Any]]) -> float:
    """Balanced accuracy counted per test subject: each subject's fits averaged first, then the mean over
    subjects (NaN when the fits carry no ``per_subject`` scores)."""
    means = stats.unit_means((u, v) for fit in fits for u, v in fit.get("per_subject", {}).items())
    return float(np.mean(list(means.values()))) if means else float("nan")


def subject_lines(results: dict[str, Any], shots: list[str], header: str, width: int) -> list[str]:
    """The per-subject block of :func:`format_table` (the unit the README's tables and the paired
    differences count by; the blocks above average fits, each pooling its fold's test subjects)."""
    rows = {name: [subject_mean(per_shot[s].get("runs", [])) for s in shots] for name, per_shot in results.items()}
    if all(np.isnan(v) for values in rows.values() for v in values):
        return []
    lines = [
        "",
        "balanced_accuracy per test subject (each subject's fits averaged, then the mean over subjects)",
        header,
    ]
    return lines + [
        f"{name:<{width}}" + "".join(f"{v:>10.3f}{'':7}" for v in values).rstrip() for name, values in rows.items()
    ]


def paired_lines(paired: dict[str, dict[str, Any]], shots: list[str], capped: set[str], width: int) -> list[str]:
    """The paired block of :func:`format_table`: trained minus each row by test subject, mean [95 % BCa
    interval], exact sign-flip p and the subjects ahead of n (``eval.protocols.stats``)."""
    n = max(cell["n"] for cells in paired.values() for cell in cells.values())
    lines = [
        "",
        f"balanced_accuracy, trained minus each row per test subject (fits sharing a subject averaged first): "
        f"mean [95 % BCa bootstrap CI over subjects, {stats.RESAMPLES} resamples], exact sign-flip p, "
        f"subjects ahead / n (n = {n}; with n = {n} the smallest possible p is {stats.smallest_sign_flip_p(n):.3g})",
        f"{'trained minus':<{width}}" + "".join(f"{'s=' + s + ('*' if s in capped else ''):>58}" for s in shots),
    ]
    for name, per_shot in paired.items():
        lines.append(
            f"{name:<{width}}"
            + "".join(f"{stats.ci_text(per_shot[s]):>58}" if s in per_shot else f"{'-':>58}" for s in shots)
        )
    return lines


STAGING_ARGUMENTS: tuple[Option, ...] = (
    (
        ("--cache",),
        dict(default=None, help="stage another prepared cache (cross-dataset, e.g. Sleep-EDF; default: the run's own)"),
    ),
    (("--channels",), dict(nargs="+", default=None, help="channels of the cache to use (default: all)")),
    (
        ("--test-fraction",),
        dict(
            type=open_fraction,
            default=None,
            help="share of subjects held out (default: the run's split in-domain, "
            f"{CROSS_DATASET_TEST_FRACTION} cross-dataset)",
        ),
    ),
    (
        ("--folds",),
        dict(
            type=positive_int,
            default=None,
            help="subject-wise folds of the test subjects, >= 2 (mean ± std over folds x draws; "
            "default: one split, the run's own or --test-fraction)",
        ),
    ),
    (
        ("--shots",),
        dict(
            type=positive_int, nargs="+", default=list(DEFAULT_SHOTS), help="windows per class (default: %(default)s)"
        ),
    ),
    (
        ("--draws",),
        dict(
            type=positive_int,
            default=5,
            help="few-shot draws per fold (s windows per class drawn again, seeds 0 .. N-1; default: %(default)s)",
        ),
    ),
    (
        ("--combine",),
        dict(choices=["concat", "mean"], default="concat", help="per-channel features (default: %(default)s)"),
    ),
    (
        ("--classifier",),
        dict(
            choices=["logreg", "paper"],
            default="logreg",
            help="logreg: standardized logistic regression on the channel features; paper: learned "
            "channel combination + linear classifier on 4 time bins, AdamW, early stopping "
            "(default: %(default)s)",
        ),
    ),
    (
        ("--C",),
        dict(
            type=positive_float,
            default=None,
            help=f"fixed inverse L2 strength of the logistic regression (default: chosen over {list(C_GRID)} "
            "by stratified cross-validation inside the s drawn windows, for every row alike)",
        ),
    ),
    (
        ("--lr",),
        dict(
            type=positive_float,
            default=None,
            help=f"fixed learning rate of the paper classifier (default: chosen over {list(LR_GRID)} by "
            "cross-validation inside the drawn windows)",
        ),
    ),
    (
        ("--pool-runs",),
        dict(
            nargs="+",
            type=Path,
            default=None,
            metavar="RUN",
            help="also evaluate these runs (e.g. other pretraining seeds / folds) the same way and "
            "report mean ± std over runs x folds x draws (eval/<name>_pooled.json in --run)",
        ),
    ),
    (
        ("--batch-size",),
        dict(
            type=positive_int, default=FEATURE_BATCH, help="windows per feature-extraction batch (default: %(default)s)"
        ),
    ),
    (
        ("--no-baselines",),
        dict(
            action="store_true",
            help=f"skip the non-learned baselines (band power, {HANDCRAFTED_ROW}) and the {COMBINED_ROW} row",
        ),
    ),
    (
        ("--no-ceiling",),
        dict(
            action="store_true",
            help=f"skip the {CEILING_ROW} row (the run's encoder trained end to end on the pretraining "
            "nights' stages; `mvapp experiment supervised-ceiling --run RUN` trains it)",
        ),
    ),
    (
        ("--yasa",),
        dict(
            action="store_true",
            help=f"add the {YASA_ROW} row: YASA's pretrained classifier (extra [yasa]) stages every test night "
            "zero-shot from its source file (EEG + EOG where present; the same predictions at every s)",
        ),
    ),
    (
        ("--no-combined",),
        dict(
            action="store_true",
            help=f"skip the {COMBINED_ROW} row (band powers concatenated with the trained features)",
        ),
    ),
    (
        ("--features",),
        dict(
            choices=["encoder", "projector"],
            default="encoder",
            help="encoder backbone features or the normalized projector output (logreg only; default: %(default)s)",
        ),
    ),
    (
        ("--stages",),
        dict(
            nargs="+",
            choices=list(STAGES),
            default=None,
            help="stage only these classes (e.g. W N1 N2 N3 when REM is too rare); the other "
            "windows are excluded and counted in the output (default: every stage)",
        ),
    ),
    (("--device",), dict(default="cpu", help="torch device of the feature extraction")),
    (
        ("--workers",),
        dict(
            type=positive_int,
            default=1,
            help="processes fitting the subject folds' logistic regressions at the same time (the same "
            "result; the paper classifier always uses one; default: %(default)s)",
        ),
    ),
    (
        ("--accept-input-differences",),
        dict(
            action="store_true",
            help="stage a cache whose rate / band / units / window / scaling differ from the run's "
            "input_contract.json (refused otherwise; every difference is listed in the output)",
        ),
    ),
)
"""The options of ``mvapp eval sleep-staging``: ``(flags, add_argument keywords)`` in help order."""


@register_evaluator
class SleepStaging(Evaluator):
    """Few-shot sleep staging on frozen per-channel EEG features (trained vs random-init vs band power)."""

    name = "sleep-staging"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        add_options(parser, STAGING_ARGUMENTS)
        renamed_option(
            parser,
            "--seeds",
            "the number of few-shot draws is --draws N (e.g. --draws 3); --seeds lists seeds elsewhere",
        )

    def run(self, run_dir: str | Path, args: argparse.Namespace) -> dict[str, Any]:
        results = [
            run_sleep_staging(
                run,
                cache=args.cache,
                channels=args.channels,
                test_fraction=args.test_fraction,
                folds=args.folds,
                shots=tuple(args.shots),
                seeds=args.draws,
                combine=args.combine,
                C=args.C,
                batch_size=args.batch_size,
                baselines=not args.no_baselines,
                device=args.device,
                classifier=args.classifier,
                lr=args.lr,
                feature_kind=args.features,
                combined=not args.no_combined,
                stages=args.stages,
                accept_input_differences=args.accept_input_differences,
                workers=args.workers,
                ceiling=not args.no_ceiling,
                yasa=args.yasa,
            )
            for run in [Path(run_dir), *(args.pool_runs or [])]
        ]
        result = results[0]
        if len(results) > 1:
            result = pool_results(results)
            result["output"] = str(Path(run_dir) / "eval" / f"{Path(results[0]['output']).stem}_pooled.json")
            atomic_write_json(Path(result["output"]), result)
        print(format_table(result))
        print(f"plots: {', '.join(result['plots'].values())}")
        if results[0].get("input_differences"):
            print(f"note: {format_input_differences(results[0]['input_differences'])}", file=sys.stderr)
        return result
