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

from ..argtypes import open_fraction, positive_float, positive_int, renamed_option
from ..data.eeg.provenance import recording_identities
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
from .supervised_ceiling import CEILING_DIR, CEILING_FILE, CEILING_ROW, ceiling_record, ceiling_weights
from .yasa import YASA_ROW

DEFAULT_SHOTS = (10, 50, 100, 1000)
ENCODER_WEIGHTS = {"trained": "final", "random_init": "init"}
FEATURE_BATCH = 16
"""Windows per feature-extraction batch (x every channel): small batches keep the conv activations
in cache (width-32 encoder on CPU, one thread: 96 channel-windows per batch ran ~3-4x faster than
1,536; docs/benchmarks.md)."""
CROSS_DATASET_TEST_FRACTION = 0.2
"""Share of the other dataset's subjects held out in the cross-dataset protocol (Brüsch et al.: 20 %)."""
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


def run_sleep_staging(
    run_dir: str | Path,
    *,
    cache: str | None = None,
    channels: list[str] | None = None,
    test_fraction: float | None = None,
    folds: int | None = None,
    shots: tuple[int, ...] = DEFAULT_SHOTS,
    seeds: int = 5,
    combine: Literal["concat", "mean"] = "concat",
    C: float | None = None,
    batch_size: int = FEATURE_BATCH,
    baselines: bool = True,
    device: str = "cpu",
    progress: bool = True,
    classifier: Literal["logreg", "paper"] = "logreg",
    lr: float | None = None,
    feature_kind: Literal["encoder", "projector"] = "encoder",
    combined: bool = True,
    stages: list[str] | None = None,
    accept_input_differences: bool = False,
    workers: int = 1,
    ceiling: bool = True,
    yasa: bool = False,
) -> dict[str, Any]:
    """Run the protocol above on ``run_dir``; write and return the result dict.

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
    from ..data.eeg.views import staging_views

    run_dir = Path(run_dir)
    if feature_kind != "encoder" and classifier == "paper":
        raise ValueError(
            f"--features {feature_kind}: the paper classifier needs the encoder's time bins (--features encoder)"
        )
    cfg, _ = load_run(run_dir, "init")
    plan = plan_evaluation(cfg, run_dir, cache=cache, channels=channels, test_fraction=test_fraction, folds=folds)
    adapter = plan["adapter"]
    input_differences = check_run_input(run_dir, adapter, accept=accept_input_differences)
    policy = staging_views(cfg.views, adapter)

    features: dict[str, np.ndarray] = {}
    labels = subjects = np.zeros(0)
    meta: dict[str, list[Any]] = {}
    for name, weights in ENCODER_WEIGHTS.items():
        _, model = load_run(run_dir, weights)
        per_window, labels, meta = window_features(
            model, adapter, policy, "train", batch_size, device, combine=combine, kind=feature_kind, progress=progress
        )
        features[name] = (
            time_binned_features(model, adapter, policy, batch_size, device) if classifier == "paper" else per_window
        )
    skipped_notes: list[str] = []
    ceiling_source = None
    if baselines and ceiling:
        ceiling_source = _ceiling_run(run_dir, plan["pretraining_subjects"], skipped_notes)
        if ceiling_source is not None:
            _, model = load_run(*ceiling_source)
            features[CEILING_ROW] = (
                time_binned_features(model, adapter, policy, batch_size, device)
                if classifier == "paper"
                else window_features(
                    model, adapter, policy, "train", batch_size, device, combine=combine, kind=feature_kind
                )[0]
            )
    subjects = np.asarray(meta["subject"])
    keep = stage_mask(labels, stages)
    excluded = {STAGES[c]: int(((labels == c) & ~keep).sum()) for c in range(len(STAGES))}
    if baselines:
        windows = _windows(adapter.split("train"), batch_size)
        features["bandpower"] = (
            bandpower_time_bins(windows, adapter.sfreq, TIME_BINS)
            if classifier == "paper"
            else bandpower_features(windows, adapter.sfreq)
        )
        features[HANDCRAFTED_ROW] = (
            handcrafted_per_channel(windows, adapter.sfreq)
            if classifier == "paper"
            else handcrafted_row(windows, adapter.sfreq)
        )
        if combined:
            try:
                features[COMBINED_ROW] = combined_features(features["bandpower"], features["trained"])
            except ValueError:  # a stacked run under the paper classifier: fewer encoder views than channels
                skipped_notes.append(
                    f"{COMBINED_ROW} skipped: the paper classifier pairs features per channel and "
                    f"this run's {features['trained'].shape[1]} encoder views are not the "
                    f"{features['bandpower'].shape[1]} channels"
                )
    features = {name: f[keep] for name, f in features.items()}
    labels, subjects = labels[keep], subjects[keep]
    meta = {k: np.asarray(v)[keep].tolist() for k, v in meta.items()}
    if not keep.all():
        skipped_notes.append(
            f"--stages {' '.join(stages or [])}: excluded {int((~keep).sum())} windows ("
            + ", ".join(f"{k} {n}" for k, n in excluded.items() if n)
            + ")"
        )
    fold_results: list[dict[str, Any]] = []
    drawn: dict[str, list[dict[str, int]]] = {}
    collected: list[warnings.WarningMessage] = []
    test_labels: list[np.ndarray] = []
    predictions: dict[str, np.ndarray] = {}
    first_test = np.zeros(0, dtype=bool)
    confusion = np.zeros((len(STAGES), len(STAGES)), dtype=np.int64)
    fold_masks = [  # (train, test) window masks per fold: C / lr are chosen inside the drawn train windows
        (np.isin(subjects, train_subjects), np.isin(subjects, test_subjects))
        for train_subjects, test_subjects in plan["folds"]
    ]
    job = FoldJob(
        features=features,
        labels=labels,
        subjects=subjects,
        masks=fold_masks,
        options={"shots": shots, "seeds": seeds, "C": C, "classifier": classifier, "lr": lr},
    )
    # the paper classifier trains with torch: never in a fork of a process that ran torch threads
    fold_fits = map_folds(job, workers if classifier == "logreg" else 1)
    for fold, (fits, caught) in enumerate(fold_fits):
        test = fold_masks[fold][1]
        collected += caught
        fold_results.append(fits["results"])
        test_labels.append(labels[test])
        confusion += np.asarray(fits["confusion"]["trained"], dtype=np.int64)
        for s, per_seed in fits["drawn_per_class"].items():
            drawn.setdefault(s, []).extend(per_seed)
        if fold == 0:
            predictions, first_test = fits["predictions"], test
    rows = list(features)
    if yasa:
        began = time.perf_counter()
        yasa_fits = _yasa_fold_fits(adapter.cache_dir, meta, labels, [m[1] for m in fold_masks], shots, seeds)
        if isinstance(yasa_fits, str):
            skipped_notes.append(yasa_fits)
        else:
            n_nights = len(set(np.asarray(meta["recording"])[np.any([m[1] for m in fold_masks], axis=0)]))
            skipped_notes.append(
                f"{YASA_ROW} row: {n_nights} test nights staged from their source files in "
                f"{time.perf_counter() - began:.0f} s (one process)"
            )
            for part, fits in zip(fold_results, yasa_fits):
                part[YASA_ROW] = fits
            rows.append(YASA_ROW)
    pooled = pool_rows(fold_results, rows, shots)
    fixed_note = fixed_hyperparameter_note({name: row for part in fold_results for name, row in part.items()})
    notes = [
        note for note in [missing_class_note(drawn, test_labels), fixed_note, warning_note(collected)] if note
    ] + skipped_notes
    stem = plan["name"]
    title = (
        f"{plan['dataset']}, {classifier_label(classifier, C, lr)}: trained encoder, s={max(shots)}, "
        f"{len(plan['folds']) * seeds} fits"
    )
    plots = _plots(
        run_dir,
        stem,
        labels[first_test],
        predictions["trained"],
        {k: np.asarray(v)[first_test].tolist() for k, v in meta.items()},
        max(shots),
        confusion,
        title,
    )
    result = {
        "evaluator": "sleep-staging",
        "protocol": plan["protocol"],
        "run": str(run_dir),
        "loss": cfg.loss.name,
        "pretraining_cache": plan["pretraining_cache"],
        "cache": str(adapter.cache_dir),
        "dataset": plan["dataset"],
        "channels": adapter.channel_names,
        "combine": combine,
        "classifier": classifier_description(classifier, C, lr),
        "pretraining_subjects": plan["pretraining_subjects"],
        "subjects": {"train": sorted(set(plan["folds"][0][0])), "test": sorted(set(plan["folds"][0][1]))},
        "folds": [{"train": sorted(tr), "test": sorted(te)} for tr, te in plan["folds"]],
        "windows": {
            "train": int(np.isin(subjects, plan["folds"][0][0]).sum()),
            "test": int(sum(y.size for y in test_labels)),
        },
        "test_windows_per_stage": {
            STAGES[c]: int(sum((y == c).sum() for y in test_labels)) for c in range(len(STAGES))
        },
        "stages": list(stages) if stages else list(STAGES),
        "excluded_windows_per_stage": excluded,
        "shots": list(shots),
        "drawn_per_class": drawn,
        "capped_shots": capped_shots(drawn),
        "seeds": seeds,
        "C": C,
        "features": feature_kind,
        CEILING_ROW: ceiling_description(ceiling_source),
        "results": pooled,
        "paired": paired_differences(pooled),
        "notes": notes,
        "input_differences": input_differences,
        "plots": plots,
        "output": str(run_dir / "eval" / f"{stem}.json"),
    }
    atomic_write_json(run_dir / "eval" / f"{stem}.json", result)
    return result


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


def _resolved(path: str | Path) -> Path:
    return Path(path).expanduser().resolve()


def plan_evaluation(
    cfg: Any,
    run_dir: Path,
    *,
    cache: str | None,
    channels: list[str] | None,
    test_fraction: float | None,
    folds: int | None,
) -> dict[str, Any]:
    """Which windows, which subjects train the classifier and which are tested, under which name.

    Returns ``adapter`` (every subject of the evaluation cache in its ``train`` split), ``folds``
    [(classifier-training subjects, test subjects)], ``protocol``, ``name`` (output file stem),
    ``dataset``, ``pretraining_subjects``, ``pretraining_cache``. Raises ``ValueError`` when a test
    set would contain a pretraining subject (naming them) or the options cannot give a test set.
    """
    from ..data.adapters import build_adapter
    from ..data.eeg.cache import load_manifest

    if folds is not None and folds < 2:
        raise ValueError(f"--folds must be >= 2 (got {folds}); omit it for a single split")
    if "eeg" not in cfg.model.encoders:  # an image / text run: no cache makes it an EEG encoder
        from . import available_evaluators

        others = ", ".join(f"mvapp eval {name}" for name in available_evaluators() if name != "sleep-staging")
        raise ValueError(
            f"run {run_dir} has no EEG encoder (it was trained on '{cfg.data.adapter}' data, encoders: "
            f"{', '.join(cfg.model.encoders)}): sleep staging needs a run trained on EEG windows (e.g. "
            f"mvapp train --config configs/eeg_sleepedf_m3g.yaml); evaluate this run with {others}"
        )
    if cfg.data.adapter != "eeg_windows" and cache is None:
        raise ValueError(f"run {run_dir} was trained on '{cfg.data.adapter}' data; pass --cache <prepared EEG cache>")
    pretraining_subjects: list[str] = []
    pretraining_cache = None
    run_options: dict[str, Any] = {}
    run_dataset = None
    if cfg.data.adapter == "eeg_windows":
        run_options = dict(cfg.data.options)
        run_adapter = build_adapter("eeg_windows", run_options)
        pretraining_subjects = run_adapter.split_subjects["train"]
        pretraining_cache = str(run_adapter.cache_dir)
        run_dataset = run_adapter.manifest["dataset"]
    in_domain = cache is None or (pretraining_cache is not None and _resolved(cache) == _resolved(pretraining_cache))
    eval_cache = pretraining_cache if in_domain else str(cache)
    dataset = load_manifest(eval_cache)["dataset"]
    base = {k: v for k, v in run_options.items() if k not in ("cache", "channels", "test_subjects", "test_fraction")}
    if not in_domain:
        base = {"split_seed": run_options.get("split_seed", 0)}
    everyone = build_adapter(
        "eeg_windows",
        {
            **base,
            "cache": eval_cache,
            "test_fraction": 0.0,
            **({"channels": channels} if channels else {"channels": run_options.get("channels")} if in_domain else {}),
        },
    )
    all_subjects = everyone.split_subjects["train"]
    rng_seed = int(base.get("split_seed", 0))
    if in_domain:
        held_out = [s for s in all_subjects if s not in set(pretraining_subjects)]
        if test_fraction is not None:
            proposed = build_adapter(
                "eeg_windows", {**run_options, "test_fraction": test_fraction, "test_subjects": None}
            ).split_subjects["test"]
            _refuse_pretraining(proposed, pretraining_subjects, f"--test-fraction {test_fraction}")
            held_out = proposed
        if not held_out:
            raise ValueError(
                f"run {run_dir} pretrained on every subject of {eval_cache}: nothing is held out for "
                "in-domain staging; evaluate on another cache (--cache)"
            )
        candidates, classifier_pool = held_out, pretraining_subjects
    else:
        candidates = all_subjects
        classifier_pool = []
    if folds is not None:
        if folds > len(candidates):
            raise ValueError(
                f"--folds {folds}: only {len(candidates)} candidate test subjects ({', '.join(candidates)})"
            )
        order = np.random.default_rng(rng_seed).permutation(len(candidates))
        test_sets = [[candidates[i] for i in part] for part in np.array_split(order, folds)]
    elif in_domain:
        test_sets = [candidates]
    else:
        fraction = CROSS_DATASET_TEST_FRACTION if test_fraction is None else test_fraction
        split = build_adapter(
            "eeg_windows",
            {
                "cache": eval_cache,
                "test_fraction": fraction,
                "split_seed": rng_seed,
                **({"channels": channels} if channels else {}),
            },
        )
        test_sets = [split.split_subjects["test"]]
    option = f"--cache {cache}" if cache else "the run's split"
    pretraining_files = (
        recording_digests(run_adapter.manifest, pretraining_subjects) if cfg.data.adapter == "eeg_windows" else {}
    )
    for test_set in test_sets:
        if in_domain:  # one cache, one naming: a subject name is a person
            _refuse_pretraining(test_set, pretraining_subjects, option)
        _refuse_same_recordings(recording_digests(everyone.manifest, test_set), pretraining_files, option)
    plan_folds = [(sorted(set(classifier_pool) | (set(candidates) - set(t))), sorted(t)) for t in test_sets]
    for train_set, _ in plan_folds:
        if not train_set:
            raise ValueError("sleep staging: no subject left to train the classifier on")
    if in_domain:
        protocol, name = "in-domain", "sleep_staging"
    else:
        protocol = "cross-dataset" if dataset != run_dataset else "in-domain (other cache)"
        name = f"sleep_staging_{dataset}" if dataset != run_dataset else f"sleep_staging_{_resolved(eval_cache).name}"
    return {
        "adapter": everyone,
        "folds": plan_folds,
        "protocol": protocol,
        "name": name,
        "dataset": dataset,
        "split_seed": rng_seed,
        "pretraining_subjects": pretraining_subjects,
        "pretraining_cache": pretraining_cache,
    }


def recording_digests(manifest: dict[str, Any], subjects: list[str]) -> dict[str, str]:
    """``{sha256 of a source file or synthetic person: "subject <name> (<file>)"}`` for the recordings of
    ``subjects`` in a prepared cache's manifest (``data.eeg.provenance.recording_identities``)."""
    return recording_identities(manifest, subjects)  # sha256 of each source, and a synthetic file's person


def _refuse_same_recordings(test_files: dict[str, str], pretraining_files: dict[str, str], option: str) -> None:
    """Refuse a test set holding a file the encoder was pretrained on (same bytes), naming both."""
    same = sorted(digest for digest in test_files if digest in pretraining_files)
    if same:
        pairs = "; ".join(f"{test_files[d]} is {pretraining_files[d]}" for d in same[:5])
        more = f" (+{len(same) - 5} more)" if len(same) > 5 else ""
        raise ValueError(
            f"{option} would test on recordings the encoder was pretrained on "
            f"(same sha256 or synthetic person): "
            f"{pairs}{more}; staging must be scored on recordings the encoder never saw"
        )


def _refuse_pretraining(test_subjects: list[str], pretraining_subjects: list[str], option: str) -> None:
    overlap = sorted(set(test_subjects) & set(pretraining_subjects))
    if overlap:
        raise ValueError(
            f"{option} would put pretraining subjects into the test set: {', '.join(overlap)}; "
            "staging must be scored on subjects the encoder never saw"
        )


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


@register_evaluator
class SleepStaging(Evaluator):
    """Few-shot sleep staging on frozen per-channel EEG features (trained vs random-init vs band power)."""

    name = "sleep-staging"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--cache",
            default=None,
            help="stage another prepared cache (cross-dataset, e.g. Sleep-EDF; default: the run's own)",
        )
        parser.add_argument("--channels", nargs="+", default=None, help="channels of the cache to use (default: all)")
        parser.add_argument(
            "--test-fraction",
            type=open_fraction,
            default=None,
            help="share of subjects held out (default: the run's split in-domain, "
            f"{CROSS_DATASET_TEST_FRACTION} cross-dataset)",
        )
        parser.add_argument(
            "--folds",
            type=positive_int,
            default=None,
            help="subject-wise folds of the test subjects, >= 2 (mean ± std over folds x draws; "
            "default: one split, the run's own or --test-fraction)",
        )
        parser.add_argument(
            "--shots",
            type=positive_int,
            nargs="+",
            default=list(DEFAULT_SHOTS),
            help="windows per class (default: %(default)s)",
        )
        parser.add_argument(
            "--draws",
            type=positive_int,
            default=5,
            help="few-shot draws per fold (s windows per class drawn again, seeds 0 .. N-1; default: %(default)s)",
        )
        renamed_option(
            parser,
            "--seeds",
            "the number of few-shot draws is --draws N (e.g. --draws 3); --seeds lists seeds elsewhere",
        )
        parser.add_argument(
            "--combine",
            choices=["concat", "mean"],
            default="concat",
            help="per-channel features (default: %(default)s)",
        )
        parser.add_argument(
            "--classifier",
            choices=["logreg", "paper"],
            default="logreg",
            help="logreg: standardized logistic regression on the channel features; paper: learned "
            "channel combination + linear classifier on 4 time bins, AdamW, early stopping "
            "(default: %(default)s)",
        )
        parser.add_argument(
            "--C",
            type=positive_float,
            default=None,
            help=f"fixed inverse L2 strength of the logistic regression (default: chosen over {list(C_GRID)} "
            "by stratified cross-validation inside the s drawn windows, for every row alike)",
        )
        parser.add_argument(
            "--lr",
            type=positive_float,
            default=None,
            help=f"fixed learning rate of the paper classifier (default: chosen over {list(LR_GRID)} by "
            "cross-validation inside the drawn windows)",
        )
        parser.add_argument(
            "--pool-runs",
            nargs="+",
            type=Path,
            default=None,
            metavar="RUN",
            help="also evaluate these runs (e.g. other pretraining seeds / folds) the same way and "
            "report mean ± std over runs x folds x draws (eval/<name>_pooled.json in --run)",
        )
        parser.add_argument(
            "--batch-size",
            type=positive_int,
            default=FEATURE_BATCH,
            help="windows per feature-extraction batch (default: %(default)s)",
        )
        parser.add_argument(
            "--no-baselines",
            action="store_true",
            help=f"skip the non-learned baselines (band power, {HANDCRAFTED_ROW}) and the {COMBINED_ROW} row",
        )
        parser.add_argument(
            "--no-ceiling",
            action="store_true",
            help=f"skip the {CEILING_ROW} row (the run's encoder trained end to end on the pretraining "
            "nights' stages; `mvapp experiment supervised-ceiling --run RUN` trains it)",
        )
        parser.add_argument(
            "--yasa",
            action="store_true",
            help=f"add the {YASA_ROW} row: YASA's pretrained classifier (extra [yasa]) stages every test night "
            "zero-shot from its source file (EEG + EOG where present; the same predictions at every s)",
        )
        parser.add_argument(
            "--no-combined",
            action="store_true",
            help=f"skip the {COMBINED_ROW} row (band powers concatenated with the trained features)",
        )
        parser.add_argument(
            "--features",
            choices=["encoder", "projector"],
            default="encoder",
            help="encoder backbone features or the normalized projector output (logreg only; default: %(default)s)",
        )
        parser.add_argument(
            "--stages",
            nargs="+",
            choices=list(STAGES),
            default=None,
            help="stage only these classes (e.g. W N1 N2 N3 when REM is too rare); the other "
            "windows are excluded and counted in the output (default: every stage)",
        )
        parser.add_argument("--device", default="cpu", help="torch device of the feature extraction")
        parser.add_argument(
            "--workers",
            type=positive_int,
            default=1,
            help="processes fitting the subject folds' logistic regressions at the same time (the same "
            "result; the paper classifier always uses one; default: %(default)s)",
        )
        parser.add_argument(
            "--accept-input-differences",
            action="store_true",
            help="stage a cache whose rate / band / units / window / scaling differ from the run's "
            "input_contract.json (refused otherwise; every difference is listed in the output)",
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
