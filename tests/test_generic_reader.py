"""Your own PSG: the generic EDF / EDF+ / BDF reader, its stage sources and stage maps, bad channels left out and
reported, the BIDS route, ``mvapp data prepare edf / bids``, and DREAMS ``excerpt3.edf`` read through it."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from _eeg_helpers import real_psg

from multiview_app.cli import main
from multiview_app.data.eeg.dreams import read_rk_hypnogram, rk_epochs
from multiview_app.data.eeg.generic import StageSource, read_psg
from multiview_app.data.eeg.recording import majority_epochs
from multiview_app.data.eeg.signals import UnknownChannelError
from multiview_app.data.eeg.stage_maps import load_stage_map
from multiview_app.data.eeg.stages import EXCLUDED, STAGES, UNSCORED

SECONDS = 600.0  # 20 epochs
AASM = ["W", "W", "N1", "N2", "N2", "N2", "N3", "N3", "N2", "R"] * 2  # 20 x 30 s
EVENTS = [(95.0, 20.0, "Obstructive Apnea"), (200.0, 15.0, "Hypopnea"), (300.0, 5.0, "Leg twitch")]


def _signals(seed: int = 0) -> list[dict]:
    """Channels of a small synthetic PSG: (label, samples, rate, unit, physical range)."""
    rng = np.random.default_rng(seed)
    t100 = np.arange(int(SECONDS * 100)) / 100
    eeg_uv = 30 * np.sin(2 * np.pi * 2 * t100) + rng.normal(0, 10, t100.size)
    clipped = np.clip(600 * np.sin(2 * np.pi * 0.25 * np.arange(int(SECONDS * 25)) / 25), -300, 300)
    return [
        {"label": "EEG C3-M2", "data": eeg_uv / 1000, "fs": 100, "unit": "mV"},  # EEG written in mV
        {"label": "E1-M2", "data": rng.normal(0, 20, t100.size), "fs": 100, "unit": "uV"},
        {
            "label": "ECG",
            "data": 800 * np.sin(2 * np.pi * 1.1 * np.arange(int(SECONDS * 200)) / 200),
            "fs": 200,
            "unit": "uV",
        },
        {"label": "Resp chest", "data": np.sin(np.arange(int(SECONDS * 25)) / 25), "fs": 25, "unit": ""},
        {"label": "SpO2", "data": 96 + rng.normal(0, 0.5, int(SECONDS)), "fs": 1, "unit": "%"},
        {"label": "F4-M1", "data": np.full(t100.size, 3.0), "fs": 100, "unit": "uV", "range": (-200.0, 200.0)},
        {"label": "ABD", "data": clipped, "fs": 25, "unit": "uV", "range": (-300.0, 300.0)},
        {"label": "Gadget", "data": rng.normal(0, 1, int(SECONDS)), "fs": 1, "unit": "au"},
    ]


def write_psg(
    path: Path, annotations: list[tuple[float, float, str]] = (), extra: list[dict] = (), bdf: bool = False
) -> Path:
    """Write the synthetic PSG (plus ``extra`` channels) as EDF+ (or BDF) with ``annotations`` via edfio."""
    import edfio

    signal_type = edfio.BdfSignal if bdf else edfio.EdfSignal
    signals = [
        signal_type(
            np.asarray(c["data"], dtype=np.float64),
            c["fs"],
            label=c["label"],
            physical_dimension=c["unit"],
            physical_range=c.get("range"),
        )
        for c in [*_signals(), *extra]
    ]
    notes = [edfio.EdfAnnotation(onset, duration, text) for onset, duration, text in annotations]
    (edfio.Bdf if bdf else edfio.Edf)(signals, annotations=notes or None).write(path)
    return path


def _stage_rows(labels: list[str]) -> list[tuple[float, float, str]]:
    return [(30.0 * i, 30.0, f"Sleep stage {label}") for i, label in enumerate(labels)]


@pytest.fixture(scope="module")
def edf_plus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_psg(tmp_path_factory.mktemp("edf") / "night1.edf", _stage_rows(AASM) + EVENTS)


def _codes(labels: list[str]) -> list[int]:
    return [STAGES.index("REM" if s == "R" else s) for s in labels]


def test_edf_plus_annotation_stages_types_units_and_events(edf_plus: Path) -> None:
    recording, report = read_psg(edf_plus, stages="annotations")
    assert recording.epoch_labels.tolist() == _codes(AASM)
    types = dict(zip(recording.channel_names, recording.channel_types))
    assert types == {
        "EEG C3-M2": "eeg",
        "E1-M2": "eog",
        "ECG": "ecg",
        "Resp chest": "resp",
        "SpO2": "bio",
        "Gadget": "misc",
    }
    units = dict(zip(recording.channel_names, recording.channel_units))
    assert units["EEG C3-M2"] == "uV" and units["ECG"] == "mV" and units["SpO2"] == "%"
    eeg = recording.signals[recording.channel_names.index("EEG C3-M2")]
    assert 15 < eeg.std() < 40  # written in mV, read in uV
    assert abs(recording.signals[recording.channel_names.index("ECG")].max() - 0.8) < 0.01  # 800 uV -> 0.8 mV
    assert recording.sfreqs[recording.channel_names.index("SpO2")] == 1.0
    assert report.misc == ["Gadget"] and recording.counts["channels_misc_unknown_label"] == 1
    assert [(e.onset, e.duration, e.label) for e in recording.events] == [
        (95.0, 20.0, "resp_obstructiveapnea"),
        (200.0, 15.0, "resp_hypopnea"),
    ]
    assert (
        report.unknown_annotations == Counter({"Leg twitch": 1}) and recording.counts["unknown_annotation_labels"] == 1
    )


def test_flat_and_saturated_channels_are_left_out_and_reported(edf_plus: Path) -> None:
    recording, report = read_psg(edf_plus, stages="annotations")
    assert {(o.label, o.reason) for o in report.left_out} == {("F4-M1", "flat"), ("ABD", "saturated")}
    assert "F4-M1" not in recording.channel_names and "ABD" not in recording.channel_names
    assert recording.counts["channels_left_out_flat"] == 1 and recording.counts["channels_left_out_saturated"] == 1
    with pytest.raises(UnknownChannelError, match=r"night1.edf: channel 'ABD' was left out: saturated"):
        read_psg(edf_plus, stages="annotations", channels=["ABD"])


def test_requested_channel_or_modality_missing_names_file_label_and_aliases(edf_plus: Path) -> None:
    with pytest.raises(UnknownChannelError, match=r"night1.edf: channel 'O1-M2' not found.*known eeg aliases: F3-M2"):
        read_psg(edf_plus, stages="annotations", channels=["O1-M2"])
    with pytest.raises(UnknownChannelError, match=r"night1.edf: modality 'muscle': no usable channel.*Chin1-Chin2"):
        read_psg(edf_plus, stages="annotations", channels=["muscle"])
    recording, _ = read_psg(edf_plus, stages="annotations", channels=["brain", "C3-M2"])
    assert recording.channel_names == ["EEG C3-M2", "EEG C3-M2"]


def test_bdf_is_read_with_24_bit_limits(tmp_path: Path) -> None:
    path = write_psg(tmp_path / "night.bdf", _stage_rows(AASM), bdf=True)
    recording, report = read_psg(path)
    assert recording.epoch_labels.tolist() == _codes(AASM)
    assert {(o.label, o.reason) for o in report.left_out} == {("F4-M1", "flat"), ("ABD", "saturated")}
    eeg = recording.signals[recording.channel_names.index("EEG C3-M2")]
    assert 15 < eeg.std() < 40 and report.stage_source == "annotations"


def test_csv_hypnogram_unknown_labels_counted_and_one_source_only(tmp_path: Path) -> None:
    path = write_psg(tmp_path / "night.edf", EVENTS)
    labels = ["W", "N1", "N2", "Stage X", "N3", "R"] + ["N2"] * 14
    path.with_suffix(".csv").write_text(
        "onset,duration,stage\n" + "".join(f"{30 * i},30,{s}\n" for i, s in enumerate(labels))
    )
    recording, report = read_psg(path)  # auto: the CSV beside the file
    expected = [UNSCORED if s == "Stage X" else STAGES.index("REM" if s == "R" else s) for s in labels]
    assert recording.epoch_labels.tolist() == expected
    assert report.unknown_stages == Counter({"Stage X": 1}) and recording.counts["unknown_stage_labels"] == 1
    assert report.stage_source == "csv" and recording.sources[1] == path.with_suffix(".csv")
    assert len(recording.events) == 2  # the EDF+ events are still read
    both = write_psg(tmp_path / "both.edf", _stage_rows(AASM))
    both.with_suffix(".csv").write_text("onset,duration,stage\n0,30,W\n")
    with pytest.raises(ValueError, match=r"both.edf: two stage sources"):
        read_psg(both)
    with pytest.raises(ValueError, match=r"--stages csv: hypnogram .*none.csv not found"):
        read_psg(write_psg(tmp_path / "none.edf"), stages="csv")


def test_csv_scored_every_5_s_is_combined_by_the_majority_rule(tmp_path: Path) -> None:
    path = write_psg(tmp_path / "night.edf")
    rows = ["W"] * 6 + ["N2", "N2", "N1", "N2", "N2", "N1"] + ["N2", "N2", "N3", "N3", "N3", "N2"]
    path.with_suffix(".csv").write_text(
        "stage,onset,duration\n" + "".join(f"{s},{5 * i},5\n" for i, s in enumerate(rows))
    )
    recording, _ = read_psg(path, stages="csv")
    assert recording.epoch_labels[:4].tolist() == [0, 2, EXCLUDED, UNSCORED]  # the 4th epoch has no row
    assert recording.counts["stage_epochs_no_majority"] == 1 and recording.counts["stage_epochs_unanimous"] == 1


def test_stage_channel_with_5_s_labels_majority_rule_user_map_and_event_channel(tmp_path: Path) -> None:
    labels5 = [0] * 6 + [2, 2, 2, 2, 2, 1] + [2, 2, 2, 3, 3, 1] + [9] * 6 + [7] * 6 + [5] * 6
    labels5 += [2] * (SECONDS // 5 - len(labels5)).__int__()
    hypnogram = np.repeat(np.asarray(labels5, dtype=float), 5)  # 1 Hz, one label per 5 s
    apnea = np.zeros(int(SECONDS))
    apnea[40:60], apnea[100:112], apnea[200:210] = 1, 2, 7
    user_map = tmp_path / "lab.yaml"
    user_map.write_text(
        "stages: {'0': W, '1': N1, '2': N2, '3': N3, '5': REM, '9': exclude}\n"
        "events:\n  apnea_ch: {'1': resp_obstructiveapnea, '2': resp_hypopnea}\n"
        "channels: {Gadget: resp}\n"
    )
    extra = [
        {"label": "stage_ch", "data": hypnogram, "fs": 1, "unit": "", "range": (-1.0, 10.0)},
        {"label": "apnea_ch", "data": apnea, "fs": 1, "unit": "", "range": (0.0, 10.0)},
    ]
    path = write_psg(tmp_path / "night.edf", extra=extra)
    recording, report = read_psg(path, stages="channel:stage_ch", stage_map=user_map)
    w, n1, n2, n3, rem = range(5)
    assert recording.epoch_labels[:6].tolist() == [w, n2, EXCLUDED, EXCLUDED, EXCLUDED, rem]
    assert recording.counts["stage_scoring_seconds_5"] == 1 and recording.counts["stage_epochs_movement"] == 1
    assert report.unknown_stages == Counter({"7": 6}) and recording.counts["unknown_stage_labels"] == 6
    assert "stage_ch" not in recording.channel_names and "apnea_ch" not in recording.channel_names
    assert [(e.onset, e.duration, e.label) for e in recording.events] == [
        (40.0, 20.0, "resp_obstructiveapnea"),
        (100.0, 12.0, "resp_hypopnea"),
    ]
    assert report.unknown_events == Counter({"apnea_ch=7": 1})
    assert dict(zip(recording.channel_names, recording.channel_types))["Gadget"] == "resp"  # the map's type
    assert recording.sources[-1] == user_map
    same, _ = read_psg(path, stages=StageSource("channel", "stage_ch", 5.0), stage_map=user_map)
    assert np.array_equal(same.epoch_labels, recording.epoch_labels)


def test_majority_rule_is_shared_with_dreams() -> None:
    labels5 = np.asarray([5] * 6 + [2, 2, 2, 2, 3, 3] + [2, 2, 2, 3, 3, 3] + [-1] * 4 + [2, 2] + [4] * 3)
    expected, dreams_counts = rk_epochs(labels5)
    codes = np.asarray([{5: 0, 4: 4, 3: 1, 2: 2, 1: 3, 0: 3, -1: EXCLUDED}[v] for v in labels5.tolist()])
    shared, counts = majority_epochs(codes, 6, "dreams")
    assert np.array_equal(shared, expected) and counts == dreams_counts
    assert expected.tolist() == [0, 2, EXCLUDED, EXCLUDED] and counts["dreams_epochs_movement"] == 1
    assert counts["dreams_labels_after_last_epoch"] == 3


def test_presets_aasm_rk_dreams_and_bad_user_map(tmp_path: Path) -> None:
    rk, aasm, dreams = load_stage_map("rk"), load_stage_map("aasm"), load_stage_map("dreams")
    assert rk.stage_code("S3") == rk.stage_code("s4") == STAGES.index("N3")
    assert rk.stage_code("Movement time") == EXCLUDED and rk.stage_code("Sleep stage 4") == STAGES.index("N3")
    assert aasm.stage_code("R") == STAGES.index("REM") and aasm.stage_code("S4") is None
    assert (
        dreams.stage_code(0.0) == STAGES.index("N3")
        and dreams.stage_code("5") == 0
        and dreams.stage_code(-1) == EXCLUDED
    )
    assert aasm.event_label("resp_centralapnea") == "resp_centralapnea"  # the vocabulary maps to itself
    bad = tmp_path / "bad.yaml"
    bad.write_text("stages: {W: Wake}\n")
    with pytest.raises(ValueError, match=r"bad.yaml: stages.W: 'Wake', expected one of W, N1, N2, N3, REM or exclude"):
        load_stage_map(bad)
    bad.write_text("events: {Apnea: apnea}\n")
    with pytest.raises(ValueError, match=r"bad.yaml: events.Apnea: 'apnea' is not an event label of psg.yaml"):
        load_stage_map(bad)
    with pytest.raises(ValueError, match=r"stage map 'nope': neither a preset \(aasm, dreams, rk\)"):
        load_stage_map("nope")


def test_rk_annotations_through_the_rk_preset(tmp_path: Path) -> None:
    rows = [(30.0 * i, 30.0, s) for i, s in enumerate(["W", "S1", "S2", "S3", "S4", "REM", "MT", "S2"] * 2 + ["W"] * 4)]
    path = write_psg(tmp_path / "rk.edf", rows)
    recording, _ = read_psg(path, stage_map="rk")
    assert recording.epoch_labels[:8].tolist() == [0, 1, 2, 3, 3, 4, EXCLUDED, 2]
    aasm, report = read_psg(path, stage_map="aasm")  # knows W and REM only: the R&K names are counted
    assert aasm.epoch_labels[:8].tolist() == [0] + [UNSCORED] * 4 + [4, UNSCORED, UNSCORED]
    assert report.unknown_annotations == Counter({"S1": 2, "S2": 4, "S3": 2, "S4": 2, "MT": 2})
    with pytest.raises(ValueError, match=r"none.edf: --stages annotations: no annotation is a stage of the stage map"):
        read_psg(write_psg(tmp_path / "none.edf", [(0.0, 30.0, "S1")]), stages="annotations")


def test_prepare_edf_through_the_cli(tmp_path: Path, edf_plus: Path, capsys: pytest.CaptureFixture) -> None:
    source = edf_plus.parent
    out = tmp_path / "cache"
    args = ["data", "prepare", "edf", "--source", str(source), "--out", str(out), "--channels", "C3-M2", "E1-M2"]
    assert main([*args, "--stages", "annotations", "--stage-map", "aasm", "--crop-wake-minutes", "none"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    record = manifest["recordings"][0]
    assert manifest["reader_options"] == {"stages": "annotations", "stage_map": "aasm"}
    assert record["recording"] == "night1" and record["n_windows"] == 20
    assert record["counts"]["left_out:ABD:saturated"] == 1 and record["counts"]["left_out:F4-M1:flat"] == 1
    assert record["counts"]["unknown_annotation_label:Leg twitch"] == 1
    refused = {
        "--channels SpO2": r"night1.edf: channels SpO2 \(%\) are not in uV",
        "": r"edf: name the channels to prepare with --channels",
    }
    for extra, message in refused.items():
        assert main(["data", "prepare", "edf", "--source", str(source), "--out", str(tmp_path / "c2"), *extra.split()])
        assert re.search(message, capsys.readouterr().err)
    assert main(
        ["data", "prepare", "dreams", "--source", str(source), "--out", str(tmp_path / "c4"), "--stages", "csv"]
    )
    assert "--stages: only for edf and bids, not dreams" in capsys.readouterr().err


def _write_bids(root: Path) -> None:
    """A one-subject BIDS dataset written with mne-bids from an mne RawArray (exported to EDF)."""
    import mne
    from mne_bids import BIDSPath, write_raw_bids

    rng = np.random.default_rng(1)
    n = int(SECONDS * 100)
    data = np.stack([rng.normal(0, 20e-6, n), rng.normal(0, 30e-6, n), 1e-3 * np.sin(np.arange(n) / 10)])
    info = mne.create_info(["C3-M2", "E1-M2", "ECG"], 100.0, ["eeg", "eog", "ecg"])
    raw = mne.io.RawArray(data, info, verbose="error")
    rows = _stage_rows(AASM)[:-1] + EVENTS[:2]
    raw.set_annotations(
        mne.Annotations([r[0] for r in rows], [r[1] for r in rows], [r[2].replace("Sleep stage ", "") for r in rows])
    )
    bids_path = BIDSPath(subject="01", task="sleep", datatype="eeg", root=root)
    write_raw_bids(raw, bids_path, format="EDF", allow_preload=True, verbose="error")


def test_bids_route_reads_back_and_prepares(tmp_path: Path) -> None:
    from multiview_app.data.eeg.bids import find_bids_recordings, read_bids

    root = tmp_path / "bids"
    _write_bids(root)
    (path,) = find_bids_recordings(root)
    recording, report = read_bids(path)
    assert recording.subject == "sub-01" and report.stage_source == "annotations"
    assert recording.epoch_labels[:19].tolist() == _codes(AASM)[:19] and recording.epoch_labels[19] == UNSCORED
    assert dict(zip(recording.channel_names, recording.channel_types)) == {"C3-M2": "eeg", "E1-M2": "eog", "ECG": "ecg"}
    assert 15 < recording.signals[0].std() < 25 and recording.channel_units == ["uV", "uV", "mV"]
    assert [e.label for e in recording.events] == ["resp_obstructiveapnea", "resp_hypopnea"]
    out = tmp_path / "cache"
    args = ["data", "prepare", "bids", "--source", str(root), "--out", str(out), "--channels", "C3-M2"]
    assert main([*args, "--crop-wake-minutes", "none"]) == 0
    record = json.loads((out / "manifest.json").read_text())["recordings"][0]
    assert record["subject"] == "sub-01" and record["n_windows"] == 19
    assert [Path(s["path"]).name for s in record["sources"]][1] == "sub-01_task-sleep_events.tsv"


# ----------------------------------------------------------------------------- DREAMS excerpt3.edf (real)


def test_dreams_excerpt3_through_the_generic_reader() -> None:
    folder = real_psg("dreams-spindles")
    recording, report = read_psg(folder / "excerpt3.edf", stages="channel:hypnogram", stage_map="dreams")
    per_stage = Counter(STAGES[c] for c in recording.epoch_labels.tolist() if c >= 0)
    assert per_stage == {"N2": 39, "N1": 12, "W": 6, "N3": 3} and "REM" not in per_stage  # N2-heavy, no REM
    expected, _ = rk_epochs(read_rk_hypnogram(folder / "Hypnogram_excerpt3.txt"))
    assert np.array_equal(recording.epoch_labels, expected)  # the channel equals the text hypnogram
    assert {(o.label, o.reason) for o in report.left_out} == {
        ("VAB", "saturated"),
        ("VTH", "saturated"),
        ("SAO2", "out_of_range"),
        ("PR", "out_of_range"),
    }
    assert set(report.not_signals) == {"hypnogram_aut", "event_pneumo_aut", "event_neuro"}
    c3 = recording.signals[recording.channel_names.index("C3-A1")]
    assert recording.channel_units[recording.channel_names.index("C3-A1")] == "uV" and 10 < c3.std() < 40
    assert len(recording.events) == 39 and {e.label for e in recording.events} == {"resp_event_unspecified"}
    assert all(14 <= e.duration <= 30 for e in recording.events)


# ----------------------------------------------------------------------------- docs/eeg.md "Your own PSG"


def _doc_blocks(language: str) -> list[str]:
    text = (Path(__file__).resolve().parents[1] / "docs" / "eeg.md").read_text()
    section = text.split("## Your own PSG\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.S)


def test_docs_route_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    import shlex

    monkeypatch.chdir(tmp_path)
    write, read = _doc_blocks("python")
    exec(compile(write, "docs/eeg.md", "exec"), {})
    prepare, info = _doc_blocks("bash")[0].strip().splitlines()
    assert main(shlex.split(prepare)[1:]) == 0
    assert "channels left out (channel:reason recordings): F4-M1:flat 1" in capsys.readouterr().out
    assert main(shlex.split(info)[1:]) == 0
    namespace: dict = {}
    exec(compile(read, "docs/eeg.md", "exec"), namespace)
    assert [(o.label, o.reason) for o in namespace["report"].left_out] == [("F4-M1", "flat")]
    assert namespace["report"].unknown_annotations == Counter({"Leg twitch": 1})
    (example,) = _doc_blocks("yaml")
    (tmp_path / "my-lab.yaml").write_text(example)
    lab = load_stage_map(tmp_path / "my-lab.yaml")
    assert lab.stage_code("4") == STAGES.index("N3") and lab.event_channels["flow_events"]["2"] == "resp_hypopnea"


def test_prepare_edf_with_modalities_caches_one_file_per_group(tmp_path: Path, edf_plus: Path) -> None:
    """Your own EDF as modalities: every usable signal is read with its type, one window file per group; the
    flat F4-M1 and the saturated ABD are left out and reported, never used."""
    source = tmp_path / "src"
    source.mkdir()
    (source / "night1.edf").symlink_to(edf_plus)
    out = tmp_path / "cache"
    args = ["data", "prepare", "edf", "--source", str(source), "--out", str(out), "--channels", "C3-M2"]
    assert main([*args, "--stages", "annotations", "--modalities", "brain,heart,breathing,oximetry"]) == 0
    record = json.loads((out / "manifest.json").read_text())["recordings"][0]
    assert set(record["modalities"]) == {"brain", "heart", "breathing", "oximetry"}
    assert record["modalities"]["breathing"]["channels"] == ["Resp chest"]  # ABD saturated: left out
    windows = {g: np.load(out / record["modalities"][g]["file"], mmap_mode="r") for g in record["modalities"]}
    assert windows["heart"].shape[1:] == (1, 200 * 30) and windows["oximetry"].shape[1:] == (1, 30)
    assert {w.shape[0] for w in windows.values()} == {len(AASM)}  # shared epochs
    assert "ABD:saturated" in (out / "prepare_summary.json").read_text()  # reported


def test_emg_rms_envelope_joins_muscle_without_the_band_pass(tmp_path: Path) -> None:
    """A file's own EMG RMS envelope is a muscle channel that keeps its slow course: only the muscle group's
    robust scaling, no 10-45 Hz band-pass (which would leave it near zero); the raw chin EMG beside it is
    band-passed, and the manifest says which channel is an envelope."""
    t100 = np.arange(int(SECONDS * 100)) / 100
    envelope = 5.0 + 3.0 * np.sin(2 * np.pi * t100 / 120.0)  # uV, one slow cycle every 2 min
    chin = np.random.default_rng(1).normal(0, 5, t100.size) + 40 * np.sin(2 * np.pi * 0.2 * t100)  # drift
    extra = [
        {"label": "EMG RMS", "data": envelope, "fs": 100, "unit": "uV"},
        {"label": "Chin1-Chin2", "data": chin, "fs": 100, "unit": "uV"},
    ]
    source = tmp_path / "src"
    source.mkdir()
    write_psg(source / "night1.edf", _stage_rows(AASM), extra=extra)
    out = tmp_path / "cache"
    args = ["data", "prepare", "edf", "--source", str(source), "--out", str(out), "--stages", "annotations"]
    assert main([*args, "--channels", "C3-M2", "--modalities", "muscle"]) == 0
    record = json.loads((out / "manifest.json").read_text())["recordings"][0]["modalities"]["muscle"]
    assert record["channels"] == ["EMG RMS", "Chin1-Chin2"] and record["envelopes"] == [True, False]
    windows = np.load(out / record["file"])  # (w, 2, 3000)
    kept = windows[:, 0].reshape(-1)
    assert np.corrcoef(kept, envelope[: kept.size])[0, 1] > 0.99  # the envelope's course, robust-scaled
    chin_spectrum = np.abs(np.fft.rfft(windows[:, 1].reshape(-1)))
    frequencies = np.fft.rfftfreq(windows[:, 1].size, 1 / 100)
    drift, band = chin_spectrum[(frequencies > 0.1) & (frequencies < 1.0)], chin_spectrum[frequencies > 10.0]
    assert drift.max() < 3 * np.median(band)  # the 0.2 Hz drift is gone: band-passed as raw EMG
