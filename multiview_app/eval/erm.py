"""Supervised ERM baseline of the domain evaluators, trained by the normal Trainer (``mvapp train``).

The ERM run is an ordinary run folder whose loss is the supervised head ``supervised_ce``
(:mod:`multiview_app.losses.supervised`: cross-entropy of a linear head on the encoder's features of
every view, labels from the batch). Its config is derived from a pretraining run's (:func:`erm_config`):

- data: the seen domains only (the target is excluded for both protocols, so generalization and
  adaptation runs share one ERM model), class-paired domain tuples (``pairing: label``: each of the k
  views of an item is a labelled image of its class from one seen domain) with the run's training-domain
  validation share held out (``val_fraction``);
- the same backbone, view stacks, batch size, optimizer and seed; no predictor, no EMA teacher;
- **its own budget**: ``steps`` (default :data:`DEFAULT_STEPS`), never the pretraining run's
  ``train.max_steps``; checkpoints every ``steps / CHECKPOINTS`` steps are the candidates among which the
  evaluator picks the ERM model by training-domain validation (the chosen step is ERM's "steps to
  convergence").

Runs are cached in ``<cache_dir>/erm_<target>_<hash of erm_key>/``; they are trained (or reused, or
resumed when unfinished) by :func:`multiview_app.experiments.domains.train_erm`, never here.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ..config import Config, config_from_dict
from ..train.run_io import model_spec

#: ERM's default step budget (selection by training-domain validation picks one of its checkpoints)
DEFAULT_STEPS = 600
#: saved checkpoints (selection candidates) per ERM run besides the final weights
CHECKPOINTS = 5
#: identifies how ERM is trained (a cached model of another recipe is not reused)
RECIPE = "mvapp train, loss supervised_ce (linear head on encoder features)"


def _source_data(cfg: Config) -> dict[str, Any]:
    """Data settings as far as ERM sees them: the target domain (held out or adaptation target) is
    excluded either way, so both protocols share one ERM model per target; class-paired tuples."""
    options = {k: v for k, v in cfg.data.options.items() if k not in ("adapt", "adapt_share", "adapt_views")}
    options["holdout"] = cfg.data.options.get("holdout") or cfg.data.options.get("adapt")
    options["pairing"] = "label"
    return {"adapter": cfg.data.adapter, "options": options}


def supervised_model(cfg: Config) -> dict[str, Any]:
    """The run's backbone without predictor / teacher (the supervised head is the loss module's): ERM's
    model and the EEG supervised ceiling's."""
    return {
        "encoders": cfg.model.encoders,
        "projector": cfg.model.projector,
        "predictor": None,
        "teacher": {"enabled": False},
    }


def erm_key(cfg: Config, steps: int = DEFAULT_STEPS) -> dict[str, Any]:
    """Everything that defines the ERM baseline of ``cfg`` (data, views, backbone, budget, seed)."""
    views = cfg.views.model_dump(mode="json")
    views["options"] = {k: v for k, v in views["options"].items() if k not in ("target_pool", "target_stack")}
    return {
        "recipe": RECIPE,
        "data": _source_data(cfg),
        "views": views,
        "model": supervised_model(cfg),
        "optim": cfg.optim.model_dump(mode="json"),
        "steps": int(steps),
        "batch_size": cfg.train.batch_size,
        "seed": cfg.train.seed,
    }


def erm_dir(cfg: Config, cache_dir: str | Path, steps: int = DEFAULT_STEPS) -> Path:
    """``<cache_dir>/erm_<holdout>_<hash of erm_key>``."""
    digest = hashlib.sha1(json.dumps(erm_key(cfg, steps), sort_keys=True).encode()).hexdigest()[:10]
    holdout = _source_data(cfg)["options"]["holdout"] or "none"
    return Path(cache_dir) / f"erm_{holdout}_{digest}"


def erm_config(cfg: Config, adapter: Any, cache_dir: str | Path, steps: int = DEFAULT_STEPS) -> Config:
    """The ERM run's config (module docstring): a ``supervised_ce`` run of ``steps`` steps with
    checkpoints every ``steps // CHECKPOINTS`` steps, all kept, in :func:`erm_dir`."""
    key = erm_key(cfg, steps)
    out = erm_dir(cfg, cache_dir, steps)
    in_dim = encoder_feature_dim(cfg)
    raw = cfg.to_dict()
    raw.update(
        data=key["data"],
        views=key["views"],
        model=key["model"],
        loss={"name": "supervised_ce", "num_classes": int(adapter.num_classes), "in_dim": int(in_dim)},
        output={**raw["output"], "runs_dir": str(out.parent), "name": out.name},
        eval={**raw["eval"], "linear_probe": False},
    )
    raw["train"] = {
        **raw["train"],
        "max_steps": int(steps),
        "epochs": None,
        "checkpoint_every": max(1, int(steps) // CHECKPOINTS),
        "keep_checkpoints": CHECKPOINTS + 1,
        "callbacks": [],
    }
    return config_from_dict(raw)


def encoder_feature_dim(cfg: Config) -> int:
    """Features per view of ``cfg``'s (first) encoder: its ``num_features`` setting, else the built model's."""
    encoder = next(iter(cfg.model.encoders.values()))
    in_dim = encoder.get("num_features")
    if in_dim is None:
        from ..models import build_model

        in_dim = next(iter(build_model(**model_spec(cfg)).encoders.values())).num_features
    return int(in_dim)


def erm_run_summary(cfg: Config, erm_run: str | Path) -> dict[str, Any]:
    """What the domain evaluator records of the finished ERM run ``erm_run`` of the pretraining config
    ``cfg``: :func:`erm_summary` plus ``batch_size``, ``k`` and ``key`` (:func:`erm_key` at the ERM run's
    own budget). ValueError when ``erm_run`` is not ``cfg``'s ERM baseline (another recipe, data or seed)."""
    from ..train.run_io import load_run_config

    erm_run = Path(erm_run)
    steps = load_run_config(erm_run).train.max_steps
    if steps is None or erm_dir(cfg, erm_run.parent, steps).name != erm_run.name:
        raise ValueError(
            f"{erm_run}: not the ERM baseline of this run (expected the folder "
            f"{erm_dir(cfg, erm_run.parent, steps or DEFAULT_STEPS).name}; see eval/erm.py erm_dir)"
        )
    return {**erm_summary(erm_run), "batch_size": cfg.train.batch_size, "k": cfg.views.k, "key": erm_key(cfg, steps)}


def erm_summary(run_dir: str | Path, tail: int = 3) -> dict[str, Any]:
    """``steps``, ``final_loss`` and ``train_accuracy`` (means over the last ``tail`` logged rows of
    ``metrics.jsonl``) of a finished ERM run."""
    rows = [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines() if line.strip()]
    if not rows:
        raise ValueError(f"{run_dir}/metrics.jsonl: no logged step")
    last = rows[-tail:]
    return {
        "steps": int(rows[-1]["step"]),
        "final_loss": sum(r["loss"] for r in last) / len(last),
        "train_accuracy": sum(r["stats/accuracy"] for r in last) / len(last),
    }


__all__ = [
    "CHECKPOINTS",
    "DEFAULT_STEPS",
    "encoder_feature_dim",
    "erm_config",
    "erm_dir",
    "erm_key",
    "erm_run_summary",
    "erm_summary",
    "supervised_model",
]
