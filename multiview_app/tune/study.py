"""Studies that survive: storage, sampler, pruner, dead-worker recovery and the worker loop.

Storage: ``JournalStorage`` file backend in ``<runs_dir>/tune/<study>/journal.log`` by default (safe
for several worker processes on one machine), or any RDB URL (``postgresql://``, ``mysql://``)
for workers on many machines; the study is always loaded if it exists, so a killed search resumes.

A trial whose worker died is marked FAIL ("worker ... died") and re-queued with the same
parameters (Optuna's retry callback, at most ``tune.max_retries`` times): with an RDB URL through
Optuna's heartbeats (``tune.heartbeat_interval`` / ``tune.grace_period``), with the file storage
because every RUNNING trial records its worker (host, pid, process start time) and a worker on that
host finds the process gone. Budget: ``--trials N`` = N trials COMPLETE or PRUNED in the study; the
count-and-ask step is serialized by a file lock with the file storage (exactly N), best effort with
an RDB (a few more trials are possible when workers ask at the same moment).
"""

from __future__ import annotations

import copy
import fcntl
import inspect
import os
import random
import socket
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..config import Config, ConfigError, TuneConfig, apply_overrides, config_from_dict, dump_config
from ..train.run_io import atomic_write_text
from .objective import cross_dataset_val_adapter, objective_directions, objective_metrics, pid_alive, val_split_hint
from .runner import ForkServer, TrialFailed, fork_supported, run_trial, train_command
from .space import optuna_distributions, override, params_to_overrides, resolve_space, validate_enqueue, validate_space

BASE_CONFIG_ATTR = "mvapp_base_config"  # study user attr: the resolved base config (YAML text)
METRICS_ATTR = "mvapp_metrics"
WORKER_ATTR = "mvapp_worker"  # trial system attr: "host:pid:start" of the worker running it
FAIL_REASON_ATTR = "fail_reason"
COLLAPSED_ATTR = "collapsed_uniformity"
"""User attribute of a finished trial whose projections collapsed: its last ``diag/uniformity``."""
JOURNAL_FILE = "journal.log"
BASE_CONFIG_FILE = "base_config.yaml"
TUNE_CALLBACK = "tune-report"
RDB_OPEN_ATTEMPTS = 5


def study_folder(cfg: Config, study_name: str) -> Path:
    """``<output.runs_dir>/tune/<study>``: journal, trial run folders, report."""
    return Path(cfg.output.runs_dir) / "tune" / study_name


def _retry_callback(max_retries: int) -> Any:
    """Optuna's retry callback (re-queue a dead worker's trial, same params), without our worker tag."""
    import optuna
    import optuna.storages as storages

    retry_cls = getattr(storages, "RetryHeartbeatStaleTrialCallback", None) or storages.RetryFailedTrialCallback
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        retry = retry_cls(max_retry=max_retries)

    def callback(study: Any, trial: Any) -> None:
        clean = copy.deepcopy(trial)
        clean.system_attrs.pop(WORKER_ATTR, None)
        retry(study, clean)

    return callback


def open_storage(url: str | None, folder: Path, tcfg: TuneConfig | None = None) -> Any:
    """Journal file storage in ``folder`` (``url`` None or a ``.log`` path) or an RDB storage with heartbeats."""
    import optuna
    import optuna.storages as storages

    if url is None or url.endswith(".log"):
        path = folder / JOURNAL_FILE if url is None else Path(url)
        path.parent.mkdir(parents=True, exist_ok=True)
        backend = getattr(storages, "journal", None)
        if backend is not None and hasattr(backend, "JournalFileBackend"):
            return storages.JournalStorage(backend.JournalFileBackend(str(path)))
        return storages.JournalStorage(storages.JournalFileStorage(str(path)))  # optuna < 4
    if "://" not in url:
        raise ConfigError(
            f"--storage {url!r}: expected an RDB URL (postgresql://..., mysql://...) or a journal .log path"
        )
    tcfg = tcfg or TuneConfig()
    callback_arg = (
        "heartbeat_stale_trial_callback"
        if "heartbeat_stale_trial_callback" in inspect.signature(storages.RDBStorage).parameters
        else "failed_trial_callback"
    )
    for attempt in range(RDB_OPEN_ATTEMPTS):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return storages.RDBStorage(
                    url,
                    heartbeat_interval=tcfg.heartbeat_interval,
                    grace_period=tcfg.grace_period,
                    **{callback_arg: _retry_callback(tcfg.max_retries)},
                )
        except Exception as exc:  # sqlalchemy / driver errors: one line naming the URL
            # workers starting together on an empty database race to create Optuna's schema: retry
            if attempt + 1 < RDB_OPEN_ATTEMPTS and "already exists" in str(exc):
                time.sleep(0.5 + random.random())
                continue
            raise ConfigError(f"--storage {url.split('@')[-1]}: cannot open ({type(exc).__name__}: {exc})") from None
    raise AssertionError("unreachable")


def make_sampler(cfg: Config, seed: int) -> Any:
    """Seeded TPE (default), random, or NSGA-II (default for several metrics)."""
    import optuna

    kind = cfg.tune.sampler or ("nsga2" if len(objective_metrics(cfg)) > 1 else "tpe")
    if kind == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    if kind == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed)


def pruning_note(cfg: Config) -> str | None:
    """The one note of a multi-objective study that asks for pruning (None otherwise)."""
    metrics = objective_metrics(cfg)
    if len(metrics) == 1 or (cfg.tune.pruner == "none" and not cfg.tune.report_every):
        return None
    return (
        f"{len(metrics)} objectives ({', '.join(metrics)}): no pruning (Optuna cannot prune multi-objective "
        f"studies), so tune.pruner={cfg.tune.pruner} and tune.report_every={cfg.tune.report_every} are not used; "
        "every trial runs to the end"
    )


def make_pruner(cfg: Config) -> Any:
    """``tune.pruner`` with ``tune.pruner_options`` (none for multi-objective studies)."""
    import optuna

    if cfg.tune.pruner == "none" or len(objective_metrics(cfg)) > 1:
        return optuna.pruners.NopPruner()
    cls = optuna.pruners.MedianPruner if cfg.tune.pruner == "median" else optuna.pruners.HyperbandPruner
    try:
        return cls(**cfg.tune.pruner_options)
    except TypeError as exc:
        raise ConfigError(f"tune.pruner_options: {exc} (pruner {cfg.tune.pruner})") from None


def _comparable(cfg_dict: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in cfg_dict.items() if k != "output"}


def open_study(cfg: Config, study_name: str, storage_url: str | None = None) -> Any:
    """Create or load the study; the first worker stores the base config, later ones must match it."""
    import optuna

    folder = study_folder(cfg, study_name)
    storage = open_storage(storage_url, folder, cfg.tune)
    study = optuna.create_study(
        study_name=study_name,
        storage=storage,
        sampler=make_sampler(cfg, cfg.tune.sampler_seed),
        pruner=make_pruner(cfg),
        directions=objective_directions(cfg),
        load_if_exists=True,
    )
    stored = study.user_attrs.get(BASE_CONFIG_ATTR)
    if stored is None:
        study.set_user_attr(BASE_CONFIG_ATTR, dump_config(cfg))
        study.set_user_attr(METRICS_ATTR, objective_metrics(cfg))
        for point in cfg.tune.enqueue:  # a new study: the designed points run first, in order
            study.enqueue_trial(point)
    elif _comparable(yaml.safe_load(stored)) != _comparable(cfg.to_dict()):
        raise ConfigError(
            f"study {study_name!r} was started with another config (sections other than output "
            "differ); resume it with the same config or choose a new --study-name"
        )
    return study


def _process_start(pid: int) -> str:
    """Start time of ``pid`` in clock ticks since boot (Linux; '' elsewhere or when gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def worker_tag(pid: int | None = None) -> str:
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}:{pid}:{_process_start(pid)}"


def worker_alive(tag: str) -> bool | None:
    """Whether the worker ``host:pid:start`` still runs (None: another host, cannot tell)."""
    host, _, rest = tag.partition(":")
    pid_text, _, start = rest.partition(":")
    if host != socket.gethostname() or not pid_text.isdigit():
        return None
    pid = int(pid_text)
    if Path("/proc").is_dir():
        return bool(start) and _process_start(pid) == start
    return pid_alive(pid)


def fail_dead_trials(study: Any, max_retries: int) -> list[int]:
    """RUNNING trials whose worker on this host is gone -> FAIL (reason recorded) + re-queued; for
    RDB storages also Optuna's heartbeat check. Returns the failed trial numbers."""
    import optuna
    from optuna.trial import TrialState

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)  # heartbeats (RDB); a no-op for the journal storage
    storage, failed = study._storage, []
    retry = _retry_callback(max_retries)
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        tag = trial.system_attrs.get(WORKER_ATTR)
        if tag is None or worker_alive(tag) is not False:
            continue
        try:
            storage.set_trial_user_attr(trial._trial_id, FAIL_REASON_ATTR, f"worker {tag} died while running it")
            if not storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL):
                continue
        except optuna.exceptions.UpdateFinishedTrialError:
            continue
        failed.append(trial.number)
        retry(study, storage.get_trial(trial._trial_id))
    return failed


@dataclass
class SearchSummary:
    """What one ``mvapp tune`` invocation did."""

    finished: list[dict[str, Any]] = field(default_factory=list)
    recovered: list[int] = field(default_factory=list)
    stopped_because: str = ""


class Search:
    """The worker loop: ``workers`` threads, each asks a trial (under the budget lock), runs it as a
    training subprocess, reports intermediate values (pruning) and tells the result."""

    def __init__(
        self,
        cfg: Config,
        study_name: str,
        trials: int,
        *,
        storage: str | None = None,
        workers: int = 1,
        timeout: float | None = None,
        gpus: int = 1,
        progress: bool = True,
        launcher: str = "fork",
        fork_server: ForkServer | None = None,
    ) -> None:
        if trials < 1 or workers < 1 or gpus < 1:
            raise ValueError(f"--trials, --workers and --gpus must be >= 1 (got {trials}, {workers}, {gpus})")
        self.cfg, self.study_name, self.trials, self.workers = cfg, study_name, trials, workers
        self.timeout, self.gpus, self.progress = timeout, gpus, progress
        if launcher not in ("fork", "spawn"):
            raise ValueError(f"--launcher: expected fork or spawn, got {launcher!r}")
        # fork: trials are forks of a process with the trainer imported (Linux, one process per trial)
        self.use_fork = launcher == "fork" and gpus == 1 and fork_supported()
        self.fork_server = fork_server if self.use_fork else None  # given: the caller closes it
        self.metrics = objective_metrics(cfg)
        self.space = resolve_space(cfg)
        self.raw = cfg.to_dict()
        validate_space(self.raw, cfg, self.space)
        validate_enqueue(cfg.tune.enqueue, self.space)
        self._check_val_split()
        self.folder = study_folder(cfg, study_name)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.study = open_study(cfg, study_name, storage)
        self.file_storage = storage is None or storage.endswith(".log")
        self.distributions = optuna_distributions(self.space)
        self.base_config = self.folder / BASE_CONFIG_FILE
        atomic_write_text(self.base_config, self.study.user_attrs[BASE_CONFIG_ATTR])
        self._thread_lock = threading.Lock()
        self._consecutive_failures = 0
        self.summary = SearchSummary()

    def _check_val_split(self) -> None:
        from ..data.adapters import build_adapter

        if (
            self.cfg.tune.val_cache is not None
        ):  # cross-dataset validation nights: checked (and guarded) before any trial
            cross_dataset_val_adapter(self.cfg)
            return
        adapter = build_adapter(self.cfg.data.adapter, self.cfg.data.options)
        if "val" not in adapter.splits:
            raise ConfigError(val_split_hint(self.cfg.data.adapter, adapter.splits))

    @contextmanager
    def _budget_lock(self) -> Iterator[None]:
        """Serializes count-and-ask across threads, and across processes with the file storage."""
        with self._thread_lock:
            if not self.file_storage:
                yield
                return
            with open(self.folder / ".ask.lock", "a") as handle:
                fcntl.flock(handle, fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(handle, fcntl.LOCK_UN)

    def counts(self) -> dict[str, int]:
        """Trials per state name (COMPLETE, PRUNED, RUNNING, WAITING, FAIL)."""
        out: dict[str, int] = {}
        for trial in self.study.get_trials(deepcopy=False):
            out[trial.state.name] = out.get(trial.state.name, 0) + 1
        return out

    def done(self) -> int:
        counts = self.counts()
        return counts.get("COMPLETE", 0) + counts.get("PRUNED", 0)

    def _next_trial(self) -> Any | None:
        with self._budget_lock():
            self.summary.recovered += fail_dead_trials(self.study, self.cfg.tune.max_retries)
            counts = self.counts()
            busy = counts.get("COMPLETE", 0) + counts.get("PRUNED", 0) + counts.get("RUNNING", 0)
            if not counts.get("WAITING", 0) and busy >= self.trials:
                return None
            number = sum(counts.values())  # the next trial's number (exact under the file lock)
            self.study.sampler = make_sampler(self.cfg, self.cfg.tune.sampler_seed * 1_000_003 + number)
            with warnings.catch_warnings():  # heartbeats are run by this loop (_run_one), not by study.optimize
                warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
                trial = self.study.ask(fixed_distributions=self.distributions)
            self.study._storage.set_trial_system_attr(trial._trial_id, WORKER_ATTR, worker_tag())
            return trial

    def trial_overrides(self, params: dict[str, Any], number: int) -> list[str]:
        """Sampled params + the trial's run folder, the tune-report callback, no test-split probe, no
        curves PNG (the study report plots the search; ``metrics.jsonl`` keeps the curves)."""
        callbacks = [c for c in self.cfg.train.callbacks if c != TUNE_CALLBACK] + [TUNE_CALLBACK]
        return params_to_overrides(params) + [
            override("output.runs_dir", str(self.folder)),
            override("output.name", f"trial_{number}"),
            override("train.callbacks", callbacks),
            "eval.linear_probe=false",
            "output.curves=false",
        ]

    def _run_one(self, trial: Any) -> dict[str, Any]:
        from optuna.storages._heartbeat import get_heartbeat_thread
        from optuna.trial import TrialState

        number, params = trial.number, dict(trial.params)
        run_dir = self.folder / f"trial_{number}"
        overrides = self.trial_overrides(params, number)
        trial.set_user_attr("run_dir", str(run_dir))
        began = time.perf_counter()
        row: dict[str, Any] = {"number": number, "params": params}
        single = len(self.metrics) == 1

        def report(step: int, value: float) -> bool:
            if not single:
                return False
            trial.report(value, step)
            return trial.should_prune()

        try:
            config_from_dict(apply_overrides(self.raw, overrides))  # a bad sampled point fails without a launch
            with get_heartbeat_thread(trial._trial_id, self.study._storage):
                outcome = run_trial(
                    train_command(self.base_config, overrides, self.gpus),
                    run_dir,
                    report=report,
                    fork_server=self.fork_server,
                )
        except (TrialFailed, ConfigError) as exc:
            trial.set_user_attr(FAIL_REASON_ATTR, str(exc))
            self.study.tell(trial, state=TrialState.FAIL)
            row.update(state="FAIL", value=None, reason=str(exc))
        else:
            trial.set_user_attr("wall_s", outcome.wall_s)
            trial.set_user_attr("eval_s", outcome.eval_s)
            if outcome.pruned_at is not None:
                self.study.tell(trial, state=TrialState.PRUNED)
                row.update(state="PRUNED", value=outcome.reports[-1][1], step=outcome.pruned_at)
            else:
                values = [outcome.values[m] for m in self.metrics]
                self._flag_collapse(trial, run_dir, row)
                frozen = self.study.tell(trial, values=values, skip_if_finished=True)
                state = frozen.state.name if frozen is not None else "COMPLETE"
                row.update(state=state, value=values[0] if single else values)
        row["duration_s"] = time.perf_counter() - began
        return row

    @staticmethod
    def _flag_collapse(trial: Any, run_dir: Path, row: dict[str, Any]) -> None:
        """Record on ``trial`` (and its console line) that its run's projections collapsed
        (:func:`~multiview_app.train.diagnostics.run_collapse`): a sweep over a temperature or epsilon can
        otherwise pick a trial whose objective reads features of a head stuck at the loss's plateau."""
        from ..train.diagnostics import run_collapse

        collapsed = run_collapse(run_dir)
        if collapsed is not None:
            trial.set_user_attr(COLLAPSED_ATTR, collapsed)
            row["reason"] = f"projections collapsed (diag/uniformity {collapsed:.4f})"

    def _worker(self, bar: Any, deadline: float | None) -> None:
        from ..console import write

        while True:
            if deadline is not None and time.monotonic() > deadline:
                self.summary.stopped_because = self.summary.stopped_because or "timeout"
                return
            if self._consecutive_failures >= max(3, self.trials):
                self.summary.stopped_because = f"{self._consecutive_failures} trials failed in a row"
                return
            trial = self._next_trial()
            if trial is None:
                return
            row = self._run_one(trial)
            self._consecutive_failures = self._consecutive_failures + 1 if row["state"] == "FAIL" else 0
            self.summary.finished.append(row)
            params = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row["params"].items())
            value = row["value"]
            value_text = f"{value:.4f}" if isinstance(value, float) else str(value)
            line = f"trial {row['number']}: {row['state']} value={value_text} ({params}) {row['duration_s']:.1f} s" + (
                f" - {row['reason']}" if row.get("reason") else ""
            )
            write(line) if self.progress else print(line, flush=True)
            bar.n = min(self.done(), self.trials)
            bar.refresh()

    def run(self) -> SearchSummary:
        """Run workers until the study holds ``trials`` finished (COMPLETE/PRUNED) trials or time runs out."""
        from ..console import progress

        deadline = time.monotonic() + self.timeout if self.timeout else None
        own_server = self.use_fork and self.fork_server is None
        if own_server:
            self.fork_server = ForkServer()
        try:
            if self.fork_server is not None:
                self.fork_server.wait_ready()
            with progress(
                total=self.trials,
                initial=min(self.done(), self.trials),
                desc=f"study {self.study_name}",
                unit="trial",
                disable=not self.progress,
            ) as bar:
                threads = [
                    threading.Thread(target=self._worker, args=(bar, deadline), daemon=True)
                    for _ in range(self.workers)
                ]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
        finally:
            if own_server:
                self.fork_server.close()
                self.fork_server = None
        return self.summary


__all__ = [
    "Search",
    "SearchSummary",
    "fail_dead_trials",
    "make_pruner",
    "pruning_note",
    "make_sampler",
    "open_storage",
    "open_study",
    "study_folder",
    "worker_alive",
    "worker_tag",
]
