"""scripts/reproduce/polyview/reproduce_polyview_gaussian.py: closed form (Eq. 26), bound constants, and the qualitative
ordering of poly-view Fig. 2 in a tiny setting (K = 48 items, 150 steps)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _train_helpers import load_script


@pytest.fixture(scope="module")
def gaussian():
    return load_script("reproduce/polyview/reproduce_polyview_gaussian")


@pytest.mark.parametrize("m", [2, 3, 7])
def test_closed_form_matches_the_gaussian_kl(gaussian, m: int) -> None:
    """Eq. 26 against KL(N(0, Sigma_M) || N(0, blockdiag(var, Sigma_{M-1}))) (Lemma E.4), float64."""
    s0, s = 1.3, 0.7
    cov = np.full((m, m), s0**2) + np.eye(m) * s**2
    indep = cov.copy()
    indep[0, 1:] = indep[1:, 0] = 0.0
    kl = 0.5 * (np.trace(np.linalg.solve(indep, cov)) - m + math.log(np.linalg.det(indep) / np.linalg.det(cov)))
    assert gaussian.true_one_vs_rest_mi(m, s0, s) == pytest.approx(kl, rel=1e-10)
    assert gaussian.bound_constant("geometric", 10, m) == pytest.approx(math.log(10 * m - m + 1))
    assert gaussian.bound_constant("multi_crop", 10, m) == pytest.approx(math.log(10))


@pytest.fixture
def one_thread():
    """The tiny MLP runs are 3-4x faster on one thread than with intra-op threads on a loaded machine."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_qualitative_ordering_in_a_tiny_setting(gaussian, one_thread) -> None:
    settings = dict(items=48, steps=150, tau=0.1, sigma0=1.0, sigma=0.5, eval_batches=4)
    runs = {
        (method, m): gaussian.run_one(method, m, 0, **settings)
        for method, m in (("multi_crop", 2), ("multi_crop", 8), ("arithmetic", 8), ("geometric", 8))
    }
    gap = {key: row["gap"] for key, row in runs.items()}
    # multi-crop's bound does not grow with M (Prop. 2.1) while the true MI does: its gap widens
    assert gap["multi_crop", 8] > gap["multi_crop", 2] + 0.1
    # arithmetic PVC's bound follows the growing One-vs-Rest MI: far smaller gap than multi-crop at M = 8
    assert gap["arithmetic", 8] < 0.5 * gap["multi_crop", 8]
    # geometric PVC averages pairwise terms: its bound stays at most the pairwise MI (+ estimation noise)
    assert runs["geometric", 8]["bound"] < gaussian.pairwise_mi(1.0, 0.5) + 0.05
