"""``mvapp eval retrieval``: image<->text recall@K on the held-out split and zero-shot classification.

Embeddings are the model's L2-normalized projections (``model.embed``, no predictor), which share
one width ``d`` across modalities (the encoders' features need not). The maths is the ``retrieval``
protocol (:mod:`multiview_app.eval.protocols.retrieval`), on the test split: image -> text and
text -> image recall@K, and zero-shot classification (when the adapter has class names; prompts
``template.format(name=...)`` for every template).

Rows: the trained model and its random-init reference (``init.safetensors``). Writes
``eval/retrieval.json`` and ``eval/retrieval.md`` (a Markdown table).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, default_collate

from ..argtypes import positive_int
from ..data.batch import to_device
from ..train.run_io import atomic_write_json, atomic_write_text, load_run
from . import Evaluator, register_evaluator
from .linear_probe import ENCODER_WEIGHTS
from .protocols import get_protocol
from .protocols.retrieval import RECALL_AT, recall_at_k, retrieval_metrics, zero_shot_scores

DEFAULT_TEMPLATES: tuple[str, ...] = ("a handwritten digit {name}", "a picture of the number {name}")


@torch.no_grad()
def embed_split(
    model: torch.nn.Module, adapter: Any, policy: Any, split: str, batch_size: int, device: str
) -> tuple[torch.Tensor, torch.Tensor, list[str], torch.Tensor]:
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
    text = [
        model.embed(policy.text_batch(captions[s : s + batch_size], device), use_predictor=False)[:, 0].float().cpu()
        for s in range(0, len(captions), batch_size)
    ]
    return torch.cat(images), torch.cat(text), captions, torch.tensor(owner)


@torch.no_grad()
def zero_shot_accuracy(
    model: torch.nn.Module,
    policy: Any,
    image_emb: torch.Tensor,
    labels: torch.Tensor,
    class_names: Sequence[str],
    templates: Sequence[str],
    device: str,
) -> float:
    """Accuracy of nearest class-prompt embedding; ``image_emb (N, d)``, ``labels (N,)``."""
    return zero_shot_scores(image_emb, labels, prompt_embeddings(model, policy, class_names, templates, device))


@torch.no_grad()
def prompt_embeddings(
    model: torch.nn.Module, policy: Any, class_names: Sequence[str], templates: Sequence[str], device: str
) -> torch.Tensor:
    """``(m, t, d)`` embeddings of ``template.format(name=...)`` for every class name and template."""
    prompts = [t.format(name=name) for name in class_names for t in templates]
    emb = model.embed(policy.text_batch(prompts, device), use_predictor=False)[:, 0].float().cpu()
    return emb.view(len(class_names), len(templates), -1)


def chance_levels(
    owner: torch.Tensor, n_images: int, n_classes: int = 0, ks: Sequence[int] = RECALL_AT
) -> dict[str, float]:
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


def run_retrieval(
    run_dir: str | Path,
    *,
    split: str = "test",
    batch_size: int | None = None,
    templates: Sequence[str] = DEFAULT_TEMPLATES,
    device: str = "cpu",
) -> dict[str, Any]:
    """Evaluate ``run_dir`` (trained and random-init model); write ``eval/retrieval.{json,md}``."""
    from ..data.adapters import build_adapter
    from ..data.views import build_view_policy

    run_dir = Path(run_dir)
    cfg, _ = load_run(run_dir, "init")
    if cfg.views.policy != "pairs":
        raise ValueError(f"retrieval needs image-text runs (views.policy: pairs), {run_dir} uses '{cfg.views.policy}'")
    adapter = build_adapter(cfg.data.adapter, cfg.data.options)
    if split not in adapter.splits:
        raise ValueError(
            f"data adapter '{cfg.data.adapter}' has no split '{split}' (splits: {', '.join(adapter.splits)})"
        )
    policy = build_view_policy(cfg.views.policy, cfg.views.k, cfg.views.options, adapter)
    batch_size = batch_size or cfg.eval.batch_size
    labels = adapter.split(split).labels
    rows: dict[str, dict[str, float]] = {}
    sizes: dict[str, int] = {}
    for label, weights in ENCODER_WEIGHTS.items():
        _, model = load_run(run_dir, weights)
        model.eval().to(device)
        image_emb, text_emb, captions, owner = embed_split(model, adapter, policy, split, batch_size, device)
        prompts = (
            prompt_embeddings(model, policy, adapter.class_names, templates, device) if adapter.class_names else None
        )
        rows[label] = get_protocol("retrieval")(image_emb, text_emb, owner, labels=labels, prompt_embeddings=prompts)
        sizes = {"images": len(image_emb), "captions": len(captions)}
        chance = chance_levels(owner, len(image_emb), len(adapter.class_names or ()))
    result = {
        "evaluator": "retrieval",
        "run": str(run_dir),
        "loss": cfg.loss.name,
        "k": cfg.views.k,
        "text_views": policy.text_views,
        "split": split,
        **sizes,
        "truncated_captions": policy.tokenizer.truncated,
        "templates": list(templates),
        "results": rows,
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
        lines.append(
            f"\n{result['split']} split: {result['images']} images, {result['captions']} captions "
            "(every caption of the split ranked for each image, every image for each caption)"
        )
    return "\n".join(lines)


@register_evaluator
class Retrieval(Evaluator):
    """Image<->text recall@1/5/10 and zero-shot accuracy; trained vs random-init model."""

    name = "retrieval"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--split", default="test", help="held-out split")
        parser.add_argument(
            "--batch-size", type=positive_int, default=None, help="embedding batch (default: eval.batch_size)"
        )
        parser.add_argument(
            "--template",
            action="append",
            default=None,
            dest="templates",
            help="zero-shot prompt with {name} (repeatable; default: two digit prompts)",
        )
        parser.add_argument("--device", default="cpu", help="torch device")

    def run(self, run_dir: str | Path, args: argparse.Namespace) -> dict[str, Any]:
        templates = args.templates or list(DEFAULT_TEMPLATES)
        bad = [t for t in templates if "{name}" not in t]
        if bad:
            raise ValueError(f"--template must contain '{{name}}', got {bad[0]!r}")
        result = run_retrieval(
            run_dir, split=args.split, batch_size=args.batch_size, templates=templates, device=args.device
        )
        print(format_table(result))
        return result


__all__ = [
    "RECALL_AT",
    "Retrieval",
    "chance_levels",
    "recall_at_k",
    "retrieval_metrics",
    "run_retrieval",
    "zero_shot_accuracy",
]
