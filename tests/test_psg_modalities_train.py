"""PSG modalities as views: the psg_modalities adapter, the modalities view policy (aligned crops, per-group
augmentations), batches grouped by modality set, per-modality encoders and their checks, fused embeddings, and
a few training steps of both configs on synthetic whole-PSG nights."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from multiview_app import load_encoder
from multiview_app.cli import main
from multiview_app.config import load_config
from multiview_app.data.adapters import build_adapter
from multiview_app.data.eeg.cache import prepare
from multiview_app.data.eeg.modal_views import (
    GroupAugment,
    ModalityViews,
    check_group_augment,
    crop_group,
    shared_crop_starts,
)
from multiview_app.data.eeg.preprocess import PrepareOptions
from multiview_app.data.eeg.stages import PHYSIONET2018_EEG
from multiview_app.data.eeg.synth import synth_psg
from multiview_app.data.views import build_view_policy
from multiview_app.export import load_embeddings
from multiview_app.models import build_model
from multiview_app.models.modal_embed import fuse, modality_embeddings
from multiview_app.train.input_contract import check_modality_encoders
from multiview_app.train.trainer import (
    EpochBatchSampler,
    group_batches,
    micro_batches_per_epoch,
    train,
    undrawn_groups_note,
)

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
TINY = [f"model.encoders.{m}.width=8" for m in ("brain", "heart", "breathing")] + [
    "train.batch_size=4",
    "train.max_steps=2",
    "train.checkpoint_every=1",
    "model.projector.hidden_dim=16",
    "model.projector.out_dim=8",
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three tiny whole-PSG nights (PhysioNet 2018 format), prepared with --modalities six."""
    root = tmp_path_factory.mktemp("psg")
    synth_psg(
        root / "raw", subjects=3, nights=1, fmt="physionet2018", hours=1, compress=6, progress=False, signals="psg"
    )
    prepare(
        "physionet2018",
        root / "raw",
        root / "cache",
        PrepareOptions(channels=list(PHYSIONET2018_EEG)),
        progress=False,
        modalities="six",
    )
    return root / "cache"


def without_group(cache: Path, out: Path, recording: int, group: str) -> Path:
    """A copy of ``cache`` where one recording lacks ``group`` (as if its channel had been left out)."""
    shutil.copytree(cache, out)
    manifest = json.loads((out / "manifest.json").read_text())
    record = manifest["recordings"][recording]
    del record["modalities"][group]
    record["missing_modalities"][group] = "left out for the test"
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


def adapter_and_policy(cache: Path, modalities: object = "sleepfm", data: dict | None = None, **views: object):
    options = {"cache": str(cache), "modalities": modalities, "test_fraction": 0.0, **(data or {})}
    adapter = build_adapter("psg_modalities", options)
    k = len(adapter.modality_names)
    return adapter, build_view_policy("modalities", k, dict(views), adapter)


def raw_batch(dataset, indices: list[int]) -> dict:
    return torch.utils.data.default_collate([dataset[i] for i in indices])


def test_sleepfm_views_have_each_modalitys_channels_and_rate(cache: Path) -> None:
    adapter, policy = adapter_and_policy(cache)
    assert adapter.modality_names == ["brain", "heart", "breathing"]
    contracts = adapter.modality_contracts()
    assert contracts["brain"]["channels"][-1] == "E1-M2" and contracts["brain"]["in_channels"] == 7
    assert contracts["breathing"]["channels"] == ["ABD", "CHEST", "AIRFLOW", "SaO2"]
    assert contracts["breathing"]["sfreq"] == 10.0 and contracts["breathing"]["upsampled"] == {"oximetry": 1.0}
    raw = raw_batch(adapter.split("train"), [0, 1, 2])
    batch = policy.eval_views(raw)
    assert batch.modalities == ["brain", "heart", "breathing"] and batch.k == 3
    assert [tuple(v.shape) for v in batch.views] == [(3, 7, 3000), (3, 1, 6000), (3, 4, 300)]
    upsampled = torch.nn.functional.interpolate(raw["x/oximetry"], size=300, mode="linear", align_corners=False)
    torch.testing.assert_close(batch.views[2][:, 3:], upsampled)  # SaO2 1 Hz -> 10 Hz inside the model input
    torch.testing.assert_close(batch.views[2][:, :3], raw["x/breathing"])


def test_crop_takes_the_same_span_from_every_modality() -> None:
    t = torch.arange(30.0)  # seconds; each group holds its own time axis (seconds) as signal
    groups = {rate: (torch.arange(int(30 * rate)) / rate)[None, None].expand(5, 1, -1) for rate in (1.0, 10.0, 200.0)}
    starts = shared_crop_starts(5, list(groups), 30.0, 20.0, torch.Generator().manual_seed(1), torch.device("cpu"))
    assert (starts == starts.round()).all() and ((starts >= 0) & (starts <= 10)).all()  # on the 1-Hz grid
    crops = {rate: crop_group(x, starts, rate, 20.0) for rate, x in groups.items()}
    for rate, crop in crops.items():
        assert crop.shape[-1] == int(20 * rate)
        torch.testing.assert_close(crop[:, 0, 0], starts.float())  # every group starts at the same second
    assert t.numel() == 30


def test_train_views_share_the_crop_and_keep_shapes(cache: Path) -> None:
    adapter, policy = adapter_and_policy(cache, crop_seconds=20)
    batch = policy.train_views(raw_batch(adapter.split("train"), [0, 5, 9]), torch.Generator().manual_seed(0))
    assert [tuple(v.shape) for v in batch.views] == [(3, 7, 2000), (3, 1, 4000), (3, 4, 200)]
    assert all(torch.isfinite(v).all() for v in batch.views)
    with pytest.raises(ValueError, match="crop_seconds.*whole number of samples of group oximetry"):
        adapter_and_policy(cache, crop_seconds=20.5)


def test_augmentations_that_make_no_sense_are_refused(cache: Path) -> None:
    with pytest.raises(ValueError, match="oximetry.*band stop.*Nyquist 0.5 Hz"):
        check_group_augment("oximetry", GroupAugment(band_stop_hz=0.2, band_stop_range=(0.1, 0.45)), 1.0, "where")
    check_group_augment("oximetry", GroupAugment(amplitude_scale=(0.8, 1.25)), 1.0, "where")  # affine: allowed
    with pytest.raises(ValueError, match="band stop"):
        adapter_and_policy(cache, group_augment={"oximetry": {"band_stop_hz": 0.2, "band_stop_range": [0.1, 0.45]}})
    _, policy = adapter_and_policy(cache, augment=False)
    assert policy.augments == {}


def test_batches_are_grouped_by_modality_set(cache: Path, tmp_path: Path) -> None:
    partial = without_group(cache, tmp_path / "partial", 0, "heart")
    adapter, policy = adapter_and_policy(partial)
    train_set = adapter.split("train")
    assert train_set.set_names == ["brain,heart,breathing", "brain,breathing"]
    n_first = adapter.manifest["recordings"][0]["n_windows"]
    assert (train_set.batch_groups[:n_first] == 1).all() and (train_set.batch_groups[n_first:] == 0).all()
    batches = micro_batches_per_epoch(train_set, len(train_set), 4)
    sampler = EpochBatchSampler(len(train_set), 4, batches, seed=0, epoch=0, groups=train_set.batch_groups)
    drawn = list(sampler)
    assert len(drawn) == batches > 0 and all(len({train_set.batch_groups[i] for i in b}) == 1 for b in drawn)
    views = [policy.train_views(raw_batch(train_set, b)) for b in drawn]
    assert {tuple(v.modalities) for v in views} == {("brain", "heart", "breathing"), ("brain", "breathing")}
    with pytest.raises(ValueError, match="mixes modality sets"):
        policy.eval_views(raw_batch(train_set, [0, n_first]))
    gen = torch.Generator().manual_seed(0)
    assert sum(len(b) for b in group_batches(np.array([0, 0, 0, 1, 1]), 2, gen)) == 4  # tails dropped per group


def test_night_batches_hold_one_night_and_one_modality_set(cache: Path, tmp_path: Path) -> None:
    partial = without_group(cache, tmp_path / "partial", 0, "heart")
    adapter, policy = adapter_and_policy(partial, data={"batch_within": "night"})
    train_set = adapter.split("train")
    nights = np.asarray([train_set[i]["recording"] for i in range(len(train_set))])
    assert (train_set.set_ids == np.repeat([1, 0, 0], np.bincount(train_set.recording_of))).all()
    assert len(np.unique(train_set.batch_groups)) == len(adapter.manifest["recordings"]) == 3
    batches = micro_batches_per_epoch(train_set, len(train_set), 4)
    assert batches == sum(count // 4 for count in np.bincount(train_set.recording_of))
    drawn = list(EpochBatchSampler(len(train_set), 4, batches, seed=0, epoch=0, groups=train_set.batch_groups))
    assert len(drawn) == batches and all(len(set(nights[b])) == 1 for b in drawn)
    assert len({tuple(nights[b[:1]]) for b in drawn}) == 3  # every night is drawn
    assert {len(policy.train_views(raw_batch(train_set, b)).views) for b in drawn} == {2, 3}
    with pytest.raises(ValueError, match="batch_within"):
        adapter_and_policy(cache, data={"batch_within": "subject"})
    # a night shorter than a batch is never drawn, and the trainer's note says how many items that leaves out
    sizes = np.bincount(train_set.recording_of)
    assert undrawn_groups_note(train_set, int(sizes.min())) is None
    note = undrawn_groups_note(train_set, int(sizes.min()) + 1)
    short = sizes[sizes < sizes.min() + 1]
    assert note is not None and f"{short.size} of 3 batch groups" in note and f"their {short.sum()} items" in note


def test_items_below_min_modalities_leave_the_train_split(cache: Path, tmp_path: Path) -> None:
    partial = without_group(cache, tmp_path / "partial", 1, "heart")
    adapter = build_adapter(
        "psg_modalities",
        {"cache": str(partial), "modalities": {"brain": {"groups": ["brain"]}, "heart": {"groups": ["heart"]}}},
    )
    train_ids = {r["recording"] for r in adapter.split("train").recordings}
    assert adapter.manifest["recordings"][1]["recording"] not in train_ids


def test_missing_encoder_and_encoder_mismatch_are_errors(cache: Path) -> None:
    adapter, _ = adapter_and_policy(cache)
    contracts = adapter.modality_contracts()
    good = {
        "brain": {"name": "eeg/conv", "in_channels": 7},
        "heart": {"name": "ecg/cnn"},
        "breathing": {"name": "resp/cnn", "in_channels": 4, "sfreq": 10},
    }
    check_modality_encoders(good, contracts)
    with pytest.raises(ValueError, match="modality 'heart'.*no encoder.*registered encoders: .*ecg/cnn.*eeg/conv"):
        check_modality_encoders({m: s for m, s in good.items() if m != "heart"}, contracts)
    with pytest.raises(ValueError, match="encoder resp/cnn takes 4 channel.*at 1 Hz.*'breathing'.*4 channel.*at 10 Hz"):
        check_modality_encoders({**good, "breathing": {"name": "resp/cnn", "sfreq": 1}}, contracts)
    with pytest.raises(ValueError, match="encoder eeg/chambon takes 1 channel.*at 100 Hz.*'brain'.*7 channel"):
        check_modality_encoders({**good, "brain": {"name": "eeg/chambon"}}, contracts)
    with pytest.raises(ValueError, match="unknown encoder 'ecg/nope'.*registered encoders.*ecg/cnn"):
        build_model({"heart": {"name": "ecg/nope"}}, {"hidden_dim": 8, "out_dim": 4})


def test_channels_as_views_cannot_take_modality_data(cache: Path) -> None:
    adapter, _ = adapter_and_policy(cache)
    with pytest.raises(ValueError, match="view policy 'channels' works on 'eeg' data.*'psg'"):
        build_view_policy("channels", 6, {}, adapter)
    with pytest.raises(ValueError, match="views.k = 6 but data.options.modalities configures 3"):
        build_view_policy("modalities", 6, {}, adapter)


def test_fused_embedding_is_the_mean_of_normalized_modalities(cache: Path, tmp_path: Path) -> None:
    vectors = torch.tensor([[[3.0, 4.0], [0.0, 2.0]]])
    torch.testing.assert_close(fuse(vectors), torch.tensor([[0.3, 0.9]]))
    partial = without_group(cache, tmp_path / "partial", 0, "heart")
    adapter, policy = adapter_and_policy(partial)
    cfg = load_config(CONFIGS / "psg_modalities_sleepfm.yaml", TINY)
    model = build_model(cfg.model.encoders, cfg.model.projector)
    out = modality_embeddings(model, policy, adapter.split("train"), batch_size=8)
    n = len(adapter.split("train"))
    assert out.fused.shape == (n, 64) and set(out.per_modality) == {"brain", "heart", "breathing"}
    n_first = adapter.manifest["recordings"][0]["n_windows"]
    assert not out.present["heart"][:n_first].any() and out.present["heart"][n_first:].all()
    assert np.isnan(out.per_modality["heart"][:n_first]).all() and np.isfinite(out.fused).all()
    unit = {m: v / np.linalg.norm(v, axis=1, keepdims=True) for m, v in out.per_modality.items()}
    np.testing.assert_allclose(out.fused[0], (unit["brain"][0] + unit["breathing"][0]) / 2, rtol=1e-5, atol=1e-6)
    vectors, index = out.only("heart")
    assert vectors.shape == (n - n_first, 64) and index[0] == n_first


@pytest.mark.slow
@pytest.mark.parametrize(
    "config, loss",
    [("psg_modalities_sleepfm.yaml", "m3g"), ("psg_modalities_six.yaml", "sleepfm_loo")],
)
def test_a_few_training_steps_of_each_config(cache: Path, tmp_path: Path, config: str, loss: str) -> None:
    six = config.endswith("six.yaml")
    widths = [f"model.encoders.{m}.width=8" for m in ("eyes", "muscle", "oximetry")] if six else []
    cfg = load_config(
        CONFIGS / config,
        [*TINY, *widths, f"data.options.cache={cache}", f"output.runs_dir={tmp_path}", f"loss.name={loss}"],
        name="tiny",
    )
    result = train(cfg)
    assert result.steps == 2 and math.isfinite(result.final_loss)
    run = result.run_dir
    assert (run / "model.safetensors").is_file() and list((run / "checkpoints").iterdir())
    contract = json.loads((run / "input_contract.json").read_text())["modalities"]
    assert len(contract) == (6 if six else 3)
    adapter = build_adapter(cfg.data.adapter, cfg.data.options)
    policy = build_view_policy(cfg.views.policy, cfg.views.k, cfg.views.options, adapter)
    assert isinstance(policy, ModalityViews)
    model = build_model(cfg.model.encoders, cfg.model.projector)
    batch = policy.train_views(raw_batch(adapter.split("train"), [0, 1, 2, 3]), torch.Generator().manual_seed(0))
    assert tuple(model.embed(batch).shape) == (4, 6 if six else 3, 8)


@pytest.mark.slow
def test_export_writes_a_row_per_modality_and_a_fused_row(cache: Path, tmp_path: Path) -> None:
    """A night without heart: NaN heart rows, a fused row from what it has; each encoder with its own contract."""
    partial = without_group(cache, tmp_path / "partial", 0, "heart")
    overrides = [*TINY, f"data.options.cache={partial}", f"output.runs_dir={tmp_path}", "train.max_steps=1"]
    run = train(load_config(CONFIGS / "psg_modalities_sleepfm.yaml", overrides, name="tiny")).run_dir
    assert main(["export", "--run", str(run), "--out", str(tmp_path / "emb"), "--format", "parquet"]) == 0
    rows, meta, manifest = load_embeddings(tmp_path / "emb")
    table = meta.to_pandas()
    assert manifest["view_names"] == ["brain", "heart", "breathing", "fused"] and len(table) == 4 * len(
        table.item_id.unique()
    )
    rows = np.asarray(rows)
    no_heart = (table.modalities == "brain,breathing").to_numpy()
    assert no_heart.any() and np.isnan(rows[no_heart & (table.modality == "heart").to_numpy()]).all()
    assert np.isfinite(rows[(table.modality != "heart").to_numpy()]).all()
    assert main(["export", "--run", str(run), "--out", str(tmp_path / "mean"), "--views", "mean"]) != 0
    assert main(["export-model", "--run", str(run), "--out", str(tmp_path / "enc"), "--modality", "breathing"]) == 0
    config = json.loads((tmp_path / "enc" / "config.json").read_text())
    assert config["input"]["kind"] == "psg_modality" and config["input"]["contract"]["in_channels"] == 4
    assert config["input"]["contract"]["upsampled"] == {"oximetry": 1.0}
    assert tuple(load_encoder(tmp_path / "enc")(torch.randn(2, 4, 300)).shape) == (2, 64)
