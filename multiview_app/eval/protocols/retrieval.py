"""The ``retrieval`` protocol: image<->text recall@K and zero-shot classification from embeddings.

* image -> text: for each image, all captions ranked by cosine similarity; a hit at K when any of the
  image's own captions is among the top K;
* text -> image: for each caption, all images ranked; a hit at K when its image is in the top K;
* zero-shot (given prompt embeddings): class embedding = normalized mean of its prompts' embeddings;
  prediction = most similar class.

Embeddings come in L2-normalized (the retrieval evaluator embeds with the model's projector).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from . import PROTOCOLS

RECALL_AT: tuple[int, ...] = (1, 5, 10)


def recall_at_k(
    similarity: torch.Tensor, positives: torch.Tensor, ks: Sequence[int] = RECALL_AT, tie_tolerance: float = 1e-6
) -> dict[int, float]:
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


def retrieval_metrics(image_emb: torch.Tensor, text_emb: torch.Tensor, owner: torch.Tensor) -> dict[str, float]:
    """``i2t_R@K`` and ``t2i_R@K`` for image embeddings ``(N, d)``, caption embeddings ``(C, d)``
    and the image index of every caption ``owner (C,)``."""
    similarity = image_emb @ text_emb.T  # (N, C)
    positives = owner[None, :] == torch.arange(len(image_emb))[:, None]
    i2t = recall_at_k(similarity, positives)
    t2i = recall_at_k(similarity.T, positives.T)
    return {**{f"i2t_R@{k}": v for k, v in i2t.items()}, **{f"t2i_R@{k}": v for k, v in t2i.items()}}


def zero_shot_scores(image_emb: torch.Tensor, labels: torch.Tensor, prompt_emb: torch.Tensor) -> float:
    """Accuracy of the nearest class embedding: ``image_emb (N, d)``, ``labels (N,)`` (``-1``:
    unlabelled, not scored), ``prompt_emb (m, t, d)`` = t prompt embeddings of each of m classes.
    NaN when no image is labelled."""
    classes = F.normalize(prompt_emb.mean(dim=1), dim=-1)  # (m, d)
    predicted = (image_emb @ classes.T).argmax(dim=1)
    keep = labels >= 0
    return float((predicted[keep] == labels[keep]).float().mean()) if bool(keep.any()) else float("nan")


@PROTOCOLS.register("retrieval")
def retrieval(
    image_embeddings: torch.Tensor,
    text_embeddings: torch.Tensor,
    caption_owner: torch.Tensor,
    labels: torch.Tensor | None = None,
    prompt_embeddings: torch.Tensor | None = None,
) -> dict[str, Any]:
    """``{"i2t_R@K", "t2i_R@K"[, "zero_shot_acc"]}``: :func:`retrieval_metrics` of image embeddings
    ``(N, d)``, caption embeddings ``(C, d)`` and each caption's image ``caption_owner (C,)``; with
    ``labels (N,)`` and ``prompt_embeddings (m, t, d)`` also :func:`zero_shot_scores`."""
    scores: dict[str, Any] = retrieval_metrics(image_embeddings, text_embeddings, caption_owner)
    if prompt_embeddings is not None:
        if labels is None:
            raise ValueError("retrieval: zero-shot scoring needs the images' labels")
        scores["zero_shot_acc"] = zero_shot_scores(image_embeddings, torch.as_tensor(labels), prompt_embeddings)
    return scores


__all__ = ["RECALL_AT", "recall_at_k", "retrieval", "retrieval_metrics", "zero_shot_scores"]
