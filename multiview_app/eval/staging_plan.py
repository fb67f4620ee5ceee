"""The plan of ``mvapp eval sleep-staging`` (:mod:`.sleep_staging`): which cache is staged, which subjects train the
classifier and which are tested in each fold, under which protocol and output name. A test set that would hold a
pretraining subject (in-domain) or a recording the encoder was pretrained on (same sha256 or synthetic person, any
cache) is refused, naming them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..data.eeg.provenance import recording_identities

CROSS_DATASET_TEST_FRACTION = 0.2
"""Share of the other dataset's subjects held out in the cross-dataset protocol (Brüsch et al.: 20 %)."""


def _resolved(path: str | Path) -> Path:
    return Path(path).expanduser().resolve()


def _check_plan_options(cfg: Any, run_dir: Path, cache: str | None, folds: int | None) -> None:
    """Refuse (ValueError) a fold count under 2, a run without an EEG encoder and a non-EEG run without ``cache``."""
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


@dataclass(frozen=True)
class _Pretraining:
    """What the run pretrained on: its adapter options, subjects, cache, dataset name and recordings'
    digests (all empty / None for a run not trained on an EEG cache)."""

    options: dict[str, Any]
    subjects: list[str]
    cache: str | None
    dataset: str | None
    files: dict[str, str]


def _pretraining(cfg: Any) -> _Pretraining:
    """The run's pretraining side, read from its ``eeg_windows`` adapter options."""
    from ..data.adapters import build_adapter

    if cfg.data.adapter != "eeg_windows":
        return _Pretraining({}, [], None, None, {})
    options = dict(cfg.data.options)
    adapter = build_adapter("eeg_windows", options)
    subjects = adapter.split_subjects["train"]
    return _Pretraining(
        options=options,
        subjects=subjects,
        cache=str(adapter.cache_dir),
        dataset=adapter.manifest["dataset"],
        files=recording_digests(adapter.manifest, subjects),
    )


def _test_sets(
    run_dir: Path,
    run: _Pretraining,
    everyone: Any,
    eval_cache: str,
    in_domain: bool,
    test_fraction: float | None,
    folds: int | None,
    channels: list[str] | None,
) -> tuple[list[str], list[str], list[list[str]]]:
    """``(candidate test subjects, subjects that always train the classifier, test sets)`` of the
    evaluation cache ``eval_cache`` (``everyone``: all its subjects in ``train``)."""
    from ..data.adapters import build_adapter

    all_subjects = everyone.split_subjects["train"]
    rng_seed = _split_seed(run)
    if in_domain:
        candidates = [s for s in all_subjects if s not in set(run.subjects)]
        if test_fraction is not None:
            candidates = build_adapter(
                "eeg_windows", {**run.options, "test_fraction": test_fraction, "test_subjects": None}
            ).split_subjects["test"]
            _refuse_pretraining(candidates, run.subjects, f"--test-fraction {test_fraction}")
        if not candidates:
            raise ValueError(
                f"run {run_dir} pretrained on every subject of {eval_cache}: nothing is held out for "
                "in-domain staging; evaluate on another cache (--cache)"
            )
    else:
        candidates = all_subjects
    classifier_pool = run.subjects if in_domain else []
    if folds is not None:
        if folds > len(candidates):
            raise ValueError(
                f"--folds {folds}: only {len(candidates)} candidate test subjects ({', '.join(candidates)})"
            )
        order = np.random.default_rng(rng_seed).permutation(len(candidates))
        return candidates, classifier_pool, [[candidates[i] for i in part] for part in np.array_split(order, folds)]
    if in_domain:
        return candidates, classifier_pool, [candidates]
    fraction = CROSS_DATASET_TEST_FRACTION if test_fraction is None else test_fraction
    options = {"cache": eval_cache, "test_fraction": fraction, "split_seed": rng_seed}
    split = build_adapter("eeg_windows", {**options, **({"channels": channels} if channels else {})})
    return candidates, classifier_pool, [split.split_subjects["test"]]


def _split_seed(run: _Pretraining) -> int:
    """The seed of the subject split and fold order: the run's ``split_seed`` (0 when it has none)."""
    return int(run.options.get("split_seed", 0))


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

    _check_plan_options(cfg, run_dir, cache, folds)
    run = _pretraining(cfg)
    in_domain = cache is None or (run.cache is not None and _resolved(cache) == _resolved(run.cache))
    eval_cache = run.cache if in_domain else str(cache)
    dataset = load_manifest(eval_cache)["dataset"]
    skipped = ("cache", "channels", "test_subjects", "test_fraction")
    base = (
        {k: v for k, v in run.options.items() if k not in skipped}
        if in_domain
        else {"split_seed": run.options.get("split_seed", 0)}
    )
    chosen = {"channels": channels} if channels else {"channels": run.options.get("channels")} if in_domain else {}
    everyone = build_adapter("eeg_windows", {**base, "cache": eval_cache, "test_fraction": 0.0, **chosen})
    candidates, classifier_pool, test_sets = _test_sets(
        run_dir, run, everyone, eval_cache, in_domain, test_fraction, folds, channels
    )
    option = f"--cache {cache}" if cache else "the run's split"
    for test_set in test_sets:
        if in_domain:  # one cache, one naming: a subject name is a person
            _refuse_pretraining(test_set, run.subjects, option)
        _refuse_same_recordings(recording_digests(everyone.manifest, test_set), run.files, option)
    plan_folds = [(sorted(set(classifier_pool) | (set(candidates) - set(t))), sorted(t)) for t in test_sets]
    if any(not train_set for train_set, _ in plan_folds):
        raise ValueError("sleep staging: no subject left to train the classifier on")
    if in_domain:
        protocol, name = "in-domain", "sleep_staging"
    else:
        protocol = "cross-dataset" if dataset != run.dataset else "in-domain (other cache)"
        name = f"sleep_staging_{dataset}" if dataset != run.dataset else f"sleep_staging_{_resolved(eval_cache).name}"
    return {
        "adapter": everyone,
        "folds": plan_folds,
        "protocol": protocol,
        "name": name,
        "dataset": dataset,
        "split_seed": _split_seed(run),
        "pretraining_subjects": run.subjects,
        "pretraining_cache": run.cache,
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
