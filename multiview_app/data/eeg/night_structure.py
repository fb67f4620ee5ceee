"""Night structure of hypnograms (``(E,)`` 30-s label codes, 0..4 = W, N1, N2, N3, REM; negative =
excluded / unscored): stage shares, W/NREM/REM transitions per hour, sleep-onset and REM latencies,
bout lengths per stage, N3 in the first vs the last third of the night; and the comparison of two
sets of nights (synthetic vs real, ``mvapp experiment synth-check night-structure``, docs/eeg.md)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .preprocess import wake_crop_mask
from .stages import EPOCH_SECONDS, STAGES

EPOCHS_PER_HOUR = 3600.0 / EPOCH_SECONDS
PERSISTENT_SLEEP_EPOCHS = 20
"""Persistent sleep: the first 10 min (20 epochs) of uninterrupted sleep (any of N1-REM)."""

SCALARS = (
    "transitions_per_hour",
    "sleep_hours",
    "persistent_sleep_minutes",
    "rem_latency_minutes",
    "n3_minutes_first_third",
    "n3_minutes_last_third",
)
"""Per-night numbers :func:`night_metrics` returns besides the stage shares and bouts."""


def runs(stages: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Run-length encoding of ``(E,)`` labels: (stage, length, start) of every bout, each ``(r,)``."""
    starts = np.flatnonzero(np.r_[True, stages[1:] != stages[:-1]])
    return stages[starts], np.diff(np.r_[starts, stages.size]), starts


def sleep_period(stages: np.ndarray) -> np.ndarray:
    """The labels from the first to the last sleep epoch (N1-REM); empty when there is no sleep."""
    sleep = np.flatnonzero(stages >= 1)
    return stages[sleep[0] : sleep[-1] + 1] if sleep.size else stages[:0]


def wake_nrem_rem_transitions_per_hour(stages: np.ndarray) -> float:
    """Transitions between wake, NREM (N1-N3) and REM from sleep onset to the final awakening, per
    hour of sleep (the overall transition rate of Laffan et al. 2010); ``stages`` holds 0..4 only."""
    period = sleep_period(stages)
    state = np.select([period == 0, period == 4], [0, 2], default=1)
    return float((state[1:] != state[:-1]).sum() / ((period != 0).sum() / EPOCHS_PER_HOUR))


def scored_after_crop(labels: np.ndarray, crop_wake_minutes: float | None = 30.0) -> np.ndarray:
    """The scored epochs (0..4) the readers keep: wake cropped to ``crop_wake_minutes`` around sleep,
    excluded / unscored epochs removed (their neighbours become adjacent: 32 movement epochs in the 20
    real SC nights, "?" mostly outside the crop)."""
    keep = wake_crop_mask(labels, crop_wake_minutes) & (labels >= 0)
    return labels[keep]


def night_metrics(labels: np.ndarray, crop_wake_minutes: float | None = 30.0) -> dict[str, Any]:
    """One night's structure after the readers' crop (:func:`scored_after_crop`): ``shares`` per stage,
    the :data:`SCALARS` (latencies from the first sleep epoch: the SC hypnograms do not mark lights-out,
    so sleep-onset latency from lights-out cannot be measured on them; NaN where a night has no REM or
    no persistent sleep) and ``bouts``: stage -> bout lengths in minutes inside the sleep period."""
    stages = scored_after_crop(labels, crop_wake_minutes)
    period = sleep_period(stages)
    if period.size == 0:
        raise ValueError("night_metrics: the hypnogram holds no sleep epoch")
    shares = np.bincount(stages, minlength=len(STAGES)) / stages.size
    stage, length, start = runs(period)
    sleeping = runs((period != 0).astype(np.int64))
    persistent = [s for v, n, s in zip(*sleeping) if v == 1 and n >= PERSISTENT_SLEEP_EPOCHS]
    rem = np.flatnonzero(period == 4)
    third = period.size // 3
    minutes = EPOCH_SECONDS / 60.0
    return {
        "shares": {name: float(shares[i]) for i, name in enumerate(STAGES)},
        "transitions_per_hour": wake_nrem_rem_transitions_per_hour(stages),
        "sleep_hours": float((period != 0).sum() / EPOCHS_PER_HOUR),
        "persistent_sleep_minutes": float(persistent[0] * minutes) if persistent else float("nan"),
        "rem_latency_minutes": float(rem[0] * minutes) if rem.size else float("nan"),
        "n3_minutes_first_third": float((period[:third] == 3).sum() * minutes),
        "n3_minutes_last_third": float((period[period.size - third :] == 3).sum() * minutes),
        "bouts": {name: (length[stage == i] * minutes).tolist() for i, name in enumerate(STAGES)},
    }


def _spread(values: list[float]) -> dict[str, float]:
    array = np.asarray(values, dtype=np.float64)
    array = array[np.isfinite(array)]
    if array.size == 0:
        return {"mean": float("nan"), "sd": float("nan"), "median": float("nan"), "n": 0}
    return {
        "mean": float(array.mean()),
        "sd": float(array.std(ddof=1)) if array.size > 1 else 0.0,
        "median": float(np.median(array)),
        "n": int(array.size),
    }


def compare_nights(nights: dict[str, list[np.ndarray]], crop_wake_minutes: float | None = 30.0) -> dict[str, Any]:
    """Night structure of each set of hypnograms (``{"synthetic": [...], "real": [...]}``, each night
    ``(E,)`` codes): per set, mean / sd / median over nights of every share and scalar, pooled bout
    lengths per stage (mean, median minutes, count), ``epochs`` per stage pooled over the set's nights
    (after the crop); and, between the first two sets, the two-sample
    Kolmogorov-Smirnov statistic (and p-value) of the bout lengths per stage."""
    from scipy.stats import ks_2samp

    per_set = {name: [night_metrics(labels, crop_wake_minutes) for labels in group] for name, group in nights.items()}
    summary: dict[str, Any] = {
        "nights": {name: len(group) for name, group in nights.items()},
        "sets": {},
        "epochs": {
            name: {
                stage: int(sum((scored_after_crop(labels, crop_wake_minutes) == i).sum() for labels in group))
                for i, stage in enumerate(STAGES)
            }
            for name, group in nights.items()
        },
    }
    for name, metrics in per_set.items():
        bouts = {stage: np.concatenate([m["bouts"][stage] for m in metrics]) for stage in STAGES}
        summary["sets"][name] = {
            "shares": {stage: _spread([m["shares"][stage] for m in metrics]) for stage in STAGES},
            **{key: _spread([m[key] for m in metrics]) for key in SCALARS},
            "bouts": {
                stage: {
                    "count": int(b.size),
                    "mean_minutes": float(b.mean()) if b.size else float("nan"),
                    "median_minutes": float(np.median(b)) if b.size else float("nan"),
                }
                for stage, b in bouts.items()
            },
            "_bouts": bouts,
        }
    first, second = list(per_set)[:2]
    summary["bout_ks"] = {}
    for stage in STAGES:
        a, b = summary["sets"][first]["_bouts"][stage], summary["sets"][second]["_bouts"][stage]
        if a.size and b.size:
            test = ks_2samp(a, b)
            summary["bout_ks"][stage] = {"statistic": float(test.statistic), "pvalue": float(test.pvalue)}
        else:
            summary["bout_ks"][stage] = {"statistic": float("nan"), "pvalue": float("nan")}
    for name in per_set:
        del summary["sets"][name]["_bouts"]
    return summary


def comparison_rows(summary: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of a Markdown table: one row per statistic, one column per set (mean +- sd
    over nights; bouts: pooled median / mean minutes and count), then the bout KS statistic."""
    names = list(summary["sets"])
    fmt = lambda s: f"{s['mean']:.3g} ± {s['sd']:.2g}" if s["n"] else "n/a"  # noqa: E731
    rows = [[f"share {stage}", *(fmt(summary["sets"][n]["shares"][stage]) for n in names), ""] for stage in STAGES]
    labels = {
        "transitions_per_hour": "W/NREM/REM transitions per hour of sleep",
        "sleep_hours": "sleep hours",
        "persistent_sleep_minutes": "first sleep epoch -> 10 min of persistent sleep (min)",
        "rem_latency_minutes": "REM latency from the first sleep epoch (min)",
        "n3_minutes_first_third": "N3 minutes, first third of the sleep period",
        "n3_minutes_last_third": "N3 minutes, last third of the sleep period",
    }
    rows += [[labels[key], *(fmt(summary["sets"][n][key]) for n in names), ""] for key in SCALARS]
    for stage in STAGES:
        ks = summary["bout_ks"][stage]
        cells = [
            f"{summary['sets'][n]['bouts'][stage]['median_minutes']:.3g} / "
            f"{summary['sets'][n]['bouts'][stage]['mean_minutes']:.3g} (n {summary['sets'][n]['bouts'][stage]['count']})"
            for n in names
        ]
        rows.append(
            [f"{stage} bout minutes, median / mean", *cells, f"KS {ks['statistic']:.2f} (p {ks['pvalue']:.2g})"]
        )
    return ["statistic", *(f"{n} ({summary['nights'][n]} nights)" for n in names), " vs ".join(names[:2])], rows
