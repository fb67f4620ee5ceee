"""Validation-chosen loss settings of ``mvapp experiment psg-modalities`` (``experiments.psg_select``): the grid's
settings, run tags, the choice (highest validation score, ties to the earlier value) and the retrieval space."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from multiview_app.eval.modalities import EvalWindows, evaluate_modalities
from multiview_app.experiments import psg_select


def test_settings_are_the_grid_product_and_tags_name_them() -> None:
    grid = {"m3g": {"epsilon": [0.1, 0.2], "anderson": [0, 16]}}
    settings = psg_select.settings_of(grid, "m3g")
    assert settings == [
        {"epsilon": 0.1, "anderson": 0},
        {"epsilon": 0.1, "anderson": 16},
        {"epsilon": 0.2, "anderson": 0},
        {"epsilon": 0.2, "anderson": 16},
    ]
    assert psg_select.settings_of(grid, "mveb") == [{}]
    assert psg_select.setting_tag({"epsilon": 0.4, "anderson": 16}) == "epsilon0.4-anderson16"
    assert psg_select.setting_overrides({"tau": 0.05}) == ["loss.tau=0.05"]


def test_default_grid_holds_each_losss_default_and_valid_parameters() -> None:
    from multiview_app.losses import loss_parameters

    psg_select.check_grid(psg_select.DEFAULT_GRID, "DEFAULT_GRID")
    for loss, params in psg_select.DEFAULT_GRID.items():
        defaults = loss_parameters(loss)
        assert all(defaults[p] in values for p, values in params.items()), loss


def test_the_highest_validation_score_wins_and_ties_go_to_the_earlier_value(monkeypatch) -> None:
    scores = {"a0.1": 0.5, "a0.2": 0.7, "a0.4": 0.7, "b1": 0.3, "b2": 0.3}
    monkeypatch.setattr(psg_select, "validation_score", lambda run, cache, windows, sizes: scores[run.name])
    monkeypatch.setattr("multiview_app.eval.modalities.cache_baselines", lambda cache, only: (None, {}, {}))
    trained = []

    def train(loss: str, seed: int, setting: dict) -> Path:
        trained.append((loss, seed))
        return Path(f"{next(iter(setting))}{next(iter(setting.values())):g}")

    grid = {"m3g": {"a": [0.1, 0.2, 0.4]}, "mveb": {"b": [1, 2]}}
    sizes = SimpleNamespace(losses=["m3g", "mveb"], seeds=[3, 4], grid=grid)
    chosen, rows = psg_select.select_settings(train, Path("val"), sizes)
    assert chosen == {"m3g": {"a": 0.2}, "mveb": {"b": 1}}
    assert trained == [("m3g", 3)] * 3 + [("mveb", 3)] * 2  # the first pretraining seed only
    assert [r.get("chosen", False) for r in rows] == [False, True, False, True, False]
    assert psg_select.select_settings(train, None, sizes) == ({"m3g": {}, "mveb": {}}, [])


def test_a_setting_whose_projections_collapsed_is_marked_and_chosen_only_if_all_did(
    tmp_path: Path, monkeypatch
) -> None:
    import json

    monkeypatch.setattr(
        psg_select, "validation_score", lambda run, cache, windows, sizes: {"a1": 0.6, "a2": 0.8}[run.name]
    )
    monkeypatch.setattr("multiview_app.eval.modalities.cache_baselines", lambda cache, only: (None, {}, {}))
    (tmp_path / "a2").mkdir()
    (tmp_path / "a2" / "diagnostics.json").write_text(json.dumps({"diag/uniformity": {"last": -0.0012}}))
    sizes = SimpleNamespace(losses=["pvc_geometric"], seeds=[0], grid={"pvc_geometric": {"a": [1, 2]}}, val_nights=2)
    sizes.val_seed = 9
    train = lambda loss, seed, setting: tmp_path / f"a{setting['a']}"  # noqa: E731
    chosen, rows = psg_select.select_settings(train, Path("val"), sizes)
    assert [r["collapsed"] for r in rows] == [None, -0.0012]
    assert chosen == {"pvc_geometric": {"a": 1}}  # the higher score collapsed: the other value is chosen
    page = "\n".join(psg_select.selection_markdown(rows, sizes))
    assert "| pvc_geometric | a2 | 0.800 | collapsed (-0.0012) |" in page and "| a1 | **0.600** |  |" in page
    (tmp_path / "a1").mkdir()
    (tmp_path / "a1" / "diagnostics.json").write_text(json.dumps({"diag/uniformity": {"last": -0.001}}))
    assert psg_select.select_settings(train, Path("val"), sizes)[0] == {"pvc_geometric": {"a": 2}}  # all collapsed


def test_with_two_selection_seeds_each_value_trains_both_and_the_mean_decides(tmp_path: Path, monkeypatch) -> None:
    import json

    scores = {("a1", 0): 0.80, ("a1", 1): 0.60, ("a2", 0): 0.75, ("a2", 1): 0.70, ("a3", 0): 0.90, ("a3", 1): 0.90}
    monkeypatch.setattr(
        psg_select, "validation_score", lambda run, cache, windows, sizes: scores[run.parent.name, int(run.name)]
    )
    monkeypatch.setattr("multiview_app.eval.modalities.cache_baselines", lambda cache, only: (None, {}, {}))
    trained = []

    def train(loss: str, seed: int, setting: dict) -> Path:
        trained.append((setting["a"], seed))
        (tmp_path / f"a{setting['a']}" / str(seed)).mkdir(parents=True, exist_ok=True)
        return tmp_path / f"a{setting['a']}" / str(seed)

    (tmp_path / "a3" / "1").mkdir(parents=True)  # a3's second seed collapsed, its first did not
    (tmp_path / "a3" / "1" / "diagnostics.json").write_text(json.dumps({"diag/uniformity": {"last": -0.002}}))
    grid = {"m3g": {"a": [1, 2, 3]}}
    sizes = SimpleNamespace(losses=["m3g"], seeds=[0, 1, 2], grid=grid, select_seeds=2, val_nights=2, val_seed=9)
    chosen, rows = psg_select.select_settings(train, Path("val"), sizes)
    assert trained == [(1, 0), (1, 1), (2, 0), (2, 1), (3, 0), (3, 1)]  # the first two seeds, never seed 2
    assert [r["score"] for r in rows] == pytest.approx([0.70, 0.725, 0.90])
    assert chosen == {"m3g": {"a": 2}}  # a1 wins seed 0 alone; the mean picks a2; a3 has a collapsed run
    assert rows[2]["collapsed"] == -0.002
    page = "\n".join(psg_select.selection_markdown(rows, sizes))
    assert "pretraining seeds 0, 1;" in page and "(leave-one-subject-out), mean over the seeds;" in page
    assert "| m3g | a2 | **0.725** (0.750, 0.700) |  |" in page


def test_retrieval_ranks_the_aligned_embeddings_not_the_encoder_features() -> None:
    rng = np.random.default_rng(0)
    n = 240
    windows = EvalWindows(
        dataset="toy",
        subjects=np.repeat(np.arange(4), n // 4),
        nights=np.repeat(np.arange(4), n // 4),
        onsets=np.tile(np.arange(n // 4) * 30.0, 4),
        stages=rng.integers(0, 5, n),
    )
    features = {"a": rng.normal(size=(n, 8)), "b": rng.normal(size=(n, 8))}  # two unrelated encoder spaces
    shared = rng.normal(size=(n, 8))
    aligned = {"a": shared + 0.01 * rng.normal(size=(n, 8)), "b": shared}
    kw = dict(tasks=("retrieval",), n_candidates=40, seed=0)
    (on_features,) = evaluate_modalities(features, windows, **kw)
    (on_aligned,) = evaluate_modalities(features, windows, aligned=aligned, **kw)
    assert on_aligned["rows"]["a -> b"]["R@1"]["value"] == pytest.approx(1.0)
    assert on_features["rows"]["a -> b"]["R@1"]["value"] < 0.2


def test_a_runs_validation_score_is_kept_and_reused_only_while_its_inputs_match(tmp_path: Path, monkeypatch) -> None:
    import json

    from multiview_app.experiments import psg_modalities

    calls = []

    def fake_embed(run, weights, cache, windows):
        calls.append(run)
        return {"a": np.zeros((4, 2))}

    result = {"settings": {"all labels": {"rows": {"all": {"macro_f1": {"value": 0.61}}}}}}
    monkeypatch.setattr(psg_modalities, "embed", fake_embed)
    monkeypatch.setattr("multiview_app.eval.modalities.evaluate_modalities", lambda *a, **k: [result])
    sizes = SimpleNamespace(shots=5, draws=1)
    assert psg_select.validation_score(tmp_path, Path("val"), None, sizes) == 0.61
    assert psg_select.validation_score(tmp_path, Path("val"), None, sizes) == 0.61
    assert len(calls) == 1  # the second call read the kept score
    kept = json.loads((tmp_path / psg_select.SCORE_FILE).read_text())
    assert kept["key"]["cache"] == "val" and kept["score"] == 0.61
    psg_select.validation_score(tmp_path, Path("val"), None, SimpleNamespace(shots=10, draws=1))
    assert len(calls) == 2  # other shots: measured again


def test_select_seeds_beyond_the_pretraining_seeds_is_refused(tmp_path: Path) -> None:
    from multiview_app.experiments.psg_modalities import load_sizes

    (tmp_path / "sizes.yaml").write_text("seeds: [0, 1]\nselect_seeds: 2\n")
    assert load_sizes(tmp_path / "sizes.yaml").select_seeds == 2
    (tmp_path / "sizes.yaml").write_text("seeds: [0, 1]\nselect_seeds: 3\n")
    with pytest.raises(ValueError, match=r"sizes.yaml: select_seeds 3: expected 1 to 2"):
        load_sizes(tmp_path / "sizes.yaml")
