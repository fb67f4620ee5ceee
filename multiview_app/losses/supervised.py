"""A supervised head for the trainer: cross-entropy of a linear classifier on the encoder's features.

``supervised_ce`` is what the domain evaluators' ERM baseline trains through ``mvapp train`` (the same
Trainer, data order, view policy, schedule and checkpoints as every self-supervised run). The trainer
feeds it the encoder features ``(n, k, f)`` (``input = "features"``: before the projector, unnormalized)
and the batch's class labels ``(n,)`` (``uses_labels``); every view of an item is one labelled image, so
the head sees ``n * k`` images per micro-batch. The head's weights live in the loss module (optimized with
the model, saved in the checkpoint's loss state).
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from . import LOSSES
from .base import LazyStats, MultiViewLoss, check_embeddings


@LOSSES.register("supervised_ce")
class SupervisedCELoss(MultiViewLoss):
    """Linear head ``f -> num_classes`` + cross-entropy over every view of every item (registry name
    ``supervised_ce``; the supervised ERM baseline, no paper).

    Takes encoder features ``(n, k, f)`` (before the projector, unnormalized) and the batch's labels
    ``(n,)``; every view of item ``i`` is one image labelled ``labels[i]``. The head's weights live in the
    loss module. ``last_stats``: ``loss`` and ``accuracy`` (of the batch's ``n * k`` images), device tensors.

    Parameters
    ----------
    num_classes : int, default 10
        Number of classes, >= 2.
    in_dim : int, default 128
        Feature dimension ``f``, >= 1.

    Returns
    -------
    torch.Tensor
        ``loss(z, labels=labels)`` is a 0-d tensor.

    Raises
    ------
    ValueError
        For ``num_classes < 2`` or ``in_dim < 1``; at call, for missing labels, labels not of shape ``(n,)``,
        or features whose last dimension is not ``in_dim``.

    Examples
    --------
    >>> import torch
    >>> from multiview_app.losses import SupervisedCELoss
    >>> _ = torch.manual_seed(0)
    >>> head = SupervisedCELoss(num_classes=3, in_dim=16)
    >>> loss = head(torch.randn(8, 2, 16), labels=torch.randint(0, 3, (8,)))
    >>> loss.shape
    torch.Size([])
    >>> sorted(head.last_stats)
    ['accuracy', 'loss']
    """

    name: ClassVar[str] = "supervised_ce"
    min_views: ClassVar[int] = 1
    gather_across_processes: ClassVar[bool] = False
    input: ClassVar[str] = "features"
    uses_labels: ClassVar[bool] = True

    def __init__(self, num_classes: int = 10, in_dim: int = 128) -> None:
        super().__init__()
        if int(num_classes) < 2 or int(in_dim) < 1:
            raise ValueError(
                f"loss 'supervised_ce': need num_classes >= 2 and in_dim >= 1, got {num_classes}, {in_dim}"
            )
        self.head = nn.Linear(int(in_dim), int(num_classes))

    def forward(self, z: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:  # type: ignore[override]
        """Cross-entropy of ``head(z)`` for features ``z`` ``(n, k, f)`` and ``labels`` ``(n,)`` (every
        view of item i has label ``labels[i]``); returns a 0-d tensor."""
        if labels is None:
            raise ValueError("loss 'supervised_ce' needs the batch's labels (labels=(n,)); the trainer passes them")
        z = check_embeddings(z, min_views=1, min_items=1, check_finite=False)  # the trainer flags NaN / Inf
        n, k, f = z.shape
        if f != self.head.in_features:
            raise ValueError(
                f"loss 'supervised_ce': features have {f} dims, the head expects in_dim={self.head.in_features}"
            )
        if labels.shape != (n,):
            raise ValueError(f"loss 'supervised_ce': labels of shape {tuple(labels.shape)}, expected ({n},)")
        logits = self.head(z.reshape(n * k, f))
        targets = labels.to(z.device).repeat_interleave(k)
        loss = F.cross_entropy(logits, targets)
        self.last_stats = LazyStats(
            {"loss": loss.detach(), "accuracy": (logits.argmax(1) == targets).float().mean().detach()}
        )
        return loss


__all__ = ["SupervisedCELoss"]
