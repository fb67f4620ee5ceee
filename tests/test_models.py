"""Encoders (registry, timm, small_cnn, pretrained_path), heads, MultiViewModel, EMA teacher."""

from __future__ import annotations

import math

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from multiview_app.data.batch import ViewBatch
from multiview_app.models import (
    EMATeacher,
    MultiViewModel,
    Predictor,
    Projector,
    ViewBatchNorm1d,
    available_encoders,
    build_encoder,
    build_model,
    cosine_momentum,
    register_encoder,
)
from multiview_app.models.encoders import ENCODERS


def _batch(n: int = 3, k: int = 2, size: int = 32, seed: int = 0) -> ViewBatch:
    g = torch.Generator().manual_seed(seed)
    views = [torch.randn(n, 3, size, size, generator=g) for _ in range(k)]
    return ViewBatch(views, ["image"] * k, [f"v{i}" for i in range(k)], torch.arange(n))


@pytest.mark.parametrize(
    "name, kwargs, features",
    [
        ("small_cnn", {"width": 8, "num_features": 24}, 24),
        ("resnet18", {"small_input_stem": True, "image_size": 32}, 512),
        ("vit_tiny_patch16_224", {"image_size": 32, "patch_size": 4, "depth": 2}, 192),
    ],
)
def test_image_encoder_shapes(name, kwargs, features):
    encoder = build_encoder("image", name, **kwargs)
    assert encoder.num_features == features
    with torch.no_grad():
        out = encoder(torch.randn(2, 3, 32, 32), view_name="simclr")
    assert out.shape == (2, features)


def test_small_input_stem_keeps_resolution():
    plain = build_encoder("image", "resnet18")
    cifar = build_encoder("image", "resnet18", small_input_stem=True)
    assert cifar.model.conv1.kernel_size == (3, 3) and cifar.model.conv1.stride == (1, 1)
    assert isinstance(cifar.model.maxpool, nn.Identity)
    x = torch.randn(1, 3, 32, 32)
    plain.eval(), cifar.eval()
    with torch.no_grad():
        assert plain.model.forward_features(x).shape[-1] == 1  # 32 px / 32
        assert cifar.model.forward_features(x).shape[-1] == 4  # 32 px / 8
    with pytest.raises(ValueError, match="small_input_stem needs a ResNet-style"):
        build_encoder("image", "vit_tiny_patch16_224", small_input_stem=True, image_size=32, patch_size=4, depth=1)


def test_encoder_registry_errors():
    assert "image/small_cnn" in available_encoders("image")
    with pytest.raises(ValueError, match="unknown image encoder 'resnet_nope'.*not a timm model"):
        build_encoder("image", "resnet_nope")
    with pytest.raises(ValueError, match="unknown encoder 'x' for modality 'audio'"):
        build_encoder("audio", "x")
    with pytest.raises(ValueError, match="bad arguments for encoder 'image/small_cnn'"):
        build_encoder("image", "small_cnn", widht=3)


@pytest.mark.parametrize(
    "suffix, name, kwargs",
    [(".safetensors", "resnet18", {"small_input_stem": True}), (".pt", "small_cnn", {"width": 4})],
)
def test_pretrained_path_round_trip(tmp_path, suffix, name, kwargs):
    source = build_encoder("image", name, **kwargs)
    inner = getattr(source, "model", source)  # timm encoders load into their timm model
    path = tmp_path / f"w{suffix}"
    state = {k: v.contiguous() for k, v in inner.state_dict().items()}
    if suffix == ".safetensors":
        save_file(state, str(path))
    else:
        torch.save({"state_dict": state}, path)  # a wrapped checkpoint is unwrapped
    loaded = build_encoder("image", name, pretrained_path=str(path), **kwargs)
    x = torch.randn(2, 3, 32, 32)
    source.eval(), loaded.eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), source(x))  # a fresh random init would differ


def test_pretrained_path_errors(tmp_path):
    state = build_encoder("image", "small_cnn", width=4).state_dict()
    partial = tmp_path / "partial.safetensors"
    save_file({k: v for k, v in state.items() if not k.startswith("body.0.")}, str(partial))
    with pytest.raises(ValueError, match="lacks 1 weights of the encoder, e.g. body.0.weight"):
        build_encoder("image", "small_cnn", width=4, pretrained_path=str(partial))
    full = tmp_path / "full.safetensors"
    save_file(state, str(full))
    with pytest.raises(ValueError, match="do not fit the encoder.*size mismatch"):
        build_encoder("image", "small_cnn", width=8, pretrained_path=str(full))
    with pytest.raises(ValueError, match="does not exist"):
        build_encoder("image", "small_cnn", pretrained_path=str(tmp_path / "none.pt"))
    (tmp_path / "junk.pt").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="cannot be read as weights"):
        build_encoder("image", "small_cnn", pretrained_path=str(tmp_path / "junk.pt"))


def test_heads():
    proj = Projector(16, hidden_dim=32, out_dim=8, norm="batch")
    assert [type(m) for m in proj.net] == [nn.Linear, nn.BatchNorm1d, nn.GELU, nn.Linear]
    assert proj(torch.randn(5, 16)).shape == (5, 8)
    pred = Predictor(8, hidden_dim=4)
    assert pred(torch.randn(5, 8)).shape == (5, 8)
    with pytest.raises(ValueError, match="unknown head norm 'group'"):
        Projector(4, norm="group")


def test_model_embed_and_features():
    model = build_model(
        {"image": {"name": "small_cnn", "width": 8}}, {"hidden_dim": 32, "out_dim": 16}, {"hidden_dim": 8}
    )
    batch = _batch(n=4, k=3)
    feats = model.features(batch)
    z = model.embed(batch)
    assert feats.shape == (4, 3, 128) and z.shape == (4, 3, 16)
    torch.testing.assert_close(z.norm(dim=-1), torch.ones(4, 3))
    assert model.has_predictor and model.spec["predictor"] == {"hidden_dim": 8}
    model.eval()
    with torch.no_grad():
        # batched forward over concatenated views == per-view forward (eval mode: BN uses running stats)
        per_view = torch.stack([model.encoders["image"](v) for v in batch.views], dim=1)
        torch.testing.assert_close(model.features(batch), per_view)
        z_no_pred = model.embed(batch, use_predictor=False)
        manual = nn.functional.normalize(model.projectors["image"](per_view.reshape(-1, 128)).view(4, 3, 16), dim=-1)
        torch.testing.assert_close(z_no_pred, manual, atol=1e-5, rtol=0)
        assert not torch.allclose(z_no_pred, model.embed(batch))
    z.sum().backward()
    assert model.encoders["image"].body[0].weight.grad is not None


class NameAwareEncoder(nn.Module):
    """Adds a per-view-name offset: proves that view names reach the encoder."""

    uses_view_name = True

    def __init__(self) -> None:
        super().__init__()
        self.num_features = 2
        self.calls: list[str | None] = []

    def forward(self, x: torch.Tensor, view_name: str | None = None) -> torch.Tensor:
        self.calls.append(view_name)
        offset = float(len(view_name or ""))
        return torch.stack([x.mean(dim=1), torch.full((x.shape[0],), offset)], dim=1)


def test_view_names_reach_name_aware_encoder_and_modalities_mix():
    register_encoder("toy", "name_aware")(NameAwareEncoder)
    try:
        model = build_model(
            {"toy": {"name": "name_aware"}, "image": {"name": "small_cnn", "width": 4, "num_features": 2}},
            {"hidden_dim": 4, "out_dim": 3},
        )
        batch = ViewBatch(
            [torch.randn(2, 5), torch.randn(2, 3, 16, 16), torch.randn(2, 5)],
            ["toy", "image", "toy"],
            ["C3", "simclr", "Fpz-Cz"],
        )
        feats = model.features(batch)
        assert feats.shape == (2, 3, 2)
        assert model.encoders["toy"].calls == ["C3", "Fpz-Cz"]
        assert feats[:, 0, 1].tolist() == [2.0, 2.0] and feats[:, 2, 1].tolist() == [6.0, 6.0]
        assert model.embed(batch).shape == (2, 3, 3)
        with pytest.raises(ValueError, match="modality 'text' but the model has encoders for: toy, image"):
            model.features(ViewBatch([torch.randn(2, 5)], ["text"], ["caption"]))
    finally:
        ENCODERS._entries.pop("toy/name_aware")


class BatchedNameAwareEncoder(NameAwareEncoder):
    """Same features through the batched hook: one call with every view and its name."""

    def forward_views(self, xs: list[torch.Tensor], view_names: list[str]) -> torch.Tensor:
        self.calls.append(tuple(view_names))
        return torch.stack([NameAwareEncoder.forward(self, x, name) for x, name in zip(xs, view_names)], dim=1)


def test_forward_views_hook_gets_all_views_in_one_call():
    encoder = BatchedNameAwareEncoder()
    model = MultiViewModel({"toy": encoder}, {"toy": Projector(2, 4, 3)})
    batch = ViewBatch([torch.randn(2, 5), torch.randn(2, 5)], ["toy", "toy"], ["C3", "Fpz-Cz"])
    feats = model.features(batch)
    assert feats[:, 1, 1].tolist() == [6.0, 6.0]
    assert encoder.calls[0] == ("C3", "Fpz-Cz") and len(encoder.calls) == 3  # 1 batched + 2 inner


def test_ema_teacher_update_math():
    student = build_model(
        {"image": {"name": "small_cnn", "width": 4}}, {"hidden_dim": 8, "out_dim": 4}, {"hidden_dim": 8}
    )
    teacher = EMATeacher(student)
    assert all(not p.requires_grad for p in teacher.parameters())
    before = {k: v.clone() for k, v in teacher.model.state_dict().items()}
    with torch.no_grad():
        for p in student.parameters():
            p.add_(1.0)
    student.encoders["image"].body[1].running_mean.fill_(3.0)
    teacher.update(student, momentum=0.9)
    after = teacher.model.state_dict()
    s_state = student.state_dict()
    for name, _ in student.named_parameters():
        torch.testing.assert_close(after[name], 0.9 * before[name] + 0.1 * s_state[name])
    assert torch.equal(after["encoders.image.body.1.running_mean"], torch.full((4,), 3.0))
    teacher.update(student, momentum=0.0)
    for name, p in student.named_parameters():
        torch.testing.assert_close(after[name], p.detach())
    # teacher embeddings: no predictor, no grad
    batch = _batch(n=2, k=2, size=16)
    z = teacher.embed(batch)
    assert z.shape == (2, 2, 4) and not z.requires_grad
    with pytest.raises(ValueError, match="momentum must be in"):
        teacher.update(student, 1.5)


def test_cosine_momentum():
    assert cosine_momentum(0, 100, 0.99) == pytest.approx(0.99)
    assert cosine_momentum(50, 100, 0.99) == pytest.approx(0.995)
    assert cosine_momentum(100, 100, 0.99) == pytest.approx(1.0)
    values = [cosine_momentum(s, 10, 0.9) for s in range(11)]
    assert all(b >= a for a, b in zip(values, values[1:]))
    assert math.isclose(cosine_momentum(5, 0, 0.9), 1.0)


def _view_batch_norm_reference(x: torch.Tensor, bn: nn.BatchNorm1d) -> torch.Tensor:
    """Brute force: every view ``x[v]`` ``(n, h)`` normalized by its own biased batch statistics."""
    out = []
    for view in x:
        mean, var = view.mean(dim=0), view.var(dim=0, unbiased=False)
        out.append((view - mean) / torch.sqrt(var + bn.eps) * bn.weight + bn.bias)
    return torch.stack(out)


def test_view_batch_norm_takes_statistics_per_view() -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 6, 4, dtype=torch.float64) * torch.tensor([1.0, 3.0, 0.5], dtype=torch.float64)[:, None, None]
    bn = ViewBatchNorm1d(4).double()
    with torch.no_grad():
        bn.weight.uniform_(0.5, 2.0)
        bn.bias.uniform_(-1.0, 1.0)
    torch.testing.assert_close(bn(x), _view_batch_norm_reference(x, bn))
    # running statistics: the views' mean batch mean and mean unbiased variance, BatchNorm's momentum
    torch.testing.assert_close(bn.running_mean, 0.1 * x.mean(dim=1).mean(dim=0))
    torch.testing.assert_close(bn.running_var, 0.9 + 0.1 * x.var(dim=1, unbiased=True).mean(dim=0))
    assert int(bn.num_batches_tracked) == 1
    # a shift shared by the rows of one view is removed per view, survives BatchNorm over all rows
    shift = torch.tensor([5.0, -2.0, 0.0], dtype=torch.float64)[:, None, None]
    torch.testing.assert_close(bn(x + shift), bn(x))
    plain = nn.BatchNorm1d(4).double()
    assert not torch.allclose(plain((x + shift).reshape(-1, 4)), plain(x.reshape(-1, 4)))
    # eval mode: the running statistics for every view, as plain BatchNorm on the rows
    bn.eval()
    plain.load_state_dict(bn.state_dict())
    plain.eval()
    torch.testing.assert_close(bn(x), plain(x.reshape(-1, 4)).view_as(x))


def test_view_batch_norm_with_one_view_is_batch_norm_and_gradchecks() -> None:
    torch.manual_seed(1)
    x = torch.randn(8, 5, dtype=torch.float64)
    bn, plain = ViewBatchNorm1d(5).double(), nn.BatchNorm1d(5).double()
    torch.testing.assert_close(bn(x[None])[0], plain(x))
    torch.testing.assert_close(bn(x), plain(x))  # (m, h): one view
    torch.testing.assert_close(bn.running_var, plain.running_var)
    x3 = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(ViewBatchNorm1d(3).double(), (x3,))
    with pytest.raises(ValueError, match=r"needs >= 2 items per view"):
        ViewBatchNorm1d(3)(torch.randn(2, 1, 3))
    with pytest.raises(ValueError, match=r"expects \(v, n, h\)"):
        ViewBatchNorm1d(3)(torch.randn(2, 1, 3, 3))


def test_model_with_view_batch_heads_normalizes_each_view_apart() -> None:
    model = build_model(
        {"image": {"name": "small_cnn", "width": 8}},
        {"hidden_dim": 32, "out_dim": 16, "norm": "view_batch"},
        {"hidden_dim": 8, "norm": "view_batch"},
    )
    assert isinstance(model.projectors["image"].net[1], ViewBatchNorm1d)
    batch = _batch(n=4, k=3)
    with torch.no_grad():
        feats = model.features(batch)  # (n, k, f)
        projector = model.projectors["image"]
        lin1, bn, act, lin2 = projector.net
        manual = lin2(act(_view_batch_norm_reference(lin1(feats.transpose(0, 1)), bn)))  # (k, n, d)
        z = model.embed(batch, use_predictor=False)
    torch.testing.assert_close(z, nn.functional.normalize(manual.transpose(0, 1), dim=-1), atol=1e-5, rtol=0)
    predictions, projections, _ = model.embed_online(batch)
    torch.testing.assert_close(projections, z, atol=1e-5, rtol=0)
    assert predictions.shape == (4, 3, 16)
