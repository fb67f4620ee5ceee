"""Sleep-disordered breathing for the synthetic cardiorespiratory night (:mod:`.cardioresp`).

Respiratory events follow the AASM 2012 scoring rules (Berry RB et al., "Rules for scoring respiratory
events in sleep: update of the 2007 AASM Manual", J Clin Sleep Med 8(5):597-619, 2012): an apnea is an
airflow drop >= 90 % for >= 10 s (obstructive: effort continues; central: effort absent; mixed: absent
first, then resumes), a hypopnea a drop >= 30 % for >= 10 s with a >= 3 % desaturation or an arousal
(rule 1A); a respiratory-effort-related arousal (RERA) flattens the flow less than a hypopnea while the
effort rises, and ends in an arousal. Events are planned on the hypnogram (sleep epochs only), then turned into slow control
signals at ``ctrl_hz`` (airway patency, breathing drive, thoraco-abdominal paradox, SpO2 deficit, heart
rate change, recovery hyperpnoea) that :mod:`.cardioresp` applies to its signals.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .stages import EPOCH_SECONDS

if TYPE_CHECKING:
    from .cardioresp import CardioTraits

OBSTRUCTIVE, CENTRAL, MIXED, HYPOPNEA, RERA = range(5)
EVENT_LABELS: tuple[str, ...] = (
    "resp_obstructiveapnea",
    "resp_centralapnea",
    "resp_mixedapnea",
    "resp_hypopnea",
    "arousal_rera",
)
"""Event kind code -> label of the PhysioNet/CinC 2018 ``.arousal`` annotation vocabulary (the first four
count in the AHI; a RERA is an effort-related arousal without apnea or hypopnea)."""

HYPOPNEA_SHARE = 0.72
"""Share of hypopneas among events: hypopnea index 11.5 of AHI 15.7 /h in 836 mild-moderate OSA patients
(Table 2 of "REM-related vs non-REM OSA", Intern Med 62(13):1907-1913, 2022/2023, PMC10372281; retrieved)."""
MIXED_SHARE_OF_APNEAS = 0.08
"""Share of mixed apneas among apneas. No source found: an assumption (mixed apneas are a minority)."""
STAGE_EVENT_WEIGHT = np.array([0.0, 1.0, 1.0, 0.3, 1.6])
"""Relative event rate per stage (W, N1, N2, N3, REM): none in wake; REM-AHI / NREM-AHI = 23.8 / 14.3 = 1.7
(same table, retrieved); N3 markedly lower (Ratnavadivel R et al., J Clin Sleep Med 5(6):519, 2009,
"Marked reduction in obstructive sleep apnea severity in slow wave sleep"; the factor 0.3 is from memory)."""
EVENT_SECONDS_MEDIAN = np.array([20.0, 19.0, 20.0, 18.0, 26.0])
"""Median event length per stage (s): desaturation durations 19.1 s in NREM vs 26.7 s in REM (abstract 392,
"Effect of OSA severity, sleep stage and position on patterns of oximetric desaturations and resaturations",
SLEEP supplement; authors and year not retrieved); mean event length 24.9 +- 6.2 s (PMC10372281 Table 2)."""
EVENT_SECONDS_SIGMA = 0.3
"""Log-normal spread of event lengths (assumption, giving ~ +-6 s around 20 s as in PMC10372281)."""
EVENT_SECONDS_RANGE = (12.0, 75.0)
"""Shortest and longest event (s): >= 10 s by the AASM rule, 12 s leaves a margin for measurement."""
MIN_GAP_SECONDS = 12.0
"""Free time after an event before the next may start (recovery breaths; assumption, no source)."""
APNEA_PATENCY = (0.0, 0.04)
"""Residual airflow fraction of an apnea (AASM: drop >= 90 %; ours 96-100 % for a measurement margin)."""
HYPOPNEA_PATENCY = (0.3, 0.5)
"""Residual airflow fraction of a hypopnea (AASM: drop >= 30 %; ours 50-70 %, assumption, leaving a margin for the erratic REM breathing)."""
RERA_PATENCY = (0.75, 0.9)
"""Airflow of a respiratory-effort-related arousal: flattened by 10-25 %, short of the hypopnea's 30 % (AASM 2012
RERA: increasing effort or flow flattening for >= 10 s ending in an arousal; the range is an assumption). The
flow stays at this level while the effort rises (``OBSTRUCTIVE_CRESCENDO``)."""
MIXED_CENTRAL_FRACTION = (0.3, 0.6)
"""Central (effortless) part of a mixed apnea, as a fraction of its length (assumption)."""
OBSTRUCTIVE_CRESCENDO = 0.3
"""Effort rises by this fraction across an obstructive apnea against the closed airway (the classic
crescendo; magnitude an assumption)."""
PARADOX_RAMP_SECONDS = 3.0
"""Time for the rib cage to swing from in-phase to fully out-of-phase with the abdomen after occlusion
(assumption; paradox itself: AASM 2012 obstructive apnea criteria)."""
DESAT_FALL_PER_S = 0.26
DESAT_RISE_PER_S = 0.44
"""SpO2 desaturation and resaturation slopes (%/s), 0.26 +- 0.02 and 0.44 +- 0.03 in 33 OSA patients
(abstract 392, SLEEP supplement, see above; retrieved). The fall here is scaled by the ventilation lost."""
REM_DESAT_FACTOR = 1.2
"""Deeper desaturations in REM (lower REM SpO2 nadir: PMC10372281 Table 2; "Apnoea-hypopnoea index during REM
and NREM sleep in obstructive sleep apnoea", 102 Japanese patients, 2008, authors and journal not retrieved:
longer apneas and lower SpO2 in REM; the factor is an assumption)."""
MAX_DESAT_PERCENT = 40.0
"""Cap of one event's desaturation (keeps SpO2 >= 50 %)."""
APNEA_BRADYCARDIA_BPM = 4.0
POST_EVENT_SURGE_BPM = 10.0
POST_EVENT_SURGE_PEAK_S = 5.0
"""Cyclical variation of heart rate: slowing during the event and a surge peaking a few seconds after it
ends (Guilleminault C et al., "Cyclical variation of the heart rate in sleep apnoea syndrome", Lancet
1984; magnitudes from memory)."""
AROUSAL_LAG_SECONDS = (0.0, 1.5)
"""Arousal onset after the event end (AASM associates an arousal ending the event; lag an assumption)."""
RECOVERY_GAIN = 0.9
RECOVERY_TAU_SECONDS = 6.0
"""Recovery hyperpnoea: tidal volume up by ``RECOVERY_GAIN`` x (ventilation lost) at the event end, decaying
with this time constant (assumption; 2-4 large breaths as seen on PSG)."""


@dataclass
class EventPlan:
    """Respiratory events of a night, each array ``(k,)`` sorted by onset."""

    onset: np.ndarray  # seconds
    duration: np.ndarray  # seconds
    kind: np.ndarray  # OBSTRUCTIVE / CENTRAL / MIXED / HYPOPNEA / RERA
    patency: np.ndarray  # residual airflow fraction while obstructed
    central_fraction: np.ndarray  # effortless leading part (1 central, 0 obstructive / hypopnea)
    stage: np.ndarray  # stage code at onset
    arousal: np.ndarray  # seconds, arousal onset ending the event

    @property
    def end(self) -> np.ndarray:
        """Event ends (s), ``(k,)``."""
        return self.onset + self.duration

    def labels(self) -> list[tuple[float, float, str]]:
        """``(onset s, duration s, label)`` of each event."""
        return [(float(o), float(d), EVENT_LABELS[k]) for o, d, k in zip(self.onset, self.duration, self.kind)]


def _draw_candidates(
    stages: np.ndarray, count: int, traits: CardioTraits, rng: np.random.Generator
) -> dict[str, np.ndarray]:
    """``count`` candidate events (arrays ``(count,)``) placed on sleep epochs by ``STAGE_EVENT_WEIGHT``."""
    weights = np.where((stages >= 0) & (stages < 5), STAGE_EVENT_WEIGHT[np.clip(stages, 0, 4)], 0.0)
    epoch = rng.choice(stages.size, size=count, p=weights / weights.sum())
    stage = stages[epoch]
    duration = EVENT_SECONDS_MEDIAN[stage] * rng.lognormal(0.0, EVENT_SECONDS_SIGMA, count)
    is_hypopnea = rng.random(count) < HYPOPNEA_SHARE
    apnea_kind = np.where(
        rng.random(count) < MIXED_SHARE_OF_APNEAS,
        MIXED,
        np.where(rng.random(count) < traits.central_share * (stage != 4), CENTRAL, OBSTRUCTIVE),
    )
    kind = np.where(is_hypopnea, HYPOPNEA, apnea_kind)
    central_fraction = np.select(
        [kind == CENTRAL, kind == MIXED], [1.0, rng.uniform(*MIXED_CENTRAL_FRACTION, count)], default=0.0
    )
    return {
        "onset": (epoch + rng.random(count)) * EPOCH_SECONDS,
        "duration": np.clip(duration, *EVENT_SECONDS_RANGE),
        "kind": kind,
        "patency": np.where(is_hypopnea, rng.uniform(*HYPOPNEA_PATENCY, count), rng.uniform(*APNEA_PATENCY, count)),
        "central_fraction": central_fraction,
        "stage": stage,
        "lag": rng.uniform(*AROUSAL_LAG_SECONDS, count),
    }


def _accept(candidates: dict[str, np.ndarray], stages: np.ndarray, seconds: float, wanted: int) -> np.ndarray:
    """Indices of the first ``wanted`` candidates (in draw order) that lie wholly inside sleep epochs and keep
    ``MIN_GAP_SECONDS`` from every accepted one; sorted by onset."""
    awake_before = np.concatenate([[0], np.cumsum((stages < 1) | (stages > 4))])  # wake epochs before epoch i
    starts: list[float] = []
    ends: list[float] = []
    chosen: list[int] = []
    for index, (onset, duration) in enumerate(zip(candidates["onset"], candidates["duration"])):
        end = onset + duration
        first, last = int(onset // EPOCH_SECONDS), int(end // EPOCH_SECONDS)
        if end + MIN_GAP_SECONDS > seconds or last >= stages.size or awake_before[last + 1] > awake_before[first]:
            continue
        slot = bisect.bisect_left(starts, onset)
        if slot > 0 and ends[slot - 1] + MIN_GAP_SECONDS > onset:
            continue
        if slot < len(starts) and end + MIN_GAP_SECONDS > starts[slot]:
            continue
        starts.insert(slot, onset)
        ends.insert(slot, end)
        chosen.insert(slot, index)
        if len(chosen) == wanted:
            break
    return np.asarray(chosen, dtype=int)


def plan_events(stages: np.ndarray, seconds: float, traits: CardioTraits, rng: np.random.Generator) -> EventPlan:
    """Respiratory events for per-epoch ``stages`` ``(e,)`` over ``seconds``: round(AHI x hours of sleep)
    apneas / hypopneas and round(RERA index x hours) RERAs (fewer RERAs, then fewer events, only when the
    sleep time cannot hold them), none in wake or unscored epochs."""
    stages = np.asarray(stages[: int(np.ceil(seconds / EPOCH_SECONDS))], dtype=int)
    sleep_hours = float(((stages >= 1) & (stages <= 4)).sum()) * EPOCH_SECONDS / 3600.0
    apneas_hypopneas, reras = int(round(traits.ahi * sleep_hours)), int(round(traits.rera_index * sleep_hours))
    wanted = apneas_hypopneas + reras
    candidates = _draw_candidates(stages, 8 * wanted + 32, traits, rng)
    keep = _accept(candidates, stages, seconds, wanted) if wanted else np.zeros(0, dtype=int)
    picked = {name: values[keep] for name, values in candidates.items()}
    lag = picked.pop("lag")
    as_rera = rng.permutation(keep.size) < keep.size - apneas_hypopneas  # the AHI events come first when short
    picked["kind"][as_rera] = RERA
    picked["patency"][as_rera] = rng.uniform(*RERA_PATENCY, int(as_rera.sum()))
    picked["central_fraction"][as_rera] = 0.0
    return EventPlan(**picked, arousal=picked["onset"] + picked["duration"] + lag)


def _spans(onset: float, end: float, ctrl_hz: float, n: int) -> slice:
    """Control-grid samples of ``[onset, end)``."""
    return slice(min(n, int(round(onset * ctrl_hz))), min(n, int(round(end * ctrl_hz))))


def airway_controls(plan: EventPlan, n: int, ctrl_hz: float) -> dict[str, np.ndarray]:
    """Per-control-sample ``(n,)`` arrays: ``patency`` (airflow fraction passing the upper airway),
    ``drive`` (breathing effort, 0 in central parts, crescendo in obstructed parts) and ``paradox``
    (0 in phase ... 1 rib cage fully out of phase with the abdomen)."""
    patency, drive, paradox = np.ones(n), np.ones(n), np.zeros(n)
    for onset, duration, kind, residual, central in zip(
        plan.onset, plan.duration, plan.kind, plan.patency, plan.central_fraction
    ):
        effort_start = onset + central * duration
        patency[_spans(onset, onset + duration, ctrl_hz, n)] = residual if kind != CENTRAL else 1.0
        drive[_spans(onset, effort_start, ctrl_hz, n)] = 0.0
        obstructed = _spans(effort_start, onset + duration, ctrl_hz, n)
        elapsed = np.arange(obstructed.stop - obstructed.start) / ctrl_hz
        if kind in (OBSTRUCTIVE, MIXED, RERA) and elapsed.size:
            drive[obstructed] = 1.0 + OBSTRUCTIVE_CRESCENDO * elapsed / max(elapsed[-1], 1e-9)
        if kind in (OBSTRUCTIVE, MIXED) and elapsed.size:
            paradox[obstructed] = np.clip(elapsed / PARADOX_RAMP_SECONDS, 0.0, 1.0)
        if kind == RERA:  # flow limited: the rising effort meets a narrowing airway, flow stays flat
            patency[obstructed] = residual / drive[obstructed]
    return {"patency": patency, "drive": drive, "paradox": paradox}


def ventilation_lost(plan: EventPlan) -> np.ndarray:
    """Fraction of ventilation lost during each event ``(k,)`` (1 for apneas)."""
    return np.where((plan.kind == HYPOPNEA) | (plan.kind == RERA), 1.0 - plan.patency, 1.0)


def desaturation(plan: EventPlan, traits: CardioTraits, n: int, ctrl_hz: float) -> np.ndarray:
    """SpO2 deficit (percentage points, ``(n,)``): each event falls from onset + circulation delay at
    ``DESAT_FALL_PER_S`` x ventilation lost x the subject's scale, reaches its nadir at end + delay
    (after the event ends) and recovers at ``DESAT_RISE_PER_S``."""
    deficit = np.zeros(n)
    slope = DESAT_FALL_PER_S * ventilation_lost(plan) * traits.desat_scale
    slope = slope * np.where(plan.stage == 4, REM_DESAT_FACTOR, 1.0)
    depth = np.minimum(slope * plan.duration, MAX_DESAT_PERCENT)
    for onset, duration, fall, bottom in zip(plan.onset, plan.duration, slope, depth):
        start = onset + traits.circulation_delay_s
        rise_seconds = bottom / (DESAT_RISE_PER_S * traits.desat_scale)
        span = _spans(start, start + duration + rise_seconds, ctrl_hz, n)
        elapsed = np.arange(span.stop - span.start) / ctrl_hz
        profile = np.where(elapsed <= duration, fall * elapsed, bottom - DESAT_RISE_PER_S * (elapsed - duration))
        deficit[span] += np.clip(np.minimum(profile, bottom), 0.0, None)
    return np.minimum(deficit, MAX_DESAT_PERCENT)


def heart_rate_change(plan: EventPlan, n: int, ctrl_hz: float) -> np.ndarray:
    """Heart-rate change (bpm, ``(n,)``): slowing through each event, then a surge peaking
    ``POST_EVENT_SURGE_PEAK_S`` after its end (alpha function), scaled by the ventilation lost."""
    change = np.zeros(n)
    lost = ventilation_lost(plan)
    surge_seconds = 6 * POST_EVENT_SURGE_PEAK_S
    for onset, end, weight in zip(plan.onset, plan.end, lost):
        during = _spans(onset, end, ctrl_hz, n)
        change[during] -= APNEA_BRADYCARDIA_BPM * weight * np.linspace(0.0, 1.0, during.stop - during.start)
        after = _spans(end, end + surge_seconds, ctrl_hz, n)
        x = np.arange(after.stop - after.start) / ctrl_hz / POST_EVENT_SURGE_PEAK_S
        change[after] += POST_EVENT_SURGE_BPM * (0.5 + 0.5 * weight) * x * np.exp(1.0 - x)
    return change


def recovery_gain(plan: EventPlan, n: int, ctrl_hz: float) -> np.ndarray:
    """Tidal-volume multiplier ``(n,)`` of the recovery breaths after each event (1 elsewhere)."""
    gain = np.ones(n)
    for end, lost in zip(plan.end, ventilation_lost(plan)):
        after = _spans(end, end + 5 * RECOVERY_TAU_SECONDS, ctrl_hz, n)
        elapsed = np.arange(after.stop - after.start) / ctrl_hz
        gain[after] += RECOVERY_GAIN * lost * np.exp(-elapsed / RECOVERY_TAU_SECONDS)
    return gain
