"""The papers' sleep-staging classifier (M3G App. B / Brüsch et al. 2023): a learned linear
combination across channels followed by a linear classifier, trained with AdamW and early
stopping on a validation set.

Input: per-channel features ``(N, C, F)`` (e.g. encoder outputs pooled into 4 time bins,
``F = out_dim * 4``), standardized with training statistics per (channel, feature).
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn

MAX_EPOCHS = 40
"""The papers fine-tune the classifier for at most 40 epochs."""
PATIENCE = 5
BATCH_SIZE = 64


class ChannelCombinationClassifier(nn.Module):
    """``(n, C, F)`` -> logits ``(n, classes)``: ``z = sum_c w_c x_c + b`` (one weight per channel,
    shared by all features), then a linear classifier on ``z (n, F)``."""

    def __init__(self, channels: int, features: int, classes: int) -> None:
        super().__init__()
        self.combine = nn.Linear(channels, 1)
        self.classify = nn.Linear(features, classes)
        nn.init.constant_(self.combine.weight, 1.0 / channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classify(self.combine(x.transpose(1, 2)).squeeze(-1))


class FittedChannelClassifier:
    """A trained :class:`ChannelCombinationClassifier` with its standardization; ``predict``."""

    def __init__(
        self, model: ChannelCombinationClassifier, mean: np.ndarray, std: np.ndarray, classes: np.ndarray, epochs: int
    ) -> None:
        self.model, self.mean, self.std, self.classes, self.epochs = model, mean, std, classes, epochs

    def logits(self, x: np.ndarray) -> torch.Tensor:
        with torch.no_grad():
            return self.model(torch.from_numpy(((np.nan_to_num(x) - self.mean) / self.std).astype(np.float32)))

    def predict(self, x: np.ndarray) -> np.ndarray:
        """``x (N, C, F)`` -> predicted labels ``(N,)``."""
        return self.classes[self.logits(x).argmax(dim=1).numpy()]


def fit_channel_classifier(
    x: np.ndarray,
    y: np.ndarray,
    x_val: np.ndarray | None,
    y_val: np.ndarray | None,
    *,
    lr: float,
    weight_decay: float = 1e-2,
    seed: int = 0,
    epochs: int | None = None,
) -> FittedChannelClassifier:
    """AdamW on cross-entropy, mini-batches of 64, at most ``MAX_EPOCHS`` epochs; stops when the
    validation loss has not improved for ``PATIENCE`` epochs and keeps the best epoch's weights.

    ``x (N, C, F)``, ``y (N,)``; validation ``x_val (M, C, F)``, ``y_val (M,)`` (labels the training
    set lacks are ignored in the validation loss). Without validation windows (``x_val`` None) it trains
    exactly ``epochs`` epochs (chosen beforehand, e.g. by inner cross-validation) and keeps the last.
    """
    if x_val is None and epochs is None:
        raise ValueError("channel classifier: without validation windows, give the number of epochs")
    if x.ndim != 3 or len(x) != len(y) or len(x) == 0:
        raise ValueError(f"channel classifier: expected features (N, C, F) and labels (N,), got {x.shape}, {y.shape}")
    if len(np.unique(y)) < 2:
        raise ValueError(f"channel classifier: need >= 2 classes in the training labels, got {np.unique(y).tolist()}")
    classes = np.unique(y)
    index = {int(c): i for i, c in enumerate(classes)}
    x = np.nan_to_num(x)
    mean = x.mean(axis=0, keepdims=True)
    std = x.std(axis=0, keepdims=True) + 1e-6
    torch_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    model = ChannelCombinationClassifier(x.shape[1], x.shape[2], len(classes))
    torch.random.set_rng_state(torch_state)
    xt = torch.from_numpy(((x - mean) / std).astype(np.float32))
    yt = torch.tensor([index[int(c)] for c in y])
    if x_val is None:
        x_val, y_val = x[:0], y[:0]
    keep = np.isin(y_val, classes)
    xv = torch.from_numpy(((np.nan_to_num(x_val[keep]) - mean) / std).astype(np.float32))
    yv = torch.tensor([index[int(c)] for c in y_val[keep]])
    best_epoch = _train(model, (xt, yt), (xv, yv), lr, weight_decay, seed, epochs)
    return FittedChannelClassifier(model, mean, std, classes, best_epoch)


def _train(
    model: nn.Module,
    train: tuple[torch.Tensor, torch.Tensor],
    val: tuple[torch.Tensor, torch.Tensor],
    lr: float,
    weight_decay: float,
    seed: int,
    epochs: int | None,
) -> int:
    """Train ``model`` in place; early stopping on ``val`` unless ``epochs`` is given (then exactly that many,
    keeping the last). Leaves the kept weights loaded, in eval mode; returns their epoch."""
    (xt, yt), (xv, yv) = train, val
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    best, best_state, best_epoch, since = float("inf"), copy.deepcopy(model.state_dict()), 0, 0
    for epoch in range(1, (epochs or MAX_EPOCHS) + 1):
        model.train()
        for batch in torch.randperm(len(xt), generator=generator).split(BATCH_SIZE):
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(xt[batch]), yt[batch]).backward()
            optimizer.step()
        model.eval()
        if epochs is not None:  # a fixed number of epochs: keep the last
            best_state, best_epoch = copy.deepcopy(model.state_dict()), epoch
            continue
        with torch.no_grad():
            val_loss = float(nn.functional.cross_entropy(model(xv), yv)) if len(yv) else 0.0
        if val_loss < best - 1e-6:
            best, best_state, best_epoch, since = val_loss, copy.deepcopy(model.state_dict()), epoch, 0
        else:
            since += 1
            if since >= PATIENCE:
                break
    model.load_state_dict(best_state)
    model.eval()
    return best_epoch
