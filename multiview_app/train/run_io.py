"""Run-folder I/O: atomic writes, model weights (safetensors, never pickle), ``load_run``.

Layout of ``runs/<name>/`` (docs/architecture.md, "Contracts", "Trainer and run folder"): ``config.yaml``,
``metrics.jsonl``, ``tb/``, ``checkpoints/step_XXXXXXXX/`` (the last one holds the final state),
``init.safetensors``, ``model.safetensors`` (its header records its ``step``), ``model.json``,
``eval/<kind>.json``, ``plots/``, ``curves.png``; ``final_step<N>/`` keeps a finished model that a longer
resumed run replaced.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Literal

import torch
from safetensors.torch import load_file, save_file

from ..config import Config, ConfigError, config_from_dict, read_yaml
from ..fileio import atomic_write_json, atomic_write_text, atomic_write_with

__all__ = [
    "atomic_write_json",
    "atomic_write_text",
    "final_model_step",
    "keep_previous_final",
    "load_run",
    "load_run_config",
    "model_spec",
    "save_weights",
]

WEIGHT_FILES = {"final": "model.safetensors", "init": "init.safetensors"}


def save_weights(module: torch.nn.Module, path: str | Path, metadata: dict[str, str] | None = None) -> Path:
    """Save ``module.state_dict()`` as safetensors, atomically (shared tensors are cloned);
    ``metadata`` (str -> str) goes into the file's header (the final model records its ``step``)."""
    state = {k: v.detach().cpu().contiguous().clone() for k, v in module.state_dict().items()}
    return atomic_write_with(path, lambda tmp: save_file(state, str(tmp), metadata=metadata))


FINAL_MODEL = WEIGHT_FILES["final"]
KEPT_FINAL_DIR = "final_step{step}"


def final_model_step(run_dir: str | Path) -> int | None:
    """The optimizer step of the run's final ``model.safetensors`` (None when there is none): the
    ``step`` in its header, else (written by an older version) the last step of ``metrics.jsonl``."""
    from safetensors import safe_open

    run_dir = Path(run_dir)
    path = run_dir / FINAL_MODEL
    if not path.is_file():
        return None
    try:
        with safe_open(str(path), framework="pt") as handle:
            step = (handle.metadata() or {}).get("step")
        if step is not None:
            return int(step)
    except Exception:  # an unreadable file: fall back on the metrics
        pass
    metrics = run_dir / "metrics.jsonl"
    steps = (
        [json.loads(line).get("step") for line in metrics.read_text().splitlines() if line.strip()]
        if metrics.is_file()
        else []
    )
    steps = [int(s) for s in steps if isinstance(s, int)]
    return max(steps) if steps else None


def keep_previous_final(run_dir: str | Path) -> Path | None:
    """Before a resumed run trains again, move its finished ``model.safetensors`` (with a copy of
    ``model.json`` and ``eval/``) into ``final_step<N>/`` so a finished model is never overwritten;
    returns that folder (None when there is no final model). An existing folder of that name gets a
    ``-2``, ``-3``, ... suffix."""
    run_dir = Path(run_dir)
    if not (run_dir / FINAL_MODEL).is_file():
        return None
    step = final_model_step(run_dir)
    base = run_dir / KEPT_FINAL_DIR.format(step=step if step is not None else "unknown")
    target, n = base, 1
    while target.exists():
        n += 1
        target = base.with_name(f"{base.name}-{n}")
    target.mkdir()
    for name in ("model.json",):
        if (run_dir / name).is_file():
            shutil.copy2(run_dir / name, target / name)
    if (run_dir / "eval").is_dir():
        shutil.copytree(run_dir / "eval", target / "eval")
    os.replace(run_dir / FINAL_MODEL, target / FINAL_MODEL)
    return target


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


CHECKPOINT_MODEL_FILE = "model.safetensors"
CHECKPOINT_PREFIX = "model."  # checkpoints hold the trainer's wrapper module (its ``model`` attribute)


def resolve_weights(run_dir: str | Path, weights: str = "final") -> Path:
    """The weight file of ``weights``: ``final`` (model.safetensors), ``init`` (init.safetensors) or
    ``step_N`` (the model in ``checkpoints/step_<N, 8 digits>/``). Raises a ValueError for another name
    and FileNotFoundError (listing what exists) when the file is missing."""
    run_dir = Path(run_dir)
    if weights in WEIGHT_FILES:
        path = run_dir / WEIGHT_FILES[weights]
        hint = f" (training not finished? resume it with mvapp train --resume {run_dir})" if weights == "final" else ""
    else:
        match = re.fullmatch(r"step_(\d+)", weights)
        if match is None:
            raise ValueError(f"weights: expected final, init or step_N (a checkpoint step), got {weights!r}")
        path = run_dir / "checkpoints" / f"step_{int(match.group(1)):08d}" / CHECKPOINT_MODEL_FILE
        found = sorted(
            p.name for p in (run_dir / "checkpoints").glob("step_*") if (p / CHECKPOINT_MODEL_FILE).is_file()
        )
        hint = f" (checkpoints with weights: {', '.join(found) or 'none'})"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing{hint}")
    return path


def load_run(run_dir: str | Path, weights: Literal["final", "init"] | str = "final") -> tuple[Config, torch.nn.Module]:
    """Config and rebuilt model of a run with its ``final`` (model.safetensors), ``init``
    (init.safetensors, random-init reference) or ``step_N`` (checkpoint) weights, in eval mode on the CPU."""
    run_dir = Path(run_dir)
    cfg = load_run_config(run_dir)
    weight_path = resolve_weights(run_dir, weights)
    spec_path = run_dir / "model.json"
    spec = json.loads(spec_path.read_text()) if spec_path.is_file() else model_spec(cfg)
    model = build_model_from_spec(spec)
    try:
        state = load_file(str(weight_path))
    except Exception as err:  # safetensors raises its own error types for truncated / foreign files
        raise ValueError(f"{weight_path}: unreadable weights file ({err}); rerun or resume the training") from None
    if weight_path.parent.name.startswith("step_"):
        state = {k.removeprefix(CHECKPOINT_PREFIX): v for k, v in state.items()}
    expected = model.state_dict()
    wrong_shape = [
        f"{k} {tuple(v.shape)} vs {tuple(expected[k].shape)}"
        for k, v in state.items()
        if k in expected and v.shape != expected[k].shape
    ]
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    if missing or unexpected or wrong_shape:
        raise ValueError(
            f"{weight_path}: weights do not match the model in {spec_path.name}: "
            f"missing {missing[:5]}, unexpected {unexpected[:5]}, shape (file vs model) {wrong_shape[:3]}"
        )
    model.load_state_dict(state, strict=True)
    model.eval()
    return cfg, model
