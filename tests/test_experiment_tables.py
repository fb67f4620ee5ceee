"""The results-table experiments ``mvapp experiment digits``, ``pairs`` and ``domains-grid``: their knobs files,
and each command end to end at a tiny size (real configs and code paths, a few steps, narrow encoders)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from _domain_cases import tiny_domain_config

from multiview_app.cli import main
from multiview_app.experiments.channel_modes import ChannelModesKnobs
from multiview_app.experiments.digits_table import DigitsKnobs
from multiview_app.experiments.domains_grid import GridKnobs, job_shares, run_workers, worker_command
from multiview_app.experiments.knobs import load_knobs, parse_overrides
from multiview_app.experiments.pairs_table import PairsKnobs

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("cls", "name"),
    [(DigitsKnobs, "digits"), (PairsKnobs, "pairs"), (GridKnobs, "domains_grid"), (ChannelModesKnobs, "channel_modes")],
)
def test_shipped_knobs_files_hold_the_defaults(cls: type, name: str) -> None:
    """Each configs/experiment_<name>.yaml names every knob, with the dataclass's default."""
    path = ROOT / "configs" / f"experiment_{name}.yaml"
    assert set(yaml.safe_load(path.read_text())) == set(cls.__dataclass_fields__)
    assert load_knobs(cls, path) == cls()


def test_knobs_refuse_unknown_keys_and_wrong_kinds_naming_where(tmp_path: Path) -> None:
    path = tmp_path / "knobs.yaml"
    path.write_text("steps: 3\nseed: [0]\n")
    with pytest.raises(ValueError, match=r"knobs.yaml: unknown experiment knob\(s\) \['seed'\]"):
        load_knobs(DigitsKnobs, path)
    with pytest.raises(ValueError, match=r"--set: steps should be a int \(default 400\), got 'ten'"):
        load_knobs(DigitsKnobs, None, ["steps=ten"])
    with pytest.raises(ValueError, match="expected KEY=VALUE"):
        parse_overrides(["steps"])
    knobs = load_knobs(DigitsKnobs, None, ["seeds=[0, 2]", "supervised=false"])
    assert knobs.seeds == (0, 2) and knobs.supervised is False and knobs.steps == 400


@pytest.mark.slow
def test_digits_table_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One loss, one seed, two steps with a narrow encoder: the run is trained and probed, the table and
    JSON name the command; a second call reuses the saved row (trains nothing)."""
    monkeypatch.chdir(ROOT)
    out = tmp_path / "digits"
    knobs = ["steps=2", "losses=[infonce_pwe]", "supervised=false", "overrides=[model.encoders.image.width=4]"]
    argv = ["experiment", "digits", "--out", str(out), "--set", *knobs]
    assert main(argv) == 0
    summary = json.loads((out / "digits.json").read_text())
    [row] = summary["rows"]
    assert row["loss"] == "infonce_pwe" and row["steps"] == 2 and 0.0 <= row["trained"]["knn_acc"] <= 1.0
    text = (out / "digits.md").read_text()
    assert "| infonce_pwe | 0 | 2 | " in text and "mvapp experiment digits" in text
    from multiview_app.train import trainer

    monkeypatch.setattr(trainer, "train", lambda *a, **k: pytest.fail("trained a finished run again"))
    assert main(argv) == 0 and json.loads((out / "digits.json").read_text())["rows"] == [row]


@pytest.mark.slow
def test_pairs_table_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One paired config, two steps, batch 8: retrieval recall of the trained and random-init towers."""
    monkeypatch.chdir(ROOT)
    out = tmp_path / "pairs"
    assert main(["experiment", "pairs", "--out", str(out), "--set", "steps=2", "configs=[pairs_clip_k2]",
                 "overrides=[train.batch_size=8]"]) == 0  # fmt: skip
    [row] = json.loads((out / "pairs.json").read_text())["rows"]
    assert row["config"] == "pairs_clip_k2" and row["k"] == 2 and row["text_views"] == 1
    assert 0.0 <= row["trained"]["i2t_R@1"] <= 1.0
    assert "| random init (reference) |" in (out / "pairs.md").read_text()


def test_domains_grid_end_to_end_writes_the_section_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One loss, held-out sketch, seed 0, no ERM, two steps on three tiny domains: the section between the
    markers of --docs holds the table, the figure and the shift matrix; --mode only-finished rewrites it
    from the saved evaluation without training, and --mode no-train lists a planned run that is missing."""
    from multiview_app.data.domains.synth import synth_domains

    root = tmp_path / "digits"
    synth_domains(root, seed=0, limit=40)
    tiny_domain_config(
        root,
        tmp_path / "tiny_infonce_pwe.yaml",
        width=4,
        num_features=8,
        loss={"name": "infonce_pwe", "tau": 0.2},
        train={"max_steps": 2, "batch_size": 8, "log_every": 1, "checkpoint_every": 1},
    )
    knobs = {"losses": ["infonce_pwe"], "label_free_losses": [], "adapt_losses": [], "holdouts": ["sketch"],
             "seeds": [0], "erm": False, "root": str(root), "configs": str(tmp_path / "tiny_{loss}.yaml")}  # fmt: skip
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(knobs))
    docs = tmp_path / "results.md"
    docs.write_text("# Results\n\n<!-- domains:start -->\nold\n<!-- domains:end -->\n\n## Next\n")
    argv = ["experiment", "domains-grid", "--config", str(tmp_path / "grid.yaml"), "--out", str(tmp_path / "runs")]
    argv += ["--docs", str(docs), "--figures", str(tmp_path / "fig")]
    assert main(argv) == 0
    text = docs.read_text()
    assert "old" not in text and text.endswith("<!-- domains:end -->\n\n## Next\n")
    assert "| infonce_pwe |" in text and "held-out domains: sketch" in text and "In-domain mean" in text
    assert (tmp_path / "fig" / "domains_one_vs_one.png").is_file()
    from multiview_app.train import trainer

    monkeypatch.setattr(trainer, "train", lambda *a, **k: pytest.fail("trained a finished run again"))
    assert main([*argv, "--mode", "only-finished"]) == 0
    assert main([*argv, "--mode", "no-train", "--set", "seeds=[0,1]"]) == 0
    assert "Not run (planned by this command, missing at the time of writing): infonce_pwe sketch s1 (not " in (
        docs.read_text()
    )


def test_domains_grid_deals_groups_to_workers_that_keep_to_their_share(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Groups dealt seed-major round robin (a group's runs, ERM and reference scores belong to one worker);
    a worker repeats the command's options with its own --groups, --docs and --figures; the workers run with
    their own logs and a thread budget, and their exit codes come back."""
    groups = [(h, s) for s in (0, 1) for h in ("clean", "sketch", "warped")]
    assert job_shares(groups, 4) == [
        [("clean", 0), ("sketch", 1)],
        [("sketch", 0), ("warped", 1)],
        [("warped", 0)],
        [("clean", 1)],
    ]
    assert job_shares(groups[:1], 3) == [[("clean", 0)]]
    out = tmp_path / "runs"
    command = worker_command(["--config", "k.yaml", "--mode", "pretrain-only"], [("clean", 1), ("sketch", 0)], 1, out)
    assert command[1:5] == ["-m", "multiview_app.cli", "experiment", "domains-grid"]
    assert command[command.index("--groups") + 1] == "clean:1,sketch:0" and "pretrain-only" in command
    assert command[command.index("--docs") + 1] == str(out / "jobs" / "job_1.md")
    assert command[command.index("--jobs") + 1] == "1"
    monkeypatch.delenv("MVAPP_NUM_THREADS", raising=False)
    stand_ins = [
        [sys.executable, "-c", f"import os, sys; print('share', {i}, os.environ['MVAPP_NUM_THREADS']); sys.exit({i})"]
        for i in range(2)
    ]
    assert run_workers(stand_ins, out, []) == [0, 1]
    from multiview_app.threads import usable_cpus

    assert (out / "jobs" / "job_1.log").read_text().strip() == f"share 1 {max(1, usable_cpus().usable // 2)}"
