"""File-format writers of the synthetic PSG: EDF(+) (Sleep-EDF), WFDB records with ``.arousal``
aux-note annotations (PhysioNet 2018) and the challenge's ``-arousal.mat`` (MAT v7.3 / HDF5)."""

from __future__ import annotations

import datetime as dt
import functools
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ....fileio import temp_sibling
from ..stages import EPOCH_SECONDS, EXCLUDED
from .parameters import N1, N2, N3, REM, W

DEFAULT_START = dt.datetime(1989, 4, 24, 22, 0, 0)
"""Start of synthetic recordings (night ``k`` of subject ``s`` starts ``3 s + k`` days later)."""


def write_edf(
    path: Path,
    signals: dict[str, tuple[np.ndarray, float]],
    annotations: list[tuple[float, float, str]] | None = None,
    record_seconds: float = 1.0,
    start: dt.datetime = DEFAULT_START,
    patient: str = "X",
    recording_additional: str = "",
    units: dict[str, str] | None = None,
) -> None:
    """Write an EDF(+) file atomically; ``signals``: label -> (samples, sampling rate), in uV unless
    ``units`` names the label's unit (e.g. ``"NU"``: arbitrary);
    ``record_seconds``: data-record duration (Sleep-EDF PSG files use 30 s); ``start`` and
    ``patient`` (a code without spaces) go into the header (a PSG and its hypnogram share them);
    ``recording_additional``: space-separated tokens appended to the header's recording field (the
    generator's provenance, ``provenance.provenance_text``)."""
    import edfio

    edf_signals = []
    for label, (data, fs) in signals.items():
        low, high = float(np.min(data)), float(np.max(data))
        pad = max(1.0, 0.05 * (high - low))
        edf_signals.append(
            edfio.EdfSignal(
                np.asarray(data, dtype=np.float64),
                sampling_frequency=fs,
                label=label,
                physical_dimension=(units or {}).get(label, "uV"),
                physical_range=(low - pad, high + pad),
            )
        )
    recording = edfio.Recording(startdate=start.date(), additional=tuple(recording_additional.split()))
    edf = edfio.Edf(
        edf_signals,
        patient=edfio.Patient(code=patient),
        recording=recording,
        starttime=start.time(),
        data_record_duration=record_seconds if edf_signals else None,
        annotations=[edfio.EdfAnnotation(o, d, t) for o, d, t in (annotations or [])],
    )
    tmp = temp_sibling(path, path.suffix)
    try:
        edf.write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


SLEEP_EDF_TEXT = {W: "Sleep stage W", N1: "Sleep stage 1", N2: "Sleep stage 2", REM: "Sleep stage R"}


def hypnogram_annotations(stages: np.ndarray, rng: np.random.Generator) -> list[tuple[float, float, str]]:
    """Run-length encode ``stages`` (``EXCLUDED`` -> "Movement time") into Sleep-EDF annotations;
    N3 epochs are written as R&K "Sleep stage 3" or "4" (both map back to N3)."""
    texts = []
    for s in stages:
        if s == N3:
            texts.append("Sleep stage 4" if rng.random() < 0.4 else "Sleep stage 3")
        elif s == EXCLUDED:
            texts.append("Movement time")
        else:
            texts.append(SLEEP_EDF_TEXT[int(s)])
    annotations: list[tuple[float, float, str]] = []
    for i, text in enumerate(texts):
        if annotations and annotations[-1][2] == text:
            onset, duration, _ = annotations[-1]
            annotations[-1] = (onset, duration + EPOCH_SECONDS, text)
        else:
            annotations.append((i * EPOCH_SECONDS, EPOCH_SECONDS, text))
    return annotations


def write_wfdb_record(
    out_dir: Path,
    record: str,
    signals: dict[str, np.ndarray],
    fs: float,
    stage_notes: list[tuple[int, str]],
    comments: list[str] | None = None,
    units: str | dict[str, str] = "uV",
) -> list[Path]:
    """Write ``record``.hea/.mat-free 16-bit ``.dat`` + ``.arousal`` (aux-note annotations: stages, and
    events as ``"(label"`` / ``"label)"``); ``signals`` ``(n,)`` each, in ``units`` (one for all, or one per
    channel name)."""
    import wfdb

    names = list(signals)
    if isinstance(units, dict):
        missing = [c for c in names if c not in units]
        if missing:
            raise ValueError(f"synth-psg: WFDB record {record!r}: no unit for channel(s) {missing}")
    unit_list = [units[c] for c in names] if isinstance(units, dict) else [units] * len(names)
    p_signal = np.stack([signals[c] for c in names], axis=1)
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        if "." in record:
            raise ValueError(f"synth-psg: WFDB record name {record!r} must not contain '.'")
        # the steps of wfdb.wrsamp for a physical signal (the same files, byte for byte), on a Record whose
        # range check is vectorized
        written = _fast_checked_record()(
            record_name=record,
            p_signal=p_signal,
            fs=fs,
            fmt=["16"] * len(names),
            units=unit_list,
            sig_name=names,
            comments=comments or [],
        )
        _fixed_percent_range(written, unit_list)
        written.set_d_features(do_adc=True)
        written.set_defaults()
        written.wrsamp(write_dir=tmp)
        samples = np.array([s for s, _ in stage_notes], dtype=np.int64)
        # wfdb.rdann drops a '"' note at sample 0 (it takes it for a header note), so that one is '+'.
        symbols = ["+" if s == 0 else '"' for s in samples]
        wfdb.wrann(record, "arousal", samples, symbol=symbols, aux_note=[t for _, t in stage_notes], write_dir=tmp)
        paths = []
        for suffix in (".dat", ".arousal", ".hea"):  # header last: a record is complete once it exists
            os.replace(Path(tmp) / f"{record}{suffix}", out_dir / f"{record}{suffix}")
            paths.append(out_dir / f"{record}{suffix}")
    return paths


PERCENT_ADC_GAIN = 100.0
"""ADC units per % of a channel in % (SpO2), baseline 0: a fixed range of +-327 % at 0.01 % steps, as an
oximeter stores it, so a night's highest and lowest SpO2 are not at the storable extremes (fitted to the
data's own min and max, a plateau at the night's highest SpO2 would read as a saturated channel)."""


def _fixed_percent_range(record: Any, units: list[str]) -> None:
    """Set ``record``'s ADC gain and baseline: fitted to the data (wfdb's choice) except for channels in %."""
    if "%" not in units:
        return  # wfdb fits every channel (the bytes of the EEG-only nights)
    gains, baselines = record.calc_adc_params()
    record.adc_gain = [PERCENT_ADC_GAIN if u == "%" else g for u, g in zip(units, gains)]
    record.baseline = [0 if u == "%" else b for u, b in zip(units, baselines)]


@functools.cache
def _fast_checked_record() -> type:
    """A ``wfdb.Record`` whose pre-write check of a uniform 16-bit signal takes numpy's min / max per channel
    (wfdb 4's ``check_sig_cohesion`` takes Python's ``min`` / ``max`` over the samples: ~1 s of the ~5 s
    CPU a PhysioNet-format demo night costs); every other layout and format is wfdb's own check."""
    import wfdb

    class FastCheckedRecord(wfdb.Record):
        def check_sig_cohesion(self, write_fields: list[str], expanded: bool) -> None:
            signal = None if expanded else self.d_signal
            if write_fields or signal is None or any(fmt != "16" for fmt in self.fmt):
                return super().check_sig_cohesion(write_fields, expanded)
            if (self.sig_len, self.n_sig) != signal.shape:
                raise ValueError(f"WFDB: sig_len {self.sig_len} and n_sig {self.n_sig} do not match {signal.shape}")
            if signal.size and (signal.min() < -32768 or signal.max() > 32767):
                raise IndexError("WFDB: a channel holds values outside [-32768, 32767] for fmt 16")
            return None

    return FastCheckedRecord


def write_arousal_mat(path: Path, per_sample: np.ndarray, arousals: np.ndarray | None = None) -> None:
    """Write a challenge-style ``-arousal.mat`` (MAT v7.3 / HDF5): ``data/sleep_stages/<stage>``
    one-hot uint8 vectors ``(1, n)`` from per-sample codes ``(n,)`` (``UNSCORED`` -> ``undefined``),
    and ``data/arousals`` ``(1, n)`` int8: ``arousals (n,)`` (1 target arousal, 0 none, -1 not scored), or
    all zero when None."""
    import h5py

    from ..stages import PHYSIONET2018_MAT_STAGES

    if arousals is None:
        arousals = np.zeros(per_sample.size, dtype=np.int8)
    if arousals.shape != per_sample.shape:
        raise ValueError(f"{path.name}: data/arousals {arousals.shape} and sleep stages {per_sample.shape} differ")
    tmp = temp_sibling(path, path.suffix)
    try:
        with h5py.File(tmp, "w") as handle:
            data = handle.create_group("data")
            stages = data.create_group("sleep_stages")
            for name, code in PHYSIONET2018_MAT_STAGES.items():
                stages.create_dataset(name, data=(per_sample == code).astype(np.uint8)[None], compression="gzip")
            data.create_dataset("arousals", data=arousals.astype(np.int8)[None], compression="gzip")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
