"""The end-to-end supervised model of ``mvapp experiment psg-modalities`` (SleepFM's comparison, and with
every training label the supervised ceiling).

The same multimodal architecture as the pretrained runs (the config's per-modality encoders, from a run's
initial weights, so from scratch) with a linear head on the **fused** embedding (the mean of the present
modalities' L2-normalized encoder features, :func:`~multiview_app.models.modal_embed.fuse`), trained end
to end with cross-entropy on the labels of one task (stages, or apnea / hypopnea, or arousal per window).
The head and its loss are ``supervised_ce``'s (:class:`~multiview_app.losses.supervised.SupervisedCELoss`,
one view: the fused embedding).

:class:`EndToEnd` is a trainable row of the modality evaluators (``eval.modalities.TrainableRow``): the
staging and event evaluators call :meth:`EndToEnd.fit_predict` per subject fold with the same training
windows (and, few-shot, the same draws) as the frozen-feature rows, so it is scored on the same folds.
Its budget (steps, learning rate, batch) is fixed a priori in the experiment's sizes file, not chosen on
validation subjects; the inputs are the full windows (``eval_views``: no crop, no augmentation).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import default_collate

from ..losses.supervised import SupervisedCELoss
from ..models.modal_embed import fuse

E2E_ROW = "end-to-end CNN"
"""Row name of the end-to-end model in the tables."""
CEILING = "supervised ceiling"
"""What the end-to-end row is when it learns from every training label (the tables say so)."""
PREDICT_BATCH = 64
"""Windows per forward pass when scoring."""


def row_label(table: str, row: str) -> str:
    """The pooled tables' name of ``row`` in ``table``: the end-to-end model trained with every label (any
    table but a few-shot one) is the supervised ceiling, and says so."""
    return f"{row} = {CEILING}" if row == E2E_ROW and "few-shot" not in table else row


def window_inputs(dataset: Any, policy: Any, items: np.ndarray) -> Callable[[np.ndarray], Any]:
    """``windows (m,) -> ViewBatch``: the model input of evaluation windows, window ``w`` being item
    ``items[w]`` of the modality split ``dataset``, collated and assembled by ``policy.eval_views``. Every
    window must have the same modalities (``ValueError`` naming the sets found)."""
    sets = np.unique(np.asarray(dataset.set_ids)[items])
    if sets.size > 1:
        found = [dataset.set_names[s] for s in sets]
        raise ValueError(f"{dataset.cache_dir}: end-to-end training needs one modality set per window, got {found}")

    def inputs(windows: np.ndarray) -> Any:
        return policy.eval_views(default_collate([dataset[int(items[w])] for w in windows]))

    return inputs


def fused_logits(model: nn.Module, head: SupervisedCELoss, batch: Any) -> torch.Tensor:
    """Logits ``(n, c)`` of the head on the fused encoder features of ``batch``."""
    return head.head(fuse(model.features(batch)))


def balanced_weights(targets: np.ndarray) -> np.ndarray:
    """Sampling probability ``(m,)`` of each training window: ``1 / (classes * count of its class)``, so
    every class is drawn equally often: drawn by frequency, the model learns mostly the majority stage
    (its balanced accuracy with every label fell below its few-shot one) and understates the ceiling."""
    counts = np.bincount(targets)
    return 1.0 / (np.count_nonzero(counts) * counts[targets])


def train_model(
    model: nn.Module,
    inputs: Callable[[np.ndarray], Any],
    train: np.ndarray,
    targets: np.ndarray,
    spec: EndToEnd,
    seed: int,
) -> SupervisedCELoss:
    """Train ``model`` and a new linear head on windows ``train (m,)`` with class indices ``targets (m,)``
    for ``spec.steps`` steps of ``spec.batch`` windows drawn class-balanced (:func:`balanced_weights`;
    generator ``seed``, AdamW at ``spec.lr``); returns the head (``model`` is trained in place)."""
    rng = np.random.default_rng(seed)
    weights = balanced_weights(targets)
    torch.manual_seed(seed)
    with torch.no_grad():
        width = model.eval().features(inputs(train[:2])).shape[-1]
    head = SupervisedCELoss(num_classes=int(targets.max()) + 1, in_dim=int(width))
    optimizer = torch.optim.AdamW([*model.parameters(), *head.parameters()], lr=spec.lr)
    model.train()
    for _ in range(spec.steps):
        pick = rng.choice(train.size, min(spec.batch, train.size), replace=False, p=weights)
        z = fuse(model.features(inputs(train[pick])))[:, None]  # (b, 1, f): one view, the fused embedding
        loss = head(z, labels=torch.as_tensor(targets[pick]))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return head


@torch.no_grad()
def predict_proba(model: nn.Module, head: SupervisedCELoss, inputs: Callable[[np.ndarray], Any], windows: np.ndarray):
    """Class probabilities ``(t, c)`` float64 of windows ``windows (t,)`` (model in eval mode)."""
    model.eval()
    parts = [
        torch.softmax(fused_logits(model, head, inputs(windows[i : i + PREDICT_BATCH])), dim=-1)
        for i in range(0, windows.size, PREDICT_BATCH)
    ]
    return torch.cat(parts).double().numpy()


@dataclass
class EndToEnd:
    """A trainable row (``eval.modalities.TrainableRow``): the multimodal model trained end to end.

    Attributes:
        model: the architecture with its initial weights (copied for every fit, never trained itself).
        inputs: ``windows (m,) -> ViewBatch`` (:func:`window_inputs`).
        steps: training steps per fit; lr: AdamW's learning rate; batch: windows per step.
    """

    model: nn.Module
    inputs: Callable[[np.ndarray], Any]
    steps: int
    lr: float
    batch: int

    def fit_predict(
        self, train: np.ndarray, labels: np.ndarray, test: np.ndarray, seed: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Train a fresh copy on windows ``train (m,)`` labelled ``labels (m,)`` and score ``test (t,)``:
        probabilities ``(t, c)`` and the classes ``(c,)`` (the distinct training labels)."""
        classes = np.unique(labels)
        if classes.size < 2:
            raise ValueError(f"{E2E_ROW}: training labels of one class only ({classes.tolist()})")
        model = copy.deepcopy(self.model)
        head = train_model(model, self.inputs, np.asarray(train), np.searchsorted(classes, labels), self, seed)
        return predict_proba(model, head, self.inputs, np.asarray(test)), classes


__all__ = [
    "CEILING",
    "E2E_ROW",
    "EndToEnd",
    "balanced_weights",
    "predict_proba",
    "row_label",
    "train_model",
    "window_inputs",
]
