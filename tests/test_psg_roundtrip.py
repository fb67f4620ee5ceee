"""A whole-PSG PhysioNet 2018 record written by ``synth_psg(signals="psg")`` reads back through
``read_physionet2018(record, None)`` as generated: every signal in order with its rate, unit and type, the
samples to within the WFDB quantisation, the hypnogram on the 30-s grid, and every event to the sample."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from multiview_app.data.eeg.synth import formats, jobs, synth_psg
from multiview_app.data.eeg.synth.psg import APNEA_HYPOPNEA_LABELS

wfdb = pytest.importorskip("wfdb")
pytest.importorskip("h5py")

FS = 200.0
LABELS = ["F3-M2", "F4-M1", "C3-M2", "C4-M1", "O1-M2", "O2-M1", "E1-M2", "Chin1-Chin2"]
LABELS += ["ABD", "CHEST", "AIRFLOW", "SaO2", "ECG"]
FILE_UNITS = ["uV"] * 8 + ["NU"] * 3 + ["%", "mV"]
READ_UNITS = ["uV"] * 8 + ["arbitrary"] * 3 + ["%", "mV"]
TYPES = ["eeg"] * 6 + ["eog", "emg", "resp", "resp", "resp", "bio", "ecg"]


def _capture(monkeypatch: pytest.MonkeyPatch, module: Any, name: str, into: dict[str, Any]) -> None:
    """Wrap ``module.name`` so that its (last) result is kept in ``into[name]``."""
    original = getattr(module, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        into[name] = original(*args, **kwargs)
        return into[name]

    monkeypatch.setattr(module, name, wrapper)


@pytest.fixture(scope="module")
def night(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One 1-h night of a subject forced to severe sleep apnoea, with what the generator drew for it."""
    monkeypatch = pytest.MonkeyPatch()
    drawn: dict[str, Any] = {}
    severe = jobs.draw_cardio_traits

    def severe_traits(seed: int, subject: int, cohort: str) -> Any:
        return dataclasses.replace(severe(seed, subject, cohort), ahi_class="severe", ahi=45.0)

    monkeypatch.setattr(jobs, "draw_cardio_traits", severe_traits)
    for name in ("night_hypnogram", "cardiorespiratory_night", "synth_night"):
        _capture(monkeypatch, formats, name, drawn)
    out = tmp_path_factory.mktemp("psg")
    try:
        synth_psg(out, 1, 1, "physionet2018", hours=1.0, seed=2, compress=1, progress=False, signals="psg")
    finally:
        monkeypatch.undo()
    from multiview_app.data.eeg.physionet2018 import read_physionet2018

    drawn["record"] = out / "tr03-0000"
    drawn["read"] = read_physionet2018(drawn["record"], None)
    return drawn


def test_every_signal_reads_back_with_its_rate_unit_and_type(night: dict[str, Any]) -> None:
    read = night["read"]
    assert read.channel_names == LABELS
    assert read.sfreqs == [FS] * len(LABELS)
    assert read.channel_units == READ_UNITS and read.channel_types == TYPES
    assert wfdb.rdheader(str(night["record"])).units == FILE_UNITS


def test_the_samples_are_the_generated_ones_to_within_the_quantisation(night: dict[str, Any]) -> None:
    generated = {**night["synth_night"].signals, **night["cardiorespiratory_night"].signals}
    header = wfdb.rdheader(str(night["record"]))
    for index, (label, samples) in enumerate(zip(night["read"].channel_names, night["read"].signals)):
        expected = np.asarray(generated[label], dtype=np.float64)
        assert samples.shape == expected.shape, label
        step = 1.0 / header.adc_gain[index]  # one ADC count, in the file's (= the read) unit
        assert np.abs(samples - expected).max() <= 0.5 * step * (1 + 1e-6) + 1e-9 * np.abs(expected).max(), label


def test_the_stages_are_the_generated_hypnogram(night: dict[str, Any]) -> None:
    from multiview_app.data.eeg.physionet2018 import arousal_mat_path, read_arousal_mat

    stages = night["night_hypnogram"]
    read = night["read"]
    assert read.grid_start_seconds == 0.0
    assert np.array_equal(read.epoch_labels, stages)
    assert np.array_equal(read_arousal_mat(arousal_mat_path(night["record"])), np.repeat(stages, int(30 * FS)))
    assert read.counts["stage_notes_disagreeing_with_mat_epochs"] == 0
    assert read.counts["unscored_epochs"] == 0


def _in_samples(events: list[tuple[float, float, str]]) -> list[tuple[int, int, str]]:
    """``(onset s, duration s, label)`` -> ``(onset sample, end sample, label)``, sorted."""
    return sorted((round(onset * FS), round((onset + duration) * FS), label) for onset, duration, label in events)


def test_every_event_reads_back_to_the_sample(night: dict[str, Any]) -> None:
    respiratory = night["cardiorespiratory_night"].events
    spontaneous = [
        (start / FS, length / FS, "arousal_spontaneous") for start, length in night["synth_night"].meta["arousals"]
    ]
    expected = _in_samples(list(respiratory) + spontaneous)
    assert sum(label.startswith("resp_") for *_, label in expected) >= 10  # the forced severe class shows
    for label in {label for *_, label in expected}:
        spans = [(a, b) for a, b, other in expected if other == label]
        assert all(b < a for (_, b), (a, _) in zip(spans, spans[1:])), f"{label}: overlap (the writer merges these)"
    read = night["read"]
    assert _in_samples([(e.onset, e.duration, e.label) for e in read.events]) == expected
    assert not [key for key in read.counts if key.startswith("events_")]
    apneas = [(a / FS, b / FS) for a, b, label in expected if label in APNEA_HYPOPNEA_LABELS]
    unscored = read.arousal_unscored or []
    assert all(any(lo <= a and b <= hi for lo, hi in unscored) for a, b in apneas)
