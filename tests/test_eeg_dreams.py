"""The DREAMS reader on small files written in the DREAMS format (no real data needed): the 5-s -> 30-s
rule, prepare into the common cache, checksum refusal, the EDF unit check, and bad input refused
before anything is written. The same reader on the real excerpts: tests/test_eeg_real.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _eeg_helpers import write_dreams_excerpt, write_sha256sums

from multiview_app.cli import main
from multiview_app.data.eeg.cache import load_manifest, load_windows, prepare
from multiview_app.data.eeg.dreams import (
    Excerpt,
    edf_microvolts,
    find_excerpts,
    inspect_excerpt,
    read_dreams,
    rk_epochs,
)
from multiview_app.data.eeg.preprocess import PrepareOptions
from multiview_app.data.eeg.stages import EXCLUDED

W, REM, S1, S2, S3, S4, MT = 5, 4, 3, 2, 1, 0, -1
N1, N2, N3 = 1, 2, 3


def test_rule_five_second_labels_to_thirty_second_epochs() -> None:
    labels5 = np.array(
        [W] * 6  # unanimous W
        + [S3, S4, S3, S4, S4, S3]  # unanimous N3 (S3 + S4)
        + [S2, S2, S2, S2, S1, S1]  # majority N2 (4 of 6)
        + [S2, S2, S2, S1, S1, S1]  # 3 / 3: no majority -> excluded
        + [MT, MT, MT, MT, W, W]  # movement -> excluded
        + [REM, REM, REM, REM, REM, MT]  # majority REM (5 of 6, one movement)
        + [S2, S2]
    )  # incomplete trailing epoch: not scored
    labels, counts = rk_epochs(labels5)
    np.testing.assert_array_equal(labels, [0, N3, N2, EXCLUDED, EXCLUDED, 4])
    assert counts == {
        "dreams_epochs_unanimous": 2,
        "dreams_epochs_majority": 2,
        "dreams_epochs_no_majority": 1,
        "dreams_epochs_movement": 1,
        "dreams_labels_after_last_epoch": 2,
    }


def _two_excerpts(folder: Path) -> list[list[int]]:
    """excerpt1 (C3-A1, 100 Hz) and excerpt2 (CZ-A1, 200 Hz, 140 samples past its hypnogram, as the real
    excerpt 6), 8 epochs each, with a SHA256SUMS."""
    hyps = [
        [W] * 12 + [S1] * 6 + [S2] * 12 + [S2, S2, S2, S2, S3, S3] + [S3, S4] * 9,
        [S2] * 6 + [S2, S2, S2, S1, S1, S1] + [S3] * 12 + [REM] * 12 + [W] * 6 + [S1] * 6,
    ]
    write_dreams_excerpt(folder, "excerpt1", 100.0, hyps[0], "C3-A1")
    write_dreams_excerpt(folder, "excerpt2", 200.0, hyps[1], "CZ-A1", extra_samples=140, seed=1)
    write_sha256sums(folder, ["excerpt1.txt", "excerpt2.txt"])
    return hyps


def test_prepare_dreams_writes_the_common_cache_with_the_rule_counts(tmp_path: Path, capsys) -> None:
    hyps = _two_excerpts(tmp_path / "src")
    assert main(["data", "prepare", "dreams", "--source", str(tmp_path / "src"), "--out", str(tmp_path / "cache")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("prepared 2 recordings into") and lines[1].split() == [
        "W",
        "N1",
        "N2",
        "N3",
        "REM",
        "total",
    ]
    assert lines[2].split()[0] == "windows" and lines[2].split()[-1] == "16" and "dropped: excluded 1" in lines
    assert len(lines) <= 6 and max(map(len, lines)) < 160  # a short table, not the readers' counters
    manifest = load_manifest(tmp_path / "cache")
    assert manifest["dataset"] == "dreams" and manifest["channels"] == ["central"] and manifest["sfreq"] == 100.0
    by_id = {r["recording"]: r for r in manifest["recordings"]}
    for name, hyp in zip(("excerpt1", "excerpt2"), hyps):
        expected, _ = rk_epochs(np.asarray(hyp))
        record = by_id[name]
        assert record["subject"] == name
        np.testing.assert_array_equal(record["labels"], expected[expected >= 0])
        np.testing.assert_array_equal(record["epochs"], np.flatnonzero(expected >= 0))
        assert load_windows(tmp_path / "cache", record).shape == (record["n_windows"], 1, 3000)
    assert by_id["excerpt1"]["counts"]["derivation_C3-A1"] == 1 and by_id["excerpt2"]["counts"]["derivation_CZ-A1"] == 1
    assert by_id["excerpt2"]["counts"]["samples_after_hypnogram"] == 140
    assert by_id["excerpt2"]["counts"]["dreams_epochs_no_majority"] == 1
    summary = json.loads((tmp_path / "cache" / "prepare_summary.json").read_text())
    assert summary["reader_counts"]["dreams_epochs_unanimous"] == 15
    assert summary["reader_counts"]["dreams_epochs_majority"] == 1
    assert summary["dropped"]["excluded"] == 1 and summary["windows"] == 16
    assert "files_without_checksum" not in summary["reader_counts"]  # every file listed and checked


def test_windows_follow_the_excerpt_signal(tmp_path: Path) -> None:
    """The cached window of an epoch is the excerpt's 30 s resampled to 100 Hz (the rhythm's amplitude
    follows the label, so a label/window shift would show)."""
    _two_excerpts(tmp_path / "src")
    prepare(
        "dreams",
        tmp_path / "src",
        tmp_path / "cache",
        PrepareOptions(channels=["central"], l_freq=None, h_freq=None, scaling="recording"),
        progress=False,
    )
    manifest = load_manifest(tmp_path / "cache")
    record = next(r for r in manifest["recordings"] if r["recording"] == "excerpt2")
    windows = load_windows(tmp_path / "cache", record)
    amplitude = windows[:, 0].std(axis=-1)
    labels = np.asarray(record["labels"])
    # the amplitude is the R&K code + 3: W (5) > REM (4) > N1 (3) > N2 (2) > N3 (1, 0)
    means = [amplitude[labels == stage].mean() for stage in (0, 4, 1, 2, 3)]
    assert means == sorted(means, reverse=True)


def test_modified_file_is_refused_naming_it_and_nothing_is_written(tmp_path: Path) -> None:
    _two_excerpts(tmp_path / "src")
    signal = tmp_path / "src" / "excerpt2.txt"
    signal.write_text(signal.read_text() + "    1.0000\n")
    with pytest.raises(ValueError, match=f"{signal}: sha256 .* differs from .* in {tmp_path / 'src' / 'SHA256SUMS'}"):
        prepare("dreams", tmp_path / "src", tmp_path / "cache", PrepareOptions(channels=["central"]), progress=False)
    assert not (tmp_path / "cache").exists()


def test_without_sha256sums_the_card_checksums_apply(tmp_path: Path) -> None:
    """A folder without SHA256SUMS is checked against the card: a file called excerpt1.txt that is not
    the distributed one is refused."""
    _two_excerpts(tmp_path / "src")
    (tmp_path / "src" / "SHA256SUMS").unlink()
    with pytest.raises(ValueError, match=r"excerpt1.txt: sha256 .* the card datasets/dreams_spindles.yaml"):
        prepare("dreams", tmp_path / "src", tmp_path / "cache", PrepareOptions(channels=["central"]), progress=False)


def test_hypnograms_missing_from_sha256sums_are_checked_against_the_card(tmp_path: Path) -> None:
    """The distributed SHA256SUMS lists the signal files only: the card's sums cover the hypnograms
    (earlier every hypnogram was read unverified and counted as ``files_without_checksum``)."""
    _two_excerpts(tmp_path / "src")
    sums = tmp_path / "src" / "SHA256SUMS"
    sums.write_text("".join(line + "\n" for line in sums.read_text().splitlines() if "Hypnogram" not in line))
    with pytest.raises(
        ValueError,
        match=r"Hypnogram_excerpt1.txt: sha256 .*/SHA256SUMS \(for files it does not list: "
        r"the card datasets/dreams_spindles.yaml\)",
    ):
        prepare("dreams", tmp_path / "src", tmp_path / "cache", PrepareOptions(channels=["central"]), progress=False)


def test_every_file_of_the_real_dreams_folder_has_a_checksum() -> None:
    from _eeg_helpers import real_psg

    from multiview_app.data.eeg.dreams import expected_checksums, verify_checksums

    source = real_psg("dreams-spindles")
    excerpts, _ = find_excerpts(source)
    sums, where = expected_checksums(source)
    files = [f for e in excerpts for f in (e.signal_file, e.hypnogram)]
    assert len(excerpts) == 8 and verify_checksums(files, sums, where) == 0  # none unlisted, none differing


def test_central_resolves_per_excerpt_and_a_named_derivation_must_exist(tmp_path: Path) -> None:
    _two_excerpts(tmp_path / "src")
    excerpts, _ = find_excerpts(tmp_path / "src")
    assert [e.name for e in excerpts] == ["excerpt1", "excerpt2"]
    assert read_dreams(excerpts[0], ["C3-A1"]).sfreqs == [100.0]
    with pytest.raises(ValueError, match=r"excerpt2.txt: channel 'C3-A1' not found; available: CZ-A1"):
        read_dreams(excerpts[1], ["C3-A1"])


def _uv_upper_case_edf(path: Path, microvolts: np.ndarray, fs: float) -> None:
    """An EDF whose EEG physical dimension is written 'UV' (as DREAMS excerpt3.edf), via edfio."""
    import edfio

    signal = edfio.EdfSignal(
        microvolts, sampling_frequency=fs, label="C3-A1", physical_dimension="UV", physical_range=(-250.0, 250.0)
    )
    edfio.Edf([signal], data_record_duration=2.0).write(path)


def test_edf_unit_written_upper_case_is_detected_from_the_header_and_corrected(tmp_path: Path) -> None:
    import mne

    rng = np.random.default_rng(0)
    microvolts = np.clip(40 * rng.standard_normal(50 * 60), -240, 240)
    microvolts[10] = 240.0  # the header's range is reached, as in a real recording
    _uv_upper_case_edf(tmp_path / "excerpt3.edf", microvolts, 50.0)
    raw = mne.io.read_raw_edf(tmp_path / "excerpt3.edf", verbose="error")
    misread = raw.get_data(picks=["C3-A1"])[0] * 1e6
    data, counts = edf_microvolts(tmp_path / "excerpt3.edf", ["C3-A1"])
    step = 500.0 / 65535  # one digital step of the +-250 uV range
    np.testing.assert_allclose(data[0], microvolts, atol=step)
    if np.abs(misread).max() > 1e3:  # this mne takes 'UV' for volts: the reader corrected it
        assert counts["unit_corrected_channels"] == 1 and counts["unit_divided_by_1e+06"] == 1
    else:  # an mne that reads 'UV' as microvolts needs no correction
        assert counts["unit_corrected_channels"] == 0


def test_hypnogram_codes_and_lines_are_checked(tmp_path: Path) -> None:
    write_dreams_excerpt(tmp_path, "excerpt1", 100.0, [W] * 6)
    (tmp_path / "Hypnogram_excerpt1.txt").write_text("[Hypnogram]\n5\n5\n7\n5\n5\n5\n")
    with pytest.raises(ValueError, match=r"Hypnogram_excerpt1.txt: line 4: '7' is not an R&K label"):
        inspect_excerpt(Excerpt("excerpt1", tmp_path / "excerpt1.txt", tmp_path / "Hypnogram_excerpt1.txt"))


def test_missing_hypnogram_names_the_expected_file(tmp_path: Path) -> None:
    write_dreams_excerpt(tmp_path, "excerpt1", 100.0, [W] * 6)
    (tmp_path / "Hypnogram_excerpt1.txt").unlink()
    with pytest.raises(ValueError, match=f"no hypnogram found \\(expected {tmp_path / 'Hypnogram_excerpt1.txt'}\\)"):
        find_excerpts(tmp_path)


def test_the_eeg_windows_adapter_and_data_info_read_a_dreams_cache(tmp_path: Path, capsys) -> None:
    from multiview_app.data.eeg.adapter import EEGWindowsAdapter

    _two_excerpts(tmp_path / "src")
    prepare("dreams", tmp_path / "src", tmp_path / "cache", PrepareOptions(channels=["central"]), progress=False)
    adapter = EEGWindowsAdapter(EEGWindowsAdapter.Options(cache=str(tmp_path / "cache"), test_subjects=["excerpt2"]))
    assert adapter.split_subjects == {"train": ["excerpt1"], "test": ["excerpt2"]}
    item = adapter.split("test")[0]
    assert tuple(item["x"].shape) == (1, 3000) and item["subject"] == "excerpt2"
    assert main(["data", "info", str(tmp_path / "cache"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["dataset"] == "dreams" and summary["card"]["name"] == "dreams_spindles"
    assert main(["data", "info", str(tmp_path / "cache")]) == 0  # a short human summary without --json
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        f"{tmp_path / 'cache'}: dreams, 2 recordings, 2 subjects; channels central at 100 Hz, 30 s windows"
    )
    assert lines[2].split() == [
        "windows",
        *map(str, (summary["windows_per_stage"][s] for s in summary["windows_per_stage"])),
        str(summary["windows"]),
    ]
    assert lines[-1] == "per subject and the dataset card: mvapp data info --json" and len(lines) <= 6


def test_a_physical_range_that_is_not_a_number_reads_as_nan(tmp_path: Path) -> None:
    """The header parser keeps reading a file whose physical minimum field is not a number (only the
    unit check needs it); the other fields are unchanged."""
    import math

    from multiview_app.data.eeg.sleep_edf import read_edf_header

    _uv_upper_case_edf(tmp_path / "x.edf", np.zeros(200), 50.0)
    data = bytearray((tmp_path / "x.edf").read_bytes())
    data[256 + 104 : 256 + 112] = b"n/a     "  # signal 0's physical minimum (one signal: offset 104)
    (tmp_path / "x.edf").write_bytes(bytes(data))
    header = read_edf_header(tmp_path / "x.edf")
    assert math.isnan(header.physical_ranges[0][0]) and header.physical_ranges[0][1] == 250.0
    assert header.labels == ["C3-A1"] and header.physical_dimensions == ["UV"]
