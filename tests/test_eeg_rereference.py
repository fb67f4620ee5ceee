"""Bipolar re-referencing in the ``channels`` view policy: derivations are the exact subtraction of the cached
referential windows, views keep the trainer's layout, a tiny training run works with the option on, and a pair
without one shared reference (or a misnamed derivation) is one clear error at config validation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from _eeg_helpers import CHANNELS, fake_cache

from multiview_app.cli import main
from multiview_app.data.adapters import build_adapter
from multiview_app.data.batch import ViewBatch
from multiview_app.data.views import build_view_policy

BIPOLAR = {"F3-C3": ["F3-M2", "C3-M2"], "C3-O1": ["C3-M2", "O1-M2"]}  # CHANNELS share M2; O2-M1 does not
CONFIG = Path(__file__).resolve().parents[1] / "configs" / "eeg_physionet2018_m3g_bipolar.yaml"


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fake_cache(tmp_path_factory.mktemp("bipolar") / "cache", subjects=4, windows=6)


def policy_and_batch(cache: Path, k: int, **options):
    adapter = build_adapter("eeg_windows", {"cache": str(cache), "test_fraction": 0.25})
    dataset = adapter.split("train")
    raw = torch.utils.data.default_collate([dataset[i] for i in range(5)])
    return build_view_policy("channels", k, {"bipolar": BIPOLAR, **options}, adapter), raw, dataset


def test_derivation_is_the_exact_subtraction_of_the_cached_windows(cache: Path) -> None:
    policy, raw, dataset = policy_and_batch(cache, k=len(CHANNELS) + 2)
    views = policy.eval_views(raw)
    assert views.view_names == [*CHANNELS, "F3-C3", "C3-O1"]
    recording = dataset.recordings[0]
    cached = np.load(cache / recording["file"])  # (w, c, T) float32, the file itself
    first, second = CHANNELS.index("C3-M2"), CHANNELS.index("O1-M2")
    expected = torch.from_numpy(cached[:5, first] - cached[:5, second])
    assert torch.equal(views.views[CHANNELS.index("O2-M1")], torch.from_numpy(cached[:5, 3]))
    assert torch.equal(views.views[-1], expected)  # bit-exact, not approximately
    assert not torch.equal(views.views[-1], views.views[-2])


def test_train_views_keep_the_layout_and_mix_both_montages(cache: Path) -> None:
    policy, raw, _ = policy_and_batch(cache, k=3, crop_seconds=20.0)
    seen: set[str] = set()
    for seed in range(12):
        views = policy.train_views(raw, torch.Generator().manual_seed(seed))
        assert isinstance(views, ViewBatch) and len(views.views) == 3 and len(set(views.view_names)) == 3
        assert all(v.shape == (5, 2000) for v in views.views)
        seen |= set(views.view_names)
        stacked = torch.stack(views.views, dim=1)  # the trainer's (n, k, T) layout
        assert stacked.shape == (5, 3, 2000)
    assert {"F3-C3", "C3-O1"} <= seen and set(CHANNELS) & seen


def test_a_train_view_named_by_a_derivation_holds_that_derivation(cache: Path) -> None:
    policy, raw, _ = policy_and_batch(cache, k=len(CHANNELS) + 2)
    views = policy.train_views(raw, torch.Generator().manual_seed(0))
    x = raw["x"]
    derived = views.views[views.view_names.index("F3-C3")]
    assert torch.equal(derived, x[:, CHANNELS.index("F3-M2")] - x[:, CHANNELS.index("C3-M2")])


@pytest.mark.parametrize(
    "name, pair, message",
    [
        ("F3-O2", ["F3-M2", "O2-M1"], "different references (M2 vs M1)"),
        ("C3-O1", ["F3-M2", "C3-M2"], "name it 'F3-C3'"),
        ("F3-C3", ["F3", "C3-M2"], "channel 'F3' names no reference"),
        ("F3-C3", ["F3-M2"], "expected two referential channels"),
    ],
)
def test_a_bad_pair_is_one_error_naming_the_channel(cache: Path, name: str, pair: list[str], message: str) -> None:
    adapter = build_adapter("eeg_windows", {"cache": str(cache), "test_fraction": 0.25})
    with pytest.raises(ValueError) as error:
        build_view_policy("channels", 2, {"bipolar": {name: pair}}, adapter)
    assert message in str(error.value) and f"views.options.bipolar.{name}" in str(error.value)


def test_a_pair_the_data_lacks_names_the_channel(cache: Path) -> None:
    adapter = build_adapter("eeg_windows", {"cache": str(cache), "test_fraction": 0.25})
    with pytest.raises(
        ValueError, match=r"views.options.bipolar.F4-C4: channel\(s\) \['F4-M1', 'C4-M1'\] not provided"
    ):
        build_view_policy("channels", 2, {"bipolar": {"F4-C4": ["F4-M1", "C4-M1"]}}, adapter)


def test_tiny_training_run_with_bipolar_views(cache: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    assert (
        main(
            [
                "train",
                "--config",
                str(CONFIG),
                "--name",
                "bip",
                f"data.options.cache={cache}",
                f"data.options.channels={json.dumps(CHANNELS)}",
                f"views.options.bipolar={json.dumps(BIPOLAR)}",
                "views.k=3",
                f"output.runs_dir={runs}",
                "train.max_steps=2",
                "train.batch_size=4",
                "train.checkpoint_every=0",
                "train.num_workers=0",
                "model.encoders.eeg.width=8",
                "model.encoders.eeg.out_dim=8",
                "model.projector.hidden_dim=16",
                "model.projector.out_dim=8",
            ]
        )
        == 0
    )
    assert (runs / "bip" / "model.safetensors").is_file()
