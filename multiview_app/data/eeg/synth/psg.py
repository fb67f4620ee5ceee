"""Whole-PSG nights (``synth-psg --signals psg``): the bridge to the cardiorespiratory generator
(``data/eeg/cardioresp.py``: ECG, effort belts, airflow, SaO2 and sleep-disordered breathing on a
hypnogram) and what the format writers make of it: the PhysioNet 2018 channels and units, the
``.arousal`` event notes, the ``-arousal.mat`` per-sample arousal targets and Sleep-EDF's 1 Hz oro-nasal
respiration. EEG-only nights (``--signals eeg``) never import or draw anything here."""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from ..stages import EPOCH_SECONDS
from .parameters import SIDE_STREAMS, side_stream

if TYPE_CHECKING:
    from ..cardioresp import CardioRespNight, CardioTraits

SIGNAL_SETS = ("eeg", "psg")
"""``synth_psg(signals=)`` / ``--signals``: EEG, EOG and chin EMG only, or the whole PSG."""
ARBITRARY_UNIT = "NU"
"""Unit of the signals without a physical scale (effort belts, airflow); read as arbitrary."""
PHYSIONET_PSG_CHANNELS = ("ABD", "CHEST", "AIRFLOW", "SaO2", "ECG")
"""Cardiorespiratory channels of a PhysioNet 2018 record, in the challenge's order, after the EEG, EOG and
chin EMG (F3-M2, F4-M1, C3-M2, C4-M1, O1-M2, O2-M1, E1-M2, Chin1-Chin2)."""
PSG_UNITS = {"ABD": ARBITRARY_UNIT, "CHEST": ARBITRARY_UNIT, "AIRFLOW": ARBITRARY_UNIT, "SaO2": "%", "ECG": "mV"}
"""Unit of each cardiorespiratory channel (the brain channels are in uV)."""
SLEEP_EDF_RESP_CHANNEL = "Resp oro-nasal"
SLEEP_EDF_RESP_HZ = 1.0
"""Sleep-EDF SC's oro-nasal respiration channel and its rate: the airflow averaged over each second."""
APNEA_HYPOPNEA_LABELS = ("resp_obstructiveapnea", "resp_centralapnea", "resp_mixedapnea", "resp_hypopnea")
"""Events the PhysioNet 2018 challenge left unscored in ``data/arousals`` (-1)."""
AROUSAL_PREFIX = "arousal_"
"""Labels of target arousals (1 in ``data/arousals``): ``arousal_rera``, ``arousal_spontaneous``, ..."""
SPONTANEOUS_AROUSAL = "arousal_spontaneous"
"""Label of the brain generator's own (not respiratory) arousals."""


def cardioresp_module() -> ModuleType:
    """The cardiorespiratory generator (imported on first use, so EEG-only synthesis does not need it)."""
    from importlib import import_module

    try:  # through sys.modules (not the package attribute), so a stand-in module registered there is used
        cardioresp = import_module(f"{__package__.rsplit('.', 1)[0]}.cardioresp")
    except ImportError as error:
        raise ImportError(
            "synth-psg --signals psg: the cardiorespiratory generator multiview_app.data.eeg.cardioresp "
            f"is not available ({error})"
        ) from error
    return cardioresp


def draw_cardio_traits(seed: int, subject: int, cohort: str) -> CardioTraits:
    """The subject's cardiorespiratory traits, from the ``cardio_traits`` side stream of the subject's
    ``default_rng([seed, subject])`` (the EEG traits' draws keep their values)."""
    rng = side_stream(np.random.default_rng([seed, subject]), SIDE_STREAMS["cardio_traits"])
    return cardioresp_module().cardio_traits(rng, cohort)


def cardiorespiratory_night(
    stages: np.ndarray, fs: float, traits: CardioTraits, rng: np.random.Generator
) -> CardioRespNight:
    """The cardiorespiratory signals ``(n,)`` (``n = e * 30 s * fs``) and events of the hypnogram ``stages (e,)``,
    drawn from the ``cardiorespiratory`` side stream of the night's ``rng`` (no draw from ``rng`` itself)."""
    own = side_stream(rng, SIDE_STREAMS["cardiorespiratory"])
    night = cardioresp_module().synth_cardiorespiratory(stages, fs, stages.size * EPOCH_SECONDS, traits, own)
    n = int(stages.size * EPOCH_SECONDS * fs)
    for name in PHYSIONET_PSG_CHANNELS:
        if name not in night.signals:
            raise ValueError(f"synth-psg --signals psg: the cardiorespiratory night has no channel {name!r}")
        if night.signals[name].shape != (n,):
            raise ValueError(
                f"synth-psg --signals psg: channel {name!r} has shape {night.signals[name].shape}, expected ({n},)"
            )
    return night


def physionet_psg_signals(
    brain: dict[str, np.ndarray], cardio: CardioRespNight
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The whole PSG record: the ``brain`` channels (uV) then :data:`PHYSIONET_PSG_CHANNELS`, each ``(n,)``,
    and every channel's unit."""
    signals = {**brain, **{name: cardio.signals[name] for name in PHYSIONET_PSG_CHANNELS}}
    return signals, {name: PSG_UNITS.get(name, "uV") for name in signals}


def oro_nasal_respiration(airflow: np.ndarray, fs: float) -> np.ndarray:
    """Sleep-EDF's 1 Hz oro-nasal channel ``(n / fs,)`` from ``airflow (n,)`` at ``fs``: the mean of each second."""
    per_second = int(round(fs / SLEEP_EDF_RESP_HZ))
    if airflow.size % per_second:
        raise ValueError(f"synth-psg: AIRFLOW of {airflow.size} samples is not whole seconds at {fs} Hz")
    return airflow.reshape(-1, per_second).mean(axis=1)


def _merge_same_label(events: list[tuple[float, float, str]]) -> list[tuple[float, float, str]]:
    """``events`` ``[(onset s, duration s, label)]`` sorted, overlapping events of one label merged (so that
    every ``"(label"`` note pairs with the next ``"label)"``)."""
    merged: list[tuple[float, float, str]] = []
    for onset, duration, label in sorted(events, key=lambda e: (e[2], e[0])):
        if merged and merged[-1][2] == label and onset <= merged[-1][0] + merged[-1][1]:
            first = merged[-1][0]
            merged[-1] = (first, max(merged[-1][1], onset + duration - first), label)
        else:
            merged.append((onset, duration, label))
    return sorted(merged)


def night_events(
    respiratory: list[tuple[float, float, str]], spontaneous: list[tuple[int, int]], fs: float
) -> list[tuple[float, float, str]]:
    """The night's scored events ``[(onset s, duration s, label)]``: the cardiorespiratory generator's
    ``respiratory`` ones and the brain's ``spontaneous`` arousals ``[(start sample, length)]`` as
    :data:`SPONTANEOUS_AROUSAL`, overlaps of one label merged."""
    own = [(start / fs, length / fs, SPONTANEOUS_AROUSAL) for start, length in spontaneous]
    return _merge_same_label(list(respiratory) + own)


def _sample_span(onset: float, duration: float, n: int, fs: float) -> tuple[int, int]:
    """Onset sample and end sample (the first after the event) of an event, both inside ``[0, n - 1]``."""
    start = min(max(int(round(onset * fs)), 0), n - 1)
    return start, min(max(int(round((onset + duration) * fs)), start), n - 1)


def event_notes(events: list[tuple[float, float, str]], n: int, fs: float) -> list[tuple[int, str]]:
    """``.arousal`` aux notes of ``events``: ``"(label"`` at each onset sample, ``"label)"`` at the end."""
    notes = []
    for onset, duration, label in events:
        start, end = _sample_span(onset, duration, n, fs)
        notes += [(start, f"({label}"), (end, f"{label})")]
    return notes


def arousal_targets(events: list[tuple[float, float, str]], n: int, fs: float) -> np.ndarray:
    """The challenge's per-sample ``data/arousals`` ``(n,)`` int8: 1 from the onset to the end note of each
    target arousal (labels starting with :data:`AROUSAL_PREFIX`), -1 over apneas / hypopneas (unscored; they
    win where both), 0 elsewhere."""
    targets = np.zeros(n, dtype=np.int8)
    arousals = [e for e in events if e[2].startswith(AROUSAL_PREFIX)]
    unscored = [e for e in events if e[2] in APNEA_HYPOPNEA_LABELS]
    for value, chosen in ((1, arousals), (-1, unscored)):
        for onset, duration, _ in chosen:
            start, end = _sample_span(onset, duration, n, fs)
            targets[start:end] = value
    return targets
