"""Cross-modal retrieval of the matching epoch, for every ordered modality pair.

A query is one window's embedding in modality ``a``; its candidates are ``n_candidates`` windows'
embeddings in modality ``b``: the same window (the match), ``n_candidates / 2 - 1`` windows of the
query's own night at least ``min_gap`` seconds away (so a subject or night fingerprint cannot solve it)
and ``n_candidates / 2`` windows of other nights. Candidates are ranked by cosine similarity;
recall@1 and @10 (tie-aware, ``eval.protocols.retrieval.recall_at_k``) are reported beside chance
(1 / N and 10 / N), with their BCa interval over the queries' subjects. Queries and candidates are drawn
once per call with ``seed``: every pair sees the same ones.

:func:`evaluate_state_oracle` scores the same queries and candidates by the scored state alone (stage,
then each event class): the recall of a reader that knows nothing of a window but what is scored about
it. Where two modalities share nothing else (on the synthetic nights, brain and the cardiorespiratory
signals are coupled through the hypnogram and the scored events), it is the reference a learned pair
is read against.

:func:`evaluate_state_reader` is what that reference is worth when each modality must *infer* the state:
a logistic regression per modality, trained with the labels on the other subjects' windows (leave one
subject out), turns each window's handcrafted features into probabilities of its scored state, and the
candidates are ranked by the cosine of those probabilities. A supervised reader of the field's features,
not a method: it tells how much of the oracle each modality's signals give away.
"""

from __future__ import annotations

from itertools import permutations
from typing import Any

import numpy as np
import torch

from ..protocols.retrieval import recall_at_k
from .data import EvalWindows, UnsupportedEvaluation, check_features, require
from .metrics import subject_cell

N_CANDIDATES = 1000
"""Candidates per query, the match included."""
MIN_GAP_SECONDS = 300.0
"""Own-night candidates lie at least this far (onset to onset) from the query."""
RECALL_KS = (1, 10)
"""Recall@K reported."""
CHUNK = 128
"""Queries scored at a time (bounds the memory of the similarity rows)."""
STATE_ORACLE = "stage + events oracle"
"""Row name of :func:`evaluate_state_oracle`."""
STATE_READER = "state read from handcrafted features (supervised)"
"""Method name of :func:`evaluate_state_reader`'s rows (``"<STATE_READER>: a -> b"``)."""


def _night_pools(windows: EvalWindows, index: int, min_gap: float) -> tuple[np.ndarray, np.ndarray]:
    """Windows of ``index``'s own night at least ``min_gap`` s away, and windows of other nights."""
    own = windows.nights == windows.nights[index]
    far = np.abs(windows.onsets - windows.onsets[index]) >= min_gap
    return np.flatnonzero(own & far), np.flatnonzero(~own)


def candidate_sets(
    windows: EvalWindows, queries: np.ndarray, n_candidates: int, min_gap: float, rng: np.random.Generator
) -> np.ndarray:
    """Candidate windows ``(q, n_candidates)`` of each query window ``(q,)``: column 0 the query's own
    window, then ``n_candidates // 2 - 1`` own-night windows at least ``min_gap`` s away, then the rest
    from other nights, each drawn without replacement. :class:`~.data.UnsupportedEvaluation` when a
    night is too short or there are too few windows in other nights."""
    half = n_candidates // 2
    out = np.empty((len(queries), n_candidates), dtype=np.int64)
    for row, index in enumerate(queries):
        own, other = _night_pools(windows, int(index), min_gap)
        if own.size < half - 1 or other.size < n_candidates - half:
            raise UnsupportedEvaluation(
                f"{windows.dataset} cannot support retrieval among {n_candidates} candidates: night "
                f"{windows.nights[index]} has {own.size} windows at least {min_gap:g} s from a query (needs "
                f"{half - 1}) and the other nights {other.size} (need {n_candidates - half}); lower n_candidates"
            )
        out[row, 0] = index
        out[row, 1:half] = rng.choice(own, half - 1, replace=False)
        out[row, half:] = rng.choice(other, n_candidates - half, replace=False)
    return out


def _normalized(x: np.ndarray) -> np.ndarray:
    return (x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)).astype(np.float32)


def pair_similarity(query: np.ndarray, candidate: np.ndarray, queries: np.ndarray, sets: np.ndarray) -> np.ndarray:
    """Cosine similarity ``(q, N)`` of query embeddings ``query[queries]`` (``query (n, d)``) with their
    candidates ``candidate[sets]`` (``candidate (n, d)``, ``sets (q, N)``)."""
    za, zb = _normalized(query), _normalized(candidate)
    out = np.empty(sets.shape, dtype=np.float32)
    for start in range(0, len(queries), CHUNK):
        rows = slice(start, start + CHUNK)
        out[rows] = np.einsum("qd,qnd->qn", za[queries[rows]], zb[sets[rows]])
    return out


def _recalls(similarity: np.ndarray, subjects: np.ndarray, resamples: int | None) -> dict[str, Any]:
    """Recall@K cells: over every query, and per subject of the queries ``subjects (q,)``."""
    positives = torch.zeros(similarity.shape, dtype=torch.bool)
    positives[:, 0] = True
    sim = torch.from_numpy(similarity)
    pooled = recall_at_k(sim, positives, RECALL_KS)
    per_subject = {s: recall_at_k(sim[subjects == s], positives[subjects == s], RECALL_KS) for s in np.unique(subjects)}
    return {
        f"R@{k}": subject_cell(pooled[k], [(s, r[k]) for s, r in per_subject.items()], resamples) for k in RECALL_KS
    }


def draw_queries(
    windows: EvalWindows, n_candidates: int, queries: int, min_gap: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Query windows ``(q,)`` (``queries`` of them, all when fewer, drawn with ``seed``) and their candidate
    sets ``(q, n_candidates)`` (:func:`candidate_sets`, same generator): one seed, one draw."""
    rng = np.random.default_rng(seed)
    chosen = np.sort(rng.choice(len(windows), min(queries, len(windows)), replace=False))
    return chosen, candidate_sets(windows, chosen, n_candidates, min_gap, rng)


def _table(windows: EvalWindows, n_candidates: int, chosen: np.ndarray, min_gap: float, rows: dict) -> dict:
    return {
        "task": "retrieval",
        "dataset": windows.dataset,
        "n_candidates": n_candidates,
        "queries": len(chosen),
        "min_gap_seconds": min_gap,
        "chance": {f"R@{k}": k / n_candidates for k in RECALL_KS},
        "rows": rows,
    }


def evaluate_retrieval(
    features: dict[str, np.ndarray],
    windows: EvalWindows,
    *,
    n_candidates: int = N_CANDIDATES,
    queries: int = 1000,
    min_gap: float = MIN_GAP_SECONDS,
    seed: int = 0,
    resamples: int | None = None,
    oracle: bool = False,
) -> dict[str, Any]:
    """Retrieval table of every ordered pair of ``features`` (modality -> ``(n, d)``, one ``d`` for all),
    and with ``oracle`` the :data:`STATE_ORACLE` row (:func:`state_similarity`; ``features`` may then be empty).

    Queries and candidates by :func:`draw_queries`. Returns ``{"task", "dataset", "n_candidates", "queries",
    "min_gap_seconds", "chance": {"R@K"}, "rows": {"a -> b": {"R@K": cell}}}``."""
    if features or not oracle:
        require("retrieval", windows, features)
        features = check_features(features, windows)
    dims = {m: x.shape[1] for m, x in features.items()}
    if len(set(dims.values())) > 1:
        raise ValueError(f"{windows.dataset}: retrieval needs one embedding size for every modality; got {dims}")
    chosen, sets = draw_queries(windows, n_candidates, queries, min_gap, seed)
    rows = {
        f"{a} -> {b}": _recalls(
            pair_similarity(features[a], features[b], chosen, sets), windows.subjects[chosen], resamples
        )
        for a, b in permutations(features, 2)
    }
    if oracle:
        rows[STATE_ORACLE] = _recalls(state_similarity(windows, chosen, sets), windows.subjects[chosen], resamples)
    return _table(windows, n_candidates, chosen, min_gap, rows)


def state_similarity(windows: EvalWindows, chosen: np.ndarray, sets: np.ndarray) -> np.ndarray:
    """Agreement ``(q, N)`` of each candidate's scored state with its query's: a match of the stage
    outweighs any match of the events, and each event class (in name order) outweighs the later ones, so
    candidates sharing the query's whole state come first, all tied."""
    keys = state_keys(windows)
    score = np.zeros(sets.shape, dtype=np.float32)
    for weight, key in zip(2.0 ** np.arange(len(keys))[::-1], keys):
        score += weight * (key[sets] == key[chosen][:, None])
    return score


def state_keys(windows: EvalWindows) -> list[np.ndarray]:
    """The scored state of every window as ``(n,)`` keys: its stage, then each event class's label (in name
    order)."""
    return [windows.stages, *(windows.targets[name] for name in sorted(windows.targets))]


def state_codes(windows: EvalWindows) -> np.ndarray:
    """``(n,)`` id of each window's scored state (:func:`state_keys`), one id per distinct combination."""
    return np.unique(np.stack(state_keys(windows), axis=1), axis=0, return_inverse=True)[1].reshape(-1)


def state_posteriors(features: dict[str, np.ndarray], windows: EvalWindows) -> dict[str, np.ndarray]:
    """Out-of-fold probabilities ``(n, s)`` of each window's state (:func:`state_codes`, ``s`` states) per
    modality of ``features`` (modality -> ``(n, f)``): for each subject, a standardized logistic regression
    fit on every other subject's windows; a state its training windows lack gets probability 0."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    codes = state_codes(windows)
    out = {}
    for modality, x in features.items():
        probabilities = np.zeros((len(codes), int(codes.max()) + 1))
        for subject in np.unique(windows.subjects):
            held = windows.subjects == subject
            if np.unique(codes[~held]).size < 2:
                raise UnsupportedEvaluation(f"{windows.dataset}: one scored state outside subject {subject}")
            reader = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)).fit(x[~held], codes[~held])
            probabilities[np.ix_(held, reader[-1].classes_)] = reader.predict_proba(x[held])
        out[modality] = probabilities
    return out


def evaluate_state_reader(features: dict[str, np.ndarray], windows: EvalWindows, **options: Any) -> dict[str, Any]:
    """The retrieval table of :data:`STATE_READER` (rows ``"<STATE_READER>: a -> b"``): every ordered pair of
    ``features`` (modality -> handcrafted ``(n, f)``, any widths) ranked by the cosine of their
    :func:`state_posteriors`. ``options``: :func:`evaluate_retrieval`'s (the same ``seed`` draws the same
    queries and candidates)."""
    table = evaluate_retrieval(state_posteriors(check_features(features, windows), windows), windows, **options)
    table["rows"] = {f"{STATE_READER}: {pair}": cells for pair, cells in table["rows"].items()}
    return table


def evaluate_state_oracle(windows: EvalWindows, **options: Any) -> dict[str, Any]:
    """The retrieval table of one row, :data:`STATE_ORACLE`: candidates ranked by :func:`state_similarity`,
    ties broken at random (expected recall). ``options``: :func:`evaluate_retrieval`'s (the same ``seed``
    draws the same queries and candidates). It reads the labels, not features: a reference, not a method."""
    return evaluate_retrieval({}, windows, oracle=True, **options)
