"""Resuming a run keeps the run's own config.

The ``config.yaml`` saved in the run folder is the truth. A resume whose config (file + overrides)
differs from it is refused with every differing key as ``key: saved -> given``. Keys in
:data:`SAFE_ON_RESUME` (run length, logging / checkpoint cadence, loader workers, end-of-run
evaluation) may change, but only when the caller says so (``mvapp train --accept-config-changes``);
each accepted change is appended to ``config_history.jsonl`` and ``config.yaml`` is rewritten.

Extending a finished run (``mvapp train --resume runs/X train.max_steps=<more> --accept-config-changes``)
continues from its final checkpoint (every run ends with one, ``train/checkpoint.py``), never from an older
one: :func:`refuse_stale_extension` refuses a finished run whose newest checkpoint is older than its final
model (written by an older version), and the trainer moves the finished model into ``final_step<N>/``
(``run_io.keep_previous_final``) before it trains again.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from ..config import Config, ConfigError, read_yaml
from ..fileio import atomic_write_text
from .checkpoint import read_trainer_state
from .run_io import final_model_step

CONFIG_FILE = "config.yaml"
HISTORY_FILE = "config_history.jsonl"

#: Dotted keys (or ``section.*`` prefixes) that may change on resume with the explicit flag: they
#: change how long the run is, how often it logs / checkpoints and how it is evaluated at the end,
#: never what a finished step computed. Extending ``train.max_steps`` stretches the LR schedule.
SAFE_ON_RESUME: tuple[str, ...] = (
    "train.max_steps",
    "train.epochs",
    "train.log_every",
    "train.checkpoint_every",
    "train.keep_checkpoints",
    "train.num_workers",
    "train.num_threads",
    "train.prefetch_views",
    "train.diagnostics",
    "train.callbacks",
    "eval.*",
)


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (lists and scalars are leaves; an empty dict is a leaf)."""
    if isinstance(tree, dict) and tree:
        out: dict[str, Any] = {}
        for key, value in tree.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: tree}


_MISSING = "(unset)"


def config_differences(saved: dict[str, Any], given: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """``{dotted key: (saved value, given value)}`` for every key whose value differs."""
    a, b = flatten(saved), flatten(given)
    return {
        key: (a.get(key, _MISSING), b.get(key, _MISSING))
        for key in sorted(set(a) | set(b))
        if a.get(key, _MISSING) != b.get(key, _MISSING)
    }


def is_safe(key: str) -> bool:
    """Whether ``key`` may change on resume (see :data:`SAFE_ON_RESUME`)."""
    return any(key == p or (p.endswith(".*") and key.startswith(p[:-1])) for p in SAFE_ON_RESUME)


def _show(changes: dict[str, tuple[Any, Any]]) -> str:
    return "; ".join(f"{key}: {json.dumps(old)} -> {json.dumps(new)}" for key, (old, new) in changes.items())


def reconcile_resume_config(
    run_dir: str | Path, cfg: Config, *, accept_changes: bool = False, step: int | None = None, write: bool = True
) -> Config:
    """Check ``cfg`` (paths resolved) against the run's saved ``config.yaml``; return the config to
    resume with. Raises :class:`ConfigError` listing ``key: saved -> given`` for unsafe differences,
    or for safe ones without ``accept_changes``. Accepted changes are appended to
    ``config_history.jsonl`` and ``config.yaml`` is rewritten (when ``write``: the main process)."""
    run_dir = Path(run_dir)
    saved_path = run_dir / CONFIG_FILE
    if not saved_path.is_file():
        return cfg
    saved = read_yaml(saved_path)
    changes = config_differences(saved, cfg.to_dict())
    if not changes:
        return cfg
    unsafe = {k: v for k, v in changes.items() if not is_safe(k)}
    if unsafe:
        raise ConfigError(
            f"--resume: the config differs from the run's own {saved_path}: {_show(unsafe)}. A resumed run "
            "keeps its config: drop these changes (omit --config to use the saved one), or start a new "
            f"run with --name. Changeable on resume: {', '.join(SAFE_ON_RESUME)}"
        )
    if not accept_changes:
        raise ConfigError(
            f"--resume: the config differs from the run's own {saved_path}: {_show(changes)}; "
            "pass --accept-config-changes to apply them (they are logged in "
            f"{run_dir / HISTORY_FILE})"
        )
    if not write:
        return cfg
    entry = {
        "time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "resumed_at_step": step,
        "changes": {key: {"saved": old, "given": new} for key, (old, new) in changes.items()},
    }
    history = run_dir / HISTORY_FILE
    previous = history.read_text() if history.is_file() else ""
    atomic_write_text(history, previous + json.dumps(entry) + "\n")
    from ..config import dump_config

    atomic_write_text(saved_path, dump_config(cfg))
    return cfg


def refuse_stale_extension(run_dir: str | Path, ckpt: Path | None) -> None:
    """A finished run resumed as a whole to train further must continue from its final state. Raises a
    ValueError when the run's final model (step N) is newer than its newest checkpoint ``ckpt`` (a run
    written by an older version, whose last state was not a checkpoint): training from there would
    silently redo steps. Naming an older checkpoint folder explicitly is the way to do that on purpose."""
    final_step = final_model_step(run_dir)
    ckpt_step = int(read_trainer_state(ckpt)["step"]) if ckpt is not None else 0
    if final_step is None or ckpt_step >= final_step:
        return
    where = f"its newest checkpoint is {ckpt} (step {ckpt_step})" if ckpt is not None else "it has no checkpoint"
    how = (
        f"to retrain from that checkpoint on purpose, name it: mvapp train --resume {ckpt} ... "
        f"--accept-config-changes (steps {ckpt_step + 1}-{final_step} are trained again; the finished model is "
        f"kept in {run_dir}/final_step{final_step}/)"
        if ckpt is not None
        else "train a longer run under a new --name instead"
    )
    raise ValueError(
        f"--resume {run_dir}: the run is finished at step {final_step} but {where}: its final state was not "
        f"saved as a checkpoint (a run written by an older version), so it cannot be extended from its final "
        f"weights; {how}"
    )


# ----------------------------------------------------------------------------- one writer per run folder
LOCK_FILE = ".lock"


def holds_nothing(run_dir: str | Path) -> bool:
    """True when the existing folder ``run_dir`` holds no file but (perhaps) its lock file: nothing of a run
    was written into it."""
    return {p.name for p in Path(run_dir).iterdir()} <= {LOCK_FILE}


class RunLock:
    """An exclusive, non-blocking ``flock`` on ``<run_dir>/.lock`` held while a process writes the run
    folder, so two processes never train into the same run. A folder this lock created and that holds
    nothing else when released (the run failed before writing anything) is removed again."""

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        self._handle: Any = None
        self._created: list[Path] = []

    def acquire(self) -> RunLock:
        import fcntl
        import os

        missing = [p for p in (self.run_dir, *self.run_dir.parents) if not p.exists()]
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._created = missing  # deepest first
        handle = open(self.path, "a+")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            handle.close()
            self._remove_if_empty()
            raise RuntimeError(
                f"run folder {self.run_dir} is in use by another process ({holder}; lock {self.path}); "
                "wait for it to finish or choose another --name"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}\n")
        handle.flush()
        self._handle = handle
        return self

    def release(self) -> None:
        if self._handle is None:
            return
        import fcntl

        fcntl.flock(self._handle.fileno(), fcntl.LOCK_UN)
        self._handle.close()
        self._handle = None
        self._remove_if_empty()

    def _remove_if_empty(self) -> None:
        """Undo the folders this lock created if nothing but the lock file was written into them."""
        if not self._created or not self.run_dir.is_dir():
            return
        if holds_nothing(self.run_dir):
            self.path.unlink(missing_ok=True)
            for folder in self._created:
                try:
                    folder.rmdir()
                except OSError:
                    break

    @staticmethod
    def holder(run_dir: str | Path) -> str | None:
        """Who holds ``run_dir``'s lock now (its ``pid ...`` line), or None when nobody does (or there is
        no lock file). Probes with a non-blocking lock, released at once."""
        import fcntl

        path = Path(run_dir) / LOCK_FILE
        if not path.is_file():
            return None
        with open(path, "a+") as handle:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                handle.seek(0)
                return handle.read().strip() or "unknown"
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
        return None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


__all__ = [
    "HISTORY_FILE",
    "LOCK_FILE",
    "RunLock",
    "SAFE_ON_RESUME",
    "config_differences",
    "flatten",
    "holds_nothing",
    "is_safe",
    "reconcile_resume_config",
    "refuse_stale_extension",
]
