"""Experiments: the stage above ``train/`` and ``eval/`` that decides what to train and evaluate.

- :mod:`.training`: :func:`ensure_trained(cfg, policy) <multiview_app.experiments.training.ensure_trained>`,
  the one "train unless done" with its policy chosen on purpose (``reuse`` a finished run, ``resume``
  an interrupted one, ``refuse-mismatch`` a finished run trained with another config, ``retrain``);
- :mod:`.sweeps`: sweeps over seeds / folds / held-out domains (:func:`~multiview_app.experiments.sweeps.grid`,
  :func:`~multiview_app.experiments.sweeps.sweep`) and saved results rows;
- :mod:`.staging`: sleep-staging results across pretraining runs: reuse of a stored evaluation,
  pooling, paired differences between losses by test subject, Markdown tables; the EEG supervised ceiling
  (:func:`~multiview_app.experiments.staging.train_supervised_ceiling`, config in
  :mod:`multiview_app.eval.supervised_ceiling`) trained unless done;
- :mod:`.domains`: domain generalization: the runs of a leave-one-domain-out sweep and their ERM
  baselines trained unless done (policy ``resume``), each run folder evaluated by
  :mod:`multiview_app.eval.domain_generalization` (which trains nothing);
- :mod:`.digits_table`, :mod:`.pairs_table`, :mod:`.domains_grid`, :mod:`.channel_modes`: the results tables of docs/results.md, their
  knobs read by :mod:`.knobs` from ``configs/experiment_<name>.yaml``;
- :mod:`.synth_check`: ``mvapp experiment synth-check <check>``, the synthetic PSG generator against reference
  values and real recordings;
- :mod:`.cli`: ``mvapp experiment <name>`` (``domain-generalization``, ``supervised-ceiling``, ``digits``, ``pairs``,
  ``domains-grid``, ``channel-modes``, ...).

Experiments may import ``train/`` and ``eval/``; nothing below them imports ``experiments/``
(tests/test_layout.py). The paper reproductions (``scripts/reproduce/<paper>/*.py``) are thin
wrappers over this package.
"""

from __future__ import annotations

from typing import Any

__all__ = ["POLICIES", "RunSummary", "TrainPolicy", "ensure_trained"]


def __getattr__(name: str) -> Any:
    """The names of :mod:`.training`, imported on first use: ``mvapp --help`` imports :mod:`.cli`, hence
    this package, and must not import torch."""
    if name in __all__:
        from . import training

        return getattr(training, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
