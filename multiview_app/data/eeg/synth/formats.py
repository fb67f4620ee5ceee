"""One synthetic night per real format: Sleep-EDF SC (EDF PSG + hypnogram, optional SC-length wake
padding) and PhysioNet 2018 (WFDB record with stage and arousal notes); :data:`WRITERS` maps the
``synth-psg --format`` names to them and :data:`WRITER_COHORT` to their subject populations."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..stages import EPOCH_SECONDS, EXCLUDED, PHYSIONET2018_EEG
from .brain import SyntheticNight, synth_night
from .hypnogram import night_hypnogram
from .parameters import N1, N2, N3, REM, SIDE_STREAMS, SubjectTraits, W, side_stream
from .psg import (
    PSG_UNITS,
    SLEEP_EDF_RESP_CHANNEL,
    SLEEP_EDF_RESP_HZ,
    arousal_targets,
    cardiorespiratory_night,
    event_notes,
    night_events,
    oro_nasal_respiration,
    physionet_psg_signals,
)
from .writers import DEFAULT_START, hypnogram_annotations, write_arousal_mat, write_edf, write_wfdb_record

if TYPE_CHECKING:
    from ..cardioresp import CardioTraits

SLEEP_EDF_SYNTH_CHANNELS = ["EEG Fpz-Cz", "EEG Pz-Oz", "EOG horizontal", "EMG submental"]
SC_RECORD_HOURS = 20.0
"""Length of Sleep-EDF SC recordings (day-night, mostly wake around the night; ~20 h per the issue,
not checked against the SC documentation): full synthetic Sleep-EDF nights are padded to it."""
SC_PADDING_BEFORE = 0.6
"""Share of the wake padding placed before the night (the rest after): an assumption."""
SC_MIN_NIGHT_HOURS = 6.0
"""Shortest night padded by default: from 6 h on, the wake before sleep and after the final
awakening is >= 35 min (``synth_hypnogram``), so the readers' 30-min crop (plus the 1-min filter
margin) lies inside the night and the padding is cropped away without touching a window."""


def default_record_hours(fmt: str, hours: float, compress: int) -> float | None:
    """Recording length when ``--record-hours`` is not given: :data:`SC_RECORD_HOURS` for full
    Sleep-EDF nights of at least :data:`SC_MIN_NIGHT_HOURS`, else None (no padding; a compressed
    excerpt's wake is all inside the readers' crop, so padding would add windows)."""
    if fmt == "sleep-edf" and compress == 1 and SC_MIN_NIGHT_HOURS <= hours < SC_RECORD_HOURS:
        return SC_RECORD_HOURS
    return None


def _wake_padding(
    night: SyntheticNight, epochs: int, traits: SubjectTraits, rng: np.random.Generator, mains_hz: float
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """``epochs`` of wake (own random stream ``rng``) for every channel of ``night``, each clipped to
    the night's range (an amplifier's range; keeps the night's EDF scaling, hence its digital
    values), and their labels with "Movement time" epochs as in the night."""
    padding = synth_night(
        list(night.signals), 0.0, night.fs, traits, rng, mains_hz=mains_hz, stages=np.full(epochs, W, dtype=np.int64)
    )
    signals = {c: np.clip(x, night.signals[c].min(), night.signals[c].max()) for c, x in padding.signals.items()}
    labels = padding.stages.copy()
    labels[rng.random(epochs) < 0.03] = EXCLUDED
    return signals, labels


def _sleep_edf_cardio(
    stages: np.ndarray, pad: int, before: int, fs: float, cardio_traits: CardioTraits | None, rng: np.random.Generator
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Whole-PSG part of a Sleep-EDF recording (None, None without ``cardio_traits``): the 1 Hz oro-nasal
    respiration of the night ``stages (e,)`` with ``pad`` wake epochs (``before`` of them first), and the
    night's respiratory arousal onsets (seconds from the night's start)."""
    if cardio_traits is None:
        return None, None
    padded = np.concatenate([np.full(before, W), stages, np.full(pad - before, W)])
    cardio = cardiorespiratory_night(padded, fs, cardio_traits, rng)
    return oro_nasal_respiration(cardio.signals["AIRFLOW"], fs), cardio.arousal_onsets - before * EPOCH_SECONDS


def _sleep_edf_channels(
    signals: dict[str, np.ndarray], fs: float, respiration: np.ndarray | None
) -> dict[str, tuple[np.ndarray, float]]:
    """The PSG file's channels in Sleep-EDF SC order, label -> (samples, rate): EEG and EOG at ``fs``, the
    oro-nasal ``respiration`` at 1 Hz when given, the submental EMG as its 1 Hz RMS envelope."""
    channels = {c: (signals[c], fs) for c in ("EEG Fpz-Cz", "EEG Pz-Oz", "EOG horizontal")}
    if respiration is not None:
        channels[SLEEP_EDF_RESP_CHANNEL] = (respiration, SLEEP_EDF_RESP_HZ)
    emg = signals["EMG submental"]
    channels["EMG submental"] = (np.sqrt((emg.reshape(-1, int(fs)) ** 2).mean(axis=1)), 1.0)
    return channels


def write_sleep_edf_night(
    out_dir: Path,
    subject: int,
    night: int,
    hours: float,
    traits: SubjectTraits,
    rng: np.random.Generator,
    compress: int = 1,
    record_hours: float | None = None,
    provenance: str = "",
    cardio_traits: CardioTraits | None = None,
) -> tuple[list[Path], np.ndarray]:
    """SC4ssN E0-PSG.edf (EEG Fpz-Cz, Pz-Oz, EOG at 100 Hz; EMG submental as 1 Hz RMS envelope, as
    in Sleep-EDF SC) + SC4ssN E<scorer>-Hypnogram.edf. Returns the paths and the true stages.
    ``record_hours`` > the night: wake padding (``SC_PADDING_BEFORE`` of it before the night, the
    rest after; own random stream) makes an SC-length day-night recording; the header start moves
    back by the padding before, and the night's samples, labels and EDF scaling are unchanged.
    ``cardio_traits`` (whole PSG): a 1 Hz "Resp oro-nasal" channel too, and EEG arousals / chin-EMG
    bursts at the ends of respiratory events (own random streams; the other channels' draws unchanged)."""
    fs = 100.0
    stages = night_hypnogram(hours, compress, traits, rng)
    pad = max(0, int(round((record_hours or 0.0) * 3600 / EPOCH_SECONDS)) - stages.size)
    before = int(round(SC_PADDING_BEFORE * pad))
    respiration, onsets = _sleep_edf_cardio(stages, pad, before, fs, cardio_traits, rng)
    night_data = synth_night(SLEEP_EDF_SYNTH_CHANNELS, hours, fs, traits, rng, stages=stages, arousal_onsets=onsets)
    stages = night_data.stages.copy()
    movement = np.flatnonzero((stages == W) & (rng.random(stages.size) < 0.03))
    stages[movement] = EXCLUDED  # scored as "Movement time"
    signals = dict(night_data.signals)
    if pad:
        extra, labels = _wake_padding(night_data, pad, traits, side_stream(rng, SIDE_STREAMS["day_padding"]), 50.0)
        cut = before * int(EPOCH_SECONDS * fs)
        signals = {c: np.concatenate([extra[c][:cut], x, extra[c][cut:]]) for c, x in signals.items()}
        stages = np.concatenate([labels[:before], stages, labels[before:]])
    name = f"SC4{subject:02d}{night + 1}"
    start = DEFAULT_START + dt.timedelta(days=3 * subject + night, seconds=-before * EPOCH_SECONDS)
    header = {"start": start, "patient": f"SC4{subject:02d}", "recording_additional": provenance}
    psg = out_dir / f"{name}E0-PSG.edf"
    hyp = out_dir / f"{name}E{'CHJMPRVW'[subject % 8]}-Hypnogram.edf"
    units = {SLEEP_EDF_RESP_CHANNEL: PSG_UNITS["AIRFLOW"]}
    write_edf(psg, _sleep_edf_channels(signals, fs, respiration), record_seconds=EPOCH_SECONDS, units=units, **header)
    annotations = hypnogram_annotations(stages, rng)
    annotations.append((stages.size * EPOCH_SECONDS, 1800.0, "Sleep stage ?"))  # unscored tail, as in SC files
    write_edf(hyp, {}, annotations, **header)
    return [psg, hyp], stages


PHYSIONET_SYNTH_CHANNELS = list(PHYSIONET2018_EEG) + ["E1-M2", "Chin1-Chin2"]


def _stage_notes(stages: np.ndarray, fs: float) -> list[tuple[int, str]]:
    """``.arousal`` stage notes W/N1/N2/N3/R ``[(sample, text)]`` at every stage change of ``stages (e,)``."""
    spe = int(EPOCH_SECONDS * fs)
    change = np.flatnonzero(np.r_[True, stages[1:] != stages[:-1]])
    text = {W: "W", N1: "N1", N2: "N2", N3: "N3", REM: "R"}
    return [(int(i * spe), text[int(stages[i])]) for i in change]


def _placeholder_arousal_notes(n_epochs: int, fs: float, rng: np.random.Generator) -> list[tuple[int, str]]:
    """EEG-only records: a few ``arousal_rera`` note pairs at random epochs (notes that are not stages, for
    the readers to skip; no arousal in the signals)."""
    spe = int(EPOCH_SECONDS * fs)
    notes = []
    for i in rng.choice(n_epochs, size=min(3, n_epochs), replace=False):
        notes += [(int(i * spe + spe // 3), "(arousal_rera"), (int(i * spe + spe // 2), "arousal_rera)")]
    return notes


def _write_psg_arousal_mat(
    out_dir: Path, record: str, stages: np.ndarray, events: list[tuple[float, float, str]], fs: float
) -> Path:
    """``<record>-arousal.mat``: per-sample stages of ``stages (e,)`` and arousal targets of ``events``."""
    per_sample = np.repeat(stages, int(EPOCH_SECONDS * fs))
    path = out_dir / f"{record}-arousal.mat"
    write_arousal_mat(path, per_sample, arousal_targets(events, per_sample.size, fs))
    return path


def write_physionet2018_night(
    out_dir: Path,
    subject: int,
    night: int,
    hours: float,
    traits: SubjectTraits,
    rng: np.random.Generator,
    compress: int = 1,
    record_hours: float | None = None,
    provenance: str = "",
    cardio_traits: CardioTraits | None = None,
) -> tuple[list[Path], np.ndarray]:
    """WFDB record ``tr<NN>-<SSSS>`` at 200 Hz with the six EEG derivations, E1-M2 and Chin1-Chin2,
    plus ``.arousal`` aux notes W/N1/N2/N3/R at every stage change (and a few arousal notes).
    ``record_hours`` must be None: challenge records cover the night only (lights off to on).
    ``cardio_traits`` (whole PSG): ABD, CHEST, AIRFLOW, SaO2 and ECG too (:data:`PSG_UNITS`), EEG arousals
    and chin-EMG bursts at the ends of respiratory events, the respiratory events and spontaneous arousals as
    ``"(label"`` / ``"label)"`` notes instead of the placeholder ones, and ``<record>-arousal.mat``."""
    if record_hours is not None:
        raise ValueError("synth-psg: --record-hours applies to the sleep-edf format only")
    fs = 200.0
    stages = night_hypnogram(hours, compress, traits, rng)
    cardio = None if cardio_traits is None else cardiorespiratory_night(stages, fs, cardio_traits, rng)
    onsets = None if cardio is None else cardio.arousal_onsets
    brain = synth_night(
        PHYSIONET_SYNTH_CHANNELS, hours, fs, traits, rng, mains_hz=60.0, stages=stages, arousal_onsets=onsets
    )
    record = f"tr{3 + night:02d}-{subject:04d}"
    notes = _stage_notes(stages, fs)
    signals: dict[str, np.ndarray] = brain.signals
    units: str | dict[str, str] = "uV"
    paths: list[Path] = []
    if cardio is None:
        notes += _placeholder_arousal_notes(stages.size, fs, rng)
    else:
        events = night_events(cardio.events, brain.meta["arousals"], fs)
        notes += event_notes(events, stages.size * int(EPOCH_SECONDS * fs), fs)
        signals, units = physionet_psg_signals(brain.signals, cardio)
        paths.append(_write_psg_arousal_mat(out_dir, record, stages, events, fs))
    comments = [f"subject: S{subject:04d}", f"night: {night + 1}", "synthetic: multiview_app"]
    comments += [f"generator: {provenance}"] if provenance else []
    paths = write_wfdb_record(out_dir, record, signals, fs, sorted(notes), comments=comments, units=units) + paths
    return paths, stages


WRITERS = {"sleep-edf": write_sleep_edf_night, "physionet2018": write_physionet2018_night}
WRITER_COHORT = {"sleep-edf": "sleep-edf-sc", "physionet2018": "young-adult"}
"""The subject population of each format's synthetic nights (the Sleep-EDF-format
population differs from the PhysioNet-format one as the SC cohort, aged 25-101, does)."""
