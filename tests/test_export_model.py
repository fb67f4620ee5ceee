"""``mvapp export-model`` / ``multiview_app.load_encoder``: safetensors + config + model card without the run
folder, timm image encoders loadable by timm alone, ONNX outputs equal to PyTorch's under onnxruntime,
and loading refuses weights that do not match the config, naming the tensor."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from _train_helpers import tiny_config
from safetensors.torch import load_file, save_file

from multiview_app.cli import main
from multiview_app.export.encoder import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    EncoderExportError,
    load_encoder,
    missing_onnx_packages,
)
from multiview_app.train.run_io import load_run
from multiview_app.train.trainer import train


@pytest.fixture(scope="module")
def cnn_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    runs = tmp_path_factory.mktemp("runs")
    train(tiny_config(runs, "cnn", train={"max_steps": 2}))
    return runs / "cnn"


@pytest.fixture(scope="module")
def cnn_encoder(cnn_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("encoders") / "cnn"
    args = ["export-model", "--run", str(cnn_run), "--out", str(out)]
    assert main(args + ([] if missing_onnx_packages() else ["--onnx"])) == 0
    return out


def _images(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, 3, 16, 16, generator=torch.Generator().manual_seed(seed))


def test_encoder_folder_loads_without_the_run_and_gives_the_runs_features(
    cnn_run: Path, cnn_encoder: Path, tmp_path: Path
) -> None:
    moved = shutil.copytree(cnn_encoder, tmp_path / "elsewhere")  # nothing points back to the run folder
    encoder = load_encoder(moved)
    _, model = load_run(cnn_run)
    x = _images(5)
    with torch.no_grad():
        torch.testing.assert_close(encoder(x), model.encoders["image"](x), rtol=0, atol=0)
    assert not encoder.training and encoder.input_contract is None
    config = json.loads((moved / CONFIG_FILE).read_text())
    assert config["modality"] == "image" and config["encoder"] == "small_cnn" and config["num_features"] == 16
    assert config["tensors"]["body.0.weight"] == {"shape": [8, 3, 3, 3], "dtype": "float32"}
    assert config["source"]["steps"] == 2 and config["source"]["loss"]["name"] == "infonce_pwe"
    assert config["input"]["image_size"] == 16 and "ImageNet mean" in config["input"]["preprocessing"]
    card = (moved / "README.md").read_text()
    for fact in ("infonce_pwe", "optimizer steps: 2", "adapter `digits`", "## Metrics", "load_encoder", "16 px"):
        assert fact in card, fact
    assert {p.suffix for p in moved.iterdir()} <= {".safetensors", ".json", ".md", ".onnx"}  # never a pickle
    assert "this folder holds the encoder alone, in `encoder.safetensors`" in card
    assert "EEG" not in card and "input_contract" not in card and "input as in the Input section above" in card


def test_every_exported_file_gets_the_umask_mode(cnn_run: Path, tmp_path: Path) -> None:
    """safetensors recreates its file 0600; the shared atomic write gives every file ``0o666 & ~umask``."""
    import os

    old = os.umask(0o022)
    try:
        assert main(["export-model", "--run", str(cnn_run), "--out", str(tmp_path / "enc")]) == 0
    finally:
        os.umask(old)
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "enc").iterdir()}
    assert modes and set(modes.values()) == {0o644}, modes


def test_model_card_lists_the_runs_evaluation_metrics(cnn_run: Path, tmp_path: Path) -> None:
    run = shutil.copytree(cnn_run, tmp_path / "run")
    (run / "eval").mkdir(exist_ok=True)
    (run / "eval" / "linear_probe.json").write_text(
        json.dumps({"evaluator": "linear-probe", "accuracy": 0.8125, "knn": {"top1_accuracy": 0.75}, "n": 100})
    )
    assert main(["export-model", "--run", str(run), "--out", str(tmp_path / "enc")]) == 0
    config = json.loads((tmp_path / "enc" / CONFIG_FILE).read_text())
    assert config["source"]["metrics"] == {"linear_probe": {"accuracy": 0.8125, "knn.top1_accuracy": 0.75}}
    assert "linear_probe: accuracy = 0.8125, knn.top1_accuracy = 0.75" in (tmp_path / "enc" / "README.md").read_text()


def test_model_card_lists_the_scores_of_a_linear_probe_that_ran(cnn_run: Path, tmp_path: Path) -> None:
    """The linear-probe evaluator's own result file (``results.trained.logreg_acc``, ...) reaches the card."""
    from multiview_app.eval.linear_probe import run_linear_probe

    run = shutil.copytree(cnn_run, tmp_path / "run")
    probe = run_linear_probe(run, max_train_items=64, progress=False)
    assert main(["export-model", "--run", str(run), "--out", str(tmp_path / "enc")]) == 0
    card = (tmp_path / "enc" / "README.md").read_text()
    listed = json.loads((tmp_path / "enc" / CONFIG_FILE).read_text())["source"]["metrics"]["linear_probe"]
    assert listed["results.trained.logreg_acc"] == pytest.approx(probe["results"]["trained"]["logreg_acc"])
    assert "- linear_probe: results.trained.logreg_acc = " in card and "- none" not in card


def test_other_weights_say_their_steps_and_carry_no_final_metrics(cnn_run: Path, tmp_path: Path) -> None:
    run = shutil.copytree(cnn_run, tmp_path / "run")
    (run / "eval").mkdir(exist_ok=True)
    (run / "eval" / "linear_probe.json").write_text(json.dumps({"accuracy": 0.5}))
    assert main(["export-model", "--run", str(run), "--out", str(tmp_path / "init"), "--weights", "init"]) == 0
    config = json.loads((tmp_path / "init" / CONFIG_FILE).read_text())
    assert (config["source"]["steps"], config["source"]["metrics"], config["source"]["weights_file"]) == (
        0,
        {},
        "init.safetensors",
    )
    assert "none for these (init) weights" in (tmp_path / "init" / "README.md").read_text()
    _, model = load_run(run, "init")
    with torch.no_grad():
        torch.testing.assert_close(
            load_encoder(tmp_path / "init")(_images(2)), model.encoders["image"](_images(2)), rtol=0, atol=0
        )


def test_loading_refuses_weights_that_do_not_match_the_config_naming_the_tensor(
    cnn_encoder: Path, tmp_path: Path
) -> None:
    broken = shutil.copytree(cnn_encoder, tmp_path / "shape")
    state = load_file(str(broken / WEIGHTS_FILE))
    state["body.3.weight"] = torch.zeros(5)  # the second convolution's kernel, of the wrong shape
    save_file(state, str(broken / WEIGHTS_FILE))
    with pytest.raises(
        EncoderExportError,
        match=r"tensor 'body.3.weight' has shape \[5\], config.json's tensor list says \[16, 8, 3, 3\]",
    ):
        load_encoder(broken)

    missing = shutil.copytree(cnn_encoder, tmp_path / "missing")
    state = load_file(str(missing / WEIGHTS_FILE))
    del state["body.0.weight"]
    save_file(state, str(missing / WEIGHTS_FILE))
    with pytest.raises(EncoderExportError, match=r"tensor 'body.0.weight' missing"):
        load_encoder(missing)

    other = shutil.copytree(cnn_encoder, tmp_path / "config")  # weights intact, the config describes another encoder
    config = json.loads((other / CONFIG_FILE).read_text())
    config["encoder_args"]["width"] = 4
    (other / CONFIG_FILE).write_text(json.dumps(config))
    with pytest.raises(
        EncoderExportError,
        match=r"tensor 'body.0.weight' has shape \[8, 3, 3, 3\], the image/small_cnn "
        r"encoder built from config.json says \[4, 3, 3, 3\]",
    ):
        load_encoder(other)

    with pytest.raises(EncoderExportError, match="not an encoder folder"):
        load_encoder(tmp_path)


def test_export_model_refuses_a_foreign_non_empty_folder(cnn_run: Path, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("keep me")
    assert main(["export-model", "--run", str(cnn_run), "--out", str(tmp_path)]) == 2
    assert main(["export-model", "--run", str(cnn_run), "--out", str(tmp_path), "--overwrite"]) == 2
    assert (tmp_path / "notes.txt").read_text() == "keep me"


def test_onnx_without_its_packages_is_one_clear_error_before_anything_is_written(
    cnn_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    import multiview_app.export.encoder as encoder_module

    monkeypatch.setattr(encoder_module, "missing_onnx_packages", lambda: ["onnxscript"])
    assert main(["export-model", "--run", str(cnn_run), "--out", str(tmp_path / "enc"), "--onnx"]) == 2
    assert "--onnx needs onnxscript: pip install 'multiview_app[onnx]'" in capsys.readouterr().err
    assert not (tmp_path / "enc").exists()


def test_onnx_graph_has_a_dynamic_batch_and_equals_pytorch(cnn_encoder: Path) -> None:
    if missing_onnx_packages():
        pytest.skip(f"{', '.join(missing_onnx_packages())} not installed (pip install 'multiview_app[onnx]')")
    import onnxruntime as ort

    encoder = load_encoder(cnn_encoder)
    config = json.loads((cnn_encoder / CONFIG_FILE).read_text())
    assert config["onnx"]["dynamic_axes"] == ["batch"] and config["onnx"]["checked_max_abs_diff"] < 1e-4
    session = ort.InferenceSession(str(cnn_encoder / "encoder.onnx"), providers=["CPUExecutionProvider"])
    for n in (1, 7):  # neither is the traced example's batch of 2
        x = _images(n, seed=n)
        with torch.no_grad():
            expected = encoder(x).numpy()
        got = session.run(None, {"x": x.numpy()})[0]
        assert got.shape == (n, 16)
        torch.testing.assert_close(torch.from_numpy(got), torch.from_numpy(expected), rtol=1e-4, atol=1e-5)


def test_timm_image_encoder_loads_in_timm_alone(tmp_path: Path) -> None:
    timm = pytest.importorskip("timm")
    if not timm.is_model("test_resnet"):
        pytest.skip(f"timm {timm.__version__} has no tiny test_resnet model")
    runs = tmp_path / "runs"
    train(
        tiny_config(
            runs,
            "timm",
            train={"max_steps": 1, "batch_size": 8},
            model={"encoders": {"image": {"name": "test_resnet"}}, "projector": {"hidden_dim": 16, "out_dim": 8}},
        )
    )
    assert main(["export-model", "--run", str(runs / "timm"), "--out", str(tmp_path / "enc")]) == 0
    config = json.loads((tmp_path / "enc" / CONFIG_FILE).read_text())
    assert config["weights_of"] == "timm" and config["timm"]["model_name"] == "test_resnet"
    model = timm.create_model("test_resnet", pretrained=False, num_classes=0)
    model.load_state_dict(load_file(str(tmp_path / "enc" / WEIGHTS_FILE)), strict=True)
    _, run_model = load_run(runs / "timm")
    x = _images(3)
    with torch.no_grad():
        expected = run_model.encoders["image"](x)
        torch.testing.assert_close(model.eval()(x), expected, rtol=0, atol=0)
        torch.testing.assert_close(load_encoder(tmp_path / "enc")(x), expected, rtol=0, atol=0)
    assert (
        "timm.create_model('test_resnet', pretrained=False, num_classes=0)"
        in (tmp_path / "enc" / "README.md").read_text()
    )
