"""Every PSG signal with its type, unit and rate, prepared per modality group (``prepare --modalities``):
readers' types and units, the per-group cache, its bad inputs and ``data info``; small 20-min records."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
from _eeg_helpers import real_psg, write_dreams_excerpt, write_psg_night, write_sha256sums

from multiview_app.cli import main
from multiview_app.data.eeg.cache import load_manifest, prepare
from multiview_app.data.eeg.dreams import find_excerpts, read_dreams
from multiview_app.data.eeg.modalities import parse_modalities
from multiview_app.data.eeg.physionet2018 import read_physionet2018
from multiview_app.data.eeg.preprocess import PrepareOptions
from multiview_app.data.eeg.signals import UnknownChannelError
from multiview_app.data.eeg.sleep_edf import read_sleep_edf
from multiview_app.data.eeg.stages import PHYSIONET2018_EEG
from multiview_app.data.eeg.synth import DEFAULT_START, hypnogram_annotations, write_edf

MINUTES, FS = 20, 200.0
EEG = list(PHYSIONET2018_EEG)
OFF_EPOCHS = range(10, 13)  # SaO2 sensor off (0 %) in these epochs of night A


def _night_a_edits(fs: float = FS) -> dict[str, np.ndarray]:
    """Night A: CHEST flat, the chin EMG beyond the recorder's range (saturated), SaO2 at 0 % for three epochs."""
    n = int(MINUTES * 60 * fs)
    rng = np.random.default_rng(5)
    spo2 = np.round(96.0 + rng.normal(0, 0.5, n))
    for epoch in OFF_EPOCHS:
        spo2[int(epoch * 30 * fs) : int((epoch + 1) * 30 * fs)] = 0.0
    return {"CHEST": np.full(n, 0.25), "Chin1-Chin2": rng.normal(0, 2000, n), "SaO2": spo2}


@pytest.fixture(scope="module")
def psg_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two 20-min PhysioNet-format records with all 13 signals: night A with a flat, a saturated and a
    switched-off channel, night B whose ECG has a label no vocabulary knows (no heart modality)."""
    source = tmp_path_factory.mktemp("psg")
    write_psg_night(source / "a", "tr00-0001", MINUTES, seed=1, edit=_night_a_edits())
    write_psg_night(source / "b", "tr00-0002", MINUTES, seed=2, rename={"ECG": "XYZ"})
    return source


@pytest.fixture(scope="module")
def six_cache(psg_source: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """``mvapp data prepare physionet2018 --modalities six`` of :func:`psg_source`, and what it printed."""
    out = tmp_path_factory.mktemp("six") / "cache"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(
            ["data", "prepare", "physionet2018", "--source", str(psg_source), "--out", str(out), "--modalities", "six"]
        )
    assert code == 0
    return out, printed.getvalue()


def test_physionet_reader_gives_every_signal_its_type_and_canonical_unit(psg_source: Path) -> None:
    record = psg_source / "b" / "tr00-0002"
    every = read_physionet2018(record, None)
    types = dict(zip(every.channel_names, every.channel_types))
    units = dict(zip(every.channel_names, every.channel_units))
    assert [types[c] for c in EEG] == ["eeg"] * 6 and types["E1-M2"] == "eog" and types["Chin1-Chin2"] == "emg"
    assert types["ABD"] == types["CHEST"] == types["AIRFLOW"] == "resp" and types["SaO2"] == "bio"
    assert types["XYZ"] == "misc"
    assert units["F3-M2"] == "uV" and units["SaO2"] == "%" and units["ABD"] == "arbitrary"
    spo2 = every.signals[every.channel_names.index("SaO2")]
    assert 90 < np.median(spo2) < 100  # percent, not scaled as a voltage
    eeg_only = read_physionet2018(record, ["F3-M2"])
    np.testing.assert_array_equal(eeg_only.signals[0], every.signals[0])  # EEG: the same microvolts as before
    ecg = read_physionet2018(psg_source / "a" / "tr00-0001", ["ECG"])
    assert ecg.channel_units == ["mV"] and np.abs(ecg.signals[0]).max() < 5  # written in mV, kept in mV


def test_sleep_edf_reader_types_units_and_native_rates(tmp_path: Path) -> None:
    import edfio

    epochs, rng = 8, np.random.default_rng(0)
    n, slow = epochs * 3000, epochs * 30

    def signal(label: str, data: np.ndarray, fs: float, unit: str) -> edfio.EdfSignal:
        return edfio.EdfSignal(data, fs, label=label, physical_dimension=unit, physical_range=(-500, 500))

    psg, hyp = tmp_path / "SC4001E0-PSG.edf", tmp_path / "SC4001EC-Hypnogram.edf"
    edfio.Edf(
        [
            signal("EEG Fpz-Cz", rng.normal(0, 20, n), 100, "uV"),
            signal("EOG horizontal", rng.normal(0, 20, n), 100, "uV"),
            signal("EMG submental", rng.normal(0, 5, slow), 1, "uV"),
            signal("Resp oro-nasal", rng.normal(0, 100, slow), 1, ""),
            signal("Temp rectal", 37 + rng.normal(0, 0.1, slow), 1, "DegC"),
        ],
        recording=edfio.Recording(startdate=DEFAULT_START.date()),
        starttime=DEFAULT_START.time(),
    ).write(psg)
    write_edf(hyp, {}, hypnogram_annotations(np.array([0, 1, 2, 2, 3, 3, 4, 0]), rng))
    rec = read_sleep_edf(psg, hyp, None)
    assert rec.channel_types == ["eeg", "eog", "emg", "resp", "misc"]
    assert rec.channel_units == ["uV", "uV", "uV", "arbitrary", "arbitrary"]
    assert rec.native_sfreqs == [100.0, 100.0, 1.0, 1.0, 1.0]
    assert 36 < np.median(rec.signals[4]) < 38  # a temperature is not multiplied into microvolts
    np.testing.assert_array_equal(read_sleep_edf(psg, hyp, ["Fpz-Cz"]).signals[0], rec.signals[0])
    with pytest.raises(
        ValueError, match=r"'EMG submental' is recorded at 1 Hz, below the 100 Hz asked for modality muscle"
    ):
        prepare("sleep-edf", tmp_path, tmp_path / "cache", PrepareOptions(channels=["Fpz-Cz"]), progress=False,
                modalities="brain,muscle")  # fmt: skip
    summary = prepare("sleep-edf", tmp_path, tmp_path / "ok", PrepareOptions(channels=["Fpz-Cz"], crop_wake_minutes=None),
                      progress=False, modalities="brain,eyes")  # fmt: skip
    assert summary["windows"] == 8 and summary["modalities"]["missing"] == []


def test_six_groups_share_epochs_with_their_own_rate_and_scaling(six_cache: tuple[Path, str]) -> None:
    out, _ = six_cache
    manifest = load_manifest(out)
    groups = manifest["modality_groups"]
    assert list(groups) == ["brain", "eyes", "muscle", "heart", "breathing", "oximetry"]
    assert groups["oximetry"]["scaling"] == "affine" and groups["breathing"]["sfreq"] == 10.0
    night_b = next(r for r in manifest["recordings"] if r["recording"] == "tr00-0002")
    shapes = {g: np.load(out / m["file"], mmap_mode="r").shape for g, m in night_b["modalities"].items()}
    n = night_b["n_windows"]
    assert shapes == {
        "brain": (n, 6, 3000),
        "eyes": (n, 1, 3000),
        "muscle": (n, 1, 3000),
        "breathing": (n, 3, 300),
        "oximetry": (n, 1, 30),
    }
    assert night_b["missing_modalities"] == {"heart": "no ecg channel in the file"}
    brain = np.load(out / night_b["modalities"]["brain"]["file"])
    np.testing.assert_allclose(brain.std(axis=-1), 1.0, atol=1e-3)  # window z-score
    oximetry = np.load(out / night_b["modalities"]["oximetry"]["file"])
    assert -1.0 < float(np.median(oximetry)) < 1.0  # (SpO2 - 95) / 5 around 96 %: not z-scored
    assert night_b["modalities"]["oximetry"]["units"] == ["%"]


def test_brain_group_equals_the_eeg_only_cache(psg_source: Path, six_cache: tuple[Path, str], tmp_path: Path) -> None:
    out, _ = six_cache
    options = PrepareOptions(channels=EEG, scaling="window")  # the brain group z-scores per window
    prepare("physionet2018", psg_source, tmp_path / "eeg", options, progress=False)
    eeg = {r["recording"]: r for r in load_manifest(tmp_path / "eeg")["recordings"]}
    assert "modality_groups" not in load_manifest(tmp_path / "eeg")  # no --modalities: the EEG cache as before
    record = next(r for r in load_manifest(out)["recordings"] if r["recording"] == "tr00-0002")
    assert record["epochs"] == eeg["tr00-0002"]["epochs"]
    np.testing.assert_array_equal(
        np.load(out / record["modalities"]["brain"]["file"]), np.load(tmp_path / "eeg" / eeg["tr00-0002"]["file"])
    )


def test_bad_channels_are_left_out_and_sensor_off_windows_marked(six_cache: tuple[Path, str]) -> None:
    out, printed = six_cache
    night_a = next(r for r in load_manifest(out)["recordings"] if r["recording"] == "tr00-0001")
    left = {c["channel"]: c["problem"] for c in night_a["left_out_channels"]}
    assert left == {"CHEST": "flat", "Chin1-Chin2": "saturated"}
    assert night_a["modalities"]["breathing"]["channels"] == ["ABD", "AIRFLOW"]
    assert night_a["missing_modalities"] == {"muscle": "every channel left out (Chin1-Chin2: saturated)"}
    invalid = np.asarray(night_a["invalid_oximetry"])
    assert invalid.size == night_a["n_windows"]
    assert sorted(np.asarray(night_a["epochs"])[invalid]) == [e for e in OFF_EPOCHS if e in night_a["epochs"]]
    summary = json.loads((out / "prepare_summary.json").read_text())["modalities"]
    assert summary["invalid_windows"] == {"oximetry": int(invalid.sum())} and invalid.sum() == 3
    assert "2 recordings miss a modality (2 recording-modality pairs, listed below), 2 channels left out" in printed
    assert "tr00-0002 misses heart (no ecg channel in the file)" in printed
    assert "left out CHEST (breathing) of tr00-0001: flat" in printed
    assert "windows with invalid oximetry (marked, kept): 3" in printed


def test_rerun_is_incremental_and_other_modalities_are_refused(psg_source: Path, six_cache: tuple[Path, str]) -> None:
    out, _ = six_cache
    options = PrepareOptions(channels=EEG)
    again = prepare("physionet2018", psg_source, out, options, progress=False, modalities="six")
    assert again["prepared"] == [] and len(again["skipped_existing"]) == 2
    with pytest.raises(ValueError, match="cache was prepared with"):
        prepare("physionet2018", psg_source, out, options, progress=False, modalities="sleepfm")
    with pytest.raises(ValueError, match="cache was prepared with"):
        prepare("physionet2018", psg_source, out, options, progress=False)


def test_data_info_shows_each_recordings_modalities(six_cache: tuple[Path, str], capsys) -> None:
    out, _ = six_cache
    assert main(["data", "info", str(out)]) == 0
    text = capsys.readouterr().out
    assert "tr00-0001: brain 6 ch 100 Hz uV; eyes 1 ch 100 Hz uV; muscle missing (every channel left out" in text
    assert "breathing 2 ch 10 Hz arbitrary (left out: CHEST flat); oximetry 1 ch 1 Hz %" in text
    assert "tr00-0002:" in text and "heart missing (no ecg channel in the file)" in text


def test_unknown_label_names_the_file_label_and_aliases(psg_source: Path, tmp_path: Path) -> None:
    options = PrepareOptions(channels=EEG)
    with pytest.raises(
        UnknownChannelError, match=r"tr00-0001\.dat: channel 'EKG9' asked for modality heart .* ECG, EKG"
    ):
        prepare("physionet2018", psg_source, tmp_path / "c", options, progress=False, modalities="brain,heart=EKG9")
    with pytest.raises(ValueError, match="'lungs' is neither a preset .* nor a modality group"):
        parse_modalities("brain,lungs")
    assert list(parse_modalities("sleepfm")) == ["brain", "eyes", "heart", "breathing", "oximetry"]
    assert parse_modalities("heart=ECG+EKG,brain") == {"brain": None, "heart": ["ECG", "EKG"]}


def test_group_above_the_recorded_rate_is_an_error(tmp_path: Path) -> None:
    write_psg_night(tmp_path / "src", "tr00-0003", 10, seed=3, fs=100.0)
    with pytest.raises(
        ValueError, match=r"channel 'ECG' is recorded at 100 Hz, below the 200 Hz asked for modality heart"
    ):
        prepare("physionet2018", tmp_path / "src", tmp_path / "c", PrepareOptions(channels=EEG), progress=False,
                modalities="heart")  # fmt: skip


def test_dreams_card_allows_upsampling_and_prepare_reports_it(tmp_path: Path) -> None:
    labels5 = [5] * 6 + [2] * 30 + [3] * 6 + [1] * 30
    write_dreams_excerpt(tmp_path, "excerpt3", 50.0, labels5)  # the card: excerpt 3 at 50 Hz
    write_sha256sums(tmp_path, ["excerpt3.txt"])
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["data", "prepare", "dreams", "--source", str(tmp_path), "--out", str(tmp_path / "c"),
                     "--modalities", "brain,eyes"])  # fmt: skip
    assert code == 0
    summary = json.loads((tmp_path / "c" / "prepare_summary.json").read_text())["modalities"]
    assert summary["upsampled"] == {"excerpt3": ["C3-A1"]}
    assert summary["missing"] == [{"recording": "excerpt3", "group": "eyes", "reason": "no eog channel in the file"}]
    assert "upsampled excerpt3: C3-A1" in printed.getvalue() and "1 recordings upsampled" in printed.getvalue()


def test_real_dreams_excerpt3_edf_reads_every_signal(tmp_path: Path) -> None:
    folder = real_psg("dreams-spindles")
    if not (folder / "excerpt3.edf").is_file():
        pytest.skip(f"no real DREAMS excerpt3.edf under {folder}")
    excerpt = next(e for e in find_excerpts(folder)[0] if e.name == "excerpt3")
    every = read_dreams(excerpt, None)
    kinds = dict(zip(every.channel_names, zip(every.channel_types, every.channel_units)))
    assert kinds["C3-A1"] == ("eeg", "uV") and kinds["EOG1-A1"] == ("eog", "uV") and kinds["ECG"] == ("ecg", "mV")
    assert kinds["VAB"] == ("resp", "arbitrary") and kinds["SAO2"] == ("bio", "%")
    central = read_dreams(excerpt, ["central"]).signals[0]
    np.testing.assert_array_equal(central, every.signals[every.channel_names.index("C3-A1")])
