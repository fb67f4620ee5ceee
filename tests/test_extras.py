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
    return subprocess.run([sys.executable, "-c", _BLOCK + textwrap.dedent(snippet)], cwd=ROOT, text=True,
                          capture_output=True, timeout=300)


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
        raise SystemExit(main(["tune", "--config", "configs/tune_digits_m3g.yaml", "--study-name", "x", "--trials", "1", "--runs-dir", "/tmp/mv_extras_runs"]))
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
        "the optional package 'mne' is not installed: pip install 'multiview_app[eeg]'")
    assert missing_extra_message(ValueError("mne")) is None
