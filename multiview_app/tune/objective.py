"""Objective of a trial: validation metrics computed inside the training run (``tune-report`` callback).

A metric is a protocol of the registry :data:`multiview_app.eval.protocols.PROTOCOLS` plus its options
and the score read from its result, fed by the evaluators' own feature path (no second one here).
Metrics (``tune.metric``) and their direction:

- ``linear_probe.logreg_acc`` / ``linear_probe.knn_acc`` (maximize): the ``linear-probe`` / ``knn``
  protocols on ``train`` features, scored on the adapter's ``val`` split (features and both scores by
  the linear-probe evaluator's ``eval.linear_probe.probe_model``); default for image adapters.
- ``sleep_staging.<accuracy|balanced_accuracy|macro_f1|kappa>`` (maximize): the ``few-shot-staging``
  protocol (``tune.shots`` windows per class, seed 0, C = 1) fitted on train subjects, scored on the
  validation subjects (features by the sleep-staging evaluator's ``eval.features.window_features``);
  ``balanced_accuracy`` is the EEG default.
- ``train_time_s`` (minimize): wall time of the training loop (for multi-objective searches).

The test split is never touched. The callback appends ``{"step", "value"}`` rows (first metric) to
``<run>/tune_reports.jsonl`` every ``tune.report_every`` steps before the last (intermediate values,
used only for pruning; a trial with the ``knn-monitor`` callback reports the monitor's ``knn/acc``
values instead, at the monitor's cadence) and writes ``<run>/tune_result.json`` with every metric at the last step (the
objective); the tune worker reads both (``tune.runner``).

Intermediate values are scored on a fixed subset (``tune.report_items``, :func:`report_subset`): about
that many items of each split the metric encodes (the probe's train items, the val items; sleep
staging: the val windows, its few-shot draw is small already), class-stratified with a fixed seed, so
every trial of a study is scored on the same items at every report. The objective always uses the
full val split. Sleep staging encodes only the training windows its few-shot draw uses.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..config import Config, ConfigError
from ..eval.knn_monitor import ACC_KEY as KNN_ACC_KEY
from ..eval.subsets import split_labels
from ..eval.subsets import stratified_subset as report_subset  # the fixed subset of the intermediate reports
from ..train.callbacks import TRAIN_CALLBACKS, StepEvent, TrainCallback
from ..train.run_io import atomic_write_json

REPORTS_FILE = "tune_reports.jsonl"
RESULT_FILE = "tune_result.json"
VAL_SPLIT = "val"
#: Environment variable holding the tune worker's pid: trial processes stop when it is gone.
WORKER_PID_ENV = "MVAPP_TUNE_WORKER_PID"


@dataclass(frozen=True)
class Metric:
    """A tune objective: ``direction``, the ``protocol`` (a name of ``eval.protocols.PROTOCOLS``; None:
    ``train_time_s``, from the run's timing) and the ``score`` read from its result."""

    direction: str
    protocol: str | None
    score: str = ""

    @property
    def compute(self) -> Callable[[Any, MetricState], float] | None:
        """``compute(model, state) -> float`` on the val split (None for ``train_time_s``)."""
        if self.protocol is None:
            return None
        return lambda model, state: SCORERS[self.protocol](self, model, state)


class MetricState:
    """Adapter and view policy built once per run for the val metrics; ``results`` holds what one
    evaluation computes for several metrics, ``partial`` whether it is an intermediate report (both
    set by :meth:`begin` before each evaluation)."""

    def __init__(self, cfg: Config) -> None:
        from ..data.adapters import build_adapter
        from ..data.views import build_view_policy

        self.cfg = cfg
        if cfg.tune.val_cache is not None:
            self.adapter = cross_dataset_val_adapter(cfg)
            self.policy = None  # the sleep-staging metric builds its own views (staging_views)
        else:
            self.adapter = build_adapter(cfg.data.adapter, cfg.data.options)
            if VAL_SPLIT not in self.adapter.splits:
                raise ValueError(val_split_hint(cfg.data.adapter, self.adapter.splits))
            self.policy = build_view_policy(cfg.views.policy, cfg.views.k, cfg.views.options, self.adapter)
        self.results: dict[str, Any] = {}
        self.partial = False
        self._labels: dict[str, np.ndarray] = {}
        self._subsets: dict[tuple[str, int | None], np.ndarray | None] = {}

    def begin(self, partial: bool) -> None:
        """Start an evaluation (the model changed): intermediate report (``partial``) or objective."""
        self.results.clear()
        self.partial = partial

    def labels(self, split: str) -> np.ndarray:
        """``(N,)`` labels of ``split`` (read once)."""
        if split not in self._labels:
            self._labels[split] = split_labels(self.adapter.split(split))
        return self._labels[split]

    def items(self, split: str, cap: int | None = None) -> np.ndarray | None:
        """Item indices of ``split`` this evaluation encodes: the report subset of ``tune.report_items``
        (at most ``cap``) in an intermediate report, ``None`` (every item) otherwise."""
        if not self.partial or self.cfg.tune.report_items is None:
            return None
        size = self.cfg.tune.report_items if cap is None else min(self.cfg.tune.report_items, cap)
        if (split, size) not in self._subsets:
            self._subsets[split, size] = report_subset(self.labels(split), size)
        return self._subsets[split, size]


def cross_dataset_val_adapter(cfg: Config) -> Any:
    """The ``eeg_windows`` adapter of ``tune.val_cache``: its subjects split (``data.options.split_seed``) into
    ``train`` (half: the few-shot classifier's windows) and ``val`` (the others: scored). Refused (one error
    naming both recordings) when it shares a recording with ``tune.test_cache`` or with the pretraining cache
    (:func:`refuse_shared_recordings`), when its preprocessing is not the input contract of the run's encoder
    (one line naming the key: :func:`check_val_input_contract`), and for any metric other than ``sleep_staging.*``."""
    from ..data.adapters import build_adapter
    from ..data.eeg.cache import load_manifest
    from ..data.eeg.provenance import recording_identities

    tcfg = cfg.tune
    if cfg.data.adapter != "eeg_windows":
        raise ConfigError(f"tune.val_cache needs data.adapter eeg_windows, got {cfg.data.adapter!r}")
    other = [m for m in tcfg.metrics if not m.startswith("sleep_staging.")]
    if other:
        raise ConfigError(f"tune.val_cache scores only sleep_staging.* metrics, got {', '.join(other)}")
    seed = int(cfg.data.options.get("split_seed", 0))
    adapter = build_adapter(
        "eeg_windows", {"cache": tcfg.val_cache, "test_fraction": 0.0, "val_fraction": 0.5, "split_seed": seed}
    )
    check_val_input_contract(cfg, adapter)
    everyone = sorted(s for split in adapter.split_subjects.values() for s in split)
    validation = recording_identities(adapter.manifest, everyone)
    pretraining = load_manifest(cfg.data.options["cache"])
    refuse_shared_recordings(
        validation,
        recording_identities(pretraining, _subjects(pretraining)),
        f"tune.val_cache {tcfg.val_cache}",
        f"the pretraining cache {cfg.data.options['cache']}",
    )
    if tcfg.test_cache is not None:
        test = load_manifest(tcfg.test_cache)
        refuse_shared_recordings(
            validation,
            recording_identities(test, _subjects(test)),
            f"tune.val_cache {tcfg.val_cache}",
            f"tune.test_cache {tcfg.test_cache}",
        )
    return adapter


def check_val_input_contract(cfg: Config, val_adapter: Any) -> None:
    """Refuse ``tune.val_cache`` when its windows are not what the run's encoder is trained on: the input
    contract of the encoder under ``cfg`` on the pretraining cache (rate, window length, band-pass, units,
    scaling; the channels when a stacked encoder reads them by position) against the validation cache. One
    line naming ``tune.val_cache``, the cache and every mismatching key (``InputContractError``). Channels that
    differ are the cross-dataset shift itself for a per-channel encoder and are not refused."""
    from ..data.adapters import build_adapter
    from ..data.eeg.contract import InputContractError
    from ..data.views import build_view_policy
    from ..train.input_contract import run_input_contract

    pretraining = build_adapter(cfg.data.adapter, cfg.data.options)
    policy = build_view_policy(cfg.views.policy, cfg.views.k, cfg.views.options, pretraining)
    contract = run_input_contract(cfg, pretraining, policy)
    if contract is None:
        return
    whose = f"the encoder {cfg.model.encoders.get(pretraining.modality, {}).get('name')!r} trained on {cfg.data.options['cache']}"
    try:
        val_adapter.check_input_contract(contract, whose=whose)
    except InputContractError as error:
        raise InputContractError(f"tune.val_cache: {error}") from None


def _subjects(manifest: dict[str, Any]) -> list[str]:
    return sorted({r["subject"] for r in manifest["recordings"]})


def refuse_shared_recordings(ours: dict[str, str], theirs: dict[str, str], what: str, against: str) -> None:
    """``ValueError`` naming both files when two ``recording_identities`` maps share an identity (the same
    source bytes under any name, or the same synthetic person)."""
    same = sorted(set(ours) & set(theirs))
    if same:
        pairs = "; ".join(f"{ours[d]} is {theirs[d]}" for d in same[:5])
        more = f" (+{len(same) - 5} more)" if len(same) > 5 else ""
        raise ValueError(
            f"{what} shares recordings with {against} (same sha256 or synthetic person): {pairs}{more}; "
            "validation nights must be other people's"
        )


def val_split_hint(adapter: str, splits: tuple[str, ...]) -> str:
    """The error text when a run to be tuned has no ``val`` split."""
    extra = " (or val_subjects)" if adapter == "eeg_windows" else ""
    return (
        f"data adapter '{adapter}' has no 'val' split (splits: {', '.join(splits)}); the tune objective is "
        f"scored on validation data only: set data.options.val_fraction{extra}, e.g. data.options.val_fraction=0.2"
    )


def _device(model: Any) -> str:
    return str(next(model.parameters()).device)


def _probe_score(metric: Metric, model: Any, state: MetricState) -> float:
    """``linear-probe`` / ``knn``: the linear-probe evaluator's probe of the val split, whose scores come
    from those protocols (one probe per evaluation serves both)."""
    from ..eval.linear_probe import probe_model

    if "linear_probe" not in state.results:
        ecfg, tcfg = state.cfg.eval, state.cfg.tune
        state.results["linear_probe"] = probe_model(
            model,
            state.adapter,
            state.policy,
            eval_split=VAL_SPLIT,
            batch_size=ecfg.batch_size,
            knn_k=ecfg.knn_k,
            combine=ecfg.combine,
            max_train_items=tcfg.max_train_items,
            device=_device(model),
            progress=False,
            train_items=state.items("train", tcfg.max_train_items),
            eval_items=state.items(VAL_SPLIT),
        )
    return float(state.results["linear_probe"]["scores"][metric.score])


def _staging_score(metric: Metric, model: Any, state: MetricState) -> float:
    """``few-shot-staging`` with ``tune.shots`` windows per class, seed 0, C = 1, scored on the val windows.
    Only the windows the protocol fits on are encoded: it draws every one of them again from these
    labels (:func:`~multiview_app.eval.protocols.staging.shot_draw`), so the fit and the score are
    those of the whole train split."""
    from ..data.eeg.views import staging_views
    from ..eval.features import window_features
    from ..eval.protocols import get_protocol
    from ..eval.protocols.staging import shot_draw

    if "few-shot-staging" not in state.results:  # every sleep_staging.* score comes from one protocol run
        policy = staging_views(state.cfg.views, state.adapter)
        shots = state.cfg.tune.shots
        drawn, _ = shot_draw(state.labels("train"), shots, seed=0)
        features, labels = {}, {}
        for part, split, rows in (("train", "train", drawn), ("test", VAL_SPLIT, state.items(VAL_SPLIT))):
            features[part], labels[part], _ = window_features(
                model, state.adapter, policy, split, state.cfg.eval.batch_size, _device(model), rows=rows
            )
        fits = get_protocol("few-shot-staging")(
            {"trained": features}, labels["train"], labels["test"], (shots,), seeds=1
        )
        state.results["few-shot-staging"] = fits["results"]["trained"][str(shots)]
    return float(state.results["few-shot-staging"][metric.score]["mean"])


#: How each protocol a metric names is fed and scored on the val split.
SCORERS: dict[str, Callable[[Metric, Any, MetricState], float]] = {
    "linear-probe": _probe_score,
    "knn": _probe_score,
    "few-shot-staging": _staging_score,
}

METRICS: dict[str, Metric] = {
    "linear_probe.logreg_acc": Metric("maximize", "linear-probe", "logreg_acc"),
    "linear_probe.knn_acc": Metric("maximize", "knn", "knn_acc"),
    **{
        f"sleep_staging.{m}": Metric("maximize", "few-shot-staging", m)
        for m in ("accuracy", "balanced_accuracy", "macro_f1", "kappa")
    },
    "train_time_s": Metric("minimize", None),
}


def default_metric(adapter: str) -> str:
    """The objective ``tune.metric`` defaults to: the adapter's ``default_tune_metric`` (declared on
    ``DataAdapter``: the linear probe; EEG windows: few-shot sleep staging)."""
    from ..data.adapters import ADAPTERS

    return ADAPTERS.get(adapter).default_tune_metric


def objective_metrics(cfg: Config) -> list[str]:
    """``tune.metric`` as a checked list (default: the adapter's metric)."""
    names = cfg.tune.metrics or [default_metric(cfg.data.adapter)]
    for name in names:
        if name not in METRICS:
            raise ConfigError(f"tune.metric: unknown metric {name!r}; available: {', '.join(METRICS)}")
    if len(set(names)) != len(names):
        raise ConfigError(f"tune.metric: a metric is listed twice: {names}")
    if names[0] == "train_time_s":
        raise ConfigError("tune.metric: the first metric must be a validation metric, not train_time_s")
    return names


def objective_directions(cfg: Config) -> list[str]:
    """Per metric: ``tune.direction`` when given, else the metric's own direction."""
    names = objective_metrics(cfg)
    given = cfg.tune.direction
    if given is None:
        return [METRICS[n].direction for n in names]
    given = [given] if isinstance(given, str) else list(given)
    if len(given) != len(names):
        raise ConfigError(f"tune.direction: {len(given)} direction(s) for {len(names)} metric(s) {names}")
    return given


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@TRAIN_CALLBACKS.register("tune-report")
class TuneReport(TrainCallback):
    """Val metric on the report subset every ``tune.report_every`` steps before the last, every metric
    on the full val split at the last step (main process); stops the run when the tune worker that
    launched it is gone (every process)."""

    name = "tune"

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.metrics = objective_metrics(cfg)
        self.every = cfg.tune.report_every if len(self.metrics) == 1 else 0  # no pruning for multi-objective
        # a trial that runs the kNN monitor reports its knn/acc values instead (no evaluation of our own)
        self.from_monitor = bool(self.every) and "knn-monitor" in [name for name, _ in cfg.train.named_callbacks]
        if self.from_monitor:
            self.every = 0
        self.worker_pid = int(os.environ.get(WORKER_PID_ENV, "0") or 0)
        self.state: MetricState | None = None
        self.started = time.perf_counter()
        self.eval_s = 0.0
        self.evaluations: list[dict[str, Any]] = []  # {step, final, s} per evaluation (benchmarks read it)

    def _value(self, name: str, model: Any, began: float) -> float:
        """Metric ``name`` of the evaluation that began at ``began`` (``train_time_s``: the loop until
        then without the evaluations before)."""
        compute = METRICS[name].compute
        if compute is None:
            return began - self.started - self.eval_s
        assert self.state is not None
        return compute(model, self.state)

    def on_step_end(self, event: StepEvent) -> None:
        if self.worker_pid and not pid_alive(self.worker_pid):
            raise SystemExit(f"tune worker {self.worker_pid} is gone; stopping trial {event.run_dir}")
        last = event.step == event.total_steps
        if self.from_monitor and event.is_main_process and not last and KNN_ACC_KEY in (event.record or {}):
            with open(event.run_dir / REPORTS_FILE, "a") as reports:
                reports.write(json.dumps({"step": event.step, "value": event.record[KNN_ACC_KEY]}) + "\n")
        if not event.is_main_process or not (last or (self.every and event.step % self.every == 0)):
            return
        began = time.perf_counter()
        if self.state is None:
            self.state = MetricState(self.cfg)
        self.state.begin(partial=not last)  # the model changed since the last evaluation
        if last:
            values = {name: self._value(name, event.model, began) for name in self.metrics}
        else:
            value = self._value(self.metrics[0], event.model, began)
            with open(event.run_dir / REPORTS_FILE, "a") as reports:
                reports.write(json.dumps({"step": event.step, "value": value}) + "\n")
        seconds = time.perf_counter() - began
        self.eval_s += seconds
        self.evaluations.append({"step": event.step, "final": last, "s": seconds})
        if last:
            atomic_write_json(
                event.run_dir / RESULT_FILE,
                {"step": event.step, "values": values, "eval_s": self.eval_s, "evaluations": self.evaluations},
            )

    def on_train_end(self, run_dir: Path, is_main_process: bool) -> dict[str, Any] | None:
        path = run_dir / RESULT_FILE
        if not is_main_process or not path.is_file():
            return None
        return json.loads(path.read_text())

    def report(self, result: dict[str, Any]) -> str | None:
        return "val objective: " + ", ".join(f"{k} {v:.4f}" for k, v in result["values"].items())


__all__ = [
    "METRICS",
    "Metric",
    "MetricState",
    "pid_alive",
    "REPORTS_FILE",
    "RESULT_FILE",
    "TuneReport",
    "objective_directions",
    "objective_metrics",
    "refuse_shared_recordings",
    "report_subset",
    "split_labels",
    "val_split_hint",
    "cross_dataset_val_adapter",
]
