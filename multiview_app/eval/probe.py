"""Moved to :mod:`multiview_app.eval.protocols.probe` (the ``linear-probe`` and ``knn`` protocols);
these names stay importable from here for scripts and the domain-generalization evaluator."""
from __future__ import annotations

from .protocols.probe import fit_knn, fit_linear_classifier, mean_std, probe_accuracies

__all__ = ["fit_knn", "fit_linear_classifier", "mean_std", "probe_accuracies"]
