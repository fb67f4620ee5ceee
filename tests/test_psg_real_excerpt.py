"""A real PSG night through the modality pipeline: ``mvapp data prepare ... --modalities --max-rate`` (every group at
``min(its rate, cap)``, its band below the new Nyquist frequency) on a small synthetic EDF, and ``mvapp experiment
psg-real`` on DREAMS ``excerpt3.edf`` (50 Hz; skipped, naming the path, when the real recordings are absent)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _eeg_helpers import real_psg
from test_generic_reader import AASM, _stage_rows, write_psg

from multiview_app.cli import main
from multiview_app.data.eeg.modalities import NYQUIST_FRACTION, group_specs
from multiview_app.data.eeg.stages import STAGES
from multiview_app.experiments.psg_real import paired_channels, real_modalities

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "psg_modalities_sleepfm.yaml"

# ----------------------------------------------------------------------------- the rate cap


def test_group_specs_cap_rates_and_move_high_edges_below_nyquist() -> None:
    specs = group_specs(["brain", "heart", "breathing", "oximetry"], 50.0)
    assert (specs["brain"].sfreq, specs["brain"].l_freq, specs["brain"].h_freq) == (50.0, 0.5, NYQUIST_FRACTION * 25)
    assert (specs["heart"].sfreq, specs["heart"].h_freq) == (50.0, NYQUIST_FRACTION * 25)
    uncapped = group_specs(["breathing", "oximetry"])
    assert specs["breathing"] == uncapped["breathing"] and specs["oximetry"] == uncapped["oximetry"]  # already slower
    assert group_specs(["brain"], 80.0)["brain"].h_freq == 30.0  # 30 Hz is below 40 Hz: kept


def test_a_band_that_cannot_fit_the_cap_names_the_group_and_the_rate_needed() -> None:
    with pytest.raises(ValueError, match=r"--max-rate 15: modality group muscle's band 10-45 Hz .* above 22\.2"):
        group_specs(["brain", "muscle"], 15.0)
    with pytest.raises(ValueError, match="above 0"):
        group_specs(["brain"], 0.0)


@pytest.fixture(scope="module")
def psg_edf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("capped") / "src"
    source.mkdir()
    write_psg(source / "night1.edf", _stage_rows(AASM))
    return source


def test_prepare_edf_at_a_capped_rate_records_the_cap(tmp_path: Path, psg_edf: Path, capsys) -> None:
    """100-Hz EEG / EOG and 200-Hz ECG prepared at 50 Hz: 1,500-sample windows, the cap and each capped group's
    psg.yaml rate and band in the manifest; the 1-Hz SpO2 group is as before."""
    out = tmp_path / "cache"
    args = ["data", "prepare", "edf", "--source", str(psg_edf), "--out", str(out), "--channels", "C3-M2"]
    assert main([*args, "--stages", "annotations", "--modalities", "sleepfm", "--max-rate", "50"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    groups, record = manifest["modality_groups"], manifest["recordings"][0]
    assert manifest["max_rate"] == 50.0
    assert groups["heart"]["sfreq"] == 50.0 and groups["heart"]["h_freq"] == NYQUIST_FRACTION * 25
    assert groups["heart"]["capped_from"] == {"sfreq": 200.0, "l_freq": 0.5, "h_freq": 40.0}
    assert "capped_from" not in groups["oximetry"] and groups["oximetry"]["sfreq"] == 1.0
    windows = {g: np.load(out / record["modalities"][g]["file"], mmap_mode="r") for g in record["modalities"]}
    assert windows["brain"].shape[1:] == (1, 1500) and windows["heart"].shape[1:] == (1, 1500)
    assert windows["eyes"].shape[-1] == 1500 and windows["oximetry"].shape[1:] == (1, 30)
    again = ["--stages", "annotations", "--modalities", "sleepfm", "--max-rate", "40"]
    assert main([*args, *again]) != 0  # a cache keeps one cap
    assert "cache was prepared with" in capsys.readouterr().err


def test_max_rate_needs_modalities(tmp_path: Path, psg_edf: Path, capsys) -> None:
    args = ["data", "prepare", "edf", "--source", str(psg_edf), "--out", str(tmp_path / "c"), "--channels", "C3-M2"]
    assert main([*args, "--stages", "annotations", "--max-rate", "50"]) != 0
    assert "--max-rate caps the modality groups' rates: use it with --modalities" in capsys.readouterr().err


# ----------------------------------------------------------------------------- channel matching


def test_real_eeg_is_paired_with_the_nearest_synthetic_derivation() -> None:
    synthetic = ["F3-M2", "F4-M1", "C3-M2", "C4-M1", "O1-M2", "O2-M1"]
    assert paired_channels(["O1-A1", "C3-A1", "FP1-A1"], synthetic) == ["O1-M2", "C3-M2", "F3-M2"]
    assert paired_channels(["C3-A1", "C3-A2"], synthetic) == ["C3-M2", "F3-M2"]  # each synthetic channel once


def test_real_groups_are_limited_to_the_synthetic_channel_counts() -> None:
    types = {"eeg": ["C3-A1"], "eog": ["EOG1-A1", "EOG2-A1"], "ecg": ["ECG"], "resp": ["NAF1"]}
    counts = {"brain": 6, "eyes": 1, "heart": 1, "breathing": 3, "oximetry": 1}
    assert real_modalities("sleepfm", types, counts) == "brain,eyes=EOG1-A1,heart,breathing,oximetry"


# ----------------------------------------------------------------------------- DREAMS excerpt3.edf (real)


def test_psg_real_stages_dreams_excerpt3(tmp_path: Path) -> None:
    """The real 50-Hz night through the whole pipeline at tiny size: N2 is its largest class and it has no REM;
    the confusion matrix holds every scored window; the page and the JSON are written."""
    edf = real_psg("dreams-spindles") / "excerpt3.edf"
    if not edf.is_file():
        pytest.skip(f"real recording absent: {edf} not found")
    out = tmp_path / "out"
    sizes = ["--nights", "2", "--hours", "1", "--compress", "3", "--steps", "3", "--batch", "8"]
    args = ["experiment", "psg-real", "--edf", str(edf), "--stages", "channel:hypnogram", "--stage-map", "dreams"]
    assert main([*args, *sizes, "--config", str(CONFIG), "--out", str(out)]) == 0
    summary = json.loads((out / "psg_real.json").read_text())
    true = dict(zip(STAGES, summary["staged"]["true_counts"]))
    assert true["REM"] == 0 and max(true, key=true.get) == "N2"
    n_windows = json.loads(Path(summary["caches"]["real"], "manifest.json").read_text())["recordings"][0]["n_windows"]
    for row in summary["staged"]["rows"].values():
        matrix = np.array(row["confusion"])
        assert matrix.shape == (5, 5) and matrix.sum() == n_windows == sum(true.values())
        assert matrix[STAGES.index("REM")].sum() == 0
    assert "brain" in summary["staged"]["modalities"] and "all" in summary["staged"]["rows"]
    page = (out / "psg_real.md").read_text()
    assert "N2-heavy" in page and "no REM window" in page and "Confusion matrix, all" in page
