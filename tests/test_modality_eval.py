"""Modality evaluation on frozen features (``eval/modalities``): small arrays whose answer is known
(staging, events, AHI calibration, retrieval and its candidate rule), the one error for an evaluation
the data cannot support, the tables, and no function over 60 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import multiview_app.eval.modalities as modalities
from multiview_app.eval.modalities import (
    EvalWindows,
    UnsupportedEvaluation,
    evaluate_events,
    evaluate_modalities,
    evaluate_retrieval,
    evaluate_staging,
    format_tables,
    modality_subsets,
    subset_features,
)
from multiview_app.eval.modalities.events import calibrate
from multiview_app.eval.modalities.metrics import macro_auroc
from multiview_app.eval.modalities.retrieval import (
    STATE_ORACLE,
    STATE_READER,
    candidate_sets,
    draw_queries,
    evaluate_state_oracle,
    evaluate_state_reader,
    state_codes,
    state_posteriors,
)

RESAMPLES = 200  # bootstrap draws in these tests (the default 10,000 only slows them)


def toy_windows(nights: int = 4, per_night: int = 60, seed: int = 0, dataset: str = "toy") -> EvalWindows:
    """``nights`` nights of ``per_night`` 30-s windows, one subject per night, every stage and ~15 % apnea
    windows in each night, arousals with some excluded, and the true AHI of each night."""
    rng = np.random.default_rng(seed)
    n = nights * per_night
    night = np.repeat([f"night{i}" for i in range(nights)], per_night)
    stages = np.tile(np.arange(per_night) % 5, nights)
    apnea = ((rng.random(n) < 0.15) & (stages >= 1)).astype(int)  # events during sleep only
    arousal = (rng.random(n) < 0.2).astype(int)
    arousal[rng.random(n) < 0.1] = -1
    hours = {k: float(((stages >= 1) & (night == k)).sum()) * 30 / 3600 for k in np.unique(night)}
    return EvalWindows(
        dataset,
        subjects=np.char.replace(night, "night", "S"),
        nights=night,
        onsets=np.tile(np.arange(per_night) * 30.0, nights),
        stages=stages,
        targets={"apnea_hypopnea": apnea, "arousal": arousal},
        night_ahi={k: float((apnea & (night == k)).sum()) / hours[k] for k in hours},
        sleep_hours=hours,
    )


def test_features_encoding_the_stage_give_kappa_one_and_noise_gives_chance() -> None:
    windows = toy_windows()
    rng = np.random.default_rng(1)
    rows = {"perfect": np.eye(5)[windows.stages] * 3.0, "noise": rng.normal(size=(len(windows), 4))}
    result = evaluate_staging(rows, windows, shots=5, seeds=2, C=1.0, reference="perfect", resamples=RESAMPLES)
    for setting in ("few-shot s=5", "all labels"):
        perfect = result["settings"][setting]["rows"]["perfect"]
        assert perfect["kappa"]["value"] == pytest.approx(1.0)
        assert perfect["balanced_accuracy"]["value"] == pytest.approx(1.0)
        assert perfect["macro_auroc"]["value"] == pytest.approx(1.0)
        assert perfect["kappa"]["n"] == 4  # per-subject units: 4 subjects, never the fits
        noise = result["settings"][setting]["rows"]["noise"]
        assert noise["balanced_accuracy"]["value"] < 0.5
        paired = result["settings"][setting]["paired"]["noise"]
        assert paired["n"] == 4 and paired["ahead"] == 4 and paired["ci_low"] > 0
    assert result["settings"]["few-shot s=5"]["fits"] == 4 * 2  # leave-one-subject-out folds x seeds


def test_modality_subsets_are_each_alone_each_left_out_and_all() -> None:
    subsets = modality_subsets(["brain", "heart", "breathing"])
    assert subsets == {
        "brain": ["brain"],
        "heart": ["heart"],
        "breathing": ["breathing"],
        "all - brain": ["heart", "breathing"],
        "all - heart": ["brain", "breathing"],
        "all - breathing": ["brain", "heart"],
        "all": ["brain", "heart", "breathing"],
    }
    features = {"brain": np.ones((3, 2)), "heart": np.zeros((3, 1)), "breathing": np.full((3, 4), 2.0)}
    assert subset_features(features, subsets)["all - heart"].shape == (3, 6)
    assert list(modality_subsets(["brain", "heart"])) == ["brain", "heart", "all"]
    with pytest.raises(ValueError, match=r"no features for \['heart'\]"):
        subset_features({"brain": np.ones((3, 2))}, {"x": ["heart"]})


def test_macro_auroc_scores_the_classes_present_and_a_class_the_classifier_never_saw() -> None:
    y = np.array([0, 0, 1, 1, 2, 2])
    proba = np.array([[0.9, 0.1], [0.8, 0.2], [0.2, 0.8], [0.1, 0.9], [0.5, 0.5], [0.5, 0.5]])
    # class 2 is absent from the classifier: a constant score, AUROC 0.5; classes 0 and 1 rank their windows first
    assert macro_auroc(y, proba, np.array([0, 1])) == pytest.approx((1.0 + 1.0 + 0.5) / 3)
    assert np.isnan(macro_auroc(np.zeros(4, int), proba[:4], np.array([0, 1])))


def test_calibration_recovers_a_linear_map() -> None:
    raw = np.array([1.0, 4.0, 9.0, 12.5, 20.0])
    assert calibrate(raw, 2.5 * raw + 3.0) == pytest.approx((2.5, 3.0))
    assert calibrate(np.full(3, 2.0), np.array([1.0, 2.0, 6.0])) == (0.0, 3.0)  # no spread: the mean


def test_separable_events_give_auroc_one_and_excluded_arousals_are_left_out() -> None:
    windows = toy_windows()
    apnea = windows.targets["apnea_hypopnea"]
    rows = {"apnea-coded": np.stack([apnea * 2.0, np.zeros(len(windows))], axis=1)}
    result = evaluate_events(rows, windows, resamples=RESAMPLES)
    row = result["rows"]["apnea-coded"]
    assert row["auroc"]["value"] == pytest.approx(1.0) and row["auprc"]["value"] == pytest.approx(1.0)
    assert len(row["ahi"]["nights"]) == 4 and row["ahi"]["severity_accuracy"]["n"] == 4
    arousal = windows.targets["arousal"]
    coded = {"arousal-coded": np.maximum(arousal, 0)[:, None] * 1.0}
    result = evaluate_events(coded, windows, "arousal", resamples=RESAMPLES)
    assert result["rows"]["arousal-coded"]["windows"] == int((arousal >= 0).sum())
    assert result["rows"]["arousal-coded"]["auprc"]["value"] == pytest.approx(1.0)
    assert "ahi" not in result["rows"]["arousal-coded"]


def test_ahi_from_perfect_windows_tracks_the_true_index() -> None:
    windows = toy_windows(nights=6, per_night=120, seed=3)
    apnea = windows.targets["apnea_hypopnea"]
    result = evaluate_events({"coded": apnea[:, None] * 1.0}, windows, folds=3, resamples=RESAMPLES)
    ahi = result["rows"]["coded"]["ahi"]
    true = [v["true"] for v in ahi["nights"].values()]
    predicted = [v["predicted"] for v in ahi["nights"].values()]
    # every event window predicted positive: the raw index is the true one and the fitted line the identity
    assert predicted == pytest.approx(true)
    assert ahi["spearman"] == pytest.approx(1.0) and ahi["severity_accuracy"]["value"] == 1.0
    assert all(line == pytest.approx((1.0, 0.0), abs=1e-9) for line in result["rows"]["coded"]["ahi"]["calibration"])


def test_identical_features_retrieve_their_epoch_and_noise_sits_at_chance() -> None:
    windows = toy_windows(nights=4, per_night=80)
    rng = np.random.default_rng(2)
    z = rng.normal(size=(len(windows), 8))
    features = {"brain": z, "heart": z.copy(), "breathing": rng.normal(size=z.shape)}
    result = evaluate_retrieval(features, windows, n_candidates=40, queries=100, resamples=RESAMPLES)
    assert set(result["rows"]) == {f"{a} -> {b}" for a in features for b in features if a != b}
    assert result["rows"]["brain -> heart"]["R@1"]["value"] == 1.0
    assert result["rows"]["heart -> brain"]["R@10"]["value"] == 1.0
    assert result["chance"] == {"R@1": 1 / 40, "R@10": 10 / 40}
    assert result["rows"]["brain -> breathing"]["R@10"]["value"] < 0.5
    again = evaluate_retrieval(features, windows, n_candidates=40, queries=100, resamples=RESAMPLES)
    assert again["rows"] == result["rows"]  # seeded


def test_candidates_follow_the_rule_half_own_night_five_minutes_away() -> None:
    windows = toy_windows(nights=3, per_night=80)
    queries = np.arange(0, len(windows), 7)
    sets = candidate_sets(windows, queries, 40, 300.0, np.random.default_rng(0))
    assert sets.shape == (len(queries), 40)
    for query, candidates in zip(queries, sets):
        assert candidates[0] == query and np.unique(candidates).size == 40
        own = windows.nights[candidates[1:]] == windows.nights[query]
        assert own.sum() == 19  # with the match: half of the 40 from the query's night
        gaps = np.abs(windows.onsets[candidates[1:]][own] - windows.onsets[query])
        assert gaps.min() >= 300.0


def _state_ties(windows: EvalWindows, queries: np.ndarray, sets: np.ndarray) -> np.ndarray:
    """Brute force: per query, the candidates other than its own window sharing its whole scored state."""
    state = np.stack([windows.stages, windows.targets["apnea_hypopnea"], windows.targets["arousal"]], axis=1)
    return np.array([(state[row[1:]] == state[q]).all(axis=1).sum() for q, row in zip(queries, sets)])


def test_the_state_oracle_ties_every_candidate_of_the_querys_stage_and_events() -> None:
    windows = toy_windows(nights=4, per_night=80)
    oracle = evaluate_state_oracle(windows, n_candidates=40, queries=100, resamples=RESAMPLES)
    queries, sets = draw_queries(windows, 40, 100, 300.0, 0)
    ties = _state_ties(windows, queries, sets)  # expected recall@K under random tie-breaking: min(1, K / (t + 1))
    cells = oracle["rows"][STATE_ORACLE]
    assert cells["R@1"]["value"] == pytest.approx(np.mean(1.0 / (ties + 1)))
    assert cells["R@10"]["value"] == pytest.approx(np.mean(np.minimum(1.0, 10.0 / (ties + 1))))
    # the runs' table draws the same queries and candidates: features holding the state exactly give its recall@1
    state = np.concatenate([np.eye(5)[windows.stages], np.eye(2)[windows.targets["apnea_hypopnea"]]], axis=1)
    state = np.concatenate([state, np.eye(3)[windows.targets["arousal"] + 1]], axis=1)
    learned = evaluate_retrieval({"brain": state, "heart": state.copy()}, windows, n_candidates=40, queries=100)
    assert learned["rows"]["brain -> heart"]["R@1"]["value"] == pytest.approx(cells["R@1"]["value"])
    # one stage and no events: nothing to read, chance
    flat = EvalWindows("flat", windows.subjects, windows.nights, windows.onsets, np.full(len(windows), 2))
    assert evaluate_state_oracle(flat, n_candidates=40, queries=50)["rows"][STATE_ORACLE]["R@10"]["value"] == 0.25


def test_the_state_reader_is_out_of_fold_and_ranks_by_what_each_modality_gives_away() -> None:
    windows = toy_windows(nights=4, per_night=80)
    state = np.stack([windows.stages, windows.targets["apnea_hypopnea"], windows.targets["arousal"]], axis=1)
    codes = state_codes(windows)
    same = (state[:, None] == state[None]).all(axis=2)
    assert ((codes[:, None] == codes[None]) == same).all()  # one id per distinct (stage, apnea, arousal)
    rng = np.random.default_rng(3)
    exact = np.eye(codes.max() + 1)[codes] + 0.01 * rng.normal(size=(len(windows), codes.max() + 1))
    noise = rng.normal(size=(len(windows), 6))
    posteriors = state_posteriors({"exact": exact, "noise": noise}, windows)
    assert posteriors["exact"].shape == (len(windows), codes.max() + 1)
    np.testing.assert_allclose(posteriors["exact"].sum(axis=1), 1.0)
    assert (posteriors["exact"].argmax(axis=1) == codes).mean() > 0.95
    # out of fold: relabelling subject S0's windows leaves S0's probabilities as they were
    held = windows.subjects == "S0"
    relabelled = EvalWindows(
        "toy", windows.subjects, windows.nights, windows.onsets, windows.stages.copy(), windows.targets
    )
    relabelled.stages[held] = (relabelled.stages[held] + 1) % 5
    moved = state_posteriors({"exact": exact}, relabelled)["exact"]

    def by_key(w: EvalWindows, probabilities: np.ndarray, subject: str) -> np.ndarray:
        """``subject``'s probabilities ``(m, keys)`` over the (stage, events) keys of both labellings."""
        keys = [
            tuple(k) for k in np.unique(np.stack([w.stages, *(w.targets[k] for k in sorted(w.targets))], 1), axis=0)
        ]
        union = sorted(set(map(tuple, state)) | set(zip(relabelled.stages, *relabelled.targets.values())))
        rows = w.subjects == subject
        return np.stack([probabilities[rows, keys.index(k)] if k in keys else np.zeros(rows.sum()) for k in union], 1)

    # S0's reader never saw S0's labels: the same probabilities; S1's reader trained on S0's: they move
    np.testing.assert_allclose(by_key(relabelled, moved, "S0"), by_key(windows, posteriors["exact"], "S0"), atol=1e-9)
    assert np.abs(by_key(relabelled, moved, "S1") - by_key(windows, posteriors["exact"], "S1")).max() > 0.01
    oracle = evaluate_state_oracle(windows, n_candidates=40, queries=100)["rows"][STATE_ORACLE]["R@10"]["value"]
    table = evaluate_state_reader({"brain": exact, "heart": noise}, windows, n_candidates=40, queries=100)
    assert set(table["rows"]) == {f"{STATE_READER}: brain -> heart", f"{STATE_READER}: heart -> brain"}
    reader = evaluate_state_reader({"brain": exact, "heart": exact.copy()}, windows, n_candidates=40, queries=100)
    assert reader["rows"][f"{STATE_READER}: brain -> heart"]["R@10"]["value"] > 0.8 * oracle > 2 * 0.25
    chance_pair = table["rows"][f"{STATE_READER}: brain -> heart"]["R@10"]["value"]
    assert chance_pair < 0.25 + 0.15  # one side reads nothing: about chance (10 / 40)


def test_evaluations_the_data_cannot_support_name_the_dataset_and_what_it_lacks() -> None:
    sleep_edf = toy_windows(dataset="sleep-edf")
    sleep_edf.targets, sleep_edf.night_ahi = {}, {}
    x = {"all": np.zeros((len(sleep_edf), 2))}
    with pytest.raises(UnsupportedEvaluation, match=r"sleep-edf .*'apnea_hypopnea'.*no per-window 'apnea_hypopnea'"):
        evaluate_events(x, sleep_edf)
    with pytest.raises(UnsupportedEvaluation, match=r"sleep-edf .*arousals"):
        evaluate_events(x, sleep_edf, "arousal")
    with pytest.raises(UnsupportedEvaluation, match=r"sleep-edf .*'retrieval'.*a second modality"):
        evaluate_retrieval({"brain": np.zeros((len(sleep_edf), 2))}, sleep_edf)
    with pytest.raises(UnsupportedEvaluation, match=r"needs 49\)"):
        evaluate_retrieval(
            {"a": np.ones((len(sleep_edf), 2)), "b": np.ones((len(sleep_edf), 2))}, sleep_edf, n_candidates=100
        )
    lonely = toy_windows()
    lonely.targets["arousal"] = np.where(lonely.subjects == "S0", lonely.targets["arousal"], 0)
    with pytest.raises(UnsupportedEvaluation, match=r"without test subjects \['S0'\] the training windows hold one"):
        evaluate_events({"x": np.zeros((len(lonely), 1))}, lonely, "arousal")
    one_subject = toy_windows(nights=1)
    with pytest.raises(UnsupportedEvaluation, match=r"toy .*'staging'.*second subject"):
        evaluate_staging({"x": np.zeros((len(one_subject), 1))}, one_subject)
    with pytest.raises(UnsupportedEvaluation, match=r"sleep-edf"):  # checked before any fit
        evaluate_modalities({"brain": np.zeros((len(sleep_edf), 2))}, sleep_edf, tasks=("staging", "arousal"))


def test_tables_are_markdown_with_n_and_intervals() -> None:
    windows = toy_windows()
    rng = np.random.default_rng(0)
    features = {
        "brain": np.eye(5)[windows.stages] + 0.1 * rng.normal(size=(len(windows), 5)),
        "heart": rng.normal(size=(len(windows), 5)),
    }
    staging = evaluate_staging(
        subset_features(features, modality_subsets(list(features))),
        windows,
        shots=5,
        seeds=1,
        C=1.0,
        resamples=RESAMPLES,
    )
    events = evaluate_events({"all": np.concatenate(list(features.values()), axis=1)}, windows, resamples=RESAMPLES)
    retrieval = evaluate_retrieval(features, windows, n_candidates=40, queries=50, resamples=RESAMPLES)
    text = format_tables([staging, events, retrieval])
    assert "| features | balanced accuracy | macro-F1 | kappa | macro AUROC | n |" in text
    assert "| brain | 1.000 (1.000 [1.000, 1.000]) |" in text
    assert "| query -> candidates | recall@1 | recall@10 | chance @1 | chance @10 | n |" in text
    assert "0.025 | 0.250 | 4 |" in text  # chance at N = 40 beside n = 4 subjects
    assert "**AHI per night**" in text and "| features | Spearman | severity accuracy | nights |" in text
    with pytest.raises(ValueError, match="unknown task"):
        format_tables([{"task": "nope"}])


def test_missing_modality_rows_fuse_the_present_modalities_as_inference_does() -> None:
    """The table "with each modality removed" stages from the fused embedding of the modalities left: the
    mean of their L2-normalized vectors, not renormalized, exactly ``models.modal_embed.fuse``."""
    import torch

    from multiview_app.models.modal_embed import fuse

    rng = np.random.default_rng(3)
    features = {m: rng.normal(size=(7, 4)) * s for m, s in (("brain", 1.0), ("heart", 5.0), ("breathing", 0.1))}
    rows = modalities.missing_modality_rows(features)
    assert list(rows) == ["all (fused)", "all - brain (fused)", "all - heart (fused)", "all - breathing (fused)"]
    by_hand = (features["brain"] / np.linalg.norm(features["brain"], axis=1, keepdims=True)) / 2 + (
        features["breathing"] / np.linalg.norm(features["breathing"], axis=1, keepdims=True)
    ) / 2
    np.testing.assert_allclose(rows["all - heart (fused)"], by_hand, rtol=1e-12)
    stacked = torch.from_numpy(np.stack(list(features.values()), axis=1))  # (n, k, d)
    np.testing.assert_allclose(rows["all (fused)"], fuse(stacked).numpy(), rtol=1e-12)
    with pytest.raises(ValueError, match="one width"):
        modalities.missing_modality_rows({"brain": np.ones((3, 2)), "heart": np.ones((3, 5))})


def test_staging_with_each_modality_removed_pairs_every_row_against_all() -> None:
    windows = toy_windows()
    rng = np.random.default_rng(0)
    stage = np.eye(5)[windows.stages]
    features = {
        "brain": stage + 0.05 * rng.normal(size=(len(windows), 5)),
        "heart": rng.normal(size=(len(windows), 5)),
        "breathing": rng.normal(size=(len(windows), 5)),
    }
    [result] = evaluate_modalities(features, windows, tasks=("missing_modalities",), shots=5, seeds=1)
    assert result["task"] == "missing_modalities" and result["reference"] == "all (fused)"
    block = result["settings"]["all labels"]
    assert set(block["paired"]) == {"all - brain (fused)", "all - heart (fused)", "all - breathing (fused)"}
    assert block["paired"]["all - brain (fused)"]["ci_low"] > 0  # the stage lives in the brain only
    accuracy = {name: cells["balanced_accuracy"]["value"] for name, cells in block["rows"].items()}
    assert accuracy["all - heart (fused)"] > accuracy["all - brain (fused)"] + 0.3
    text = format_tables([result])
    assert "**Staging with each modality removed at inference (fused embedding of the others), all labels**" in text
    assert "| all (fused) minus | difference [95 % CI], p, subjects ahead |" in text
    with pytest.raises(UnsupportedEvaluation, match=r"a second modality"):
        evaluate_modalities({"brain": features["brain"]}, windows, tasks=("missing_modalities",))


class OracleRow:
    """A trainable row that records what the evaluators train it on and predicts the true label."""

    def __init__(self, labels: np.ndarray, subjects: np.ndarray) -> None:
        self.labels, self.subjects, self.calls = labels, subjects, []

    def fit_predict(self, train, labels, test, seed):
        self.calls.append((np.asarray(train), np.asarray(test), seed))
        held_out = set(self.subjects) - set(self.subjects[train])
        assert held_out and (held_out <= set(self.subjects[test]))  # subject folds: a test subject never learnt
        if len(test) < len(self.labels):  # staging scores the fold's test windows (events: every window)
            assert not set(self.subjects[train]) & set(self.subjects[test])
        np.testing.assert_array_equal(labels, self.labels[train])
        classes = np.unique(labels)
        return (self.labels[test][:, None] == classes[None]).astype(float), classes


def test_trainable_rows_are_trained_per_fold_on_the_feature_rows_draws() -> None:
    windows = toy_windows()
    oracle = OracleRow(windows.stages, windows.subjects)
    result = evaluate_staging(
        {"oracle": oracle, "x": np.eye(5)[windows.stages]}, windows, shots=5, seeds=2, C=1.0, resamples=RESAMPLES
    )
    assert len(oracle.calls) == 4 * 2 + 4  # few-shot: folds x draws, then all labels: one per fold
    assert [len(train) for train, _, _ in oracle.calls[:8]] == [25] * 8  # 5 windows per class
    assert [seed for _, _, seed in oracle.calls[:8]] == [0, 1] * 4
    assert result["settings"]["all labels"]["rows"]["oracle"]["kappa"]["value"] == pytest.approx(1.0)
    events = OracleRow(windows.targets["apnea_hypopnea"], windows.subjects)
    table = evaluate_events({"oracle": events}, windows, resamples=RESAMPLES)["rows"]["oracle"]
    assert table["auroc"]["value"] == pytest.approx(1.0) and "ahi" not in table  # no per-night refits
    assert len(events.calls) == 4 and all(len(test) == len(windows) for _, test, _ in events.calls)


def _package_imports(path: Path, package: str) -> set[str]:
    """Absolute names of the modules ``path`` (a module of ``package``) imports, relative imports resolved."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            found.add(".".join([*base, *([node.module] if node.module else [])]))
    return found


def test_modality_evaluation_is_maths_on_arrays() -> None:
    """eval/modalities/ reads caches and arrays: no run folders (train/), models, losses, adapters, view
    policies, tune or experiments, and no evaluator above it."""
    forbidden = (
        "multiview_app.train",
        "multiview_app.models",
        "multiview_app.losses",
        "multiview_app.data.adapters",
        "multiview_app.data.views",
        "multiview_app.tune",
        "multiview_app.experiments",
        "multiview_app.eval.sleep_staging",
        "multiview_app.eval.evaluator",
    )
    package = Path(modalities.__file__).parent
    offenders = {
        path.name: sorted(m for m in _package_imports(path, "multiview_app.eval.modalities") if m.startswith(forbidden))
        for path in package.glob("*.py")
    }
    assert "multiview_app.eval.protocols.stats" in _package_imports(
        package / "metrics.py", "multiview_app.eval.modalities"
    )
    assert not {k: v for k, v in offenders.items() if v}, offenders
