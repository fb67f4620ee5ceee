"""``mvapp experiment dreams-transfer``: the demo's encoder, pretrained on synthetic nights, stages the real
DREAMS excerpts.

1. ``REAL_PSG/dreams-spindles`` is prepared into ``OUT/dreams_cache`` (reused when present);
2. without ``runs``, the demo's encoder is pretrained once per seed (:func:`.eeg_demo.pretrain`, ``make run``'s
   settings) under ``OUT/runs``, on the demo's nights under ``OUT/demo_data`` (or ``data``);
3. each run stages the excerpts few-shot, **leave-one-excerpt-out** (folds = excerpts: each fold tests one
   excerpt; the classifier and its C are fitted and chosen on the others only), on W / N1 / N2 / N3 by default
   (DREAMS holds 5 REM windows, excluded and counted), with the supervised-ceiling row and YASA's pretrained
   stager as a zero-shot row;
4. the seeds are pooled (:mod:`.seeded_staging`: excerpts are the units) into ``OUT/dreams_transfer.md`` /
   ``.json``, plus per-class F1 over every fit.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .eeg_demo import demo_settings, mvapp, pretrain
from .seeded_staging import markdown_table, summarize

REAL_PSG_ENV = "MVAPP_REAL_PSG"
"""Environment variable naming the folder that holds ``dreams-spindles/``."""
SHOTS = (10, 20, 40)
STAGES = ("W", "N1", "N2", "N3")
ROWS = ("trained", "bandpower", "handcrafted", "supervised_ceiling", "yasa")
PAIRED = ("bandpower", "handcrafted", "yasa")
TABLE = "dreams_transfer"
"""The published table's name (docs/results/dreams_transfer.md, the README block)."""


def prepare_dreams(real_psg: Path, out: Path) -> Path:
    """``OUT/dreams_cache`` prepared from ``REAL_PSG/dreams-spindles`` (reused when its manifest exists)."""
    source, cache = real_psg / "dreams-spindles", out / "dreams_cache"
    if not source.is_dir():
        raise FileNotFoundError(
            f"{source}: expected the DREAMS Sleep Spindles folder (see datasets/dreams_spindles.yaml)"
        )
    if not (cache / "manifest.json").is_file():
        mvapp("data", "prepare", "dreams", "--source", str(source), "--out", str(cache))
    return cache


def check_leave_one_out(result: dict[str, Any], n_excerpts: int) -> None:
    """Every fold tests exactly one excerpt and fits (and tunes) on the others; each excerpt is tested once."""
    tested = [fold["test"] for fold in result["folds"]]
    if any(len(t) != 1 for t in tested) or len({t[0] for t in tested}) != n_excerpts:
        raise AssertionError(f"not leave-one-excerpt-out: test folds {tested} for {n_excerpts} excerpts")
    for fold in result["folds"]:
        if fold["test"][0] in fold["train"]:
            raise AssertionError(f"excerpt {fold['test'][0]} both tested and used for the classifier")


def stage_dreams(
    run: Path,
    cache: Path,
    shots: Sequence[int],
    draws: int,
    stages: Sequence[str],
    combine: str,
    ceiling: bool = True,
) -> dict[str, Any]:
    """``run``'s encoder stages the excerpts of ``cache`` leave-one-excerpt-out (checked), with the YASA row
    (extra ``[yasa]``; else a note says why) and, with ``ceiling``, the run's supervised ceiling trained unless
    done; a stored evaluation with the same settings is reused."""
    from .staging import staging_result, train_supervised_ceiling

    if ceiling:
        train_supervised_ceiling(run, progress=False)
    n_excerpts = len(json.loads((cache / "manifest.json").read_text())["recordings"])
    result = staging_result(
        run,
        cache=cache.resolve(),
        folds=n_excerpts,
        shots=list(shots),
        draws=draws,
        combine=combine,
        stages=list(stages),
        yasa=True,
    )
    check_leave_one_out(result, n_excerpts)
    return result


def per_class_f1_table(result: dict[str, Any]) -> list[str]:
    """Markdown rows: per-class F1 (mean ± std over fits) of every row at every s."""
    stages = result["stages"]
    lines = ["| features | s | " + " | ".join(f"F1 {c}" for c in stages) + " |", "|---|---|" + "---|" * len(stages)]
    for name, per_shot in result["results"].items():
        for s, cell in per_shot.items():
            f1 = cell["per_class_f1"]
            cells = [f"{f1[c]['mean']:.2f} ± {f1[c]['std']:.2f}" if c in f1 else "-" for c in stages]
            lines.append(f"| {name} | {s} | " + " | ".join(cells) + " |")
    return lines


def transfer(
    real_psg: Path,
    out: Path,
    *,
    seeds: Sequence[int] = (0, 1, 2),
    runs: Sequence[Path] | None = None,
    data: Path | None = None,
    shots: Sequence[int] = SHOTS,
    stages: Sequence[str] = STAGES,
    ceiling: bool = True,
    draws: int | None = None,
) -> tuple[list[dict[str, Any]], list[Path], Path]:
    """Prepare, pretrain unless ``runs`` are given, stage with ``draws`` few-shot draws per fold (default the
    demo's): ``(per-run results, runs, cache)``."""
    from tqdm.auto import tqdm

    out.mkdir(parents=True, exist_ok=True)
    cache = prepare_dreams(real_psg, out)
    settings = demo_settings()
    runs = list(runs or [pretrain(out / "runs", seed, data or out / "demo_data", settings) for seed in seeds])
    results = [
        stage_dreams(run, cache, shots, draws or int(settings["draws"]), stages, settings["combine"], ceiling)
        for run in tqdm(runs, desc="DREAMS staging", unit="run")
    ]
    return results, runs, cache


def report(results: list[dict[str, Any]], seeds: Sequence[int], cache: Path, command: str) -> tuple[str, dict]:
    """The Markdown page (pooled table over seeds, windows, per-class F1) and its numbers."""
    from ..eval.protocols.staging import pool_results

    summary = summarize(results, seeds, rows=ROWS, paired=PAIRED)
    pooled = pool_results(results) if len(results) > 1 else results[0]
    excluded = {k: n for k, n in results[0]["excluded_windows_per_stage"].items() if n}
    per_stage = ", ".join(f"{k} {n}" for k, n in results[0]["test_windows_per_stage"].items() if n)
    n_excerpts = len(summary["units"])
    footer = (
        f"Command: `{command}` ({n_excerpts} real DREAMS excerpts, one subject each; staged windows per class: "
        f"{per_stage}; excluded: {excluded or 'none'})."
    )
    text = markdown_table(summary, "DREAMS (real EEG)", unit="excerpt", footer=footer)
    summary.update(command=command, cache=str(cache), per_class_f1=per_class_f1_table(pooled))
    return text, summary


__all__ = ["REAL_PSG_ENV", "TABLE", "check_leave_one_out", "prepare_dreams", "report", "stage_dreams", "transfer"]
