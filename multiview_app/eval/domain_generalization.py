"""Domain generalization of run folders: leave-one-domain-out evaluation (M3G Sec. 4.2, Table 2, Fig. 2)
with DomainBed's model selection. This module trains nothing: the runs it scores (pretraining runs and
their ERM baselines) are trained by :mod:`multiview_app.experiments.domains`, which is also the command
``mvapp experiment domain-generalization`` (the old spelling ``mvapp eval domain-generalization`` forwards
to it).

For a run pretrained on the seen domains of the ``domainnet`` adapter (``data.options.holdout``), the
evaluator extracts frozen encoder features (eval views = resize + center crop) and hands them to the
``leave-one-domain-out`` protocol (:mod:`.protocols.domains`, which holds the maths):

- **model selection: training-domain validation** (reported): the checkpoint (every saved
  ``checkpoints/step_*`` and the final weights) and the probe's ``C`` with the best accuracy on the
  seen domains' validation share (``data.options.val_fraction``, held out of pretraining);
- **5 vs 1** at the chosen pair: one linear classifier on every seen domain's train split, accuracy on
  the held-out domain's test split; **1 vs 1**: one classifier per seen domain (a row of Fig. 2);
- **test-domain validation ("oracle")**: the same choice made on the held-out domain's validation share,
  an upper bound reported separately; the **target-labelled probe** (a classifier trained on the held-out
  domain's own train labels) is a reference for how readable that domain is, not a selection method.

Encoders (rows of the table): the trained one, its random init (``init.safetensors``) and, when its run
folder is given, a supervised ERM baseline (:mod:`.erm`: the same backbone trained by the Trainer with the
``supervised_ce`` head, its own step budget, its checkpoint chosen by the same training-domain
validation). The linear classifier is the shared standardized multinomial logistic regression
(:func:`.probe.fit_linear_classifier`). This module evaluates (as DomainBed's ``model_selection``); the
reports of the results, the pooled table of several runs (DomainBed layout), Fig.-2-like heatmaps and the
summary JSON, are :mod:`.domain_report`'s (as DomainBed's ``collect_results``).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from ..train.run_io import atomic_write_json, load_run
from .domain_report import KIND, plot_one_vs_one_row
from .erm import erm_run_summary
from .features import combine_views, extract_features
from .protocols import get_protocol
from .protocols.domains import DEFAULT_CS, TEST_DOMAIN, TRAINING_DOMAIN
from .protocols.probe import fit_linear_classifier


def domain_features(
    model: Any, adapter: Any, policy: Any, domain: str, split: str, batch_size: int, device: str, progress: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Frozen features ``(N, f)`` (mean over eval views) and labels ``(N,)`` of one domain split."""
    dataset = adapter.domain_split(domain, split)
    feats, labels, _ = extract_features(
        model, adapter, policy, f"{domain}/{split}", batch_size, device, progress, dataset=dataset
    )
    if domain == getattr(adapter, "adapt", None):  # evaluation: the only place the target's labels are read
        labels = adapter.target_labels(split).numpy()
    return combine_views(feats, "mean"), labels


class CandidateFeatures:
    """``features(candidate, domain, split) -> (x (N, f), y (N,))`` of one encoder (the protocol's
    feature source): the candidate's weights are loaded by ``load(candidate)`` on first use, features
    are extracted once per (candidate, domain, split) and kept."""

    def __init__(
        self, load: Callable[[str], Any], adapter: Any, policy: Any, batch_size: int, device: str, progress: bool
    ) -> None:
        self.load, self.adapter, self.policy = load, adapter, policy
        self.batch_size, self.device, self.progress = batch_size, device, progress
        self.models: dict[str, Any] = {}
        self.cache: dict[tuple[str, str, str], tuple[np.ndarray, np.ndarray]] = {}

    def __call__(self, candidate: str, domain: str, split: str) -> tuple[np.ndarray, np.ndarray]:
        key = (candidate, domain, split)
        if key not in self.cache:
            if candidate not in self.models:
                self.models[candidate] = self.load(candidate)
            self.cache[key] = domain_features(
                self.models[candidate],
                self.adapter,
                self.policy,
                domain,
                split,
                self.batch_size,
                self.device,
                self.progress,
            )
        return self.cache[key]

    def items(self) -> dict[str, int]:
        """Items per ``"<domain>/<split>"`` read so far."""
        return {f"{d}/{s}": int(len(y)) for (_, d, s), (_, y) in self.cache.items()}


def candidates(run_dir: str | Path) -> list[str]:
    """Selection candidates of a run: its saved checkpoints on the ``train.checkpoint_every`` grid
    (``step_<N>``, oldest first) then ``final``. The checkpoint an interrupted run writes when it is
    stopped (at whatever step) is not one: a run stopped and resumed has the candidates of an
    uninterrupted one, nor is the final checkpoint (the final weights, candidate ``final``)."""
    from ..train.checkpoint import list_checkpoints
    from ..train.run_io import final_model_step, load_run_config

    every = int(load_run_config(run_dir).train.checkpoint_every or 0)
    final = final_model_step(run_dir)
    steps = [int(p.name.removeprefix("step_")) for p in list_checkpoints(run_dir)]
    return [f"step_{s}" for s in steps if every > 0 and s % every == 0 and s != final] + ["final"]


def thin_candidates(names: list[str], most: int | None) -> list[str]:
    """At most ``most`` of ``names`` (oldest first, ``final`` last): every m-th counted back from the
    final weights, m = ceil(len / most), so the spacing stays even and ``final`` is always kept."""
    if most is None or len(names) <= most:
        return list(names)
    stride = -(-len(names) // most)
    return names[::-1][::stride][::-1]


def candidate_step(run_dir: str | Path, candidate: str) -> int:
    """Optimizer step of a candidate (``init``: 0; ``final``: the run's last logged step)."""
    if candidate == "init":
        return 0
    if candidate.startswith("step_"):
        return int(candidate.removeprefix("step_"))
    rows = (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    return int(json.loads(rows[-1])["step"]) if rows else 0


def encoder_digest(weights: str | Path) -> str:
    """Digest of the encoder tensors of a safetensors file (16 hex digits): equal digests = the same
    backbone whatever projector / predictor a run adds (references shared by runs are counted once)."""
    from safetensors.torch import load_file

    state = load_file(str(weights))
    digest = hashlib.sha256()
    for name in sorted(k for k in state if k.startswith("encoders.")):
        digest.update(name.encode())
        digest.update(state[name].contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


#: bump when the protocol's outputs for the same features change (invalidates cached reference scores)
REFERENCE_CACHE_VERSION = 1


def candidate_encoder_digest(run_dir: str | Path, candidate: str) -> str:
    """sha256 (16 hex digits) of the encoder tensors (names, shapes, bytes) of one selection candidate's
    weight file (``init``, ``final`` or a ``step_N`` checkpoint, whose keys carry the trainer's
    ``model.`` prefix): equal digests = the same encoder, so the same frozen features."""
    from safetensors.torch import load_file

    from ..train.run_io import CHECKPOINT_PREFIX, resolve_weights

    state = load_file(str(resolve_weights(run_dir, candidate)))
    state = {k.removeprefix(CHECKPOINT_PREFIX): v for k, v in state.items()}
    digest = hashlib.sha256()
    for name in sorted(k for k in state if k.startswith("encoders.")):
        digest.update(f"{name} {tuple(state[name].shape)} {state[name].dtype}".encode())
        digest.update(state[name].contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def reference_key(
    folder: Path, names: list[str], cfg: Any, adapter: Any, target: str, Cs: tuple[float, ...], batch_size: int
) -> dict[str, Any]:
    """What a reference encoder's protocol output (random init, ERM) depends on: its candidates' encoder
    digests and architecture, the images (root, domains, splits, load size), the eval views and the
    probe grid. Not the protocol: under adaptation the target's images and labels are the same as when
    it is held out, so runs of both protocols, and of every loss, share one result per key."""
    spec_path = folder / "model.json"
    spec = json.loads(spec_path.read_text()) if spec_path.is_file() else None
    options = adapter.options
    return {
        "version": REFERENCE_CACHE_VERSION,
        "candidates": {c: candidate_encoder_digest(folder, c) for c in names},
        "encoders": (spec or {}).get("encoders", cfg.model.encoders),
        "data": {
            "root": str(Path(options.root).resolve()),
            "seen": list(adapter.seen_domains),
            "target": target,
            "val_fraction": options.val_fraction,
            "split_seed": options.split_seed,
            "test_fraction": options.test_fraction,
            "load_size": options.load_size,
            "classes": list(adapter.class_names),
        },
        "eval_views": {"policy": cfg.views.policy, "image_size": cfg.views.options.get("image_size")},
        "Cs": [float(c) for c in Cs],
        "batch_size": int(batch_size),
    }


def cached_reference(
    cache_dir: Path | None,
    encoder: str,
    key: dict[str, Any],
    compute: Callable[[], tuple[dict[str, Any], dict[str, int]]],
) -> tuple[dict[str, Any], dict[str, int]]:
    """``(scores, items)`` of a reference encoder from ``<cache_dir>/<encoder>_<digest of key>.json`` when
    that holds the same ``key``, else ``compute()`` (written there when ``cache_dir`` is given)."""
    if cache_dir is None:
        return compute()
    text = json.dumps(key, sort_keys=True)
    path = Path(cache_dir) / f"{encoder}_{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"
    if path.is_file():
        stored = json.loads(path.read_text())
        if json.dumps(stored.get("key"), sort_keys=True) == text:
            return stored["scores"], stored["items"]
    scores, items = compute()
    atomic_write_json(path, {"key": key, "scores": scores, "items": items})
    return scores, items


def domain_target(run_dir: str | Path, adapter: Any) -> tuple[str, str]:
    """``(target domain, protocol)`` of a run whose data ``adapter`` is built from its config:
    ``generalization`` (``data.options.holdout``) or ``adaptation`` (``data.options.adapt``); ValueError
    naming ``run_dir`` when neither or both are set, or when there is no training-domain validation share."""
    holdout, adapt = getattr(adapter, "holdout", None), getattr(adapter, "adapt", None)
    if holdout is None and adapt is None:
        raise ValueError(
            f"{run_dir}: neither data.options.holdout nor data.options.adapt is set; the domain evaluator needs a "
            "run pretrained with one domain held out (generalization) or unlabelled (adaptation)"
        )
    if holdout is not None and adapt is not None:
        raise ValueError(
            f"{run_dir}: both data.options.holdout ({holdout}) and adapt ({adapt}) are set; "
            "the evaluator scores one target domain per run"
        )
    if "val" not in getattr(adapter, "domain_splits", ()):
        raise ValueError(
            f"{run_dir}: data.options.val_fraction is not set in its config.yaml, so the run was pretrained on all "
            "of each seen domain's train split and there is no training-domain validation share to select on; "
            "pretrain again with data.options.val_fraction=0.2 (configs/base_domains_digits.yaml sets it)"
        )
    return (holdout, "generalization") if holdout else (adapt, "adaptation")


def evaluate_run(
    run_dir: str | Path,
    *,
    erm_run: str | Path | None = None,
    erm_train_s: tuple[float, float] = (0.0, 0.0),
    C: float | None = None,
    batch_size: int | None = None,
    device: str = "cpu",
    progress: bool = True,
    max_candidates: int | None = None,
    reference_cache: str | Path | None = None,
) -> dict[str, Any]:
    """Evaluate one run folder (module docstring); write ``eval/domain_generalization.json`` and
    ``plots/one_vs_one.png``; return the result. ``erm_run``: the run's finished ERM baseline
    (:func:`.erm.erm_dir` of its config; ``None``: no ``erm`` row); ``erm_train_s``: wall and CPU seconds
    the caller just spent training it (counted in the result's ``wall_s``, ``cpu_s`` and
    ``erm_and_setup_s``). ``C``: a fixed probe strength instead of selecting it from :data:`DEFAULT_CS`.
    ``max_candidates``: select among at most that many evenly spaced saved checkpoints per encoder
    (:func:`thin_candidates`; ``None`` = every one). ``reference_cache``: a folder where the reference
    encoders' (random init, ERM) protocol outputs are kept by :func:`reference_key` and reused by the
    next run that shares them (the other losses and protocols of a target and seed): the same numbers,
    computed once. Torch threads are the caller's (:func:`multiview_app.threads.configure_torch_threads`)."""
    run_dir = Path(run_dir)
    start = time.perf_counter() - erm_train_s[0]
    cpu_start = time.process_time() - erm_train_s[1]
    cfg, _ = load_run(run_dir, "init")
    setting, protocol = _setting(run_dir, cfg, C, batch_size, device, progress)
    sources: dict[str, tuple[Path, list[str]]] = {
        "random_init": (run_dir, ["init"]),
        "trained": (run_dir, thin_candidates(candidates(run_dir), max_candidates)),
    }
    erm_summary = None
    if erm_run is not None:
        erm_run = Path(erm_run)
        erm_summary = erm_run_summary(cfg, erm_run)
        sources["erm"] = (erm_run, thin_candidates(candidates(erm_run), max_candidates))
    erm_s = time.perf_counter() - start
    results, items = _score_encoders(setting, sources, None if reference_cache is None else Path(reference_cache))
    if erm_summary is not None:
        erm_summary["selected_step"] = results["erm"]["selected"]["step"]
    result = {
        **_describe_run(run_dir, setting, protocol, sources),
        "items": items,
        "results": results,
        "erm": erm_summary and {k: v for k, v in erm_summary.items() if k != "key"},
        "reference_ids": _reference_ids(run_dir, erm_summary),
        "wall_s": time.perf_counter() - start,
        "cpu_s": time.process_time() - cpu_start,  # this process's CPU time (not DataLoader workers)
        "erm_and_setup_s": erm_s,
    }
    atomic_write_json(run_dir / "eval" / f"{KIND}.json", result)
    plot_one_vs_one_row(result, run_dir / "plots" / "one_vs_one.png")
    return result


@dataclass(frozen=True)
class _Setting:
    """What every encoder of one run is scored with: the run's config, its ``domainnet`` adapter and view
    policy, the held-out domain, the probe strengths ``Cs`` and the feature extraction's batch and device."""

    cfg: Any
    adapter: Any
    policy: Any
    target: str
    Cs: tuple[float, ...]
    batch_size: int
    device: str
    progress: bool


def _setting(
    run_dir: Path, cfg: Any, C: float | None, batch_size: int | None, device: str, progress: bool
) -> tuple[_Setting, str]:
    """The run's scoring setting (its adapter and view policy built from ``cfg``) and its protocol
    (:func:`domain_target`)."""
    from ..data.adapters import build_adapter
    from ..data.views import build_view_policy

    adapter = build_adapter(cfg.data.adapter, cfg.data.options)
    target, protocol = domain_target(run_dir, adapter)
    setting = _Setting(
        cfg=cfg,
        adapter=adapter,
        policy=build_view_policy(cfg.views.policy, cfg.views.k, cfg.views.options, adapter),
        target=target,
        Cs=DEFAULT_CS if C is None else (float(C),),
        batch_size=batch_size or cfg.eval.batch_size,
        device=device,
        progress=progress,
    )
    return setting, protocol


def _score_encoders(
    setting: _Setting, sources: dict[str, tuple[Path, list[str]]], reference_cache: Path | None
) -> tuple[dict[str, Any], dict[str, int]]:
    """The leave-one-domain-out protocol's output per encoder of ``sources`` (``{row: (run folder, candidate
    checkpoints)}``), each selection's step added, and the items read per domain split. Reference rows
    (every row but ``trained``) are kept in and reused from ``reference_cache`` when given."""
    leave_one_domain_out = get_protocol("leave-one-domain-out")
    seen = list(setting.adapter.seen_domains)
    results: dict[str, Any] = {}
    items: dict[str, int] = {}
    for name, (folder, names) in sources.items():

        def compute(folder: Path = folder, names: list[str] = names) -> tuple[dict[str, Any], dict[str, int]]:
            features = CandidateFeatures(
                lambda c: load_run(folder, c)[1],
                setting.adapter,
                setting.policy,
                setting.batch_size,
                setting.device,
                setting.progress,
            )
            scores = leave_one_domain_out(
                features=features, candidates=names, seen=seen, target=setting.target, Cs=setting.Cs
            )
            for chosen in (scores["selected"], scores["oracle_selection"]["selected"]):
                chosen["step"] = candidate_step(folder, chosen["candidate"])
            return scores, features.items()

        if name == "trained" or reference_cache is None:
            results[name], read = compute()
        else:
            key = reference_key(
                folder, names, setting.cfg, setting.adapter, setting.target, setting.Cs, setting.batch_size
            )
            results[name], read = cached_reference(reference_cache, name, key, compute)
        items.update(read)
    return results, items


def _describe_run(
    run_dir: Path, setting: _Setting, protocol: str, sources: dict[str, tuple[Path, list[str]]]
) -> dict[str, Any]:
    """The result's leading fields: which run (loss, pairing, seed, steps), which held-out domain and
    protocol, and how checkpoints and the probe were selected."""
    cfg = setting.cfg
    return {
        "evaluator": "domain-generalization",
        "run": str(run_dir),
        "loss": cfg.loss.name,
        "pairing": cfg.data.options.get("pairing", "label"),
        "seed": cfg.train.seed,
        "pretrain_steps": cfg.train.max_steps,
        "holdout": setting.target,
        "protocol": protocol,
        "adapt_views": cfg.data.options.get("adapt_views", "augment") if protocol == "adaptation" else None,
        "seen": list(setting.adapter.seen_domains),
        "model_selection": TRAINING_DOMAIN,
        "oracle_selection": TEST_DOMAIN,
        "selection_candidates": {name: names for name, (_, names) in sources.items()},
        "Cs": list(setting.Cs),
        "val_fraction": cfg.data.options.get("val_fraction"),
        "classifier": "standardized multinomial logistic regression (lbfgs, L2 C chosen with the checkpoint) on "
        "frozen encoder features",
    }


def _reference_ids(run_dir: Path, erm_summary: dict[str, Any] | None) -> dict[str, str]:
    """Which backbone each reference row scored: equal ids are the same model (counted once when pooling)."""
    ids = {"random_init": encoder_digest(run_dir / "init.safetensors")}
    if erm_summary:
        ids["erm"] = hashlib.sha1(json.dumps(erm_summary["key"], sort_keys=True).encode()).hexdigest()[:16]
    return ids


def domain_shift_matrix(
    model: Any,
    adapter: Any,
    policy: Any,
    *,
    C: float = 1.0,
    batch_size: int = 512,
    device: str = "cpu",
    progress: bool = False,
) -> dict[str, dict[str, float]]:
    """``matrix[train domain][test domain]``: accuracy of a probe fitted on one domain's train split and
    tested on another's test split (diagonal: in-domain), for every domain of ``adapter``. With a
    random-init encoder it shows how large the domain shift of the data itself is."""
    domains = list(adapter.domains)
    features = {
        f"{d}/{s}": domain_features(model, adapter, policy, d, s, batch_size, device, progress)
        for d in domains
        for s in ("train", "test")
    }
    matrix: dict[str, dict[str, float]] = {}
    with threadpool_limits(1):
        for source in domains:
            clf = fit_linear_classifier(*features[f"{source}/train"], C=C)
            matrix[source] = {
                target: float((clf.predict(features[f"{target}/test"][0]) == features[f"{target}/test"][1]).mean())
                for target in domains
            }
    return matrix


__all__ = [
    "CandidateFeatures",
    "cached_reference",
    "candidate_encoder_digest",
    "domain_shift_matrix",
    "domain_target",
    "evaluate_run",
    "reference_key",
]
