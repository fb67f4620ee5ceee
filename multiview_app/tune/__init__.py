"""Hyperparameter search with Optuna (``mvapp tune``).

``space.py`` (``tune.space`` -> Optuna distributions, per-loss defaults, schema validation),
``objective.py`` (val metrics and the ``tune-report`` training callback), ``runner.py`` (a trial =
a training subprocess, pruning), ``study.py`` (storage, sampler, pruner, dead-worker recovery, the
worker loop), ``report.py`` (best YAML, trials CSV, plots), ``cli.py``. Depends on train/, eval/,
data/; nothing below imports it (``train/`` only names ``tune.objective`` in its callback registry).
"""
