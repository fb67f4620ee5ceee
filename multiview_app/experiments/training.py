"""``ensure_trained(cfg, policy)``: bring ``cfg.run_dir`` to a finished model, doing only the work the
chosen policy allows.

A run folder is in one of four states: **finished** (``model.safetensors``), **interrupted** (a
checkpoint but no final model), **stale** (a folder with neither) or **absent**. A folder that holds
nothing (or only a lock file nobody holds: a run killed while starting) counts as absent. A
:class:`TrainPolicy` says what to do in each; :data:`POLICIES` names the ones in use:

========================  ==========================  =====================  ========================
policy                    finished                    interrupted            stale
========================  ==========================  =====================  ========================
``reuse``                 reused as it is             resumed                removed, trained afresh
``refuse-mismatch``       reused if its saved config  resumed                removed, trained afresh
                          holds ``cfg``'s values,
                          else ValueError naming keys
``resume``                reused as it is             resumed                FileExistsError (never
                                                                             deletes a folder)
``retrain``               removed, trained afresh     removed, trained       removed, trained afresh
========================  ==========================  =====================  ========================

Resuming continues from the latest checkpoint exactly (the trainer's resume contract). No folder is
removed, resumed or trained into while another process holds its lock (:class:`.RunLock`): RuntimeError
naming the holder.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..config import Config, read_yaml, resolve_paths
from ..train.checkpoint import latest_checkpoint
from ..train.metrics import read_metrics
from ..train.resume import RunLock, config_differences, flatten, holds_nothing


@dataclass(frozen=True)
class TrainPolicy:
    """What :func:`ensure_trained` does with a finished, an interrupted and a stale run folder."""

    #: ``reuse`` as it is; ``check`` its saved config against ``cfg`` first (refuse a mismatch); ``retrain``.
    finished: Literal["reuse", "check", "retrain"]
    #: ``resume`` from the latest checkpoint; ``restart`` from scratch (the folder is removed).
    interrupted: Literal["resume", "restart"]
    #: ``remove`` the folder and train afresh; ``refuse`` (FileExistsError).
    stale: Literal["remove", "refuse"]


POLICIES: dict[str, TrainPolicy] = {
    "reuse": TrainPolicy(finished="reuse", interrupted="resume", stale="remove"),
    "refuse-mismatch": TrainPolicy(finished="check", interrupted="resume", stale="remove"),
    "resume": TrainPolicy(finished="reuse", interrupted="resume", stale="refuse"),
    "retrain": TrainPolicy(finished="retrain", interrupted="restart", stale="remove"),
}


@dataclass
class RunSummary:
    """What a results table needs of a training run: steps, last logged loss, training seconds,
    items/s, and whether a model finished earlier was reused (``train_s`` / ``items_per_s`` then come
    from its ``metrics.jsonl``: the logged step times, without start-up and checkpoints;
    ``cpu_s``, the process CPU seconds of training, is then None)."""

    steps: int
    final_loss: float
    train_s: float
    items_per_s: float
    reused: bool
    cpu_s: float | None = None


def finished_summary(run_dir: Path) -> RunSummary:
    """:class:`RunSummary` of a finished run, from its ``metrics.jsonl`` (``reused=True``)."""
    records = read_metrics(run_dir / "metrics.jsonl")
    if not records:
        raise ValueError(f"{run_dir}: a final model without metrics.jsonl; remove the folder to retrain")
    seconds, items, previous = 0.0, 0.0, 0
    for record in records:  # each row: mean step time and items/s over the steps since the previous row
        window = record["step"] - previous
        seconds += window * record["step_time_s"]
        items += window * record["step_time_s"] * record["items_per_s"]
        previous = record["step"]
    return RunSummary(records[-1]["step"], records[-1]["loss"], seconds, items / max(seconds, 1e-12), reused=True)


def config_mismatch(cfg: Config) -> dict[str, tuple[object, object]]:
    """``{dotted key: (saved, given)}`` where the run folder's saved ``config.yaml`` differs from
    ``cfg`` (keys the saved file lacks are schema fields added since, at their defaults: ignored)."""
    saved = read_yaml(cfg.run_dir / "config.yaml")
    present = flatten(saved)
    return {
        key: values for key, values in config_differences(saved, resolve_paths(cfg).to_dict()).items() if key in present
    }


def ensure_trained(cfg: Config, policy: str | TrainPolicy = "reuse") -> RunSummary:
    """Bring the run folder ``cfg.run_dir`` to a finished model under ``policy`` (a name of
    :data:`POLICIES` or a :class:`TrainPolicy`); see the module docstring for the table."""
    from ..train.trainer import train

    if isinstance(policy, str):
        if policy not in POLICIES:
            raise ValueError(f"unknown training policy {policy!r}; available: {', '.join(POLICIES)}")
        policy = POLICIES[policy]
    run_dir = cfg.run_dir
    finished = (run_dir / "model.safetensors").is_file()
    if finished and policy.finished != "retrain":
        if policy.finished == "check":
            changed = config_mismatch(cfg)
            if changed:
                raise ValueError(
                    f"{run_dir}: finished with another config ("
                    + "; ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in changed.items())
                    + "); use another --runs-dir or remove the run"
                )
        return finished_summary(run_dir)
    holder = RunLock.holder(run_dir)
    if holder is not None:
        raise RuntimeError(f"run folder {run_dir} is in use by another process ({holder}); wait for it to finish")
    interrupted = not finished and run_dir.exists() and latest_checkpoint(run_dir) is not None
    resume = "latest" if interrupted and policy.interrupted == "resume" else None
    if resume is None and run_dir.exists():
        if holds_nothing(run_dir):
            pass  # nothing was written (killed while starting): trained into as if absent
        elif not finished and not interrupted and policy.stale == "refuse":
            raise FileExistsError(f"{run_dir} holds an unfinished run without checkpoint; remove it to retrain")
        else:
            shutil.rmtree(run_dir)
    began, cpu_began = time.perf_counter(), time.process_time()
    result = train(cfg, resume=resume)
    return RunSummary(
        result.steps,
        result.final_loss,
        time.perf_counter() - began,
        result.items_per_s,
        reused=False,
        cpu_s=time.process_time() - cpu_began,
    )


__all__ = ["POLICIES", "RunSummary", "TrainPolicy", "config_mismatch", "ensure_trained", "finished_summary"]
