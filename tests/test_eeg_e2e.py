"""End to end through the CLI: synth-psg -> prepare -> info -> 3 training steps -> sleep-staging."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from multiview_app.cli import main

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "eeg_sleepedf_m3g.yaml"


@pytest.mark.slow
def test_eeg_pipeline_end_to_end(tmp_path, capsys):
    raw, cache, runs = tmp_path / "raw", tmp_path / "cache", tmp_path / "runs"
    assert main(["data", "synth-psg", "--subjects", "3", "--nights", "1", "--format", "sleep-edf",
                 "--hours", "1", "--out", str(raw), "--seed", "3"]) == 0
    assert len(list(raw.glob("SC4*E0-PSG.edf"))) == 3 and len(list(raw.glob("SC4*-Hypnogram.edf"))) == 3
    assert main(["data", "prepare", "sleep-edf", "--source", str(raw), "--out", str(cache)]) == 0
    assert main(["data", "info", str(cache)]) == 0
    capsys.readouterr()
    summary = json.loads((cache / "manifest.json").read_text())
    assert [r["subject"] for r in summary["recordings"]] == ["SC400", "SC401", "SC402"]

    assert main(["train", "--config", str(CONFIG), "--name", "tiny", f"data.options.cache={cache}",
                 "data.options.test_fraction=0.34", f"output.runs_dir={runs}", "train.max_steps=3",
                 "train.batch_size=4", "model.encoders.eeg.width=8", "model.encoders.eeg.out_dim=8",
                 "model.projector.hidden_dim=16", "model.projector.out_dim=8", "train.checkpoint_every=0"]) == 0
    run = runs / "tiny"
    assert (run / "model.safetensors").is_file() and (run / "init.safetensors").is_file()

    assert main(["eval", "sleep-staging", "--run", str(run), "--shots", "5", "20", "--seeds", "2"]) == 0
    out = capsys.readouterr().out
    assert "bandpower" in out and "random_init" in out and "s=20" in out
    result = json.loads((run / "eval" / "sleep_staging.json").read_text())
    assert set(result["subjects"]["train"]).isdisjoint(result["subjects"]["test"])
    assert len(result["subjects"]["test"]) == 1 and result["channels"] == ["Fpz-Cz", "Pz-Oz"]
    for name in ("trained", "random_init", "bandpower"):
        scores = result["results"][name]["20"]
        assert 0.0 <= scores["accuracy"]["mean"] <= 1.0 and -1.0 <= scores["kappa"]["mean"] <= 1.0
        assert set(scores) >= {"accuracy", "balanced_accuracy", "macro_f1", "kappa", "per_class_f1"}
    assert all(v <= 5 for v in result["drawn_per_class"]["5"].values())
    assert sum(result["test_windows_per_stage"].values()) == result["windows"]["test"]
    assert Path(result["plots"]["confusion"]).is_file() and Path(result["plots"]["hypnogram"]).is_file()
