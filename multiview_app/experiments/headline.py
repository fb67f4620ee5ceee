"""``mvapp experiment eeg-demo``: the README's EEG headline, the demo over several pretraining seeds.

Each seed pretrains the demo's encoder (:func:`.eeg_demo.pretrain`, exactly ``make run``'s settings), trains
its supervised ceiling unless ``ceiling`` is off, and stages the demo's Sleep-EDF-format nights cross-dataset
(5 subject folds, the demo's few-shot draws, C chosen inside the drawn windows); the seeds are pooled by
:mod:`.seeded_staging`. ``make run`` itself stays one seed (seed 0, one of these).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .eeg_demo import demo_data, demo_settings, pretrain
from .seeded_staging import markdown_table, summarize

SHOTS = (10, 50, 100)
"""The demo's few-shot columns (labelled windows per class)."""
FOLDS = 5
"""Subject folds of the cross-dataset staging (the demo's)."""
ROWS = ("trained", "bandpower", "handcrafted", "supervised_ceiling")
"""The table's rows (random init and the rest stay in each run's evaluation JSON)."""
PAIRED = ("bandpower", "handcrafted")
"""The rows the pretrained encoder is compared with per test subject."""
TABLE = "eeg_cross_dataset"
"""The published table's name (docs/results/eeg_cross_dataset.md, the README block)."""


def stage_seeds(seeds: Sequence[int], data: Path, runs: Path, ceiling: bool = True) -> list[dict[str, Any]]:
    """One cross-dataset staging result per pretraining seed (stored evaluations with the same settings reused)."""
    from tqdm.auto import tqdm

    from .staging import staging_result, train_supervised_ceiling

    settings = demo_settings()
    cache = demo_data(data.resolve(), settings, sleep_edf=True)["sleep-edf"]
    results = []
    for seed in tqdm(list(seeds), desc="pretraining seeds", unit="seed"):
        run = pretrain(runs, seed, data, settings)
        if ceiling:
            train_supervised_ceiling(run, progress=False)
        results.append(
            staging_result(
                run,
                cache=cache,
                folds=FOLDS,
                shots=list(SHOTS),
                draws=int(settings["draws"]),
                combine=settings["combine"],
            )
        )
    return results


def headline(
    seeds: Sequence[int], data: Path, runs: Path, command: str, ceiling: bool = True
) -> tuple[str, dict[str, Any]]:
    """The headline table (Markdown, ending with ``command``) and its numbers, with the data and settings."""
    settings = demo_settings()
    summary = summarize(stage_seeds(seeds, data, runs, ceiling), seeds, rows=ROWS, paired=PAIRED)
    summary["settings"] = settings
    summary["data"] = (
        f"pretraining: {settings['subjects']} synthetic PhysioNet-2018-format nights (generator seed "
        f"{settings['psg_seed']}); staged: {settings['edf_subjects']} Sleep-EDF-format nights (generator seed "
        f"{settings['edf_seed']}), {FOLDS} subject folds x {settings['draws']} draws"
    )
    summary["command"] = command
    footer = f"Command: `{command}` ({summary['data']})."
    return markdown_table(summary, "EEG features (cross-dataset)", footer=footer), summary


__all__ = ["FOLDS", "PAIRED", "ROWS", "SHOTS", "TABLE", "headline", "stage_seeds"]
