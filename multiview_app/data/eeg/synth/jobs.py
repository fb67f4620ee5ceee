"""The ``synth-psg`` driver: :func:`synth_psg` writes ``subjects x nights`` recordings, one job per
night (:class:`RecordingJob`, :func:`_synth_recording`), in one process or a pool, the same bytes either way."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..provenance import provenance_text
from .formats import WRITER_COHORT, WRITERS, default_record_hours
from .parameters import SubjectTraits
from .psg import SIGNAL_SETS, draw_cardio_traits

COHORT_STREAM = 7
"""Seed-sequence entry of the cohort draws (``default_rng([seed, subject, COHORT_STREAM])``)."""


@dataclass(frozen=True)
class RecordingJob:
    """One night to write: ``synth_psg``'s arguments for subject ``subject``'s night ``night`` (from 0)."""

    out: Path
    subject: int
    night: int
    fmt: str
    hours: float
    seed: int
    compress: int
    record_hours: float | None
    signals: str = "eeg"


def _synth_recording(job: RecordingJob) -> list[Path]:
    """Write one night: every random stream is seeded by ``(seed, subject[, night])``, so a night's bytes do
    not depend on which process writes it. Whole-PSG nights (``signals="psg"``) also draw the subject's
    cardiorespiratory traits (their own side stream of ``default_rng([seed, subject])``)."""
    seed, subject, cohort = job.seed, job.subject, WRITER_COHORT[job.fmt]
    traits = SubjectTraits.sample(np.random.default_rng([seed, subject])).with_cohort(
        cohort, np.random.default_rng([seed, subject, COHORT_STREAM])
    )
    cardio_traits = draw_cardio_traits(seed, subject, cohort) if job.signals == "psg" else None
    paths, _ = WRITERS[job.fmt](
        job.out,
        subject,
        job.night,
        job.hours,
        traits,
        np.random.default_rng([seed, subject, job.night, 1]),
        job.compress,
        record_hours=job.record_hours,
        provenance=provenance_text(seed, subject, job.night + 1),
        cardio_traits=cardio_traits,
    )
    return list(paths)


def _check_arguments(
    subjects: int, nights: int, fmt: str, hours: float, compress: int, record_hours: float | None, workers: int
) -> None:
    """Raise naming the ``synth-psg`` option whose value no format / night can take."""
    if fmt not in WRITERS:
        raise ValueError(f"--format: unknown '{fmt}'; available: {', '.join(WRITERS)}")
    if subjects < 1 or nights < 1 or hours <= 0 or compress < 1 or workers < 1:
        raise ValueError(
            f"synth-psg: --subjects, --nights, --hours, --compress and --workers must be positive "
            f"(got {subjects}, {nights}, {hours}, {compress}, {workers})"
        )
    if fmt == "sleep-edf" and (subjects > 99 or nights > 2):
        raise ValueError("synth-psg: the Sleep-EDF naming SC4ssN allows at most 99 subjects and 2 nights")
    if record_hours is not None and (record_hours < 0 or fmt != "sleep-edf"):
        raise ValueError(f"synth-psg: --record-hours {record_hours}: needs >= 0 and --format sleep-edf")


def synth_psg(
    out_dir: str | Path,
    subjects: int,
    nights: int,
    fmt: str,
    hours: float = 9.0,
    seed: int = 0,
    progress: bool = True,
    compress: int = 1,
    record_hours: float | None = None,
    workers: int = 1,
    signals: str = "eeg",
) -> list[Path]:
    """Write ``subjects x nights`` synthetic recordings in ``fmt`` ("sleep-edf" | "physionet2018")
    of ``hours``-long nights, or ``compress``-times shorter excerpts with their stage proportions.
    ``record_hours`` (sleep-edf): pad each recording with wake to that length (0: no padding;
    None: :func:`default_record_hours`, i.e. SC-length 20-h files for full nights). ``workers`` > 1:
    nights are written by that many processes (the same files, byte for byte). ``signals``: "eeg" (EEG,
    EOG, chin EMG) or "psg" (the whole PSG: cardiorespiratory channels and events too, ``psg.py``)."""
    from ....console import progress as progress_display

    _check_arguments(subjects, nights, fmt, hours, compress, record_hours, workers)
    if signals not in SIGNAL_SETS:
        raise ValueError(f"--signals: unknown '{signals}'; available: {', '.join(SIGNAL_SETS)}")
    if record_hours is None:
        record_hours = default_record_hours(fmt, hours, compress)
    elif record_hours == 0:
        record_hours = None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    jobs = [
        RecordingJob(out, s, n, fmt, hours, seed, compress, record_hours, signals)
        for s in range(subjects)
        for n in range(nights)
    ]
    bar = {"desc": f"synth-psg {fmt}", "total": len(jobs), "disable": not progress}  # plain lines off a terminal
    if workers == 1 or len(jobs) == 1:
        done = [_synth_recording(job) for job in progress_display(jobs, **bar)]
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        with ProcessPoolExecutor(min(workers, len(jobs)), mp_context=multiprocessing.get_context(method)) as pool:
            done = list(progress_display(pool.map(_synth_recording, jobs), **bar))
    return [path for paths in done for path in paths]
