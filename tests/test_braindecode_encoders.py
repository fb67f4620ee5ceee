"""braindecode's sleep stagers as EEG encoders (``eeg/chambon2018``, ``eeg/attnsleep``): the channel-as-view
interface of ``eeg/conv`` (one channel per view, ``(n, k, d)``), braindecode's own feature extractor
underneath, rate / window checks, the missing-extra message, and a tiny training run."""

from __future__ import annotations

import builtins
import json
import sys
from pathlib import Path

import pytest
import torch
from _eeg_helpers import CHANNELS, fake_cache

from multiview_app.cli import main
from multiview_app.models.braindecode_sleep import EXTRA_HINT, AttnSleepEncoder, Chambon2018Encoder
from multiview_app.models.encoders import available_encoders, build_encoder

ENCODERS = ["chambon2018", "attnsleep"]
CONFIG = Path(__file__).resolve().parents[1] / "configs" / "eeg_synthetic_m3g.yaml"
MISSING = "braindecode is not installed (pip install 'multiview_app[eeg-models]')"


def _encoder(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_encoder("eeg", name, out_dim=8)


def test_registered_without_braindecode_and_missing_extra_named(monkeypatch, tmp_path, capsys):
    assert {"eeg/chambon2018", "eeg/attnsleep", "eeg/conv"} <= set(available_encoders("eeg"))
    real_import = builtins.__import__

    def no_braindecode(name, *args, **kwargs):
        if name == "braindecode" or name.startswith("braindecode."):
            raise ModuleNotFoundError(f"No module named '{name}'")
        return real_import(name, *args, **kwargs)

    for module in [m for m in sys.modules if m == "braindecode" or m.startswith("braindecode.")]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.setattr(builtins, "__import__", no_braindecode)
    with pytest.raises(ImportError) as err:
        build_encoder("eeg", "chambon2018")
    message = str(err.value)
    assert "\n" not in message and message.startswith("encoder eeg/chambon2018 needs braindecode")
    assert message.endswith(": pip install 'multiview_app[eeg-models]'") and EXTRA_HINT in message
    # through the CLI: one line, before any training
    cache = fake_cache(tmp_path / "cache")
    assert main(_train_args(cache, tmp_path / "runs", "no_extra", "{name: attnsleep}")) == 2
    err_lines = capsys.readouterr().err.strip().splitlines()
    assert err_lines[-1].startswith("mvapp: error: encoder eeg/attnsleep needs braindecode")
    assert err_lines[-1].endswith(EXTRA_HINT) and not (tmp_path / "runs" / "no_extra" / "model.safetensors").exists()


@pytest.mark.parametrize("name", ENCODERS)
def test_views_shapes_shared_weights_and_permutation(name):
    pytest.importorskip("braindecode", reason=MISSING)
    encoder = _encoder(name).eval()
    views = [torch.randn(3, 3000, generator=torch.Generator().manual_seed(j)) for j in range(4)]
    names = ["F3-M2", "C3-M2", "O1-M2", "O2-M1"]
    with torch.no_grad():
        out = encoder.forward_views(views, names)
        assert out.shape == (3, 4, 8) and encoder.num_features == 8
        # one set of weights for every channel view: view j's row is the encoder on that channel alone,
        # whatever its name, so permuting the views permutes the outputs (as eeg/conv in agnostic mode)
        for j, x in enumerate(views):
            torch.testing.assert_close(out[:, j], encoder(x, "another-name"), rtol=1e-5, atol=1e-5)
        order = [2, 0, 3, 1]
        permuted = encoder.forward_views([views[j] for j in order], [names[j] for j in order])
        torch.testing.assert_close(permuted, out[:, order], rtol=1e-5, atol=1e-5)
        assert encoder(views[0][:, None, :]).shape == (3, 8)  # (n, 1, T) as well


@pytest.mark.parametrize("name", ENCODERS)
def test_full_window_is_braindecodes_feature_extractor_and_crops_are_pooled(name):
    pytest.importorskip("braindecode", reason=MISSING)
    encoder = _encoder(name).eval()
    x = torch.randn(2, 3000)
    with torch.no_grad():
        braindecode_features = encoder.net(x[:, None, :])  # built with return_feats: no classification layer
        assert not hasattr(encoder.net, "final_layer")
        assert braindecode_features.shape == (2, encoder.project.in_features)
        torch.testing.assert_close(encoder(x), encoder.project(braindecode_features))
        crop = encoder(x[:, :2000])  # a 20-s training crop: feature map stretched to a full window's
    assert crop.shape == (2, 8) and torch.isfinite(crop).all()
    with pytest.raises(ValueError, match=r"built for 30-s windows at 100 Hz \(3000 samples\), got 6000 samples"):
        encoder(torch.randn(2, 6000))
    with pytest.raises(ValueError, match="one channel per view"):
        encoder(torch.randn(2, 2, 3000))


@pytest.mark.parametrize("name", ENCODERS)
def test_gradients_reach_every_weight(name):
    pytest.importorskip("braindecode", reason=MISSING)
    encoder = _encoder(name).train()
    out = encoder.forward_views([torch.randn(4, 3000) for _ in range(3)], ["a", "b", "c"])
    out.square().mean().backward()
    # braindecode's AttnSleep attention convolves key and value only (convs[1], convs[2]; the query is used
    # as is, as in the authors' code): convs[0] never enters the graph
    unused = {f"net.feature_extractor.1.layers.{i}.self_attn.convs.0.{w}" for i in range(2) for w in ("weight", "bias")}
    missing = [
        n
        for n, p in encoder.named_parameters()
        if n not in unused and (p.grad is None or not torch.isfinite(p.grad).all())
    ]
    assert not missing, f"no (finite) gradient for {missing}"
    assert encoder.project.weight.grad.abs().sum() > 0
    first_name, first = next(iter(encoder.net.named_parameters()))  # the input convolution: the far end of the graph
    assert first_name.startswith("feature_extractor.0") and first.dim() >= 3
    assert first.grad.abs().sum() > 0


def test_rate_and_window_checked_against_the_data():
    pytest.importorskip("braindecode", reason=MISSING)
    fits = {"sfreq": 100.0, "window_samples": 3000, "source_cache": "c"}
    Chambon2018Encoder.check_input_contract({}, fits)
    AttnSleepEncoder.check_input_contract({"sfreq": 200.0}, {**fits, "sfreq": 200.0, "window_samples": 6000})
    Chambon2018Encoder.check_input_contract({}, {"sfreq": "unknown", "window_samples": "unknown"})  # nothing to check
    with pytest.raises(ValueError) as err:
        AttnSleepEncoder.check_input_contract({}, {**fits, "sfreq": 200.0, "window_samples": 6000})
    assert str(err.value) == (
        "encoder eeg/attnsleep is built for 30-s windows at 100 Hz (3000 samples) but c holds 30-s windows at "
        "200 Hz (6000 samples): set model.encoders.eeg.sfreq / window_seconds to the data's, or prepare the data "
        "with --sfreq 100"
    )
    with (
        pytest.warns(UserWarning, match="designed originally for"),
        pytest.raises(ValueError, match=r"eeg/attnsleep cannot be built for 20-s windows at 100 Hz.*d_model"),
    ):
        build_encoder("eeg", "attnsleep", window_seconds=20.0)  # braindecode's own check, named with the window


def _train_args(cache, runs, name: str, encoder: str) -> list[str]:
    return [
        "train",
        "--config",
        str(CONFIG),
        "--name",
        name,
        f"data.options.cache={cache}",
        f"data.options.channels={json.dumps(CHANNELS)}",
        "views.k=4",
        "data.options.test_fraction=0.25",
        f"output.runs_dir={runs}",
        "train.max_steps=2",
        "train.batch_size=4",
        f"model.encoders.eeg={encoder}",
        "model.projector.hidden_dim=16",
        "model.projector.out_dim=8",
        "train.checkpoint_every=0",
        "views.options.crop_seconds=20",
    ]


@pytest.mark.parametrize("name", ENCODERS)
def test_tiny_training_run(tmp_path, name):
    pytest.importorskip("braindecode", reason=MISSING)
    cache, runs = fake_cache(tmp_path / "cache"), tmp_path / "runs"
    assert main(_train_args(cache, runs, "tiny", f"{{name: {name}, out_dim: 8}}")) == 0
    run = runs / "tiny"
    assert (run / "model.safetensors").is_file() and (run / "init.safetensors").is_file()
    assert json.loads((run / "model.json").read_text())["encoders"]["eeg"]["name"] == name


def test_training_refuses_data_at_another_rate(tmp_path, capsys):
    pytest.importorskip("braindecode", reason=MISSING)
    cache = fake_cache(tmp_path / "cache")
    manifest = json.loads((cache / "manifest.json").read_text())
    (cache / "manifest.json").write_text(json.dumps({**manifest, "sfreq": 200.0}))  # 30 s at 200 Hz = 6000 samples
    assert main(_train_args(cache, tmp_path / "runs", "wrong_rate", "{name: chambon2018, out_dim: 8}")) != 0
    err = capsys.readouterr().err
    assert "encoder eeg/chambon2018 is built for 30-s windows at 100 Hz (3000 samples)" in err
    assert "30-s windows at 200 Hz (6000 samples)" in err and "--sfreq 100" in err


def test_native_chambon_equals_braindecode_chambon2018_and_needs_no_braindecode(monkeypatch):

    real_import = builtins.__import__

    def no_braindecode(name, *args, **kwargs):
        if name == "braindecode" or name.startswith("braindecode."):
            raise ModuleNotFoundError(f"No module named '{name}'")
        return real_import(name, *args, **kwargs)

    with monkeypatch.context() as blocked:
        blocked.setattr(builtins, "__import__", no_braindecode)
        torch.manual_seed(0)
        native = build_encoder("eeg", "chambon", out_dim=8)  # builds and runs without braindecode
        assert native(torch.randn(3, 3000)).shape == (3, 8)
    pytest.importorskip("braindecode", reason=MISSING)
    reference = _encoder("chambon2018")
    assert sum(p.numel() for p in native.parameters()) == sum(p.numel() for p in reference.parameters())
    convs = [m for m in reference.net.feature_extractor if isinstance(m, torch.nn.Conv2d)]
    with torch.no_grad():
        for mine, theirs in zip([m for m in native.net if isinstance(m, torch.nn.Conv1d)], convs, strict=True):
            mine.weight.copy_(theirs.weight.squeeze(2))
            mine.bias.copy_(theirs.bias)
        native.project.load_state_dict(reference.project.state_dict())
    for samples in (3000, 2000):  # a full window and a 20-s training crop
        x = torch.randn(4, samples)
        torch.testing.assert_close(native(x), reference(x), rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", ["chambon", "chambon2018"])
def test_the_chambon_encoders_pass_batch_norm_to_their_network(name):
    if name == "chambon2018":
        pytest.importorskip("braindecode", reason=MISSING)
    for batch_norm in (False, True):
        encoder = build_encoder("eeg", name, out_dim=4, batch_norm=batch_norm)
        norms = [m for m in encoder.net.modules() if isinstance(m, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d))]
        assert len(norms) == (2 if batch_norm else 0)
