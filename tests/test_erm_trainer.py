"""The ERM baseline trained through the Trainer (loss ``supervised_ce``) against the old hand-written
loop (kept here only as the reference): same accuracies within seed noise over 2 seeds; the loss's
labels / features plumbing and its errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from _domain_cases import tiny_domain_config
from torch import nn
from torch.utils.data import DataLoader, default_collate

from multiview_app.config import load_config
from multiview_app.data.adapters import build_adapter
from multiview_app.data.batch import to_device
from multiview_app.data.domains.synth import synth_domains
from multiview_app.data.views import build_view_policy
from multiview_app.eval.domain_generalization import domain_features
from multiview_app.eval.erm import erm_config
from multiview_app.eval.protocols.probe import fit_linear_classifier
from multiview_app.experiments.domains import train_erm
from multiview_app.losses import build_loss
from multiview_app.train.run_io import build_model_from_spec, load_run, model_spec
from multiview_app.train.trainer import EpochBatchSampler, lr_lambda, set_dataset_epoch

SEEDS = (0, 1)
STEPS = 40


@pytest.fixture(scope="module")
def digit_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("digit_domains_erm")
    synth_domains(root, seed=0, limit=100)
    return root


def tiny_config(root: Path, tmp_path: Path, seed: int) -> Path:
    return tiny_domain_config(
        root,
        tmp_path / f"tiny_{seed}.yaml",
        width=8,
        num_features=16,
        loss={"name": "m3g", "epsilon": 0.05},
        train={"max_steps": 2, "batch_size": 8, "log_every": 5, "seed": seed},
        optim={"lr": 0.003, "warmup_steps": 2, "weight_decay": 0.0001, "grad_clip": 3.0},
    )


def old_erm_loop(cfg, adapter, policy, steps: int) -> nn.Module:
    """The former ``eval/erm.py`` training loop (reference only): AdamW on encoder + linear head,
    cross-entropy on every source view, the trainer's batch order and view seeds."""
    n, seed = cfg.train.batch_size, cfg.train.seed
    torch.manual_seed(seed)
    model = build_model_from_spec(model_spec(cfg)).train()
    head = nn.Linear(int(next(iter(model.encoders.values())).num_features), adapter.num_classes)
    params = list(model.encoders.parameters()) + list(head.parameters())
    optimizer = torch.optim.AdamW(params, lr=cfg.optim.lr, betas=cfg.optim.betas, weight_decay=cfg.optim.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lr_lambda(cfg.optim.warmup_steps, steps, cfg.optim.min_lr_ratio)
    )
    dataset = adapter.source_tuples()
    per_epoch = len(dataset) // n
    step, epoch = 0, 0
    while step < steps:
        set_dataset_epoch(dataset, epoch)
        for raw in DataLoader(
            dataset,
            batch_sampler=EpochBatchSampler(len(dataset), n, per_epoch, seed, epoch),
            collate_fn=default_collate,
        ):
            if step >= steps:
                break
            generator = torch.Generator().manual_seed((seed * 1_000_003 + step) * 4_096 + 1)
            batch = policy.source_views(to_device(raw, torch.device("cpu")), generator)
            feats = model.features(batch)
            logits = head(feats.reshape(-1, feats.shape[-1]))
            loss = nn.functional.cross_entropy(logits, batch.labels.repeat_interleave(feats.shape[1]))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, cfg.optim.grad_clip)
            optimizer.step()
            scheduler.step()
            step += 1
        epoch += 1
    return model.eval()


def accuracies(model: nn.Module, adapter, policy) -> dict[str, float]:
    """Probe (C = 1) on the seen domains' train features: accuracy on their test split (in-domain) and
    on the held-out domain's test split."""
    seen = adapter.seen_domains

    def feats(domain: str, split: str) -> tuple[np.ndarray, np.ndarray]:
        return domain_features(model, adapter, policy, domain, split, 256, "cpu", False)

    x = np.concatenate([feats(d, "train")[0] for d in seen])
    y = np.concatenate([feats(d, "train")[1] for d in seen])
    clf = fit_linear_classifier(x, y, C=1.0)
    out = {}
    for name, domains in (("in_domain", seen), ("held_out", [adapter.holdout])):
        xt = np.concatenate([feats(d, "test")[0] for d in domains])
        yt = np.concatenate([feats(d, "test")[1] for d in domains])
        out[name] = float((clf.predict(xt) == yt).mean())
    return out


def test_trainer_erm_matches_the_old_loop_within_seed_noise(digit_root: Path, tmp_path: Path) -> None:
    old, new, init = [], [], []
    for seed in SEEDS:
        cfg = load_config(tiny_config(digit_root, tmp_path, seed))
        adapter = build_adapter(cfg.data.adapter, cfg.data.options)
        policy = build_view_policy(cfg.views.policy, cfg.views.k, cfg.views.options, adapter)
        old.append(accuracies(old_erm_loop(cfg, adapter, policy, STEPS), adapter, policy))
        run_dir, summary = train_erm(cfg, adapter, tmp_path / "erm", steps=STEPS, progress=False)
        assert summary["steps"] == STEPS and (run_dir / "checkpoints").is_dir()
        new.append(accuracies(load_run(run_dir, "final")[1], adapter, policy))
        init.append(accuracies(load_run(run_dir, "init")[1], adapter, policy))
    for key in ("in_domain", "held_out"):
        o, n, i = (np.array([r[key] for r in rows]) for rows in (old, new, init))
        noise = max(np.abs(np.diff(o)).max(), np.abs(np.diff(n)).max(), 0.05)  # seed spread (floor: 1 test item = 0.05)
        assert abs(n.mean() - o.mean()) <= 2 * noise, (key, old, new)
    # both trained: in-domain accuracy clearly above the initial weights' (the comparison can fail)
    for rows in (old, new):
        assert np.mean([r["in_domain"] for r in rows]) > np.mean([r["in_domain"] for r in init]) + 0.1, (rows, init)


def test_erm_config_own_budget_and_shared_across_losses(digit_root: Path, tmp_path: Path) -> None:
    cfg = load_config(tiny_config(digit_root, tmp_path, 0), ["train.max_steps=7"])
    adapter = build_adapter(cfg.data.adapter, cfg.data.options)
    erm = erm_config(cfg, adapter, tmp_path / "erm", steps=50)
    assert erm.train.max_steps == 50 and erm.train.checkpoint_every == 10  # never the pretraining max_steps
    assert erm.loss.name == "supervised_ce" and erm.loss.params == {"num_classes": 10, "in_dim": 16}
    assert erm.model.predictor is None and not erm.model.teacher.enabled
    other = load_config(
        tiny_config(digit_root, tmp_path, 0),
        ["loss.name=infonce_pwe", "loss.tau=0.2", "data.options.holdout=null", "data.options.adapt=sketch"],
    )
    assert erm_config(other, adapter, tmp_path / "erm", steps=50).run_dir == erm.run_dir  # one ERM per target + seed


def test_supervised_loss_takes_features_and_labels() -> None:
    loss = build_loss("supervised_ce", num_classes=3, in_dim=4)
    assert loss.input == "features" and loss.uses_labels and not loss.gather_across_processes
    torch.manual_seed(0)
    z = torch.randn(5, 2, 4, dtype=torch.float64, requires_grad=True)
    labels = torch.tensor([0, 1, 2, 0, 1])
    value = loss.double()(z, labels=labels)
    expected = nn.functional.cross_entropy(loss.head(z.reshape(10, 4)), labels.repeat_interleave(2))
    assert torch.allclose(value, expected)
    assert 0.0 <= loss.last_stats["accuracy"] <= 1.0
    assert torch.autograd.gradcheck(lambda x: loss(x, labels=labels), (z,))
    with pytest.raises(ValueError, match="needs the batch's labels"):
        loss(z)
    with pytest.raises(ValueError, match="in_dim=4"):
        loss(torch.randn(5, 2, 3, dtype=torch.float64), labels=labels)
