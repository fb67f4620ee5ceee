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
(:func:`.probe.fit_linear_classifier`). Several runs' results pool into one table (DomainBed layout: rows =
algorithms, columns = held-out domains + Avg, mean +- std over distinct runs), Fig.-2-like heatmaps and a
JSON (:func:`write_summary`).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from ..train.run_io import atomic_write_json, atomic_write_text, load_run
from .erm import erm_run_summary
from .features import combine_views, extract_features
from .protocols import get_protocol
from .protocols.domains import DEFAULT_CS, TEST_DOMAIN, TRAINING_DOMAIN
from .protocols.probe import fit_linear_classifier, mean_std
from .protocols.stats import paired_summary

KIND = "domain_generalization"
ENCODERS = ("random_init", "erm", "trained")
#: pooled scores of a run's encoder: 5 vs 1 under training-domain validation (the result), under
#: test-domain validation (oracle upper bound), and the target-labelled probe (a reference)
METRICS = ("five_vs_one", "five_vs_one_oracle", "target_labelled_probe")
METRIC_TITLES = {
    "five_vs_one": f"Seen domains -> held-out domain (5 vs 1), model selection: {TRAINING_DOMAIN}",
    "five_vs_one_oracle": f"Seen domains -> held-out domain (5 vs 1), model selection: {TEST_DOMAIN}",
    "target_labelled_probe": "Target-labelled probe (a probe trained on the held-out domain's own train labels: "
    "how linearly readable that domain is; not a generalization result), checkpoint and "
    f"C chosen by {TRAINING_DOMAIN}",
}


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
    from ..data.adapters import build_adapter
    from ..data.views import build_view_policy

    run_dir = Path(run_dir)
    start = time.perf_counter() - erm_train_s[0]
    cpu_start = time.process_time() - erm_train_s[1]
    cfg, _ = load_run(run_dir, "init")
    adapter = build_adapter(cfg.data.adapter, cfg.data.options)
    target, protocol = domain_target(run_dir, adapter)
    policy = build_view_policy(cfg.views.policy, cfg.views.k, cfg.views.options, adapter)
    seen = list(adapter.seen_domains)
    batch_size = batch_size or cfg.eval.batch_size
    Cs = DEFAULT_CS if C is None else (float(C),)

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
    leave_one_domain_out = get_protocol("leave-one-domain-out")
    results: dict[str, Any] = {}
    items: dict[str, int] = {}
    for name, (folder, names) in sources.items():

        def compute(folder: Path = folder, names: list[str] = names) -> tuple[dict[str, Any], dict[str, int]]:
            features = CandidateFeatures(
                lambda c: load_run(folder, c)[1], adapter, policy, batch_size, device, progress
            )
            scores = leave_one_domain_out(features=features, candidates=names, seen=seen, target=target, Cs=Cs)
            for chosen in (scores["selected"], scores["oracle_selection"]["selected"]):
                chosen["step"] = candidate_step(folder, chosen["candidate"])
            return scores, features.items()

        if name == "trained" or reference_cache is None:
            results[name], read = compute()
        else:
            key = reference_key(folder, names, cfg, adapter, target, Cs, batch_size)
            results[name], read = cached_reference(Path(reference_cache), name, key, compute)
        items.update(read)
    if erm_summary is not None:
        erm_summary["selected_step"] = results["erm"]["selected"]["step"]
    result = {
        "evaluator": "domain-generalization",
        "run": str(run_dir),
        "loss": cfg.loss.name,
        "pairing": cfg.data.options.get("pairing", "label"),
        "seed": cfg.train.seed,
        "pretrain_steps": cfg.train.max_steps,
        "holdout": target,
        "protocol": protocol,
        "adapt_views": cfg.data.options.get("adapt_views", "augment") if protocol == "adaptation" else None,
        "seen": seen,
        "model_selection": TRAINING_DOMAIN,
        "oracle_selection": TEST_DOMAIN,
        "selection_candidates": {name: names for name, (_, names) in sources.items()},
        "Cs": list(Cs),
        "val_fraction": cfg.data.options.get("val_fraction"),
        "classifier": "standardized multinomial logistic regression (lbfgs, L2 C chosen with the checkpoint) on "
        "frozen encoder features",
        "items": items,
        "results": results,
        "erm": erm_summary and {k: v for k, v in erm_summary.items() if k != "key"},
        # which backbone each reference row scored: equal ids are the same model (counted once when pooling)
        "reference_ids": {
            "random_init": encoder_digest(run_dir / "init.safetensors"),
            **(
                {"erm": hashlib.sha1(json.dumps(erm_summary["key"], sort_keys=True).encode()).hexdigest()[:16]}
                if erm_summary
                else {}
            ),
        },
        "wall_s": time.perf_counter() - start,
        "cpu_s": time.process_time() - cpu_start,  # this process's CPU time (not DataLoader workers)
        "erm_and_setup_s": erm_s,
    }
    atomic_write_json(run_dir / "eval" / f"{KIND}.json", result)
    _plot_row(result, run_dir / "plots" / "one_vs_one.png")
    return result


def grouped_bars(
    groups: list[str],
    series: dict[str, list[float]],
    xlabel: str,
    ylabel: str,
    out: Path,
    zero_line: bool = False,
    errors: dict[str, list[float]] | None = None,
) -> Path:
    """Bar chart: one group of bars per entry of ``groups``, one bar per ``series`` name -> PNG
    (``errors``: optional error-bar half-lengths per series, same layout)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1.5 + 1.2 * len(groups), 3.2))
    width = 0.8 / max(1, len(series))
    for i, (name, values) in enumerate(series.items()):
        ax.bar(
            np.arange(len(groups)) + i * width,
            values,
            width,
            label=name,
            yerr=None if errors is None else errors.get(name),
            capsize=2 if errors else 0,
        )
    if zero_line:
        ax.axhline(0.0, color="black", linewidth=0.8)
    ax.set_xticks(np.arange(len(groups)) + 0.4 - width / 2, groups)
    ax.set_ylabel(ylabel)
    ax.set_xlabel(xlabel)
    ax.legend(fontsize=7)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _plot_row(result: dict[str, Any], out: Path) -> None:
    """1-vs-1 accuracies of every encoder (bars per training domain)."""
    seen = result["seen"]
    series = {name: [scores["one_vs_one"][d] for d in seen] for name, scores in result["results"].items()}
    grouped_bars(seen, series, "classifier trained on", f"accuracy on target '{result['holdout']}'", out)


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


# ------------------------------------------------------------------ several runs: table + heatmaps
#: table-row suffix of the adaptation protocol per ``data.options.adapt_views``
ADAPT_SUFFIX = {"augment": "+adapt", "nearest": "+adapt_nn"}
LABEL_FREE = " (label-free)"


def column_name(result: dict[str, Any]) -> str:
    """Table row of a run's trained encoder: the loss, ``<loss>+adapt`` for the adaptation protocol
    (target items as augmentation views), ``<loss>+adapt_nn`` (target views matched by nearest
    neighbour); `` (label-free)`` appended for ``pairing: none`` (k augmentation views of one image)."""
    name = result["loss"]
    if result.get("protocol") == "adaptation":
        name += ADAPT_SUFFIX[result.get("adapt_views", "augment")]
    return name + (LABEL_FREE if result.get("pairing") == "none" else "")


def views_description(column: str) -> str:
    """How the pretraining views of a table row were built (the tables' second column)."""
    if column == "random_init":
        return "none (initial weights)"
    if column == "erm":
        return "supervised: labelled images of the seen domains"
    views = (
        "label-free: k augmentations of one image"
        if column.endswith(LABEL_FREE)
        else "label-conditioned: one image of the item's class per seen domain"
    )
    if "+adapt_nn" in column:
        return views + " + the nearest unlabelled target image"
    return views + (" + unlabelled target images (k augmentations each)" if "+adapt" in column else "")


def reference_id(result: dict[str, Any], encoder: str) -> str:
    """Identity of the model behind a reference row (``random_init``, ``erm``) of one run's result: the
    init encoder's digest / the ERM run's key digest; results without ids fall back to the seed."""
    if encoder in result.get("reference_ids", {}):
        return str(result["reference_ids"][encoder])
    return f"seed {result['seed']}" if "seed" in result else f"run {result.get('run', id(result))}"


def metric_value(scores: dict[str, Any], metric: str) -> float:
    """One of :data:`METRICS` from an encoder's protocol output."""
    if metric == "five_vs_one_oracle":
        return float(scores["oracle_selection"]["five_vs_one"])
    return float(scores[metric])


def combine_results(results: list[dict[str, Any]], domains: list[str]) -> dict[str, Any]:
    """Aggregate per-run results (any losses, held-out domains, seeds) into mean +- std over distinct
    runs: a reference model (random init, ERM) that several runs share, e.g. the runs of every loss and
    both protocols of one seed, is counted once (:func:`reference_id`), so ``n`` is the number of models.

    Returns ``{metric: {column: {holdout: {mean, std, n, by_seed: {seed: value}}}}`` for every metric of
    :data:`METRICS`, plus ``"one_vs_one": {column: {train domain: {unseen domain: mean}}}``, where
    ``column`` is :func:`column_name` for the trained encoder and ``random_init`` / ``erm`` for the
    references (pooled over the runs of all losses).
    """
    pooled: dict[str, dict[str, dict[str, list[tuple[Any, Any]]]]] = {m: {} for m in (*METRICS, "one_vs_one")}
    counted: set[tuple[str, str, str]] = set()
    for result in results:
        for encoder, scores in result["results"].items():
            column = column_name(result) if encoder == "trained" else encoder
            if encoder != "trained":  # a reference model shared by several runs counts once per target
                identity = (column, result["holdout"], reference_id(result, encoder))
                if identity in counted:
                    continue
                counted.add(identity)
            for metric in METRICS:
                pooled[metric].setdefault(column, {}).setdefault(result["holdout"], []).append(
                    (result.get("seed"), metric_value(scores, metric))
                )
            pooled["one_vs_one"].setdefault(column, {}).setdefault(result["holdout"], []).append(
                (result.get("seed"), scores["one_vs_one"])
            )
    combined: dict[str, Any] = {metric: {} for metric in (*METRICS, "one_vs_one")}
    for metric in METRICS:
        for column, per_domain in pooled[metric].items():
            combined[metric][column] = {
                d: {**mean_std([v for _, v in cell]), "n": len(cell), "by_seed": {str(s): v for s, v in cell}}
                for d, cell in per_domain.items()
            }
    for column, per_domain in pooled["one_vs_one"].items():
        matrix: dict[str, dict[str, float]] = {}
        for unseen, rows in per_domain.items():
            for train_domain in domains:
                values = [r[train_domain] for _, r in rows if train_domain in r]
                if values:
                    matrix.setdefault(train_domain, {})[unseen] = float(np.mean(values))
        combined["one_vs_one"][column] = matrix
    return combined


def spread(cell: dict[str, float], sign: bool = False) -> str:
    """``{mean, std, n}`` (fractions) -> ``"mean ± std (n=N)"`` in points, or ``"mean (n=1)"`` for a single
    run (no spread to show); ``sign``: always print the sign of the mean."""
    mean = f"{100 * cell['mean']:+.1f}" if sign else f"{100 * cell['mean']:.1f}"
    n = cell.get("n")
    return f"{mean} (n=1)" if n == 1 else f"{mean} ± {100 * cell['std']:.1f}" + (f" (n={n})" if n else "")


def average_cell(per_domain: dict[str, dict[str, Any]], domains: list[str]) -> dict[str, Any] | None:
    """DomainBed's Avg column: per seed present for every domain of ``domains``, the mean over domains;
    then mean +- std over those seeds (``n`` = their number). ``None`` when a domain lacks the row or no
    seed covers them all."""
    if not domains or any(d not in per_domain for d in domains):
        return None
    seeds = set.intersection(*(set(per_domain[d].get("by_seed", {})) for d in domains))
    if not seeds:
        return None
    per_seed = [float(np.mean([per_domain[d]["by_seed"][s] for d in domains])) for s in sorted(seeds)]
    return {**mean_std(per_seed), "n": len(per_seed)}


def average_text(per_domain: dict[str, dict[str, Any]], domains: list[str], sign: bool = False) -> str:
    """The Avg cell of a table row: :func:`spread` of :func:`average_cell`, ``-`` when there is none."""
    avg = average_cell(per_domain, domains)
    return "-" if avg is None else spread(avg, sign=sign)


def pairs_ci_text(per_domain: dict[str, dict[str, Any]]) -> str:
    """The mean over every held-out domain x seed pair of the cells' ``by_seed`` differences and its 95 %
    bootstrap CI over those pairs (``eval.protocols.stats``, the units of a DG claim), in accuracy points: ``+5.0 [-10.0,
    +10.0]``; ``-`` without pairs."""
    units = {(d, s): 100.0 * v for d, cell in per_domain.items() for s, v in cell.get("by_seed", {}).items()}
    if not units:
        return "-"
    cell = paired_summary(units)
    return f"{cell['mean']:+.1f} [{cell['ci_low']:+.1f}, {cell['ci_high']:+.1f}]"


def won_lost(per_domain: dict[str, dict[str, Any]]) -> str:
    """``"W / L (P)"``: of the P paired differences in the cells' ``by_seed``, how many are above / below
    zero (ties count as neither)."""
    values = [v for cell in per_domain.values() for v in cell.get("by_seed", {}).values()]
    return f"{sum(v > 0 for v in values)} / {sum(v < 0 for v in values)} ({len(values)})"


def table_columns(combined: dict[str, Any], metric: str) -> list[str]:
    """Rows of a table in order: random init, ERM, then the trained encoders sorted."""
    rows = [c for c in ("random_init", "erm") if c in combined[metric]]
    return rows + sorted(c for c in combined[metric] if c not in ("random_init", "erm"))


def format_table(combined: dict[str, Any], domains: list[str], metric: str = "five_vs_one") -> str:
    """Markdown table in DomainBed's layout: rows = algorithms (random init, ERM, the losses) with how
    their pretraining views were built, columns = held-out domains then Avg; cells = accuracy % mean +-
    std over distinct runs with ``(n=...)``; the header names the model selection."""
    held_out = [d for d in domains if any(d in combined[metric][c] for c in combined[metric])]
    lines = [
        f"**{METRIC_TITLES[metric]}** (accuracy %, mean ± std over n distinct runs; n=1: no std)",
        "",
        "| algorithm | pretraining views | " + " | ".join(held_out) + " | Avg |",
        "|---|---|" + "---|" * (len(held_out) + 1),
    ]
    for column in table_columns(combined, metric):
        per_domain = combined[metric][column]
        cells = [spread(per_domain[d]) if d in per_domain else "-" for d in held_out]
        cells.append(average_text(per_domain, held_out))
        lines.append(f"| {column} | {views_description(column)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


#: the row the paired-differences tables subtract the others from (the M3G paper's method); its adaptation
#: rows (``m3g+adapt``, ``m3g+adapt_nn``) anchor the tables of their protocol
PAIRED_ANCHOR = "m3g"
REFERENCE_ROWS = ("random_init", "erm")


def protocol_tag(column: str) -> str:
    """The adaptation suffix of a table row (``+adapt``, ``+adapt_nn``), ``""`` for generalization rows."""
    return next((tag for tag in sorted(ADAPT_SUFFIX.values(), key=len, reverse=True) if tag in column), "")


def paired_differences(
    combined: dict[str, Any], metric: str = "five_vs_one", anchor: str = PAIRED_ANCHOR
) -> dict[str, dict[str, dict[str, Any]]]:
    """``anchor`` minus every other row of its protocol (:func:`protocol_tag`) and the reference rows
    (random init, ERM) in ``combined[metric]``, paired by (held-out domain, seed): the same target and
    seed, so the data split and the seed's noise cancel. ``{row: {domain: {mean, std, n, by_seed: {seed:
    difference}}}}`` over the seeds both rows have there (``n`` = pairs); rows without a common (domain,
    seed) are left out; ``{}`` when there is no ``anchor`` row. (Adaptation minus generalization of one
    loss is :func:`adaptation_gain`.)"""
    rows = combined[metric]
    if anchor not in rows:
        return {}
    differences: dict[str, dict[str, dict[str, Any]]] = {}
    for column in table_columns(combined, metric):
        if column == anchor or (column not in REFERENCE_ROWS and protocol_tag(column) != protocol_tag(anchor)):
            continue
        per_domain = {}
        for domain, cell in rows[anchor].items():
            other = rows[column].get(domain, {}).get("by_seed", {})
            diffs = {s: cell["by_seed"][s] - other[s] for s in sorted(set(cell["by_seed"]) & set(other))}
            if diffs:
                per_domain[domain] = {**mean_std(list(diffs.values())), "n": len(diffs), "by_seed": diffs}
        if per_domain:
            differences[column] = per_domain
    return differences


def paired_anchors(combined: dict[str, Any], metric: str = "five_vs_one") -> list[str]:
    """The anchors present: :data:`PAIRED_ANCHOR` and its adaptation rows."""
    names = [PAIRED_ANCHOR, *(PAIRED_ANCHOR + tag for tag in ADAPT_SUFFIX.values())]
    return [name for name in names if name in combined[metric]]


def format_paired(
    differences: dict[str, dict[str, dict[str, Any]]],
    domains: list[str],
    metric: str = "five_vs_one",
    anchor: str = PAIRED_ANCHOR,
) -> str:
    """Markdown in the tables' layout: rows = the compared rows, columns = held-out domains then Avg (per
    seed the mean over the domains, then mean +- std over seeds), cells = ``anchor`` minus the row in
    accuracy points; then the mean over the held-out domain x seed pairs with its 95 % bootstrap CI over the
    pairs (:func:`pairs_ci_text`, ``eval.protocols.stats``); the last column counts the pairs ``anchor`` won / lost."""
    held_out = [d for d in domains if any(d in per for per in differences.values())]
    lines = [
        f"**Paired differences {anchor} - row** ({METRIC_TITLES[metric]}; accuracy points, same held-out "
        "domain and seed; mean ± std over the n pairs, Avg over the seeds that cover every domain)",
        "",
        "| row | " + " | ".join(held_out) + f" | Avg | mean [95 % CI] over pairs | {anchor} ahead / behind (pairs) |",
        "|---|" + "---|" * (len(held_out) + 3),
    ]
    for column, per_domain in differences.items():
        cells = [spread(per_domain[d], sign=True) if d in per_domain else "-" for d in held_out]
        cells += [average_text(per_domain, held_out, sign=True), pairs_ci_text(per_domain), won_lost(per_domain)]
        lines.append(f"| {column} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def one_vs_one_figure(combined: dict[str, Any], domains: list[str]) -> Any:
    """Fig.-2-like 1-vs-1 figure (matplotlib ``Figure``): rows = classifier training domain, columns =
    unseen domain, value = mean accuracy. With one unseen domain a grouped bar chart (one group per
    training domain, one bar per table row); with several, one matrix per table row restricted to the
    domains that have values, with a colour bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = list(combined["one_vs_one"])
    unseen = [d for d in domains if any(d in row for m in combined["one_vs_one"].values() for row in m.values())]
    trainers = [d for d in domains if any(d in m for m in combined["one_vs_one"].values())]
    if len(unseen) == 1:
        target = unseen[0]
        fig, ax = plt.subplots(figsize=(1.5 + 1.2 * len(trainers), 3.4))
        width = 0.8 / max(1, len(columns))
        for i, column in enumerate(columns):
            values = [100 * combined["one_vs_one"][column].get(d, {}).get(target, np.nan) for d in trainers]
            ax.bar(np.arange(len(trainers)) + i * width, values, width, label=column)
        ax.set_xticks(np.arange(len(trainers)) + 0.4 - width / 2, trainers)
        ax.set_xlabel("classifier trained on (one seen domain)")
        ax.set_ylabel(f"accuracy % on unseen '{target}'")
        ax.set_title(f"1 vs 1: held-out domain {target}", fontsize=9)
        ax.legend(fontsize=7)
        fig.tight_layout()
        return fig
    fig, axes = plt.subplots(1, len(columns), figsize=(3.6 * len(columns) + 0.8, 3.4), squeeze=False)
    image = None
    for ax, column in zip(axes[0], columns):
        matrix = np.full((len(trainers), len(unseen)), np.nan)
        for i, row in enumerate(trainers):
            for j, col in enumerate(unseen):
                matrix[i, j] = combined["one_vs_one"][column].get(row, {}).get(col, np.nan)
        image = ax.imshow(100 * matrix, vmin=0.0, vmax=100.0, cmap="viridis")
        for i in range(len(trainers)):
            for j in range(len(unseen)):
                if not np.isnan(matrix[i, j]):
                    ax.text(
                        j,
                        i,
                        f"{100 * matrix[i, j]:.0f}",
                        ha="center",
                        va="center",
                        fontsize=7,
                        color="white" if matrix[i, j] < 0.6 else "black",
                    )
        ax.set_xticks(range(len(unseen)), unseen, rotation=60, fontsize=7)
        ax.set_yticks(range(len(trainers)), trainers, fontsize=7)
        ax.set_title(column, fontsize=9)
        ax.set_xlabel("unseen domain", fontsize=8)
    axes[0][0].set_ylabel("classifier trained on", fontsize=8)
    fig.tight_layout()
    fig.colorbar(image, ax=list(axes[0]), label="accuracy %", shrink=0.8)
    return fig


def plot_heatmaps(combined: dict[str, Any], domains: list[str], out: Path) -> Path:
    """:func:`one_vs_one_figure` -> PNG ``out``."""
    import matplotlib.pyplot as plt

    fig = one_vs_one_figure(combined, domains)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def adaptation_gain(results: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """Per-seed 5-vs-1 gain (training-domain validation) of adaptation over generalization, paired by
    (loss, pairing, target, seed).

    ``gain[<adaptation column>][target] = {"mean", "std", "n", "by_seed"}`` over the seeds that have both an
    adaptation run (column ``<loss>+adapt`` / ``<loss>+adapt_nn``) and a generalization run of the same
    loss; adaptation runs without that partner are left out (``n`` counts the pairs)."""

    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        return r["loss"], r.get("pairing", "label"), r["holdout"], r["seed"]

    base = {
        key(r): r["results"]["trained"]["five_vs_one"]
        for r in results
        if r.get("protocol", "generalization") == "generalization"
    }
    pairs: dict[str, dict[str, dict[str, float]]] = {}
    for r in results:
        if r.get("protocol") != "adaptation" or key(r) not in base:
            continue
        diff = r["results"]["trained"]["five_vs_one"] - base[key(r)]
        pairs.setdefault(column_name(r), {}).setdefault(r["holdout"], {})[str(r["seed"])] = diff
    return {
        column: {d: {**mean_std(list(v.values())), "n": len(v), "by_seed": v} for d, v in per.items()}
        for column, per in pairs.items()
    }


def format_gain(gain: dict[str, dict[str, dict[str, float]]]) -> str:
    """Markdown: rows = target domain, columns = adaptation column, cells = gain in accuracy points
    (mean +- std over the paired seeds, ``(n=<pairs>)``); then the Avg row (per seed the mean over the
    targets, mean +- std over the seeds that cover every target) and the pairs adaptation won / lost."""
    losses = sorted(gain)
    domains = sorted({d for per in gain.values() for d in per})
    lines = [
        f"**Gain of adaptation over generalization** (5 vs 1, model selection: {TRAINING_DOMAIN}; accuracy "
        "points, mean ± std over n seeds paired by seed)",
        "",
        "| target | " + " | ".join(losses) + " |",
        "|---" * (len(losses) + 1) + "|",
    ]
    for d in domains:
        cells = [spread(gain[l][d], sign=True) if d in gain[l] else "-" for l in losses]
        lines.append(f"| {d} | " + " | ".join(cells) + " |")
    lines.append("| Avg | " + " | ".join(average_text(gain[l], domains, sign=True) for l in losses) + " |")
    lines.append("| adaptation ahead / behind (pairs) | " + " | ".join(won_lost(gain[l]) for l in losses) + " |")
    return "\n".join(lines)


def plot_gain(gain: dict[str, dict[str, dict[str, float]]], out: Path) -> Path:
    """Bars: per target domain, the 5-vs-1 gain of adaptation over generalization (mean over paired
    seeds, error bar = std), one bar per adaptation column."""
    domains = sorted({d for per in gain.values() for d in per})
    series = {
        loss: [100 * gain[loss][d]["mean"] if d in gain[loss] else np.nan for d in domains] for loss in sorted(gain)
    }
    errors = {
        loss: [100 * gain[loss][d]["std"] if d in gain[loss] else np.nan for d in domains] for loss in sorted(gain)
    }
    return grouped_bars(
        domains, series, "target domain", "adaptation - generalization (points)", out, zero_line=True, errors=errors
    )


#: validation gain (accuracy, 0-1) of the budget's last checkpoint over the one before above which the ERM
#: paragraph says "still rising" (a longer budget may help); below it, a plateau
ERM_RISING = 0.01


def last_step_gains(results: list[dict[str, Any]]) -> dict[str, float]:
    """Per distinct ERM run chosen at its last checkpoint (``final``): its best training-domain validation
    accuracy there minus the best at the checkpoint before (over the probe's C grid)."""
    gains: dict[str, float] = {}
    for r in results:
        erm = r["results"].get("erm") if r.get("erm") else None
        if not erm or erm.get("selected", {}).get("candidate") != "final":
            continue
        best: dict[str, float] = {}
        for row in erm.get("grid", []):
            best[row["candidate"]] = max(best.get(row["candidate"], 0.0), row["val_accuracy"])
        earlier = [c for c in best if c != "final"]
        if earlier:
            previous = max(earlier, key=lambda c: int(c.rsplit("_", 1)[-1]) if c.rsplit("_", 1)[-1].isdigit() else -1)
            gains[reference_id(r, "erm")] = best["final"] - best[previous]
    return gains


def format_erm(results: list[dict[str, Any]]) -> str:
    """One paragraph on the ERM runs behind the ``erm`` row: own budget, selected steps, accuracy, and how
    much the runs chosen at the budget's last step still gained there."""
    erm_runs = {reference_id(r, "erm"): r["erm"] for r in results if r.get("erm")}
    if not erm_runs:
        return ""
    budgets = sorted({e["steps"] for e in erm_runs.values()})
    chosen = sorted(e["selected_step"] for e in erm_runs.values() if "selected_step" in e)
    accuracy = [e["train_accuracy"] for e in erm_runs.values()]
    pretrain = sorted({int(r["pretrain_steps"]) for r in results if r.get("pretrain_steps")})
    gains = last_step_gains(results)
    if gains:
        low, high = 100 * min(gains.values()), 100 * max(gains.values())
        verdict = (
            "validation still rising: a longer budget may help ERM"
            if max(gains.values()) > ERM_RISING
            else f"a plateau (at most {100 * ERM_RISING:g} point)"
        )
        convergence = (
            f"; {len(gains)} of {len(erm_runs)} chose the budget's last step, {low:+.1f} to {high:+.1f} "
            f"points of validation accuracy over the checkpoint before: {verdict}"
        )
    else:
        convergence = ""
    text = (
        f"ERM: {len(erm_runs)} model(s) trained by `mvapp train` (loss supervised_ce: linear head on the encoder "
        f"features) with their own budget of {'/'.join(map(str, budgets))} steps (not the pretraining runs' "
        f"train.max_steps); checkpoint chosen by {TRAINING_DOMAIN} at step(s) {', '.join(map(str, chosen))} "
        f"(steps to convergence{convergence}); "
        f"training accuracy at the end {100 * min(accuracy):.1f}-{100 * max(accuracy):.1f} % on the seen domains."
    )
    return text + (f" Pretraining budget: {'/'.join(map(str, pretrain))} steps." if pretrain else "")


def format_selected(results: list[dict[str, Any]]) -> str:
    """Which checkpoints / C training-domain validation chose, per table row."""
    chosen: dict[str, list[str]] = {}
    for r in results:
        for encoder, scores in r["results"].items():
            if encoder == "random_init":
                continue
            column = column_name(r) if encoder == "trained" else encoder
            sel = scores["selected"]
            chosen.setdefault(column, []).append(f"{r['holdout']}/s{r['seed']}: step {sel['step']}, C={sel['C']:g}")
    lines = [f"Chosen by {TRAINING_DOMAIN} (checkpoint step, probe C) per run:"]
    lines += [f"- {column}: " + "; ".join(sorted(set(v))) for column, v in sorted(chosen.items())]
    return "\n".join(lines)


def write_summary(results: list[dict[str, Any]], out_dir: str | Path, title: str = "") -> dict[str, Any]:
    """Every table (markdown), heatmaps (PNG) and JSON of ``results`` into ``out_dir``; ``summary["table"]``
    is the whole markdown text (the console prints it, so it shows every table the .md holds)."""
    out_dir = Path(out_dir)
    domains = sorted({r["holdout"] for r in results} | {d for r in results for d in r["seen"]})
    combined = combine_results(results, domains)
    heatmap = plot_heatmaps(combined, domains, out_dir / "plots" / "one_vs_one_heatmaps.png")
    parts = [title] if title else []
    parts += [format_table(combined, domains, metric) for metric in METRICS]
    paired = {anchor: paired_differences(combined, anchor=anchor) for anchor in paired_anchors(combined)}
    parts += [format_paired(diffs, domains, anchor=anchor) for anchor, diffs in paired.items() if diffs]
    gain = adaptation_gain(results)
    gain_plot = plot_gain(gain, out_dir / "plots" / "adaptation_gain.png") if gain else None
    if gain:
        parts.append(format_gain(gain))
    parts.append(format_selected(results))
    erm_text = format_erm(results)
    if erm_text:
        parts.append(erm_text)
    table = "\n\n".join(parts) + "\n"
    atomic_write_text(out_dir / f"{KIND}_table.md", table)
    summary = {
        "domains": domains,
        "model_selection": TRAINING_DOMAIN,
        "oracle_selection": TEST_DOMAIN,
        "combined": combined,
        "runs": results,
        "heatmaps": str(heatmap),
        "table": table,
        "adaptation_gain": gain,
        "gain_plot": gain_plot and str(gain_plot),
        "paired_differences": paired,
    }
    atomic_write_json(out_dir / f"{KIND}_summary.json", summary)
    return summary


__all__ = [
    "CandidateFeatures",
    "cached_reference",
    "candidate_encoder_digest",
    "combine_results",
    "domain_shift_matrix",
    "domain_target",
    "evaluate_run",
    "format_paired",
    "format_table",
    "one_vs_one_figure",
    "paired_anchors",
    "paired_differences",
    "plot_heatmaps",
    "reference_key",
    "write_summary",
]
