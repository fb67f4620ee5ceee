"""Experiments: the stage above ``train/`` and ``eval/`` that decides what to train and evaluate.

- :mod:`.training`: :func:`ensure_trained(cfg, policy) <multiview_app.experiments.training.ensure_trained>`,
  the one "train unless done" with its policy chosen on purpose (``reuse`` a finished run, ``resume``
  an interrupted one, ``refuse-mismatch`` a finished run trained with another config, ``retrain``);
- :mod:`.sweeps`: sweeps over seeds / folds / held-out domains (:func:`~multiview_app.experiments.sweeps.grid`,
  :func:`~multiview_app.experiments.sweeps.sweep`) and saved results rows;
- :mod:`.staging`: sleep-staging results across pretraining runs: reuse of a stored evaluation,
  pooling, paired differences between losses, Markdown tables.

Experiments may import ``train/`` and ``eval/``; nothing below them imports ``experiments/``
(tests/test_layout.py). Scripts (``scripts/reproduce_*.py``, ``scripts/results_*.py``) are thin
wrappers over this package.
"""
from __future__ import annotations

from .training import POLICIES, RunSummary, TrainPolicy, ensure_trained

__all__ = ["POLICIES", "RunSummary", "TrainPolicy", "ensure_trained"]
