"""DomainBed model selection of the domain evaluator: training-domain validation picks the checkpoint
and C that are best on the seen domains' validation share (not the last checkpoint when an earlier one
is better), never reads the held-out domain while selecting, names the method in the JSON and every
table header; the test-domain "oracle" is a separate, labelled bound; the one-domain 1-vs-1 figure."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from _domain_cases import tiny_domain_config

from multiview_app.data.domains.synth import synth_domains
from multiview_app.eval.protocols import PROTOCOLS, get_protocol
from multiview_app.eval.protocols.domains import (
    TEST_DOMAIN,
    TRAINING_DOMAIN,
    leave_one_domain_out,
    seen_only,
    select_training_domain,
)

CANDIDATES = ["step_10", "step_20", "step_30", "final"]


def synthetic_features(seen_best: str = "step_20", target_best: str = "final"):
    """``features(candidate, domain, split)``: 4 classes; the seen domains are well separated under
    ``seen_best`` (noise 0.3) and blurred under the others (noise 3); the target domain is separated
    only under ``target_best``. Deterministic per key."""
    centers = np.random.default_rng(0).normal(size=(4, 6)) * 3

    def features(candidate: str, domain: str, split: str) -> tuple[np.ndarray, np.ndarray]:
        seed = abs(hash((candidate, domain, split))) % 2**32
        rng = np.random.default_rng(seed)
        y = np.repeat(np.arange(4), 30)
        sharp = candidate == (target_best if domain == "t" else seen_best)
        return centers[y] + rng.normal(size=(len(y), 6)) * (0.3 if sharp else 3.0), y

    return features


def test_protocol_registered_and_chooses_the_best_checkpoint_on_seen_validation() -> None:
    assert "leave-one-domain-out" in PROTOCOLS and get_protocol("leave-one-domain-out") is leave_one_domain_out
    result = leave_one_domain_out(
        features=synthetic_features(), candidates=CANDIDATES, seen=["a", "b"], target="t", Cs=(0.1, 1.0)
    )
    assert result["model_selection"] == TRAINING_DOMAIN
    chosen = result["selected"]
    assert chosen["candidate"] == "step_20"  # not the last one
    best = max(row["val_accuracy"] for row in result["grid"])
    assert chosen["val_accuracy"] == best and len(result["grid"]) == len(CANDIDATES) * 2
    # the oracle (test-domain validation) picks the candidate that is best on the target: a separate bound
    oracle = result["oracle_selection"]
    assert oracle["model_selection"] == TEST_DOMAIN and oracle["selected"]["candidate"] == "final"
    assert oracle["five_vs_one"] >= result["five_vs_one"]
    assert set(result["one_vs_one"]) == {"a", "b"} and 0 <= result["target_labelled_probe"] <= 1


def test_selection_never_reads_the_held_out_domain() -> None:
    """Fails if a held-out-domain item is read during selection: training-domain validation runs on a
    feature source that raises for the target, and in the full protocol every target read comes after
    the last read of the selection."""
    source = synthetic_features()

    def refusing(candidate: str, domain: str, split: str):
        if domain == "t":
            raise AssertionError(f"held-out domain read during selection: {candidate} {domain}/{split}")
        return source(candidate, domain, split)

    chosen = select_training_domain(refusing, CANDIDATES, ["a", "b"], (1.0,))
    assert chosen["candidate"] == "step_20"
    with pytest.raises(PermissionError, match="not seen"):  # the guard the protocol selects through
        seen_only(source, ["a", "b"])("final", "t", "val")

    reads: list[tuple[str, str, str]] = []

    def recording(candidate: str, domain: str, split: str):
        reads.append((candidate, domain, split))
        return source(candidate, domain, split)

    leave_one_domain_out(features=recording, candidates=CANDIDATES, seen=["a", "b"], target="t", Cs=(1.0,))
    selection_reads = len(CANDIDATES) * 4  # per candidate: a/train, b/train, a/val, b/val
    assert all(domain != "t" for _, domain, _ in reads[:selection_reads])
    assert {(c, d, s) for c, d, s in reads[:selection_reads]} == {
        (c, d, s) for c in CANDIDATES for d in ("a", "b") for s in ("train", "val")
    }
    assert any(domain == "t" for _, domain, _ in reads[selection_reads:])


# ------------------------------------------------------------------ the evaluator on a real tiny run
@pytest.fixture(scope="module")
def digit_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("digit_domains_sel")
    synth_domains(root, seed=0, limit=100)
    return root


def tiny_config(root: Path, tmp_path: Path) -> Path:
    return tiny_domain_config(
        root,
        tmp_path / "tiny.yaml",
        width=4,
        num_features=8,
        loss={"name": "infonce_pwe", "tau": 0.2},
        train={"max_steps": 6, "batch_size": 8, "log_every": 1, "checkpoint_every": 2, "keep_checkpoints": 5},
    )


def test_evaluator_picks_the_best_checkpoint_not_the_last(
    digit_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The final weights are replaced by zeros (constant features: a chance-level probe), so the last
    candidate is the worst on training-domain validation: the evaluator must choose an earlier checkpoint,
    the one with the best validation accuracy, and its 5-vs-1 score is that checkpoint's."""
    from safetensors.torch import load_file, save_file

    from multiview_app.config import load_config
    from multiview_app.data.adapters import build_adapter
    from multiview_app.data.views import build_view_policy
    from multiview_app.eval.domain_generalization import domain_features, evaluate_run
    from multiview_app.eval.domain_report import METRICS, write_summary
    from multiview_app.eval.protocols.probe import fit_linear_classifier
    from multiview_app.experiments.domains import ensure_pretrained, run_config
    from multiview_app.train.run_io import load_run

    config = tiny_config(digit_root, tmp_path)
    cfg = run_config(config, tmp_path / "runs", "sketch", 0, "generalization")
    ensure_pretrained(cfg)
    final = cfg.run_dir / "model.safetensors"
    save_file({k: torch.zeros_like(v) for k, v in load_file(str(final)).items()}, str(final))
    result = evaluate_run(cfg.run_dir, progress=False)  # no erm_run: no ERM row
    saved = json.loads((cfg.run_dir / "eval" / "domain_generalization.json").read_text())
    assert saved["model_selection"] == TRAINING_DOMAIN and saved["oracle_selection"] == TEST_DOMAIN
    trained = result["results"]["trained"]
    assert saved["selection_candidates"]["trained"] == ["step_2", "step_4", "final"]
    chosen = trained["selected"]
    assert chosen["candidate"] != "final" and chosen["step"] in (2, 4)
    assert chosen["val_accuracy"] == max(row["val_accuracy"] for row in trained["grid"])
    assert max(r["val_accuracy"] for r in trained["grid"] if r["candidate"] == "final") < chosen["val_accuracy"]
    # recompute the 5-vs-1 score of the chosen checkpoint independently
    run_cfg = load_config(cfg.run_dir / "config.yaml")
    adapter = build_adapter(run_cfg.data.adapter, run_cfg.data.options)
    policy = build_view_policy(run_cfg.views.policy, run_cfg.views.k, run_cfg.views.options, adapter)
    model = load_run(cfg.run_dir, chosen["candidate"])[1]
    parts = [domain_features(model, adapter, policy, d, "train", 256, "cpu", False) for d in ("clean", "inverted")]
    clf = fit_linear_classifier(
        np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]), C=chosen["C"]
    )
    x_test, y_test = domain_features(model, adapter, policy, "sketch", "test", 256, "cpu", False)
    assert trained["five_vs_one"] == pytest.approx(float((clf.predict(x_test) == y_test).mean()))
    # every table names its selection; the console text is the whole .md
    summary = write_summary([result], tmp_path / "summary")
    table = (tmp_path / "summary" / "domain_generalization_table.md").read_text()
    assert summary["table"] == table and summary["model_selection"] == TRAINING_DOMAIN
    headers = [line for line in table.splitlines() if line.startswith("**")]
    assert len(headers) == len(METRICS)
    assert all(("model selection" in h or "chosen by" in h) for h in headers)
    assert "oracle" in headers[1] and "Target-labelled probe" in headers[2]
    assert "| algorithm | pretraining views | sketch | Avg |" in table


def test_one_held_out_domain_figure_is_bars_several_are_matrices_with_a_colour_bar() -> None:
    from multiview_app.eval.domain_report import one_vs_one_figure

    domains = ["a", "b", "c", "d"]
    one = {
        "one_vs_one": {
            "m3g": {"a": {"d": 0.4}, "b": {"d": 0.5}, "c": {"d": 0.6}},
            "erm": {"a": {"d": 0.3}, "b": {"d": 0.2}, "c": {"d": 0.1}},
        }
    }
    fig = one_vs_one_figure(one, domains)
    assert len(fig.axes) == 1 and not fig.axes[0].images  # no 1-column matrix
    assert len(fig.axes[0].patches) == 6  # 3 training domains x 2 rows of the table
    several = {
        "one_vs_one": {"m3g": {"a": {"d": 0.4, "c": 0.2}, "b": {"d": 0.5, "c": 0.3}, "c": {"d": 0.6}, "d": {"c": 0.1}}}
    }
    fig = one_vs_one_figure(several, domains)
    assert len([ax for ax in fig.axes if ax.images]) == 1  # one matrix (one table row)
    colour_bar = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    assert len(colour_bar) == 1
    matrix = fig.axes[0].images[0].get_array()
    assert matrix.shape == (4, 2)  # rows = training domains with values, columns = the 2 unseen domains


def test_thin_candidates_keeps_final_and_even_spacing() -> None:
    from multiview_app.eval.domain_generalization import candidate_step, thin_candidates

    names = ["step_50", "step_100", "step_150", "step_200", "step_250", "final"]
    assert thin_candidates(names, 3) == ["step_100", "step_200", "final"]
    assert thin_candidates(names, None) == names and thin_candidates(["final"], 3) == ["final"]
    assert thin_candidates(names, 1) == ["final"]
    assert candidate_step(".", "init") == 0 and candidate_step(".", "step_150") == 150


# ------------------------------------------------------------------ the same numbers, computed once
def test_probe_fits_shared_within_an_evaluation_give_the_refit_results(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each probe is fitted once per (candidate, train domains, C): the protocol's output is exactly the
    output when every probe is refitted where it is used (the former code path), with fewer fits."""
    import multiview_app.eval.protocols.domains as protocol
    from multiview_app.eval.protocols.probe import fit_linear_classifier

    fits: list[tuple[int, float]] = []

    def counting(x: np.ndarray, y: np.ndarray, C: float = 1.0):
        fits.append((len(x), C))
        return fit_linear_classifier(x, y, C=C)

    class Refit(protocol.ProbeFits):
        def __call__(self, features, candidate, domains, C):  # no memo: a fit per use
            return counting(*protocol.pooled(features, candidate, domains, "train"), C=C)

    monkeypatch.setattr(protocol, "fit_linear_classifier", counting)
    kwargs = dict(candidates=CANDIDATES, seen=["a", "b"], target="t", Cs=(0.1, 1.0))
    shared = leave_one_domain_out(features=synthetic_features(), **kwargs)
    shared_fits = len(fits)
    fits.clear()
    monkeypatch.setattr(protocol, "ProbeFits", Refit)
    refit = leave_one_domain_out(features=synthetic_features(), **kwargs)
    assert json.dumps(shared, sort_keys=True) == json.dumps(refit, sort_keys=True)
    # refit: 2 grids x 4 candidates x 2 C + 5 vs 1 + 2 one-vs-one + target-labelled + oracle 5 vs 1
    assert len(fits) == 2 * len(CANDIDATES) * 2 + 5
    assert shared_fits == len(CANDIDATES) * 2 + 3  # one grid; the 5-vs-1 fits are grid fits


def test_reference_scores_cached_by_content_and_reused(
    digit_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The random-init row's protocol output is kept in ``reference_cache`` and reused by a second
    evaluation (no second protocol call for it), with the same numbers as without a cache; weights of
    other content (another key) are evaluated afresh."""
    import shutil

    from safetensors.torch import load_file, save_file

    import multiview_app.eval.domain_generalization as dg
    from multiview_app.experiments.domains import ensure_pretrained, run_config

    cfg = run_config(tiny_config(digit_root, tmp_path), tmp_path / "runs", "sketch", 0, "generalization")
    ensure_pretrained(cfg, progress=False)
    # the checkpoint a stopped run writes off the checkpoint_every grid (here every 2 steps) is no candidate
    shutil.copytree(cfg.run_dir / "checkpoints" / "step_00000002", cfg.run_dir / "checkpoints" / "step_00000003")
    assert dg.candidates(cfg.run_dir) == ["step_2", "step_4", "final"]
    plain = dg.evaluate_run(cfg.run_dir, progress=False)
    calls: list[list[str]] = []
    protocol = dg.get_protocol("leave-one-domain-out")

    def counting(**kwargs):
        calls.append(list(kwargs["candidates"]))
        return protocol(**kwargs)

    monkeypatch.setattr(dg, "get_protocol", lambda name: counting)
    cache = tmp_path / "reference_scores"
    first = dg.evaluate_run(cfg.run_dir, progress=False, reference_cache=cache)
    second = dg.evaluate_run(cfg.run_dir, progress=False, reference_cache=cache)
    assert calls == [["init"], ["step_2", "step_4", "final"], ["step_2", "step_4", "final"]]  # init once
    assert len(list(cache.glob("random_init_*.json"))) == 1
    for result in (first, second):
        assert result["results"] == plain["results"] and result["items"] == plain["items"]
    # other init weights (same file name): another key, computed afresh
    init = cfg.run_dir / "init.safetensors"
    save_file({k: v * 2 if v.is_floating_point() else v for k, v in load_file(str(init)).items()}, str(init))
    calls.clear()
    dg.evaluate_run(cfg.run_dir, progress=False, reference_cache=cache)
    assert ["init"] in calls and len(list(cache.glob("random_init_*.json"))) == 2


def test_candidate_digest_reads_checkpoint_and_plain_weights_alike(digit_root: Path, tmp_path: Path) -> None:
    """A checkpoint's keys carry the trainer's ``model.`` prefix: its encoder digest equals that of the same
    encoder tensors saved plainly, and differs for other tensors."""
    from safetensors.torch import save_file

    from multiview_app.eval.domain_generalization import candidate_encoder_digest

    run = tmp_path / "run"
    (run / "checkpoints" / "step_00000002").mkdir(parents=True)
    tensors = {"encoders.image.body.0.weight": torch.arange(6.0).view(2, 3), "projectors.image.w": torch.ones(2)}
    save_file(tensors, str(run / "init.safetensors"))
    save_file(
        {f"model.{k}": v for k, v in tensors.items()}, str(run / "checkpoints" / "step_00000002" / "model.safetensors")
    )
    save_file({**tensors, "projectors.image.w": torch.zeros(2)}, str(run / "model.safetensors"))
    digests = {c: candidate_encoder_digest(run, c) for c in ("init", "step_2", "final")}
    assert len(set(digests.values())) == 1  # the projector is not part of the encoder
    save_file({"encoders.image.body.0.weight": torch.arange(6.0).view(3, 2)}, str(run / "model.safetensors"))
    assert candidate_encoder_digest(run, "final") != digests["init"]  # same bytes, other shape


def test_defaults_tie_rule_keeps_the_default_within_delta() -> None:
    """scripts/reproduce/m3g/choose_domains_defaults.py: the default pair runs under the sweep's own run name (no suffix,
    no override); the best pair replaces the default only when its mean over the losses is more than
    delta above the default's."""
    from _train_helpers import load_script

    script = load_script("reproduce/m3g/choose_domains_defaults")
    assert script.trial_overrides(0.0005, "test", 0.0005, "test") == ([], "")
    assert script.trial_overrides(0.002, "mild", 0.0005, "test") == (
        ["optim.lr=0.002", "views.options.stacks=mild"],
        "_lr0.002_mild",
    )
    default = "lr=0.0005 stack=test"
    close = {default: {"m3g": 0.80, "infonce_ave": 0.70}, "lr=0.002 stack=test": {"m3g": 0.83, "infonce_ave": 0.70}}
    kept = script.decide(close, default, delta=0.02)  # +0.015 mean: within delta
    assert not kept["changed"] and kept["chosen"] == default
    assert kept["best"]["trial"] == "lr=0.002 stack=test" and kept["margin"] == pytest.approx(0.015)
    moved = script.decide(close, default, delta=0.01)
    assert moved["changed"] and moved["chosen"] == "lr=0.002 stack=test"


def test_defaults_named_settings_parse_and_refuse() -> None:
    """``--settings``: named override sets; ``default`` (no override, no run suffix) exactly once."""
    from _train_helpers import load_script

    script = load_script("reproduce/m3g/choose_domains_defaults")
    assert script.named_settings("default; bn=model.projector.norm=batch+model.predictor.norm=batch") == [
        ("default", [], ""),
        ("bn", ["model.projector.norm=batch", "model.predictor.norm=batch"], "_bn"),
    ]
    for bad in (
        "bn=model.projector.norm=batch",
        "default;default",
        "default=optim.lr=1",
        "default;bad name=a=1",
        "default;empty=",
    ):
        with pytest.raises(SystemExit):
            script.named_settings(bad)


def test_named_settings_put_the_default_first_for_every_choice_script() -> None:
    """The parser both choice scripts share (choose_digits_byol.py's tie rule reads the first setting as the
    default)."""
    from multiview_app.experiments.reproduce import named_settings

    assert named_settings("lr5=optim.lr=0.005+train.seed=1;default") == {
        "default": [],
        "lr5": ["optim.lr=0.005", "train.seed=1"],
    }
    with pytest.raises(ValueError, match="must name 'default'"):
        named_settings("lr5=optim.lr=0.005")


def test_erm_paragraph_says_how_much_the_last_checkpoint_still_gained() -> None:
    """An ERM run chosen at its budget's last step reads as a plateau when it gained at most ERM_RISING over
    the checkpoint before, else as still rising; each ERM run counts once however many results share it."""
    from multiview_app.eval.domain_report import ERM_RISING, format_erm, last_step_gains

    def result(erm_id: str, selected: str, step_480: float, final: float, seed: int) -> dict:
        grid = [
            {"candidate": c, "C": C, "val_accuracy": v - (0.05 if C == 0.1 else 0.0)}
            for c, v in (("step_120", 0.7), ("step_480", step_480), ("final", final))
            for C in (0.1, 1.0)
        ]
        return {
            "seed": seed,
            "pretrain_steps": 300,
            "reference_ids": {"erm": erm_id},
            "erm": {"steps": 600, "train_accuracy": 0.96, "selected_step": 600 if selected == "final" else 480},
            "results": {"erm": {"selected": {"candidate": selected}, "grid": grid}},
        }

    plateau = [
        result("a", "final", 0.900, 0.903, 0),
        result("a", "final", 0.900, 0.903, 0),
        result("b", "step_480", 0.910, 0.905, 1),
    ]
    assert last_step_gains(plateau) == {"a": pytest.approx(0.003)}
    text = format_erm(plateau)
    assert "1 of 2 chose the budget's last step, +0.3 to +0.3 points" in text
    assert f"a plateau (at most {100 * ERM_RISING:g} point)" in text and "still rising" not in text
    rising = [*plateau, result("c", "final", 0.88, 0.90, 2)]
    text = format_erm(rising)
    assert "2 of 3 chose the budget's last step, +0.3 to +2.0 points" in text
    assert "validation still rising: a longer budget may help ERM" in text
    assert "budget's last step" not in format_erm(plateau[2:])
