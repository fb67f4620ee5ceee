"""Headline tables over pretraining seeds (experiments/seeded_staging.py, eval/protocols/stats.seeds_subjects_ci)
and the tables published into the README (experiments/publish.py)."""

from __future__ import annotations

import numpy as np
import pytest

from multiview_app.eval.protocols.stats import bootstrap_ci, seeds_subjects_ci
from multiview_app.experiments.eeg_demo import DEMO_KEYS, demo_settings
from multiview_app.experiments.publish import blocks, publish, replace_block
from multiview_app.experiments.seeded_staging import markdown_table, summarize


def test_seeds_subjects_ci_widens_with_the_spread_between_seeds() -> None:
    rng = np.random.default_rng(0)
    subjects = rng.normal(0.7, 0.05, size=10)
    same = np.tile(subjects, (3, 1))  # every seed gives the same scores: only the subjects vary
    shifted = same + np.array([[-0.05], [0.0], [0.05]])  # the pretraining run moves every subject
    low_same, high_same = seeds_subjects_ci(same)
    low_shift, high_shift = seeds_subjects_ci(shifted)
    assert low_same < subjects.mean() < high_same
    assert high_shift - low_shift > 1.5 * (high_same - low_same)
    # one seed: the subject bootstrap alone, close to the one-stage interval of the same values
    one = seeds_subjects_ci(subjects[None, :])
    assert one[0] == pytest.approx(bootstrap_ci(subjects)[0], abs=0.02)
    assert seeds_subjects_ci(np.full((3, 4), 0.5)) == (0.5, 0.5)
    with pytest.raises(ValueError, match="seeds, subjects"):
        seeds_subjects_ci(np.zeros(4))


def _result(seed_shift: float, shots=(10, 50)) -> dict:
    """A staging result with two folds of two subjects, two draws each; trained = band power + 0.02 + shift."""
    subjects = {"a": 0.6, "b": 0.7, "c": 0.8, "d": 0.9}
    rows = {}
    for row, offset in (("trained", 0.02 + seed_shift), ("bandpower", 0.0), ("handcrafted", 0.05)):
        rows[row] = {
            str(s): {
                "runs": [{"per_subject": {u: subjects[u] + offset + 0.001 * draw}} for u in subjects for draw in (0, 1)]
            }
            for s in shots
        }
    return {"shots": list(shots), "results": rows, "capped_shots": []}


def test_summarize_pools_seeds_pairs_by_subject_and_reports_the_seed_range() -> None:
    summary = summarize([_result(-0.01), _result(0.0), _result(0.01)], seeds=[0, 1, 2])
    trained = summary["rows"]["trained"]["10"]
    assert trained["mean"] == pytest.approx(0.75 + 0.02 + 0.0005)
    assert (trained["seed_min"], trained["seed_max"]) == pytest.approx((0.7605, 0.7805))
    paired = summary["paired"]["bandpower"]["10"]
    assert paired["mean"] == pytest.approx(0.02) and paired["n"] == 4 and paired["ahead"] == 4
    assert paired["ci_low"] < 0.02 < paired["ci_high"]  # the seeds' spread widens it past a constant difference
    assert summary["paired"]["handcrafted"]["50"]["mean"] == pytest.approx(-0.03)
    text = markdown_table(summary, "EEG")
    spread = f"{trained['seed_min']:.3f} – {trained['seed_max']:.3f}"
    assert f"min – max over seeds 0, 1, 2 | {spread} | {spread} |" in text
    assert "n = 4 test subjects, smallest possible sign-flip p 0.12" in text


def test_summarize_refuses_runs_staged_on_different_subjects() -> None:
    other = _result(0.0)
    for cell in other["results"]["trained"]["10"]["runs"]:
        cell["per_subject"] = {"z": 0.5}
    with pytest.raises(ValueError, match="different units"):
        summarize([_result(0.0), other], seeds=[0, 1])


def test_publish_writes_the_table_and_the_readme_block(tmp_path) -> None:
    (tmp_path / "README.md").write_text("intro\n<!-- table: demo -->\nold row\n<!-- /table -->\nend\n")
    written = publish("demo", "| new | row |\n", {"x": 1}, tmp_path)
    assert (tmp_path / "docs" / "results" / "demo.md").read_text() == "| new | row |\n"
    assert blocks((tmp_path / "README.md").read_text()) == {"demo": "| new | row |"}
    assert tmp_path / "README.md" in written
    with pytest.raises(ValueError, match="README.md: no block '<!-- table: other -->'"):
        replace_block("text", "other", "x", tmp_path / "README.md")


def test_demo_settings_read_the_demo_config_and_its_environment_overrides(tmp_path) -> None:
    defaults = demo_settings(env={})
    assert set(defaults) == set(DEMO_KEYS) and defaults["encoder"].startswith("{name: chambon")
    assert demo_settings(env={"DEMO_STEPS": "7"})["steps"] == "7"
    assert demo_settings(env={"DEMO_STEPS": ""})["steps"] == defaults["steps"]  # empty keeps the file's value
    assert demo_settings(env={"DEMO_AUGMENT": ""})["augment"] == ""  # except the augmentations: off on purpose
    bad = tmp_path / "demo.yaml"
    bad.write_text("steps: 3\n")
    with pytest.raises(ValueError, match="demo.yaml: expected the demo keys"):
        demo_settings(env={}, path=bad)
