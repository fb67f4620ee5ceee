"""One trial = one training run in a subprocess (``python -m multiview_app.cli train`` or
``accelerate launch`` for several GPUs), watched by the tune worker: intermediate val metrics are
read from the run folder and reported to Optuna; a pruned trial's process group is killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .objective import REPORTS_FILE, RESULT_FILE, WORKER_PID_ENV
from .process import die_with_parent

LOG_FILE = "train.log"
EXIT_FILE = ".exit_code"
POLL_S = 0.05


class TrialFailed(RuntimeError):
    """The training subprocess ended without a result; the message is the reason (last error line)."""


@dataclass
class TrialOutcome:
    """What a finished trial process produced: ``values`` by metric (None when pruned)."""

    values: dict[str, float] | None
    pruned_at: int | None = None
    reports: list[tuple[int, float]] = field(default_factory=list)
    wall_s: float = 0.0
    eval_s: float = 0.0


def train_command(config: Path, overrides: list[str], gpus: int = 1) -> list[str]:
    """The argv of one trial: all ranks get the same sampled values (they are command-line overrides)."""
    train = ["-m", "multiview_app.cli", "train", "--config", str(config), *overrides]
    if gpus > 1:  # a free rendezvous port per trial: several trials may launch at once
        return [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--multi_gpu",
            "--num_processes",
            str(gpus),
            "--num_machines",
            "1",
            "--dynamo_backend",
            "no",
            "--main_process_port",
            str(_free_port()),
            *train,
        ]
    return [sys.executable, *train]


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _read_reports(path: Path, seen: int) -> list[tuple[int, float]]:
    """Complete rows of ``tune_reports.jsonl`` after the first ``seen``."""
    if not path.is_file():
        return []
    lines = path.read_text().splitlines(keepends=True)
    rows = [json.loads(line) for line in lines[seen:] if line.endswith("\n")]
    return [(int(r["step"]), float(r["value"])) for r in rows]


def failure_reason(log: Path, returncode: int) -> str:
    """The ``mvapp: error:`` line of the trial log (or its last line) and the exit code."""
    lines = log.read_text(errors="replace").splitlines() if log.is_file() else []
    errors = [line for line in lines if line.startswith("mvapp: error:")]
    tail = errors[-1] if errors else (lines[-1] if lines else "(no output)")
    if returncode < 0:
        tail = f"killed by signal {-returncode}; last output: {tail}"
    return f"exit {returncode}: {tail.strip()[:500]}"


class _Spawned:
    """A trial process started with ``subprocess`` (multi-GPU trials, or no fork server)."""

    def __init__(self, command: list[str], log: Any, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True, preexec_fn=die_with_parent
        )
        self.pid = self.proc.pid

    def poll(self) -> int | None:
        return self.proc.poll()

    def kill(self) -> None:
        _kill_group(self.pid)
        self.proc.wait()


class _Forked:
    """A trial process forked by the :class:`ForkServer` (not our child: exit code from a file)."""

    def __init__(self, pid: int, exit_file: Path) -> None:
        self.pid, self.exit_file = pid, exit_file

    def poll(self) -> int | None:
        if Path(f"/proc/{self.pid}").exists():  # no zombies: the server ignores SIGCHLD
            return None
        if self.exit_file.is_file():
            return int(self.exit_file.read_text() or 1)
        return -signal.SIGKILL  # gone without writing its code: killed

    def kill(self) -> None:
        _kill_group(self.pid)
        while Path(f"/proc/{self.pid}").exists():
            time.sleep(0.01)


def fork_supported() -> bool:
    """Whether trials can fork from a :class:`ForkServer` (Linux: ``/proc`` tells whether a pid lives)."""
    return hasattr(os, "fork") and Path("/proc").is_dir()


class _ServerFork:
    """A fork server forked from this process (which has the stack imported and has run nothing yet,
    see ``forkserver.claim_fresh_fork``): the ``subprocess.Popen`` interface :class:`ForkServer` uses."""

    def __init__(self) -> None:
        from .forkserver import serve

        to_server, from_server = os.pipe(), os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        self.pid = os.fork()
        if self.pid == 0:  # the server: requests and answers through the pipes, errors to our stderr
            try:
                die_with_parent()
                os.close(to_server[1])
                os.close(from_server[0])
                sys.stdin = os.fdopen(to_server[0], "r")
                sys.stdout = os.fdopen(from_server[1], "w", buffering=1)
                serve()
            except BaseException:  # noqa: BLE001 - the worker sees "did not start"; the reason goes to stderr
                import traceback

                traceback.print_exc()
            finally:
                os._exit(0)
        os.close(to_server[0])
        os.close(from_server[1])
        self.stdin = os.fdopen(to_server[1], "w")
        self.stdout = os.fdopen(from_server[0], "r")
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"fork server {self.pid}", timeout)
            time.sleep(0.01)
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)


class ForkServer:
    """One ``multiview_app.tune.forkserver`` process per worker (Linux): trials start as forks of a
    process that has the training stack imported, instead of paying python + torch imports each time.
    The constructor does not wait: the server imports while the caller loads its config and study;
    the first :meth:`start` waits for it to be ready."""

    def __init__(self) -> None:
        from .forkserver import claim_fresh_fork

        self.proc: Any
        if claim_fresh_fork() and threading.active_count() == 1:
            self.proc = _ServerFork()
        else:
            env = {**os.environ, "PYTHONUNBUFFERED": "1"}
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "multiview_app.tune.forkserver"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=env,
                preexec_fn=die_with_parent,
            )
        self._lock = threading.Lock()
        self._ready = False

    def wait_ready(self) -> None:
        """Block until the server has imported the training stack."""
        with self._lock:
            self._wait_ready_locked()

    def _wait_ready_locked(self) -> None:
        if self._ready:
            return
        if not self.proc.stdout.readline():
            raise RuntimeError("tune fork server did not start (run with --launcher spawn to bypass it)")
        self._ready = True

    def start(self, argv: list[str], log_path: Path, env: dict[str, str], exit_file: Path) -> _Forked:
        request = {"argv": argv, "log": str(log_path), "env": env, "exit_file": str(exit_file)}
        with self._lock:
            self._wait_ready_locked()
            try:
                self.proc.stdin.write(json.dumps(request) + "\n")
                self.proc.stdin.flush()
            except (BrokenPipeError, ValueError):  # ValueError: its stdin closed (the study is being interrupted)
                raise TrialFailed("tune fork server died or was closed") from None
            answer = self.proc.stdout.readline()
        if not answer:
            raise TrialFailed("tune fork server died")
        return _Forked(int(json.loads(answer)["pid"]), exit_file)

    def close(self) -> None:
        """End the server (its running trials die with it)."""
        if self.proc.poll() is None and not self._ready:  # still importing: nothing to wait for
            self.proc.kill()
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def run_trial(
    command: list[str],
    run_dir: Path,
    *,
    report: Callable[[int, float], bool] | None = None,
    env: dict[str, str] | None = None,
    fork_server: ForkServer | None = None,
) -> TrialOutcome:
    """Run ``command`` (its run folder is ``run_dir``; with ``fork_server``, ``command`` must be a
    :func:`train_command` without GPUs and runs as a fork); every new intermediate value goes to
    ``report(step, value) -> prune?``; pruned -> the process group is killed. Raises
    :class:`TrialFailed` when the process fails or writes no result."""
    run_dir.mkdir(parents=True, exist_ok=True)
    log_path = run_dir / LOG_FILE
    child_env = {**os.environ, **(env or {}), WORKER_PID_ENV: str(os.getpid())}
    child_env.setdefault("PYTHONUNBUFFERED", "1")
    began = time.perf_counter()
    outcome = TrialOutcome(values=None)
    with open(log_path, "ab") as log:
        if fork_server is not None:
            exit_file = run_dir / EXIT_FILE
            exit_file.unlink(missing_ok=True)
            handle: Any = fork_server.start(command[3:], log_path, child_env, exit_file)  # argv after "-m cli"
        else:
            handle = _Spawned(command, log, child_env)
        try:
            seen = 0
            while True:
                returncode = handle.poll()
                rows = _read_reports(run_dir / REPORTS_FILE, seen)
                seen += len(rows)
                for step, value in rows:
                    outcome.reports.append((step, value))
                    if report is not None and report(step, value):
                        handle.kill()
                        outcome.pruned_at = step
                        outcome.wall_s = time.perf_counter() - began
                        return outcome
                if returncode is not None:
                    break
                time.sleep(POLL_S)
        except BaseException:
            handle.kill()
            raise
    outcome.wall_s = time.perf_counter() - began
    result_path = run_dir / RESULT_FILE
    if returncode != 0:
        raise TrialFailed(failure_reason(log_path, returncode))
    if not result_path.is_file():
        raise TrialFailed(f"exit 0 but no {RESULT_FILE} in {run_dir} (was the tune-report callback active?)")
    result: dict[str, Any] = json.loads(result_path.read_text())
    outcome.values = {k: float(v) for k, v in result["values"].items()}
    outcome.eval_s = float(result.get("eval_s", 0.0))
    return outcome


__all__ = [
    "ForkServer",
    "TrialFailed",
    "TrialOutcome",
    "failure_reason",
    "fork_supported",
    "run_trial",
    "train_command",
]
