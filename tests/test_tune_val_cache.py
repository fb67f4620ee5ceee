"""Cross-dataset validation for ``mvapp tune``: ``tune.val_cache`` scores the sleep-staging objective on another
cache's nights (half its subjects fit the few-shot classifier, the others score) and is refused, naming both
files, when it shares a recording (source sha256) with ``tune.test_cache`` or with the pretraining cache."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _eeg_helpers import fake_cache

from multiview_app.config import config_from_dict
from multiview_app.data.eeg.contract import InputContractError
from multiview_app.models.model import build_model
from multiview_app.train.run_io import model_spec
from multiview_app.tune.objective import METRICS, MetricState, cross_dataset_val_adapter


def cache_with_sources(folder: Path, tag: str, subjects: int = 4, shared: dict[int, str] | None = None) -> Path:
    """:func:`fake_cache` whose recording r<s> came from source ``<tag><s>.edf`` (sha256 ``<tag>-<s>``, or
    ``shared[s]``: the same bytes as another cache's file)."""
    fake_cache(folder, subjects=subjects, windows=10)
    manifest = json.loads((folder / "manifest.json").read_text())
    for s, record in enumerate(manifest["recordings"]):
        record["sources"] = [{"path": f"{tag}{s}.edf", "sha256": (shared or {}).get(s, f"{tag}-{s}")}]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def tune_cfg(pretraining: Path, val: Path, test: Path | None = None, **tune: Any):
    raw = {
        "data": {"adapter": "eeg_windows", "options": {"cache": str(pretraining), "test_fraction": 0.25}},
        "views": {"policy": "channels", "k": 2, "batch_mode": "growing"},
        "model": {
            "encoders": {"eeg": {"name": "conv", "width": 8, "out_dim": 8, "groups": 4, "channel_mode": "agnostic"}},
            "projector": {"hidden_dim": 16, "out_dim": 8},
        },
        "loss": {"name": "m3g", "epsilon": 0.2},
        "train": {"max_steps": 1, "batch_size": 8},
        "eval": {"linear_probe": False},
        "tune": {"shots": 2, "val_cache": str(val), **({"test_cache": str(test)} if test else {}), **tune},
    }
    return config_from_dict(raw)


def test_val_cache_scores_other_nights(tmp_path: Path) -> None:
    pretraining = cache_with_sources(tmp_path / "pre", "pre")
    val = cache_with_sources(tmp_path / "val", "val")
    test = cache_with_sources(tmp_path / "test", "test")
    cfg = tune_cfg(pretraining, val, test)
    state = MetricState(cfg)
    assert state.adapter.cache_dir == val and set(state.adapter.splits) == {"train", "val"}
    assert sorted(state.adapter.split_subjects["train"] + state.adapter.split_subjects["val"]) == [
        "S0",
        "S1",
        "S2",
        "S3",
    ]
    assert len(state.adapter.split_subjects["val"]) == 2
    model = build_model(**model_spec(cfg))
    score = METRICS["sleep_staging.balanced_accuracy"].compute(model, state)
    assert 0.0 <= score <= 1.0


@pytest.mark.parametrize("against", ["test", "pretraining"])
def test_val_cache_sharing_a_recording_is_refused_naming_both(tmp_path: Path, against: str) -> None:
    pretraining = cache_with_sources(tmp_path / "pre", "pre", shared={2: "val-1"} if against == "pretraining" else None)
    test = cache_with_sources(tmp_path / "test", "test", shared={0: "val-1"} if against == "test" else None)
    val = cache_with_sources(tmp_path / "val", "val")
    cfg = tune_cfg(pretraining, val, test)
    where = f"tune.test_cache {test}" if against == "test" else f"the pretraining cache {pretraining}"
    culprit = "subject S0 (test0.edf)" if against == "test" else "subject S2 (pre2.edf)"
    with pytest.raises(ValueError) as error:
        cross_dataset_val_adapter(cfg)
    message = str(error.value)
    assert f"tune.val_cache {val} shares recordings with {where}" in message
    assert f"subject S1 (val1.edf) is {culprit}" in message
    with pytest.raises(ValueError, match="shares recordings"):
        MetricState(cfg)


def test_val_cache_only_for_sleep_staging_metrics(tmp_path: Path) -> None:
    pretraining = cache_with_sources(tmp_path / "pre", "pre")
    val = cache_with_sources(tmp_path / "val", "val")
    with pytest.raises(
        ValueError, match="tune.val_cache scores only sleep_staging.. metrics, got linear_probe.knn_acc"
    ):
        MetricState(tune_cfg(pretraining, val, metric="linear_probe.knn_acc"))


def with_facts(folder: Path, **changes: Any) -> Path:
    """Record the preprocessing of :func:`fake_cache` (100 Hz, 30-s windows, 0.5-30 Hz, window scaling) in its
    manifest, then apply ``changes`` (``sfreq`` / ``window_seconds`` / ``channels`` at the top level, the rest
    in ``options``)."""
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["options"] = {"l_freq": 0.5, "h_freq": 30.0, "scaling": "window"}
    for key, value in changes.items():
        (manifest if key in ("sfreq", "window_seconds", "channels") else manifest["options"])[key] = value
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


@pytest.mark.parametrize(
    ("change", "key", "expected"),
    [
        ({"sfreq": 128.0}, "sampling rate", "encoder 100 Hz, cache 128 Hz"),
        ({"window_seconds": 20.0}, "window length", "encoder 30 s, cache 20 s"),
        ({"l_freq": 0.3}, "band-pass", "encoder 0.5-30 Hz, cache 0.3-30 Hz"),
        ({"scaling": "recording"}, "scaling", "encoder window, cache recording"),
    ],
)
def test_val_cache_off_the_encoders_input_contract_is_refused_in_one_line(
    tmp_path: Path, change: dict[str, Any], key: str, expected: str
) -> None:
    """A validation cache prepared otherwise than the pretraining cache the encoder is trained on is refused
    before any trial, in one line naming tune.val_cache, the cache and the mismatching key."""
    pretraining = with_facts(cache_with_sources(tmp_path / "pre", "pre"))
    val = with_facts(cache_with_sources(tmp_path / "val", "val"), **change)
    cfg = tune_cfg(pretraining, val)
    with pytest.raises(InputContractError) as error:
        cross_dataset_val_adapter(cfg)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(f"tune.val_cache: cache {val} does not match the input contract of the encoder 'conv'")
    assert f"{key}: {expected}" in message
    blocking = message.split(". Prepare")[0]
    others = {"sampling rate", "window length", "band-pass", "scaling"} - {key}
    assert not any(f"{other}:" in blocking for other in others)  # only the key that differs
    with pytest.raises(InputContractError, match=key):
        MetricState(cfg)


def test_val_cache_with_other_channels_is_refused_only_for_an_encoder_that_reads_them_by_position(
    tmp_path: Path,
) -> None:
    """Other channels are the cross-dataset shift a per-channel encoder is validated on (accepted); a stacked
    encoder reads its input channels by position, so other channels are refused naming the key."""
    pretraining = with_facts(cache_with_sources(tmp_path / "pre", "pre"))
    val = with_facts(cache_with_sources(tmp_path / "val", "val"), channels=["Fpz-Cz", "Pz-Oz", "C3-M2", "O2-M1"])
    assert cross_dataset_val_adapter(tune_cfg(pretraining, val)).cache_dir == val
    stacked = tune_cfg(pretraining, val)
    raw = stacked.model_dump()
    raw["views"]["options"] = {"channel_split": "stacked"}
    raw["model"]["encoders"]["eeg"]["in_channels"] = 2
    with pytest.raises(InputContractError, match=r"^tune.val_cache: cache .* channels: encoder \['F3-M2'"):
        cross_dataset_val_adapter(config_from_dict(raw))


def test_val_cache_matching_the_contract_passes(tmp_path: Path) -> None:
    pretraining = with_facts(cache_with_sources(tmp_path / "pre", "pre"))
    val = with_facts(cache_with_sources(tmp_path / "val", "val"))
    assert cross_dataset_val_adapter(tune_cfg(pretraining, val)).cache_dir == val


def test_objective_resolution_counts_the_val_cache_items(tmp_path: Path) -> None:
    """The tune report's objective resolution reads the scored validation nights of tune.val_cache (the
    pretraining cache has no val split then)."""
    from types import SimpleNamespace

    import yaml

    from multiview_app.tune.report import objective_resolution
    from multiview_app.tune.study import BASE_CONFIG_ATTR, METRICS_ATTR

    pretraining = cache_with_sources(tmp_path / "pre", "pre")
    val = cache_with_sources(tmp_path / "val", "val")
    raw = tune_cfg(pretraining, val).model_dump()
    study = SimpleNamespace(
        study_name="s",
        user_attrs={BASE_CONFIG_ATTR: yaml.safe_dump(raw), METRICS_ATTR: ["sleep_staging.balanced_accuracy"]},
    )
    text = objective_resolution(study)
    assert text is not None and "scored on 20 labelled val items" in text  # 2 of 4 subjects x 10 windows
