"""Supervised ERM baseline of the domain evaluators: the same backbone trained with cross-entropy on
the seen domains' labels, with the pretraining run's budget.

Same data pipeline as the self-supervised run: ``train.max_steps`` steps of ``train.batch_size``
domain tuples, each through the run's view policy (k augmented images of one class from k seen
domains), so ERM sees the same number of labelled images per step. Every image's encoder features
``(n * k, f)`` go through one linear head; AdamW with the run's ``optim`` settings and schedule.
Weights are cached in ``<cache_dir>/erm_<key>/`` (``model.safetensors`` + ``erm.json``), keyed by
everything that defines the baseline, so runs of different losses share one ERM model.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import nn
from torch.utils.data import DataLoader, default_collate

from ..config import Config
from ..data.batch import to_device
from ..train.run_io import atomic_write_json, build_model_from_spec, model_spec, save_weights
from ..train.trainer import EpochBatchSampler, lr_lambda, set_dataset_epoch


def _source_data(cfg: Config) -> dict[str, Any]:
    """Data settings as far as ERM sees them: the target domain (held out or adaptation target) is
    excluded either way, so both protocols share one ERM model per target."""
    options = {k: v for k, v in cfg.data.options.items() if k not in ("adapt", "adapt_share", "adapt_views")}
    options["holdout"] = cfg.data.options.get("holdout") or cfg.data.options.get("adapt")
    return {"adapter": cfg.data.adapter, "options": options}


def erm_key(cfg: Config) -> dict[str, Any]:
    """Everything that defines the ERM baseline of ``cfg`` (data, views, backbone, budget, seed)."""
    views = cfg.views.model_dump(mode="json")
    views["options"] = {k: v for k, v in views["options"].items() if k != "target_pool"}  # target views only
    return {
        "data": _source_data(cfg),
        "views": views,
        "model": model_spec(cfg),
        "optim": cfg.optim.model_dump(mode="json"),
        "steps": cfg.train.max_steps,
        "batch_size": cfg.train.batch_size,
        "seed": cfg.train.seed,
    }


def erm_dir(cfg: Config, cache_dir: str | Path) -> Path:
    """``<cache_dir>/erm_<holdout>_<hash of erm_key>``."""
    digest = hashlib.sha1(json.dumps(erm_key(cfg), sort_keys=True).encode()).hexdigest()[:10]
    holdout = _source_data(cfg)["options"]["holdout"] or "none"
    return Path(cache_dir) / f"erm_{holdout}_{digest}"


def train_erm(cfg: Config, adapter: Any, policy: Any, cache_dir: str | Path, *, device: str = "cpu",
              progress: bool = True) -> tuple[nn.Module, dict[str, Any]]:
    """Train (or load from the cache) the ERM model of ``cfg``; returns the model (eval mode, its
    ``features`` are what the probes use) and the summary written to ``erm.json``."""
    from tqdm.auto import tqdm

    out = erm_dir(cfg, cache_dir)
    model = build_model_from_spec(model_spec(cfg))
    if (out / "erm.json").is_file() and (out / "model.safetensors").is_file():
        model.load_state_dict(load_file(str(out / "model.safetensors")))
        return model.eval(), json.loads((out / "erm.json").read_text())
    if cfg.train.max_steps is None:
        raise ValueError("the ERM baseline needs train.max_steps (its step budget)")
    steps, n, seed = cfg.train.max_steps, cfg.train.batch_size, cfg.train.seed
    torch.manual_seed(seed)
    model = build_model_from_spec(model_spec(cfg)).to(device).train()
    feature_dim = int(next(iter(model.encoders.values())).num_features)
    head = nn.Linear(feature_dim, adapter.num_classes).to(device)
    params = list(model.encoders.parameters()) + list(head.parameters())
    optimizer = torch.optim.AdamW(params, lr=cfg.optim.lr, betas=cfg.optim.betas, weight_decay=cfg.optim.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg.optim.warmup_steps, steps, cfg.optim.min_lr_ratio))
    # labelled seen-domain tuples only (never the adaptation target's unlabelled items)
    dataset = adapter.source_tuples() if hasattr(adapter, "source_tuples") else adapter.split("train")
    # the source-domain views only (with nearest-neighbour adaptation the policy adds a target view)
    source_views = getattr(policy, "source_views", policy.train_views)
    per_epoch = len(dataset) // n
    if per_epoch < 1:
        raise ValueError(f"ERM baseline: the train split has {len(dataset)} items, fewer than train.batch_size={n}")
    step, epoch, losses, correct, seen = 0, 0, [], 0, 0
    bar = tqdm(total=steps, desc="ERM baseline", unit="step", disable=not progress, leave=False)
    while step < steps:
        sampler = EpochBatchSampler(len(dataset), n, per_epoch, seed, epoch)
        set_dataset_epoch(dataset, epoch)
        for raw in DataLoader(dataset, batch_sampler=sampler, collate_fn=default_collate,
                              num_workers=cfg.train.num_workers):
            if step >= steps:
                break
            generator = torch.Generator().manual_seed((seed * 1_000_003 + step) * 4_096 + 1)
            batch = source_views(to_device(raw, torch.device(device)), generator)
            feats = model.features(batch)  # (n, k, f)
            logits = head(feats.reshape(-1, feats.shape[-1]))
            targets = batch.labels.to(device).repeat_interleave(feats.shape[1])
            loss = nn.functional.cross_entropy(logits, targets)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.optim.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(params, cfg.optim.grad_clip)
            optimizer.step()
            scheduler.step()
            losses.append(float(loss.detach()))
            correct += int((logits.argmax(1) == targets).sum())
            seen += int(targets.numel())
            step += 1
            bar.update(1)
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
        epoch += 1
    bar.close()
    tail = losses[-max(1, steps // 10):]
    summary = {
        "steps": steps, "batch_size": n, "k": cfg.views.k, "final_loss": sum(tail) / len(tail),
        "train_accuracy": correct / max(1, seen), "key": erm_key(cfg),
    }
    save_weights(model, out / "model.safetensors")
    atomic_write_json(out / "erm.json", summary)
    return model.eval(), summary


__all__ = ["erm_dir", "erm_key", "train_erm"]
