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
    assert (
        main(
            [
                "data",
                "synth-psg",
                "--subjects",
                "3",
                "--nights",
                "1",
                "--format",
                "sleep-edf",
                "--hours",
                "1",
                "--out",
                str(raw),
                "--seed",
                "3",
            ]
        )
        == 0
    )
    assert len(list(raw.glob("SC4*E0-PSG.edf"))) == 3 and len(list(raw.glob("SC4*-Hypnogram.edf"))) == 3
    assert main(["data", "prepare", "sleep-edf", "--source", str(raw), "--out", str(cache)]) == 0
    assert main(["data", "info", str(cache)]) == 0
    capsys.readouterr()
    summary = json.loads((cache / "manifest.json").read_text())
    assert [r["subject"] for r in summary["recordings"]] == ["SC400", "SC401", "SC402"]

    assert (
        main(
            [
                "train",
                "--config",
                str(CONFIG),
                "--name",
                "tiny",
                f"data.options.cache={cache}",
                "data.options.test_fraction=0.34",
                f"output.runs_dir={runs}",
                "train.max_steps=3",
                "train.batch_size=4",
                "model.encoders.eeg.width=8",
                "model.encoders.eeg.out_dim=8",
                "model.projector.hidden_dim=16",
                "model.projector.out_dim=8",
                "train.checkpoint_every=0",
            ]
        )
        == 0
    )
    run = runs / "tiny"
    assert (run / "model.safetensors").is_file() and (run / "init.safetensors").is_file()

    assert main(["eval", "sleep-staging", "--run", str(run), "--shots", "5", "20", "--draws", "2"]) == 0
    out, err = capsys.readouterr()
    assert (out + err).count("no supervised_ceiling row") == 1  # each message once (not also as a warning)
    assert "bandpower" in out and "random_init" in out and "s=20" in out
    result = json.loads((run / "eval" / "sleep_staging.json").read_text())
    assert set(result["subjects"]["train"]).isdisjoint(result["subjects"]["test"])
    assert len(result["subjects"]["test"]) == 1 and result["channels"] == ["Fpz-Cz", "Pz-Oz"]
    for name in ("trained", "random_init", "bandpower", "handcrafted", "bandpower+trained"):
        scores = result["results"][name]["20"]
        assert 0.0 <= scores["accuracy"]["mean"] <= 1.0 and -1.0 <= scores["kappa"]["mean"] <= 1.0
        assert set(scores) >= {"accuracy", "balanced_accuracy", "macro_f1", "kappa", "per_class_f1"}
    assert result["protocol"] == "in-domain" and result["pretraining_subjects"] == result["subjects"]["train"]
    assert "cross-validation inside the s drawn windows" in result["classifier"] and "validation_subjects" not in result
    assert len(result["drawn_per_class"]["5"]) == 2  # every seed's draw is kept
    assert all(v <= 5 for drawn in result["drawn_per_class"]["5"] for v in drawn.values())
    assert (
        out.index("\nbalanced_accuracy\n") < out.index("\nkappa\n") < out.index("\naccuracy\n") and "in-domain" in out
    )
    assert sum(result["test_windows_per_stage"].values()) == result["windows"]["test"]
    assert Path(result["plots"]["confusion"]).is_file() and Path(result["plots"]["hypnogram"]).is_file()

    assert result["features"] == "encoder" and "bandpower+trained" in out
    # the projector output instead of the backbone (same protocol); --no-combined drops the combined row
    assert (
        main(
            [
                "eval",
                "sleep-staging",
                "--run",
                str(run),
                "--shots",
                "5",
                "--draws",
                "1",
                "--features",
                "projector",
                "--no-combined",
            ]
        )
        == 0
    )
    assert "projector outputs" in capsys.readouterr().out
    projected = json.loads((run / "eval" / "sleep_staging.json").read_text())
    assert projected["features"] == "projector" and set(projected["results"]) == {
        "trained",
        "random_init",
        "bandpower",
        "handcrafted",
    }
    assert projected["results"]["bandpower"]["5"]["runs"] == result["results"]["bandpower"]["5"]["runs"][:1]
    assert main(["eval", "sleep-staging", "--run", str(run), "--shots", "5", "--draws", "1"]) == 0  # restore
    capsys.readouterr()
    result = json.loads((run / "eval" / "sleep_staging.json").read_text())
    in_domain = (run / "eval" / "sleep_staging.json").read_text()
    # an option that would put pretraining subjects into the test set is refused, naming them
    assert main(["eval", "sleep-staging", "--run", str(run), "--test-fraction", "0.9", "--shots", "5"]) == 2
    err = capsys.readouterr().err
    assert "would put pretraining subjects into the test set: SC40" in err and len(err.strip().splitlines()) == 1
    # cross-dataset: another dataset's cache, its own 20 % split, its own result file
    other_raw, other_cache = tmp_path / "pn_raw", tmp_path / "pn_cache"
    assert (
        main(
            [
                "data",
                "synth-psg",
                "--subjects",
                "2",
                "--format",
                "physionet2018",
                "--hours",
                "0.6",
                "--out",
                str(other_raw),
                "--seed",
                "11",
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "data",
                "prepare",
                "physionet2018",
                "--source",
                str(other_raw),
                "--out",
                str(other_cache),
                "--channels",
                "F3-M2",
                "O1-M2",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert (
        main(
            [
                "eval",
                "sleep-staging",
                "--run",
                str(run),
                "--cache",
                str(other_cache),
                "--shots",
                "5",
                "--draws",
                "1",
                "--C",
                "1",
            ]
        )
        == 0
    )  # one classifier-training subject: no validation subject to tune on
    out = capsys.readouterr().out
    assert "cross-dataset" in out and "sleep_staging_physionet2018.json" in out
    cross = json.loads((run / "eval" / "sleep_staging_physionet2018.json").read_text())
    assert cross["protocol"] == "cross-dataset" and cross["dataset"] == "physionet2018"
    assert len(cross["subjects"]["test"]) == 1 and cross["channels"] == ["F3-M2", "O1-M2"]
    assert (run / "eval" / "sleep_staging.json").read_text() == in_domain  # never overwritten
    assert Path(cross["plots"]["confusion"]).name == "sleep_staging_physionet2018_confusion.png"
    assert cross["classifier"] == "standardized logistic regression (C=1.0)"
    # the papers' classifier, lr and epochs chosen by cross-validation inside the drawn windows
    assert (
        main(["eval", "sleep-staging", "--run", str(run), "--classifier", "paper", "--shots", "5", "--draws", "1"]) == 0
    )
    paper = json.loads((run / "eval" / "sleep_staging.json").read_text())
    assert paper["classifier"].startswith("paper: learned channel combination") and "lr over" in paper["classifier"]
    assert "validation_subjects" not in paper  # nothing but the drawn windows chooses lr and epochs
    assert paper["results"]["bandpower"]["5"]["runs"][0]["hyperparameter"] in (1e-3, 1e-2)
