"""Scored events: PhysioNet 2018 ``.arousal`` event pairs and ``data/arousals`` read back from a WFDB record
written here (wfdb.wrsamp + wfdb.wrann, an HDF5 or MAT v5 ``-arousal.mat``), per-window targets with the
5-s overlap rule, AHI and severity, the cache's event fields, and Sleep-EDF / DREAMS scoring none."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from multiview_app.data.eeg.cache import prepare, summary_table
from multiview_app.data.eeg.events import (
    NO_SCORED_EVENTS,
    ScoredEvent,
    ahi,
    event_summary_line,
    events_from_notes,
    severity,
    window_targets,
)
from multiview_app.data.eeg.physionet2018 import read_physionet2018
from multiview_app.data.eeg.preprocess import PrepareOptions
from multiview_app.data.eeg.stages import PHYSIONET2018_MAT_STAGES, UNSCORED

wfdb = pytest.importorskip("wfdb")

FS = 100.0
GRID = 10.0  # the first stage note, 10 s into the record: window e covers [10 + 30 e, 40 + 30 e) s
STAGES = [0, 2, 2, 2, 2, 2, 2, 2, 4, 4]  # W, 7 x N2, 2 x REM: 9 sleep epochs = 0.075 h
STAGE_NOTES = [(GRID, "W"), (GRID + 30, "N2"), (GRID + 240, "R")]
EVENT_NOTES = [
    (65.0, "(resp_obstructiveapnea"),  # 5.0 s in window 1, 15.1 s in window 2
    (85.1, "resp_obstructiveapnea)"),
    (75.0, "(arousal_rera"),  # overlaps the apnea (another label); inside the unscored 60-100 s
    (90.0, "arousal_rera)"),
    (125.1, "(resp_hypopnea"),  # 4.9 s in window 3, 15 s in window 4
    (145.0, "resp_hypopnea)"),
    (190.0, "(resp_centralapnea"),  # window 6, with an arousal nested inside
    (195.0, "(arousal_spontaneous"),
    (205.0, "arousal_spontaneous)"),
    (215.0, "resp_centralapnea)"),
    (230.0, "(resp_weird"),  # a label outside the vocabulary: kept, counted
    (240.0, "resp_weird)"),
    (250.0, "arousal_plm)"),  # a close without an open
    (280.0, "(resp_hypopnea"),  # an open never closed
    (285.0, "xyz"),  # neither
]
EXPECTED_EVENTS = [
    ScoredEvent(65.0, 20.1, "resp_obstructiveapnea"),
    ScoredEvent(75.0, 15.0, "arousal_rera"),
    ScoredEvent(125.1, 19.9, "resp_hypopnea"),
    ScoredEvent(190.0, 25.0, "resp_centralapnea"),
    ScoredEvent(195.0, 10.0, "arousal_spontaneous"),
    ScoredEvent(230.0, 10.0, "resp_weird"),
]
UNSCORED_SECONDS = (60.0, 100.0)  # data/arousals == -1 here (an apnea region, as in the challenge)
APNEA_TARGET = [0, 1, 1, 0, 1, 0, 1, 0, 0, 0]
AROUSAL_TARGET = [0, -1, -1, 0, 0, 0, 1, 0, 0, 0]


def _arousal_vectors(n: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The ``sleep_stages`` one-hot vectors ``{name: (n,)}`` of :data:`STAGES` on the grid (undefined
    before it) and ``arousals (n,)``: 1 inside the arousal events, -1 in :data:`UNSCORED_SECONDS`."""
    per_sample = np.full(n, UNSCORED)
    grid = int(GRID * FS)
    per_sample[grid:] = np.repeat(STAGES, int(30 * FS))[: n - grid]
    stages = {name: (per_sample == code).astype(np.uint8) for name, code in PHYSIONET2018_MAT_STAGES.items()}
    arousals = np.zeros(n)
    for event in EXPECTED_EVENTS:
        if event.label.startswith("arousal_"):
            arousals[int(event.onset * FS) : int(event.end * FS)] = 1
    arousals[int(UNSCORED_SECONDS[0] * FS) : int(UNSCORED_SECONDS[1] * FS)] = -1
    return stages, arousals


def _write_record(folder: Path, mat: str | None = "hdf5", name: str = "tr07-0001") -> Path:
    """A 1-channel WFDB record ``name`` of 310 s at :data:`FS` with stage and event aux notes in its
    ``.arousal``, and (``mat``: "hdf5" | "v5" | None) its ``-arousal.mat``."""
    folder.mkdir(parents=True, exist_ok=True)
    n = int((GRID + 30 * len(STAGES)) * FS)
    signal = np.random.default_rng(0).standard_normal(n) * 20.0
    wfdb.wrsamp(
        name, fs=FS, units=["uV"], sig_name=["F3-M2"], p_signal=signal[:, None], fmt=["16"], write_dir=str(folder)
    )
    notes = sorted((int(round(seconds * FS)), text) for seconds, text in STAGE_NOTES + EVENT_NOTES)
    samples = np.array([s for s, _ in notes])
    wfdb.wrann(
        name, "arousal", samples, symbol=['"'] * len(notes), aux_note=[t for _, t in notes], write_dir=str(folder)
    )
    stages, arousals = _arousal_vectors(n)
    path = folder / f"{name}-arousal.mat"
    if mat == "hdf5":
        import h5py

        with h5py.File(path, "w") as handle:
            group = handle.create_group("data/sleep_stages")
            for key, vector in stages.items():
                group.create_dataset(key, data=vector[None])
            handle["data"].create_dataset("arousals", data=arousals[None])  # (1, n) double, as MATLAB saves
    elif mat == "v5":
        from scipy.io import savemat

        savemat(path, {"data": {"sleep_stages": stages, "arousals": arousals.astype(np.int8)}})
    return folder / name


def test_events_round_trip_and_unmatched_unknown_notes_are_counted(tmp_path: Path) -> None:
    rec = read_physionet2018(_write_record(tmp_path), ["F3-M2"])
    assert rec.epoch_labels.tolist() == STAGES and rec.grid_start_seconds == pytest.approx(GRID)
    assert [e.label for e in rec.events] == [e.label for e in EXPECTED_EVENTS]
    for got, want in zip(rec.events, EXPECTED_EVENTS):
        assert (got.onset, got.duration) == pytest.approx((want.onset, want.duration)), want.label
    assert {k: v for k, v in rec.counts.items() if k.startswith("events_")} == {
        "events_unmatched_close:arousal_plm": 1,
        "events_unmatched_open:resp_hypopnea": 1,
        "events_unknown_label:resp_weird": 1,
        "events_unrecognized_note:xyz": 1,
    }
    assert rec.arousal_unscored == [pytest.approx(UNSCORED_SECONDS)]


def test_mat_v5_arousals_read_as_the_hdf5_ones(tmp_path: Path) -> None:
    rec = read_physionet2018(_write_record(tmp_path, mat="v5"), ["F3-M2"])
    assert rec.epoch_labels.tolist() == STAGES and rec.arousal_unscored == [pytest.approx(UNSCORED_SECONDS)]
    without = read_physionet2018(_write_record(tmp_path / "none", mat=None), ["F3-M2"])
    assert without.arousal_unscored is None and len(without.events) == len(EXPECTED_EVENTS)


def test_bad_arousal_values_name_the_file(tmp_path: Path) -> None:
    import h5py

    record = _write_record(tmp_path)
    with h5py.File(f"{record}-arousal.mat", "r+") as handle:
        handle["data/arousals"][0, 0] = 2.0
    with pytest.raises(ValueError, match=r"tr07-0001-arousal.mat: data/arousals must be one vector of -1, 0 and 1"):
        read_physionet2018(record, ["F3-M2"])


def test_same_label_closes_the_latest_open_and_the_first_stays_unmatched() -> None:
    counts: Counter = Counter()
    events = events_from_notes([(1.0, "(arousal_rera"), (2.0, "(arousal_rera"), (4.0, "arousal_rera)")], counts)
    assert events == [ScoredEvent(2.0, 2.0, "arousal_rera")]
    assert counts == Counter({"events_unmatched_open:arousal_rera": 1})


def test_overlap_rule_at_the_five_second_boundary() -> None:
    def apnea(onset: float, end: float) -> ScoredEvent:
        return ScoredEvent(onset, end - onset, "resp_obstructiveapnea")

    # windows [0, 30) and [30, 60): 4.9 s does not make a window positive, 5.0 s does
    targets = window_targets([apnea(25.1, 35.0)], [0, 1], 0.0)
    assert targets["apnea_hypopnea"].tolist() == [0, 1] and targets["apnea_hypopnea"].dtype == np.int8
    assert window_targets([apnea(25.0, 34.9)], [0, 1], 0.0)["apnea_hypopnea"].tolist() == [1, 0]
    # two 3-s events in one window: no single event overlaps 5 s
    assert window_targets([apnea(1.0, 4.0), apnea(10.0, 13.0)], [0], 0.0)["apnea_hypopnea"].tolist() == [0]
    assert {k: v.tolist() for k, v in window_targets([], [0, 1], 0.0).items()} == {
        "apnea_hypopnea": [0, 0],
        "arousal": [0, 0],
    }
    with pytest.raises(ValueError, match="min_overlap 0"):
        window_targets([], [0], 0.0, min_overlap=0.0)


def test_arousal_windows_in_unscored_regions_are_excluded() -> None:
    arousal = ScoredEvent(30.0, 10.0, "arousal_spontaneous")
    # unscored [55, 65) (merged from two pieces): 5.0 s in window 1, 5.0 s in window 2; [95, 99.9): 4.9 s in window 3
    unscored = [(55.0, 60.0), (58.0, 65.0), (95.0, 99.9)]
    targets = window_targets([arousal], [0, 1, 2, 3], 0.0, unscored=unscored)
    assert targets["arousal"].tolist() == [0, -1, -1, 0]
    assert targets["apnea_hypopnea"].tolist() == [0, 0, 0, 0]  # the mask is about arousals only


def test_record_window_targets_follow_the_grid(tmp_path: Path) -> None:
    rec = read_physionet2018(_write_record(tmp_path), ["F3-M2"])
    targets = window_targets(rec.events, np.arange(len(STAGES)), rec.grid_start_seconds, unscored=rec.arousal_unscored)
    assert targets["apnea_hypopnea"].tolist() == APNEA_TARGET
    assert targets["arousal"].tolist() == AROUSAL_TARGET


def test_ahi_and_severity_against_a_hand_computation() -> None:
    events = [ScoredEvent(float(i), 10.0, label) for i, label in enumerate(["resp_obstructiveapnea", "resp_hypopnea"])]
    events += [ScoredEvent(0.0, 10.0, "arousal_rera"), ScoredEvent(0.0, 10.0, "resp_hypoventilation")]
    labels = np.array([0, 1, 2, 3, 4, -1, UNSCORED, 2])  # 5 sleep epochs = 150 s = 1/24 h
    assert ahi(events, labels) == pytest.approx(2 / (150 / 3600))  # 48 / h
    assert np.isnan(ahi(events, np.array([0, 0, -1])))
    cases = {0.0: "none", 4.99: "none", 5.0: "mild", 14.99: "mild", 15.0: "moderate", 29.99: "moderate", 30.0: "severe"}
    assert {value: severity(value) for value in cases} == cases
    with pytest.raises(ValueError, match="AHI nan"):
        severity(float("nan"))


def test_prepare_writes_event_fields_and_summarises_them(tmp_path: Path) -> None:
    _write_record(tmp_path / "src")
    options = PrepareOptions(channels=["F3-M2"], crop_wake_minutes=None)
    summary = prepare("physionet2018", tmp_path / "src", tmp_path / "cache", options, progress=False)
    record = json.loads((tmp_path / "cache" / "manifest.json").read_text())["recordings"][0]
    assert record["epochs"] == list(range(len(STAGES)))
    assert record["event_targets"] == {"apnea_hypopnea": APNEA_TARGET, "arousal": AROUSAL_TARGET}
    assert record["ahi"] == pytest.approx(3 / 0.075) and record["severity"] == "severe"  # 40 / h
    assert record["event_counts"] == {
        "arousal_rera": 1,
        "arousal_spontaneous": 1,
        "resp_centralapnea": 1,
        "resp_hypopnea": 1,
        "resp_obstructiveapnea": 1,
        "resp_weird": 1,
    }
    assert summary["events"] == {"apnea_hypopnea": 3, "arousal": 2, "unknown_label:resp_weird": 1}
    assert "events: apnea_hypopnea 3, arousal 2, unknown_label:resp_weird 1" in summary_table(summary).splitlines()


def test_sleep_edf_scores_no_events_and_the_summary_says_so_once(tmp_path: Path) -> None:
    from multiview_app.data.eeg.sleep_edf import find_pairs, read_sleep_edf
    from multiview_app.data.eeg.synth import SubjectTraits, write_sleep_edf_night

    (tmp_path / "src").mkdir()
    for subject in range(2):
        traits = SubjectTraits.sample(np.random.default_rng(subject))
        traits.latency_minutes = 5.0
        write_sleep_edf_night(tmp_path / "src", subject, 0, 0.5, traits, np.random.default_rng(subject))
    pairs, _ = find_pairs(tmp_path / "src")
    assert read_sleep_edf(*pairs[0], ["Fpz-Cz"]).events is None
    options = PrepareOptions(channels=["Fpz-Cz"])
    summary = prepare("sleep-edf", tmp_path / "src", tmp_path / "cache", options, progress=False)
    assert summary["events"] == {NO_SCORED_EVENTS: 2}
    lines = [line for line in summary_table(summary).splitlines() if line.startswith("events:")]
    assert lines == ["events: none scored by this dataset (2 recordings)"]
    records = json.loads((tmp_path / "cache" / "manifest.json").read_text())["recordings"]
    assert not any("event_targets" in r or "ahi" in r for r in records)


def test_dreams_text_excerpts_score_no_events(tmp_path: Path) -> None:
    from _eeg_helpers import write_dreams_excerpt

    from multiview_app.data.eeg.dreams import find_excerpts, read_dreams

    write_dreams_excerpt(tmp_path, "excerpt1", 100.0, [0] * 12, "C3-A1")
    excerpts, _ = find_excerpts(tmp_path)
    assert read_dreams(excerpts[0], ["C3-A1"]).events is None


def test_summary_line_lists_classes_even_at_zero() -> None:
    assert event_summary_line({"apnea_hypopnea": 0, "arousal": 0}) == "events: apnea_hypopnea 0, arousal 0"
    assert event_summary_line({}) is None
    assert event_summary_line({NO_SCORED_EVENTS: 1}) == "events: none scored by this dataset (1 recording)"
