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
TINY_MODEL = [
    "train.max_steps=2",
    "train.batch_size=4",
    "model.encoders.eeg.width=8",
    "model.encoders.eeg.out_dim=8",
    "model.projector.hidden_dim=16",
    "model.projector.out_dim=8",
    "train.checkpoint_every=0",
]


def copy_night(src_raw: Path, subject: str, dst_raw: Path, new_subject: str) -> None:
    """Copy one Sleep-EDF night (PSG + hypnogram, bytes unchanged) under another subject's file names."""
    dst_raw.mkdir(exist_ok=True)
    for path in src_raw.glob(f"{subject}*"):
        shutil.copyfile(path, dst_raw / path.name.replace(subject, new_subject))


def _synth_prepare(raw: Path, cache: Path, fmt: str, subjects: int, seed: int) -> dict:
    """``mvapp data synth-psg`` (1-h nights) then ``mvapp data prepare``; returns the cache's manifest."""
    assert (
        main(
            [
                "data",
                "synth-psg",
                "--subjects",
                str(subjects),
                "--nights",
                "1",
                "--format",
                fmt,
                "--hours",
                "1",
                "--out",
                str(raw),
                "--seed",
                str(seed),
            ]
        )
        == 0
    )
    assert main(["data", "prepare", fmt, "--source", str(raw), "--out", str(cache)]) == 0
    return json.loads((cache / "manifest.json").read_text())


@pytest.fixture(scope="module")
def seed3(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path, dict]]:
    """The same 3 synthetic people (generator seed 3, 1-h nights) in both formats, synthesized and prepared
    once for the module: ``{format: (raw folder, cache, manifest)}``. Read only (runs and copies go to each
    test's own folder)."""
    root = tmp_path_factory.mktemp("seed3")
    nights = {}
    for fmt in ("physionet2018", "sleep-edf"):
        raw, cache = root / f"{fmt}_raw", root / f"{fmt}_cache"
        nights[fmt] = (raw, cache, _synth_prepare(raw, cache, fmt, 3, seed=3))
    return nights


@pytest.mark.slow
def test_overlap_guard_is_by_content_not_by_name(
    seed3: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw, cache, _ = seed3["sleep-edf"]
    runs = tmp_path / "runs"
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
                *TINY_MODEL,
            ]
        )
        == 0
    )
    run = runs / "tiny"
    pretraining = build_adapter(
        "eeg_windows", {"cache": str(cache), "test_fraction": 0.34, "split_seed": 0}
    ).split_subjects
    assert len(pretraining["train"]) == 2

    # other people (another generator seed) whose subject names are the pretraining subjects' names
    other_raw, other_cache = tmp_path / "other_raw", tmp_path / "other_cache"
    other = _synth_prepare(other_raw, other_cache, "sleep-edf", 2, seed=99)
    assert {r["subject"] for r in other["recordings"]} <= set(pretraining["train"])  # the names clash
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
                "--folds",
                "2",
                "--shots",
                "5",
                "--draws",
                "1",
                "--C",
                "1",
                "--no-baselines",
            ]
        )
        == 0
    )
    assert "sleep_staging_other_cache.json" in capsys.readouterr().out  # another cache: staged, not refused

    # the same night under another name (bytes unchanged) next to a genuinely new one: refused, naming both
    pretrained = pretraining["train"][0]
    copy_raw, copy_cache = tmp_path / "copy_raw", tmp_path / "copy_cache"
    copy_night(raw, pretrained, copy_raw, "SC471")
    copy_night(other_raw, "SC401", copy_raw, "SC472")
    assert main(["data", "prepare", "sleep-edf", "--source", str(copy_raw), "--out", str(copy_cache)]) == 0
    capsys.readouterr()
    assert (
        main(
            [
                "eval",
                "sleep-staging",
                "--run",
                str(run),
                "--cache",
                str(copy_cache),
                "--folds",
                "2",
                "--shots",
                "5",
                "--draws",
                "1",
                "--C",
                "1",
                "--no-baselines",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pretrained on (same sha256" in err, err
    assert f"subject SC471 ({copy_raw}" in err and f"is subject {pretrained} ({raw}" in err, err
    assert not (run / "eval" / "sleep_staging_copy_cache.json").exists()


def test_synthetic_files_carry_the_generators_provenance_and_identify_the_person(seed3: dict, tmp_path: Path) -> None:
    """Issue 26 item 5: every synthetic file records its generator version, seed and person (EDF
    recording field / WFDB comments, read back into the manifest); the same person written in the other
    format shares an identity, a different person with the same subject name does not."""
    from multiview_app.data.eeg.provenance import GENERATOR_VERSION, read_provenance, recording_identities

    (wfdb, _, physionet), (edf_raw, _, edf) = seed3["physionet2018"], seed3["sleep-edf"]
    other = _synth_prepare(tmp_path / "edf4", tmp_path / "edf4_cache", "sleep-edf", 3, seed=4)
    header = (edf_raw / "SC4011E0-PSG.edf").read_bytes()[88:168].decode("latin-1")
    assert f"mvapp-synth/{GENERATOR_VERSION} seed=3 person=1 night=1" in header
    assert (
        read_provenance(sorted(wfdb.glob("tr03-0001.*"))) == f"mvapp-synth/{GENERATOR_VERSION} seed=3 person=1 night=1"
    )
    assert sorted(r["provenance"] for r in edf["recordings"]) == [
        f"mvapp-synth/{GENERATOR_VERSION} seed=3 person={p} night=1" for p in (0, 1, 2)
    ]
    ids = {
        name: recording_identities(m, [r["subject"] for r in m["recordings"]])
        for name, m in (("physionet", physionet), ("edf", edf), ("other", other))
    }
    shared = set(ids["physionet"]) & set(ids["edf"])
    assert shared == {f"synthetic person mvapp-synth/{GENERATOR_VERSION} seed=3 person={p}" for p in (0, 1, 2)}
    assert {r["subject"] for r in other["recordings"]} == {r["subject"] for r in edf["recordings"]}  # same names
    assert not set(ids["edf"]) & set(ids["other"]) and not set(ids["physionet"]) & set(ids["other"])


@pytest.mark.slow
def test_overlap_guard_refuses_the_same_synthetic_person_in_another_format(
    seed3: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An encoder pretrained on PhysioNet-format nights of seed 3 is refused Sleep-EDF-format nights of
    the same seed (the same synthetic people, other files, other bytes), naming both files."""
    (raw, cache, _), (edf_raw, edf_cache, _) = seed3["physionet2018"], seed3["sleep-edf"]
    runs = tmp_path / "runs"
    config = Path(__file__).resolve().parents[1] / "configs" / "eeg_synthetic_m3g.yaml"
    assert (
        main(
            [
                "train",
                "--config",
                str(config),
                "--name",
                "tiny",
                f"data.options.cache={cache}",
                f"output.runs_dir={runs}",
                *TINY_MODEL,
            ]
        )
        == 0
    )
    pretraining = build_adapter(
        "eeg_windows", {"cache": str(cache), "test_fraction": 0.34, "split_seed": 0}
    ).split_subjects
    capsys.readouterr()
    assert (
        main(
            [
                "eval",
                "sleep-staging",
                "--run",
                str(runs / "tiny"),
                "--cache",
                str(edf_cache),
                "--folds",
                "2",
                "--shots",
                "5",
                "--draws",
                "1",
                "--C",
                "1",
                "--no-baselines",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    person = int(pretraining["train"][0][1:])  # "S0001" -> person 1
    assert len(err.splitlines()) == 1 and "same sha256 or synthetic person" in err, err
    assert f"subject SC4{person:02d} ({edf_raw}" in err and f"is subject {pretraining['train'][0]} ({raw}" in err, err
    assert f"seed=3 person={person}" in err, err
