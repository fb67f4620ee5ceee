"""Sleep-staging protocol pieces: class-balanced few-shot draws, metrics, band powers."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from multiview_app.eval.bandpower import BANDS, bandpower_features, relative_band_powers
from multiview_app.eval.protocols.staging import (
    balanced_sample,
    capped_shots,
    few_shot_protocol,
    missing_class_note,
    staging_metrics,
)


def test_balanced_sample_is_class_balanced_and_capped():
    labels = np.array([0] * 50 + [1] * 3 + [2] * 20 + [4] * 10)
    index, drawn = balanced_sample(labels, 10, np.random.default_rng(0))
    assert drawn == {"W": 10, "N1": 3, "N2": 10, "REM": 10}  # N1 capped by what exists, N3 absent
    assert np.bincount(labels[index], minlength=5).tolist() == [10, 3, 10, 0, 10]
    assert len(set(index.tolist())) == index.size  # without replacement
    again, _ = balanced_sample(labels, 10, np.random.default_rng(0))
    np.testing.assert_array_equal(index, again)


def test_staging_metrics_values():
    y_true = np.array([0, 0, 1, 2, 2, 2, 3, 4])
    perfect = staging_metrics(y_true, y_true)
    assert perfect["accuracy"] == perfect["balanced_accuracy"] == perfect["macro_f1"] == perfect["kappa"] == 1.0
    worse = staging_metrics(y_true, np.array([0, 0, 2, 2, 2, 2, 3, 0]))
    assert worse["accuracy"] == pytest.approx(6 / 8)
    assert worse["per_class_f1"]["N1"] == 0.0 and worse["per_class_f1"]["N2"] == pytest.approx(2 * 3 / (3 + 4))
    assert worse["balanced_accuracy"] == pytest.approx((1 + 0 + 1 + 1 + 0) / 5)


def test_band_powers_find_the_right_band():
    sfreq, t = 100.0, np.arange(3000) / 100.0
    windows = np.stack([np.stack([np.sin(2 * np.pi * f * t), np.sin(2 * np.pi * 2.0 * t)]) for f in (10.0, 14.0, 6.0)])
    rel = relative_band_powers(windows, sfreq)  # (3, 2, 5)
    names = list(BANDS)
    assert [names[i] for i in rel[:, 0].argmax(axis=-1)] == ["alpha", "sigma", "theta"]
    assert (rel[:, 1].argmax(axis=-1) == names.index("delta")).all()
    assert rel.sum(axis=-1).max() <= 1.0 + 1e-6 and rel[0, 0, names.index("alpha")] > 0.9
    assert bandpower_features(windows, sfreq).shape == (3, 10)


def test_few_shot_protocol_separates_informative_from_random_features():
    rng = np.random.default_rng(0)
    y_train, y_test = rng.integers(0, 5, 400), rng.integers(0, 5, 200)
    centres = rng.normal(0, 3, (5, 4))
    features = {
        "informative": {
            "train": centres[y_train] + rng.normal(0, 1, (400, 4)),
            "test": centres[y_test] + rng.normal(0, 1, (200, 4)),
        },
        "noise": {"train": rng.normal(0, 1, (400, 4)), "test": rng.normal(0, 1, (200, 4))},
    }
    results, drawn, predictions = few_shot_protocol(features, y_train, y_test, (5, 1000), seeds=2)
    assert drawn["5"] == [{s: 5 for s in ["W", "N1", "N2", "N3", "REM"]}] * 2  # one entry per seed
    assert all(sum(d.values()) == 400 for d in drawn["1000"])  # capped by what exists
    assert capped_shots(drawn) == ["1000"]
    assert len(results["informative"]["5"]["runs"]) == 2 and results["informative"]["5"]["n_runs"] == 2
    assert results["informative"]["1000"]["accuracy"]["mean"] > 0.8
    assert results["noise"]["1000"]["accuracy"]["mean"] < 0.4
    assert results["informative"]["5"]["kappa"]["std"] >= 0.0 and predictions["noise"].shape == (200,)


def test_missing_training_class_gives_one_note_and_no_raw_warnings(recwarn):
    rng = np.random.default_rng(1)
    y_train = rng.integers(0, 4, 300)  # no REM among the training subjects
    y_test = rng.integers(0, 5, 100)
    features = {"f": {"train": rng.normal(0, 1, (300, 3)), "test": rng.normal(0, 1, (100, 3))}}
    _, drawn, _ = few_shot_protocol(features, y_train, y_test, (5, 20), seeds=3)
    note = missing_class_note(drawn, [y_test])
    assert note == "training subjects have no windows of REM (6 of 6 fits); those fits never predict them (F1 0)"
    assert missing_class_note(drawn, [y_train]) is None


def test_pool_results_is_mean_std_over_runs_x_folds_x_seeds():
    from multiview_app.eval.protocols.staging import pool_results

    rng = np.random.default_rng(2)
    y = rng.integers(0, 5, 300)
    centres = rng.normal(0, 3, (5, 4))
    results = []
    for run in range(2):  # two "pretraining runs" whose features differ in quality
        noise = 1.0 + 3 * run
        feats = {
            "trained": {
                "train": centres[y] + rng.normal(0, noise, (300, 4)),
                "test": centres[y] + rng.normal(0, noise, (300, 4)),
            }
        }
        res, drawn, _ = few_shot_protocol(feats, y, y, (5,), seeds=3)
        results.append(
            {
                "run": f"r{run}",
                "protocol": "in-domain",
                "dataset": "d",
                "shots": [5],
                "results": res,
                "drawn_per_class": drawn,
                "notes": [],
                "windows": {"train": 300, "test": 300},
            }
        )
    pooled = pool_results(results)
    scores = [fit["kappa"] for r in results for fit in r["results"]["trained"]["5"]["runs"]]
    assert pooled["results"]["trained"]["5"]["n_runs"] == 6
    assert pooled["results"]["trained"]["5"]["kappa"]["mean"] == pytest.approx(np.mean(scores))
    assert pooled["results"]["trained"]["5"]["kappa"]["std"] == pytest.approx(np.std(scores))
    assert len(pooled["drawn_per_class"]["5"]) == 6 and pooled["pooled_runs"] == ["r0", "r1"]
    with pytest.raises(ValueError, match="differ in protocol"):
        pool_results([results[0], {**results[1], "protocol": "cross-dataset"}])


def test_paper_classifier_learns_the_channel_combination_and_stops_early():
    from multiview_app.eval.protocols.channel_classifier import fit_channel_classifier

    rng = np.random.default_rng(4)
    centres = rng.normal(0, 2, (5, 6))

    def sample(n):  # channel 0 carries the class, channel 1 is noise of larger scale
        y = rng.integers(0, 5, n)
        x = np.stack([centres[y] + rng.normal(0, 0.5, (n, 6)), rng.normal(0, 3, (n, 6))], axis=1)
        return x.astype(np.float32), y

    (x, y), (xv, yv), (xt, yt) = sample(400), sample(100), sample(300)
    fitted = fit_channel_classifier(x, y, xv, yv, lr=1e-2)
    assert (fitted.predict(xt) == yt).mean() > 0.85
    weights = fitted.model.combine.weight.detach().abs()[0]
    assert weights[0] > 2 * weights[1]  # the informative channel dominates the learned combination
    assert 1 <= fitted.epochs <= 40


def test_c_is_chosen_inside_the_drawn_windows_for_every_row():
    rng = np.random.default_rng(5)
    y_train, y_test = rng.integers(0, 5, 300), rng.integers(0, 5, 150)
    centres = rng.normal(0, 1, (5, 20))
    feats = {
        name: {
            split: centres[y] + rng.normal(0, 2, (y.size, 20)) for split, y in (("train", y_train), ("test", y_test))
        }
        for name in ("a", "b")
    }
    results, _, _ = few_shot_protocol(feats, y_train, y_test, (10,), seeds=2, C=None)
    runs = [r for name in results for r in results[name]["10"]["runs"]]
    assert {r["hyperparameter"] for r in runs} <= {0.01, 0.1, 1.0, 10.0}
    assert {r["chosen_by"] for r in runs} == {"inner-cv"}


@pytest.mark.parametrize("shots", [1, 3, 10])
def test_the_classifier_sees_exactly_s_labels_per_class(monkeypatch, shots: int):
    """s in the tables is every label a classifier ever sees: the inner cross-validation and the final fit
    only ever get the s drawn windows per class, never a validation set."""
    from multiview_app.eval.protocols import staging

    rng = np.random.default_rng(0)
    y_train, y_test = np.repeat(np.arange(5), 40), np.repeat(np.arange(5), 10)
    feats = {
        "a": {
            split: np.eye(5)[y] + rng.normal(0, 1, (y.size, 5)) for split, y in (("train", y_train), ("test", y_test))
        }
    }
    seen: list[np.ndarray] = []
    real_fit = staging.fit_linear_classifier

    def recording_fit(x, y, **kwargs):
        seen.append(np.asarray(x))
        return real_fit(x, y, **kwargs)

    real_path = staging._c_path_scores

    def recording_path(grid, x, y, train, held, seed):
        seen.extend([np.asarray(x)[train], np.asarray(x)[held]])
        return real_path(grid, x, y, train, held, seed)

    monkeypatch.setattr(staging, "fit_linear_classifier", recording_fit)
    monkeypatch.setattr(staging, "_c_path_scores", recording_path)
    results, drawn, _ = few_shot_protocol(feats, y_train, y_test, (shots,), seeds=1, C=None)
    labelled = {row.tobytes() for x in seen for row in x}
    assert len(labelled) == 5 * shots  # every row a fit ever saw is one of the s drawn windows per class
    assert drawn[str(shots)][0] == {stage: shots for stage in ("W", "N1", "N2", "N3", "REM")}
    chosen_by = results["a"][str(shots)]["runs"][0]["chosen_by"]
    assert chosen_by == ("fixed" if shots < 2 else "inner-cv")
    if shots < 2:
        assert results["a"]["1"]["runs"][0]["hyperparameter"] == staging.FIXED_C
        assert "fixed value 1" in staging.fixed_hyperparameter_note(results)


def test_combined_row_concatenates_band_powers_and_encoder_features():
    from multiview_app.eval.protocols.staging import combined_features

    bands, encoder = np.arange(6.0).reshape(2, 3), np.arange(8.0).reshape(2, 4)
    np.testing.assert_array_equal(combined_features(bands, encoder), np.hstack([bands, encoder]))
    per_channel = combined_features(np.zeros((2, 3, 5)), np.ones((2, 3, 7)))
    assert per_channel.shape == (2, 3, 12) and per_channel.dtype == np.float32
    assert per_channel[..., :5].sum() == 0 and per_channel[..., 5:].min() == 1
    with pytest.raises(ValueError, match="do not pair up"):
        combined_features(np.zeros((2, 4, 5)), np.ones((2, 2, 7)))


def test_paired_differences_are_per_subject_with_fits_sharing_a_subject_averaged_first():
    from multiview_app.eval.protocols.staging import paired_differences
    from multiview_app.eval.protocols.stats import bootstrap_ci

    def fits(per_fit: list[dict[str, float]]) -> dict:
        return {"runs": [{"balanced_accuracy": float(np.mean(list(p.values()))), "per_subject": p} for p in per_fit]}

    # fold 1 tests A and B (two draws), fold 2 tests C (two draws): 4 fits, 3 subjects
    trained = fits([{"A": 0.7, "B": 0.6}, {"A": 0.8, "B": 0.5}, {"C": 0.6}, {"C": 0.7}])
    band = fits([{"A": 0.6, "B": 0.65}, {"A": 0.6, "B": 0.55}, {"C": 0.5}, {"C": 0.5}])
    cell = paired_differences({"trained": {"10": trained}, "bandpower": {"10": band}})["bandpower"]["10"]
    per_subject = {"A": np.mean([0.1, 0.2]), "B": np.mean([-0.05, -0.05]), "C": np.mean([0.1, 0.2])}
    assert cell["n"] == 3 and cell["ahead"] == 2 and cell["behind"] == 1  # subjects, not the 4 fits
    np.testing.assert_allclose([cell["units"][k] for k in "ABC"], [per_subject[k] for k in "ABC"])
    np.testing.assert_allclose(cell["mean"], np.mean(list(per_subject.values())))
    np.testing.assert_allclose((cell["ci_low"], cell["ci_high"]), bootstrap_ci(list(per_subject.values())))
    table = {"trained": {"10": trained}, "bandpower": {"10": band}}
    assert paired_differences({"bandpower": table["bandpower"]}) == {}
    with pytest.raises(ValueError, match="fits"):
        paired_differences({"trained": trained and {"10": trained}, "bandpower": {"10": fits([{"A": 0.5}])}})
    # results without per-subject scores (an older version's) give no paired cell rather than a per-fit one
    older = {"runs": [{"balanced_accuracy": 0.5}] * 4}
    assert paired_differences({"trained": {"10": older}, "bandpower": {"10": older}}) == {}


def test_fits_hold_per_subject_balanced_accuracy_of_their_test_windows():
    from multiview_app.eval.protocols.staging import few_shot_staging

    rng = np.random.default_rng(0)
    y = np.tile(np.arange(5), 40)
    feats = {
        "trained": {
            "train": np.eye(5)[y] + rng.normal(0, 0.3, (200, 5)),
            "test": np.eye(5)[y] + rng.normal(0, 0.8, (200, 5)),
        }
    }
    subjects = np.repeat(["S1", "S2"], 100)
    out = few_shot_staging(feats, y, y, (5,), 1, 1.0, test_subjects=subjects)
    fit = out["results"]["trained"]["5"]["runs"][0]
    predicted = out["predictions"]["trained"]
    from sklearn.metrics import balanced_accuracy_score

    for name in ("S1", "S2"):
        mask = subjects == name
        assert fit["per_subject"][name] == pytest.approx(balanced_accuracy_score(y[mask], predicted[mask]))
    with pytest.raises(ValueError, match="test_subjects"):
        few_shot_staging(feats, y, y, (5,), 1, 1.0, test_subjects=subjects[:10])


def test_staging_confusion_plot_is_row_normalized_and_titled_with_dataset_and_classifier():
    """Issue 27: the confusion matrix shows shares of each true stage (rows sum to 1), pooled over fits,
    and its title names the dataset and the classifier (it showed raw counts of one fit)."""
    from multiview_app.eval.sleep_staging import classifier_label, confusion_figure

    counts = np.array([[8, 2, 0, 0, 0], [1, 3, 0, 0, 0], [0, 0, 0, 0, 0], [0, 0, 5, 15, 0], [0, 0, 0, 0, 4]])
    title = f"sleep-edf, {classifier_label('logreg', None, None)}: trained encoder, s=100, 10 fits"
    fig = confusion_figure(counts, title)
    ax = fig.axes[0]
    assert ax.get_title() == "sleep-edf, logreg, C tuned: trained encoder, s=100, 10 fits"
    cells = [float(t.get_text()) for t in ax.texts]
    np.testing.assert_allclose(
        np.reshape(cells, (5, 5)), np.round(counts / np.maximum(counts.sum(1, keepdims=True), 1), 2)
    )
    np.testing.assert_allclose(ax.images[0].get_array().data.sum(axis=1), [1, 1, 0, 1, 1])
    assert classifier_label("paper", None, 0.01) == "paper classifier, lr 0.01"


def test_capped_draws_are_fitted_once_with_the_same_results(monkeypatch: pytest.MonkeyPatch) -> None:
    """A draw capped for every class (s above every class count) is the same for every seed: its logistic fits
    are made once and reused, and the results equal fitting every seed afresh (lbfgs ignores the seed)."""
    from multiview_app.eval.protocols import staging

    rng = np.random.default_rng(0)
    y_train, y_test = np.repeat(np.arange(5), 8), np.repeat(np.arange(5), 10)
    feats = {
        row: {
            split: np.eye(5)[y][:, [0, 1, 2, 3, 4, 0]] * scale + rng.normal(0, 1.0, (y.size, 6))
            for split, y in (("train", y_train), ("test", y_test))
        }
        for row, scale in (("trained", 1.0), ("bandpower", 0.5))
    }
    calls: list[str] = []
    real_fit, real_path = staging.fit_linear_classifier, staging._c_path_scores
    monkeypatch.setattr(staging, "fit_linear_classifier", lambda *a, **k: calls.append("final") or real_fit(*a, **k))
    monkeypatch.setattr(staging, "_c_path_scores", lambda *a: calls.append("fold") or real_path(*a))
    cached = staging.few_shot_staging(feats, y_train, y_test, (3, 50), 3, None)
    counted_cached = Counter(calls)
    real_fit_predict = staging._fit_predict
    monkeypatch.setattr(staging, "_fit_predict", lambda *a: real_fit_predict(*a[:6]))  # no reuse
    calls.clear()
    fresh = staging.few_shot_staging(feats, y_train, y_test, (3, 50), 3, None)
    # per row and draw: one C path per inner fold (s = 3: 3 folds; s = 50 draws all 8 windows: 5 folds) + a final fit
    assert Counter(calls) == {"fold": 2 * (3 * 3 + 3 * 5), "final": 2 * (3 + 3)}
    # s=50 draws all 8 windows per class, the same for every seed: its choice and final fit are made once
    assert counted_cached == {"fold": 2 * (3 * 3 + 1 * 5), "final": 2 * (3 + 1)}
    assert cached["results"] == fresh["results"] and cached["confusion"] == fresh["confusion"]
    for row in feats:
        np.testing.assert_array_equal(cached["predictions"][row], fresh["predictions"][row])
