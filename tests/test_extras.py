"""The core install runs the loss head; a missing optional package is one line naming its extra."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from multiview_app.extras import EXTRA_OF_MODULE, MissingExtraError, missing_extra_message, require

ROOT = Path(__file__).resolve().parents[1]
OPTIONAL = sorted(EXTRA_OF_MODULE)

# a meta-path finder that makes every optional package look uninstalled, then runs the snippet
_BLOCK = textwrap.dedent(f"""
    import importlib.abc, sys
    BLOCKED = set({OPTIONAL!r})
    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
    sys.meta_path.insert(0, Block())
""")


def _run_blocked(snippet: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _BLOCK + textwrap.dedent(snippet)], cwd=ROOT, text=True, capture_output=True, timeout=300
    )


def test_extras_in_pyproject_cover_every_mapped_extra() -> None:
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(EXTRA_OF_MODULE.values()) <= set(extras)
    core = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {d.split(">")[0].split("<")[0].split("=")[0].strip().lower() for d in core}
    assert names == {"torch", "numpy", "scipy", "safetensors", "accelerate", "pydantic", "pyyaml", "tqdm"}


def test_core_modules_and_every_loss_run_without_the_optional_packages() -> None:
    result = _run_blocked("""
        import torch
        import multiview_app.train, multiview_app.models, multiview_app.data, multiview_app.eval
        from multiview_app.losses import available_losses, build_loss
        z = torch.randn(8, 3, 16, requires_grad=True)
        for name in available_losses():
            build_loss(name)(z).backward()
        print("ran", len(available_losses()))
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ran ")


def test_cli_names_the_extra_in_one_line() -> None:
    result = _run_blocked("""
        from multiview_app.cli import main
        raise SystemExit(main(["tune", "--config", "configs/tune_digits_m3g.yaml", "--study-name", "x", "--trials", "1", "output.runs_dir=/tmp/mv_extras_runs"]))
    """)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "pip install 'multiview_app[" in lines[0]


def test_require_and_message() -> None:
    assert require("math").sqrt(4.0) == 2.0
    with pytest.raises(MissingExtraError, match=r"pip install 'multiview_app\[eeg\]'"):
        require("multiview_app_no_such_module", extra="eeg")
    assert missing_extra_message(ModuleNotFoundError("x", name="mne.io")) == (
        "the optional package 'mne' is not installed: pip install 'multiview_app[eeg]'"
    )
    assert missing_extra_message(ValueError("mne")) is None


def test_registry_skips_a_module_whose_optional_package_is_missing(tmp_path, monkeypatch) -> None:
    """A registry module that needs a missing optional package is skipped (the other entries still work);
    a lookup of a missing name says which extra brings the skipped module; any other import error propagates."""
    from multiview_app.registry import Registry

    (tmp_path / "mv_reg_fine.py").write_text("from mv_reg_host import REG\nREG.register('fine')(int)\n")
    (tmp_path / "mv_reg_optional.py").write_text("import optuna_not_here_either\n")
    (tmp_path / "mv_reg_broken.py").write_text("import mv_reg_no_such_internal_module\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(EXTRA_OF_MODULE, "optuna_not_here_either", "tune")
    registry = Registry("widget", modules=["mv_reg_fine", "mv_reg_optional"])
    (tmp_path / "mv_reg_host.py").write_text("")
    import mv_reg_host

    monkeypatch.setattr(mv_reg_host, "REG", registry, raising=False)
    assert registry.get("fine") is int
    assert registry.skipped == {"mv_reg_optional": ("optuna_not_here_either", "tune")}
    with pytest.raises(ValueError) as info:
        registry.get("tuned")
    assert str(info.value) == (
        "unknown widget 'tuned'; available: fine; not loaded: mv_reg_optional (optional package "
        "'optuna_not_here_either' missing: pip install 'multiview_app[tune]')"
    )
    with pytest.raises(ModuleNotFoundError, match="mv_reg_no_such_internal_module"):
        Registry("widget", modules=["mv_reg_broken"]).names()


def test_a_registry_entry_behind_a_missing_extra_is_named_in_one_line() -> None:
    """With the optional packages missing: an image config names [images], an evaluator names [eval]."""
    result = _run_blocked("""
        from multiview_app.cli import main
        code = main(["config", "show", "--config", "configs/digits_m3g.yaml"])
        code += main(["eval", "sleep-staging", "--run", "runs/none"])
    """)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2, result.stderr
    assert lines[0].startswith("mvapp: error: data.adapter: unknown data adapter 'digits'"), lines[0]
    assert "pip install 'multiview_app[images]'" in lines[0]
    assert "invalid choice: 'sleep-staging'" in lines[1] and "pip install 'multiview_app[eval]'" in lines[1]
