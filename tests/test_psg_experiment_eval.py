"""The evaluation side of ``mvapp experiment psg-modalities``: the end-to-end supervised model (a trainable
row: trained from a copy of the initial weights on the fused embedding) and the goals as measured, on a
tiny synthetic table dict whose statuses are known."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from multiview_app.eval.modalities import STATE_ORACLE, STATE_READER, trainable
from multiview_app.experiments import psg_modalities
from multiview_app.experiments.psg_end_to_end import E2E_ROW, EndToEnd, row_label
from multiview_app.experiments.psg_goals import goals_markdown, measure_goals, paired_vs_brain
from multiview_app.models.modal_embed import fuse


class TwoModalities(nn.Module):
    """Two linear 'encoders' of one input ``(n, 3)`` -> features ``(n, 2, 4)``."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(3, 4), nn.Linear(3, 4)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([self.a(x), self.b(x)], dim=1)


def test_end_to_end_row_learns_from_a_fresh_copy_and_scores_the_test_windows() -> None:
    torch.manual_seed(0)
    x = np.random.default_rng(0).normal(size=(200, 3)).astype(np.float32)
    y = np.where(x[:, 0] > 0, 3, 1)  # labels need not be 0..c-1
    model = TwoModalities()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    row = EndToEnd(model, lambda w: torch.from_numpy(x[w]), steps=150, lr=0.05, batch=16)
    assert trainable(row)
    train, test = np.arange(150), np.arange(150, 200)
    proba, classes = row.fit_predict(train, y[train], test, seed=0)
    assert proba.shape == (50, 2) and classes.tolist() == [1, 3]
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-6)
    assert (classes[proba.argmax(axis=1)] == y[test]).mean() > 0.9
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # never trains the template
    again, _ = row.fit_predict(train, y[train], test, seed=0)
    np.testing.assert_allclose(again, proba, rtol=1e-6)  # one seed, one model
    with pytest.raises(ValueError, match="one class only"):
        row.fit_predict(train, np.ones(150, int), test, seed=0)


def test_fused_embedding_is_what_the_head_reads() -> None:
    model = TwoModalities()
    x = torch.randn(5, 3)
    z = fuse(model.features(x))
    by_hand = (nn.functional.normalize(model.a(x), dim=-1) + nn.functional.normalize(model.b(x), dim=-1)) / 2
    torch.testing.assert_close(z, by_hand)


def test_the_end_to_end_row_with_every_label_is_named_the_supervised_ceiling() -> None:
    assert row_label("staging, all labels", E2E_ROW) == "end-to-end CNN = supervised ceiling"
    assert row_label("apnea / hypopnea", E2E_ROW) == "end-to-end CNN = supervised ceiling"
    assert row_label("staging, few-shot s=50", E2E_ROW) == "end-to-end CNN"
    assert row_label("staging, all labels", "m3g: all") == "m3g: all"


def test_sizes_fix_the_end_to_end_budget_and_refuse_unknown_tasks(tmp_path: Path) -> None:
    path = tmp_path / "sizes.yaml"
    path.write_text("e2e_steps: 40\ne2e_lr: 0.002\ne2e_tasks: [staging]\n")
    sizes = psg_modalities.load_sizes(path)
    assert (sizes.e2e_steps, sizes.e2e_lr, sizes.e2e_tasks) == (40, 0.002, ["staging"])
    path.write_text("e2e_tasks: [staging, retrieval]\n")
    with pytest.raises(ValueError, match=r"e2e_tasks .*retrieval"):
        psg_modalities.load_sizes(path)


def toy_tables() -> tuple[dict, dict]:
    """Pooled tables of two seeds: m3g ahead of sleepfm_loo on macro-F1, behind on recall@10 (no
    sleepfm_pairwise), sleepfm_loo's weakest pair under 10x chance (N = 1000: 0.1)."""
    pairs = {"brain -> heart": ([0.30, 0.34], [0.06, 0.08]), "heart -> brain": ([0.12, 0.16], [0.50, 0.40])}
    retrieval = {
        f"{loss}: {p}": {"R@10": v[i]} for p, v in pairs.items() for i, loss in enumerate(["m3g", "sleepfm_loo"])
    }
    all_labels = {
        "m3g: all": {"macro_f1": [0.70, 0.72], "macro_auroc": [0.90, 0.92]},
        "sleepfm_loo: all": {"macro_f1": [0.60, 0.66], "macro_auroc": [0.85, 0.86]},
        "end-to-end CNN = supervised ceiling": {"macro_auroc": [0.88]},
        "m3g: heart": {"kappa_4class": [0.40, 0.50]},
        "HRV (heart)": {"kappa_4class": [0.30]},
    }
    few_shot = {"m3g: all": {"macro_auroc": [0.80, 0.82]}, "end-to-end CNN": {"macro_auroc": [0.84]}}
    apnea = {"m3g: all": {"auroc": [0.86, 0.88]}, "sleepfm_loo: all": {"auroc": [0.84, 0.88]}}
    apnea["end-to-end CNN = supervised ceiling"] = {"auroc": [0.70]}
    pooled = {
        "staging, few-shot s=50": few_shot,
        "staging, all labels": all_labels,
        "apnea / hypopnea": apnea,
        "retrieval": retrieval,
    }
    cell = {"mean": 0.05, "ci_low": 0.01, "ci_high": 0.09}
    staging = [{"task": "staging", "settings": {"all labels": {"paired": {"brain": cell}}}}]
    crossing = [{"task": "staging", "settings": {"all labels": {"paired": {"brain": {**cell, "ci_low": -0.02}}}}}]
    per_method = {"m3g": {0: staging, 1: staging}, "sleepfm_loo": {0: staging, 1: crossing}}
    return pooled, per_method


def test_goals_are_read_from_the_tables_as_met_or_not() -> None:
    pooled, per_method = toy_tables()
    context = {"losses": ["m3g", "sleepfm_loo"], "candidates": 1000, "paired": paired_vs_brain(per_method)}
    goals = {(g["goal"], g["features"]): g for g in measure_goals(pooled, context)}
    status = {key: g["status"] for key, g in goals.items()}
    assert status[("retrieval recall@10 >= 10x chance", "m3g")] == "met"
    loo = goals[("retrieval recall@10 >= 10x chance", "sleepfm_loo")]
    assert loo["status"] == "not met" and "1/2 pairs >= 0.100; lowest brain -> heart 0.070" in loo["measured"]
    reader = {f"{STATE_READER}: brain -> heart": {"R@10": [0.03]}, f"{STATE_READER}: heart -> brain": {"R@10": [0.05]}}
    pooled["retrieval"].update({STATE_ORACLE: {"R@10": [0.127]}, **reader})
    read = {(g["goal"], g["features"]): g for g in measure_goals(pooled, context)}
    assert read[("retrieval recall@10 >= 10x chance", "m3g")]["measured"].endswith(
        f"; {STATE_ORACLE} 0.127; {STATE_READER}: lowest brain -> heart 0.030, highest 0.050"
    )
    f1 = goals[("loss ordering, staging macro-F1 (all labels, all)", "m3g >= sleepfm_loo")]
    assert f1["status"] == "met" and f1["measured"] == (
        "m3g 0.710 [0.700, 0.720] >= sleepfm_loo 0.630 [0.600, 0.660] (sleepfm_pairwise not run)"
    )
    assert status[("loss ordering, mean retrieval recall@10", "m3g >= sleepfm_loo")] == "not met"  # 0.230 < 0.260
    assert status[("staging: all > brain, paired CI > 0", "m3g")] == "met"
    assert status[("staging: all > brain, paired CI > 0", "sleepfm_loo")] == "not met"  # seed 1 crosses 0
    assert status[("apnea / hypopnea AUROC >= 0.85", "m3g")] == "met"
    assert status[("apnea / hypopnea AUROC >= 0.85", "sleepfm_loo")] == "met"  # mean 0.86
    assert status[("frozen >= end-to-end, staging, all labels (macro AUROC)", "m3g")] == "met"
    assert status[("frozen >= end-to-end, staging, all labels (macro AUROC)", "sleepfm_loo")] == "not met"
    assert status[("frozen >= end-to-end, staging, few-shot s=50 (macro AUROC)", "m3g")] == "not met"
    assert status[("frozen >= end-to-end, staging, few-shot s=50 (macro AUROC)", "sleepfm_loo")] == "not measured"
    assert status[("frozen >= end-to-end, apnea / hypopnea (AUROC)", "sleepfm_loo")] == "met"
    heart = goals[("heart-only staging, 4-class kappa", "m3g")]
    assert heart["status"] == "reported"
    assert heart["measured"] == "0.450 [0.400, 0.500]; HRV features 0.300; published ECG-only 0.60-0.66"
    assert status[("heart-only staging, 4-class kappa", "sleepfm_loo")] == "not measured"
    page = "\n".join(goals_markdown(list(goals.values())))
    assert "## Goals (as measured)" in page and "| goal | features | measured | status |" in page


def test_retrieval_goal_is_not_measured_below_a_hundred_candidates() -> None:
    pooled, per_method = toy_tables()
    context = {"losses": ["m3g"], "candidates": 100, "paired": paired_vs_brain(per_method)}
    [goal] = [g for g in measure_goals(pooled, context) if g["goal"].startswith("retrieval")]
    assert goal["status"] == "not measured" and "N = 100" in goal["measured"]


def test_end_to_end_batches_are_drawn_class_balanced() -> None:
    from multiview_app.experiments.psg_end_to_end import balanced_weights

    targets = np.array([0] * 90 + [1] * 9 + [2] * 1)
    weights = balanced_weights(targets)
    assert weights.sum() == pytest.approx(1.0)
    per_class = [weights[targets == c].sum() for c in range(3)]
    assert per_class == pytest.approx([1 / 3] * 3)


def test_four_class_kappa_merges_n1_and_n2_into_light_sleep() -> None:
    from sklearn.metrics import cohen_kappa_score

    from multiview_app.eval.modalities.staging import four_class_kappa

    y = np.array([0, 1, 2, 3, 4, 2, 1, 0])
    pred = np.array([0, 2, 1, 3, 4, 2, 2, 3])  # N1 <-> N2 confusions are agreements on 4 classes
    merged = {0: 0, 1: 1, 2: 1, 3: 2, 4: 3}
    expected = cohen_kappa_score([merged[v] for v in y], [merged[v] for v in pred])
    assert four_class_kappa(y, pred) == pytest.approx(expected)
    assert four_class_kappa(y, pred) > cohen_kappa_score(y, pred)
