"""Markdown tables of the modality evaluators' results: rows = feature sets (modality subsets,
baselines, ...) or modality pairs, columns = metrics, each cell ``value (subject mean [95 % BCa
interval])`` with n, in the spirit of the sleep-staging evaluator's table."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..protocols import stats

LABELS = {
    "balanced_accuracy": "balanced accuracy",
    "macro_f1": "macro-F1",
    "kappa": "kappa",
    "kappa_4class": "kappa, 4 classes",
    "macro_auroc": "macro AUROC",
    "auroc": "AUROC",
    "auprc": "AUPRC",
    "R@1": "recall@1",
    "R@10": "recall@10",
}
"""Column titles of the metrics."""


def cell_text(cell: dict[str, Any]) -> str:
    """``0.812 (0.806 [0.790, 0.835])``: the value over every held-out window (staging: mean over fits), then
    the mean over subjects and its interval (left out when NaN); ``n/a`` for a NaN value."""
    if not np.isfinite(cell["value"]):
        return "n/a"
    if not np.isfinite(cell.get("ci_low", np.nan)):
        return f"{cell['value']:.3f}"
    return f"{cell['value']:.3f} ({cell['subject_mean']:.3f} [{cell['ci_low']:.3f}, {cell['ci_high']:.3f}])"


def markdown(header: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table: the header, its rule and one line per row."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _metric_rows(rows: dict[str, dict[str, Any]], metrics: list[str], extra: Callable[[dict], list[str]]):
    return [
        [name, *(cell_text(cells[m]) for m in metrics), *extra(cells), str(max(cells[m]["n"] for m in metrics))]
        for name, cells in rows.items()
    ]


STAGING_TITLES = {
    "staging": "Staging",
    "missing_modalities": "Staging with each modality removed at inference (fused embedding of the others)",
}
"""Staging-type result ``task`` -> its table title."""


def _staging(result: dict[str, Any]) -> list[str]:
    metrics = ["balanced_accuracy", "macro_f1", "kappa", "macro_auroc"]
    lines = []
    for setting, block in result["settings"].items():
        lines += [
            "",
            f"**{STAGING_TITLES[result['task']]}, {setting}** ({result['dataset']}; mean over {block['fits']} fits, "
            "(mean over test subjects [95 % BCa interval]), n = subjects)",
            "",
        ]
        lines += markdown(
            ["features", *(LABELS[m] for m in metrics), "n"], _metric_rows(block["rows"], metrics, lambda _: [])
        )
        if block["paired"]:
            lines += ["", f"{result['reference']} minus each row, balanced accuracy per subject:", ""]
            lines += markdown(
                [f"{result['reference']} minus", "difference [95 % CI], p, subjects ahead"],
                [[name, stats.ci_text(cell)] for name, cell in block["paired"].items()],
            )
    return lines


def _events(result: dict[str, Any]) -> list[str]:
    title = {"apnea_hypopnea": "Apnea / hypopnea", "arousal": "Arousal"}.get(result["task"], result["task"])
    lines = [
        "",
        f"**{title} per window** ({result['dataset']}; pooled over every held-out window "
        "(mean over subjects [95 % BCa interval]), n = subjects)",
        "",
    ]
    lines += markdown(
        ["features", "AUROC", "AUPRC", "prevalence", "windows", "n"],
        _metric_rows(result["rows"], ["auroc", "auprc"], lambda r: [f"{r['prevalence']:.3f}", str(r["windows"])]),
    )
    ahi_rows = {name: row["ahi"] for name, row in result["rows"].items() if "ahi" in row}
    if ahi_rows:
        lines += ["", "**AHI per night** (positive windows per hour of sleep, calibrated on training nights)", ""]
        lines += markdown(
            ["features", "Spearman", "severity accuracy", "nights"],
            [
                [name, f"{a['spearman']:.3f}", cell_text(a["severity_accuracy"]), str(len(a["nights"]))]
                for name, a in ahi_rows.items()
            ],
        )
    return lines


def _retrieval(result: dict[str, Any]) -> list[str]:
    n, chance = result["n_candidates"], result["chance"]
    lines = [
        "",
        f"**Cross-modal retrieval** ({result['dataset']}; {result['queries']} queries, N = {n} candidates: half from "
        f"the query's night >= {result['min_gap_seconds'] / 60:g} min away; over every query "
        "(mean over subjects [95 % BCa interval]))",
        "",
    ]
    return lines + markdown(
        ["query -> candidates", "recall@1", "recall@10", "chance @1", "chance @10", "n"],
        _metric_rows(result["rows"], ["R@1", "R@10"], lambda _: [f"{chance['R@1']:.3f}", f"{chance['R@10']:.3f}"]),
    )


WRITERS: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "staging": _staging,
    "missing_modalities": _staging,
    "apnea_hypopnea": _events,
    "arousal": _events,
    "retrieval": _retrieval,
}
"""Result ``task`` -> its table writer."""


def format_tables(results: list[dict[str, Any]]) -> str:
    """The Markdown tables of results of ``evaluate_staging`` / ``evaluate_events`` / ``evaluate_retrieval``
    in order (``ValueError`` naming an unknown task)."""
    lines: list[str] = []
    for result in results:
        if result.get("task") not in WRITERS:
            raise ValueError(f"format_tables: unknown task {result.get('task')!r}; expected one of {list(WRITERS)}")
        lines += WRITERS[result["task"]](result)
    return "\n".join(lines).strip() + "\n"
