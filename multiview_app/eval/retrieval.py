"""``mvapp eval retrieval``: image<->text recall@K on the held-out split and zero-shot classification.

Embeddings are the model's L2-normalized projections (``model.embed``, no predictor), which share
one width ``d`` across modalities (the encoders' features need not). On the test split:

* image -> text: for each image, all captions of the split ranked by cosine similarity; a hit at K
  when any of the image's own captions is among the top K;
* text -> image: for each caption, all images ranked; a hit at K when its image is in the top K;
* zero-shot (when the adapter has class names): class embedding = normalized mean of the prompt
  embeddings (``template.format(name=...)`` for every template); prediction = most similar class.

Rows: the trained model and its random-init reference (``init.safetensors``). Writes
``eval/retrieval.json`` and ``eval/retrieval.md`` (a Markdown table).
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, default_collate

from ..argtypes import positive_int
from ..train.run_io import atomic_write_json, atomic_write_text, load_run
from ..data.batch import to_device
from . import EVALUATORS
from .linear_probe import ENCODER_WEIGHTS

RECALL_AT: tuple[int, ...] = (1, 5, 10)
DEFAULT_TEMPLATES: tuple[str, ...] = ("a handwritten digit {name}", "a picture of the number {name}")


def recall_at_k(similarity: torch.Tensor, positives: torch.Tensor, ks: Sequence[int] = RECALL_AT,
                tie_tolerance: float = 1e-6) -> dict[int, float]:
    """Recall@K of queries against candidates, expected over random tie-breaking.

    ``similarity (q, c)``; ``positives (q, c)`` bool, True where candidate c is a correct match of
    query q (each query needs at least one). For a query whose best positive has ``g`` negatives
    scoring higher and ``t`` negatives tied with it (within ``tie_tolerance``), the best positive's
    rank is uniform on ``g .. g + t``, so the hit probability at K is ``clamp((K - g) / (t + 1), 0, 1)``
    (identical captions of different images tie exactly; counting them as misses or as hits would
    bias the recall).
    """
    if similarity.shape != positives.shape:
        raise ValueError(f"similarity {tuple(similarity.shape)} and positives {tuple(positives.shape)} differ")
    if not bool(positives.any(dim=1).all()):
        raise ValueError("every query needs at least one positive candidate")
    similarity = similarity.double()
    best_positive = similarity.masked_fill(~positives, float("-inf")).amax(dim=1, keepdim=True)
    negatives = similarity.masked_fill(positives, float("-inf"))
    greater = (negatives > best_positive + tie_tolerance).sum(dim=1).double()
    tied = ((negatives - best_positive).abs() <= tie_tolerance).sum(dim=1).double()
    return {k: float(((k - greater) / (tied + 1)).clamp(0, 1).mean()) for k in ks}


@torch.no_grad()
def embed_split(model: torch.nn.Module, adapter: Any, policy: Any, split: str, batch_size: int,
                device: str) -> tuple[torch.Tensor, torch.Tensor, list[str], torch.Tensor]:
    """Image embeddings ``(N, d)``, every caption's embedding ``(C, d)``, the captions, and the
    image index of each caption ``(C,)``."""
    from ..data.text.pairs import split_captions

    loader = DataLoader(adapter.split(split), batch_size=batch_size, shuffle=False, collate_fn=default_collate)
    images: list[torch.Tensor] = []
    captions: list[str] = []
    owner: list[int] = []
    n_images = 0
    for raw in loader:
        raw = to_device(raw, torch.device(device))
        images.append(model.embed(policy.eval_image_views(raw), use_predictor=False)[:, 0].float().cpu())
        for i, joined in enumerate(raw["captions"]):
            own = split_captions(joined)
            captions.extend(own)
            owner.extend([n_images + i] * len(own))
        n_images += len(raw["captions"])
    if not images:
        raise ValueError(f"split '{split}' of {type(adapter).__name__} is empty; nothing to evaluate")
    text = [model.embed(policy.text_batch(captions[s : s + batch_size], device), use_predictor=False)[:, 0].float().cpu()
            for s in range(0, len(captions), batch_size)]
    return torch.cat(images), torch.cat(text), captions, torch.tensor(owner)


@torch.no_grad()
def zero_shot_accuracy(model: torch.nn.Module, policy: Any, image_emb: torch.Tensor, labels: torch.Tensor,
                       class_names: Sequence[str], templates: Sequence[str], device: str) -> float:
    """Accuracy of nearest class-prompt embedding; ``image_emb (N, d)``, ``labels (N,)``."""
    prompts = [t.format(name=name) for name in class_names for t in templates]
    emb = model.embed(policy.text_batch(prompts, device), use_predictor=False)[:, 0].float().cpu()
    classes = F.normalize(emb.view(len(class_names), len(templates), -1).mean(dim=1), dim=-1)  # (m, d)
    predicted = (image_emb @ classes.T).argmax(dim=1)
    keep = labels >= 0
    return float((predicted[keep] == labels[keep]).float().mean()) if bool(keep.any()) else float("nan")


def retrieval_metrics(image_emb: torch.Tensor, text_emb: torch.Tensor, owner: torch.Tensor) -> dict[str, float]:
    """``i2t_R@K`` and ``t2i_R@K`` for image embeddings ``(N, d)``, caption embeddings ``(C, d)``
    and the image index of every caption ``owner (C,)``."""
    similarity = image_emb @ text_emb.T  # (N, C)
    positives = owner[None, :] == torch.arange(len(image_emb))[:, None]
    i2t = recall_at_k(similarity, positives)
    t2i = recall_at_k(similarity.T, positives.T)
    return {**{f"i2t_R@{k}": v for k, v in i2t.items()}, **{f"t2i_R@{k}": v for k, v in t2i.items()}}


def chance_levels(owner: torch.Tensor, n_images: int, n_classes: int = 0, ks: Sequence[int] = RECALL_AT) -> dict[str, float]:
    """Expected scores of a random ranking (and of a random class), the row every result is read
    against: image -> text R@K = mean over images of ``1 - prod_{j<K} (C - c_i - j) / (C - j)`` (c_i own
    captions of C); text -> image R@K = ``min(K, N) / N`` (one own image of N); zero-shot ``1 / classes``."""
    n_captions = len(owner)
    own = torch.bincount(owner, minlength=n_images).double()  # (N,) captions per image
    chance: dict[str, float] = {}
    for k in ks:
        miss = torch.ones(n_images, dtype=torch.float64)
        for j in range(min(k, n_captions)):
            miss *= ((n_captions - own - j) / (n_captions - j)).clamp_min(0.0)
        chance[f"i2t_R@{k}"] = float((1.0 - miss).mean())
    chance.update({f"t2i_R@{k}": min(k, n_images) / n_images for k in ks})
    if n_classes:
        chance["zero_shot_acc"] = 1.0 / n_classes
    return chance


def run_retrieval(run_dir: str | Path, *, split: str = "test", batch_size: int | None = None,
                  templates: Sequence[str] = DEFAULT_TEMPLATES, device: str = "cpu") -> dict[str, Any]:
    """Evaluate ``run_dir`` (trained and random-init model); write ``eval/retrieval.{json,md}``."""
    from ..data.adapters import build_adapter
    from ..data.views import build_view_policy

    run_dir = Path(run_dir)
    cfg, _ = load_run(run_dir, "init")
    if cfg.views.policy != "pairs":
        raise ValueError(f"retrieval needs image-text runs (views.policy: pairs), {run_dir} uses '{cfg.views.policy}'")
    adapter = build_adapter(cfg.data.adapter, cfg.data.options)
    if split not in adapter.splits:
        raise ValueError(f"data adapter '{cfg.data.adapter}' has no split '{split}' (splits: {', '.join(adapter.splits)})")
    policy = build_view_policy(cfg.views.policy, cfg.views.k, cfg.views.options, adapter)
    batch_size = batch_size or cfg.eval.batch_size
    labels = adapter.split(split).labels
    rows: dict[str, dict[str, float]] = {}
    sizes: dict[str, int] = {}
    for label, weights in ENCODER_WEIGHTS.items():
        _, model = load_run(run_dir, weights)
        model.eval().to(device)
        image_emb, text_emb, captions, owner = embed_split(model, adapter, policy, split, batch_size, device)
        rows[label] = retrieval_metrics(image_emb, text_emb, owner)
        if adapter.class_names:
            rows[label]["zero_shot_acc"] = zero_shot_accuracy(
                model, policy, image_emb, labels, adapter.class_names, templates, device)
        sizes = {"images": len(image_emb), "captions": len(captions)}
        chance = chance_levels(owner, len(image_emb), len(adapter.class_names or ()))
    result = {
        "evaluator": "retrieval", "run": str(run_dir), "loss": cfg.loss.name, "k": cfg.views.k,
        "text_views": policy.text_views, "split": split, **sizes,
        "truncated_captions": policy.tokenizer.truncated, "templates": list(templates), "results": rows,
        "chance": chance,
    }
    atomic_write_json(run_dir / "eval" / "retrieval.json", result)
    atomic_write_text(run_dir / "eval" / "retrieval.md", format_table(result) + "\n")
    return result


def format_table(result: dict[str, Any]) -> str:
    """Markdown table of a retrieval result (one row per model, then chance), and a line naming the
    split and its size."""
    metrics = list(next(iter(result["results"].values())))
    rows = dict(result["results"])
    if "chance" in result:
        rows["chance (random ranking)"] = result["chance"]
    lines = ["| model | " + " | ".join(metrics) + " |", "|---|" + "---:|" * len(metrics)]
    for name, scores in rows.items():
        lines.append(f"| {name} | " + " | ".join(f"{scores[m]:.3f}" if m in scores else "" for m in metrics) + " |")
    if "images" in result:
        lines.append(f"\n{result['split']} split: {result['images']} images, {result['captions']} captions "
                     "(every caption of the split ranked for each image, every image for each caption)")
    return "\n".join(lines)


@EVALUATORS.register("retrieval")
class Retrieval:
    """Image<->text recall@1/5/10 and zero-shot accuracy; trained vs random-init model."""

    kind = "retrieval"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--split", default="test", help="held-out split")
        parser.add_argument("--batch-size", type=positive_int, default=None, help="embedding batch (default: eval.batch_size)")
        parser.add_argument("--template", action="append", default=None, dest="templates",
                            help="zero-shot prompt with {name} (repeatable; default: two digit prompts)")
        parser.add_argument("--device", default="cpu", help="torch device")

    def run(self, run_dir: str | Path, args: argparse.Namespace) -> dict[str, Any]:
        templates = args.templates or list(DEFAULT_TEMPLATES)
        bad = [t for t in templates if "{name}" not in t]
        if bad:
            raise ValueError(f"--template must contain '{{name}}', got {bad[0]!r}")
        result = run_retrieval(run_dir, split=args.split, batch_size=args.batch_size, templates=templates, device=args.device)
        print(format_table(result))
        return result


__all__ = ["RECALL_AT", "Retrieval", "chance_levels", "recall_at_k", "retrieval_metrics", "run_retrieval", "zero_shot_accuracy"]
