"""The readers on real recordings, read from ``$MVAPP_REAL_PSG`` (default ``<repository>/../shared/real-psg``;
never copied into the repository; every test skips, naming the path, when it is absent):

- the 8 DREAMS Sleep Spindles excerpts through ``mvapp data prepare dreams`` (checksums, the 5-s -> 30-s
  rule, excerpt 3's EDF and its unit);
- the 20 real Sleep-EDF SC hypnogram files, each paired with a synthetic PSG whose header start equals
  the hypnogram's, through the Sleep-EDF reader and the 30-min wake crop: stage counts against counts
  taken from the annotation bytes by the independent parser below.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from _eeg_helpers import real_psg

from multiview_app.cli import main
from multiview_app.data.eeg.dreams import Excerpt, read_dreams, read_rk_hypnogram
from multiview_app.data.eeg.preprocess import PrepareOptions, make_windows
from multiview_app.data.eeg.sleep_edf import read_edf_header, read_sleep_edf
from multiview_app.data.eeg.synth import write_edf

# ----------------------------------------------------------------------------- DREAMS


@pytest.fixture(scope="module")
def dreams_cache(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    source = real_psg("dreams-spindles")
    out = tmp_path_factory.mktemp("dreams") / "cache"
    assert main(["data", "prepare", "dreams", "--source", str(source), "--out", str(out)]) == 0
    return out, json.loads((out / "prepare_summary.json").read_text())


def _epoch_votes(labels5: np.ndarray) -> np.ndarray:
    """``(E, 5)`` votes per stage of each 30-s epoch, written here independently of the reader:
    R&K 5 W, 3 S1, 2 S2, 1 + 0 N3, 4 REM; movement (-1) votes for nothing."""
    stage_of = {5: 0, 3: 1, 2: 2, 1: 3, 0: 3, 4: 4}
    grid = labels5[: labels5.size // 6 * 6].reshape(-1, 6)
    return np.stack([np.isin(grid, [k for k, v in stage_of.items() if v == s]).sum(axis=1) for s in range(5)], axis=1)


def test_dreams_excerpts_prepare_with_the_rule_counts(dreams_cache) -> None:
    out, summary = dreams_cache
    source = real_psg("dreams-spindles")
    assert summary["prepared"] == [f"excerpt{i}" for i in range(1, 9)] and summary["errors"] == []
    votes = np.concatenate([_epoch_votes(read_rk_hypnogram(source / f"Hypnogram_excerpt{i}.txt")) for i in range(1, 9)])
    top = votes.max(axis=1)
    counts = summary["reader_counts"]
    assert counts["dreams_epochs_unanimous"] == int((top == 6).sum())
    assert counts["dreams_epochs_majority"] == int(((top >= 4) & (top < 6)).sum())
    assert summary["dropped"]["excluded"] == int((top < 4).sum())
    kept = votes[top >= 4].argmax(axis=1)
    assert summary["windows_per_stage"] == {
        s: int((kept == i).sum()) for i, s in enumerate(["W", "N1", "N2", "N3", "REM"])
    }
    assert summary["windows"] == 480  # 8 x 60 epochs, none dropped (no ties, no movement, no flat window)
    assert counts["derivation_C3-A1"] == 2 and counts["derivation_CZ-A1"] == 6
    assert counts["samples_after_hypnogram"] == 140  # excerpt 6
    assert counts["unit_corrected_channels"] == 1  # excerpt 3 is read from its EDF
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["complete"] and manifest["channels"] == ["central"]
    sums = {
        line.split()[1].split("/")[-1]: line.split()[0] for line in (source / "SHA256SUMS").read_text().splitlines()
    }
    for record in manifest["recordings"]:
        signal = record["sources"][0]
        assert signal["sha256"] == sums[Path(signal["path"]).name]
        assert np.load(out / record["file"], mmap_mode="r").shape == (record["n_windows"], 1, 3000)


def test_a_modified_copy_of_an_excerpt_is_refused_naming_it(tmp_path: Path, capsys) -> None:
    source = real_psg("dreams-spindles")
    copy = tmp_path / "src"
    copy.mkdir()
    for name in ("excerpt2.txt", "Hypnogram_excerpt2.txt", "SHA256SUMS"):
        shutil.copy(source / name, copy / name)
    with open(copy / "excerpt2.txt", "r+b") as handle:  # one sample changed in the copy
        handle.seek(100)
        digit = handle.read(1)
        handle.seek(100)
        handle.write(b"7" if digit != b"7" else b"3")
    code = main(["data", "prepare", "dreams", "--source", str(copy), "--out", str(tmp_path / "cache")])
    err = capsys.readouterr().err
    assert code != 0 and f"{copy / 'excerpt2.txt'}: sha256" in err and "differs" in err
    assert not (tmp_path / "cache").exists()


def test_excerpt3_edf_c3_equals_its_text_file_after_the_unit_fix() -> None:
    import mne

    source = real_psg("dreams-spindles")
    from_edf = read_dreams(Excerpt("excerpt3", source / "excerpt3.edf", source / "Hypnogram_excerpt3.txt"), ["C3-A1"])
    from_txt = read_dreams(Excerpt("excerpt3", source / "excerpt3.txt", source / "Hypnogram_excerpt3.txt"), ["C3-A1"])
    assert from_edf.sfreqs == from_txt.sfreqs == [50.0]
    header = read_edf_header(source / "excerpt3.edf")
    assert header.physical_dimensions[header.labels.index("C3-A1")] == "UV"
    misread = mne.io.read_raw_edf(source / "excerpt3.edf", verbose="error").get_data(picks=["C3-A1"])[0] * 1e6
    text = np.loadtxt(source / "excerpt3.txt", skiprows=1)
    if np.abs(misread).max() > 1e3 * np.abs(text).max():  # this mne reads 'UV' as volts: the reader corrects it
        assert from_edf.counts["unit_corrected_channels"] == 1
    np.testing.assert_allclose(from_edf.signals[0], from_txt.signals[0], atol=1e-3)  # EDF digital step ~0.01 uV
    np.testing.assert_array_equal(from_edf.epoch_labels, from_txt.epoch_labels)


# ----------------------------------------------------------------------------- Sleep-EDF hypnograms

STAGE_OF_TEXT = {
    "Sleep stage W": 0,
    "Sleep stage 1": 1,
    "Sleep stage 2": 2,
    "Sleep stage 3": 3,
    "Sleep stage 4": 3,
    "Sleep stage R": 4,
    "Sleep stage ?": -1,
    "Movement time": -1,
}
"""docs/eeg.md (Sleep-EDF row): W, 1, 2, 3 + 4 -> N3, R; "?" and "Movement time" excluded (-1)."""


def annotations_from_bytes(path: Path) -> list[tuple[float, float, str]]:
    """(onset s, duration s, text) of an EDF+ annotation file, parsed from its bytes: the header size at
    offset 184, then time-stamped annotation lists ``+onset 0x15 duration 0x14 text 0x14 ... 0x00``."""
    data = path.read_bytes()
    body = data[int(data[184:192]) :]
    annotations = []
    for tal in body.split(b"\x00"):
        fields = tal.split(b"\x14")
        if len(fields) < 2 or not fields[0].startswith((b"+", b"-")):
            continue
        onset, _, duration = fields[0].partition(b"\x15")
        for text in fields[1:]:
            if text:  # the record's first TAL keeps time only (no text)
                annotations.append((float(onset), float(duration or 0), text.decode("latin-1")))
    return annotations


def expected_epochs(annotations: list[tuple[float, float, str]]) -> np.ndarray:
    """Per-epoch codes from the annotations (-2 where none), independently of the reader."""
    end = max(onset + duration for onset, duration, _ in annotations)
    labels = np.full(int(np.ceil(end / 30)), -2, dtype=np.int64)
    for onset, duration, text in annotations:
        assert onset % 30 == 0 and duration % 30 == 0, (onset, duration, text)
        labels[int(onset // 30) : int((onset + duration) // 30)] = STAGE_OF_TEXT[text]
    return labels


def test_sleep_edf_reader_on_the_20_real_hypnograms(tmp_path: Path) -> None:
    folder = real_psg("sleep-edf-hypnograms")
    hypnograms = sorted(folder.glob("SC4*-Hypnogram.edf"))
    assert len(hypnograms) == 20
    totals: Counter = Counter()
    rng = np.random.default_rng(0)
    options = PrepareOptions(channels=["Fpz-Cz"], sfreq=1.0, l_freq=None, h_freq=None)  # 30-sample windows
    for hypnogram in hypnograms:
        annotations = annotations_from_bytes(hypnogram)
        assert {text for _, _, text in annotations} <= set(STAGE_OF_TEXT), hypnogram
        expected = expected_epochs(annotations)
        # the shortest synthetic PSG covering the hypnogram, at 1 Hz, starting when the hypnogram starts
        psg = tmp_path / f"{hypnogram.name[:7]}0-PSG.edf"
        write_edf(
            psg,
            {"EEG Fpz-Cz": (rng.standard_normal(expected.size * 30), 1.0)},
            record_seconds=30.0,
            start=read_edf_header(hypnogram).start,
        )
        recording = read_sleep_edf(psg, hypnogram, ["Fpz-Cz"])
        np.testing.assert_array_equal(recording.epoch_labels, expected, err_msg=hypnogram.name)
        for code in range(5):
            assert int((recording.epoch_labels == code).sum()) == int((expected == code).sum()), (hypnogram, code)
        assert recording.counts["excluded_epochs"] == int((expected == -1).sum())
        assert recording.counts["unscored_epochs"] == int((expected == -2).sum())
        assert recording.counts["hypnograms_offset_from_psg"] == 0
        # the 30-min wake crop: scored epochs from 60 before the first sleep epoch to 60 after the last
        sleep = np.flatnonzero(np.isin(expected, [1, 2, 3, 4]))
        inside = np.zeros(expected.size, dtype=bool)
        inside[max(sleep[0] - 60, 0) : sleep[-1] + 61] = True
        windows, labels, epochs, dropped = make_windows(recording, options)
        np.testing.assert_array_equal(epochs, np.flatnonzero(inside & (expected >= 0)), err_msg=hypnogram.name)
        np.testing.assert_array_equal(labels, expected[epochs])
        assert dropped["wake_cropped"] == int((~inside & (expected >= 0)).sum())
        assert dropped["excluded"] == int((expected == -1).sum())
        totals.update(text for _, duration, text in annotations for _ in range(int(duration // 30)))
    # the folder README's totals (30-s epochs), from the annotation bytes
    assert totals["Sleep stage W"] == 37115 and totals["Sleep stage 1"] == 1689 and totals["Sleep stage 2"] == 8927
    assert totals["Sleep stage 3"] == 1700 and totals["Sleep stage 4"] == 1374 and totals["Sleep stage R"] == 3693
    assert totals["Sleep stage ?"] == 3070 and totals["Movement time"] == 32
