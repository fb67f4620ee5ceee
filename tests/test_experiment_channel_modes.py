"""``mvapp experiment channel-modes`` at toy size (cross-dataset protocol only: no real data needed): each mode is
the demo's run with only ``channel_mode`` changed, the table's cells are the mean ± std over pretraining seeds of
the stored evaluations, and a second call retrains and re-evaluates nothing. Also the one mechanism that both
this experiment and ``mvapp experiment dreams-transfer`` use for the demo's settings (``DEMO_X`` overrides)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from multiview_app.cli import main
from multiview_app.experiments import channel_modes, eeg_demo

TOY_DEMO = {
    "DEMO_SUBJECTS": "3",
    "DEMO_EDF_SUBJECTS": "4",
    "DEMO_HOURS": "1",
    "DEMO_COMPRESS": "1",
    "DEMO_STEPS": "2",
    "DEMO_DRAWS": "2",
    "DEMO_ENCODER": "{name: conv, width: 8, out_dim: 8, dropout: 0.0, channel_mode: agnostic, unknown_rate: 0.0, channel_vocab: [F3-M2, F4-M1, C3-M2, C4-M1, O1-M2, O2-M1]}",
    "DEMO_AUGMENT": "",
}


def _mvapp_in_process(*args: str) -> None:
    """``experiments.eeg_demo.mvapp`` (the demo data's ``mvapp data synth-psg`` / ``prepare``) in this process: a
    fresh interpreter per call cost more than the commands; the subprocess itself is exercised by
    test_transfer_dreams.py (``prepare_dreams``)."""
    assert main(list(args)) == 0, args


def test_channel_modes_change_only_the_channel_mode_of_the_demo_config() -> None:
    from multiview_app.experiments.eeg_demo import demo_config, demo_settings

    conv = {**demo_settings(env={"DEMO_STEPS": "120"}), "encoder": channel_modes.CONV_ENCODER}  # eeg/conv's modes
    cfg = demo_config(Path("/nonexistent/cache"), Path("/tmp/runs"), "x", 3, conv, channel_modes.MODES["montage"])
    assert (cfg.train.max_steps, cfg.train.seed, cfg.model.encoders["eeg"]["channel_mode"]) == (120, 3, "montage")


@pytest.mark.slow
def test_toy_comparison_means_over_seeds_of_the_stored_evaluations_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for key, value in TOY_DEMO.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("MVAPP_REAL_PSG", raising=False)
    monkeypatch.setattr(eeg_demo, "mvapp", _mvapp_in_process)
    out = tmp_path / "out"
    knobs = ["modes=[agnostic,montage]", "seeds=[0,1]", "protocols=[cross-dataset]", "cross_shots=[2,4]"]
    argv = ["experiment", "channel-modes", "--out", str(out), "--set", *knobs, "cross_folds=2"]
    assert main(argv) == 0
    summary = json.loads((out / "channel_modes.json").read_text())
    table = (out / "channel_modes.md").read_text()
    assert (
        "agnostic (n=2)" in table
        and "montage (n=2)" in table
        and "minus handcrafted" in table
        and "minus band power" in table
    )
    runs = {
        mode: [out / "runs" / channel_modes.run_name(mode, seed) for seed in (0, 1)] for mode in ("agnostic", "montage")
    }
    assert runs["agnostic"][0].name == "eeg_synthetic_m3g_demo_seed0"  # mvapp experiment dreams-transfer's run names
    for mode, folders in runs.items():
        saved = [(f / "config.yaml").read_text() for f in folders]
        assert all(f"channel_mode: {mode}" in text and "max_steps: 2" in text for text in saved)
        evals = [json.loads((f / "eval" / "sleep_staging_sleep-edf.json").read_text()) for f in folders]
        for s in ("2", "4"):
            cell = summary["summary"]["cross-dataset"][mode][s]
            per_seed = [
                np.mean([fit["balanced_accuracy"] for fit in e["results"]["trained"][s]["runs"]]) for e in evals
            ]
            assert cell["n_seeds"] == 2 and cell["fits_per_seed"] == 2 * 2  # folds x draws
            assert cell["trained"]["balanced_accuracy"]["mean"] == pytest.approx(np.mean(per_seed))
            assert cell["trained"]["balanced_accuracy"]["std"] == pytest.approx(np.std(per_seed))
            # by test subject: each seed's mean over subjects (draws averaged per subject first)
            per_seed_subjects = []
            for e in evals:
                by_subject: dict[str, list[float]] = {}
                for a, b in zip(e["results"]["trained"][s]["runs"], e["results"]["handcrafted"][s]["runs"]):
                    for subject, score in a["per_subject"].items():
                        by_subject.setdefault(subject, []).append(score - b["per_subject"][subject])
                per_seed_subjects.append({k: np.mean(v) for k, v in by_subject.items()})
            assert cell["minus handcrafted"]["mean"] == pytest.approx(
                np.mean([np.mean(list(d.values())) for d in per_seed_subjects])
            )
            subjects = {k for d in per_seed_subjects for k in d}
            over_seeds = {k: np.mean([d[k] for d in per_seed_subjects if k in d]) for k in subjects}
            assert cell["minus handcrafted"]["n"] == len(subjects) == 4  # the Sleep-EDF-format people, not fits
            assert cell["minus handcrafted"]["ahead"] == sum(v > 0 for v in over_seeds.values())
    stamps = {
        p: p.stat().st_mtime_ns
        for folders in runs.values()
        for f in folders
        for p in (f / "model.safetensors", f / "eval" / "sleep_staging_sleep-edf.json")
    }
    assert main(argv) == 0  # resumes: nothing retrained, nothing re-evaluated
    assert all(p.stat().st_mtime_ns == t for p, t in stamps.items())
    assert all(t["reused"] for t in json.loads((out / "channel_modes.json").read_text())["timings"])
    capsys.readouterr()
    assert main([*argv[:4], "--set", "modes=[electrodes]"]) == 2
    assert "unknown ['electrodes']" in capsys.readouterr().err
    assert main([*argv[:4], "--set", "protocols=[dreams]"]) == 2  # no --real-psg, no $MVAPP_REAL_PSG
    assert "dreams needs --real-psg" in capsys.readouterr().err
