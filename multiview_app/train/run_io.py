"""Run-folder I/O: atomic writes, model weights (safetensors, never pickle), ``load_run``.

Layout of ``runs/<name>/`` (docs/architecture.md): ``config.yaml``, ``metrics.jsonl``, ``tb/``,
``checkpoints/step_XXXXXXXX/``, ``init.safetensors``, ``model.safetensors``, ``model.json``,
``eval/<kind>.json``, ``plots/``, ``curves.png``.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

import torch
from safetensors.torch import load_file, save_file

from ..config import Config, ConfigError, config_from_dict, read_yaml
from ..fileio import atomic_write_json, atomic_write_text, default_file_mode, temp_sibling

__all__ = ["atomic_write_json", "atomic_write_text", "load_run", "load_run_config", "model_spec", "save_weights"]

WEIGHT_FILES = {"final": "model.safetensors", "init": "init.safetensors"}


def save_weights(module: torch.nn.Module, path: str | Path) -> Path:
    """Save ``module.state_dict()`` as safetensors, atomically (shared tensors are cloned)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous().clone() for k, v in module.state_dict().items()}
    tmp = temp_sibling(path)
    try:
        save_file(state, str(tmp))  # safetensors recreates the file with mode 0600
        os.chmod(tmp, default_file_mode())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def model_spec(cfg: Config) -> dict[str, Any]:
    """What ``build_model`` needs to rebuild the model (written to ``model.json``)."""
    return {
        "encoders": cfg.model.encoders,
        "projector": cfg.model.projector,
        "predictor": cfg.model.predictor,
    }


def build_model_from_spec(spec: dict[str, Any]) -> torch.nn.Module:
    """``models.build_model`` on a ``model.json`` dict."""
    from ..models import build_model

    return build_model(
        encoders=spec["encoders"], projector=spec.get("projector") or {}, predictor=spec.get("predictor")
    )


def load_run_config(run_dir: str | Path) -> Config:
    """The resolved ``config.yaml`` of a run (validated; registries are not re-checked)."""
    run_dir = Path(run_dir)
    path = run_dir / "config.yaml"
    if not path.is_file():
        raise ConfigError(f"{run_dir}: not a run folder (no config.yaml)")
    return config_from_dict(read_yaml(path), check=False)


def load_run(
    run_dir: str | Path, weights: Literal["final", "init"] = "final"
) -> tuple[Config, torch.nn.Module]:
    """Config and rebuilt model of a run with its ``final`` (model.safetensors) or ``init``
    (init.safetensors, random-init reference) weights, in eval mode on the CPU."""
    run_dir = Path(run_dir)
    if weights not in WEIGHT_FILES:
        raise ValueError(f"weights: expected one of {', '.join(WEIGHT_FILES)}, got {weights!r}")
    cfg = load_run_config(run_dir)
    spec_path = run_dir / "model.json"
    spec = json.loads(spec_path.read_text()) if spec_path.is_file() else model_spec(cfg)
    weight_path = run_dir / WEIGHT_FILES[weights]
    if not weight_path.is_file():
        hint = f" (training not finished? resume it with mvapp train --resume {run_dir})" if weights == "final" else ""
        raise FileNotFoundError(f"{weight_path}: missing{hint}")
    model = build_model_from_spec(spec)
    try:
        state = load_file(str(weight_path))
    except Exception as err:  # safetensors raises its own error types for truncated / foreign files
        raise ValueError(f"{weight_path}: unreadable weights file ({err}); rerun or resume the training") from None
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(
            f"{weight_path}: weights do not match the model in {spec_path.name}: "
            f"missing {list(missing)[:5]}, unexpected {list(unexpected)[:5]}"
        )
    model.eval()
    return cfg, model
