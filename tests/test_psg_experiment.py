"""``mvapp experiment psg-modalities`` end to end at toy size (2 + 3 short synthetic whole-PSG nights, 2 training
steps, one seed, one loss) through the real code paths: synthesis, modality caches, training, per-modality
embedding, the modality evaluators, the pooled tables and the figure; its functions stay under 60 lines."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from multiview_app.cli import main
from multiview_app.experiments import psg_modalities

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "psg_modalities_sleepfm.yaml"
TOY_SIZES = """\
nights: 2
eval_nights: 3
hours: 1.5
compress: 3
seed: 7
eval_seed: 8
steps: 2
batch: 8
candidates: 20
shots: 5
draws: 1
seeds: [0]
losses: [sleepfm_loo]
e2e_steps: 2
e2e_tasks: [staging, apnea_hypopnea]
val_nights: 3
val_seed: 9
grid: {sleepfm_loo: {init_log_scale: [0.0, 2.3]}}
retrieval_nights: 2
retrieval_hours: 0.5
retrieval_seed: 10
"""


@pytest.mark.slow
def test_psg_modalities_experiment_writes_tables_and_figure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sizes = tmp_path / "sizes.yaml"
    sizes.write_text(TOY_SIZES)
    out = tmp_path / "out"
    argv = ["experiment", "psg-modalities", "--config", str(CONFIG), "--sizes", str(sizes), "--out", str(out)]
    assert main(argv) == 0
    summary = json.loads((out / "psg_modalities.json").read_text())
    pooled = summary["pooled"]
    assert summary["modalities"] == ["brain", "heart", "breathing"]
    assert set(summary["runs"]) == {"sleepfm_loo seed 0"}
    assert {"sleepfm_loo: brain -> heart", "random init: breathing -> brain"} <= set(pooled["retrieval"])
    assert 0.0 <= pooled["retrieval"]["stage + events oracle"]["R@10"][0] <= 1.0  # on the 2 retrieval nights
    read = pooled["retrieval"]["state read from handcrafted features (supervised): heart -> breathing"]["R@10"]
    assert len(read) == 1 and 0.0 <= read[0] <= 1.0  # once, from the retrieval nights' handcrafted features
    assert Path(summary["caches"]["retrieval"]).name == "psg_retrieval_cache"
    staging = pooled["staging, all labels"]
    assert {"sleepfm_loo: brain", "sleepfm_loo: all", "random init: all", "band power (brain)"} <= set(staging)
    assert 0.0 <= staging["sleepfm_loo: all"]["balanced_accuracy"][0] <= 1.0
    # the end-to-end model on the same folds (with every label: the supervised ceiling), few-shot on the same draws
    assert 0.0 <= staging["end-to-end CNN = supervised ceiling"]["macro_auroc"][0] <= 1.0
    assert "end-to-end CNN" in pooled["staging, few-shot s=5"]
    assert "end-to-end CNN" not in str(pooled.get("arousal", {}))  # not among the sizes' e2e_tasks
    removed = pooled["missing modalities, all labels"]
    assert {"sleepfm_loo: all (fused)", "sleepfm_loo: all - heart (fused)", "random init: all - brain (fused)"} <= set(
        removed
    )
    assert {g["status"] for g in summary["goals"]} <= {"met", "not met", "not measured", "reported"}
    assert "heart-only staging, 4-class kappa" in {g["goal"] for g in summary["goals"]}
    page = (out / "psg_modalities.md").read_text()
    assert "**retrieval**" in page and "**staging, all labels**" in page and "### sleepfm_loo, seed 0" in page
    assert "## Goals (as measured)" in page and "Staging with each modality removed at inference" in page
    assert (out / "psg_modalities.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the setting was chosen on the validation nights among the grid's two, and the chosen run is the comparison's
    selection = summary["selection"]
    assert [r["setting"] for r in selection] == ["init_log_scale0", "init_log_scale2.3"]
    (chosen,) = [r for r in selection if r.get("chosen")]
    assert "## Settings chosen on validation nights" in page
    tag = chosen["setting"]
    assert summary["runs"]["sleepfm_loo seed 0"].endswith(f"psg_modalities_sleepfm_sleepfm_loo_{tag}_seed0")
    # training again reuses the finished run (nothing retrained: the same model file)
    model = Path(summary["runs"]["sleepfm_loo seed 0"]) / "model.safetensors"
    stamp = model.stat().st_mtime_ns
    cache, toy = Path(summary["caches"]["pretrain"]), psg_modalities.load_sizes(sizes)
    train = psg_modalities.trainer(CONFIG, cache, (out / "runs").resolve(), toy, [])
    runs = psg_modalities.train_runs(train, toy, {"sleepfm_loo": chosen["values"]})
    assert list(runs.values()) == [model.parent] and model.stat().st_mtime_ns == stamp
    # evaluating again reads every feature set's kept results back (none evaluated): the same per-run results
    assert {p.name for p in model.parent.glob("psg_evaluation_*.json")} == {
        "psg_evaluation_final.json",
        "psg_evaluation_init.json",
    }
    first = json.loads((out / "psg_modalities.json").read_text())["per_run"]

    def evaluated(*args: object) -> None:
        raise AssertionError("a kept feature set was evaluated again")

    monkeypatch.setattr(psg_modalities, "feature_tasks", evaluated)
    assert main(argv) == 0
    assert json.loads((out / "psg_modalities.json").read_text())["per_run"] == first


def test_sizes_file_with_unknown_keys_or_equal_seeds_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "sizes.yaml"
    path.write_text("nights: 2\nnigths: 3\n")
    with pytest.raises(ValueError, match="nigths"):
        psg_modalities.load_sizes(path)
    path.write_text("seed: 5\neval_seed: 5\n")
    with pytest.raises(ValueError, match="must differ"):
        psg_modalities.load_sizes(path)
    path.write_text("val_seed: 0\n")
    with pytest.raises(ValueError, match="must differ"):
        psg_modalities.load_sizes(path)
    path.write_text("grid: {m3g: {temperature: [0.1]}}\n")
    with pytest.raises(ValueError, match=r"grid.m3g: unknown parameter\(s\) \['temperature'\]; valid: .*epsilon"):
        psg_modalities.load_sizes(path)
    path.write_text("grid: {m3g: {epsilon: []}}\n")
    with pytest.raises(ValueError, match="non-empty list"):
        psg_modalities.load_sizes(path)


def test_cache_modalities_follow_the_config() -> None:
    assert psg_modalities.cache_modalities({"modalities": "six"}) == "six"
    spec = {"brain": {"groups": ["brain", "eyes"]}, "breathing": {"groups": ["breathing", "oximetry"], "sfreq": 10}}
    assert psg_modalities.cache_modalities({"modalities": spec}) == "brain,eyes,breathing,oximetry"


def test_spread_text_gives_mean_and_min_max_over_seeds() -> None:
    assert psg_modalities.spread_text([0.5, 0.7, 0.6]) == "0.600 [0.500, 0.700]"
    assert psg_modalities.spread_text([0.25]) == "0.250"
    assert psg_modalities.spread_text([float("nan")]) == "n/a"


def test_no_function_of_the_experiment_exceeds_60_lines() -> None:
    tree = ast.parse(Path(psg_modalities.__file__).read_text())
    lengths = {n.name: n.end_lineno - n.lineno + 1 for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    assert "experiment" in lengths
    assert not {name: n for name, n in lengths.items() if n > 60}
