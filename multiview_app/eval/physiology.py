"""Per-stage cardiorespiratory physiology of one night beside published ranges.

Works on any night given as signals + hypnogram (the synthetic :class:`~multiview_app.data.eeg.cardioresp.
CardioRespNight` or channels read from PhysioNet 2018 / Sleep-EDF files): for each stage, over its bouts of at
least ``MIN_BOUT_MINUTES``, heart rate, RMSSD and LF/HF from NeuroKit2 (``ecg_peaks`` + ``hrv_time`` /
``hrv_frequency``), breathing rate and breath-interval variability (``rsp_clean`` + ``rsp_peaks`` + ``rsp_rate``), the SpO2 baseline and the
respiratory events per hour; each value comes with its published range, source and an out-of-range flag.
NeuroKit2 is imported on first use (an optional dependency).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..data.eeg.stages import EPOCH_SECONDS, STAGES

MIN_BOUT_MINUTES = 5.0
"""Shortest stage bout analysed (HRV frequency measures need >= 2-5 min; Task Force of the ESC and NASPE,
"Heart rate variability: standards of measurement", Circulation 93:1043-1065, 1996: 5-min short-term records)."""


@dataclass(frozen=True)
class PublishedRange:
    """A healthy-adult range of one measure in one stage and where it comes from."""

    low: float
    high: float
    source: str


_ALL = ("W", "N1", "N2", "N3", "REM")
_HR = "Trinder J et al., J Sleep Res 10:253, 2001; Cajochen C et al., Physiol Behav 1994 (ordering); ranges from memory"
_RMSSD = "Herzig D et al., Front Physiol 8:1100, 2018 (young men, by stage); Umetani K et al., JACC 31:593, 1998 (age); ranges from memory"
_LFHF = "Bonnet MH, Arand DL, Electroencephalogr Clin Neurophysiol 102:390, 1997; Busek P et al., Physiol Res 54:369, 2005; ranges from memory"
_RATE = "normal adult resting rate 12-20 /min; Douglas NJ et al., Thorax 37:840, 1982 (sleep faster than wake)"
_CV = "Gould GA et al., Am Rev Respir Dis 138:874, 1988 (REM irregular, NREM regular); ranges from memory"
_SPO2 = (
    "Stradling JR et al., Thorax 40:364, 1985 (means 96.2-97.3 % awake / SWS / REM in normal men); range from memory"
)
_AHI = "AASM normal AHI < 5 /h (Berry RB et al., J Clin Sleep Med 8:597, 2012)"
PUBLISHED_RANGES: dict[str, dict[str, PublishedRange]] = {
    "heart_rate_bpm": {
        stage: PublishedRange(low, high, _HR)
        for stage, (low, high) in zip(_ALL, [(55, 80), (52, 78), (48, 72), (46, 70), (50, 76)])
    },
    "rmssd_ms": {
        stage: PublishedRange(low, high, _RMSSD)
        for stage, (low, high) in zip(_ALL, [(15, 70), (18, 80), (20, 90), (20, 100), (15, 75)])
    },
    "lf_hf": {
        stage: PublishedRange(low, high, _LFHF)
        for stage, (low, high) in zip(_ALL, [(0.5, 4.0), (0.4, 3.0), (0.25, 2.0), (0.1, 1.2), (0.6, 4.5)])
    },
    "breathing_rate_per_min": {stage: PublishedRange(12.0, 20.0, _RATE) for stage in _ALL},
    "breath_interval_cv": {
        stage: PublishedRange(low, high, _CV)
        for stage, (low, high) in zip(_ALL, [(0.08, 0.35), (0.06, 0.30), (0.04, 0.20), (0.02, 0.15), (0.10, 0.40)])
    },
    "spo2_baseline_percent": {stage: PublishedRange(94.0, 99.0, _SPO2) for stage in _ALL},
    "events_per_hour": {stage: PublishedRange(0.0, 5.0, _AHI) for stage in _ALL[1:]},
}
"""Measure -> stage name -> published healthy-adult range (what each range rests on is in its ``source``)."""


@dataclass
class PhysiologyRow:
    """One measure in one stage: the value (mean over the stage's bouts, weighted by length) and its range."""

    stage: str
    measure: str
    value: float
    low: float
    high: float
    source: str
    minutes: float  # analysed time

    @property
    def flag(self) -> str:
        """``""`` inside the range, else ``"LOW"`` / ``"HIGH"`` (``"n/a"`` when not measurable)."""
        if not np.isfinite(self.value):
            return "n/a"
        return "LOW" if self.value < self.low else "HIGH" if self.value > self.high else ""


def stage_bouts(stages: np.ndarray, min_minutes: float = MIN_BOUT_MINUTES) -> list[tuple[int, float, float]]:
    """``(stage, start s, stop s)`` of every run of one stage in per-epoch ``stages`` ``(e,)`` lasting at least
    ``min_minutes`` (stage codes 0 .. 4 only)."""
    stages = np.asarray(stages, dtype=int)
    edges = np.flatnonzero(np.diff(stages) != 0) + 1
    starts, stops = np.concatenate([[0], edges]), np.concatenate([edges, [stages.size]])
    return [
        (int(stages[a]), a * EPOCH_SECONDS, b * EPOCH_SECONDS)
        for a, b in zip(starts, stops)
        if 0 <= stages[a] < len(STAGES) and (b - a) * EPOCH_SECONDS >= min_minutes * 60.0
    ]


def r_peaks(ecg: np.ndarray, fs: float) -> np.ndarray:
    """Sample indices of the R peaks of an ECG segment ``(n,)`` (NeuroKit2 ``ecg_peaks``, default method)."""
    import neurokit2 as nk

    _, info = nk.ecg_peaks(ecg, sampling_rate=int(round(fs)))
    return np.asarray(info["ECG_R_Peaks"])


def breaths(effort: np.ndarray, fs: float) -> tuple[np.ndarray, dict]:
    """A breathing-effort segment ``(n,)`` cleaned (NeuroKit2 ``rsp_clean``) and its peaks and troughs
    (``rsp_peaks`` info: ``RSP_Peaks``, ``RSP_Troughs`` sample indices)."""
    import neurokit2 as nk

    cleaned = nk.rsp_clean(effort, sampling_rate=int(round(fs)))
    _, info = nk.rsp_peaks(cleaned, sampling_rate=int(round(fs)))
    return cleaned, info


def _heart_measures(ecg: np.ndarray, fs: float) -> dict[str, float]:
    """Heart rate (bpm), RMSSD (ms) and LF/HF of an ECG segment ``(n,)``."""
    import neurokit2 as nk

    peaks = r_peaks(ecg, fs)
    if peaks.size < 30:
        return {"heart_rate_bpm": np.nan, "rmssd_ms": np.nan, "lf_hf": np.nan}
    time_domain = nk.hrv_time(peaks, sampling_rate=int(round(fs)))
    frequency = nk.hrv_frequency(peaks, sampling_rate=int(round(fs)))
    return {
        "heart_rate_bpm": 60000.0 / float(time_domain["HRV_MeanNN"].iloc[0]),
        "rmssd_ms": float(time_domain["HRV_RMSSD"].iloc[0]),
        "lf_hf": float(frequency["HRV_LFHF"].iloc[0]),
    }


def _breathing_measures(effort: np.ndarray, fs: float) -> dict[str, float]:
    """Breathing rate (/min) and coefficient of variation of breath intervals of an effort segment ``(n,)``."""
    import neurokit2 as nk

    rate = int(round(fs))
    cleaned, info = breaths(effort, fs)
    breaths_per_min = nk.rsp_rate(cleaned, troughs=info, sampling_rate=rate)
    intervals = np.diff(np.asarray(info["RSP_Troughs"])) / fs
    return {
        "breathing_rate_per_min": float(np.nanmean(breaths_per_min)),
        "breath_interval_cv": float(intervals.std() / intervals.mean()) if intervals.size > 2 else np.nan,
    }


def breathing_effort(signals: Mapping[str, np.ndarray]) -> np.ndarray | None:
    """Breathing effort: CHEST + ABD, else whichever of ABD / CHEST / AIRFLOW is there (``None`` if none)."""
    if "CHEST" in signals and "ABD" in signals:
        return np.asarray(signals["CHEST"], dtype=float) + np.asarray(signals["ABD"], dtype=float)
    present = [name for name in ("ABD", "CHEST", "AIRFLOW") if name in signals]
    return np.asarray(signals[present[0]], dtype=float) if present else None


def bout_measures(signals: Mapping[str, np.ndarray], fs: float, start: float, stop: float) -> dict[str, float]:
    """The cardiorespiratory measures of ``[start, stop)`` seconds of the signals (each ``(n,)`` at ``fs``)."""
    window = slice(int(start * fs), int(stop * fs))
    measures: dict[str, float] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NeuroKit2's notes on short records / default methods
        if "ECG" in signals:
            measures.update(_heart_measures(np.asarray(signals["ECG"][window], dtype=float), fs))
        effort = breathing_effort(signals)
        if effort is not None:
            measures.update(_breathing_measures(effort[window], fs))
    if "SaO2" in signals:
        measures["spo2_baseline_percent"] = float(np.median(signals["SaO2"][window]))
    return measures


def _event_rates(
    stages: np.ndarray, events: Sequence[tuple[float, float, str]], sleep_codes: range
) -> dict[int, float]:
    """Respiratory events (labels ``resp_*``) per hour of each sleep stage present (by onset epoch)."""
    stages = np.asarray(stages, dtype=int)
    onsets = np.array([onset for onset, _, label in events if label.startswith("resp_")], dtype=float)
    epochs = np.clip((onsets // EPOCH_SECONDS).astype(int), 0, max(stages.size - 1, 0))
    hours = {code: float((stages == code).sum()) * EPOCH_SECONDS / 3600.0 for code in sleep_codes}
    return {code: float((stages[epochs] == code).sum()) / hours[code] for code in sleep_codes if hours[code] > 0}


def physiology_table(
    signals: Mapping[str, np.ndarray],
    fs: float,
    stages: np.ndarray,
    events: Sequence[tuple[float, float, str]] = (),
    min_minutes: float = MIN_BOUT_MINUTES,
) -> list[PhysiologyRow]:
    """Rows (stage, measure) of the night's per-stage physiology beside :data:`PUBLISHED_RANGES`: ``signals``
    any of "ECG", "CHEST", "ABD", "AIRFLOW", "SaO2" (each ``(n,)`` at ``fs``), ``stages`` per 30-s epoch ``(e,)``
    (0 W .. 4 REM), ``events`` ``(onset s, duration s, label)`` (PhysioNet 2018 labels; ``resp_*`` counted)."""
    per_stage: dict[int, list[tuple[float, dict[str, float]]]] = {}
    for code, start, stop in stage_bouts(stages, min_minutes):
        per_stage.setdefault(code, []).append((stop - start, bout_measures(signals, fs, start, stop)))
    rows = []
    for code, bouts in sorted(per_stage.items()):
        weights = np.array([length for length, _ in bouts])
        for measure in bouts[0][1]:
            values = np.array([found.get(measure, np.nan) for _, found in bouts])
            ok = np.isfinite(values)
            value = float(np.average(values[ok], weights=weights[ok])) if ok.any() else np.nan
            rows.append(_row(STAGES[code], measure, value, float(weights.sum()) / 60.0))
    if events or any(name in signals for name in ("AIRFLOW", "CHEST", "ABD")):
        for code, rate in _event_rates(stages, events, range(1, len(STAGES))).items():
            rows.append(_row(STAGES[code], "events_per_hour", rate, float((np.asarray(stages) == code).sum()) / 2))
    return rows


def _row(stage: str, measure: str, value: float, minutes: float) -> PhysiologyRow:
    reference = PUBLISHED_RANGES[measure][stage]
    return PhysiologyRow(stage, measure, value, reference.low, reference.high, reference.source, minutes)


def format_table(rows: Sequence[PhysiologyRow]) -> str:
    """Plain-text table of ``rows`` (one line each: stage, measure, value, range, flag)."""
    lines = [f"{'stage':<5} {'measure':<24} {'value':>8} {'range':>15} {'min':>6}  flag"]
    for row in rows:
        span = f"{row.low:g}-{row.high:g}"
        lines.append(f"{row.stage:<5} {row.measure:<24} {row.value:>8.2f} {span:>15} {row.minutes:>6.1f}  {row.flag}")
    return "\n".join(lines)
