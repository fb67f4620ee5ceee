"""Domain generalization as an experiment: which runs to train (one per target domain, seed and protocol),
training them and their ERM baselines unless done, and evaluating each run folder with
:func:`multiview_app.eval.domain_generalization.evaluate_run` (which trains nothing).

Every training here goes through :func:`~multiview_app.experiments.training.ensure_trained` under
:data:`TRAIN_POLICY` (``resume``): a finished run is reused as it is (its saved config is not compared),
an interrupted one resumes from its latest checkpoint (the trainer refuses a changed config there), and a
folder with neither is refused, never deleted. Evaluations already written are reused, so a sweep resumes
after an interruption. ``mvapp experiment domain-generalization`` (:mod:`.cli`) is the command.
"""

from __future__ import annotations

import contextlib
import io
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..config import Config, load_config
from ..eval.domain_generalization import domain_target, evaluate_run
from ..eval.domain_report import KIND
from ..eval.erm import DEFAULT_STEPS, erm_config, erm_run_summary
from ..train.run_io import atomic_write_json, load_run_config
from .training import ensure_trained

#: the training policy of every DG run (pretraining and ERM): reuse finished, resume interrupted, refuse stale
TRAIN_POLICY = "resume"
#: the command option whose value sets the evaluation's torch threads (named in the thread header)
THREADS_OPTION = "--threads"
#: sub-folder of a sweep's output folder where the reference encoders' (random init, ERM) protocol outputs
#: are kept and shared by the runs of every loss and protocol of one target and seed
REFERENCE_CACHE = "reference_scores"
#: evaluation protocol -> the adapter option that names its target domain
PROTOCOL_OPTION = {"generalization": "holdout", "adaptation": "adapt"}


@contextlib.contextmanager
def _quiet(progress: bool) -> Iterator[None]:
    """The block's stderr (the trainer's progress bar) is dropped unless ``progress``."""
    with contextlib.nullcontext() if progress else contextlib.redirect_stderr(io.StringIO()):
        yield


def ensure_pretrained(cfg: Config, progress: bool = True) -> tuple[float | None, float | None]:
    """:func:`ensure_trained` ``(cfg, TRAIN_POLICY)``; returns (wall s, CPU s) of the training, ``(None,
    None)`` when the run had finished before (the results' ``pretrain_s`` / ``pretrain_cpu_s``);
    ``progress=False`` hides the progress bar (stderr)."""
    with _quiet(progress):
        summary = ensure_trained(cfg, TRAIN_POLICY)
    return (None, None) if summary.reused else (summary.train_s, summary.cpu_s)


def train_erm(
    cfg: Config, adapter: Any, cache_dir: str | Path, *, steps: int = DEFAULT_STEPS, progress: bool = True
) -> tuple[Path, dict[str, Any]]:
    """The ERM baseline of the pretraining config ``cfg`` (:func:`multiview_app.eval.erm.erm_config`: a
    ``supervised_ce`` run in ``cache_dir``) trained unless done; returns its run folder and its summary
    (``steps``, ``final_loss``, ``train_accuracy`` of the last logged steps, ``batch_size``, ``k``, ``key``)."""
    if steps is None or int(steps) < 1:
        raise ValueError(f"the ERM baseline needs a positive step budget, got {steps}")
    erm_cfg = erm_config(cfg, adapter, cache_dir, steps)
    ensure_pretrained(erm_cfg, progress=progress)
    return erm_cfg.run_dir, erm_run_summary(cfg, erm_cfg.run_dir)


def evaluate_with_erm(
    run_dir: str | Path,
    *,
    erm: bool = True,
    erm_steps: int | None = None,
    erm_cache: str | Path | None = None,
    C: float | None = None,
    batch_size: int | None = None,
    device: str = "cpu",
    progress: bool = True,
    max_candidates: int | None = None,
    threads: int | None = None,
    reference_cache: str | Path | None = None,
) -> dict[str, Any]:
    """:func:`~multiview_app.eval.domain_generalization.evaluate_run` of a finished run folder, its ERM
    baseline (``erm``; budget ``erm_steps``, default :data:`~multiview_app.eval.erm.DEFAULT_STEPS`) trained
    unless done in ``erm_cache`` (default ``<run>/eval``) first, its training time counted in the result.
    ``threads``: torch threads of the evaluation, applied after the ERM training (which uses its config's
    ``train.num_threads``) by :func:`multiview_app.threads.configure_torch_threads` with the precedence of
    every entry point (``MVAPP_NUM_THREADS`` first); process-wide, not restored; ``None``: unchanged.
    ``reference_cache``: folder of the reference encoders' cached protocol outputs (see ``evaluate_run``)."""
    from ..data.adapters import build_adapter
    from ..threads import configure_torch_threads

    run_dir = Path(run_dir)
    erm_run, spent = None, (0.0, 0.0)
    if erm:
        began, cpu_began = time.perf_counter(), time.process_time()
        cfg = load_run_config(run_dir)
        adapter = build_adapter(cfg.data.adapter, cfg.data.options)
        domain_target(run_dir, adapter)  # a run the evaluator refuses trains no ERM baseline first
        erm_run, _ = train_erm(
            cfg, adapter, erm_cache or run_dir / "eval", steps=erm_steps or DEFAULT_STEPS, progress=progress
        )
        spent = (time.perf_counter() - began, time.process_time() - cpu_began)
    if threads is not None:
        configure_torch_threads(threads, report=None, setting_name=THREADS_OPTION)
    return evaluate_run(
        run_dir,
        erm_run=erm_run,
        erm_train_s=spent,
        C=C,
        batch_size=batch_size,
        device=device,
        progress=progress,
        max_candidates=max_candidates,
        reference_cache=reference_cache,
    )


def run_name(base: Config, holdout: str, seed: int, protocol: str) -> str:
    """Run folder name: ``<loss>[_labelfree]_<target>[_adapt|_adaptnn]_s<seed>``."""
    options = base.data.options
    free = "_labelfree" if options.get("pairing") == "none" else ""
    adapt_tag = "_adaptnn" if options.get("adapt_views") == "nearest" else "_adapt"
    return f"{base.loss.name}{free}_{holdout}{adapt_tag if protocol == 'adaptation' else ''}_s{seed}"


def run_config(
    config: str | Path,
    out_dir: str | Path,
    holdout: str,
    seed: int,
    protocol: str,
    overrides: list[str] | tuple[str, ...] = (),
    suffix: str = "",
) -> Config:
    """The pretraining config of one (target domain, seed, protocol) run under ``out_dir`` (``suffix``
    appended to the run name: runs of the same loss that differ by ``overrides``)."""
    if protocol not in PROTOCOL_OPTION:
        raise ValueError(f"unknown protocol {protocol}; valid: {', '.join(PROTOCOL_OPTION)}")
    base = load_config(config, list(overrides))
    target = [
        f"data.options.{key}={holdout if key == PROTOCOL_OPTION[protocol] else 'null'}"
        for key in PROTOCOL_OPTION.values()
    ]
    return load_config(
        config,
        [*overrides, *target, f"train.seed={seed}", f"output.runs_dir={out_dir}", "eval.linear_probe=false"],
        name=run_name(base, holdout, seed, protocol) + suffix,
    )


def all_domains(config: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> list[str]:
    """Every domain of the config's data (``--holdout all``)."""
    from ..data.adapters import build_adapter

    base = load_config(config, list(overrides))
    options = {k: v for k, v in base.data.options.items() if k not in ("holdout", "adapt")}
    return list(build_adapter(base.data.adapter, options).domains)


def train_and_evaluate(
    config: str | Path,
    out_dir: str | Path,
    holdouts: list[str] | str,
    seeds: list[int],
    overrides: list[str] | tuple[str, ...] = (),
    *,
    protocols: tuple[str, ...] = ("generalization",),
    C: float | None = None,
    erm: bool = True,
    erm_steps: int | None = None,
    device: str = "cpu",
    progress: bool = True,
    threads: int | None = None,
    evaluate: bool = True,
) -> list[dict[str, Any]]:
    """One pretraining run per (target domain, seed, protocol) under ``out_dir`` (:func:`run_config`),
    trained unless done (:func:`ensure_pretrained`), then :func:`evaluate_with_erm` on each (ERM runs
    cached in ``out_dir/erm``); evaluations already written are reused. ``generalization``: the target is
    held out (``data.options.holdout``); ``adaptation``: its train images join pretraining unlabelled
    (``data.options.adapt``). ``holdouts="all"`` = every domain of the data. ``threads``: torch threads of
    each evaluation (see :func:`evaluate_with_erm`). ``evaluate=False``: pretrain only (returns
    no results)."""
    out_dir = Path(out_dir)
    if isinstance(holdouts, str) and holdouts == "all":
        holdouts = all_domains(config, overrides)
    unknown = [p for p in protocols if p not in PROTOCOL_OPTION]
    if unknown:
        raise ValueError(f"unknown protocol(s) {', '.join(unknown)}; valid: {', '.join(PROTOCOL_OPTION)}")
    results = []
    for holdout, seed, protocol in [(h, s, p) for h in holdouts for p in protocols for s in seeds]:
        cfg = run_config(config, out_dir, holdout, seed, protocol, overrides)
        done = cfg.run_dir / "eval" / f"{KIND}.json"
        if evaluate and done.is_file():
            results.append(json.loads(done.read_text()))
            continue
        pretrain_s, pretrain_cpu_s = ensure_pretrained(cfg, progress=progress)
        if not evaluate:
            continue
        result = evaluate_with_erm(
            cfg.run_dir,
            C=C,
            erm=erm,
            erm_steps=erm_steps,
            erm_cache=out_dir / "erm",
            device=device,
            progress=progress,
            threads=threads,
            reference_cache=out_dir / REFERENCE_CACHE,
        )
        result["pretrain_s"] = pretrain_s  # None when the run had been trained before
        result["pretrain_cpu_s"] = pretrain_cpu_s
        atomic_write_json(done, result)
        results.append(result)
    return results


__all__ = [
    "PROTOCOL_OPTION",
    "REFERENCE_CACHE",
    "TRAIN_POLICY",
    "all_domains",
    "ensure_pretrained",
    "evaluate_with_erm",
    "run_config",
    "run_name",
    "train_and_evaluate",
    "train_erm",
]
