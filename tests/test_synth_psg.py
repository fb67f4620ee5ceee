"""Whole-PSG nights (``synth_psg(signals="psg")`` / ``synth-psg --signals psg``): the PhysioNet 2018 record holds
the 13 challenge channels in order with their units, respiratory events and arousals as paired ``.arousal`` notes
and ``-arousal.mat`` targets; the Sleep-EDF file gains its 1 Hz oro-nasal channel; the brain channels keep
their draws apart from the arousals that end respiratory events. The cardiorespiratory generator is a
stub here (fixed events), so the checks do not depend on its draws; the real one, once present, is checked
for the record's structure only."""

from __future__ import annotations

import importlib.util
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from multiview_app.data.eeg import synth

wfdb = pytest.importorskip("wfdb")
h5py = pytest.importorskip("h5py")

MODULE = "multiview_app.data.eeg.cardioresp"
PHYSIONET_ORDER = [
    "F3-M2", "F4-M1", "C3-M2", "C4-M1", "O1-M2", "O2-M1", "E1-M2", "Chin1-Chin2",
    "ABD", "CHEST", "AIRFLOW", "SaO2", "ECG",
]  # fmt: skip
UNITS = ["uV"] * 8 + ["NU", "NU", "NU", "%", "mV"]
FS = 200.0


@dataclass
class StubTraits:
    cohort: str


@dataclass
class StubNight:
    signals: dict[str, np.ndarray]
    beat_times: np.ndarray
    events: list[tuple[float, float, str]]
    arousal_onsets: np.ndarray


def stub_events(stages: np.ndarray) -> list[tuple[float, float, str]]:
    """An obstructive apnea, a hypopnea and a RERA in the first sleep epochs of ``stages (e,)``."""
    first = 30.0 * int(np.flatnonzero(stages != 0)[0])
    return [
        (first + 5.0, 20.0, "resp_obstructiveapnea"),
        (first + 63.0, 15.0, "resp_hypopnea"),
        (first + 120.0, 10.0, "arousal_rera"),
    ]


def _stub_night(stages: np.ndarray, fs: float, seconds: float, traits: StubTraits, rng: np.random.Generator):
    n = int(round(seconds * fs))
    t = np.arange(n) / fs
    breath = np.sin(2 * np.pi * 0.25 * t)
    signals = {
        "ECG": (np.sin(2 * np.pi * 1.1 * t) ** 15).astype(np.float32),
        "ABD": (0.6 * breath).astype(np.float32),
        "CHEST": (0.4 * breath).astype(np.float32),
        "AIRFLOW": (breath + 0.01 * rng.standard_normal(n)).astype(np.float32),
        "SaO2": (96.0 + 0.5 * np.sin(2 * np.pi * t / 600)).astype(np.float32),
    }
    events = stub_events(stages)
    ends = np.array([onset + duration for onset, duration, label in events if label.startswith("resp_")])
    return StubNight(signals, np.arange(0.0, seconds, 1 / 1.1), events, ends)


@pytest.fixture
def stub_cardioresp(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """A stand-in ``multiview_app.data.eeg.cardioresp`` with the agreed interface and fixed events."""
    module = types.ModuleType(MODULE)
    module.CardioTraits, module.CardioRespNight = StubTraits, StubNight
    module.cardio_traits = lambda rng, cohort: StubTraits(cohort)
    module.synth_cardiorespiratory = _stub_night
    monkeypatch.setitem(sys.modules, MODULE, module)
    return module


def _paired(notes: list[str]) -> dict[str, int]:
    """Events per label of ``.arousal`` notes in time order; fails unless every "(x" closes with "x)"."""
    open_, closed = {}, {}
    for note in notes:
        if note.startswith("("):
            assert not open_.get(note[1:]), f"{note} opens again before closing"
            open_[note[1:]] = True
        elif note.endswith(")"):
            assert open_.get(note[:-1]), f"{note} closes nothing"
            open_[note[:-1]] = False
            closed[note[:-1]] = closed.get(note[:-1], 0) + 1
    assert not any(open_.values()), open_
    return closed


def test_psg_physionet_record_has_the_challenge_channels_events_and_targets(tmp_path: Path, stub_cardioresp) -> None:
    paths = synth.synth_psg(tmp_path, 1, 1, "physionet2018", hours=1.0, seed=3, progress=False, signals="psg")
    assert sorted(p.name for p in paths) == sorted(
        ["tr03-0000.dat", "tr03-0000.hea", "tr03-0000.arousal", "tr03-0000-arousal.mat"]
    )
    record = wfdb.rdrecord(str(tmp_path / "tr03-0000"))
    assert record.sig_name == PHYSIONET_ORDER and record.units == UNITS and record.fs == FS
    notes = wfdb.rdann(str(tmp_path / "tr03-0000"), "arousal")
    events = _paired(list(notes.aux_note))
    assert events["resp_obstructiveapnea"] == events["resp_hypopnea"] == events["arousal_rera"] == 1
    assert events["arousal_spontaneous"] >= 1  # the brain's own arousals are scored too
    assert {"W", "N1", "N2"} <= set(notes.aux_note)
    with h5py.File(tmp_path / "tr03-0000-arousal.mat", "r") as handle:
        targets = handle["data/arousals"][0]
        n_stage_samples = handle["data/sleep_stages/wake"].shape[1]
    assert targets.shape == (record.sig_len,) == (n_stage_samples,)
    sample = {label: int(round(onset * FS)) for onset, _, label in _events_from_notes(notes)}
    assert (targets[sample["resp_obstructiveapnea"] : sample["resp_obstructiveapnea"] + int(20 * FS)] == -1).all()
    assert (targets[sample["resp_hypopnea"] : sample["resp_hypopnea"] + int(15 * FS)] == -1).all()
    assert (targets[sample["arousal_rera"] : sample["arousal_rera"] + int(10 * FS)] == 1).all()
    assert set(np.unique(targets)) == {-1, 0, 1}
    _check_the_reader_takes_the_events(tmp_path / "tr03-0000", _events_from_notes(notes))


def _check_the_reader_takes_the_events(record: Path, written: list[tuple[float, float, str]]) -> None:
    """The PhysioNet reader returns the written events and the apneas / hypopneas as arousal-unscored spans."""
    from multiview_app.data.eeg.physionet2018 import read_physionet2018

    recording = read_physionet2018(record, PHYSIONET_ORDER[:6])
    read = sorted((e.onset, e.label) for e in recording.events)
    expected = sorted((onset, label) for onset, _, label in written)
    assert [label for _, label in read] == [label for _, label in expected]
    np.testing.assert_allclose([onset for onset, _ in read], [onset for onset, _ in expected], atol=1 / FS)
    apneas = sorted((o, o + d) for o, d, label in written if label in synth.APNEA_HYPOPNEA_LABELS)
    np.testing.assert_allclose(np.array(recording.arousal_unscored, dtype=float), np.array(apneas), atol=1 / FS)


def _events_from_notes(notes) -> list[tuple[float, float, str]]:
    """``[(onset s, duration s, label)]`` of the paired event notes of a ``wfdb.Annotation``."""
    opened, events = {}, []
    for sample, note in zip(notes.sample, notes.aux_note):
        if note.startswith("("):
            opened[note[1:]] = sample
        elif note.endswith(")"):
            start = opened.pop(note[:-1])
            events.append((start / FS, (sample - start) / FS, note[:-1]))
    return events


def test_psg_and_eeg_nights_prepare_to_the_same_stages(tmp_path: Path, stub_cardioresp) -> None:
    """The PhysioNet reader takes a whole-PSG record (extra channels, event notes, -arousal.mat) as the EEG-only
    one: same labels, the .mat stages agreeing with the stage notes."""
    import json

    from multiview_app.data.eeg.cache import prepare
    from multiview_app.data.eeg.preprocess import PrepareOptions

    records = {}
    for mode in synth.SIGNAL_SETS:
        synth.synth_psg(tmp_path / mode, 1, 1, "physionet2018", hours=0.5, seed=3, progress=False, signals=mode)
        cache = tmp_path / f"cache_{mode}"
        prepare("physionet2018", tmp_path / mode, cache, PrepareOptions(channels=PHYSIONET_ORDER[:6]))
        records[mode] = json.loads((cache / "manifest.json").read_text())["recordings"][0]
    assert records["psg"]["labels"] == records["eeg"]["labels"]
    assert records["psg"]["counts"]["stage_notes_disagreeing_with_mat_epochs"] == 0


def test_eeg_mode_writes_no_cardiorespiratory_channels(tmp_path: Path) -> None:
    paths = synth.synth_psg(tmp_path, 1, 1, "physionet2018", hours=0.5, progress=False)
    assert not any(p.name.endswith("-arousal.mat") for p in paths)
    assert wfdb.rdheader(str(tmp_path / "tr03-0000")).sig_name == PHYSIONET_ORDER[:8]
    with pytest.raises(ValueError, match="--signals: unknown 'ecg'; available: eeg, psg"):
        synth.synth_psg(tmp_path / "x", 1, 1, "physionet2018", hours=0.5, progress=False, signals="ecg")


def test_psg_sleep_edf_file_gains_the_oro_nasal_channel(tmp_path: Path, stub_cardioresp) -> None:
    import edfio

    synth.synth_psg(tmp_path, 1, 1, "sleep-edf", hours=1.0, seed=3, progress=False, signals="psg", record_hours=1.5)
    edf = edfio.read_edf(next(tmp_path.glob("*PSG.edf")))
    labels = [s.label for s in edf.signals]
    assert labels == ["EEG Fpz-Cz", "EEG Pz-Oz", "EOG horizontal", "Resp oro-nasal", "EMG submental"]
    resp = edf.signals[3]
    assert resp.sampling_frequency == 1.0 and resp.physical_dimension == "NU"
    assert resp.data.size == edf.duration == edf.signals[0].data.size / 100  # the padded recording, 1 Hz
    assert abs(np.corrcoef(resp.data[:-1], resp.data[1:])[0, 1]) < 0.99  # breathing, not a flat line


def test_respiratory_arousals_leave_the_other_brain_draws_alone(stub_cardioresp) -> None:
    """With ``arousal_onsets`` the EEG, EOG and chin EMG differ from the EEG-only night only inside the
    added arousals (their own random stream); the meta names them."""
    traits = synth.SubjectTraits.sample(np.random.default_rng([3, 0]))
    stages = synth.night_hypnogram(0.5, 1, traits, np.random.default_rng([3, 0, 0, 1]))
    onsets = np.array([e[0] + e[1] for e in stub_events(stages)[:2]])
    channels = synth.PHYSIONET_SYNTH_CHANNELS
    kwargs = {"stages": stages, "mains_hz": 60.0}
    plain = synth.synth_night(channels, 0.5, FS, traits, np.random.default_rng([3, 0, 0, 1]), **kwargs)
    psg = synth.synth_night(
        channels, 0.5, FS, traits, np.random.default_rng([3, 0, 0, 1]), arousal_onsets=onsets, **kwargs
    )
    spans = psg.meta["respiratory_arousals"]
    assert [start for start, _ in spans] == [int(round(o * FS)) for o in onsets]
    inside = np.zeros(stages.size * int(30 * FS), dtype=bool)
    for start, length in spans:
        inside[start : start + length] = True
    for c in channels:
        assert np.array_equal(plain.signals[c][~inside], psg.signals[c][~inside]), c
    assert not np.array_equal(plain.signals["C3-M2"][inside], psg.signals["C3-M2"][inside])
    assert psg.meta["arousals"] == plain.meta["arousals"]


def test_arousal_targets_mark_arousals_and_leave_apneas_unscored() -> None:
    events = [(1.0, 2.0, "arousal_rera"), (2.0, 2.0, "resp_centralapnea"), (6.0, 1.0, "resp_hypoventilation")]
    targets = synth.arousal_targets(events, 10, 1.0)
    assert targets.tolist() == [0, 1, -1, -1, 0, 0, 0, 0, 0, 0]
    merged = synth.night_events([(0.0, 3.0, "arousal_spontaneous")], [(2, 3)], 1.0)
    assert merged == [(0.0, 5.0, "arousal_spontaneous")]  # overlapping spontaneous arousals: one pair of notes


def test_the_cli_signal_sets_are_the_generators(tmp_path: Path, stub_cardioresp, capsys) -> None:
    from multiview_app.cli import main
    from multiview_app.data.cli import SYNTH_SIGNALS

    assert SYNTH_SIGNALS == synth.SIGNAL_SETS
    command = ["data", "synth-psg", "--subjects", "1", "--format", "physionet2018", "--hours", "0.5"]
    assert main([*command, "--signals", "psg", "--out", str(tmp_path / "psg")]) == 0
    assert (tmp_path / "psg" / "tr03-0000-arousal.mat").exists()
    assert wfdb.rdheader(str(tmp_path / "psg" / "tr03-0000")).sig_name == PHYSIONET_ORDER
    with pytest.raises(SystemExit):
        main([*command, "--signals", "ecg", "--out", str(tmp_path / "bad")])
    assert "--signals: invalid choice: 'ecg'" in capsys.readouterr().err


@pytest.mark.skipif(importlib.util.find_spec(MODULE) is None, reason="cardioresp.py not merged yet")
def test_the_real_cardiorespiratory_generator_fills_a_psg_record(tmp_path: Path) -> None:
    from multiview_app.data.eeg.physionet2018 import read_physionet2018

    synth.synth_psg(tmp_path, 1, 1, "physionet2018", hours=1.0, seed=1, progress=False, signals="psg")
    record = wfdb.rdrecord(str(tmp_path / "tr03-0000"))
    assert record.sig_name == PHYSIONET_ORDER and record.units == UNITS
    events = _paired(list(wfdb.rdann(str(tmp_path / "tr03-0000"), "arousal").aux_note))
    assert len(read_physionet2018(tmp_path / "tr03-0000", PHYSIONET_ORDER[:6]).events) == sum(events.values())
    saturation = record.p_signal[:, PHYSIONET_ORDER.index("SaO2")]
    assert 50 < np.median(saturation) <= 100
