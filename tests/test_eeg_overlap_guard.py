"""The sleep-staging overlap guard compares recordings by content (sha256 of the source files), not by
subject name: another person who happens to share a pretraining subject's name is staged, the same night
copied under another name is refused naming both files."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from multiview_app.cli import main
from multiview_app.data.adapters import build_adapter

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "eeg_sleepedf_m3g.yaml"
TINY_MODEL = ["train.max_steps=2", "train.batch_size=4", "model.encoders.eeg.width=8", "model.encoders.eeg.out_dim=8",
              "model.projector.hidden_dim=16", "model.projector.out_dim=8", "train.checkpoint_every=0"]


def synth_and_prepare(raw: Path, cache: Path, subjects: int, seed: int) -> None:
    assert main(["data", "synth-psg", "--subjects", str(subjects), "--nights", "1", "--format", "sleep-edf",
                 "--hours", "1", "--out", str(raw), "--seed", str(seed)]) == 0
    assert main(["data", "prepare", "sleep-edf", "--source", str(raw), "--out", str(cache)]) == 0


def copy_night(src_raw: Path, subject: str, dst_raw: Path, new_subject: str) -> None:
    """Copy one Sleep-EDF night (PSG + hypnogram, bytes unchanged) under another subject's file names."""
    dst_raw.mkdir(exist_ok=True)
    for path in src_raw.glob(f"{subject}*"):
        shutil.copyfile(path, dst_raw / path.name.replace(subject, new_subject))


@pytest.mark.slow
def test_overlap_guard_is_by_content_not_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw, cache, runs = tmp_path / "raw", tmp_path / "cache", tmp_path / "runs"
    synth_and_prepare(raw, cache, 3, seed=3)
    assert main(["train", "--config", str(CONFIG), "--name", "tiny", f"data.options.cache={cache}",
                 "data.options.test_fraction=0.34", f"output.runs_dir={runs}", *TINY_MODEL]) == 0
    run = runs / "tiny"
    pretraining = build_adapter("eeg_windows", {"cache": str(cache), "test_fraction": 0.34, "split_seed": 0}).split_subjects
    assert len(pretraining["train"]) == 2

    # other people (another generator seed) whose subject names are the pretraining subjects' names
    other_raw, other_cache = tmp_path / "other_raw", tmp_path / "other_cache"
    synth_and_prepare(other_raw, other_cache, 2, seed=99)
    other = json.loads((other_cache / "manifest.json").read_text())
    assert {r["subject"] for r in other["recordings"]} <= set(pretraining["train"])  # the names clash
    capsys.readouterr()
    assert main(["eval", "sleep-staging", "--run", str(run), "--cache", str(other_cache), "--folds", "2",
                 "--shots", "5", "--seeds", "1", "--C", "1", "--no-baselines"]) == 0
    assert "sleep_staging_other_cache.json" in capsys.readouterr().out  # another cache: staged, not refused

    # the same night under another name (bytes unchanged) next to a genuinely new one: refused, naming both
    pretrained = pretraining["train"][0]
    copy_raw, copy_cache = tmp_path / "copy_raw", tmp_path / "copy_cache"
    copy_night(raw, pretrained, copy_raw, "SC471")
    copy_night(other_raw, "SC401", copy_raw, "SC472")
    assert main(["data", "prepare", "sleep-edf", "--source", str(copy_raw), "--out", str(copy_cache)]) == 0
    capsys.readouterr()
    assert main(["eval", "sleep-staging", "--run", str(run), "--cache", str(copy_cache), "--folds", "2",
                 "--shots", "5", "--seeds", "1", "--C", "1", "--no-baselines"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pretrained on (same sha256)" in err, err
    assert f"subject SC471 ({copy_raw}" in err and f"is subject {pretrained} ({raw}" in err, err
    assert not (run / "eval" / "sleep_staging_copy_cache.json").exists()
