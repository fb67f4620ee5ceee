"""``mvapp eval domain-generalization``: leave-one-domain-out evaluation (M3G Sec. 4.2, Table 2, Fig. 2).

For a run pretrained on the seen domains of the ``domainnet`` adapter (``data.options.holdout``):

- **5 vs 1**: one linear classifier on the frozen features of every seen domain's train split,
  accuracy on the held-out domain's test split;
- **1 vs 1**: one classifier per seen domain, each tested on the held-out test split (a row of the
  Fig.-2 matrix: rows = training domain, columns = unseen domain);
- **oracle**: a classifier on the held-out domain's own train split (upper reference).

Encoders (rows of the table): the trained one, its random init (``init.safetensors``) and a supervised
ERM baseline (:mod:`.erm`, same backbone and budget). The linear classifier is the shared
standardized multinomial logistic regression (:func:`.probe.fit_linear_classifier`, L2 ``C``; not the
paper's SGD sweep). Features are the encoder's (before the projector), eval views = resize + center crop.

``--holdout all`` (with ``--config``) trains one run per held-out domain (each only on the other
domains) and seed, evaluates each and writes one combined table (mean +- std over seeds), the
Fig.-2-like heatmaps and a JSON with everything to the ``--run`` folder. Finished runs / evaluations
are reused, so the command resumes after an interruption.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from ..argtypes import nonnegative_int, positive_float, positive_int
from ..fileio import sha256_file
from ..train.run_io import atomic_write_json, atomic_write_text, load_run
from . import Evaluator, register_evaluator
from .features import combine_views, extract_features, torch_threads
from .probe import fit_linear_classifier, mean_std

KIND = "domain_generalization"
ENCODERS = ("random_init", "erm", "trained")
PROTOCOLS = ("five_vs_one", "one_vs_one", "oracle")
#: evaluation protocol -> the adapter option that names its target domain
PROTOCOL_OPTION = {"generalization": "holdout", "adaptation": "adapt"}


def domain_features(model: Any, adapter: Any, policy: Any, domain: str, split: str, batch_size: int,
                    device: str, progress: bool) -> tuple[np.ndarray, np.ndarray]:
    """Frozen features ``(N, f)`` (mean over eval views) and labels ``(N,)`` of one domain split."""
    dataset = adapter.domain_split(domain, split)
    feats, labels, _ = extract_features(model, adapter, policy, f"{domain}/{split}", batch_size, device, progress,
                                        dataset=dataset)
    if domain == getattr(adapter, "adapt", None):  # evaluation: the only place the target's labels are read
        labels = adapter.target_labels(split).numpy()
    return combine_views(feats, "mean"), labels


def accuracy(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray, C: float) -> float:
    """Test accuracy of the shared standardized logistic regression fitted on ``(x_train, y_train)``."""
    clf = fit_linear_classifier(x_train, y_train, C=C)
    return float((clf.predict(np.nan_to_num(x_test)) == y_test).mean())


def probe_domains(
    features: dict[str, tuple[np.ndarray, np.ndarray]], seen: list[str], target: str, C: float = 1.0,
) -> dict[str, Any]:
    """The three protocols on precomputed features ``{"<domain>/<split>": (x (N, f), y (N,))}``."""
    x_test, y_test = features[f"{target}/test"]
    with threadpool_limits(1):  # small problems: BLAS threads only oversubscribe the shared CPU
        x_all = np.concatenate([features[f"{d}/train"][0] for d in seen])
        y_all = np.concatenate([features[f"{d}/train"][1] for d in seen])
        return {
            "five_vs_one": accuracy(x_all, y_all, x_test, y_test, C),
            "one_vs_one": {d: accuracy(*features[f"{d}/train"], x_test, y_test, C) for d in seen},
            "oracle": accuracy(*features[f"{target}/train"], x_test, y_test, C),
        }


def evaluate_run(
    run_dir: str | Path, *, C: float = 1.0, batch_size: int | None = None, erm: bool = True,
    erm_cache: str | Path | None = None, device: str = "cpu", progress: bool = True, threads: int | None = 1,
) -> dict[str, Any]:
    """Evaluate one run (module docstring); write ``eval/domain_generalization.json`` and
    ``plots/one_vs_one.png``; return the result. ``threads``: torch threads meanwhile (see
    :func:`.features.torch_threads`; ``None`` = unchanged)."""
    with torch_threads(threads):
        return _evaluate_run(Path(run_dir), C, batch_size, erm, erm_cache, device, progress)


def _evaluate_run(run_dir: Path, C: float, batch_size: int | None, erm: bool, erm_cache: str | Path | None,
                  device: str, progress: bool) -> dict[str, Any]:
    from ..data.adapters import build_adapter
    from ..data.views import build_view_policy
    from .erm import train_erm

    start, cpu_start = time.perf_counter(), time.process_time()
    cfg, _ = load_run(run_dir, "init")
    adapter = build_adapter(cfg.data.adapter, cfg.data.options)
    holdout, adapt = getattr(adapter, "holdout", None), getattr(adapter, "adapt", None)
    if holdout is None and adapt is None:
        raise ValueError(
            f"{run_dir}: neither data.options.holdout nor data.options.adapt is set; the domain evaluator needs a "
            "run pretrained with one domain held out (generalization) or unlabelled (adaptation)"
        )
    if holdout is not None and adapt is not None:
        raise ValueError(f"{run_dir}: both data.options.holdout ({holdout}) and adapt ({adapt}) are set; "
                         "the evaluator scores one target domain per run")
    target = holdout or adapt
    protocol = "generalization" if holdout else "adaptation"
    policy = build_view_policy(cfg.views.policy, cfg.views.k, cfg.views.options, adapter)
    seen = list(adapter.seen_domains)
    batch_size = batch_size or cfg.eval.batch_size
    splits = [(d, "train") for d in seen] + [(target, "train"), (target, "test")]

    models: dict[str, Any] = {"random_init": load_run(run_dir, "init")[1], "trained": load_run(run_dir, "final")[1]}
    erm_summary = None
    if erm:
        models["erm"], erm_summary = train_erm(cfg, adapter, policy, erm_cache or run_dir / "eval", device=device,
                                               progress=progress)
    erm_s = time.perf_counter() - start
    results: dict[str, Any] = {}
    items: dict[str, int] = {}
    for name, model in models.items():
        features = {f"{d}/{s}": domain_features(model, adapter, policy, d, s, batch_size, device, progress)
                    for d, s in splits}
        items = {key: int(len(y)) for key, (_, y) in features.items()}
        results[name] = probe_domains(features, seen, target, C)
    result = {
        "evaluator": "domain-generalization",
        "run": str(run_dir),
        "loss": cfg.loss.name,
        "seed": cfg.train.seed,
        "holdout": target,
        "protocol": protocol,
        "adapt_views": cfg.data.options.get("adapt_views", "augment") if protocol == "adaptation" else None,
        "seen": seen,
        "classifier": f"standardized multinomial logistic regression (lbfgs, L2 C={C}) on frozen encoder features",
        "items": items,
        "results": results,
        "erm": erm_summary and {k: v for k, v in erm_summary.items() if k != "key"},
        # which model each reference column scored: equal ids are the same model (counted once when pooling)
        "reference_ids": {"random_init": sha256_file(run_dir / "init.safetensors")[:16],
                          **({"erm": erm_summary["key"]} if erm_summary else {})},
        "wall_s": time.perf_counter() - start,
        "cpu_s": time.process_time() - cpu_start,  # this process's CPU time (not DataLoader workers)
        "erm_and_setup_s": erm_s,
    }
    atomic_write_json(run_dir / "eval" / f"{KIND}.json", result)
    _plot_row(result, run_dir / "plots" / "one_vs_one.png")
    return result


def grouped_bars(groups: list[str], series: dict[str, list[float]], xlabel: str, ylabel: str, out: Path,
                 zero_line: bool = False, errors: dict[str, list[float]] | None = None) -> Path:
    """Bar chart: one group of bars per entry of ``groups``, one bar per ``series`` name -> PNG
    (``errors``: optional error-bar half-lengths per series, same layout)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1.5 + 1.2 * len(groups), 3.2))
    width = 0.8 / max(1, len(series))
    for i, (name, values) in enumerate(series.items()):
        ax.bar(np.arange(len(groups)) + i * width, values, width, label=name,
               yerr=None if errors is None else errors.get(name), capsize=2 if errors else 0)
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


def domain_shift_matrix(model: Any, adapter: Any, policy: Any, *, C: float = 1.0, batch_size: int = 512,
                        device: str = "cpu", progress: bool = False) -> dict[str, dict[str, float]]:
    """``matrix[train domain][test domain]``: accuracy of a probe fitted on one domain's train split and
    tested on another's test split (diagonal: in-domain), for every domain of ``adapter``. With a
    random-init encoder it shows how large the domain shift of the data itself is."""
    domains = list(adapter.domains)
    features = {f"{d}/{s}": domain_features(model, adapter, policy, d, s, batch_size, device, progress)
                for d in domains for s in ("train", "test")}
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
#: table-column suffix of the adaptation protocol per ``data.options.adapt_views``
ADAPT_SUFFIX = {"augment": "+adapt", "nearest": "+adapt_nn"}


def column_name(result: dict[str, Any]) -> str:
    """Table column of a run's trained encoder: the loss, ``<loss>+adapt`` for the adaptation protocol
    (target items as augmentation views), ``<loss>+adapt_nn`` (target views matched by nearest neighbour)."""
    if result.get("protocol") != "adaptation":
        return result["loss"]
    return result["loss"] + ADAPT_SUFFIX[result.get("adapt_views", "augment")]


def reference_id(result: dict[str, Any], encoder: str) -> str:
    """Identity of the model behind a reference column (``random_init``, ``erm``) of one run's result: the
    init weights' digest / the ERM cache key; results written before ids were recorded fall back to the
    seed (same config and seed = same initialization and the same cached ERM model)."""
    if encoder in result.get("reference_ids", {}):
        return str(result["reference_ids"][encoder])
    return f"seed {result['seed']}" if "seed" in result else f"run {result.get('run', id(result))}"


def combine_results(results: list[dict[str, Any]], domains: list[str]) -> dict[str, Any]:
    """Aggregate per-run results (any losses, held-out domains, seeds) into mean +- std over distinct
    runs: a reference model (random init, ERM) that several runs share, e.g. the generalization and
    adaptation runs of one seed, is counted once (:func:`reference_id`), so ``n`` is the number of models.

    Returns ``{"five_vs_one": {column: {holdout: {mean, std, n}}}, "oracle": ..., "one_vs_one":
    {column: {train domain: {unseen domain: mean}}}}`` where ``column`` is a loss name for the trained
    encoder and ``random_init`` / ``erm`` for the references (pooled over the runs of all losses).
    """
    pooled: dict[str, dict[str, dict[str, list[Any]]]] = {p: {} for p in PROTOCOLS}
    counted: set[tuple[str, str, str]] = set()
    for result in results:
        for encoder, scores in result["results"].items():
            column = column_name(result) if encoder == "trained" else encoder
            if encoder != "trained":  # a reference model shared by several runs counts once per target
                identity = (column, result["holdout"], reference_id(result, encoder))
                if identity in counted:
                    continue
                counted.add(identity)
            for protocol in PROTOCOLS:
                cell = pooled[protocol].setdefault(column, {}).setdefault(result["holdout"], [])
                cell.append(scores[protocol])
    combined: dict[str, Any] = {"five_vs_one": {}, "oracle": {}, "one_vs_one": {}}
    for protocol in ("five_vs_one", "oracle"):
        for column, per_domain in pooled[protocol].items():
            combined[protocol][column] = {d: {**mean_std(v), "n": len(v)} for d, v in per_domain.items()}
    for column, per_domain in pooled["one_vs_one"].items():
        matrix: dict[str, dict[str, float]] = {}
        for unseen, rows in per_domain.items():
            for train_domain in domains:
                values = [r[train_domain] for r in rows if train_domain in r]
                if values:
                    matrix.setdefault(train_domain, {})[unseen] = float(np.mean(values))
        combined["one_vs_one"][column] = matrix
    return combined


def spread(cell: dict[str, float], sign: bool = False) -> str:
    """``{mean, std, n}`` (fractions) -> ``"mean ± std"`` in points, or ``"mean (n=1)"`` for a single run
    (no spread to show); ``sign``: always print the sign of the mean."""
    mean = f"{100 * cell['mean']:+.1f}" if sign else f"{100 * cell['mean']:.1f}"
    return f"{mean} (n=1)" if cell.get("n") == 1 else f"{mean} ± {100 * cell['std']:.1f}"


def format_table(combined: dict[str, Any], domains: list[str], protocol: str = "five_vs_one") -> str:
    """Markdown table: rows = held-out domain, columns = random init, ERM, the losses (mean +- std over
    runs; ``(n=1)`` marks a cell with one run)."""
    columns = [c for c in ("random_init", "erm") if c in combined[protocol]]
    columns += sorted(c for c in combined[protocol] if c not in ("random_init", "erm"))
    header = "| seen -> unseen | " + " | ".join(columns) + " |"
    lines = [header, "|---" * (len(columns) + 1) + "|"]
    for d in domains:
        if not any(d in combined[protocol][c] for c in columns):
            continue
        cells = []
        for c in columns:
            cell = combined[protocol][c].get(d)
            cells.append("-" if cell is None else spread(cell))
        lines.append(f"| ¬{d} -> {d} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_heatmaps(combined: dict[str, Any], domains: list[str], out: Path) -> Path:
    """Fig.-2-like heatmaps (one per column of the table): rows = classifier training domain,
    columns = unseen domain, value = mean 1-vs-1 accuracy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = list(combined["one_vs_one"])
    fig, axes = plt.subplots(1, len(columns), figsize=(3.4 * len(columns), 3.3), squeeze=False)
    for ax, column in zip(axes[0], columns):
        matrix = np.full((len(domains), len(domains)), np.nan)
        for i, row in enumerate(domains):
            for j, col in enumerate(domains):
                matrix[i, j] = combined["one_vs_one"][column].get(row, {}).get(col, np.nan)
        ax.imshow(matrix, vmin=0.0, vmax=1.0, cmap="viridis")
        for i in range(len(domains)):
            for j in range(len(domains)):
                if not np.isnan(matrix[i, j]):
                    ax.text(j, i, f"{100 * matrix[i, j]:.0f}", ha="center", va="center", fontsize=7,
                            color="white" if matrix[i, j] < 0.6 else "black")
        ax.set_xticks(range(len(domains)), domains, rotation=60, fontsize=7)
        ax.set_yticks(range(len(domains)), domains, fontsize=7)
        ax.set_title(column, fontsize=9)
        ax.set_xlabel("unseen domain", fontsize=8)
    axes[0][0].set_ylabel("classifier trained on", fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def adaptation_gain(results: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """Per-seed 5-vs-1 gain of adaptation over generalization, paired by (loss, target, seed).

    ``gain[<adaptation column>][target] = {"mean", "std", "n"}`` over the seeds that have both an
    adaptation run (column ``<loss>+adapt`` / ``<loss>+adapt_nn``) and a generalization run of the same
    loss; adaptation runs without that partner are left out (``n`` counts the pairs)."""
    base = {(r["loss"], r["holdout"], r["seed"]): r["results"]["trained"]["five_vs_one"]
            for r in results if r.get("protocol", "generalization") == "generalization"}
    pairs: dict[str, dict[str, list[float]]] = {}
    for r in results:
        key = (r["loss"], r["holdout"], r["seed"])
        if r.get("protocol") != "adaptation" or key not in base:
            continue
        diff = r["results"]["trained"]["five_vs_one"] - base[key]
        pairs.setdefault(column_name(r), {}).setdefault(r["holdout"], []).append(diff)
    return {column: {d: {**mean_std(v), "n": len(v)} for d, v in per.items()} for column, per in pairs.items()}


def format_gain(gain: dict[str, dict[str, dict[str, float]]]) -> str:
    """Markdown: rows = target domain, columns = adaptation column, cells = gain in accuracy points
    (mean +- std over the paired seeds, ``(n=<pairs>)``)."""
    losses = sorted(gain)
    domains = sorted({d for per in gain.values() for d in per})
    lines = ["| target | " + " | ".join(losses) + " |", "|---" * (len(losses) + 1) + "|"]
    for d in domains:
        cells = [spread(gain[l][d], sign=True) + ("" if gain[l][d]["n"] == 1 else f" (n={gain[l][d]['n']})")
                 if d in gain[l] else "-" for l in losses]
        lines.append(f"| {d} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_gain(gain: dict[str, dict[str, dict[str, float]]], out: Path) -> Path:
    """Bars: per target domain, the 5-vs-1 gain of adaptation over generalization (mean over paired
    seeds, error bar = std), one bar per adaptation column."""
    domains = sorted({d for per in gain.values() for d in per})
    series = {loss: [100 * gain[loss][d]["mean"] if d in gain[loss] else np.nan for d in domains]
              for loss in sorted(gain)}
    errors = {loss: [100 * gain[loss][d]["std"] if d in gain[loss] else np.nan for d in domains]
              for loss in sorted(gain)}
    return grouped_bars(domains, series, "target domain", "adaptation - generalization (points)", out,
                        zero_line=True, errors=errors)


def train_and_evaluate(
    config: str | Path, out_dir: str | Path, holdouts: list[str] | str, seeds: list[int],
    overrides: list[str] | tuple[str, ...] = (), *, protocols: tuple[str, ...] = ("generalization",),
    C: float = 1.0, erm: bool = True, device: str = "cpu", progress: bool = True, threads: int | None = 1,
) -> list[dict[str, Any]]:
    """One pretraining run per (target domain, seed, protocol) under ``out_dir``, then
    :func:`evaluate_run` on each; finished runs and evaluations are reused. ``generalization``: the
    target is held out (``data.options.holdout``); ``adaptation``: its train images join pretraining
    unlabelled (``data.options.adapt``). ``holdouts="all"`` = every domain of the data."""
    from ..config import load_config
    from ..data.adapters import build_adapter
    from ..train.trainer import train

    out_dir = Path(out_dir)
    base = load_config(config, list(overrides))
    if isinstance(holdouts, str) and holdouts == "all":
        options = {k: v for k, v in base.data.options.items() if k not in ("holdout", "adapt")}
        holdouts = list(build_adapter(base.data.adapter, options).domains)
    results = []
    unknown = [p for p in protocols if p not in PROTOCOL_OPTION]
    if unknown:
        raise ValueError(f"unknown protocol(s) {', '.join(unknown)}; valid: {', '.join(PROTOCOL_OPTION)}")
    runs = [(h, s, p) for h in holdouts for p in protocols for s in seeds]
    adapt_tag = "_adaptnn" if base.data.options.get("adapt_views") == "nearest" else "_adapt"
    for holdout, seed, protocol in runs:
        name = f"{base.loss.name}_{holdout}{adapt_tag if protocol == 'adaptation' else ''}_s{seed}"
        target = [f"data.options.{key}={holdout if key == PROTOCOL_OPTION[protocol] else 'null'}"
                  for key in PROTOCOL_OPTION.values()]
        cfg = load_config(config, [*overrides, *target, f"train.seed={seed}",
                                   f"output.runs_dir={out_dir}", "eval.linear_probe=false"], name=name)
        run_dir = cfg.run_dir
        done = run_dir / "eval" / f"{KIND}.json"
        if done.is_file():
            results.append(json.loads(done.read_text()))
            continue
        pretrain_s = pretrain_cpu_s = None
        if not (run_dir / "model.safetensors").is_file():
            from ..train.checkpoint import latest_checkpoint

            resume = "latest" if run_dir.exists() and latest_checkpoint(run_dir) else None
            if resume is None and run_dir.exists():
                raise FileExistsError(f"{run_dir} holds an unfinished run without checkpoint; remove it to retrain")
            started, cpu_started = time.perf_counter(), time.process_time()
            train(cfg, resume=resume)
            pretrain_s, pretrain_cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
        result = evaluate_run(run_dir, C=C, erm=erm, erm_cache=out_dir / "erm", device=device, progress=progress,
                              threads=threads)
        result["pretrain_s"] = pretrain_s  # None when the run had been trained before
        result["pretrain_cpu_s"] = pretrain_cpu_s
        atomic_write_json(done, result)
        results.append(result)
    return results


def write_summary(results: list[dict[str, Any]], out_dir: str | Path, title: str = "") -> dict[str, Any]:
    """Combined table (markdown), heatmaps (PNG) and JSON of ``results`` into ``out_dir``."""
    out_dir = Path(out_dir)
    domains = sorted({r["holdout"] for r in results} | {d for r in results for d in r["seen"]})
    combined = combine_results(results, domains)
    heatmap = plot_heatmaps(combined, domains, out_dir / "plots" / "one_vs_one_heatmaps.png")
    table = (f"{title}\n\n" if title else "") + "5 domains vs 1 (accuracy %, mean ± std over seeds)\n\n" + \
        format_table(combined, domains) + "\n\nOracle (probe trained on the unseen domain's own train split)\n\n" + \
        format_table(combined, domains, "oracle") + "\n"
    erm_runs = {reference_id(r, "erm"): r["erm"] for r in results if r.get("erm")}
    if erm_runs:
        steps = sorted({e["steps"] for e in erm_runs.values()})
        accuracy = [e["train_accuracy"] for e in erm_runs.values()]
        table += (f"\nERM: {len(erm_runs)} model(s), {'/'.join(map(str, steps))} steps each (the pretraining runs' "
                  f"train.max_steps, overrides included), training accuracy {100 * min(accuracy):.1f}-"
                  f"{100 * max(accuracy):.1f} % on the seen domains\n")
    gain = adaptation_gain(results)
    gain_plot = plot_gain(gain, out_dir / "plots" / "adaptation_gain.png") if gain else None
    if gain:
        table += "\nGain of adaptation over generalization (5 vs 1, accuracy points)\n\n" + format_gain(gain) + "\n"
    atomic_write_text(out_dir / f"{KIND}_table.md", table)
    summary = {"domains": domains, "combined": combined, "runs": results, "heatmaps": str(heatmap), "table": table,
               "adaptation_gain": gain, "gain_plot": gain_plot and str(gain_plot)}
    atomic_write_json(out_dir / f"{KIND}_summary.json", summary)
    return summary


@register_evaluator
class DomainGeneralization(Evaluator):
    """Leave-one-domain-out: 5-vs-1 / 1-vs-1 / oracle linear probes; random-init and ERM references."""

    name = "domain-generalization"  # kind (the output stem) is derived: KIND

    def creates_run(self, args: argparse.Namespace) -> bool:
        """With ``--config`` it trains first: ``--run`` is then an output folder to create."""
        return args.config is not None

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--config", help="train from this config first (one run per held-out domain and seed); "
                                             "--run is then the output folder")
        parser.add_argument("--holdout", default=None,
                            help="with --config: a domain name or 'all' (default: the config's data.options.holdout)")
        parser.add_argument("--seeds", default="0", help="with --config: comma-separated seeds")
        parser.add_argument("--protocol", choices=["generalization", "adaptation", "both"], default="generalization",
                            help="with --config: target held out (generalization), its train images in pretraining "
                                 "without labels (adaptation), or both in one table")
        parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides for --config")
        parser.add_argument("--C", type=positive_float, default=1.0, help="inverse L2 strength of the logistic regression")
        parser.add_argument("--batch-size", type=positive_int, default=None, help="feature-extraction batch (default: eval.batch_size)")
        parser.add_argument("--no-erm", action="store_true", help="skip the supervised ERM baseline")
        parser.add_argument("--device", default="cpu")
        parser.add_argument("--threads", type=nonnegative_int, default=1,
                            help="torch threads for ERM + feature extraction (0 = leave unchanged)")

    def run(self, run_dir: str | Path, args: argparse.Namespace) -> dict[str, Any]:
        if args.config is None:
            if args.holdout is not None:
                raise ValueError("--holdout needs --config (the held-out domain of an existing run is in its config)")
            result = evaluate_run(run_dir, C=args.C, batch_size=args.batch_size, erm=not args.no_erm, device=args.device,
                                  threads=args.threads or None)
            summary = write_summary([result], Path(run_dir) / "eval")
            print(summary["table"])
            return result
        from ..config import load_config

        options = load_config(args.config, args.set).data.options
        holdout = args.holdout or options.get("holdout") or options.get("adapt")
        if holdout is None:
            raise ValueError("--config: set data.options.holdout (or adapt) or pass --holdout DOMAIN|all")
        seeds = [int(s) for s in str(args.seeds).split(",") if s.strip()]
        protocols = ("generalization", "adaptation") if args.protocol == "both" else (args.protocol,)
        results = train_and_evaluate(args.config, run_dir, "all" if holdout == "all" else [holdout], seeds, args.set,
                                     protocols=protocols, C=args.C, erm=not args.no_erm, device=args.device,
                                     threads=args.threads or None)
        summary = write_summary(results, run_dir)
        print(summary["table"])
        return summary


__all__ = [
    "DomainGeneralization", "combine_results", "domain_shift_matrix", "evaluate_run", "format_table", "plot_heatmaps",
    "probe_domains", "train_and_evaluate", "write_summary",
]
