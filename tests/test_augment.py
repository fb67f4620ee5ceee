"""Batched per-sample augmentation: op equivalence with torchvision v2, randomness, determinism, views."""

from __future__ import annotations

import pytest
import torch
import torchvision.transforms.v2.functional as TF
from torch.utils.data import default_collate

from multiview_app.data.adapters import build_adapter
from multiview_app.data.images import augment as A
from multiview_app.data.views import build_view_policy, items_per_batch

N = 6


@pytest.fixture(scope="module")
def images() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.rand(N, 3, 20, 24, generator=g)


@pytest.fixture(scope="module")
def digits():
    return build_adapter("digits", {"load_size": 32})


def _reference(x: torch.Tensor, fn, values: torch.Tensor) -> torch.Tensor:
    return torch.stack([fn(x[i], float(values[i])) for i in range(len(x))])


@pytest.mark.parametrize(
    "ours, theirs, values",
    [
        (A.adjust_brightness, TF.adjust_brightness, [0.0, 0.5, 0.9, 1.0, 1.3, 1.8]),
        (A.adjust_contrast, TF.adjust_contrast, [0.0, 0.5, 0.9, 1.0, 1.3, 1.8]),
        (A.adjust_saturation, TF.adjust_saturation, [0.0, 0.5, 0.9, 1.0, 1.3, 1.8]),
        (A.adjust_hue, TF.adjust_hue, [-0.5, -0.2, -0.01, 0.0, 0.13, 0.5]),
    ],
)
def test_color_ops_match_torchvision_per_sample(images, ours, theirs, values):
    factors = torch.tensor(values)
    out = ours(images, factors)
    ref = _reference(images, theirs, factors)
    assert out.shape == images.shape
    torch.testing.assert_close(out, ref, atol=2e-6, rtol=0)


def test_hsv_round_trip(images):
    torch.testing.assert_close(A.hsv_to_rgb(A.rgb_to_hsv(images)), images, atol=2e-6, rtol=0)


def test_grayscale_solarize_blur_match_torchvision(images):
    torch.testing.assert_close(
        A.grayscale(images).expand_as(images),
        torch.stack([TF.rgb_to_grayscale(x, 3) for x in images]),
        atol=1e-6,
        rtol=0,
    )
    torch.testing.assert_close(A.solarize(images, 0.5), torch.stack([TF.solarize(x, 0.5) for x in images]))
    sigma = torch.tensor([0.1, 0.4, 0.8, 1.2, 1.6, 2.0])
    out = A.gaussian_blur(images, 5, sigma)
    ref = torch.stack([TF.gaussian_blur(x, [5, 5], [float(s), float(s)]) for x, s in zip(images, sigma)])
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=0)
    # different sigmas really give different blurs
    assert not torch.allclose(out[0], A.gaussian_blur(images[:1], 5, sigma[-1:])[0], atol=1e-3)


def test_resized_crop_matches_torchvision(images):
    g = torch.Generator().manual_seed(3)
    boxes = A.sample_crop_boxes(N, 20, 24, (0.08, 1.0), (3 / 4, 4 / 3), g)
    assert (boxes[:, 0] >= 0).all() and (boxes[:, 2] <= 24).all() and (boxes[:, 3] <= 20).all()
    assert (boxes[:, 2] > boxes[:, 0]).all() and (boxes[:, 3] > boxes[:, 1]).all()

    def reference(size: int, antialias: bool) -> torch.Tensor:
        return torch.stack(
            [
                TF.resized_crop(
                    x, int(b[1]), int(b[0]), int(b[3] - b[1]), int(b[2] - b[0]), [size, size], antialias=antialias
                )
                for x, b in zip(images, boxes)
            ]
        )

    # enlarging (every box <= 24 px -> 32 px): identical to torchvision's bilinear resized_crop
    torch.testing.assert_close(A.resized_crop(images, boxes, 32), reference(32, False), atol=1e-5, rtol=0)
    # the whole image at its own size is the identity
    square = images[..., :20, :20].contiguous()
    full = torch.tensor([[0.0, 0.0, 20.0, 20.0]]).repeat(N, 1)
    torch.testing.assert_close(A.resized_crop(square, full, 20), square, atol=1e-5, rtol=0)
    # shrinking (boxes larger than 6 px): box-filter antialias, close to torchvision's antialias
    small = A.resized_crop(images, boxes, 6)
    shrunk = ((boxes[:, 2] - boxes[:, 0]) > 6) | ((boxes[:, 3] - boxes[:, 1]) > 6)
    assert shrunk.any()
    diff = (small - reference(6, True)).abs()[shrunk]
    assert diff.mean() < 0.05, diff.mean()
    # ... and smoother than plain bilinear subsampling of the same random-noise image
    assert small[shrunk].std() < reference(6, False)[shrunk].std()


def test_crop_boxes_follow_scale_and_ratio():
    g = torch.Generator().manual_seed(0)
    boxes = A.sample_crop_boxes(2000, 64, 64, (0.2, 0.5), (3 / 4, 4 / 3), g)
    w, h = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    area = w * h / 64**2
    assert area.min() > 0.17 and area.max() < 0.54  # rounding to whole pixels
    assert (w / h).min() > 0.7 and (w / h).max() < 1.43
    assert boxes[:, 0].unique().numel() > 10  # offsets vary per sample


@pytest.mark.parametrize("stack", ["simclr", "byol_global1", "byol_global2"])
def test_full_stack_matches_torchvision_composition(images, stack):
    spec = A.STACKS.get(stack)
    g = torch.Generator().manual_seed(7)
    params = A.sample_params(spec, N, 20, 20, g)
    params.boxes = torch.tensor([[0.0, 0.0, 20.0, 20.0]]).repeat(N, 1)  # identity crop: compare the rest
    x = images[..., :20, :20]
    out = A.apply_params(x, spec, params, 20)
    k = A.blur_kernel_size(20)
    ops = [TF.adjust_brightness, TF.adjust_contrast, TF.adjust_saturation, TF.adjust_hue]
    for i in range(N):
        p = params.select(i)
        y = x[i]
        if p.flip.item():
            y = TF.horizontal_flip(y)
        if p.jitter.item():
            values = [p.brightness.item(), p.contrast.item(), p.saturation.item(), p.hue.item()]
            for op_id in p.order[0].tolist():
                y = ops[op_id](y, values[op_id])
        if p.gray.item():
            y = TF.rgb_to_grayscale(y, 3)
        if p.blur.item():
            y = TF.gaussian_blur(y, [k, k], [p.sigma.item()] * 2)
        if p.solarize.item():
            y = TF.solarize(y, spec.solarize_threshold)
        y = TF.normalize(y, list(A.IMAGENET_MEAN), list(A.IMAGENET_STD))
        torch.testing.assert_close(out[i], y, atol=1e-5, rtol=0, msg=f"{stack} sample {i}")


def test_stack_probabilities_per_paper():
    g1, g2, sim = (A.STACKS.get(s) for s in ("byol_global1", "byol_global2", "simclr"))
    assert (g1.blur_p, g1.solarize_p, g2.blur_p, g2.solarize_p, sim.blur_p) == (1.0, 0.0, 0.1, 0.2, 0.5)
    assert (sim.brightness, sim.contrast, sim.saturation, sim.hue) == (0.8, 0.8, 0.8, 0.2)
    assert (g1.brightness, g1.contrast, g1.saturation, g1.hue) == (0.4, 0.4, 0.2, 0.1)
    assert A.blur_kernel_size(224) == 23 and A.blur_kernel_size(32) == 3
    p = A.sample_params(g2, 4000, 32, 32, torch.Generator().manual_seed(0))
    assert abs(p.solarize.float().mean().item() - 0.2) < 0.03
    assert abs(p.jitter.float().mean().item() - 0.8) < 0.03
    assert abs(p.gray.float().mean().item() - 0.2) < 0.03
    assert len({tuple(o) for o in p.order.tolist()}) == 24  # every jitter order occurs


def test_per_sample_randomness_and_seed_determinism(digits):
    one = digits.split("train")[0]["x"]
    batch = one.unsqueeze(0).repeat(8, 1, 1, 1)  # the same image 8 times
    a = A.augment(batch, "simclr", 32, torch.Generator().manual_seed(1))
    b = A.augment(batch, "simclr", 32, torch.Generator().manual_seed(1))
    c = A.augment(batch, "simclr", 32, torch.Generator().manual_seed(2))
    assert a.shape == (8, 3, 32, 32) and a.dtype == torch.float32
    torch.testing.assert_close(a, b)
    assert not torch.allclose(a, c)
    # same input, different per-sample parameters -> all 8 views differ pairwise
    flat = a.flatten(1)
    dist = torch.cdist(flat, flat)
    assert (dist + torch.eye(8) * 1e3).min() > 1e-2


def test_test_stack_is_deterministic_and_normalized(digits):
    raw = default_collate([digits.split("test")[i] for i in range(4)])
    x1 = A.augment(raw["x"], "test", 24)
    x2 = A.augment(raw["x"], "test", 24, torch.Generator().manual_seed(5))
    assert x1.shape == (4, 3, 24, 24)
    torch.testing.assert_close(x1, x2)
    # background of digits is 0 -> normalized value -mean/std
    assert x1[:, 0].min().item() == pytest.approx(-0.485 / 0.229, abs=1e-4)


def test_augment_policy_views(digits):
    raw = default_collate([digits.split("train")[i] for i in range(5)])
    policy = build_view_policy("augment", 3, {"image_size": 16}, digits)
    vb = policy.train_views(raw, torch.Generator().manual_seed(0))
    assert vb.k == 3 and vb.n == 5
    assert vb.view_names == ["byol_global1", "byol_global2", "simclr"]
    assert vb.modalities == ["image"] * 3
    assert all(v.shape == (5, 3, 16, 16) for v in vb.views)
    assert torch.equal(vb.labels, raw["label"])
    assert vb.meta["index"].tolist() == [0, 1, 2, 3, 4]
    assert not torch.allclose(vb.views[0], vb.views[2])
    ev = policy.eval_views(raw)
    assert ev.k == 1 and ev.view_names == ["test"] and ev.views[0].shape == (5, 3, 16, 16)
    same = build_view_policy("augment", 2, {"stacks": "simclr"}, digits)
    assert same.stacks == ["simclr", "simclr"]
    poly = build_view_policy("augment", 6, {}, digits)
    assert poly.stacks == ["simclr"] * 6
    assert poly.specs[0] == A.STACKS.get("simclr")
    gentle = build_view_policy(
        "augment", 2, {"stacks": "simclr", "crop_scale": [0.5, 1.0], "jitter_strength": 0.5}, digits
    )
    assert gentle.specs[0].crop_scale == (0.5, 1.0)
    assert (gentle.specs[0].brightness, gentle.specs[0].hue) == (0.4, 0.1)
    vb = gentle.train_views(raw, torch.Generator().manual_seed(0))
    assert vb.views[0].shape == (5, 3, 32, 32)


def test_view_policy_errors(digits):
    with pytest.raises(ValueError, match="views.k must be an integer >= 1"):
        build_view_policy("augment", 0, {}, digits)
    with pytest.raises(ValueError, match="unknown stack.*valid: byol_global1, byol_global2, mild, simclr, test"):
        build_view_policy("augment", 2, {"stacks": ["simclr", "simclrr"]}, digits)
    with pytest.raises(ValueError, match="lists 1 stacks but views.k = 2"):
        build_view_policy("augment", 2, {"stacks": ["simclr"]}, digits)
    with pytest.raises(
        ValueError,
        match=r"views\.options\.img_size: unknown option; allowed: stacks, image_size, crop_scale, jitter_strength",
    ):
        build_view_policy("augment", 2, {"img_size": 32}, digits)
    with pytest.raises(ValueError, match=r"views\.options\.crop_scale: .*expected 0 < low <= high <= 1"):
        build_view_policy("augment", 2, {"crop_scale": [0.9, 0.2]}, digits)
    with pytest.raises(ValueError, match="unknown view policy 'augmnt'"):
        build_view_policy("augmnt", 2, {}, digits)

    class FakeEEG:
        modality = "eeg"

    with pytest.raises(ValueError, match="works on 'image' data but .* provides 'eeg'"):
        build_view_policy("augment", 2, {}, FakeEEG())


def test_items_per_batch():
    assert items_per_batch("growing", 64, 4) == 64
    assert items_per_batch("fixed", 64, 4) == 16
    assert items_per_batch("fixed", 10, 3) == 3
    with pytest.raises(ValueError, match="gives 1 item"):
        items_per_batch("fixed", 7, 4)
    with pytest.raises(ValueError, match="unknown batch mode 'grow'"):
        items_per_batch("grow", 8, 2)


@pytest.mark.parametrize("stack", ["simclr", "byol_global1", "byol_global2", "mild"])
def test_masked_rows_equal_gathered_rows_without_host_reads(stack: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Off the CPU the per-sample choices (jitter order, shrinking crops) are masks over every row
    (``gathers_rows``: false); forced here on the CPU, they give the CPU's gathered-rows values bit for
    bit and read nothing back to the host (no conversion, no ``nonzero``)."""
    from _host_reads import HostReads

    images = torch.randint(0, 256, (16, 3, 40, 40), generator=torch.Generator().manual_seed(1), dtype=torch.uint8)
    gathered = A.augment(images, stack, 24, torch.Generator().manual_seed(5))  # 40 px -> 24 px: some crops shrink
    monkeypatch.setattr(A, "gathers_rows", lambda device: False)
    reads = HostReads()
    reads.patch(monkeypatch, nonzero=True)
    masked = A.augment(images, stack, 24, torch.Generator().manual_seed(5))
    assert not reads.seen, "\n".join(reads.seen)
    torch.testing.assert_close(masked, gathered, rtol=0, atol=0)
