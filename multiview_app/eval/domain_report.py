"""Reports of domain-generalization results (:mod:`.domain_generalization` evaluates, this module presents):
one run's 1-vs-1 bar chart, and for several runs the pooled DomainBed table (rows = algorithms, columns = held-out
domains + Avg, mean +- std over distinct runs), paired differences, Fig.-2-like heatmaps, the adaptation gain, the
ERM baseline's selection and the summary JSON (:func:`write_summary`). It reads result dicts only: no runs, models
or features.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..train.run_io import atomic_write_json, atomic_write_text
from .protocols.domains import TEST_DOMAIN, TRAINING_DOMAIN
from .protocols.probe import mean_std
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


def plot_one_vs_one_row(result: dict[str, Any], out: Path) -> None:
    """1-vs-1 accuracies of every encoder (bars per training domain)."""
    seen = result["seen"]
    series = {name: [scores["one_vs_one"][d] for d in seen] for name, scores in result["results"].items()}
    grouped_bars(seen, series, "classifier trained on", f"accuracy on target '{result['holdout']}'", out)


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
    "KIND",
    "METRICS",
    "combine_results",
    "format_paired",
    "format_table",
    "one_vs_one_figure",
    "paired_anchors",
    "paired_differences",
    "plot_heatmaps",
    "write_summary",
]
