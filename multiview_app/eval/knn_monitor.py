"""kNN monitor (``train.callbacks: [knn-monitor]``): kNN accuracy of the current encoder during
pre-training, on fixed labelled subsets, logged with the training metrics.

At the first logging step at or after every ``every`` optimizer steps (and at the last step) the
monitor encodes a fixed class-stratified subset of the train split (the kNN memory bank,
``bank_items``) and of the evaluation split (the queries, ``items``; ``split``, default ``val``,
never a test split), with the run's eval views (``eval.combine``, ``eval.batch_size``), and scores
:func:`knn_accuracy`. The row gets ``knn/acc`` (fraction in [0, 1]) and ``knn/probe_s`` (seconds);
TensorBoard and ``metrics.jsonl`` receive them like every metric.

During the probe every module is in eval mode (norm layers use their running statistics and do not
update them, dropout off; :func:`~multiview_app.eval.features.eval_mode`) and each module's mode is
restored afterwards; the global random generators are forked, so a run with the monitor trains
exactly like one without it. Main process only.

Options (``train.callbacks: [{knn-monitor: {every: 200, k: 20, items: 512, bank_items: 1024}}]``)
are checked by :class:`KnnMonitor.Options`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..config import Config
from ..train.callbacks import TRAIN_CALLBACKS, StepEvent, TrainCallback
from .features import combine_views, eval_mode, extract_features
from .protocols import get_protocol
from .subsets import split_labels, stratified_subset

#: Metric names the monitor adds to a logged row.
ACC_KEY = "knn/acc"
TIME_KEY = "knn/probe_s"


def knn_accuracy(bank_x: np.ndarray, bank_y: np.ndarray, query_x: np.ndarray, query_y: np.ndarray, k: int) -> float:
    """Accuracy in [0, 1] of a kNN fitted on the bank ``(B, f)`` / ``(B,)`` on the queries ``(Q, f)`` / ``(Q,)``:
    the ``knn`` protocol (standardized cosine kNN, one BLAS thread), the same maths as every kNN score."""
    return float(get_protocol("knn")(bank_x, bank_y, query_x, query_y, k=k)["accuracy"])


def is_test_split(name: str) -> bool:
    """Whether ``name`` names a test split (``test``, ``test_sketch``, ...): never monitored."""
    return name.lower().startswith("test")


@TRAIN_CALLBACKS.register("knn-monitor")
class KnnMonitor(TrainCallback):
    """kNN accuracy on fixed train-bank / val-query subsets every ``every`` steps (see module docstring)."""

    name = "knn_monitor"

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid")

        every: int = Field(
            200, ge=1, description="probe at the first logged step at or after every N steps (and the last)"
        )
        k: int = Field(20, ge=1, description="neighbours (capped at the bank size)")
        items: int | None = Field(512, ge=1, description="queries: class-stratified items of the split (None: all)")
        bank_items: int | None = Field(1024, ge=1, description="memory bank: class-stratified train items (None: all)")
        split: str = Field("val", description="split scored (a validation split; test splits are refused)")

        @field_validator("split")
        @classmethod
        def _not_test(cls, split: str) -> str:
            if is_test_split(split) or split == "train":
                raise ValueError(
                    f"the kNN monitor scores a validation split, got {split!r} (the test split is for the "
                    "final evaluation only, the train split is the memory bank)"
                )
            return split

    def __init__(self, cfg: Config, **options: Any) -> None:
        self.options = self.Options(**options)
        self.cfg = cfg
        self.next_due: int | None = None  # the next multiple of ``every`` (set at the first logged step: resumes)
        self.history: list[dict[str, float]] = []
        self._data: dict[str, Any] | None = None

    def _prepare(self) -> dict[str, Any]:
        """Adapter, eval views and the two fixed subsets (built once; checks the split exists)."""
        if self._data is None:
            from torch.utils.data import Subset

            from ..data.adapters import build_adapter
            from ..data.views import build_view_policy

            cfg, split = self.cfg, self.options.split
            adapter = build_adapter(cfg.data.adapter, cfg.data.options)
            if split not in adapter.splits:
                hint = " (set data.options.val_fraction, e.g. 0.1)" if split == "val" else ""
                raise ValueError(
                    f"train.callbacks.knn-monitor: data adapter '{cfg.data.adapter}' has no {split!r} split "
                    f"(splits: {', '.join(adapter.splits)}){hint}"
                )
            parts = {}
            for part, name, size in (("bank", "train", self.options.bank_items), ("query", split, self.options.items)):
                dataset = adapter.split(name)
                labels = split_labels(dataset)
                rows = stratified_subset(labels, size)
                rows = np.flatnonzero(labels >= 0) if rows is None else rows
                if rows.size == 0:
                    raise ValueError(f"train.callbacks.knn-monitor: the {name!r} split has no labelled items")
                parts[part] = (name, Subset(dataset, rows.tolist()))
            policy = build_view_policy(cfg.views.policy, cfg.views.k, cfg.views.options, adapter)
            self._data = {"adapter": adapter, "policy": policy, **parts}
        return self._data

    def probe(self, model: torch.nn.Module) -> float:
        """kNN accuracy of ``model``'s encoder now (modes and random generators left as they were)."""
        data = self._prepare()
        device = next(model.parameters()).device
        ecfg = self.cfg.eval
        xy = {}
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), eval_mode(model):
            for part in ("bank", "query"):
                split, subset = data[part]
                feats, labels, _ = extract_features(
                    model,
                    data["adapter"],
                    data["policy"],
                    split,
                    ecfg.batch_size,
                    device,
                    progress=False,
                    dataset=subset,
                )
                xy[part] = (combine_views(feats, ecfg.combine), labels)
        return knn_accuracy(*xy["bank"], *xy["query"], k=self.options.k)

    def on_step_end(self, event: StepEvent) -> None:
        if event.is_main_process:
            self._prepare()  # a missing split fails at the first step, not at the first probe

    def on_log_step(self, event: StepEvent) -> dict[str, float] | None:
        every = self.options.every
        if self.next_due is None:  # a resumed run continues the cadence instead of probing at once
            self.next_due = -(-event.step // every) * every
        last = event.step == event.total_steps
        if not event.is_main_process or not (last or event.step >= self.next_due):
            return None
        self.next_due = (event.step // every + 1) * every
        began = time.perf_counter()
        accuracy = self.probe(event.model)
        values = {ACC_KEY: accuracy, TIME_KEY: time.perf_counter() - began}
        self.history.append({"step": event.step, **values})
        return values

    def on_train_end(self, run_dir: Path, is_main_process: bool) -> dict[str, Any] | None:
        if not is_main_process or not self.history:
            return None
        data = self._prepare()
        return {
            "split": self.options.split,
            "k": self.options.k,
            "items": len(data["query"][1]),
            "bank_items": len(data["bank"][1]),
            "history": self.history,
        }

    def report(self, result: dict[str, Any]) -> str | None:
        steps = ", ".join(f"{row[ACC_KEY]:.3f} (step {row['step']})" for row in result["history"][-3:])
        return (
            f"kNN monitor ({result['split']}: {result['items']} queries, train bank {result['bank_items']}, "
            f"k {result['k']}): {steps}"
        )


__all__ = ["ACC_KEY", "KnnMonitor", "TIME_KEY", "is_test_split", "knn_accuracy"]
