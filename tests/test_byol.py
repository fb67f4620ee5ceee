"""BYOL (Grill et al. 2020, arXiv:2006.07733) for k views: the loss against float64 references, its
gradient, and the ``byol`` training method (online predictions vs. stop-gradient EMA target projections)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from multiview_app.config import ConfigError
from multiview_app.losses import build_loss
from multiview_app.losses.contrastive import BYOLAverage, BYOLLoss, BYOLPairwise
from multiview_app.models import build_model
from multiview_app.train.methods import BYOLMethod, build_method, collapse_stats
from multiview_app.train.run_io import model_spec
from tests._train_helpers import tiny_config

VARIANTS = ["byol_pwe", "byol_ave"]


def _unit(v: torch.Tensor) -> torch.Tensor:
    return v / v.norm()


def paper_symmetric_loss(online: torch.Tensor, target: torch.Tensor) -> float:
    """BYOL Eq. 2 + its symmetrized twin for two views, per item, written out: ``L = ||p1 - t2||^2`` and
    ``L~ = ||p2 - t1||^2`` of the L2-normalized prediction / projection; the batch mean of ``L + L~``."""
    n = online.shape[0]
    total = 0.0
    for i in range(n):
        p1, p2 = _unit(online[i, 0]), _unit(online[i, 1])
        t1, t2 = _unit(target[i, 0]), _unit(target[i, 1])
        total += float(((p1 - t2) ** 2).sum() + ((p2 - t1) ** 2).sum())
    return total / n


def brute_force(name: str, online: torch.Tensor, target: torch.Tensor) -> float:
    """Loops over items and ordered view pairs (pwe) or views against the target rest-mean (ave)."""
    n, k, _ = online.shape
    terms = []
    for i in range(n):
        for a in range(k):
            p = _unit(online[i, a])
            if name == "byol_pwe":
                terms += [float(((p - _unit(target[i, b])) ** 2).sum()) for b in range(k) if b != a]
            else:
                rest = sum(_unit(target[i, b]) for b in range(k) if b != a) / (k - 1)
                terms.append(float(((p - _unit(rest)) ** 2).sum()))
    return sum(terms) / len(terms)


def _pair(n: int, k: int, d: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(n, k, d, generator=g, dtype=torch.float64),
        torch.randn(n, k, d, generator=g, dtype=torch.float64),
    )


@pytest.mark.parametrize("name", VARIANTS)
def test_k2_equals_half_the_papers_symmetric_loss(name: str) -> None:
    online, target = _pair(6, 2, 5)
    loss = build_loss(name)(online, target)
    assert loss.dtype == torch.float64
    # mean over the 2 ordered pairs = (L + L~) / 2 (the paper sums the two)
    assert float(loss) == pytest.approx(paper_symmetric_loss(online, target) / 2, abs=1e-12)


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("k", [3, 4, 5])
def test_k_views_match_brute_force(name: str, k: int) -> None:
    online, target = _pair(5, k, 4, seed=k)
    assert float(build_loss(name)(online, target)) == pytest.approx(brute_force(name, online, target), abs=1e-12)


def test_pwe_and_ave_differ_for_k_above_2() -> None:
    online, target = _pair(5, 3, 4)
    assert abs(float(BYOLPairwise()(online, target)) - float(BYOLAverage()(online, target))) > 1e-3


@pytest.mark.parametrize("name", VARIANTS)
def test_gradcheck_online(name: str) -> None:
    online, target = _pair(3, 3, 4)
    online.requires_grad_(True)
    loss_fn = build_loss(name)
    assert torch.autograd.gradcheck(lambda p: loss_fn(p, target), (online,))


@pytest.mark.parametrize("name", VARIANTS)
def test_no_gradient_reaches_the_target(name: str) -> None:
    online, target = _pair(4, 3, 4)
    online.requires_grad_(True)
    target.requires_grad_(True)
    fired: list[str] = []
    online.register_hook(lambda g: fired.append("online"))
    target.register_hook(lambda g: fired.append("target"))
    build_loss(name)(online, target).backward()
    assert fired == ["online"] and target.grad is None and online.grad.abs().sum() > 0


@pytest.mark.parametrize("name", VARIANTS)
def test_every_term_has_a_target_side(name: str) -> None:
    """No online-online term: the gradient on online view ``a`` depends on that view and the targets
    only, so changing another online view leaves it unchanged (an online-online term would not)."""
    online, target = _pair(4, 3, 4)
    loss_fn = build_loss(name)

    def grad_of(p: torch.Tensor) -> torch.Tensor:
        p = p.clone().requires_grad_(True)
        loss_fn(p, target).backward()
        return p.grad

    before = grad_of(online)
    moved = online.clone()
    moved[:, 1:] = torch.randn_like(moved[:, 1:])
    after = grad_of(moved)
    torch.testing.assert_close(after[:, 0], before[:, 0], rtol=0, atol=1e-14)
    # the single-tensor form (target = online) is the old symmetric objective and does couple the views
    single = online.clone().requires_grad_(True)
    loss_fn(single).backward()
    single_moved = moved.clone().requires_grad_(True)
    loss_fn(single_moved).backward()
    assert (single.grad[:, 0] - single_moved.grad[:, 0]).abs().max() > 1e-3


def test_loss_is_zero_when_predictions_match_targets_and_checks_shapes() -> None:
    z = torch.nn.functional.normalize(torch.ones(3, 4, 5, dtype=torch.float64), dim=-1)
    for name in VARIANTS:
        assert float(build_loss(name)(z, z)) == pytest.approx(0.0, abs=1e-12)
        with pytest.raises(ValueError, match=f"loss '{name}': online .* and target .* same shape"):
            build_loss(name)(z, z[:, :3])
    assert issubclass(BYOLPairwise, BYOLLoss) and issubclass(BYOLAverage, BYOLLoss)


def _byol_config(tmp_path: Path, name: str = "byol_ave", k: int = 3, optim: dict | None = None, **teacher: object):
    return tiny_config(
        tmp_path,
        "byol",
        **({"optim": optim} if optim else {}),
        views={"k": k},
        loss={"name": name},
        model={
            "encoders": {"image": {"name": "small_cnn", "width": 8, "num_features": 16}},
            "projector": {"hidden_dim": 32, "out_dim": 16, "norm": "batch"},
            "predictor": {"hidden_dim": 32, "norm": "batch"},
            "teacher": {"enabled": True, "momentum_base": 0.9, "views": "all", **teacher},
        },
    )


def _tiny_batch(cfg, n: int = 6):
    from multiview_app.data.batch import ViewBatch

    g = torch.Generator().manual_seed(0)
    views = [torch.randn(n, 3, 32, 32, generator=g) for _ in range(cfg.views.k)]
    return ViewBatch(views=views, view_names=[f"v{i}" for i in range(cfg.views.k)], modalities=["image"] * cfg.views.k)


@pytest.mark.parametrize("name", VARIANTS)
def test_byol_method_gradients_reach_only_the_online_branch(tmp_path: Path, name: str) -> None:
    cfg = _byol_config(tmp_path, name)
    model = build_model(**model_spec(cfg))
    method = build_method(cfg, model, build_loss(name), torch.device("cpu"))
    assert isinstance(method, BYOLMethod) and set(method.states()) == {"ema_teacher"}
    target_params = list(method.teacher.model.parameters())
    assert not any(p.requires_grad for p in target_params)
    fired: list[int] = []
    for p in target_params:  # let a leak show: the target branch's parameters would now record a gradient
        p.requires_grad_(True)
        p.register_hook(lambda g: fired.append(1))
    from multiview_app.train.trainer import EmbedStep

    out = method.forward(EmbedStep(model, method.step_output), _tiny_batch(cfg))
    assert out.target is not None and not out.target.requires_grad
    assert out.online.shape == out.target.shape == out.projections.shape == (6, 3, 16)
    loss, stats = method.loss(out, build_loss(name), lambda fn, *t, labels=None: fn(*t), lambda t: t, True)
    loss.backward()
    assert fired == [] and all(p.grad is None for p in target_params)
    assert model.predictors["image"].net[0].weight.grad.abs().sum() > 0  # the predictor trains
    keys = ("collapse/embedding_std", "collapse/rankme", "collapse/feature_std", "collapse/feature_rankme")
    assert set(stats) >= set(keys) and all(isinstance(stats[key], torch.Tensor) for key in keys)
    assert 0 < float(stats["collapse/embedding_std"]) and 1 <= float(stats["collapse/rankme"]) <= 16
    assert 0 < float(stats["collapse/feature_std"]) and 1 <= float(stats["collapse/feature_rankme"]) <= 16
    features = model.features(_tiny_batch(cfg))  # the stats of the features are those of what a probe reads
    torch.testing.assert_close(out.features, features)
    torch.testing.assert_close(stats["collapse/feature_rankme"], collapse_stats(features, "features")[keys[3]])


def test_collapse_stats_of_collapsed_and_spread_rows() -> None:
    """All rows on one direction: std 0 and RankMe 1; rows on d orthogonal directions: RankMe d."""
    one = torch.ones(8, 2, 4) * torch.tensor([3.0, 0.0, 0.0, 0.0])
    stats = collapse_stats(one, "features")
    assert float(stats["collapse/feature_std"]) == pytest.approx(0.0, abs=1e-6)
    assert float(stats["collapse/feature_rankme"]) == pytest.approx(1.0, abs=1e-3)
    spread = torch.eye(4).repeat(2, 1).view(4, 2, 4) * 5.0  # each row a scaled basis vector, every one twice
    assert float(collapse_stats(spread)["collapse/rankme"]) == pytest.approx(4.0, abs=1e-3)
    # features are centered first: a shared offset (all-positive ReLU features) is not counted as spread;
    # isotropic noise in 3 dimensions around it has RankMe about 3, uncentered much less
    g = torch.Generator().manual_seed(0)
    rows = torch.tensor([10.0, 0.0, 0.0, 0.0]) + torch.randn(256, 4, generator=g) * torch.tensor([0, 1.0, 1.0, 1.0])
    centered = float(collapse_stats(rows.view(128, 2, 4), "features")["collapse/feature_rankme"])
    assert centered == pytest.approx(3.0, abs=0.5)
    assert centered > float(collapse_stats(rows.view(128, 2, 4))["collapse/rankme"]) + 0.5


def test_predictor_learning_rate_scale_makes_its_own_parameter_group(tmp_path: Path) -> None:
    from multiview_app.train.trainer import param_groups

    cfg = _byol_config(tmp_path, optim={"lr": 0.002, "predictor_lr_scale": 10.0})
    model = build_model(**model_spec(cfg))
    rest, head = param_groups(model, cfg.optim)
    assert head["lr"] == pytest.approx(0.02) and "lr" not in rest
    assert {id(p) for p in head["params"]} == {id(p) for p in model.predictors.parameters()}
    assert len(rest["params"]) + len(head["params"]) == len(list(model.parameters()))
    plain = param_groups(model, _byol_config(tmp_path).optim)  # scale 1: one group of every parameter
    assert len(plain) == 1 and len(plain[0]["params"]) == len(list(model.parameters()))


def test_byol_method_ema_update_moves_the_target_towards_the_online_weights(tmp_path: Path) -> None:
    cfg = _byol_config(tmp_path)
    model = build_model(**model_spec(cfg))
    method = build_method(cfg, model, build_loss("byol_ave"), torch.device("cpu"))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    before = [p.clone() for p in method.teacher.model.parameters()]
    stats = method.after_step(model, 0, 10)
    assert stats == {"teacher_momentum": pytest.approx(0.9)}
    for old, new, online in zip(before, method.teacher.model.parameters(), model.parameters()):
        torch.testing.assert_close(new, 0.9 * old + 0.1 * online)


def test_byol_needs_all_target_views(tmp_path: Path) -> None:
    from multiview_app.config_checks import check_cross_sections

    with pytest.raises(ConfigError, match=r"model.teacher.views: loss 'byol_pwe' .* expected 'all'"):
        check_cross_sections(_byol_config(tmp_path, "byol_pwe", views=[0]))


def test_methods_by_config(tmp_path: Path) -> None:
    from multiview_app.train.methods import method_name

    plain = tiny_config(tmp_path, "plain")
    teacher = tiny_config(tmp_path, "t", loss={"name": "infonce_pwe"}, model={"teacher": {"enabled": True}})
    assert method_name(plain, build_loss(plain.loss.name)) == "plain"
    assert method_name(teacher, build_loss("infonce_pwe")) == "ema_teacher"
    assert method_name(_byol_config(tmp_path), build_loss("byol_ave")) == "byol"


def test_byol_loss_docstring_example_runs() -> None:
    import doctest

    from multiview_app.losses import contrastive

    finder = doctest.DocTestFinder()
    tests = [t for t in finder.find(contrastive) if t.name.endswith(".BYOLLoss") and t.examples]
    assert tests, "BYOLLoss has an Examples section"
    runner = doctest.DocTestRunner()
    for test in tests:
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


def test_trainer_runs_byol_as_the_paper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end through the Trainer: the target starts as an exact copy of the online weights (= the
    random-init row's init.safetensors), its BatchNorm uses batch statistics (train mode) at every forward,
    the EMA update runs once after every optimizer step with the cosine schedule, the predictor is in the
    optimizer's weight-decayed group (the one the LR schedule scales), and the linear probe reads the
    encoder's features (not the projector's)."""
    from safetensors.torch import load_file

    from multiview_app.eval.linear_probe import run_linear_probe
    from multiview_app.models.teacher import cosine_momentum
    from multiview_app.train.trainer import Trainer

    cfg = _byol_config(tmp_path, "byol_pwe", k=2)
    cfg.model.encoders["image"]["num_features"] = 24  # != projector out_dim (16): the probe's width says which
    seen: dict[str, list] = {"target0": [], "online": [], "train_mode": [], "steps": [], "groups": []}
    init, forward, after_step = BYOLMethod.__init__, BYOLMethod.forward, BYOLMethod.after_step

    def spy_init(self, cfg, model, loss_fn, device):  # type: ignore[no-untyped-def]
        init(self, cfg, model, loss_fn, device)
        seen["online"].append(model)
        seen["target0"].append({k: v.clone() for k, v in self.teacher.model.state_dict().items()})
        assert model.state_dict().keys() == seen["target0"][0].keys()
        assert all(torch.equal(v, seen["target0"][0][k]) for k, v in model.state_dict().items())

    def spy_forward(self, step_module, batch):  # type: ignore[no-untyped-def]
        seen["train_mode"].append(all(m.training for m in self.teacher.model.modules()))
        return forward(self, step_module, batch)

    def spy_after_step(self, model, step, total_steps):  # type: ignore[no-untyped-def]
        stats = after_step(self, model, step, total_steps)
        seen["steps"].append((step, total_steps, stats["teacher_momentum"]))
        return stats

    build_parts = Trainer._build_parts

    def spy_build_parts(self, accelerator, plan):  # type: ignore[no-untyped-def]
        parts = build_parts(self, accelerator, plan)
        seen["groups"].extend(parts.optimizer.param_groups)
        return parts

    monkeypatch.setattr(BYOLMethod, "__init__", spy_init)
    monkeypatch.setattr(BYOLMethod, "forward", spy_forward)
    monkeypatch.setattr(BYOLMethod, "after_step", spy_after_step)
    monkeypatch.setattr(Trainer, "_build_parts", spy_build_parts)
    result = Trainer(cfg).fit()
    steps = cfg.train.max_steps
    assert len(seen["target0"]) == 1 and len(seen["train_mode"]) == steps and all(seen["train_mode"])
    assert seen["steps"] == [(s, steps, pytest.approx(cosine_momentum(s, steps, 0.9))) for s in range(steps)]
    decayed = {id(p) for p in seen["groups"][0]["params"]}
    predictor = list(seen["online"][0].predictors["image"].parameters())
    assert predictor and all(id(p) in decayed for p in predictor)
    assert seen["groups"][0]["weight_decay"] == cfg.optim.weight_decay
    init_weights = load_file(result.run_dir / "init.safetensors")
    assert init_weights and all(torch.equal(v, seen["target0"][0][k]) for k, v in init_weights.items())
    probe = run_linear_probe(result.run_dir, progress=False)
    assert probe["feature_dim"] == 24 and set(probe["results"]) == {"trained", "random_init"}
