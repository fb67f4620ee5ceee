"""Leave-one-domain-out with DomainBed's model selection (protocol ``leave-one-domain-out``).

Inputs are features, never run folders: ``features(candidate, domain, split) -> (x (N, f), y (N,))``
gives the frozen features of one split of one domain under one *candidate* (a saved checkpoint of the
encoder: ``step_50``, ..., ``final``). Splits: ``train`` / ``val`` (the training-domain validation share,
held out of pretraining) / ``test``; the held-out (target) domain has the same three.

Model selection (Gulrajani & Lopez-Paz, "In Search of Lost Domain Generalization", ICLR 2021, Sec. 3):

- **training-domain validation** (the reported method): every (candidate, ``C``) pair gets a probe fitted
  on the pooled ``train`` splits of the seen domains and is scored on their pooled ``val`` splits; the best
  pair is chosen (ties: the earlier candidate, then the smaller ``C``). Only seen domains are read
  (:func:`select_training_domain` gets a view of ``features`` that refuses the target).
- **test-domain validation** ("oracle", an upper bound only): the same grid scored on the *target's*
  ``val`` split; reported separately and labelled as such.

At the chosen pair the protocol reports the 5-vs-1 accuracy (probe on every seen domain's ``train``,
tested on the target's ``test``), the 1-vs-1 row (one probe per seen domain, same candidate and ``C``) and
the **target-labelled probe** (a probe fitted on the target's own ``train`` labels: not a selection method,
a reference for how linearly readable the target is). The probe is the shared standardized multinomial
logistic regression (:func:`multiview_app.eval.protocols.probe.fit_linear_classifier`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from . import PROTOCOLS
from .probe import fit_linear_classifier

#: ``features(candidate, domain, split) -> (x (N, f), y (N,))``
FeatureSource = Callable[[str, str, str], tuple[np.ndarray, np.ndarray]]

TRAINING_DOMAIN = "training-domain validation"
TEST_DOMAIN = "test-domain validation (oracle: reads held-out-domain labels; an upper bound, not a result)"
#: inverse L2 strengths of the probe searched by model selection
DEFAULT_CS: tuple[float, ...] = (0.01, 0.1, 1.0, 10.0)


def seen_only(features: FeatureSource, seen: Sequence[str]) -> FeatureSource:
    """``features`` restricted to the seen domains: asking for another domain raises ``PermissionError``
    (what model selection by training-domain validation may read)."""
    allowed = set(seen)

    def guarded(candidate: str, domain: str, split: str) -> tuple[np.ndarray, np.ndarray]:
        if domain not in allowed:
            raise PermissionError(f"training-domain validation read domain '{domain}' ({split}), which is not seen")
        return features(candidate, domain, split)

    return guarded


def pooled(
    features: FeatureSource, candidate: str, domains: Sequence[str], split: str
) -> tuple[np.ndarray, np.ndarray]:
    """``split`` of every domain of ``domains`` concatenated: ``x (sum N, f)``, ``y (sum N,)``."""
    parts = [features(candidate, d, split) for d in domains]
    return np.concatenate([x for x, _ in parts]), np.concatenate([y for _, y in parts])


def accuracy(classifier: Any, test: tuple[np.ndarray, np.ndarray]) -> float:
    """Accuracy of a fitted probe on ``test = (x (M, f), y (M,))``."""
    return float((classifier.predict(np.nan_to_num(test[0])) == test[1]).mean())


def probe_accuracy(train: tuple[np.ndarray, np.ndarray], test: tuple[np.ndarray, np.ndarray], C: float) -> float:
    """Accuracy on ``test`` of the standardized logistic regression fitted on ``train`` with strength ``C``."""
    return accuracy(fit_linear_classifier(*train, C=C), test)


class ProbeFits:
    """The probes of one evaluation, each fitted once: ``fits(features, candidate, domains, C)`` is the
    standardized logistic regression on the pooled ``train`` splits of ``domains`` under ``candidate``
    with strength ``C``, memoized by ``(candidate, domains, C)``. The fit is deterministic, so a memoized
    probe is the probe a refit would give: the training-domain grid, the oracle grid (same train data,
    other validation data) and the 5-vs-1 score at the chosen pair share their fits."""

    def __init__(self) -> None:
        self.fitted: dict[tuple[str, tuple[str, ...], float], Any] = {}

    def __call__(self, features: FeatureSource, candidate: str, domains: Sequence[str], C: float) -> Any:
        key = (candidate, tuple(domains), float(C))
        if key not in self.fitted:
            self.fitted[key] = fit_linear_classifier(*pooled(features, candidate, domains, "train"), C=C)
        return self.fitted[key]


def select(
    features: FeatureSource,
    candidates: Sequence[str],
    seen: Sequence[str],
    val_domains: Sequence[str],
    Cs: Sequence[float],
    fits: ProbeFits | None = None,
) -> dict[str, Any]:
    """Grid over (candidate, ``C``): probe on the seen domains' pooled ``train``, scored on the pooled
    ``val`` of ``val_domains``. Returns ``{"candidate", "C", "val_accuracy", "grid": [{candidate, C,
    val_accuracy}, ...]}`` with the best pair (first best in candidate order, then ``C`` order).
    ``fits``: the evaluation's shared probes (:class:`ProbeFits`; default: fitted here)."""
    if not candidates or not Cs:
        raise ValueError("model selection needs at least one candidate and one C")
    fits = ProbeFits() if fits is None else fits
    grid = []
    with threadpool_limits(1):  # small problems: BLAS threads only oversubscribe the shared CPU
        for candidate in candidates:
            val = pooled(features, candidate, val_domains, "val")
            for C in Cs:
                grid.append(
                    {
                        "candidate": candidate,
                        "C": float(C),
                        "val_accuracy": accuracy(fits(features, candidate, seen, C), val),
                    }
                )
    best = max(grid, key=lambda row: row["val_accuracy"])  # max keeps the first of equal scores
    return {**best, "grid": grid}


def select_training_domain(
    features: FeatureSource,
    candidates: Sequence[str],
    seen: Sequence[str],
    Cs: Sequence[float] = DEFAULT_CS,
    fits: ProbeFits | None = None,
) -> dict[str, Any]:
    """Training-domain validation: :func:`select` on the seen domains' ``val`` splits, through
    :func:`seen_only` (reading the target raises)."""
    return select(seen_only(features, seen), candidates, seen, seen, Cs, fits)


def scores_at(
    features: FeatureSource, candidate: str, C: float, seen: Sequence[str], target: str, fits: ProbeFits | None = None
) -> dict[str, Any]:
    """5-vs-1, 1-vs-1 and target-labelled-probe accuracies on the target's ``test`` split at one pair."""
    fits = ProbeFits() if fits is None else fits
    test = features(candidate, target, "test")
    with threadpool_limits(1):
        return {
            "five_vs_one": accuracy(fits(features, candidate, seen, C), test),
            "one_vs_one": {d: accuracy(fits(features, candidate, [d], C), test) for d in seen},
            "target_labelled_probe": accuracy(fits(features, candidate, [target], C), test),
        }


@PROTOCOLS.register("leave-one-domain-out")
def leave_one_domain_out(
    *,
    features: FeatureSource,
    candidates: Sequence[str],
    seen: Sequence[str],
    target: str,
    Cs: Sequence[float] = DEFAULT_CS,
    oracle: bool = True,
) -> dict[str, Any]:
    """The protocol (module docstring). Returns ``{"model_selection", "selected": {candidate, C,
    val_accuracy}, "grid", "five_vs_one", "one_vs_one", "target_labelled_probe"}`` and, with ``oracle``,
    ``"oracle_selection": {"model_selection", "selected", "grid", "five_vs_one"}``."""
    if target in seen:
        raise ValueError(f"target domain '{target}' is also a seen domain")
    fits = ProbeFits()  # every probe below is fitted once (the oracle grid refits none of the first grid's)
    chosen = select_training_domain(features, candidates, seen, Cs, fits)
    result: dict[str, Any] = {
        "model_selection": TRAINING_DOMAIN,
        "selected": {k: chosen[k] for k in ("candidate", "C", "val_accuracy")},
        "grid": chosen["grid"],
        **scores_at(features, chosen["candidate"], chosen["C"], seen, target, fits),
    }
    if oracle:
        best = select(features, candidates, seen, [target], Cs, fits)
        test = features(best["candidate"], target, "test")
        with threadpool_limits(1):
            five = accuracy(fits(features, best["candidate"], seen, best["C"]), test)
        result["oracle_selection"] = {
            "model_selection": TEST_DOMAIN,
            "selected": {k: best[k] for k in ("candidate", "C", "val_accuracy")},
            "grid": best["grid"],
            "five_vs_one": five,
        }
    return result


__all__ = [
    "DEFAULT_CS",
    "FeatureSource",
    "ProbeFits",
    "TEST_DOMAIN",
    "TRAINING_DOMAIN",
    "accuracy",
    "leave_one_domain_out",
    "pooled",
    "probe_accuracy",
    "scores_at",
    "select",
    "select_training_domain",
    "seen_only",
]
