"""``mvapp eval sleep-staging --stages`` (windows of other stages excluded and counted) and
``mvapp experiment dreams-transfer`` at toy size on three real DREAMS excerpts (skipped when absent)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from multiview_app.cli import main
from multiview_app.eval.protocols.staging import stage_mask
from tests._eeg_helpers import fake_cache, real_psg

ROOT = Path(__file__).resolve().parents[1]


def test_stage_mask_keeps_the_named_stages_and_refuses_unknown_ones():
    labels = np.array([0, 1, 2, 3, 4, 4, 2])
    assert stage_mask(labels, None).all()
    assert stage_mask(labels, ["W", "N1", "N2", "N3"]).tolist() == [True, True, True, True, False, False, True]
    assert stage_mask(labels, ["N2"]).tolist() == [False, False, True, False, False, False, True]
    with pytest.raises(ValueError, match="unknown stage.*'N4'"):
        stage_mask(labels, ["N2", "N4"])


def _tiny_run(tmp_path: Path) -> Path:
    """A 3-step channel-agnostic M3G run (width 8) on a fake 4-subject PhysioNet-format cache."""
    cache = fake_cache(tmp_path / "fake_cache", subjects=4, windows=10)
    assert (
        main(
            [
                "train",
                "--config",
                str(ROOT / "configs" / "eeg_synthetic_m3g.yaml"),
                "--name",
                "tiny",
                f"data.options.cache={cache}",
                f"output.runs_dir={tmp_path / 'runs'}",
                "train.max_steps=3",
                "train.batch_size=4",
                "model.encoders.eeg.width=8",
                "model.encoders.eeg.out_dim=8",
                "model.projector.hidden_dim=16",
                "model.projector.out_dim=8",
                "train.checkpoint_every=0",
                "data.options.channels=[F3-M2,C3-M2,O1-M2,O2-M1]",
                "views.k=4",
            ]
        )
        == 0
    )
    return tmp_path / "runs" / "tiny"


def test_transfer_dreams_toy_leave_one_excerpt_out(tmp_path, capsys):
    dreams = real_psg("dreams-spindles")
    toy = tmp_path / "real" / "dreams-spindles"
    toy.mkdir(parents=True)
    chosen = ["excerpt1", "excerpt2", "excerpt4"]
    for name in chosen:
        for file in (f"{name}.txt", f"Hypnogram_{name}.txt"):
            (toy / file).symlink_to(dreams / file)
    (toy / "SHA256SUMS").symlink_to(dreams / "SHA256SUMS")
    run = _tiny_run(tmp_path)
    out = tmp_path / "out"
    argv = ["experiment", "dreams-transfer", "--real-psg", str(tmp_path / "real"), "--out", str(out)]
    assert main([*argv, "--run", str(run), "--shots", "5", "10", "--draws", "2"]) == 0
    printed = capsys.readouterr().out
    summary = json.loads((out / "dreams_transfer.json").read_text())
    assert (out / "dreams_transfer.md").read_text().split("\n\nper-class F1")[0] in printed
    assert sum(line.startswith("| trained | ") for line in summary["per_class_f1"]) == 2  # per-class F1, one per s
    assert summary["units"] == chosen and summary["paired"]["bandpower"]["5"]["n"] == 3  # excerpts, not fits
    result = json.loads((run / "eval" / "sleep_staging_dreams.json").read_text())
    # leave-one-excerpt-out: 3 folds, each testing one excerpt never used to fit or tune the classifier
    assert sorted(f["test"][0] for f in result["folds"]) == chosen
    for fold in result["folds"]:
        assert len(fold["test"]) == 1 and fold["test"][0] not in fold["train"]
    assert result["stages"] == ["W", "N1", "N2", "N3"]
    assert (
        set(result["test_windows_per_stage"]) >= {"W", "N1", "N2", "N3"}
        and result["test_windows_per_stage"]["REM"] == 0
    )
    assert result["windows"]["test"] == sum(result["test_windows_per_stage"].values())
    cache_counts = json.loads((out / "dreams_cache" / "manifest.json").read_text())["recordings"]
    assert sum(r["n_windows"] for r in cache_counts) == (
        result["windows"]["test"] + sum(result["excluded_windows_per_stage"].values())
    )
    assert "supervised_ceiling" in summary["rows"] and "handcrafted" in summary["paired"]
    assert ("yasa" in result["results"]) == (importlib.util.find_spec("yasa") is not None)  # zero-shot row
    for row in ("trained", "random_init", "supervised_ceiling", "bandpower", "handcrafted", "bandpower+trained"):
        for s in ("5", "10"):
            cell = result["results"][row][s]
            assert cell["n_runs"] == 3 * 2
            assert 0.0 <= cell["balanced_accuracy"]["mean"] <= 1.0 and -1.0 <= cell["kappa"]["mean"] <= 1.0
            assert all(0.0 <= f <= 1.0 for fit in cell["runs"] for f in fit["per_class_f1"].values())
