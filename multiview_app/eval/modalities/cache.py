"""The modality evaluators' inputs from a modality cache (``mvapp data prepare ... --modalities``): its
windows' labels and bookkeeping (:func:`cache_windows`) and the per-modality handcrafted baselines
(:func:`cache_baselines`), recording by recording (memory-mapped)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ...data.eeg.cache import load_manifest
from ...data.eeg.events import TARGET_CLASSES
from ...data.eeg.stages import EPOCH_SECONDS
from . import baselines
from .data import EvalWindows

AIRFLOW_LABELS = ("airflow", "flow", "resp oro-nasal", "nasal pressure")
"""Breathing channels read as airflow (lower case) by the airflow-amplitude baseline."""


def modality_records(manifest: dict[str, Any], groups: list[str] | None) -> tuple[list[str], list[dict], list[str]]:
    """The groups used (``groups``, else every group of the cache that every recording has), the
    recordings holding all of them, and one note per recording left out. ``ValueError`` naming the cache
    when it is no modality cache or a group is not in it."""
    cached = list(manifest.get("modality_groups", {}))
    if not cached:
        raise ValueError(f"{manifest.get('dataset')}: not a modality cache (prepare it with --modalities)")
    records = manifest["recordings"]
    if groups is None:
        groups = [g for g in cached if all(g in r.get("modalities", {}) for r in records)] or cached
    unknown = [g for g in groups if g not in cached]
    if unknown:
        raise ValueError(f"{manifest.get('dataset')}: modalities {unknown} not in the cache (has {cached})")
    kept = [r for r in records if all(g in r.get("modalities", {}) for g in groups)]
    notes = [
        f"{r['recording']} left out: no {', '.join(g for g in groups if g not in r.get('modalities', {}))} "
        f"({'; '.join(r.get('missing_modalities', {}).values()) or 'not prepared'})"
        for r in records
        if r not in kept
    ]
    return groups, kept, notes


def _sleep_hours(labels: list[int]) -> float:
    return float(np.isin(labels, [1, 2, 3, 4]).sum()) * EPOCH_SECONDS / 3600.0


def cache_windows(manifest: dict[str, Any], records: list[dict]) -> EvalWindows:
    """:class:`~.data.EvalWindows` of ``records`` (manifest records): subject, night (recording), onset
    (grid epoch x 30 s), stage, event targets (when every record has them), the true AHI per night and
    its hours of sleep (the kept windows scored N1-REM)."""
    scored = all("event_targets" in r for r in records)
    return EvalWindows(
        dataset=str(manifest.get("dataset")),
        subjects=np.concatenate([[r["subject"]] * r["n_windows"] for r in records]),
        nights=np.concatenate([[r["recording"]] * r["n_windows"] for r in records]),
        onsets=np.concatenate([np.asarray(r["epochs"], dtype=np.float64) * EPOCH_SECONDS for r in records]),
        stages=np.concatenate([r["labels"] for r in records]),
        targets={c: np.concatenate([r["event_targets"][c] for r in records]) for c in TARGET_CLASSES} if scored else {},
        night_ahi={r["recording"]: float(r["ahi"]) for r in records if r.get("ahi") is not None},
        sleep_hours={r["recording"]: _sleep_hours(r["labels"]) for r in records},
    )


def _airflow(windows: np.ndarray, info: dict[str, Any], record: dict) -> np.ndarray:
    names = [c.lower() for c in record["modalities"]["breathing"]["channels"]]
    found = [i for i, name in enumerate(names) if name in AIRFLOW_LABELS]
    if not found:
        raise ValueError(
            f"{record['recording']}: airflow-amplitude baseline: no airflow channel among the breathing channels "
            f"{record['modalities']['breathing']['channels']} (expected one of {list(AIRFLOW_LABELS)})"
        )
    return baselines.airflow_features(windows[:, found[0]], info["sfreq"], np.zeros(len(windows)))


def _oximetry(windows: np.ndarray, info: dict[str, Any], record: dict) -> np.ndarray:
    percent = np.asarray(windows[:, 0], dtype=np.float64) * info["scale"] + info["offset"]
    percent[np.asarray(record.get("invalid_oximetry", [False] * len(windows)), dtype=bool)] = np.nan
    return baselines.oximetry_features(percent, np.zeros(len(windows)))


BaselineFn = Callable[[np.ndarray, dict[str, Any], dict], np.ndarray]
BASELINES: dict[str, tuple[str, str, BaselineFn]] = {
    "brain": ("band power (brain)", "brain", lambda w, info, r: baselines.brain_features(w, info["sfreq"])),
    "heart": ("HRV (heart)", "heart", lambda w, info, r: baselines.heart_features(w, info["sfreq"])),
    "breathing": (
        "breathing rate, amplitude, regularity",
        "breathing",
        lambda w, info, r: baselines.breathing_features(w, info["sfreq"], r["modalities"]["breathing"]["channels"]),
    ),
    "oximetry": ("SpO2 statistics", "oximetry", _oximetry),
    "airflow": ("airflow amplitude", "breathing", _airflow),
}
"""Baseline key -> (row name, modality group it reads, per-recording features ``(w, f)``)."""


def cache_baselines(
    cache_dir: str | Path, groups: list[str] | None = None, only: list[str] | None = None
) -> tuple[EvalWindows, dict[str, np.ndarray], dict[str, Any]]:
    """The windows of a modality cache and the handcrafted baselines of its groups.

    ``groups``: modality groups to use (default: those every recording has; recordings without one are
    left out, noted). ``only``: baseline keys of :data:`BASELINES` (default: every one whose group is
    used). Returns the :class:`~.data.EvalWindows`, ``{row name: (n, f)}`` (failed windows filled,
    :func:`~.baselines.fill_failed`) and ``{"groups", "notes", "failed": {row: windows}}``."""
    manifest = load_manifest(cache_dir)
    groups, records, notes = modality_records(manifest, groups)
    if not records:
        raise ValueError(f"{cache_dir}: no recording holds every modality of {groups}; " + "; ".join(notes))
    keys = only if only is not None else [k for k, (_, group, _) in BASELINES.items() if group in groups]
    rows, failed = {}, {}
    for key in keys:
        name, group, fn = BASELINES[key]
        info = manifest["modality_groups"][group]
        parts = [fn(np.load(Path(cache_dir) / r["modalities"][group]["file"], mmap_mode="r"), info, r) for r in records]
        rows[name], failed[name] = baselines.fill_failed(np.concatenate(parts))
    return cache_windows(manifest, records), rows, {"groups": groups, "notes": notes, "failed": failed}
