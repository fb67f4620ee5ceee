"""The supervised ceiling row: the run's encoder trained end to end on the pretraining nights' stages
(never a test subject's window), its steps chosen on validation subjects, probed like the trained encoder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from _eeg_helpers import CHANNELS, fake_cache

from multiview_app.cli import main
from multiview_app.data.eeg import adapter as eeg_adapter
from multiview_app.train.run_io import load_run_config

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "eeg_synthetic_m3g.yaml"


def _tiny_run(tmp_path: Path, *encoder: str) -> Path:
    """A 2-step M3G run on a fake cache of 6 subjects (2 test); ``encoder``: overrides of the conv encoder."""
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
                *encoder,
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
    assert record["weights"] == ("final" if record["chosen_steps"] == CANDIDATES else f"step_{record['chosen_steps']}")
    ceiling_cfg = load_run_config(record["run"])
    assert ceiling_cfg.loss.name == "supervised_ce" and ceiling_cfg.train.max_steps == CANDIDATES
    assert ceiling_cfg.model.encoders == load_run_config(run).model.encoders  # the same architecture
    assert ceiling_cfg.data.options["val_subjects"] == record["validation_subjects"]
    assert set(record["training_subjects"]) == set(record["pretraining_subjects"]) - set(record["validation_subjects"])
    assert train_supervised_ceiling(run, steps=CANDIDATES, progress=False) == record  # reused, not retrained

    result = run_sleep_staging(run, shots=(2,), seeds=1, C=1.0, progress=False)
    assert CEILING_ROW in result["results"] and CEILING_ROW in result["paired"]
    table = format_table(result)
    assert CEILING_ROW in table and "subjects ahead" in table and "fits won" not in table
    assert f"(n = {len(test_subjects)};" in table
    assert result[CEILING_ROW] == {"run": record["run"], "weights": record["weights"]}


@pytest.mark.slow
def test_the_staging_row_probes_the_checkpoint_the_validation_subjects_chose(tmp_path: Path) -> None:
    """The ceiling's selection probe and the staging evaluator's ceiling (a BatchNorm encoder) are one model:
    the evaluator's ceiling features are those of the chosen checkpoint, and the selection probe of the
    evaluator's model gives the recorded validation score (a retrained model is another one)."""
    import numpy as np

    from multiview_app.data.adapters import build_adapter
    from multiview_app.data.eeg.views import staging_views
    from multiview_app.eval.features import window_features
    from multiview_app.eval.sleep_staging import _ceiling_run
    from multiview_app.eval.supervised_ceiling import CANDIDATES, model_validation_score
    from multiview_app.experiments.staging import train_supervised_ceiling
    from multiview_app.train.run_io import load_run

    run = _tiny_run(tmp_path, "model.encoders.eeg={name: chambon, out_dim: 8, n_conv_chs: 4, batch_norm: true}")
    record = train_supervised_ceiling(run, steps=2 * CANDIDATES, progress=False)
    cfg = load_run_config(run)
    source = _ceiling_run(run, record["pretraining_subjects"], [])
    assert source is not None
    _, staged = load_run(*source)  # what run_sleep_staging probes
    assert any(isinstance(m, torch.nn.BatchNorm1d) for m in staged.modules())
    chosen_cfg, chosen = load_run(
        record["run"], "final" if record["chosen_steps"] == 2 * CANDIDATES else f"step_{record['chosen_steps']}"
    )
    adapter = build_adapter(cfg.data.adapter, cfg.data.options)
    policy = staging_views(cfg.views, adapter)
    staged_features = window_features(staged, adapter, policy, "test", 8, "cpu")[0]
    chosen_features = window_features(chosen, adapter, policy, "test", 8, "cpu")[0]
    np.testing.assert_array_equal(staged_features, chosen_features)
    init_features = window_features(load_run(record["run"], "init")[1], adapter, policy, "test", 8, "cpu")[0]
    assert not np.allclose(staged_features, init_features)  # the ceiling was trained
    recorded = record["validation_balanced_accuracy"][str(record["chosen_steps"])]
    assert model_validation_score(chosen_cfg, staged) == pytest.approx(recorded, abs=1e-12)


def test_a_ceiling_trained_on_other_subjects_or_without_a_chosen_checkpoint_is_refused(tmp_path: Path) -> None:
    from multiview_app.eval.sleep_staging import _ceiling_run
    from multiview_app.eval.supervised_ceiling import CEILING_DIR, CEILING_FILE

    ceiling = tmp_path / "ceiling" / "select_x"
    (ceiling / "checkpoints" / "step_00000004").mkdir(parents=True)
    (ceiling / "checkpoints" / "step_00000004" / "model.safetensors").write_bytes(b"")
    record_file = tmp_path / CEILING_DIR / CEILING_FILE
    record = {"run": str(ceiling), "weights": "step_4", "pretraining_subjects": ["S0", "S5"]}
    record_file.write_text(json.dumps(record))
    notes: list[str] = []
    assert _ceiling_run(tmp_path, ["S0", "S5"], notes) == (ceiling, "step_4") and not notes
    with pytest.raises(ValueError, match="the ceiling trained on subjects"):
        _ceiling_run(tmp_path, ["S0", "S1"], notes)
    for stale in ({k: v for k, v in record.items() if k != "weights"}, {**record, "weights": "step_8"}):
        record_file.write_text(json.dumps(stale))  # an older version's record (a retrained ceiling) / a lost file
        assert _ceiling_run(tmp_path, ["S0", "S5"], notes) is None
        assert notes.pop() == (
            f"no supervised_ceiling row: train it with `mvapp experiment supervised-ceiling --run {tmp_path}`"
        )
