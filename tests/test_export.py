"""``mvapp export``: same features as the evaluators, output folder contract, atomicity / resume,
bad input, parquet format, sharding and 2-process export (gloo; torchrun and accelerate launch)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch
from _launch_helpers import LAUNCHERS, launch
from _train_helpers import tiny_config

from multiview_app.cli import main
from multiview_app.data.adapters import build_adapter
from multiview_app.data.views import build_view_policy
from multiview_app.eval.features import extract_features
from multiview_app.export import ShardedRows, export_embeddings, load_embeddings
from multiview_app.export.writer import ShardWriter
from multiview_app.train.run_io import load_run
from multiview_app.train.trainer import train

ROOT = Path(__file__).resolve().parents[1]
SUBPROCESS_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 training steps of the tiny digits model, a checkpoint at step 2."""
    runs = tmp_path_factory.mktemp("runs")
    train(tiny_config(runs, "digits", train={"max_steps": 3, "checkpoint_every": 2}))
    return runs / "digits"


def _model_adapter_policy(run: Path, weights: str = "final"):
    cfg, model = load_run(run, weights)
    adapter = build_adapter(cfg.data.adapter, cfg.data.options)
    return model, adapter, build_view_policy(cfg.views.policy, cfg.views.k, cfg.views.options, adapter)


def _export(run: Path, out: Path, **kwargs) -> dict:
    kwargs.setdefault("progress", False)
    export_embeddings(run, out, **kwargs)
    return load_embeddings(out)


def _python_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


# ----------------------------------------------------------------------------- consistency


def test_export_equals_evaluator_features_with_metadata(digits_run: Path, tmp_path: Path) -> None:
    model, adapter, policy = _model_adapter_policy(digits_run)
    rows, table, manifest = _export(digits_run, tmp_path / "all", split="all", batch_size=300)
    parts = [extract_features(model, adapter, policy, split, 300, progress=False) for split in ("train", "test")]
    expected = np.concatenate([feats[:, 0] for feats, _, _ in parts])  # one eval view for images
    assert isinstance(rows, np.memmap) and rows.dtype == np.float32 and rows.shape == (1797, 16)
    np.testing.assert_array_equal(np.asarray(rows), expected)
    meta = table.to_pydict()
    n_train = len(adapter.split("train"))
    assert meta["split"] == ["train"] * n_train + ["test"] * (1797 - n_train)
    assert meta["index"][:3] == [0, 1, 2] and meta["index"][n_train] == 0
    assert meta["item_id"][n_train + 5] == "test/5" and len(set(meta["item_id"])) == 1797
    labels = np.concatenate([y for _, y, _ in parts])
    np.testing.assert_array_equal(meta["label"], labels)
    assert meta["label_name"][:4] == [str(y) for y in labels[:4]]
    assert meta["source"] == parts[0][2]["source"] + parts[1][2]["source"]
    assert set(meta["transform"]) == {"test"} and "view" not in meta and set(meta["modality"]) == {"image"}
    assert manifest["splits"] == {"train": n_train, "test": 1797 - n_train} and manifest["rows"] == 1797
    assert manifest["weights_file"] == "model.safetensors" and len(manifest["weights_sha256"]) == 64
    assert set(manifest["versions"]) >= {"python", "torch", "numpy", "pyarrow", "multiview_app"}
    assert not manifest["normalized"] and manifest["dim"] == 16 and manifest["shards"][0]["rows"] == 1797
    assert sorted(p.name for p in (tmp_path / "all").iterdir()) == [
        "embeddings.npy",
        "manifest.json",
        "metadata.parquet",
    ]


def test_projector_features_step_weights_and_normalize(digits_run: Path, tmp_path: Path) -> None:
    model, adapter, policy = _model_adapter_policy(digits_run, "step_2")
    final, _, _ = _model_adapter_policy(digits_run, "final")
    rows, table, manifest = _export(digits_run, tmp_path / "proj", split="test", features="projector", weights="step_2")
    raw = torch.utils.data.default_collate([adapter.split("test")[i] for i in range(len(adapter.split("test")))])
    with torch.no_grad():
        z = model.embed(policy.eval_views(raw), use_predictor=False)[:, 0].numpy()
        z_final = final.embed(policy.eval_views(raw), use_predictor=False)[:, 0].numpy()
    np.testing.assert_allclose(np.asarray(rows), z, rtol=1e-5, atol=1e-6)
    assert np.abs(z - z_final).max() > 1e-4  # the checkpoint's weights, not the final ones
    assert manifest["normalized"] and manifest["weights_file"] == "checkpoints/step_00000002/model.safetensors"
    assert table.column("split").to_pylist() == ["test"] * len(z)
    rows, _, manifest = _export(digits_run, tmp_path / "norm", split="test", normalize=True, weights="init")
    np.testing.assert_allclose(np.linalg.norm(np.asarray(rows), axis=1), 1.0, rtol=1e-5)
    assert manifest["normalized"] and manifest["weights"] == "init"


def test_parquet_format_reads_with_datasets(digits_run: Path, tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    npy_rows, npy_table, _ = _export(digits_run, tmp_path / "npy", split="test")
    rows, table, manifest = _export(digits_run, tmp_path / "pq", split="test", file_format="parquet")
    np.testing.assert_array_equal(rows, np.asarray(npy_rows))
    assert table.to_pydict() == npy_table.to_pydict() and manifest["metadata_file"] is None
    files = sorted(str(p) for p in (tmp_path / "pq").glob("*.parquet"))
    ds = datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=str(tmp_path / "hf"))
    assert ds.features["embedding"].feature.dtype == "float32" and len(ds) == len(rows)
    np.testing.assert_array_equal(np.asarray(ds[:3]["embedding"], dtype=np.float32), rows[:3])


def test_sharded_export_equals_single_shard(digits_run: Path, tmp_path: Path) -> None:
    single, single_table, _ = _export(digits_run, tmp_path / "one", split="all")
    rows, table, manifest = _export(digits_run, tmp_path / "many", split="all", max_shard_mb=0.03, batch_size=100)
    assert isinstance(rows, ShardedRows) and len(manifest["shards"]) == 4  # 115 kB / 30 kB
    names = sorted(p.name for p in (tmp_path / "many").iterdir())
    assert names[:4] == [f"embeddings-0000{i}-of-00004.npy" for i in range(4)] and "metadata.parquet" in names
    dense = np.asarray(single)
    np.testing.assert_allclose(np.asarray(rows), dense, rtol=1e-6, atol=1e-6)
    pick = np.array([0, 449, 450, 1796, 900, -1])
    np.testing.assert_allclose(rows[pick], dense[pick], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(rows[440:460, 3], dense[440:460, 3], rtol=1e-6, atol=1e-6)
    assert table.to_pydict() == single_table.to_pydict()


# ----------------------------------------------------------------------------- atomicity, resume


def test_failure_midway_leaves_no_manifest_and_rerun_resumes(digits_run: Path, tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "out"
    commits: list[str] = []
    original = ShardWriter.commit

    def commit_then_die(self: ShardWriter) -> None:
        if len(commits) == 2:
            raise KeyboardInterrupt  # a kill after two finished shards
        original(self)
        commits.append(self.embeddings.name)

    monkeypatch.setattr(ShardWriter, "commit", commit_then_die)
    with pytest.raises(KeyboardInterrupt):
        export_embeddings(digits_run, out, split="all", max_shard_mb=0.03, progress=False)
    left = sorted(p.name for p in out.iterdir())
    assert "manifest.json" not in left and not [n for n in left if n.endswith(".tmp")]
    with pytest.raises(FileNotFoundError, match="not a complete export"):
        load_embeddings(out)
    (out / ".embeddings-00003-of-00004.npy.tmp").write_bytes(b"partial")  # what a SIGKILL leaves behind

    monkeypatch.setattr(ShardWriter, "commit", lambda self: (original(self), commits.append(self.embeddings.name)))
    export_embeddings(digits_run, out, split="all", max_shard_mb=0.03, progress=False)
    assert commits == [
        "embeddings-00000-of-00004.npy",
        "embeddings-00001-of-00004.npy",
        "embeddings-00002-of-00004.npy",
        "embeddings-00003-of-00004.npy",
    ]  # 0, 1 not redone
    rows, table, manifest = load_embeddings(out)
    assert manifest["resumed"] and not [p for p in out.iterdir() if p.name.startswith(".")]
    clean, clean_table, _ = _export(digits_run, tmp_path / "clean", split="all")
    np.testing.assert_allclose(np.asarray(rows), np.asarray(clean), rtol=1e-6, atol=1e-6)
    assert table.to_pydict() == clean_table.to_pydict()


def test_existing_out_is_refused_unless_overwrite(digits_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    _export(digits_run, out, split="test")
    with pytest.raises(ValueError, match="complete export.*--overwrite"):
        export_embeddings(digits_run, out, split="test", progress=False)
    _, _, manifest = _export(digits_run, out, split="train", overwrite=True)
    assert manifest["split"] == "train"
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="notes.txt"):
        export_embeddings(digits_run, out, split="test", overwrite=True, progress=False)
    assert (out / "notes.txt").is_file() and (out / "manifest.json").is_file()  # nothing deleted
    other = tmp_path / "other"
    other.mkdir()
    (other / "data.csv").write_text("x")
    with pytest.raises(ValueError, match="not empty"):
        export_embeddings(digits_run, other, split="test", progress=False)


def test_disk_full_midway_removes_temporary_files(digits_run: Path, tmp_path: Path) -> None:
    """A real write error in a subprocess: the file-size limit (RLIMIT_FSIZE) is hit mid-shard."""
    out = tmp_path / "out"
    code = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (40000, 40000))\n"
        "from multiview_app.cli import main\n"
        f"sys.exit(main(['export', '--run', {str(digits_run)!r}, '--out', {str(out)!r}, '--split', 'all',"
        " '--batch-size', '100']))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_python_env(), timeout=SUBPROCESS_TIMEOUT_S
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("mvapp: error: ") and "embeddings.npy" in last and "Traceback" not in proc.stderr
    assert sorted(p.name for p in out.iterdir()) == [".export-plan.json"]  # no manifest, no temporary files


# ----------------------------------------------------------------------------- bad input (CLI)


def _cli_error(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mvapp: error: ") and len(err.splitlines()) == 1 and "Traceback" not in err
    return err


def test_bad_input_gives_one_clear_error(digits_run: Path, tmp_path: Path, capsys) -> None:
    out = str(tmp_path / "out")
    err = _cli_error(capsys, ["export", "--run", str(digits_run), "--out", out, "--split", "validation"])
    assert "'validation'" in err and "available: train, test, all" in err
    err = _cli_error(capsys, ["export", "--run", str(digits_run), "--out", str(digits_run / "checkpoints" / "x")])
    assert "checkpoints" in err
    err = _cli_error(capsys, ["export", "--run", str(digits_run), "--out", out, "--weights", "step_7"])
    assert "step_00000007" in err and "step_00000002" in err

    no_weights = tmp_path / "no_weights"
    shutil.copytree(digits_run, no_weights, ignore=shutil.ignore_patterns("checkpoints", "tb"))
    (no_weights / "model.safetensors").unlink()
    err = _cli_error(capsys, ["export", "--run", str(no_weights), "--out", out])
    assert "model.safetensors: missing" in err

    mismatch = tmp_path / "mismatch"
    shutil.copytree(digits_run, mismatch, ignore=shutil.ignore_patterns("checkpoints", "tb"))
    spec = json.loads((mismatch / "model.json").read_text())
    spec["encoders"]["image"]["width"] = 4
    (mismatch / "model.json").write_text(json.dumps(spec))
    err = _cli_error(capsys, ["export", "--run", str(mismatch), "--out", out])
    assert "do not match the model in model.json" in err and "shape" in err

    err = _cli_error(capsys, ["export", "--run", str(digits_run), "--out", out, "train.max_steps=3"])
    assert "data.* and views.* overrides only" in err
    assert not Path(out).exists()


def test_data_of_another_modality_is_refused(digits_run: Path, eeg_setup: dict, tmp_path: Path, capsys) -> None:
    err = _cli_error(
        capsys,
        [
            "export",
            "--run",
            str(digits_run),
            "--out",
            str(tmp_path / "out"),
            "data.adapter=eeg_windows",
            f"data.options.cache={eeg_setup['cache']}",
            "views.policy=channels",
        ],
    )
    assert "'eeg_windows' gives 'eeg' views" in err and "encoders for image only" in err


# ----------------------------------------------------------------------------- EEG + downstream script


@pytest.fixture(scope="module")
def eeg_setup(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """3 synthetic 1-h Sleep-EDF nights -> prepared cache -> 2 M3G steps of a tiny EEG encoder."""
    tmp = tmp_path_factory.mktemp("eeg")
    raw, cache, runs = tmp / "raw", tmp / "cache", tmp / "runs"
    assert (
        main(
            [
                "data",
                "synth-psg",
                "--subjects",
                "3",
                "--nights",
                "1",
                "--format",
                "sleep-edf",
                "--hours",
                "1",
                "--out",
                str(raw),
                "--seed",
                "3",
            ]
        )
        == 0
    )
    assert main(["data", "prepare", "sleep-edf", "--source", str(raw), "--out", str(cache)]) == 0
    assert (
        main(
            [
                "train",
                "--config",
                str(ROOT / "configs" / "eeg_sleepedf_m3g.yaml"),
                "--name",
                "eeg",
                f"data.options.cache={cache}",
                "data.options.test_fraction=0.34",
                f"output.runs_dir={runs}",
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
    return {"cache": cache, "run": runs / "eeg"}


def _downstream():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "downstream_from_export", ROOT / "scripts" / "downstream_from_export.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_eeg_per_view_rows_and_downstream_reproduces_sleep_staging(eeg_setup: dict, tmp_path: Path, capsys) -> None:
    from multiview_app.eval.sleep_staging import run_sleep_staging

    run = eeg_setup["run"]
    assert main(["export", "--run", str(run), "--out", str(tmp_path / "pv"), "--split", "all"]) == 0
    rows, table, manifest = load_embeddings(tmp_path / "pv")
    model, adapter, policy = _model_adapter_policy(run)
    feats, labels, meta = extract_features(model, adapter, policy, "test", progress=False)
    test = np.asarray(table.column("split").to_pylist()) == "test"
    assert manifest["view_names"] == ["Fpz-Cz", "Pz-Oz"] and manifest["rows_per_item"] == 2
    np.testing.assert_array_equal(np.asarray(rows)[test], feats.reshape(-1, feats.shape[-1]))
    tested = table.filter(pa.array(test))
    assert tested.column("channel").to_pylist()[:4] == ["Fpz-Cz", "Pz-Oz", "Fpz-Cz", "Pz-Oz"]
    assert tested.column("recording").to_pylist()[::2] == meta["recording"]
    assert tested.column("subject").to_pylist()[::2] == meta["subject"]
    np.testing.assert_array_equal(tested.column("onset").to_numpy()[::2], np.asarray(meta["window"]) * 30.0)
    np.testing.assert_array_equal(tested.column("label").to_numpy()[::2], labels)

    evaluator = run_sleep_staging(run, shots=(5, 20), seeds=2, baselines=False, progress=False)
    script = _downstream()
    for export_views in ("per-view", "concat"):
        folder = tmp_path / "pv" if export_views == "per-view" else tmp_path / "concat"
        if export_views == "concat":
            export_embeddings(run, folder, views="concat", progress=False)
        assert script.main([str(folder), "--shots", "5", "20", "--draws", "2", "--json", str(tmp_path / "r.json")]) == 0
        result = json.loads((tmp_path / "r.json").read_text())
        for s in ("5", "20"):
            for metric in ("accuracy", "kappa", "macro_f1"):
                assert result["results"][s][metric] == pytest.approx(
                    evaluator["results"]["trained"][s][metric], abs=1e-12
                )
    assert "s=20: accuracy" in capsys.readouterr().out


def test_downstream_classes_on_digits(digits_run: Path, tmp_path: Path, capsys) -> None:
    from multiview_app.eval.linear_probe import run_linear_probe

    export_embeddings(digits_run, tmp_path / "e", views="mean", progress=False)
    script = _downstream()
    assert script.main([str(tmp_path / "e"), "--json", str(tmp_path / "r.json")]) == 0
    result = json.loads((tmp_path / "r.json").read_text())
    probe = run_linear_probe(digits_run, progress=False)
    assert result["task"] == "classes"
    assert result["results"]["logreg_acc"] == pytest.approx(probe["results"]["trained"]["logreg_acc"], abs=1e-12)
    assert result["results"]["knn_acc"] == pytest.approx(probe["results"]["trained"]["knn_acc"], abs=1e-12)
    assert script.main([str(tmp_path / "missing")]) == 2
    assert "not a complete export" in capsys.readouterr().err


# ----------------------------------------------------------------------------- 2 processes


@pytest.mark.slow
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_two_process_export_equals_single_process(launcher: str, eeg_setup: dict, tmp_path: Path) -> None:
    """2 gloo processes (torchrun / ``accelerate launch``), 3 shards (uneven: 2 + 1) over an odd number of items."""
    run = eeg_setup["run"]
    single, single_table, _ = _export(run, tmp_path / "single", split="all", batch_size=16)
    item_bytes = 2 * single.shape[1] * 4
    shard_mb = (len(single) // 2 * item_bytes) / 3 / 2**20 * 1.01  # -> 3 shards
    proc = launch(
        launcher,
        [
            "export",
            "--run",
            str(run),
            "--out",
            str(tmp_path / "multi"),
            "--split",
            "all",
            "--batch-size",
            "7",
            "--max-shard-mb",
            f"{shard_mb:.6f}",
        ],
    )
    assert proc.returncode == 0, f"{launcher} failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
    assert proc.stdout.count("exported") == 1  # only the main process reports
    rows, table, manifest = load_embeddings(tmp_path / "multi")
    assert manifest["processes"] == 2 and len(manifest["shards"]) == 3
    np.testing.assert_allclose(np.asarray(rows), np.asarray(single), rtol=1e-5, atol=1e-6)
    assert table.to_pydict() == single_table.to_pydict()
    assert len(set(table.column("item_id").to_pylist())) == manifest["items"]  # no padding duplicates


def test_other_data_from_config_file_and_overrides(digits_run: Path, tmp_path: Path) -> None:
    data_yaml = tmp_path / "data.yaml"
    data_yaml.write_text("data:\n  options: {test_fraction: 0.25}\n")
    _, table, manifest = _export(
        digits_run,
        tmp_path / "a",
        split="test",
        config_file=data_yaml,
        overrides=["data.options.load_size=12", "views.options.image_size=12"],
    )
    assert manifest["data"]["options"] == {"load_size": 12, "test_fraction": 0.25}  # merged into the run's options
    assert manifest["view_policy"]["options"]["image_size"] == 12
    expected = len(build_adapter("digits", {"load_size": 12, "test_fraction": 0.25}).split("test"))
    assert manifest["splits"]["test"] == table.num_rows == expected and expected != 898
    (tmp_path / "bad.yaml").write_text("train: {max_steps: 3}\n")
    with pytest.raises(ValueError, match="bad.yaml: export reads only the data and views sections"):
        export_embeddings(digits_run, tmp_path / "b", config_file=tmp_path / "bad.yaml", progress=False)
    with pytest.raises(ValueError, match="data.options.load_sise: unknown"):
        export_embeddings(digits_run, tmp_path / "b", overrides=["data.options.load_sise=3"], progress=False)


def test_cli_choices_match_the_library() -> None:
    from multiview_app.eval.features import FEATURE_KINDS
    from multiview_app.export import options

    assert options.FEATURE_KINDS == FEATURE_KINDS
