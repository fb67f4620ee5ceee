"""Channel-aware EEG encoder, channels view policy and the eeg_windows adapter (subject-wise split)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _eeg_helpers import CHANNELS, fake_cache

from multiview_app.data.adapters import build_adapter
from multiview_app.data.views import build_view_policy
from multiview_app.models.encoders import build_encoder


def _tiny_encoder(**kwargs) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_encoder("eeg", "conv", width=16, out_dim=8, groups=4, **kwargs).eval()


def test_encoder_shapes_and_channel_awareness():
    encoder = _tiny_encoder()
    x = torch.randn(3, 3000)
    assert encoder.num_features == 8
    assert encoder(x, view_name="C3-M2").shape == (3, 8)
    assert encoder(x[:, None], view_name="C3-M2").shape == (3, 8)  # (n, 1, T) also accepted
    assert encoder(x[:, :2000], view_name="C3-M2").shape == (3, 8)  # temporal crops: any length >= 96
    # same signal, different channel names -> different features (the embedding is used) ...
    assert not torch.allclose(encoder(x, "C3-M2"), encoder(x, "O1-M2"))
    # ... case / "EEG " prefix do not matter, and channels outside the vocabulary share "unknown"
    torch.testing.assert_close(encoder(x, "c3-m2"), encoder(x, "EEG C3-M2"))
    torch.testing.assert_close(encoder(x, "Fpz-Cz"), encoder(x, "Pz-Oz"))
    torch.testing.assert_close(encoder(x, "Fpz-Cz"), encoder(x, None))
    assert encoder.channel_ids("Fpz-Cz") == [0] and encoder.channel_ids("F3-M2+O2-M1") == [1, 6]
    with pytest.raises(ValueError, match="needs >= 96 samples"):
        encoder(torch.randn(2, 50))


def test_forward_views_matches_per_view_calls():
    encoder = _tiny_encoder()
    xs = [torch.randn(4, 3000) for _ in range(3)]
    names = ["F3-M2", "Fpz-Cz", "C3-M2+O1-M2"]
    batched = encoder.forward_views(xs, names)
    looped = torch.stack([encoder(x, n) for x, n in zip(xs, names)], dim=1)
    assert batched.shape == (4, 3, 8)
    torch.testing.assert_close(batched, looped, rtol=1e-4, atol=1e-5)


def test_paper_sized_encoder_layout():
    encoder = build_encoder("eeg", "conv")
    convs = [m for m in encoder.modules() if isinstance(m, torch.nn.Conv1d)]
    assert [c.kernel_size[0] for c in convs] == [3, 2, 2, 2, 2, 2, 1]
    assert [c.out_channels for c in convs] == [256] * 5 + [64, 64]
    assert encoder.num_features == 64 and encoder.channel_vocab[0] == "F3-M2"


def test_adapter_subject_wise_split_and_items(tmp_path):
    cache = fake_cache(tmp_path / "cache")
    adapter = build_adapter("eeg_windows", {"cache": str(cache), "test_fraction": 0.5, "channels": ["O1-M2", "F3-M2"]})
    assert adapter.modality == "eeg" and adapter.class_names == ["W", "N1", "N2", "N3", "REM"]
    train, test = adapter.split("train"), adapter.split("test")
    assert len(train) == len(test) == 12
    assert set(train.subjects).isdisjoint(set(test.subjects))
    item = test[7]
    assert item["x"].shape == (2, 3000) and item["x"].dtype == torch.float32
    assert item["label"] == 1 and item["window"] == 1 and item["subject"] in adapter.split_subjects["test"]
    assert float(item["x"][0, 0]) == float(item["subject"][1:])  # data of the item's own subject
    fixed = build_adapter("eeg_windows", {"cache": str(cache), "test_subjects": ["S3"]})
    assert fixed.split_subjects == {"train": ["S0", "S1", "S2"], "test": ["S3"]}
    with pytest.raises(ValueError, match=r"data.options.channels: \['Fpz-Cz'\] not in cache"):
        build_adapter("eeg_windows", {"cache": str(cache), "channels": ["Fpz-Cz"]})
    with pytest.raises(ValueError, match="not a prepared EEG cache"):
        build_adapter("eeg_windows", {"cache": str(tmp_path / "nothing")})
    with pytest.raises(ValueError, match="data.options.test_fraction"):
        build_adapter("eeg_windows", {"cache": str(cache), "test_fraction": 1.5})


def test_channel_views_policy(tmp_path):
    adapter = build_adapter("eeg_windows", {"cache": str(fake_cache(tmp_path / "cache")), "test_fraction": 0})
    raw = torch.utils.data.default_collate([adapter.split("train")[i] for i in range(5)])
    policy = build_view_policy("channels", 4, {}, adapter)
    views = policy.train_views(raw, torch.Generator().manual_seed(0))
    assert views.view_names == CHANNELS and views.k == 4 and views.views[2].shape == (5, 3000)
    torch.testing.assert_close(views.views[2], raw["x"][:, 2])
    assert views.labels.tolist() == [0, 1, 2, 3, 4] and views.meta["subject"][0] == "S0"

    subset = build_view_policy("channels", 2, {}, adapter).train_views(raw, torch.Generator().manual_seed(1))
    assert subset.k == 2 and set(subset.view_names) <= set(CHANNELS)

    split = build_view_policy("channels", 2, {"channel_split": "average", "crop_seconds": 10}, adapter)
    views = split.train_views(raw, torch.Generator().manual_seed(0))
    groups = [name.split("+") for name in views.view_names]
    assert sorted(sum(groups, [])) == sorted(CHANNELS) and all(len(g) == 2 for g in groups)
    assert views.views[0].shape == (5, 1000)
    members = [CHANNELS.index(c) for c in groups[0]]
    mean = raw["x"][:, members].mean(dim=1)
    crop = views.views[0][0]  # the crop is a contiguous piece of the group average
    starts = [s for s in range(2001) if torch.allclose(mean[0, s : s + 1000], crop)]
    assert len(starts) == 1

    evaluation = split.eval_views(raw)
    assert evaluation.view_names == CHANNELS and evaluation.views[0].shape == (5, 3000)
    with pytest.raises(ValueError, match="views.k = 5 but only 4 channels"):
        build_view_policy("channels", 5, {}, adapter)
    with pytest.raises(ValueError, match="views.options.channels"):
        build_view_policy("channels", 2, {"channels": ["Fpz-Cz", "F3-M2"]}, adapter)


def test_agnostic_mode_ignores_channel_names_and_has_no_embedding():
    encoder = _tiny_encoder(channel_mode="agnostic")
    assert encoder.channel_embedding is None
    assert not any("channel_embedding" in name for name, _ in encoder.named_parameters())
    x = torch.randn(3, 3000)
    torch.testing.assert_close(encoder(x, "F3-M2"), encoder(x, "Fpz-Cz"))
    torch.testing.assert_close(encoder.forward_views([x, x], ["F3-M2", "O1-M2"])[:, 1], encoder(x, None))
    with pytest.raises(ValueError, match="unknown_rate only applies"):
        _tiny_encoder(channel_mode="agnostic", unknown_rate=0.1)


def test_unknown_row_is_trained_with_unknown_rate():
    """With unknown_rate = 0 a training step never moves the "unknown" row (the cross-dataset bug);
    with unknown_rate > 0 it does, and evaluation (eval mode) is deterministic."""
    moved = {}
    for rate in (0.0, 0.5):
        encoder = _tiny_encoder(unknown_rate=rate).train()
        before = encoder.channel_embedding.weight.detach().clone()
        optimizer = torch.optim.SGD(encoder.parameters(), lr=0.1)
        torch.manual_seed(1)
        for _ in range(5):
            xs = [torch.randn(4, 3000) for _ in range(4)]
            encoder.forward_views(xs, CHANNELS).pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
        moved[rate] = (encoder.channel_embedding.weight.detach() - before).abs().sum(dim=1)
    used = [encoder.channel_ids(c)[0] for c in CHANNELS]
    assert moved[0.0][0] == 0 and (moved[0.0][used] > 0).all()
    assert moved[0.5][0] > 0
    encoder.eval()
    x = torch.randn(2, 3000)
    torch.testing.assert_close(encoder(x, "F3-M2"), encoder(x, "F3-M2"))
    with pytest.raises(ValueError, match="unknown_rate: expected a probability"):
        _tiny_encoder(unknown_rate=1.5)


def test_adapter_val_split_is_subject_wise_and_reproducible(tmp_path):
    cache = fake_cache(tmp_path / "cache", subjects=8)
    options = {"cache": str(cache), "test_fraction": 0.25, "val_fraction": 0.25, "split_seed": 3}
    adapter = build_adapter("eeg_windows", options)
    assert adapter.splits == ("train", "val", "test")
    subjects = adapter.split_subjects
    assert len(subjects["val"]) == 2 and len(subjects["test"]) == 2 and len(subjects["train"]) == 4
    assert set(subjects["val"]).isdisjoint(subjects["test"]) and set(subjects["val"]).isdisjoint(subjects["train"])
    assert set(adapter.split("val").subjects) == set(subjects["val"])  # items only from val subjects
    no_val = build_adapter("eeg_windows", {**options, "val_fraction": 0.0})
    assert no_val.split_subjects["test"] == subjects["test"]  # adding val never moves test subjects
    assert build_adapter("eeg_windows", options).split_subjects == subjects
    explicit = build_adapter(
        "eeg_windows", {"cache": str(cache), "test_subjects": ["S7"], "val_subjects": ["S0", "S1"]}
    )
    assert explicit.split_subjects == {"train": ["S2", "S3", "S4", "S5", "S6"], "test": ["S7"], "val": ["S0", "S1"]}
    with pytest.raises(ValueError, match="both in val_subjects and test_subjects"):
        build_adapter("eeg_windows", {"cache": str(cache), "test_subjects": ["S7"], "val_subjects": ["S7"]})
    with pytest.raises(ValueError, match=r"data.options.val_subjects: \['S9'\] not in the cache"):
        build_adapter("eeg_windows", {"cache": str(cache), "val_subjects": ["S9"]})


def test_stacked_channel_split_views_shapes_groups_and_seed(tmp_path):
    adapter = build_adapter("eeg_windows", {"cache": str(fake_cache(tmp_path / "cache")), "test_fraction": 0})
    raw = torch.utils.data.default_collate([adapter.split("train")[i] for i in range(5)])
    policy = build_view_policy("channels", 2, {"channel_split": "stacked"}, adapter)
    assert policy.group_size == 2
    views = policy.train_views(raw, torch.Generator().manual_seed(0))
    stacked = torch.stack(views.views, dim=1)
    assert stacked.shape == (5, 2, 2, 3000)  # (n, k, C / k, T)
    groups = [name.split("+") for name in views.view_names]
    assert sorted(sum(groups, [])) == sorted(CHANNELS) and all(len(g) == 2 for g in groups)
    for view, members in zip(views.views, groups):  # each view holds exactly its named channels, in channel order
        torch.testing.assert_close(view, raw["x"][:, [CHANNELS.index(c) for c in members]])
        assert [CHANNELS.index(c) for c in members] == sorted(CHANNELS.index(c) for c in members)
    again = policy.train_views(raw, torch.Generator().manual_seed(0))
    assert again.view_names == views.view_names and all(torch.equal(a, b) for a, b in zip(again.views, views.views))
    partitions = {tuple(policy.train_views(raw, torch.Generator().manual_seed(s)).view_names) for s in range(12)}
    assert len(partitions) > 1  # the partition is random across seeds (3 possible pairings of 4 channels)

    cropped = build_view_policy("channels", 2, {"channel_split": "stacked", "crop_seconds": 10}, adapter)
    view = cropped.train_views(raw, torch.Generator().manual_seed(3))
    members = [CHANNELS.index(c) for c in view.view_names[0].split("+")]
    assert view.views[0].shape == (5, 2, 1000)
    start = [s for s in range(2001) if torch.equal(raw["x"][0, members[0], s : s + 1000], view.views[0][0, 0])]
    assert len(start) == 1  # both channels of a view share one crop
    assert torch.equal(raw["x"][0, members[1], start[0] : start[0] + 1000], view.views[0][0, 1])

    evaluation = policy.eval_views(raw)  # fixed contiguous groups
    assert evaluation.view_names == ["F3-M2+C3-M2", "O1-M2+O2-M1"] and evaluation.views[1].shape == (5, 2, 3000)
    torch.testing.assert_close(evaluation.views[1], raw["x"][:, 2:4])
    with pytest.raises(ValueError, match="views.k = 3 does not divide the 4 channels"):
        build_view_policy("channels", 3, {"channel_split": "stacked"}, adapter)


def test_encoder_with_stacked_input_channels():
    encoder = _tiny_encoder(in_channels=2)
    xs = [torch.randn(4, 2, 3000) for _ in range(2)]
    names = ["F3-M2+C3-M2", "O1-M2+O2-M1"]
    batched = encoder.forward_views(xs, names)
    looped = torch.stack([encoder(x, n) for x, n in zip(xs, names)], dim=1)
    assert batched.shape == (4, 2, 8)
    torch.testing.assert_close(batched, looped, rtol=1e-4, atol=1e-5)
    assert encoder.time_bins(xs[0], names[0], 4).shape == (4, 8, 4)
    swapped = encoder(xs[0].flip(1), names[0])  # the input channels are not interchangeable
    assert not torch.allclose(swapped, encoder(xs[0], names[0]))
    with pytest.raises(ValueError, match="in_channels = 2 expects \\(n, 2, T\\)"):
        encoder(torch.randn(4, 3000))
    assert build_encoder("eeg", "conv").blocks[0][0].weight.shape == (256, 1, 3)  # default: the papers' network


def test_stacked_run_trains_and_is_staged_on_its_channel_groups(tmp_path):
    from multiview_app.cli import main
    from multiview_app.eval.sleep_staging import run_sleep_staging

    config = Path(__file__).resolve().parents[1] / "configs" / "eeg_synthetic_m3g_split_stacked.yaml"
    cache = fake_cache(tmp_path / "cache", subjects=5, windows=10)
    assert (
        main(
            [
                "train",
                "--config",
                str(config),
                "--name",
                "stacked",
                f"data.options.cache={cache}",
                f"data.options.channels={json.dumps(CHANNELS)}",
                "model.encoders.eeg.in_channels=2",
                "data.options.test_fraction=0.2",
                f"output.runs_dir={tmp_path / 'runs'}",
                "train.max_steps=2",
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
    for classifier in ("logreg", "paper"):
        result = run_sleep_staging(
            tmp_path / "runs" / "stacked", shots=(2,), seeds=1, progress=False, classifier=classifier
        )
        assert result["results"]["trained"]["2"]["runs"] and result["channels"] == CHANNELS
        # logreg pairs whole windows; the paper classifier pairs per channel, which 2 groups of 2 cannot
        assert ("bandpower+trained" in result["results"]) == (classifier == "logreg")
        assert any("bandpower+trained skipped" in note for note in result["notes"]) == (classifier == "paper")


def test_sleep_staging_with_fold_workers_gives_the_same_result(tmp_path):
    """``workers=2`` (the demo's cross-dataset evaluation) fits the folds in two processes: the same JSON."""
    from multiview_app.cli import main
    from multiview_app.eval.sleep_staging import run_sleep_staging

    config = Path(__file__).resolve().parents[1] / "configs" / "eeg_synthetic_m3g.yaml"
    cache = fake_cache(tmp_path / "cache", subjects=6, windows=20)
    assert (
        main(
            [
                "train",
                "--config",
                str(config),
                "--name",
                "tiny",
                f"data.options.cache={cache}",
                f"data.options.channels={json.dumps(CHANNELS)}",
                f"output.runs_dir={tmp_path / 'runs'}",
                "views.k=4",
                "train.max_steps=2",
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
    kwargs = {"shots": (2, 4), "seeds": 2, "folds": 2, "progress": False}
    one = run_sleep_staging(tmp_path / "runs" / "tiny", **kwargs)
    two = run_sleep_staging(tmp_path / "runs" / "tiny", workers=2, **kwargs)
    assert len(one["folds"]) == 2 and set(one["results"]) == {
        "trained",
        "random_init",
        "bandpower",
        "handcrafted",
        "bandpower+trained",
    }
    assert json.dumps(one, sort_keys=True) == json.dumps(two, sort_keys=True)


def test_signal_augmentations_each_do_what_they_say():
    from multiview_app.data.eeg import augment

    gen = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    x = torch.randn(6, 400, dtype=torch.float64)
    scaled = augment.scale_amplitude(x, 0.5, 2.0, gen())
    gains = scaled[:, 0] / x[:, 0]
    torch.testing.assert_close(scaled, x * gains[:, None])  # one gain per item
    assert bool(((gains >= 0.5) & (gains <= 2.0)).all()) and gains.std() > 0

    shifted = augment.shift_time(x, 40, gen())
    for i in range(6):  # every item is a circular shift of itself by at most 40 samples
        found = [s for s in range(-40, 41) if torch.equal(torch.roll(x[i], s), shifted[i])]
        assert len(found) == 1
    stacked = torch.stack([x, 2 * x], dim=1)  # (n, 2, T): the channels of an item share the shift
    both = augment.shift_time(stacked, 40, gen())
    torch.testing.assert_close(both[:, 1], 2 * both[:, 0])

    noisy = augment.add_noise(torch.zeros(2000, 50), 0.3, gen())
    assert abs(float(noisy.std()) - 0.3) < 0.01 and abs(float(noisy.mean())) < 0.01

    sfreq, t = 100.0, torch.arange(3000, dtype=torch.float64) / 100.0
    tones = torch.stack([torch.sin(2 * torch.pi * f * t) for f in (2.0, 10.0, 20.0)]).sum(0).repeat(200, 1)
    stopped = augment.band_stop(tones, sfreq, 4.0, 1.0, 0.5, 30.0, gen())
    spectrum = torch.fft.rfft(stopped, dim=-1).abs()
    freqs = torch.fft.rfftfreq(3000, 1 / sfreq)
    power = {f: spectrum[:, int((freqs - f).abs().argmin())] for f in (2.0, 10.0, 20.0)}
    removed = sum((p < 1e-3 * 1500).float() for p in power.values())  # a kept tone has |X| = T / 2
    assert (
        bool((removed <= 1).all()) and float((removed == 1).float().mean()) > 0.25
    )  # a 4-Hz stop band takes <= 1 tone
    kept = augment.band_stop(tones, sfreq, 4.0, 0.0, 0.5, 30.0, gen())
    torch.testing.assert_close(kept, tones)


def test_channel_views_apply_configured_augmentations_reproducibly(tmp_path):
    adapter = build_adapter("eeg_windows", {"cache": str(fake_cache(tmp_path / "cache")), "test_fraction": 0})
    raw = torch.utils.data.default_collate([adapter.split("train")[i] for i in range(5)])
    options = {
        "crop_seconds": 20,
        "amplitude_scale": [0.8, 1.25],
        "time_shift_seconds": 1.0,
        "noise_std": 0.1,
        "band_stop_hz": 2.0,
        "band_stop_p": 0.5,
    }
    policy = build_view_policy("channels", 4, options, adapter)
    a = policy.train_views(raw, torch.Generator().manual_seed(0))
    b = policy.train_views(raw, torch.Generator().manual_seed(0))
    c = policy.train_views(raw, torch.Generator().manual_seed(1))
    assert a.views[0].shape == (5, 2000)
    assert all(torch.equal(u, v) for u, v in zip(a.views, b.views))
    assert not torch.equal(a.views[0], c.views[0])
    plain = build_view_policy("channels", 4, {"crop_seconds": 20}, adapter).train_views(
        raw, torch.Generator().manual_seed(0)
    )
    assert not torch.allclose(a.views[0], plain.views[0])
    evaluation = policy.eval_views(raw)  # eval views are never augmented
    torch.testing.assert_close(evaluation.views[1], raw["x"][:, 1])
    with pytest.raises(ValueError, match="amplitude_scale"):
        build_view_policy("channels", 4, {"amplitude_scale": [2.0, 1.0]}, adapter)
    with pytest.raises(ValueError, match="Nyquist"):
        build_view_policy("channels", 4, {"band_stop_hz": 2.0, "band_stop_range": [1.0, 80.0]}, adapter)
