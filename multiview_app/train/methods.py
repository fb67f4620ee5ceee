"""Training methods: what one micro-batch's forward pass and loss are, and what happens after the
optimizer step. The :class:`~multiview_app.train.trainer.Trainer` stays generic and calls the method.

* ``plain``: ``z = model.embed(batch)`` ``(n, k, d)`` (or ``model.features`` for a loss whose
  ``input`` is ``"features"``) -> ``loss(z)``.
* ``ema_teacher`` (M3G Sec. 2.1, a contrastive loss with ``model.teacher.enabled``): an EMA copy of
  the model embeds the teacher views ``T`` (detached); the loss is the mean over ``t in T`` of the
  loss with the student's slot ``t`` replaced by the teacher's embedding.
* ``byol`` (Grill et al. 2020, a loss with ``takes_target``, e.g. ``byol_pwe`` / ``byol_ave``):
  online = encoder + projector + predictor, target = EMA encoder + projector (no gradient);
  ``loss(online predictions, target projections)`` (no online-online term). On logging steps it adds
  ``collapse/embedding_std`` (mean per-dimension std of the normalized online projections; 0 when
  collapsed, about ``1 / sqrt(d)`` when spread) and ``collapse/rankme`` (RankMe, Garrido et al. 2023),
  and the same two of the online encoder's features (what a probe reads; L2-normalized per row, centered
  before RankMe): ``collapse/feature_std``, ``collapse/feature_rankme``; kept as device tensors until the trainer
  reads the step's values.

Both EMA methods update the target after the optimizer step with
``cosine_momentum(step, total_steps, model.teacher.momentum_base)`` and save it in the checkpoint as
``state_ema_teacher.pt`` (:meth:`TrainMethod.states`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from ..config import Config
from ..data.batch import ViewBatch
from ..losses.base import LazyStats, MultiViewLoss
from ..models.teacher import EMATeacher, cosine_momentum
from .diagnostics import effective_rank_tensor

#: ``call(loss_fn, *tensors, labels=None) -> 0-d loss`` (the trainer's guarded loss call)
LossCall = Callable[..., torch.Tensor]
#: ``gather(z) -> z`` of every process with gradient (identity when the loss is not gathered)
Gather = Callable[[torch.Tensor], torch.Tensor]


@dataclass
class StepOutputs:
    """One micro-batch's forward pass: ``online`` ``(n, k, d)`` is what the loss's student side sees
    (checked for NaN / Inf, read by the diagnostics); the rest is method-specific."""

    online: torch.Tensor
    target: torch.Tensor | None = None
    projections: torch.Tensor | None = None
    features: torch.Tensor | None = None
    labels: torch.Tensor | None = None


def loss_stats(loss_fn: nn.Module) -> dict[str, Any]:
    """A loss's ``last_stats`` as stored (floats or 0-d device tensors): a ``LazyStats`` is read with
    :meth:`~multiview_app.losses.base.LazyStats.raw` so that no step reads a device value back; the
    logging steps convert them (``metrics.host_values``). A plain callable used as the loss has none."""
    stats = loss_fn.last_stats if isinstance(loss_fn, MultiViewLoss) else {}
    return stats.raw() if isinstance(stats, LazyStats) else dict(stats)


#: stat names of :func:`collapse_stats` per what is measured: (std key, RankMe key)
COLLAPSE_KEYS: dict[str, tuple[str, str]] = {
    "projections": ("collapse/embedding_std", "collapse/rankme"),
    "features": ("collapse/feature_std", "collapse/feature_rankme"),
}
#: whether :func:`collapse_stats` centers the rows before RankMe: the encoder's (post-ReLU, all
#: positive) features share one large mean direction, and what a standardizing probe reads is the
#: spread around it; projections uncentered, as RankMe (Garrido et al. 2023) defines it
CENTERED: dict[str, bool] = {"projections": False, "features": True}


def collapse_stats(x: torch.Tensor, of: str = "projections") -> dict[str, torch.Tensor]:
    """Mean per-dimension std and RankMe of ``x`` ``(n, k, d)`` with every row L2-normalized (and the
    rows centered before RankMe when ``CENTERED[of]``); device tensors, no host read; under the names
    ``COLLAPSE_KEYS[of]``."""
    rows = F.normalize(x.detach().float().reshape(-1, x.shape[-1]), dim=-1)  # (n k, d)
    std_key, rank_key = COLLAPSE_KEYS[of]
    spread = rows - rows.mean(dim=0) if CENTERED[of] else rows
    return {std_key: rows.std(dim=0).mean(), rank_key: effective_rank_tensor(spread)}


class TrainMethod:
    """``plain``: ``z = step_module(batch)`` -> ``loss(z)`` (labels passed to a loss that uses them)."""

    name: ClassVar[str] = "plain"
    #: what the DDP-wrapped ``EmbedStep`` returns: ``embed`` / ``features`` / ``online`` (see trainer)
    step_output: ClassVar[str] = "embed"

    def __init__(self, cfg: Config, model: nn.Module, loss_fn: nn.Module, device: torch.device) -> None:
        self.cfg = cfg
        self.uses_labels = bool(getattr(loss_fn, "uses_labels", False))
        if getattr(loss_fn, "input", "embeddings") == "features":
            self.step_output = "features"

    def forward(self, step_module: nn.Module, batch: ViewBatch) -> StepOutputs:
        """The student's forward pass (inside the trainer's autocast)."""
        return StepOutputs(step_module(batch), labels=batch.labels if self.uses_labels else None)

    def loss(
        self, out: StepOutputs, loss_fn: nn.Module, call: LossCall, gather: Gather, log_step: bool
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """``(loss, stats)`` of one micro-batch; ``stats`` values may be device tensors."""
        loss = call(loss_fn, gather(out.online), labels=out.labels)
        return loss, loss_stats(loss_fn)

    def after_step(self, model: nn.Module, step: int, total_steps: int) -> dict[str, Any]:
        """After optimizer step ``step`` (0-based): extra stats of the step."""
        return {}

    def states(self) -> dict[str, Any]:
        """Stateful objects to checkpoint, by checkpoint file name (``state_<name>.pt``)."""
        return {}


class EMATeacherMethod(TrainMethod):
    """``ema_teacher``: student slot ``t`` replaced by the EMA teacher's embedding, mean over ``t``."""

    name: ClassVar[str] = "ema_teacher"

    def __init__(self, cfg: Config, model: nn.Module, loss_fn: nn.Module, device: torch.device) -> None:
        super().__init__(cfg, model, loss_fn, device)
        if self.uses_labels or self.step_output == "features":
            raise ValueError(f"loss '{cfg.loss.name}' (labels / encoder features) runs without model.teacher")
        self.teacher = EMATeacher(model).to(device)
        views = cfg.model.teacher.views
        self.teacher_views = list(range(cfg.views.k)) if views == "all" else list(views)

    def forward(self, step_module: nn.Module, batch: ViewBatch) -> StepOutputs:
        z = step_module(batch)
        with torch.no_grad():
            z_teacher = self.teacher.embed(batch.select(self.teacher_views)).detach()
        return StepOutputs(z, target=z_teacher)

    def loss(
        self, out: StepOutputs, loss_fn: nn.Module, call: LossCall, gather: Gather, log_step: bool
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        z, z_teacher = gather(out.online), gather(out.target)
        terms, stats = [], {}
        for j, t in enumerate(self.teacher_views):
            slots = list(z.unbind(dim=1))
            slots[t] = z_teacher[:, j].to(z.dtype)
            terms.append(call(loss_fn, torch.stack(slots, dim=1)))
            for key, value in loss_stats(loss_fn).items():
                stats[key] = stats.get(key, 0.0) + as_float64(value) / len(self.teacher_views)
        return torch.stack(terms).mean(), stats

    def after_step(self, model: nn.Module, step: int, total_steps: int) -> dict[str, Any]:
        momentum = cosine_momentum(step, total_steps, self.cfg.model.teacher.momentum_base)
        self.teacher.update(model, momentum)
        return {"teacher_momentum": float(momentum)}

    def states(self) -> dict[str, Any]:
        return {"ema_teacher": self.teacher}


class BYOLMethod(EMATeacherMethod):
    """``byol``: ``loss(online predictions (n, k, d), target projections (n, k, d))``, target = the
    EMA encoder + projector under ``no_grad``; the collapse stats on logging steps."""

    name: ClassVar[str] = "byol"
    step_output: ClassVar[str] = "online"

    def __init__(self, cfg: Config, model: nn.Module, loss_fn: nn.Module, device: torch.device) -> None:
        if cfg.model.teacher.views != "all":
            raise ValueError(
                f"model.teacher.views: loss '{cfg.loss.name}' compares each view's online prediction with the "
                f"target projections of all other views; got {cfg.model.teacher.views}, expected 'all'"
            )
        super().__init__(cfg, model, loss_fn, device)

    def forward(self, step_module: nn.Module, batch: ViewBatch) -> StepOutputs:
        predictions, projections, features = step_module(batch)
        with torch.no_grad():
            target = self.teacher.embed(batch).detach()
        return StepOutputs(predictions, target=target, projections=projections, features=features)

    def loss(
        self, out: StepOutputs, loss_fn: nn.Module, call: LossCall, gather: Gather, log_step: bool
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        loss = call(loss_fn, out.online, out.target)  # per process (BYOL losses are never gathered)
        stats = loss_stats(loss_fn)
        if log_step:
            for of in COLLAPSE_KEYS:
                if getattr(out, of) is not None:
                    stats.update(collapse_stats(getattr(out, of), of))
        return loss, stats


def as_float64(value: Any) -> Any:
    """A step value for averaging: a tensor -> detached float64 tensor (stays on its device), else ``float``."""
    return value.detach().to(torch.float64) if isinstance(value, torch.Tensor) else float(value)


METHODS: dict[str, type[TrainMethod]] = {m.name: m for m in (TrainMethod, EMATeacherMethod, BYOLMethod)}


def method_name(cfg: Config, loss_fn: nn.Module) -> str:
    """``plain`` without ``model.teacher``; with it ``byol`` for a loss that ``takes_target``, else
    ``ema_teacher``."""
    if not cfg.model.teacher.enabled:
        return "plain"
    return "byol" if getattr(loss_fn, "takes_target", False) else "ema_teacher"


def build_method(cfg: Config, model: nn.Module, loss_fn: nn.Module, device: torch.device) -> TrainMethod:
    """The training method of ``cfg`` (:func:`method_name`) around ``model`` / ``loss_fn``."""
    return METHODS[method_name(cfg, loss_fn)](cfg, model, loss_fn, device)


__all__ = [
    "COLLAPSE_KEYS",
    "METHODS",
    "BYOLMethod",
    "EMATeacherMethod",
    "StepOutputs",
    "TrainMethod",
    "as_float64",
    "build_method",
    "collapse_stats",
    "loss_stats",
    "method_name",
]
