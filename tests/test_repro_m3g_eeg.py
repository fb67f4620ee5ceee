"""scripts/reproduce/m3g/reproduce_m3g_eeg.py at toy size: synthetic PhysioNet-format pretraining + Sleep-EDF-format
staging, M3G + infonce_pwe x 2 pretraining seeds, cross-dataset subject folds; pooled table, paired
differences, resumability (a second call retrains and re-evaluates nothing)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _train_helpers import load_script


@pytest.fixture(scope="module")
def repro():
    return load_script("reproduce/m3g/reproduce_m3g_eeg")


def test_baselines_take_only_their_loss_and_batch(repro) -> None:
    """Fairness contract: a baseline differs from the long M3G config only in loss, batch size and the
    warmup steps that keep the warmup at the same number of windows."""
    config = {"loss": {"name": "m3g"}, "optim": {"warmup_steps": 20}, "train": {"batch_size": 16}}
    assert repro.loss_overrides("m3g", config) == []
    over = repro.loss_overrides("infonce_pwe", config)
    assert [o.split("=")[0] for o in over] == ["loss", "train.batch_size", "optim.warmup_steps"]
    assert json.loads(over[0].split("=", 1)[1]) == {"name": "infonce_pwe", "tau": 0.2}
    assert over[1:] == ["train.batch_size=64", "optim.warmup_steps=5"]  # same 320 warmup windows


def test_toy_run_pools_seeds_folds_draws_and_resumes(repro, tmp_path: Path) -> None:
    losses = ("m3g", "infonce_pwe")
    argv = [
        "--losses",
        ",".join(losses),
        "--pretrain-seeds",
        "0,1",
        "--folds",
        "2",
        "--draws",
        "2",
        "--shots",
        "2,4",
        "--epochs",
        "1",
        "--pretrain-subjects",
        "3",
        "--staging-subjects",
        "4",
        "--hours",
        "1",
        "--compress",
        "1",
        "--data",
        str(tmp_path / "data"),
        "--runs-dir",
        str(tmp_path / "runs"),
        "--out",
        str(tmp_path / "out"),
        "--set",
        "train.max_steps=2",
        "model.encoders.eeg.width=8",
        "model.projector.hidden_dim=16",
        "train.checkpoint_every=0",
    ]
    assert repro.main(argv) == 0
    summary = json.loads((tmp_path / "out.json").read_text())
    assert (tmp_path / "out.png").stat().st_size > 0
    table = (tmp_path / "out.md").read_text()
    for loss in losses:
        assert f"| {loss} | trained | 2 |" in table
    cross = summary["protocols"]["cross-dataset"]
    assert cross["folds"] == 2
    runs = {loss: sorted((tmp_path / "runs").glob(f"eeg_synthetic_m3g_long_{loss}_seed*")) for loss in losses}
    assert all(len(r) == 2 for r in runs.values())
    # the baseline runs really used their own loss and batch; M3G its own
    saved = {loss: (r[0] / "config.yaml").read_text() for loss, r in runs.items()}
    assert "name: infonce_pwe" in saved["infonce_pwe"] and "batch_size: 64" in saved["infonce_pwe"]
    assert "name: m3g" in saved["m3g"] and "batch_size: 16" in saved["m3g"]
    # pooled cells = 2 seeds x 2 folds x 2 draws fits; the pooled mean is the mean of the stored fits
    evals = {
        loss: [json.loads((r / "eval" / "sleep_staging_sleep-edf.json").read_text()) for r in rs]
        for loss, rs in runs.items()
    }
    for loss in losses:
        fits = [f["balanced_accuracy"] for e in evals[loss] for f in e["results"]["trained"]["4"]["runs"]]
        assert len(fits) == 8
        assert cross["pooled"][loss]["trained"]["4"]["balanced_accuracy"]["mean"] == pytest.approx(sum(fits) / 8)
    # paired differences, brute force over the stored fits of the same seed / fold / draw
    # by test subject: every seed x draw difference of a subject averaged first, then the mean over subjects
    by_subject: dict[str, list[float]] = {}
    for ea, eb in zip(evals["m3g"], evals["infonce_pwe"]):
        for a, b in zip(ea["results"]["trained"]["2"]["runs"], eb["results"]["trained"]["2"]["runs"]):
            for subject, score in a["per_subject"].items():
                by_subject.setdefault(subject, []).append(score - b["per_subject"][subject])
    means = [sum(v) / len(v) for v in by_subject.values()]
    paired = cross["paired_m3g_minus"]["infonce_pwe"]["2"]
    assert paired["n"] == len(by_subject) == len({s for e in evals["m3g"] for f in e["folds"] for s in f["test"]})
    assert paired["mean"] == pytest.approx(sum(means) / len(means))
    assert paired["ahead"] == sum(m > 0 for m in means)
    # resumable: nothing retrained, nothing re-evaluated
    stamps = {
        p: p.stat().st_mtime_ns
        for rs in runs.values()
        for r in rs
        for p in [r / "model.safetensors", r / "eval" / "sleep_staging_sleep-edf.json"]
    }
    assert repro.main(argv) == 0
    assert all(p.stat().st_mtime_ns == t for p, t in stamps.items())
    assert all(run["reused"] for run in json.loads((tmp_path / "out.json").read_text())["training"].values())
