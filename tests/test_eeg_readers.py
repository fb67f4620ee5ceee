"""EEG readers, preprocessing and cache on tiny synthetic files in the real formats."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from multiview_app.data.eeg.cache import info, load_manifest, prepare
from multiview_app.data.eeg.physionet2018 import find_records, read_physionet2018
from multiview_app.data.eeg.preprocess import PrepareOptions, make_windows
from multiview_app.data.eeg.recording import Recording
from multiview_app.data.eeg.sleep_edf import find_pairs, read_sleep_edf
from multiview_app.data.eeg.stages import EXCLUDED, PHYSIONET2018_EEG, UNSCORED
from multiview_app.data.eeg.synth import (
    DEFAULT_START,
    SubjectTraits,
    hypnogram_annotations,
    write_edf,
    write_physionet2018_night,
    write_sleep_edf_night,
)

HOURS = 0.5  # 60 epochs


def _traits(seed: int) -> SubjectTraits:
    traits = SubjectTraits.sample(np.random.default_rng(seed))
    traits.latency_minutes = 5.0  # make sure a short night contains sleep
    return traits


def _write_two_nights(out: Path, writer) -> tuple[Path, list[np.ndarray]]:
    """Two subjects' nights written by ``writer`` into ``out``; returns the folder and true stages."""
    truths = []
    for subject in range(2):
        _, stages = writer(out, subject, 0, HOURS, _traits(subject), np.random.default_rng(subject))
        truths.append(stages)
    return out, truths


@pytest.fixture(scope="module")
def sleep_edf_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[np.ndarray]]:
    return _write_two_nights(tmp_path_factory.mktemp("sleep_edf"), write_sleep_edf_night)


@pytest.fixture(scope="module")
def physionet_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[np.ndarray]]:
    return _write_two_nights(tmp_path_factory.mktemp("physionet"), write_physionet2018_night)


def test_sleep_edf_round_trip_labels_match_the_hypnogram(sleep_edf_dir):
    source, truths = sleep_edf_dir
    pairs, problems = find_pairs(source)
    assert problems == [] and len(pairs) == 2
    assert pairs[0][0].name == "SC4001E0-PSG.edf" and pairs[0][1].name.startswith("SC4001E")
    rec = read_sleep_edf(*pairs[0], ["Fpz-Cz", "Pz-Oz"])
    assert rec.recording == "SC4001" and rec.subject == "SC400"
    assert rec.sfreqs == [100.0, 100.0] and rec.signals[0].shape == (int(HOURS * 3600 * 100),)
    np.testing.assert_array_equal(rec.epoch_labels, truths[0])  # EXCLUDED where "Movement time"
    assert rec.counts["excluded_epochs"] == int((truths[0] == EXCLUDED).sum())
    # the unscored "Sleep stage ?" tail beyond the signal is not a stage: not counted as truncated
    assert rec.counts["hypnogram_beyond_signal_epochs"] == 0
    assert set(np.unique(truths[0])) >= {0, 2}, "the tiny night should contain wake and N2"


def test_window_labels_equal_the_synthetic_stages(sleep_edf_dir):
    source, truths = sleep_edf_dir
    rec = read_sleep_edf(*find_pairs(source)[0][0], ["Fpz-Cz", "Pz-Oz"])
    windows, labels, epochs, counts = make_windows(rec, PrepareOptions(channels=["Fpz-Cz", "Pz-Oz"], scaling="window"))
    assert windows.shape == (len(labels), 2, 3000) and windows.dtype == np.float32
    np.testing.assert_array_equal(labels, truths[0][epochs])
    assert (labels >= 0).all() and counts["excluded"] == int((truths[0] == EXCLUDED).sum())
    np.testing.assert_allclose(windows.mean(-1), 0, atol=1e-4)
    np.testing.assert_allclose(windows.std(-1), 1, atol=1e-3)


def test_physionet2018_round_trip(physionet_dir):
    source, truths = physionet_dir
    records = find_records(source)
    assert [r.name for r in records] == ["tr03-0000", "tr03-0001"]
    rec = read_physionet2018(records[1], list(PHYSIONET2018_EEG))
    assert rec.subject == "S0001" and rec.sfreqs == [200.0] * 6
    np.testing.assert_array_equal(rec.epoch_labels, truths[1])
    assert rec.counts["non_stage_notes"] > 0  # arousal notes are read but are not stages
    windows, labels, epochs, counts = make_windows(rec, PrepareOptions(channels=list(PHYSIONET2018_EEG)))
    assert windows.shape[1:] == (6, 3000) and counts["resampled_channels"] == 6
    np.testing.assert_array_equal(labels, truths[1][epochs])


def test_absent_channel_lists_the_available_ones(sleep_edf_dir, physionet_dir):
    psg, hyp = find_pairs(sleep_edf_dir[0])[0][0]
    with pytest.raises(ValueError, match=r"SC4001E0-PSG.edf: channel 'Cz' not found; available: EEG Fpz-Cz, EEG Pz-Oz"):
        read_sleep_edf(psg, hyp, ["Fpz-Cz", "Cz"])
    with pytest.raises(ValueError, match=r"tr03-0000.hea: channel 'Fpz-Cz' not found; available: F3-M2"):
        read_physionet2018(find_records(physionet_dir[0])[0], ["Fpz-Cz"])


def test_truncated_and_corrupt_edf_name_the_file(sleep_edf_dir, tmp_path):
    psg, hyp = find_pairs(sleep_edf_dir[0])[0][0]
    truncated = tmp_path / "SC4001E0-PSG.edf"
    truncated.write_bytes(psg.read_bytes()[:500_000])
    with pytest.raises(ValueError, match=r"SC4001E0-PSG.edf: truncated EDF file"):
        read_sleep_edf(truncated, hyp, ["Fpz-Cz"])
    garbage = tmp_path / "SC4002E0-PSG.edf"
    garbage.write_bytes(b"not an edf at all" * 40)
    with pytest.raises(ValueError, match=r"SC4002E0-PSG.edf: corrupt EDF"):
        read_sleep_edf(garbage, hyp, ["Fpz-Cz"])


def test_truncated_wfdb_and_missing_annotations(physionet_dir, tmp_path):
    source = physionet_dir[0]
    for suffix in (".hea", ".dat", ".arousal"):
        shutil.copy(source / f"tr03-0000{suffix}", tmp_path / f"tr03-0000{suffix}")
    with open(tmp_path / "tr03-0000.dat", "r+b") as handle:
        handle.truncate(10_000)
    with pytest.raises(ValueError, match=r"tr03-0000.dat: truncated WFDB signal file"):
        read_physionet2018(tmp_path / "tr03-0000", ["F3-M2"])
    shutil.copy(source / "tr03-0000.dat", tmp_path / "tr03-0000.dat")
    (tmp_path / "tr03-0000.arousal").unlink()
    with pytest.raises(ValueError, match=r"no sleep-stage annotation file 'tr03-0000.arousal'"):
        read_physionet2018(tmp_path / "tr03-0000", ["F3-M2"])


def _edf_pair(
    folder: Path,
    name: str,
    epochs: int,
    annotations: list[tuple[float, float, str]],
    rates: tuple[float, float] = (100.0, 100.0),
    hyp_start: dt.datetime = DEFAULT_START,
    hyp_patient: str = "X",
    psg_patient: str = "X",
) -> tuple[Path, Path]:
    t = np.arange(int(epochs * 30 * rates[0])) / rates[0]
    u = np.arange(int(epochs * 30 * rates[1])) / rates[1]
    rng = np.random.default_rng(0)
    psg, hyp = folder / f"{name}E0-PSG.edf", folder / f"{name}EC-Hypnogram.edf"
    write_edf(
        psg,
        {
            "EEG Fpz-Cz": (30 * np.sin(2 * np.pi * 10 * t) + rng.normal(0, 5, t.size), rates[0]),
            "EEG Pz-Oz": (30 * np.sin(2 * np.pi * 3 * u) + rng.normal(0, 5, u.size), rates[1]),
        },
        patient=psg_patient,
    )
    write_edf(hyp, {}, annotations, start=hyp_start, patient=hyp_patient)
    return psg, hyp


def test_hypnogram_is_aligned_by_the_header_start_times(tmp_path):
    stages = np.array([0, 0, 1, 2, 2, 3, 3, 4])
    annotations = hypnogram_annotations(stages, np.random.default_rng(0))
    later = DEFAULT_START + dt.timedelta(seconds=90)  # hypnogram starts 3 epochs after the PSG
    psg, hyp = _edf_pair(tmp_path, "SC4105", 12, annotations, hyp_start=later)
    rec = read_sleep_edf(psg, hyp, ["Fpz-Cz", "Pz-Oz"])
    assert (rec.epoch_labels[:3] == UNSCORED).all()
    np.testing.assert_array_equal(rec.epoch_labels[3:11], stages)
    assert rec.counts["hypnogram_offset_seconds"] == 90 and rec.counts["hypnograms_offset_from_psg"] == 1


def test_hypnogram_of_another_night_or_patient_names_both_files(tmp_path):
    annotations = hypnogram_annotations(np.array([0, 1, 2, 2]), np.random.default_rng(0))
    next_night = DEFAULT_START + dt.timedelta(days=1)
    psg, hyp = _edf_pair(tmp_path, "SC4106", 4, annotations, hyp_start=next_night)
    with pytest.raises(
        ValueError,
        match=r"SC4106EC-Hypnogram.edf: its scored stages .* do not overlap its PSG "
        r".*SC4106E0-PSG.edf",
    ):
        read_sleep_edf(psg, hyp, ["Fpz-Cz"])
    psg, hyp = _edf_pair(tmp_path, "SC4107", 4, annotations, psg_patient="SC407", hyp_patient="SC499")
    with pytest.raises(
        ValueError,
        match=r"SC4107EC-Hypnogram.edf: patient field 'SC499 X X X' does not match "
        r"'SC407 X X X' of its PSG .*SC4107E0-PSG.edf",
    ):
        read_sleep_edf(psg, hyp, ["Fpz-Cz"])
    psg, hyp = _edf_pair(tmp_path, "SC4109", 4, annotations, hyp_patient="SC499")  # PSG anonymous: nothing to compare
    assert read_sleep_edf(psg, hyp, ["Fpz-Cz"]).epoch_labels.tolist() == [0, 1, 2, 2]


def test_sleep_edf_signals_are_in_microvolts(tmp_path):
    psg, hyp = _edf_pair(tmp_path, "SC4108", 2, [(0.0, 60.0, "Sleep stage W")])
    rec = read_sleep_edf(psg, hyp, ["Fpz-Cz"])
    assert 25.0 < np.abs(rec.signals[0]).max() < 60.0  # 30 uV sine + 5 uV noise, not 3e-5 V


def test_hypnogram_shorter_than_signal_drops_and_counts(tmp_path):
    stages = np.array([0] * 4 + [1, 2, 2, 2, 3, 3])  # 10 scored epochs
    psg, hyp = _edf_pair(tmp_path, "SC4101", 16, hypnogram_annotations(stages, np.random.default_rng(0)))
    rec = read_sleep_edf(psg, hyp, ["Fpz-Cz", "Pz-Oz"])
    assert rec.counts["signal_beyond_hypnogram_epochs"] == 6
    assert (rec.epoch_labels[10:] == UNSCORED).all()
    _, labels, epochs, counts = make_windows(rec, PrepareOptions(channels=["Fpz-Cz", "Pz-Oz"], crop_wake_minutes=None))
    assert epochs.max() == 9 and counts["unscored"] == 6
    np.testing.assert_array_equal(labels, stages[epochs])


def test_hypnogram_longer_than_signal_is_truncated_and_reported(tmp_path):
    stages = np.array([0, 1, 2, 2, 3, 3, 2, 4, 4, 4, 0, 0])  # 12 scored epochs, signal has 8
    psg, hyp = _edf_pair(tmp_path, "SC4102", 8, hypnogram_annotations(stages, np.random.default_rng(0)))
    rec = read_sleep_edf(psg, hyp, ["Fpz-Cz", "Pz-Oz"])
    assert rec.epoch_labels.size == 8 and rec.counts["hypnogram_beyond_signal_epochs"] == 4
    np.testing.assert_array_equal(rec.epoch_labels, stages[:8])


def test_missing_hypnogram_is_an_error_naming_the_file(tmp_path):
    psg, hyp = _edf_pair(tmp_path, "SC4103", 4, [(0.0, 120.0, "Sleep stage W")])
    hyp.unlink()
    ((psg_found, hyp_found),) = find_pairs(tmp_path)[0]
    assert hyp_found is None
    with pytest.raises(ValueError, match=r"SC4103E0-PSG.edf: no hypnogram found"):
        read_sleep_edf(psg_found, hyp_found, ["Fpz-Cz"])
    with pytest.raises(ValueError, match="no hypnogram found"):
        prepare("sleep-edf", tmp_path, tmp_path / "cache", PrepareOptions(channels=["Fpz-Cz"]), progress=False)


def test_mixed_sampling_rates_are_resampled(tmp_path):
    stages = np.array([0, 1, 2, 2, 3, 3])
    psg, hyp = _edf_pair(
        tmp_path, "SC4104", 6, hypnogram_annotations(stages, np.random.default_rng(0)), rates=(200.0, 100.0)
    )
    rec = read_sleep_edf(psg, hyp, ["Fpz-Cz", "Pz-Oz"])
    assert rec.counts["mixed_rate_channels"] == 2
    windows, labels, _, _ = make_windows(rec, PrepareOptions(channels=["Fpz-Cz", "Pz-Oz"], crop_wake_minutes=None))
    assert windows.shape == (6, 2, 3000)
    spectrum = np.abs(np.fft.rfft(windows[2], axis=-1))
    freqs = np.fft.rfftfreq(3000, 1 / 100.0)
    assert freqs[spectrum[0].argmax()] == pytest.approx(10.0, abs=0.1)  # the 200 Hz channel's 10 Hz sine
    assert freqs[spectrum[1].argmax()] == pytest.approx(3.0, abs=0.1)


def test_flat_and_nan_windows_are_dropped_and_counted():
    fs, epochs = 100.0, 8
    rng = np.random.default_rng(0)
    signals = [rng.normal(0, 20, int(epochs * 30 * fs)) for _ in range(2)]
    signals[0][3 * 3000 + 100 : 3 * 3000 + 200] = np.nan  # epoch 3: NaN in one channel
    signals[1][5 * 3000 : 6 * 3000] = 0.0  # epoch 5: flat channel
    rec = Recording("r", "s", [Path("x")], ["A", "B"], signals, [fs, fs], np.array([0, 1, 2, 2, 3, 3, 4, 0]), Counter())
    windows, labels, epochs_kept, counts = make_windows(
        rec, PrepareOptions(channels=["A", "B"], l_freq=None, h_freq=None, crop_wake_minutes=None)
    )
    assert counts["nan"] == 1 and counts["flat"] == 1
    assert epochs_kept.tolist() == [0, 1, 2, 4, 6, 7] and np.isfinite(windows).all()


def test_cache_incremental_duplicates_and_info(sleep_edf_dir, tmp_path):
    source = tmp_path / "src"
    shutil.copytree(sleep_edf_dir[0], source)
    options = PrepareOptions(channels=["Fpz-Cz", "Pz-Oz"])
    first = prepare("sleep-edf", source, tmp_path / "cache", options, progress=False)
    assert first["prepared"] == ["SC4001", "SC4011"] and first["windows"] > 0
    again = prepare("sleep-edf", source, tmp_path / "cache", options, progress=False)
    assert again["prepared"] == [] and again["skipped_existing"] == ["SC4001", "SC4011"]
    shutil.copy(source / "SC4001E0-PSG.edf", source / "SC4991E0-PSG.edf")  # same night under another name
    shutil.copy(next(source.glob("SC4001E?-Hypnogram.edf")), source / "SC4991EC-Hypnogram.edf")
    third = prepare("sleep-edf", source, tmp_path / "cache", options, progress=False)
    assert third["prepared"] == [] and [d["duplicate_of"] for d in third["duplicates"]] == ["SC4001"]
    manifest = load_manifest(tmp_path / "cache")
    assert manifest["duplicates"][0]["recording"] == "SC4991"
    summary = info(tmp_path / "cache")
    assert summary["recordings"] == 2 and summary["subjects"] == 2 and summary["channels"] == ["Fpz-Cz", "Pz-Oz"]
    assert summary["windows"] == first["windows"] == sum(summary["windows_per_stage"].values())
    stored = np.load(tmp_path / "cache" / manifest["recordings"][0]["file"], mmap_mode="r")
    assert stored.shape == (manifest["recordings"][0]["n_windows"], 2, 3000)
    with pytest.raises(ValueError, match="cache was prepared with"):
        prepare("sleep-edf", source, tmp_path / "cache", PrepareOptions(channels=["Fpz-Cz"]), progress=False)


def test_stage_notes_straddling_and_beyond_the_signal():
    from multiview_app.data.eeg.physionet2018 import stage_epochs_from_notes

    fs, spe = 200.0, 6000
    counts: Counter = Counter()
    notes = [(0, 0), (2 * spe, 2), (3 * spe + 100, 3), (9 * spe, 4)]  # N3 starts inside epoch 3
    labels = stage_epochs_from_notes(notes, 6 * spe, fs, counts)
    assert labels.tolist() == [0, 0, 2, UNSCORED, 3, 3]
    assert counts["epochs_straddling_stage_change"] == 1 and counts["stage_notes_beyond_signal"] == 1


def test_corrupt_wfdb_header_names_the_file(tmp_path):
    (tmp_path / "tr09-0001.hea").write_text("this is not a header\n\x00\x01")
    with pytest.raises(ValueError, match=r"tr09-0001.hea: corrupt WFDB header"):
        read_physionet2018(tmp_path / "tr09-0001", ["F3-M2"])


def test_wake_cropping_keeps_margin_around_sleep():
    from multiview_app.data.eeg.preprocess import wake_crop_mask

    labels = np.array([0] * 100 + [2, 3, 4] + [0] * 100)
    keep = wake_crop_mask(labels, 30.0)  # 60 epochs of wake on each side
    assert keep.sum() == 60 + 3 + 60 and keep[40] and not keep[39] and keep[162] and not keep[163]
    assert wake_crop_mask(labels, None).all() and wake_crop_mask(np.zeros(5, dtype=int), 30.0).all()


def test_bad_prepare_options_are_rejected():
    with pytest.raises(ValueError, match="Nyquist"):
        PrepareOptions(channels=["Fpz-Cz"], h_freq=60.0)
    with pytest.raises(ValueError, match="l_freq"):
        PrepareOptions(channels=["Fpz-Cz"], l_freq=20.0, h_freq=10.0)


def test_download_offline_gives_one_clear_error(monkeypatch, tmp_path):
    import mne.datasets.sleep_physionet.age as age

    from multiview_app.data.eeg.sleep_edf import download_sleep_physionet

    def offline(*args, **kwargs):
        raise OSError("Temporary failure in name resolution")

    monkeypatch.setattr(age, "fetch_data", offline)  # never touches the network
    with pytest.raises(RuntimeError, match=r"download of Sleep-EDF subjects \[0\] failed .*offline"):
        download_sleep_physionet([0], [1], tmp_path)


def _wfdb_epoch_ramp(
    folder: Path, record: str, notes: list[tuple[int, str]], n_epochs: int, offset: int, fs: float = 100.0
) -> Path:
    """A 1-channel record whose signal is a 5 Hz sine of amplitude ``10 * (grid epoch + 1)`` on the
    30-s grid starting at sample ``offset`` (so a window tells which epoch it was cut from)."""
    from multiview_app.data.eeg.synth import write_wfdb_record

    spe = int(30 * fs)
    n = offset + n_epochs * spe
    t = np.arange(n) / fs
    epoch = np.clip((np.arange(n) - offset) // spe, 0, None)
    signal = 10.0 * (epoch + 1) * np.sin(2 * np.pi * 5 * t)
    write_wfdb_record(folder, record, {"F3-M2": signal}, fs, notes)
    return folder / record


def test_physionet_grid_starts_at_the_first_stage_note(tmp_path):
    fs, spe, offset = 100.0, 3000, 700  # first note 7 s into the signal: off the signal's 30-s grid
    codes = ["W", "N1", "N2", "N2", "N3", "R"]
    notes = [(offset + i * spe, c) for i, c in enumerate(codes)]
    record = _wfdb_epoch_ramp(tmp_path, "tr05-0001", notes, len(codes), offset, fs)
    rec = read_physionet2018(record, ["F3-M2"])
    assert rec.epoch_labels.tolist() == [0, 1, 2, 2, 3, 4] and rec.grid_start_seconds == pytest.approx(7.0)
    assert rec.counts["epochs_straddling_stage_change"] == 0
    options = PrepareOptions(channels=["F3-M2"], l_freq=None, h_freq=None, crop_wake_minutes=None)
    raw_windows = []
    for epoch in range(len(codes)):  # each window's raw amplitude names the grid epoch it came from
        start = offset + epoch * spe
        raw_windows.append(np.abs(rec.signals[0][start : start + spe]).max())
    np.testing.assert_allclose(raw_windows, 10.0 * (np.arange(len(codes)) + 1), rtol=0.01)
    windows, labels, epochs, _ = make_windows(rec, options)
    assert labels.tolist() == [0, 1, 2, 2, 3, 4] and epochs.tolist() == list(range(6))
    # without the grid start, epoch 0 would mix 7 s of the signal's first samples into every window
    spectrum = np.abs(np.fft.rfft(windows[:, 0], axis=-1))
    assert (np.fft.rfftfreq(3000, 1 / fs)[spectrum.argmax(-1)] == 5.0).all()


def test_undefined_note_ends_the_stage_and_the_tail_is_counted(tmp_path):
    spe = 3000
    notes = [(0, "W"), (2 * spe, "N2"), (4 * spe, "U"), (6 * spe, "N3")]
    record = _wfdb_epoch_ramp(tmp_path, "tr05-0002", notes, 10, 0)
    rec = read_physionet2018(record, ["F3-M2"])
    assert rec.epoch_labels.tolist() == [0, 0, 2, 2, EXCLUDED, EXCLUDED, 3, 3, 3, 3]  # U: excluded, not N2
    assert rec.counts["epochs_after_last_stage_note"] == 3  # epochs 7-9 hold the last note's N3


def test_arousal_mat_is_the_authority_and_disagreements_are_counted(tmp_path):
    from multiview_app.data.eeg.synth import write_arousal_mat

    spe = 3000
    notes = [(0, "W"), (2 * spe, "N2"), (5 * spe, "N3")]  # notes say N3 until the end
    record = _wfdb_epoch_ramp(tmp_path, "tr05-0003", notes, 8, 0)
    per_sample = np.repeat(np.array([0, 0, 2, 2, 1, 3, UNSCORED, UNSCORED]), spe)  # epoch 4 N1, tail undefined
    write_arousal_mat(tmp_path / "tr05-0003-arousal.mat", per_sample)
    rec = read_physionet2018(record, ["F3-M2"])
    assert rec.epoch_labels.tolist() == [0, 0, 2, 2, 1, 3, UNSCORED, UNSCORED]
    assert rec.counts["stage_notes_disagreeing_with_mat_epochs"] == 1
    assert rec.counts["epochs_scored_by_notes_undefined_in_mat"] == 2
    assert rec.sources[-1].name == "tr05-0003-arousal.mat"
    summary = prepare(
        "physionet2018",
        tmp_path,
        tmp_path / "cache",
        PrepareOptions(channels=["F3-M2"], crop_wake_minutes=None),
        progress=False,
    )
    assert summary["reader_counts"]["stage_notes_disagreeing_with_mat_epochs"] == 1
    (tmp_path / "tr05-0003-arousal.mat").write_bytes(b"garbage")
    with pytest.raises(ValueError, match=r"tr05-0003-arousal.mat: cannot read data/sleep_stages"):
        read_physionet2018(record, ["F3-M2"])


def test_prepare_cli_prints_a_short_table(sleep_edf_dir, tmp_path, capsys):
    from multiview_app.cli import main
    from multiview_app.console import is_progress_line

    assert main(["data", "prepare", "sleep-edf", "--source", str(sleep_edf_dir[0]), "--out", str(tmp_path / "c")]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert "\r" not in captured.out + captured.err  # off a terminal: plain progress lines on stderr, no bar
    assert captured.err and all(is_progress_line(line) for line in captured.err.splitlines())
    assert lines[0].startswith("prepared 2 recordings into") and lines[1].split() == [
        "W",
        "N1",
        "N2",
        "N3",
        "REM",
        "total",
    ]
    assert lines[-1].startswith("details (reader counts, per recording): ") and len(lines) <= 6
    assert "reader counts: " not in captured.out.replace("details (reader counts", "")  # the counters stay in the file
    details = json.loads((tmp_path / "c" / "prepare_summary.json").read_text())
    assert (
        details["prepared"] == ["SC4001", "SC4011"] and sum(details["windows_per_stage"].values()) == details["windows"]
    )
    assert lines[2].split()[-1] == str(details["windows"])


def test_sleep_edf_reads_sc_nights_unless_st_is_asked_for(sleep_edf_dir, tmp_path):
    source = tmp_path / "src"
    shutil.copytree(sleep_edf_dir[0], source)
    shutil.copy(source / "SC4001E0-PSG.edf", source / "ST7011J0-PSG.edf")  # a telemetry-study night
    shutil.copy(next(source.glob("SC4001E?-Hypnogram.edf")), source / "ST7011JP-Hypnogram.edf")
    assert [p.name[:6] for p, _ in find_pairs(source)[0]] == ["SC4001", "SC4011"]
    assert [p.name[:6] for p, _ in find_pairs(source, include_st=True)[0]] == ["SC4001", "SC4011", "ST7011"]
    options = PrepareOptions(channels=["Fpz-Cz"])
    summary = prepare("sleep-edf", source, tmp_path / "c", options, progress=False)
    assert summary["prepared"] == ["SC4001", "SC4011"] and summary["not_selected"] == {
        "st_nights (--include-st to use)": 1
    }
    summary = prepare("sleep-edf", source, tmp_path / "c2", options, progress=False, include_st=True)
    assert summary["duplicates"][0]["recording"] == "ST7011"  # read (and found to be a copy)


def test_physionet_units_become_microvolts(tmp_path):
    from multiview_app.data.eeg.synth import write_wfdb_record

    t = np.arange(3000 * 2) / 100.0
    write_wfdb_record(
        tmp_path, "tr06-0001", {"F3-M2": 0.05 * np.sin(2 * np.pi * 5 * t)}, 100.0, [(0, "W")], units="mV"
    )  # 50 uV written in millivolts
    rec = read_physionet2018(tmp_path / "tr06-0001", ["F3-M2"])
    assert np.abs(rec.signals[0]).max() == pytest.approx(50.0, rel=0.01)
    write_wfdb_record(tmp_path, "tr06-0002", {"F3-M2": np.sin(t)}, 100.0, [(0, "W")], units="degC")
    with pytest.raises(ValueError, match=r"tr06-0002.hea: unit\(s\) \['degc'\] .* are not voltages"):
        read_physionet2018(tmp_path / "tr06-0002", ["F3-M2"])


def test_recording_scaling_keeps_amplitude_differences():
    fs, rng = 100.0, np.random.default_rng(0)
    amplitude = np.array([10.0, 10.0, 80.0, 80.0, 10.0, 10.0])  # N3-like large-amplitude epochs 2, 3
    signal = np.concatenate([a * rng.normal(0, 1, 3000) for a in amplitude])
    rec = Recording("r", "s", [Path("x")], ["A"], [signal], [fs], np.array([0, 2, 3, 3, 2, 0]), Counter())
    window_scaled, *_ = make_windows(rec, PrepareOptions(channels=["A"], crop_wake_minutes=None, scaling="window"))
    recording_scaled, *_ = make_windows(rec, PrepareOptions(channels=["A"], crop_wake_minutes=None))  # the default
    np.testing.assert_allclose(window_scaled.std(-1)[:, 0], 1.0, atol=1e-3)  # z-scoring erases amplitude
    stds = recording_scaled.std(-1)[:, 0]
    assert stds[2] / stds[0] == pytest.approx(8.0, rel=0.1)  # one scale per recording keeps the ratio


def test_encoder_and_band_power_see_the_same_band():
    from multiview_app.data.cli import PREPARE_BAND
    from multiview_app.data.eeg.preprocess import DEFAULT_BAND
    from multiview_app.eval.bandpower import BANDS

    options = PrepareOptions(channels=["A"])
    assert (
        (options.l_freq, options.h_freq)
        == DEFAULT_BAND
        == PREPARE_BAND
        == (min(b[0] for b in BANDS.values()), max(b[1] for b in BANDS.values()))
    )


def test_edf_header_is_parsed_without_private_mne_api(tmp_path):
    from multiview_app.data.eeg.sleep_edf import read_edf_header

    psg, _ = _edf_pair(tmp_path, "SC4110", 2, [(0.0, 60.0, "Sleep stage W")], rates=(200.0, 100.0), psg_patient="SC410")
    header = read_edf_header(psg)
    assert header.start == DEFAULT_START and header.patient.startswith("SC410")
    assert header.labels[:2] == ["EEG Fpz-Cz", "EEG Pz-Oz"]
    assert header.native_rate("EEG Fpz-Cz") == 200.0 and header.native_rate("EEG Pz-Oz") == 100.0
    source = "\n".join(p.read_text() for p in (Path(__file__).parents[1] / "multiview_app").rglob("*.py"))
    assert "_raw_extras" not in source  # the native rates used to come from mne's private raw._raw_extras


def test_prepare_skip_bad_lists_each_skipped_file(tmp_path, capsys) -> None:
    """`--skip-bad` goes on past an unreadable recording and names it (count and file) in the summary."""
    from multiview_app.cli import main

    raw = tmp_path / "raw"
    assert (
        main(
            [
                "data",
                "synth-psg",
                "--subjects",
                "2",
                "--nights",
                "1",
                "--format",
                "sleep-edf",
                "--hours",
                "1",
                "--record-hours",
                "0",
                "--out",
                str(raw),
                "--seed",
                "5",
            ]
        )
        == 0
    )
    bad = sorted(raw.glob("*-PSG.edf"))[1]
    bad.write_bytes(bad.read_bytes()[:300])  # header cut short
    capsys.readouterr()
    assert (
        main(["data", "prepare", "sleep-edf", "--source", str(raw), "--out", str(tmp_path / "cache"), "--skip-bad"])
        == 0
    )
    out = capsys.readouterr().out
    assert "prepared 1 recordings" in out and "1 unreadable, skipped, listed below)" in out, out
    skipped = [line for line in out.splitlines() if line.startswith("  skipped (unreadable): ")]
    assert len(skipped) == 1 and str(bad) in skipped[0], out


def test_microvolts_scaling_keeps_absolute_amplitude_across_recordings():
    from multiview_app.data.eeg.preprocess import MICROVOLTS_PER_UNIT

    fs, rng = 100.0, np.random.default_rng(1)
    stages = np.array([0, 2, 3, 3, 2, 0])
    windows = {}
    for gain in (1.0, 2.0):  # the same night recorded twice as large
        signal = np.concatenate([gain * a * rng.normal(0, 1, 3000) for a in (10.0, 10.0, 80.0, 80.0, 10.0, 10.0)])
        rec = Recording(f"r{gain:g}", "s", [Path("x")], ["A"], [signal], [fs], stages, Counter())
        for scaling in ("recording", "microvolts"):
            windows[gain, scaling], *_ = make_windows(
                rec, PrepareOptions(channels=["A"], crop_wake_minutes=None, scaling=scaling, l_freq=None, h_freq=None)
            )
    uv = windows[1.0, "microvolts"].std(-1)[:, 0] * MICROVOLTS_PER_UNIT
    assert uv[2] == pytest.approx(80.0, rel=0.1) and uv[0] == pytest.approx(10.0, rel=0.15)  # microvolts back
    ratio_uv = windows[2.0, "microvolts"].std(-1) / windows[1.0, "microvolts"].std(-1)
    ratio_recording = windows[2.0, "recording"].std(-1) / windows[1.0, "recording"].std(-1)
    np.testing.assert_allclose(ratio_uv, 2.0, rtol=0.05)  # absolute amplitude survives across recordings
    np.testing.assert_allclose(ratio_recording, 1.0, rtol=0.05)  # the per-recording scale divides it out


def test_highpass_on_a_recording_shorter_than_its_settling_names_the_recording():
    from multiview_app.data.eeg.preprocess import check_highpass_length, highpass_settling_seconds

    assert highpass_settling_seconds(100.0, 0.3) > highpass_settling_seconds(100.0, 0.5) > 1.0
    check_highpass_length("long", 3000, 100.0, 0.3)  # 30 s is plenty at 0.3 Hz
    check_highpass_length("any", 10, 100.0, None)  # no high-pass: nothing to settle
    signal = np.random.default_rng(0).normal(0, 10, 9000)  # 90 s
    rec = Recording("tr09-short", "s", [Path("x")], ["A"], [signal], [100.0], np.array([0, 2, 0]), Counter())
    with pytest.raises(
        ValueError, match=r"^recording tr09-short: 90 s of signal .* 0\.01 Hz high-pass needs to settle"
    ):
        make_windows(rec, PrepareOptions(channels=["A"], crop_wake_minutes=None, l_freq=0.01))
