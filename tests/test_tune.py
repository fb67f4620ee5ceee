"""``mvapp tune``: search space validation, dead-worker recovery, and tiny real searches (digits,
small_cnn, 2 steps per trial, every trial a training process): resume after a worker process is
killed mid-trial, pruning of a bad trial, a failing trial that does not stop the study, two worker
processes on one journal file, PostgreSQL storage, and the best YAML training.

Cost: one fork server per test module (``fork_server``) has the training stack imported; the trials
of in-process searches fork from it, and so do the separate ``mvapp tune`` worker processes (a real
process each, running the CLI, whose own fork server is a fork of itself: nothing is imported again;
the spawn launcher still starts a fresh python per trial). Trials use one torch thread.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
import torch
import yaml
from _eeg_helpers import CHANNELS, fake_cache
from _train_helpers import tiny_raw
from optuna.trial import TrialState

from multiview_app.config import ConfigError, apply_overrides, config_from_dict, load_config
from multiview_app.tune.objective import objective_directions, objective_metrics
from multiview_app.tune.runner import ForkServer
from multiview_app.tune.space import (
    default_space,
    optuna_distributions,
    params_to_overrides,
    resolve_space,
    validate_enqueue,
    validate_space,
)
from multiview_app.tune.study import WORKER_ATTR, fail_dead_trials, open_study, study_folder, worker_tag

ROOT = Path(__file__).resolve().parents[1]
SPACE = {
    "loss.tau": {"type": "float", "low": 0.05, "high": 0.5, "log": True},
    "model.encoders.image.num_features": {"type": "categorical", "choices": [16, 1]},
}


def _tune_raw(runs: Path, **tune: Any) -> dict[str, Any]:
    raw = tiny_raw(runs, train={"max_steps": 2, "log_every": 1})
    raw["data"]["options"]["val_fraction"] = 0.2
    raw["output"].pop("name")
    raw["output"]["curves"] = True  # the config's value: trials skip the PNG, the best YAML's run does not
    raw["tune"] = {"space": SPACE, "report_every": 1, "max_train_items": 300, "pruner": "none", **tune}
    return raw


def _write(path: Path, raw: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(raw))
    return path


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module", autouse=True)
def fork_server() -> Any:
    """One fork server for the module (trials of in-process searches, and the worker processes);
    started with the module's first test, so that it imports while the fast tests run."""
    with pytest.MonkeyPatch.context() as patch:
        for key, value in _env().items():
            patch.setenv(key, value)
        server = ForkServer()
    yield server
    server.close()


class Worker:
    """A separate ``mvapp tune`` worker process (a fork of the fork server running the CLI)."""

    def __init__(self, server: ForkServer, config: Path, study: str, *args: str) -> None:
        self.log = config.parent / f"{study}-worker-{time.monotonic_ns()}.log"
        argv = ["tune", "--config", str(config), "--study-name", study, *args]
        self.handle = server.start(argv, self.log, _env(), self.log.with_suffix(".exit"))

    def output(self) -> str:
        return self.log.read_text() if self.log.is_file() else ""

    def finish(self, timeout: float = 600) -> str:
        deadline = time.monotonic() + timeout
        while (code := self.handle.poll()) is None:
            assert time.monotonic() < deadline, self.output()[-4000:]
            time.sleep(0.05)
        assert code == 0, self.output()[-4000:]
        return self.output()


def _search(config: Path, study: str, trials: int, server: ForkServer, **kwargs: Any) -> Any:
    """An in-process ``mvapp tune`` worker (``.run()`` it) whose trials fork from ``server``."""
    from multiview_app.tune.study import Search

    return Search(load_config(config), study, trials, progress=False, fork_server=server, **kwargs)


def _journal(folder: Path) -> Any:
    return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(folder / "journal.log")))


def _wait_for(condition: Any, worker: Worker, what: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert worker.handle.poll() is None, f"worker ended before {what}: {worker.output()[-3000:]}"
        assert time.monotonic() < deadline, f"timeout waiting for {what}"
        time.sleep(0.02)


# ------------------------------------------------------------------ space, metrics (no training)


def test_space_keys_are_validated_against_the_schema(tmp_path: Path) -> None:
    raw = _tune_raw(tmp_path)
    cfg = config_from_dict(raw)
    validate_space(raw, cfg, resolve_space(cfg))  # the test space itself is valid
    for key, message in [
        ("optim.lrr", r"tune.space.optim.lrr: not a config key; did you mean optim.lr"),
        ("loss.epsilon", r"tune.space.loss.epsilon: not a config key"),  # not a param of infonce
        ("model.projector", r"tune.space.model.projector: is a section"),
        ("data.options.val_fracton", r"did you mean data.options.val_fraction"),
    ]:
        bad = apply_overrides(raw, [f"tune.space={{{key}: {{type: float, low: 0.1, high: 0.2}}}}"])
        with pytest.raises(ConfigError, match=message):
            cfg_bad = config_from_dict(bad)
            validate_space(bad, cfg_bad, resolve_space(cfg_bad))
    # a bound that makes the config invalid is named with the key and the value
    bad = apply_overrides(raw, ["tune.space={views.k: {type: int, low: 1, high: 4}}"])
    with pytest.raises(ConfigError, match=r"tune.space.views.k: value 1 makes an invalid config: views.k"):
        validate_space(bad, config_from_dict(bad), resolve_space(config_from_dict(bad)))
    with pytest.raises(ConfigError, match=r"tune.space.loss.tau: .*needs low > 0"):
        config_from_dict(apply_overrides(raw, ["tune.space={loss.tau: {type: float, low: 0, high: 1, log: true}}"]))
    with pytest.raises(ConfigError, match=r"tune.space.x.type: Input should be 'float', 'int' or 'categorical'"):
        config_from_dict(apply_overrides(raw, ["tune.space={x: {type: uniform, low: 0, high: 1}}"]))


def test_enqueued_points_are_the_first_trials_in_order_and_are_validated(tmp_path: Path) -> None:
    points = [
        {"loss.tau": 0.1, "model.encoders.image.num_features": 1},
        {"loss.tau": 0.3, "model.encoders.image.num_features": 16},
    ]
    cfg = config_from_dict(_tune_raw(tmp_path, enqueue=points))
    space = resolve_space(cfg)
    validate_enqueue(cfg.tune.enqueue, space)
    study_folder(cfg, "designed").mkdir(parents=True)
    study = open_study(cfg, "designed")
    asked = [study.ask(fixed_distributions=optuna_distributions(space)).params for _ in range(3)]
    assert asked[:2] == points and asked[2] not in points[:1]  # then the sampler's own points
    assert (
        open_study(cfg, "designed").get_trials(states=(TrialState.WAITING,)) == []
    )  # a reopened study enqueues nothing
    for point, message in [
        (
            {"loss.tau": 0.1},
            r"tune.enqueue\[0\]: expected the keys of tune.space .*missing: "
            r"model.encoders.image.num_features; not in tune.space: -",
        ),
        ({**points[0], "optim.lr": 0.1}, r"not in tune.space: optim.lr"),
        (
            {**points[0], "loss.tau": 0.9},
            r"tune.enqueue\[0\].loss.tau: 0.9 is not a value of its "
            r"distribution \(expected a float in \[0.05, 0.5\]\)",
        ),
        (
            {**points[0], "model.encoders.image.num_features": 8},
            r"num_features: 8 is not a value .*expected one of \[16, 1\]",
        ),
    ]:
        with pytest.raises(ConfigError, match=message):
            validate_enqueue([point], space)


def test_default_spaces_per_loss_and_overrides() -> None:
    assert {k: (d.low, d.high, d.log) for k, d in default_space("m3g").items()} == {"loss.epsilon": (0.01, 1.0, True)}
    assert {k: (d.low, d.high, d.log) for k, d in default_space("mveb").items()} == {"loss.beta": (1e-3, 1e-1, True)}
    for loss in ("pvc_geometric", "aggnce", "flatnce", "infonce_pwe"):
        assert {k: (d.low, d.high, d.log) for k, d in default_space(loss).items()} == {"loss.tau": (0.03, 1.0, True)}
    with pytest.raises(ConfigError, match="loss 'byol_pwe' has no default search space"):
        default_space("byol_pwe")
    overrides = params_to_overrides({"loss.tau": 0.125, "views.options.stacks": "simclr", "x.y": [1, 2]})
    assert overrides == ["loss.tau=0.125", "views.options.stacks=simclr", "x.y=[1, 2]"]
    assert apply_overrides({}, overrides) == {
        "loss": {"tau": 0.125},
        "views": {"options": {"stacks": "simclr"}},
        "x": {"y": [1, 2]},
    }


def test_metric_defaults_directions_and_val_split_required(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from multiview_app.cli import main

    cfg = config_from_dict(_tune_raw(tmp_path))
    assert objective_metrics(cfg) == ["linear_probe.logreg_acc"] and objective_directions(cfg) == ["maximize"]
    multi = config_from_dict(_tune_raw(tmp_path, metric=["linear_probe.knn_acc", "train_time_s"]))
    assert objective_directions(multi) == ["maximize", "minimize"]
    with pytest.raises(ConfigError, match="tune.metric: unknown metric 'acc'"):
        objective_metrics(config_from_dict(_tune_raw(tmp_path, metric="acc")))
    for key, value, message in [
        ("report_items", 0, "greater than or equal to 1"),
        ("report_items", True, "valid integer"),
        ("report_items", "all", "valid integer"),
    ]:
        with pytest.raises(ConfigError, match=f"tune.{key}: Input should be .*{message}"):
            config_from_dict(_tune_raw(tmp_path, **{key: value}))
    assert config_from_dict(_tune_raw(tmp_path, report_items=None)).tune.report_items is None
    raw = _tune_raw(tmp_path / "runs")
    raw["data"]["options"].pop("val_fraction")
    config = _write(tmp_path / "noval.yaml", raw)
    assert main(["tune", "--config", str(config), "--trials", "1"]) == 2
    err = capsys.readouterr().err
    assert "has no 'val' split" in err and "data.options.val_fraction" in err and err.count("\n") == 1


def test_metrics_of_one_evaluation_share_one_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import multiview_app.eval.linear_probe as linear_probe
    from multiview_app.tune.objective import METRICS, MetricState

    calls: list[str] = []

    def fake_probe(model: Any, adapter: Any, policy: Any, **kwargs: Any) -> dict[str, Any]:
        calls.append(kwargs["eval_split"])
        return {"scores": {"logreg_acc": 0.75, "knn_acc": 0.5}}

    monkeypatch.setattr(linear_probe, "probe_model", fake_probe)
    state = MetricState(config_from_dict(_tune_raw(tmp_path)))
    model = torch.nn.Linear(1, 1)
    assert METRICS["linear_probe.logreg_acc"].compute(model, state) == 0.75
    assert METRICS["linear_probe.knn_acc"].compute(model, state) == 0.5
    assert calls == ["val"]  # one probe on the val split for both scores
    state.results.clear()  # the callback does this before every evaluation
    assert METRICS["linear_probe.knn_acc"].compute(model, state) == 0.5 and calls == ["val", "val"]


def _spy_extractions(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[tuple[str, list[int] | None]]:
    """Record ``(split, item indices or None = the whole split)`` of every ``module.extract_features`` call."""
    encoded: list[tuple[str, list[int] | None]] = []
    real = module.extract_features

    def spy(model: Any, adapter: Any, policy: Any, split: str, *args: Any, dataset: Any = None, **kwargs: Any) -> Any:
        encoded.append((split, None if dataset is None else list(dataset.indices)))
        return real(model, adapter, policy, split, *args, dataset=dataset, **kwargs)

    monkeypatch.setattr(module, "extract_features", spy)
    return encoded


def test_intermediate_reports_score_the_report_subset_and_the_objective_the_full_val_split(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import multiview_app.eval.linear_probe as linear_probe
    from multiview_app.models.model import build_model
    from multiview_app.threads import torch_threads
    from multiview_app.train.callbacks import StepEvent
    from multiview_app.train.run_io import model_spec
    from multiview_app.tune.objective import REPORTS_FILE, RESULT_FILE, TuneReport, report_subset, split_labels

    cfg = config_from_dict(_tune_raw(tmp_path, report_items=40, report_every=2, max_train_items=150))
    encoded = _spy_extractions(monkeypatch, linear_probe)
    torch.manual_seed(0)
    model = build_model(**model_spec(cfg))
    callback = TuneReport(cfg)
    with torch_threads(1):  # reports at step 2 (subset), objective at the last step 4 (full val split)
        for step in range(1, 5):
            callback.on_step_end(StepEvent(step, 4, None, model, tmp_path, True))
    state = callback.state
    labels = {split: split_labels(state.adapter.split(split)) for split in ("train", "val")}
    subset = {split: report_subset(labels[split], 40) for split in ("train", "val")}
    pick = np.random.default_rng(0).choice(len(labels["train"]), 150, replace=False).tolist()  # the objective's draw
    assert encoded == [
        ("train", subset["train"].tolist()),
        ("val", subset["val"].tolist()),
        ("train", pick),
        ("val", None),
    ]
    for split, rows in subset.items():  # class-stratified: about 40 items, every class in proportion
        counts = np.bincount(labels[split][rows], minlength=10)
        expected = np.maximum(1, np.round(40 * np.bincount(labels[split], minlength=10) / len(labels[split])))
        assert counts.tolist() == expected.tolist() and abs(len(rows) - 40) <= 5 and len(labels[split]) > 100
    assert np.array_equal(report_subset(labels["train"], 40), subset["train"])  # fixed: the same for every trial
    # the reported and objective values are the probe on exactly those items
    reported = [json.loads(line) for line in (tmp_path / REPORTS_FILE).read_text().splitlines()]
    result = json.loads((tmp_path / RESULT_FILE).read_text())
    probe = dict(eval_split="val", batch_size=512, max_train_items=150, progress=False)
    with torch_threads(1):
        partial = linear_probe.probe_model(
            model, state.adapter, state.policy, train_items=subset["train"], eval_items=subset["val"], **probe
        )
        full = linear_probe.probe_model(model, state.adapter, state.policy, **probe)
    assert full["items"] == {"train": 150, "val": len(labels["val"])} and partial["items"]["val"] == len(subset["val"])
    assert [r["step"] for r in reported] == [2] and [e["final"] for e in result["evaluations"]] == [False, True]
    assert reported[0]["value"] == pytest.approx(partial["scores"]["logreg_acc"])
    assert result["values"] == {"linear_probe.logreg_acc": pytest.approx(full["scores"]["logreg_acc"])}
    assert report_subset(labels["val"], None) is None and report_subset(labels["val"], 10_000) is None


def test_sleep_staging_objective_encodes_only_its_few_shot_draw(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import multiview_app.eval.features as features
    from multiview_app.eval.protocols.staging import shot_draw
    from multiview_app.models.model import build_model
    from multiview_app.train.run_io import model_spec
    from multiview_app.tune.objective import METRICS, MetricState, report_subset

    cache = fake_cache(tmp_path / "cache", subjects=5, windows=10)
    raw = {
        "data": {
            "adapter": "eeg_windows",
            "options": {"cache": str(cache), "test_subjects": ["S4"], "val_subjects": ["S3"]},
        },
        "views": {"policy": "channels", "k": 2},
        "model": {
            "encoders": {"eeg": {"name": "conv", "width": 8, "out_dim": 8, "groups": 4, "channel_vocab": CHANNELS}},
            "projector": {"hidden_dim": 16, "out_dim": 8},
        },
        "loss": {"name": "m3g", "epsilon": 0.2},
        "eval": {"batch_size": 64},
        "tune": {"shots": 2, "report_items": 5},
    }
    cfg = config_from_dict(raw)
    encoded = _spy_extractions(monkeypatch, features)
    torch.manual_seed(0)
    model = build_model(**model_spec(cfg))
    state = MetricState(cfg)
    metric = METRICS["sleep_staging.balanced_accuracy"].compute
    for partial in (True, False):
        state.begin(partial)
        metric(model, state)
    y_train = np.arange(30) % 5  # 3 train subjects x labels 0..4 twice
    drawn = shot_draw(y_train, 2, seed=0)[0].tolist()
    assert len(drawn) == 10 and encoded == [
        ("train", drawn),
        ("val", report_subset(np.arange(10) % 5, 5).tolist()),
        ("train", drawn),
        ("val", None),
    ]


def test_trial_of_a_dead_worker_is_failed_and_requeued(tmp_path: Path) -> None:
    cfg = config_from_dict({**_tune_raw(tmp_path), "output": {"runs_dir": str(tmp_path), "name": "x"}})
    study = open_study(cfg, "dead")
    trial = study.ask({"loss.tau": optuna.distributions.FloatDistribution(0.05, 0.5, log=True)})
    gone = subprocess.Popen(["true"])
    tag = worker_tag(gone.pid)  # read while the process exists (its start time), then let it exit
    gone.wait()
    study._storage.set_trial_system_attr(trial._trial_id, WORKER_ATTR, tag)
    alive = study.ask()
    study._storage.set_trial_system_attr(alive._trial_id, WORKER_ATTR, worker_tag())  # this process: alive
    assert fail_dead_trials(study, max_retries=2) == [trial.number]
    states = {t.number: t for t in study.get_trials()}
    assert states[trial.number].state == TrialState.FAIL and "died" in states[trial.number].user_attrs["fail_reason"]
    assert states[alive.number].state == TrialState.RUNNING
    retry = [t for t in states.values() if t.state == TrialState.WAITING]
    assert len(retry) == 1 and retry[0].params == trial.params and retry[0].system_attrs["failed_trial"] == trial.number
    assert WORKER_ATTR not in retry[0].system_attrs
    assert fail_dead_trials(study, max_retries=2) == []  # idempotent


# ------------------------------------------------------------------ tiny real searches


def _enqueue(cfg_path: Path, study_name: str, params: list[dict[str, Any]]) -> None:
    cfg = load_config(cfg_path)
    study = open_study(cfg, study_name)
    for p in params:
        study.enqueue_trial(p)


@pytest.mark.slow
def test_resume_after_kill_prunes_bad_trial_and_best_yaml_trains(tmp_path: Path, fork_server: ForkServer) -> None:
    from multiview_app.cli import main
    from multiview_app.train.trainer import train

    raw = _tune_raw(tmp_path / "runs", pruner="median", pruner_options={"n_startup_trials": 1, "n_warmup_steps": 0})
    config = _write(tmp_path / "search.yaml", raw)
    folder = tmp_path / "runs" / "tune" / "s"
    _enqueue(
        config,
        "s",
        [
            {"loss.tau": 0.2, "model.encoders.image.num_features": 16},
            {"loss.tau": 0.1, "model.encoders.image.num_features": 16},
            {"loss.tau": 0.2, "model.encoders.image.num_features": 1},
        ],
    )  # 1 feature: a bad trial
    first = Worker(fork_server, config, "s", "--trials", "3", "--no-plots")  # default launcher: its own fork server
    _wait_for((folder / "trial_0" / "config.yaml").is_file, first, "trial 0 to start")  # written by the trial
    os.kill(first.handle.pid, signal.SIGSTOP)  # the worker cannot record the end of trial 0 any more
    _wait_for((folder / "trial_0" / "metrics.jsonl").is_file, first, "trial 0 to train")
    os.kill(first.handle.pid, signal.SIGKILL)  # the worker only: its fork server and trial die with it
    first.handle.kill()
    study = optuna.load_study(study_name="s", storage=_journal(folder))
    assert [t.state for t in study.get_trials()][:1] == [TrialState.RUNNING], "trial 0 ended before the kill"
    summary = _search(config, "s", 3, fork_server).run()  # resume in another worker
    assert summary.recovered == [0]
    trials = {t.number: t for t in study.get_trials()}
    assert trials[0].state == TrialState.FAIL and "died while running it" in trials[0].user_attrs["fail_reason"]
    assert trials[1].state == TrialState.COMPLETE
    assert trials[2].state == TrialState.PRUNED  # below the median at step 1 (then its process group is killed)
    assert list(trials[2].intermediate_values) == [1]
    assert trials[2].intermediate_values[1] < trials[1].intermediate_values[1]
    assert trials[3].state == TrialState.COMPLETE and trials[3].params == trials[0].params  # the retry
    assert trials[3].system_attrs["failed_trial"] == 0 and len(trials) == 4
    # report: best config, trials table; the best YAML trains
    assert main(["tune", "report", "--study-name", "s", "--runs-dir", str(tmp_path / "runs")]) == 0
    best = load_config(folder / "best_config.yaml", ["train.max_steps=1"])
    best_trial = max((trials[1], trials[3]), key=lambda t: t.value)
    assert best.loss.params["tau"] == pytest.approx(best_trial.params["loss.tau"])
    assert (
        best.output.name == "s_best" and best.eval.linear_probe is False and "tune-report" not in best.train.callbacks
    )
    assert best.output.curves and not (folder / "trial_1" / "curves.png").exists()  # trials skip the PNG, runs do not
    best.output.runs_dir = str(tmp_path / "runs")
    best_run = train(best).run_dir
    assert (best_run / "model.safetensors").is_file() and (best_run / "curves.png").is_file()
    table = (folder / "trials.csv").read_text().splitlines()
    assert len(table) == 5 and "params_loss.tau" in table[0]
    assert sorted(p.name for p in (folder / "plots").glob("*.png")) == [  # no parallel coordinates (report.py)
        "optimization_history.png",
        "param_importances.png",
    ]


def _assert_two_workers(storage: Any, study_name: str, finished: list[int], expect_fail: bool) -> None:
    """No duplicate trial numbers, 2 COMPLETE (+1 FAIL) in the study, and ``finished`` = trials
    reported by each worker: every trial reported once, and both workers ran at least one."""
    study = optuna.load_study(study_name=study_name, storage=storage)
    trials = study.get_trials()
    numbers = [t.number for t in trials]
    assert len(numbers) == len(set(numbers)) == len(trials)
    states = [t.state for t in trials]
    assert states.count(TrialState.COMPLETE) == 2, [(t.number, t.state, t.user_attrs) for t in trials]
    assert states.count(TrialState.FAIL) == (1 if expect_fail else 0)
    assert sum(finished) == len(trials) and min(finished) >= 1, finished


def _finished_lines(out: str) -> int:
    return sum(1 for line in out.splitlines() if line.startswith("trial ") and " value=" in line)


@pytest.mark.slow
def test_two_workers_on_one_journal_and_a_failing_trial(tmp_path: Path, fork_server: ForkServer) -> None:
    space = {**SPACE, "model.encoders.image.width": {"type": "categorical", "choices": [8, 0]}}
    raw = _tune_raw(tmp_path / "runs", space=space)
    config = _write(tmp_path / "two.yaml", raw)
    _enqueue(
        config,
        "two",
        [
            {"loss.tau": 0.2, "model.encoders.image.num_features": 16, "model.encoders.image.width": 0},
            {"loss.tau": 0.2, "model.encoders.image.num_features": 16, "model.encoders.image.width": 8},
            {"loss.tau": 0.1, "model.encoders.image.num_features": 16, "model.encoders.image.width": 8},
        ],
    )
    folder = tmp_path / "runs" / "tune" / "two"
    # a worker process that spawns a fresh python per trial takes the first (failing) trial; meanwhile a
    # worker in this process, whose trials fork from the fork server, asks on the same journal
    search = _search(config, "two", 2, fork_server)  # ready before the spawn worker starts
    spawner = Worker(fork_server, config, "two", "--trials", "2", "--no-plots", "--launcher", "spawn")
    _wait_for((folder / "trial_0" / "train.log").is_file, spawner, "the spawn worker's first trial")
    summary = search.run()
    out = spawner.finish()
    _assert_two_workers(_journal(folder), "two", [_finished_lines(out), len(summary.finished)], expect_fail=True)
    failed = [
        t
        for t in optuna.load_study(study_name="two", storage=_journal(folder)).get_trials()
        if t.state == TrialState.FAIL
    ]
    assert failed[0].params["model.encoders.image.width"] == 0 and "exit" in failed[0].user_attrs["fail_reason"]


def _postgres_bin() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    return found[-1].parent if found else None


@pytest.fixture
def postgres_url(tmp_path: Path) -> Any:
    """A throwaway PostgreSQL server on a unix socket in a temp dir (as user 'postgres' when run as root)."""
    bindir = _postgres_bin()
    if bindir is None:
        pytest.skip("PostgreSQL not installed (no /usr/lib/postgresql/*/bin/initdb; apt-get install postgresql)")
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        pytest.skip("psycopg2 not installed (pip install 'multiview_app[postgres]')")
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="mvapp-pg-"))  # short socket path, reachable by the postgres user
    data, sock = base / "data", base / "sock"
    sock.mkdir()
    prefix: list[str] = []
    if os.geteuid() == 0:
        runuser = shutil.which("runuser")
        if runuser is None:
            pytest.skip("running as root without runuser: initdb refuses root")
        prefix = [runuser, "-u", "postgres", "--"]
        for path in (base, sock):
            shutil.chown(path, "postgres")
    init = subprocess.run(
        [*prefix, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "tune", "--no-sync"],
        capture_output=True,
        text=True,
    )
    assert init.returncode == 0, init.stderr[-2000:]
    server = subprocess.Popen(
        [*prefix, str(bindir / "postgres"), "-D", str(data), "-k", str(sock), "-h", "", "-c", "fsync=off"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while subprocess.run(
            [str(bindir / "pg_isready"), "-h", str(sock), "-U", "tune"], capture_output=True
        ).returncode:
            assert server.poll() is None and time.monotonic() < deadline, "postgres did not start"
            time.sleep(0.2)
        subprocess.run(
            [str(bindir / "createdb"), "-h", str(sock), "-U", "tune", "optuna"], check=True, capture_output=True
        )
        yield f"postgresql+psycopg2://tune@/optuna?host={sock}"
    finally:
        pid_file = data / "postmaster.pid"  # fast shutdown (SIGINT): clients still connected are cut off
        if server.poll() is None and pid_file.is_file():
            os.kill(int(pid_file.read_text().split()[0]), signal.SIGINT)
        else:
            server.terminate()
        server.wait(timeout=60)
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.slow
def test_two_workers_on_postgresql(tmp_path: Path, postgres_url: str, fork_server: ForkServer) -> None:
    raw = _tune_raw(tmp_path / "runs")
    config = _write(tmp_path / "pg.yaml", raw)
    search = _search(config, "pg", 2, fork_server, storage=postgres_url)  # ready before the other one starts
    other = Worker(fork_server, config, "pg", "--trials", "2", "--no-plots", "--storage", postgres_url)
    _wait_for(
        (tmp_path / "runs" / "tune" / "pg" / "trial_0" / "train.log").is_file, other, "the worker process's first trial"
    )
    os.kill(other.handle.pid, signal.SIGSTOP)  # trial 0 stays RUNNING until this worker has run trial 1
    try:
        summary = search.run()  # trial 1, then the budget (1 COMPLETE + 1 RUNNING) is full
    finally:
        os.kill(other.handle.pid, signal.SIGCONT)
    _assert_two_workers(postgres_url, "pg", [_finished_lines(other.finish()), len(summary.finished)], expect_fail=False)


@pytest.mark.slow
def test_eeg_objective_is_sleep_staging_on_val_subjects_and_never_reads_test_subjects(
    tmp_path: Path,
    fork_server: ForkServer,
) -> None:
    from multiview_app.data.adapters import build_adapter
    from multiview_app.train.run_io import load_run
    from multiview_app.tune.objective import METRICS, REPORTS_FILE, RESULT_FILE, MetricState

    cache = fake_cache(tmp_path / "cache", subjects=5, windows=10)  # labels cycle 0..4 in every recording
    seconds = np.arange(3000) / 100.0
    for subject in range(5):  # a stage-specific rhythm under the noise, so that the score is not chance
        path = cache / "windows" / f"r{subject}.npy"
        windows = np.load(path)
        rhythm = np.sin(2 * np.pi * np.array([1.0, 3.0, 6.0, 10.0, 14.0])[:, None] * seconds)  # (5 stages, T)
        np.save(path, (0.5 * windows + rhythm[np.arange(10) % 5][:, None, :]).astype(np.float32))
    options = {"cache": str(cache), "test_subjects": ["S4"], "val_subjects": ["S3"]}
    (cache / "windows" / "r4.npy").unlink()  # the test subject's windows: no process can read them
    adapter = build_adapter("eeg_windows", options)
    assert adapter.split_subjects == {"train": ["S0", "S1", "S2"], "val": ["S3"], "test": ["S4"]}
    with pytest.raises(FileNotFoundError):  # reading the test split fails: the run below never does
        adapter.split("test")[0]
    raw = {
        "data": {"adapter": "eeg_windows", "options": options},
        "views": {"policy": "channels", "k": 2, "batch_mode": "growing"},
        "model": {
            "encoders": {"eeg": {"name": "conv", "width": 8, "out_dim": 8, "groups": 4, "channel_vocab": CHANNELS}},
            "projector": {"hidden_dim": 16, "out_dim": 8},
        },
        "loss": {"name": "m3g", "epsilon": 0.2},  # no tune.space: the loss's default space (epsilon)
        "optim": {"lr": 0.001, "warmup_steps": 1},
        "train": {"max_steps": 2, "batch_size": 8, "seed": 0, "log_every": 1},
        "eval": {"linear_probe": False, "batch_size": 64},
        "output": {"runs_dir": str(tmp_path / "runs")},
        "tune": {"shots": 2, "report_every": 1, "pruner": "none"},
    }
    config = _write(tmp_path / "eeg.yaml", raw)
    summary = _search(config, "eeg", 1, fork_server).run()
    assert [(r["state"], list(r["params"])) for r in summary.finished] == [("COMPLETE", ["loss.epsilon"])], summary
    run_dir = tmp_path / "runs" / "tune" / "eeg" / "trial_0"
    result = json.loads((run_dir / RESULT_FILE).read_text())
    reported = [json.loads(line) for line in (run_dir / REPORTS_FILE).read_text().splitlines()]
    # intermediate values before the last step only; the last step's value is the objective
    assert list(result["values"]) == ["sleep_staging.balanced_accuracy"] and [r["step"] for r in reported] == [1]
    assert [(e["step"], e["final"]) for e in result["evaluations"]] == [(1, False), (2, True)]
    # the objective is the few-shot sleep-staging score of the final weights on the val subject
    cfg, model = load_run(run_dir)
    metric = METRICS["sleep_staging.balanced_accuracy"].compute
    score = result["values"]["sleep_staging.balanced_accuracy"]
    assert score > 0.4 and score == pytest.approx(metric(model, MetricState(cfg)))  # chance: 0.2
    # ... and equal to the protocol fitted on the features of every train window (the objective encodes
    # only the windows of its few-shot draw)
    from multiview_app.data.eeg.views import staging_views
    from multiview_app.eval.features import combine_views, extract_features
    from multiview_app.eval.protocols.staging import few_shot_protocol

    policy = staging_views(cfg.views, adapter)
    full = {
        part: extract_features(model, adapter, policy, split, 64, progress=False)
        for part, split in (("train", "train"), ("test", "val"))
    }
    reference, _, _ = few_shot_protocol(
        {"trained": {p: combine_views(f, "concat") for p, (f, _, _) in full.items()}},
        full["train"][1],
        full["test"][1],
        (2,),
        seeds=1,
    )
    assert score == pytest.approx(reference["trained"]["2"]["balanced_accuracy"]["mean"])


def test_demo_tune_config_selects_on_val_subjects_and_holds_out_the_demos_test_subjects(tmp_path: Path) -> None:
    """configs/tune_eeg_demo.yaml (the demo's settings, issue 26 item 2) on the demo's 12-subject layout: its
    test subjects are exactly those the demo's in-domain table is scored on, and its val subjects are
    pretraining subjects of the demo: selection never sees a test subject (the objective never reads the
    test split: test_eeg_objective_is_sleep_staging_on_val_subjects_and_never_reads_test_subjects)."""
    from multiview_app.data.adapters import build_adapter

    cache = fake_cache(tmp_path / "cache", subjects=12, windows=2)
    overrides = [f"data.options.cache={cache}", f"data.options.channels=[{', '.join(CHANNELS)}]"]
    tune_cfg = load_config(ROOT / "configs" / "tune_eeg_demo.yaml", overrides)
    demo_cfg = load_config(ROOT / "configs" / "eeg_synthetic_m3g.yaml", overrides)
    tuned = build_adapter(tune_cfg.data.adapter, tune_cfg.data.options).split_subjects
    demo = build_adapter(demo_cfg.data.adapter, demo_cfg.data.options).split_subjects
    assert len(demo["test"]) == 4 and tuned["test"] == demo["test"] and len(tuned["val"]) == 3
    assert sorted(tuned["train"] + tuned["val"]) == sorted(demo["train"]) and not set(tuned["val"]) & set(
        tuned["train"]
    )
    space = resolve_space(tune_cfg)
    validate_enqueue(tune_cfg.tune.enqueue, space)  # the designed trials are points of the space
    assert tune_cfg.tune.metric == "sleep_staging.balanced_accuracy" and tune_cfg.tune.pruner == "none"


def test_multi_objective_uses_nsga2_without_pruning_and_reports_the_pareto_front(tmp_path: Path) -> None:
    from multiview_app.tune.report import write_report
    from multiview_app.tune.space import optuna_distributions
    from multiview_app.tune.study import make_pruner, make_sampler

    raw = {**_tune_raw(tmp_path), "output": {"runs_dir": str(tmp_path), "name": "m"}}
    raw["tune"].update(metric=["linear_probe.logreg_acc", "train_time_s"], pruner="median")
    cfg = config_from_dict(raw)
    assert isinstance(make_sampler(cfg, 0), optuna.samplers.NSGAIISampler)
    assert isinstance(make_pruner(cfg), optuna.pruners.NopPruner)
    study = open_study(cfg, "multi")
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MINIMIZE"]
    dists = optuna_distributions(resolve_space(cfg))
    points = [(0.2, 16, 0.80, 10.0), (0.1, 16, 0.90, 20.0), (0.3, 1, 0.70, 30.0)]  # the last one is dominated
    for tau, features, acc, seconds in points:
        study.add_trial(
            optuna.create_trial(
                params={"loss.tau": tau, "model.encoders.image.num_features": features},
                distributions=dists,
                values=[acc, seconds],
            )
        )
    report = write_report(study, tmp_path / "out")
    assert [b["number"] for b in report["best"]] == [1, 0]  # Pareto front, best accuracy first
    assert load_config(tmp_path / "out" / "best_config.yaml").loss.params["tau"] == pytest.approx(0.1)
    assert (tmp_path / "out" / "pareto_trial_0.yaml").is_file() and "pareto_front" in report["plots"]


def test_pareto_front_csv_pruning_note_importance_caveat_and_resolution(tmp_path: Path) -> None:
    import csv

    from multiview_app.data.adapters import build_adapter
    from multiview_app.tune.report import IMPORTANCE_MIN_TRIALS, format_report, write_report
    from multiview_app.tune.space import optuna_distributions
    from multiview_app.tune.study import pruning_note

    raw = {**_tune_raw(tmp_path), "output": {"runs_dir": str(tmp_path), "name": "m"}}
    raw["tune"].update(metric=["linear_probe.logreg_acc", "train_time_s"], pruner="median", report_every=5)
    cfg = config_from_dict(raw)
    note = pruning_note(cfg)
    assert note and "Optuna cannot prune multi-objective studies" in note and "tune.pruner=median" in note
    assert pruning_note(config_from_dict(_tune_raw(tmp_path))) is None  # single objective: pruning works
    assert pruning_note(config_from_dict(apply_overrides(raw, ["tune.pruner=none", "tune.report_every=0"]))) is None
    study = open_study(cfg, "pareto")
    dists = optuna_distributions(resolve_space(cfg))
    points = [(0.2, 16, 0.80, 10.0), (0.1, 16, 0.90, 20.0), (0.3, 1, 0.70, 30.0), (0.4, 1, 0.95, 40.0)]
    for tau, features, acc, seconds in points:
        study.add_trial(
            optuna.create_trial(
                params={"loss.tau": tau, "model.encoders.image.num_features": features},
                distributions=dists,
                values=[acc, seconds],
            )
        )
    report = write_report(study, tmp_path / "out")
    with open(tmp_path / "out" / "pareto_front.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [int(r["number"]) for r in rows] == [3, 1, 0]  # trial 2 is dominated; best accuracy first
    assert {k for k in rows[0]} == {
        "number",
        "linear_probe.logreg_acc",
        "train_time_s",
        "loss.tau",
        "model.encoders.image.num_features",
        "run_dir",
    }
    assert float(rows[0]["linear_probe.logreg_acc"]) == 0.95 and float(rows[0]["train_time_s"]) == 40.0
    assert "pareto_front" in report["plots"] and "parallel_coordinates" not in report["plots"]
    text = format_report(report)
    assert "Pareto front (3 trials):" in text
    assert "note: parameter importances from 4 complete trial(s) are indicative only" in text
    assert f">= {IMPORTANCE_MIN_TRIALS} trials" in text
    val = build_adapter(cfg.data.adapter, cfg.data.options).split("val")
    n_val = len(val)
    assert f"scored on {n_val} labelled val items: one item = {100 / n_val:.2g} points of accuracy" in text


def test_a_trial_with_the_knn_monitor_reports_its_values_for_pruning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import multiview_app.eval.linear_probe as linear_probe
    from multiview_app.train.callbacks import StepEvent
    from multiview_app.tune.objective import REPORTS_FILE, TuneReport

    raw = apply_overrides(_tune_raw(tmp_path, report_every=2), ["train.callbacks=[{knn-monitor: {every: 2}}]"])
    callback = TuneReport(config_from_dict(raw))
    assert callback.from_monitor and callback.every == 0
    encoded = _spy_extractions(monkeypatch, linear_probe)
    for step, record in ((1, {"loss": 1.0}), (2, {"loss": 1.0, "knn/acc": 0.25}), (3, None), (4, {"knn/acc": 0.5})):
        if step < 4:  # the last step is the objective (full val split): not part of this test
            callback.on_step_end(StepEvent(step, 4, record, None, tmp_path, True))
    rows = [json.loads(line) for line in (tmp_path / REPORTS_FILE).read_text().splitlines()]
    assert rows == [{"step": 2, "value": 0.25}] and encoded == []  # the monitor's value, no evaluation of our own
    assert not TuneReport(config_from_dict(_tune_raw(tmp_path, report_every=2))).from_monitor


def test_default_objective_is_declared_by_the_adapter() -> None:
    """``tune.metric``'s default comes from the adapter class (``DataAdapter.default_tune_metric``), not from
    a table keyed by adapter name; every adapter's default is a known metric."""
    from multiview_app.data.adapters import ADAPTERS
    from multiview_app.tune.objective import METRICS, default_metric

    assert default_metric("eeg_windows") == "sleep_staging.balanced_accuracy"
    assert default_metric("digits") == "linear_probe.logreg_acc"
    for name in ADAPTERS.names():
        assert default_metric(name) in METRICS, name


def test_a_collapsed_trial_is_flagged_on_its_line_in_its_attributes_and_in_the_report(
    tmp_path: Path, fork_server: ForkServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import multiview_app.train.diagnostics as diagnostics
    from multiview_app.tune.report import format_report, write_report
    from multiview_app.tune.study import COLLAPSED_ATTR, Search

    config = _write(tmp_path / "c.yaml", _tune_raw(tmp_path / "runs"))
    _enqueue(config, "c", [{"loss.tau": 0.2, "model.encoders.image.num_features": 16}])
    # the search reads the trial's real diagnostics.json; with the threshold below any uniformity this 2-step
    # run counts as collapsed (the threshold itself: test_diagnostics.py)
    monkeypatch.setattr(diagnostics, "COLLAPSED_UNIFORMITY", -1e9)
    _search(config, "c", 1, fork_server).run()
    folder = tmp_path / "runs" / "tune" / "c"
    last = json.loads((folder / "trial_0" / diagnostics.SUMMARY_FILE).read_text())["diag/uniformity"]["last"]
    trial = optuna.load_study(study_name="c", storage=_journal(folder)).get_trials()[0]
    assert trial.state == TrialState.COMPLETE and trial.user_attrs[COLLAPSED_ATTR] == pytest.approx(last)
    assert f"projections collapsed (diag/uniformity {last:.4f})" in capsys.readouterr().out
    report = write_report(optuna.load_study(study_name="c", storage=_journal(folder)), folder, plots=False)
    assert report["collapsed"] == {0: pytest.approx(last)}
    assert "note: best trial 0's projections collapsed" in format_report(report)
    assert "user_attrs_collapsed_uniformity" in (folder / "trials.csv").read_text().splitlines()[0]
    monkeypatch.setattr(diagnostics, "COLLAPSED_UNIFORMITY", 1.0)  # above any uniformity (<= 0): not collapsed
    row: dict = {}
    Search._flag_collapse(trial, folder / "trial_0", row)
    assert row == {}
