"""The supervised ceiling row: the run's encoder trained end to end on the pretraining nights' stages
(never a test subject's window), its steps chosen on validation subjects, probed like the trained encoder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _eeg_helpers import CHANNELS, fake_cache

from multiview_app.cli import main
from multiview_app.data.eeg import adapter as eeg_adapter
from multiview_app.train.run_io import load_run_config

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "eeg_synthetic_m3g.yaml"


def _tiny_run(tmp_path: Path) -> Path:
    cache = fake_cache(tmp_path / "cache", subjects=6, windows=15)
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
                f"data.options.channels=[{','.join(CHANNELS)}]",
                f"model.encoders.eeg.channel_vocab=[{','.join(CHANNELS)}]",
                "views.k=4",
                "data.options.test_fraction=0.34",
                f"output.runs_dir={runs}",
                "train.max_steps=2",
                "train.batch_size=4",
                "model.encoders.eeg.width=8",
                "model.encoders.eeg.out_dim=8",
                "model.projector.hidden_dim=16",
                "model.projector.out_dim=8",
                "train.checkpoint_every=0",
                "loss.max_iter=20",
            ]
        )
        == 0
    )
    return runs / "tiny"


def _spy_subjects(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """The subjects whose windows are read from the cache (every read opens a recording's memory map)."""
    read: set[str] = set()
    original = eeg_adapter.WindowDataset._windows

    def spy(self: Any, recording: int) -> Any:
        read.add(self.recordings[recording]["subject"])
        return original(self, recording)

    monkeypatch.setattr(eeg_adapter.WindowDataset, "_windows", spy)
    return read


@pytest.mark.slow
def test_ceiling_trains_on_pretraining_nights_only_and_appears_as_a_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from multiview_app.eval.sleep_staging import format_table, run_sleep_staging
    from multiview_app.eval.supervised_ceiling import CANDIDATES, CEILING_ROW
    from multiview_app.experiments.staging import train_supervised_ceiling

    run = _tiny_run(tmp_path)
    capsys.readouterr()
    without = run_sleep_staging(run, shots=(2,), seeds=1, C=1.0, progress=False)
    assert CEILING_ROW not in without["results"]
    assert any("mvapp experiment supervised-ceiling" in note for note in without["notes"])
    test_subjects = without["subjects"]["test"]

    read = _spy_subjects(monkeypatch)
    record = train_supervised_ceiling(run, steps=CANDIDATES, progress=False)
    assert read and read <= set(record["pretraining_subjects"]) and read.isdisjoint(test_subjects)
    assert set(record["validation_subjects"]) < set(record["pretraining_subjects"])
    assert record["pretraining_subjects"] == without["pretraining_subjects"]
    assert len(record["validation_balanced_accuracy"]) == CANDIDATES  # every checkpoint scored on validation
    assert record["chosen_steps"] in {int(s) for s in record["validation_balanced_accuracy"]}
    final_cfg = load_run_config(record["run"])
    assert final_cfg.loss.name == "supervised_ce" and final_cfg.train.max_steps == record["chosen_steps"]
    assert final_cfg.model.encoders == load_run_config(run).model.encoders  # the same architecture
    assert "val_subjects" not in final_cfg.data.options  # the final run learns from every pretraining night
    assert load_run_config(record["selection_run"]).data.options["val_subjects"] == record["validation_subjects"]
    assert train_supervised_ceiling(run, steps=CANDIDATES, progress=False) == record  # reused, not retrained

    result = run_sleep_staging(run, shots=(2,), seeds=1, C=1.0, progress=False)
    assert CEILING_ROW in result["results"] and CEILING_ROW in result["paired"]
    table = format_table(result)
    assert CEILING_ROW in table and "subjects ahead" in table and "fits won" not in table
    assert f"(n = {len(test_subjects)})" in table


def test_a_ceiling_trained_on_other_subjects_is_refused(tmp_path: Path) -> None:
    from multiview_app.eval.sleep_staging import _ceiling_run
    from multiview_app.eval.supervised_ceiling import CEILING_DIR, CEILING_FILE

    final = tmp_path / "ceiling" / "final_x"
    final.mkdir(parents=True)
    (final / "model.safetensors").write_bytes(b"")
    (tmp_path / CEILING_DIR / CEILING_FILE).write_text(
        json.dumps({"run": str(final), "pretraining_subjects": ["S0", "S5"]})
    )
    notes: list[str] = []
    assert _ceiling_run(tmp_path, ["S0", "S5"], notes) == final and not notes
    with pytest.raises(ValueError, match="the ceiling trained on subjects"):
        _ceiling_run(tmp_path, ["S0", "S1"], notes)
