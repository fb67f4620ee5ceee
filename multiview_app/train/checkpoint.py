"""Checkpoints under ``runs/<name>/checkpoints/step_XXXXXXXX/``: accelerate state + ``trainer_state.json``.

Writes are atomic: every process saves into a hidden temp folder, then the main process renames
it to its final name, so a killed run never leaves a half-written ``step_*`` folder behind.
Only the last ``keep`` checkpoints are kept; a failed write (e.g. a full disk) removes its temp folder
and leaves the older checkpoints untouched. The loss module's ``state_dict`` (scheduled temperatures,
buffers such as warm-start potentials) is saved per process as ``loss_state_<rank>.pt`` and loaded
with ``torch.load(weights_only=True)``. The other stateful objects (LR schedule, EMA teacher) are
saved the same way as ``state_<name>.pt`` (main process), never through accelerate's
``register_for_checkpointing``, whose ``custom_checkpoint_<i>.pkl`` files are unpickled with
``weights_only=False`` on load (arbitrary code from a checkpoint someone hands you).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import torch

from ..fileio import default_file_mode
from .run_io import atomic_write_json

STATE_FILE = "trainer_state.json"
LOSS_STATE_FILE = "loss_state_{rank}.pt"
EXTRA_STATE_FILE = "state_{name}.pt"
_STEP_DIR = re.compile(r"^step_(\d{8})$")


def checkpoints_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Complete checkpoint folders of a run, oldest first."""
    root = checkpoints_dir(run_dir)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and _STEP_DIR.match(p.name) and (p / STATE_FILE).is_file()]
    return sorted(found, key=lambda p: int(_STEP_DIR.match(p.name).group(1)))  # type: ignore[union-attr]


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def resolve_resume(run_dir: str | Path, resume: str) -> Path:
    """``'latest'`` -> newest checkpoint of ``run_dir``; otherwise a checkpoint folder path."""
    if resume == "latest":
        found = latest_checkpoint(run_dir)
        if found is None:
            raise FileNotFoundError(f"--resume latest: no checkpoint in {checkpoints_dir(run_dir)}")
        return found
    path = Path(resume)
    if (path / STATE_FILE).is_file():
        return path
    found = latest_checkpoint(path)
    if found is None:
        raise FileNotFoundError(f"--resume {resume}: neither a checkpoint folder nor a run with checkpoints")
    return found


def save_checkpoint(
    accelerator: Any,
    run_dir: str | Path,
    step: int,
    trainer_state: dict[str, Any],
    keep: int,
    loss_module: torch.nn.Module | None = None,
    states: dict[str, Any] | None = None,
) -> Path:
    """``accelerator.save_state`` + the loss module's state + ``states`` (name -> object with
    ``state_dict``, identical on every process) + ``trainer_state.json`` into
    ``step_<step>`` (atomic), prune old ones. Must be called by every process. An ``OSError`` while
    writing (full disk, ...) removes the temp folder and is re-raised naming the checkpoint."""
    root = checkpoints_dir(run_dir)
    final = root / f"step_{step:08d}"
    tmp = root / f".tmp_step_{step:08d}"
    try:
        if accelerator.is_main_process:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True, exist_ok=True)
        accelerator.wait_for_everyone()
        accelerator.save_state(output_dir=str(tmp))
        if loss_module is not None and loss_module.state_dict():
            torch.save(loss_module.state_dict(), tmp / LOSS_STATE_FILE.format(rank=accelerator.process_index))
        if accelerator.is_main_process:
            for name, obj in (states or {}).items():
                torch.save(obj.state_dict(), tmp / EXTRA_STATE_FILE.format(name=name))
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            atomic_write_json(tmp / STATE_FILE, trainer_state)
            mode = default_file_mode()  # safetensors / mkstemp files are 0600: give them the umask's mode
            for path in tmp.rglob("*"):
                if path.is_file():
                    os.chmod(path, mode)
            if final.exists():
                shutil.rmtree(final)
            tmp.rename(final)
    except BaseException as err:  # a full disk, a second Ctrl-C, ...: drop the half-written folder
        shutil.rmtree(tmp, ignore_errors=True)
        if not isinstance(err, OSError):
            raise
        older = latest_checkpoint(run_dir)
        failure = OSError(
            f"{final}: could not write the checkpoint ({err.strerror or err}); nothing of it was kept; "
            f"older checkpoints are intact (newest: {older or 'none'})"
        )
        failure.errno = err.errno
        raise failure from None
    if accelerator.is_main_process:
        for old in list_checkpoints(run_dir)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()
    return final


def read_trainer_state(ckpt_dir: str | Path) -> dict[str, Any]:
    """``trainer_state.json`` of a checkpoint; ``ValueError`` naming the file if it is corrupt."""
    path = Path(ckpt_dir) / STATE_FILE
    try:
        state = json.loads(path.read_text())
        int(state["step"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path}: corrupt checkpoint state ({err}); resume from another checkpoint") from None
    return state


def load_checkpoint(
    accelerator: Any,
    ckpt_dir: str | Path,
    loss_module: torch.nn.Module | None = None,
    states: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Restore model / optimizer / RNG, ``states`` (name -> object with ``load_state_dict``) and the
    loss module's state from ``ckpt_dir``; return the trainer state (``loss_state``: ``restored`` /
    ``none`` / ``missing``). Every state file is read with ``torch.load(weights_only=True)``."""
    ckpt_dir = Path(ckpt_dir)
    state_path = ckpt_dir / STATE_FILE
    if not state_path.is_file():
        raise FileNotFoundError(f"{ckpt_dir}: not a checkpoint (no {STATE_FILE})")
    state = read_trainer_state(ckpt_dir)
    missing = [
        EXTRA_STATE_FILE.format(name=name)
        for name in (states or {})
        if not (ckpt_dir / EXTRA_STATE_FILE.format(name=name)).is_file()
    ]
    if missing:
        pickled = sorted(p.name for p in ckpt_dir.glob("custom_checkpoint_*.pkl"))
        why = (
            f"it holds {', '.join(pickled)} instead (pickles from an older version, not loaded: unpickling "
            "can run arbitrary code)"
            if pickled
            else "they are missing"
        )
        raise ValueError(
            f"{ckpt_dir}: checkpoint cannot be restored: expected {', '.join(missing)}; {why}. "
            "Start a new run or resume from a checkpoint written by this version"
        )
    try:
        accelerator.load_state(str(ckpt_dir))
    except Exception as err:  # truncated / foreign files inside the checkpoint
        older = [p for p in list_checkpoints(ckpt_dir.parent.parent) if p != ckpt_dir]
        hint = f"; resume from an older one with --resume {older[-1]}" if older else ""
        raise ValueError(
            f"{ckpt_dir}: checkpoint cannot be restored ({' '.join(str(err).split())[:300]}){hint}"
        ) from None
    for name, obj in (states or {}).items():
        obj.load_state_dict(
            torch.load(
                ckpt_dir / EXTRA_STATE_FILE.format(name=name), map_location=accelerator.device, weights_only=True
            )
        )
    state["loss_state"] = "none"
    if loss_module is not None and loss_module.state_dict():
        own = ckpt_dir / LOSS_STATE_FILE.format(rank=accelerator.process_index)
        path = own if own.is_file() else ckpt_dir / LOSS_STATE_FILE.format(rank=0)
        if path.is_file():
            loss_module.load_state_dict(torch.load(path, map_location=accelerator.device, weights_only=True))
            state["loss_state"] = "restored"
        else:
            state["loss_state"] = "missing"
    return state
