"""Tiny digits configs shared by the trainer / CLI / linear-probe tests (small_cnn, 16 px, few steps,
no curves.png: rendering it took about a quarter of these tests' time; a test that checks it sets
``output={"curves": True}``), and the loader of the scripts/ modules under test."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from multiview_app.config import Config, apply_overrides, config_from_dict


def tiny_raw(runs_dir: Path, name: str = "tiny", **sections: dict[str, Any]) -> dict[str, Any]:
    """A nested config dict; ``sections`` (e.g. ``train={"max_steps": 3}``) update the defaults."""
    raw: dict[str, Any] = {
        "data": {"adapter": "digits", "options": {"load_size": 16, "test_fraction": 0.5}},
        "views": {
            "policy": "augment",
            "k": 2,
            "batch_mode": "growing",
            "options": {"stacks": "simclr", "image_size": 16},
        },
        "model": {
            "encoders": {"image": {"name": "small_cnn", "width": 8, "num_features": 16}},
            "projector": {"hidden_dim": 32, "out_dim": 16},
        },
        "loss": {"name": "infonce_pwe", "tau": 0.2},
        "optim": {"lr": 0.003, "warmup_steps": 2},
        "train": {"max_steps": 4, "batch_size": 32, "seed": 0, "deterministic": True, "log_every": 1},
        "eval": {"linear_probe": False, "batch_size": 512},
        "output": {"runs_dir": str(runs_dir), "name": name, "curves": False},
    }
    for section, values in sections.items():  # a new loss replaces the whole section (its params differ)
        raw[section] = dict(values) if section == "loss" else {**raw.get(section, {}), **values}
    return raw


def tiny_config(
    runs_dir: Path, name: str = "tiny", overrides: tuple[str, ...] = (), **sections: dict[str, Any]
) -> Config:
    """Validated :class:`Config` of :func:`tiny_raw` plus dotted ``overrides``."""
    return config_from_dict(apply_overrides(tiny_raw(runs_dir, name, **sections), list(overrides)))


def write_tiny_yaml(path: Path, runs_dir: Path, **sections: dict[str, Any]) -> Path:
    """Write :func:`tiny_raw` as a YAML config file (for CLI tests)."""
    raw = tiny_raw(runs_dir, **sections)
    raw["output"].pop("name")
    path.write_text(yaml.safe_dump(raw))
    return path


def write_sleep_edf_nights(out: Path, subjects: int, hours: float) -> Path:
    """``subjects`` synthetic Sleep-EDF nights (PSG + hypnogram, sleep within 5 minutes) in ``out``."""
    import numpy as np

    from multiview_app.data.eeg.synth import SubjectTraits, write_sleep_edf_night

    out.mkdir(parents=True, exist_ok=True)
    for subject in range(subjects):
        traits = SubjectTraits.sample(np.random.default_rng(subject))
        traits.latency_minutes = 5.0
        write_sleep_edf_night(out, subject, 0, hours, traits, np.random.default_rng(subject))
    return out


def crash_then_resume(cfg: Config, crash_after_step: int) -> Any:
    """Train ``cfg`` with a callback that raises after optimizer step ``crash_after_step``, then
    ``--resume latest`` it; returns the resumed run's ``TrainResult``."""
    import pytest

    from multiview_app.train.trainer import train

    class Crash(RuntimeError):
        pass

    def crash(step: int, record: object) -> None:
        if step == crash_after_step:
            raise Crash

    with pytest.raises(Crash):
        train(cfg, callbacks=[crash])
    return train(cfg, resume="latest")


def assert_same_weights(run_a: Path, run_b: Path) -> None:
    """The two runs' final ``model.safetensors`` are bit-identical."""
    import torch
    from safetensors.torch import load_file

    a, b = load_file(str(run_a / "model.safetensors")), load_file(str(run_b / "model.safetensors"))
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0, msg=key)


def load_script(relpath: str, register: bool = False) -> ModuleType:
    """Import ``scripts/<relpath>.py`` (not a package; e.g. ``"bench/bench_gpu"``) as a module named by its stem.

    A script run as ``python scripts/<relpath>.py`` finds its sibling modules (``transfer_dreams``) on its own
    folder; here every sibling it imports is loaded the same way first and registered under its name
    (``register``), so no ``sys.path`` edit is needed."""
    import ast
    import sys

    scripts = Path(__file__).resolve().parents[1] / "scripts"
    path = scripts / f"{relpath}.py"
    stem = path.stem
    for node in ast.walk(ast.parse(path.read_text())):
        sibling = node.module if isinstance(node, ast.ImportFrom) and node.level == 0 else None
        if sibling and sibling not in sys.modules and (path.parent / f"{sibling}.py").is_file():
            load_script(str((path.parent / sibling).relative_to(scripts)), register=True)
    spec = importlib.util.spec_from_file_location(stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    if register:  # before running it: dataclasses look their module up in sys.modules
        sys.modules[stem] = module
    spec.loader.exec_module(module)
    return module
