"""Small reliability contracts (issue 16 §7): fast ``--help`` / ``--version`` without torch, help texts
with defaults, files written with the user's umask, the M3G ``float64_retry`` / ``fallback`` stats."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from multiview_app.cli import main

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_help_and_version_do_not_import_torch(flag: str) -> None:
    code = (
        "import sys\nfrom multiview_app.cli import main\n"
        f"try:\n    main([{flag!r}])\nexcept SystemExit as exit:\n    assert exit.code == 0, exit.code\n"
        "heavy = [m for m in ('torch', 'accelerate', 'numpy', 'sklearn', 'pydantic') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr
    if flag == "--version":
        assert proc.stdout.startswith("mvapp 0.")
    else:
        assert all(group in proc.stdout for group in ("train", "eval", "config", "data"))


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["data", "synth-psg", "--help"], ["--nights NIGHTS       nights per subject (default: 1)", "(default: 9.0)"]),
        (["data", "prepare", "--help"], ["(default: 100.0)", "default: float32"]),
        (["eval", "linear-probe", "--help"], ["(default: cpu)", "(default: 1.0)"]),
    ],
)
def test_help_shows_defaults(argv: list[str], expected: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(argv)
    out = " ".join(capsys.readouterr().out.split())
    for text in expected:
        assert " ".join(text.split()) in out


def test_atomic_writes_follow_the_umask(tmp_path: Path) -> None:
    from multiview_app.fileio import atomic_write_bytes, atomic_write_json
    from multiview_app.train.run_io import save_weights

    old = os.umask(0o022)
    try:
        files = [
            atomic_write_json(tmp_path / "a.json", {"x": 1}),
            atomic_write_bytes(tmp_path / "b.bin", lambda h: h.write(b"\0")),
            save_weights(torch.nn.Linear(2, 2), tmp_path / "w.safetensors"),
        ]
        assert [stat.S_IMODE(f.stat().st_mode) for f in files] == [0o644] * 3
        os.umask(0o027)
        assert stat.S_IMODE(atomic_write_json(tmp_path / "c.json", {}).stat().st_mode) == 0o640
    finally:
        os.umask(old)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.bin", "c.json", "w.safetensors"]  # no temp left


def _near_antipodal(dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(2)
    z = torch.randn(4, 1, 8, generator=g, dtype=torch.float64) + 3.0 * torch.randn(
        4, 3, 8, generator=g, dtype=torch.float64
    )
    return torch.nn.functional.normalize(z, dim=-1).to(dtype)


def test_float64_retry_counts_only_a_real_float64_retry() -> None:
    """``float64_retry`` = a float32 solve was re-run in float64; ``fallback`` = the dense path ran.
    At epsilon 2/3000 the log-kernel spans ~e^6000: even float64 underflows, so both dtypes end dense,
    but only the float32 input went through the float64 retry."""
    from multiview_app.losses import build_loss

    loss = build_loss("m3g", epsilon=2.0 / 3000.0, max_iter=50)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        loss(_near_antipodal(torch.float64))
        stats64 = dict(loss.last_stats)
        loss(_near_antipodal(torch.float32))
        stats32 = dict(loss.last_stats)
    assert (stats64["float64_retry"], stats64["fallback"]) == (0.0, 1.0)
    assert (stats32["float64_retry"], stats32["fallback"]) == (1.0, 1.0)
    ordinary = build_loss("m3g")
    ordinary(_near_antipodal(torch.float32))
    assert (ordinary.last_stats["float64_retry"], ordinary.last_stats["fallback"]) == (0.0, 0.0)


# ----------------------------------------------------------------------------- paths, names, overrides (§3)


def test_relative_paths_are_stored_absolute_and_eval_works_from_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from _train_helpers import write_tiny_yaml
    from PIL import Image

    for c in ("a", "b"):
        (tmp_path / "work" / "imgs" / c).mkdir(parents=True)
        for i in range(20):
            Image.new("RGB", (8, 8), (i * 10, 100 if c == "a" else 0, 0)).save(
                tmp_path / "work" / "imgs" / c / f"{i}.png"
            )
    config = write_tiny_yaml(
        tmp_path / "work" / "cfg.yaml",
        Path("runs"),
        data={"adapter": "image_folder", "options": {"root": "imgs", "load_size": 16, "test_fraction": 0.5}},
        train={"max_steps": 1, "batch_size": 8},
    )
    monkeypatch.chdir(tmp_path / "work")
    # dotted overrides before, between and after options
    assert (
        main(["train", "train.log_every=1", "--config", "cfg.yaml", "optim.lr=0.002", "--name", "rel", "train.seed=3"])
        == 0
    )
    run = tmp_path / "work" / "runs" / "rel"
    saved = yaml_load(run / "config.yaml")
    assert saved["data"]["options"]["root"] == str(tmp_path / "work" / "imgs")
    assert saved["output"]["runs_dir"] == str(tmp_path / "work" / "runs")
    assert (saved["optim"]["lr"], saved["train"]["seed"], saved["train"]["log_every"]) == (0.002, 3, 1)
    monkeypatch.chdir(tmp_path)  # elsewhere: the run still finds its data
    capsys.readouterr()
    assert main(["eval", "linear-probe", "--run", "work/runs/rel", "--knn-k", "3"]) == 0
    assert (run / "eval" / "linear_probe.json").is_file()
    assert config.is_file()


def yaml_load(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text())


# ----------------------------------------------------------------------------- prepare never leaves a cache that reads as complete (§4)


def test_interrupted_prepare_reads_as_partial_and_is_finished_by_rerunning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import numpy as np
    from _train_helpers import write_sleep_edf_nights

    from multiview_app.data.eeg import cache as cache_mod
    from multiview_app.data.eeg.preprocess import PrepareOptions

    raw = write_sleep_edf_nights(tmp_path / "raw", 3, 0.2)
    options = PrepareOptions(channels=["Fpz-Cz", "Pz-Oz"])
    out = tmp_path / "cache"

    real_make_windows = cache_mod.make_windows
    calls = {"n": 0}

    def dies_on_the_second(recording, opts):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt  # the user pressed Ctrl-C during the second recording
        return real_make_windows(recording, opts)

    monkeypatch.setattr(cache_mod, "make_windows", dies_on_the_second)
    with pytest.raises(KeyboardInterrupt):
        cache_mod.prepare("sleep-edf", raw, out, options, progress=False)
    with pytest.raises(ValueError, match=r"partial cache \(1 recordings.*mvapp data prepare sleep-edf"):
        cache_mod.info(out)
    monkeypatch.setattr(cache_mod, "make_windows", real_make_windows)
    summary = cache_mod.prepare("sleep-edf", raw, out, options, progress=False)
    assert len(summary["skipped_existing"]) == 1 and len(summary["prepared"]) == 2
    assert cache_mod.info(out)["recordings"] == 3
    # a window file that went missing / was truncated is detected and redone
    first = cache_mod.load_manifest(out)["recordings"][0]
    (out / first["file"]).write_bytes((out / first["file"]).read_bytes()[:200])
    summary = cache_mod.prepare("sleep-edf", raw, out, options, progress=False)
    assert summary["prepared"] == [first["recording"]] and len(summary["skipped_existing"]) == 2
    assert np.load(out / first["file"]).shape[0] == first["n_windows"]


def test_failed_first_recording_leaves_no_cache(tmp_path: Path) -> None:
    from multiview_app.data.eeg.cache import prepare
    from multiview_app.data.eeg.preprocess import PrepareOptions

    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "SC4001E0-PSG.edf").write_bytes(b"0" * 300)
    with pytest.raises(ValueError, match="SC4001E0-PSG.edf"):
        prepare("sleep-edf", tmp_path / "raw", tmp_path / "cache", PrepareOptions(channels=["Fpz-Cz"]), progress=False)
    assert not (tmp_path / "cache").exists()


def test_kept_json_reuses_a_result_while_its_key_matches_and_reads_numpy_back_as_plain(tmp_path: Path) -> None:
    import numpy as np

    from multiview_app.fileio import kept_json

    calls: list[int] = []

    def compute() -> dict:
        calls.append(1)
        return {"score": np.float32(0.5), "values": np.arange(3)}

    path = tmp_path / "kept.json"
    fresh = kept_json(path, {"cache": "a"}, compute)
    assert fresh == {"score": 0.5, "values": [0, 1, 2]} and type(fresh["score"]) is float  # as read back
    assert kept_json(path, {"cache": "a"}, compute) == fresh and len(calls) == 1  # the same key: kept
    assert kept_json(path, {"cache": "b"}, compute) == fresh and len(calls) == 2  # another key: computed again
    assert kept_json(path, {"cache": "b"}, compute, field="other") == fresh and len(calls) == 3  # field missing
