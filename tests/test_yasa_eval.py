"""YASA's pretrained staging (``multiview_app.eval.yasa``): a synthetic night staged from its EDF, the
missing-extra message, the no-EEG-lead skip, header demographics and the agreement metrics."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from _eeg_helpers import real_psg

from multiview_app.data.eeg.synth import hypnogram_annotations, synth_psg, write_edf
from multiview_app.eval import yasa as yasa_eval
from multiview_app.extras import MissingExtraError

needs_yasa = pytest.mark.skipif(
    importlib.util.find_spec("yasa") is None,
    reason="yasa is not installed (pip install 'multiview_app[yasa]'; Python >= 3.11)",
)


@needs_yasa
def test_a_synthetic_night_is_staged_on_the_readers_grid(tmp_path: Path) -> None:
    synth_psg(tmp_path, 1, 1, "sleep-edf", hours=8.0, seed=3, progress=False, compress=12)  # ~40 min
    night = yasa_eval.stage_source(tmp_path / "SC4001E0-PSG.edf")
    assert (night.eeg, night.eog) == ("EEG Fpz-Cz", "EOG horizontal")
    assert night.predicted.shape == night.labels.shape and night.predicted.dtype == np.int64
    assert night.labels.size >= 60 and set(np.unique(night.predicted)) <= {0, 1, 2, 3, 4}
    assert night.eeg_uv.shape == (night.labels.size, 3000) and night.sfreq == 100.0
    result = yasa_eval.agreement(night.labels, night.predicted)
    assert result["epochs"] == int((night.labels >= 0).sum())
    assert np.asarray(result["confusion"]).sum() == result["epochs"]


def test_missing_yasa_names_the_extra_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "yasa", None)  # "import yasa" now raises ModuleNotFoundError
    with pytest.raises(MissingExtraError) as raised:
        yasa_eval.stage_with_yasa(np.zeros(3000 * 4), 100.0)
    message = str(raised.value)
    assert "\n" not in message
    assert message.endswith("pip install 'multiview_app[yasa]'")


def _psg_without_eeg_lead(folder: Path) -> Path:
    """A Sleep-EDF-named PSG (Pz-Oz and EOG only, 4 epochs) and its hypnogram."""
    n = 4 * 3000
    noise = np.random.default_rng(0).normal(0.0, 10.0, (2, n))
    psg = folder / "SC4001E0-PSG.edf"
    write_edf(psg, {"EEG Pz-Oz": (noise[0], 100.0), "EOG horizontal": (noise[1], 100.0)}, record_seconds=30.0)
    annotations = hypnogram_annotations(np.array([0, 1, 2, 2]), np.random.default_rng(0))
    write_edf(folder / "SC4001EC-Hypnogram.edf", {}, annotations)
    return psg


def test_a_recording_without_an_eeg_lead_is_skipped_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    psg = _psg_without_eeg_lead(tmp_path)
    with pytest.raises(yasa_eval.YasaSkip, match=r"no EEG lead YASA can use \(looked for EEG Fpz-Cz; has EEG Pz-Oz"):
        yasa_eval.stage_source(psg)
    monkeypatch.setattr(yasa_eval, "import_yasa", lambda: None)  # the skip needs no yasa
    lines: list[str] = []
    assert yasa_eval.stage_folder(tmp_path, log=lines.append) == []
    assert len(lines) == 1 and re.match(rf"skip {re.escape(str(psg))}: no EEG lead", lines[0])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("X F X Female_33yr", (33.0, False)),
        ("X M X Male_87yr", (87.0, True)),
        ("subject: S0001 ; <age>: 45 <sex>: M", (45.0, True)),
        ("age: 61 ; sex: F", (61.0, False)),
        ("X", (None, None)),
        ("SC400", (None, None)),
    ],
)
def test_demographics_come_from_the_header_text(text: str, expected: tuple) -> None:
    assert yasa_eval.demographics_from_text(text) == expected


def test_yasa_stage_names_map_to_the_project_codes() -> None:
    assert yasa_eval.yasa_codes(np.array(["WAKE", "N1", "N2", "N3", "REM", "W", "R"])).tolist() == [0, 1, 2, 3, 4, 0, 4]
    with pytest.raises(ValueError, match=r"YASA predicted stage\(s\) \['ART'\]"):
        yasa_eval.yasa_codes(["N2", "ART"])


def test_agreement_ignores_unscored_epochs_and_reports_recall_per_stage() -> None:
    labels = np.array([0, 0, 1, 2, 2, -1, -2, 4])
    predicted = np.array([0, 2, 2, 2, 2, 3, 3, 4])
    result = yasa_eval.agreement(labels, predicted)
    assert result["epochs"] == 6
    assert result["recall"] == {"W": 0.5, "N1": 0.0, "N2": 1.0, "N3": None, "REM": 1.0}
    assert result["confusion"][0] == [1, 0, 1, 0, 0]


@needs_yasa
def test_real_dreams_excerpts_are_staged_and_a_50_hz_one_skipped() -> None:
    folder = real_psg("dreams-spindles")
    night = yasa_eval.stage_source(folder / "excerpt1.txt")
    assert (night.eeg, night.eog, night.sfreq) == ("C3-A1", None, 100.0)
    assert night.predicted.shape == night.labels.shape == (60,)
    assert yasa_eval.agreement(night.labels, night.predicted)["kappa"] > 0.3  # real EEG: YASA agrees with the scorer
    with pytest.raises(yasa_eval.YasaSkip, match=r"sampling rate 50 Hz: YASA needs more than 80 Hz"):
        yasa_eval.stage_source(folder / "excerpt3.edf")


@needs_yasa
def test_yasa_row_stages_the_cached_test_windows_from_their_sources(tmp_path: Path) -> None:
    """The staging evaluator's ``yasa`` row: every test window of a prepared cache gets YASA's stage of its
    epoch, read from the recording's source file, the same fit at every s and draw."""
    from multiview_app.data.eeg.cache import load_manifest, prepare
    from multiview_app.data.eeg.preprocess import PrepareOptions
    from multiview_app.eval.sleep_staging import _yasa_fold_fits

    synth_psg(tmp_path / "raw", 2, 1, "sleep-edf", hours=8.0, seed=5, progress=False, compress=12)
    prepare("sleep-edf", tmp_path / "raw", tmp_path / "cache", PrepareOptions(channels=["Fpz-Cz"]), progress=False)
    records = load_manifest(tmp_path / "cache")["recordings"]
    meta = {
        "recording": [r["recording"] for r in records for _ in r["epochs"]],
        "subject": [r["subject"] for r in records for _ in r["epochs"]],
        "window": [e for r in records for e in r["epochs"]],
    }
    labels = np.array([y for r in records for y in r["labels"]])
    first = np.array([m == records[0]["recording"] for m in meta["recording"]])
    fits = _yasa_fold_fits(tmp_path / "cache", meta, labels, [first, ~first], (5, 10), 2)
    assert isinstance(fits, list) and len(fits) == 2
    for fold, test in zip(fits, [first, ~first]):
        runs = fold["5"]["runs"]
        assert len(runs) == 2 and runs[0] is runs[1] and fold["10"]["runs"][0] is runs[0]
        assert set(runs[0]["per_subject"]) == {records[0 if test is first else 1]["subject"]}
        assert 0.0 <= runs[0]["balanced_accuracy"] <= 1.0
    staged = yasa_eval.stage_source(yasa_eval.manifest_source(records[0]["sources"]))
    expected = staged.predicted[np.array(records[0]["epochs"]) - staged.first_epoch]
    from multiview_app.eval.protocols.staging import staging_metrics

    assert fits[0]["5"]["runs"][0]["kappa"] == staging_metrics(labels[first], expected)["kappa"]
    yasa_eval.manifest_source(records[1]["sources"]).unlink()  # a source gone: the row is left out, with the reason
    note = _yasa_fold_fits(tmp_path / "cache", meta, labels, [first, ~first], (5,), 1)
    assert isinstance(note, str) and note.startswith("no yasa row:") and records[1]["recording"] in note
