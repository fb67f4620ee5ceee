"""``mvapp experiment psg-modalities``: PSG modalities as views, from synthetic nights to tables and a figure.

1. :func:`prepare_data`: whole-PSG nights (``mvapp data synth-psg --signals psg --format physionet2018``)
   synthesized unless present, in sets with their own generator seeds (other people each): the
   **pretraining** nights, fresh **evaluation** nights, the **validation** nights choosing each loss's
   setting (:mod:`.psg_select`) and, when the sizes ask, long uncompressed **retrieval** nights (the issue's
   N = 1,000 candidates, half from the query's night >= 5 min away, need >= 500 windows per night), each
   prepared with ``--modalities`` matching the config's.
2. :func:`train_runs`: one run per (loss, seed) on the pretraining nights (``ensure_trained``: a finished
   run with the same config is reused, an interrupted one resumed).
3. :func:`embed`: each run's encoders embed every evaluation window per modality (frozen encoder features,
   :func:`~multiview_app.models.modal_embed.modality_embeddings`); the run's initial weights give the
   random-init row.
4. :func:`evaluate_runs`: ``evaluate_modalities`` per run (staging, staging with each modality removed at
   inference, apnea / hypopnea with the per-night AHI, arousal, retrieval (on the retrieval nights when
   there are some), subject folds and per-subject intervals are the evaluators'); the stage + events oracle
   of retrieval, the handcrafted baselines of the evaluation cache and the end-to-end
   supervised model (:mod:`.psg_end_to_end`, trained per fold from the labels) are evaluated once on the
   same folds. A task the nights cannot support (e.g. too few scored events) is left out with its reason
   in the notes.
5. :func:`pool` / :func:`report` / :func:`figure`: per-seed values pooled (mean and min-max over seeds),
   ``psg_modalities.md`` (with the issue's goals as measured, :mod:`.psg_goals`) + ``.json`` and
   ``psg_modalities.png`` (retrieval recall@10 matrix, per-modality staging bars, AHI scatter).

Sizes (nights, hours, steps, ...) come from a small YAML file (:class:`Sizes`, ``--sizes``;
``configs/demo_psg.yaml`` is ``make run-psg``'s).
"""

from __future__ import annotations

import functools
import json
import sys
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ..fileio import plain_json
from .eeg_demo import mvapp
from .psg_end_to_end import E2E_ROW, row_label
from .psg_goals import goals_markdown, measure_goals, paired_vs_brain
from .psg_select import DEFAULT_GRID, check_grid, select_settings, selection_markdown, setting_overrides, setting_tag

TABLE = "psg_modalities"
"""Stem of the written files (``OUT/psg_modalities.md``, ``.json``, ``.png``)."""
LOSSES = ("sleepfm_pairwise", "sleepfm_loo", "infonce_ave", "m3g", "pvc_geometric", "mveb")
"""Losses compared by default."""
SYNTH_WORKERS = 2
"""Processes writing nights at the same time (``synth-psg --workers``: the same files as one process)."""
RANDOM_INIT = "random init"
"""Method name of the runs' initial weights."""
HANDCRAFTED = "handcrafted"
"""Method name of the baseline rows (one evaluation, no seeds)."""
METRICS = {
    "staging": ("balanced_accuracy", "macro_f1", "kappa", "kappa_4class", "macro_auroc"),
    "missing_modalities": ("balanced_accuracy", "macro_f1", "kappa", "kappa_4class", "macro_auroc"),
    "apnea_hypopnea": ("auroc", "auprc"),
    "arousal": ("auroc", "auprc"),
    "retrieval": ("R@1", "R@10"),
}
"""Task -> the metrics pooled over seeds."""
E2E_TASKS = ("staging", "apnea_hypopnea", "arousal")
"""Tasks the end-to-end model can be trained for (its labels: stages, apnea / hypopnea, arousal per window)."""


@dataclass(frozen=True)
class Sizes:
    """How big the experiment is (keys of a ``--sizes`` YAML file; the defaults are the full experiment)."""

    nights: int = 8  #: pretraining nights (one per subject)
    eval_nights: int = 8  #: evaluation nights (fresh people: generator seed ``eval_seed``)
    hours: float = 9.0  #: night length before compression
    compress: int = 1  #: every K-th epoch of a full night (``synth-psg --compress``)
    seed: int = 0  #: generator seed of the pretraining nights
    eval_seed: int = 1000  #: generator seed of the evaluation nights (must differ)
    steps: int | None = None  #: training steps (None: the config's ``train.max_steps``)
    batch: int | None = None  #: items per step (None: the config's ``train.batch_size``)
    candidates: int = 1000  #: retrieval candidates per query
    shots: int = 50  #: labelled windows per class in few-shot staging
    draws: int = 3  #: few-shot draws per fold
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])  #: pretraining seeds
    losses: list[str] = field(default_factory=lambda: list(LOSSES))  #: losses compared
    e2e_steps: int = 300  #: training steps of each end-to-end fit (fixed a priori; 0: no end-to-end rows)
    e2e_lr: float = 1e-3  #: AdamW learning rate of the end-to-end model (fixed a priori)
    e2e_tasks: list[str] = field(default_factory=lambda: list(E2E_TASKS))  #: tasks with an end-to-end row
    val_nights: int = 6  #: validation nights choosing each loss's setting (0: the config's settings, no choice)
    val_seed: int = 2000  #: generator seed of the validation nights (other people again)
    grid: dict[str, dict[str, list]] = field(default_factory=lambda: dict(DEFAULT_GRID))  #: loss -> settings tried
    select_seeds: int = 1  #: pretraining seeds (the first of ``seeds``) each grid value trains for the choice
    retrieval_nights: int = 0  #: long nights for retrieval alone (0: retrieval on the evaluation nights)
    retrieval_hours: float = 6.0  #: their length, uncompressed (N candidates need N / 2 windows per night)
    retrieval_seed: int = 3000  #: generator seed of the retrieval nights (other people again)


class Caches(NamedTuple):
    """The experiment's prepared night sets (None: a set the sizes do not ask for)."""

    pretrain: Path
    evaluation: Path
    validation: Path | None
    retrieval: Path | None


def load_sizes(path: str | Path | None) -> Sizes:
    """:class:`Sizes` from a YAML file (None: the defaults) by :func:`.knobs.load_knobs` (unknown keys and
    values of the wrong kind are errors naming the file); equal night seeds are refused."""
    from .knobs import load_knobs

    sizes = load_knobs(Sizes, path)
    seeds = [sizes.seed, sizes.eval_seed, sizes.val_seed] + ([sizes.retrieval_seed] if sizes.retrieval_nights else [])
    if len(set(seeds)) < len(seeds):
        raise ValueError(
            f"{path}: seed, eval_seed, val_seed (and retrieval_seed) must differ (each night set is other people)"
        )
    check_grid(sizes.grid, str(path))
    if not 1 <= sizes.select_seeds <= len(sizes.seeds):
        raise ValueError(f"{path}: select_seeds {sizes.select_seeds}: expected 1 to {len(sizes.seeds)} (the seeds)")
    if set(sizes.e2e_tasks) - set(E2E_TASKS):
        raise ValueError(f"{path}: e2e_tasks {sizes.e2e_tasks}: expected some of {list(E2E_TASKS)}")
    return sizes


def cache_modalities(options: dict[str, Any]) -> str:
    """``--modalities`` of ``mvapp data prepare`` for a config's ``data.options.modalities``: its preset
    name, or the comma list of the groups its modalities take."""
    spec = options.get("modalities", "sleepfm")
    if isinstance(spec, str):
        return spec
    groups = [g for value in spec.values() for g in (value["groups"] if isinstance(value, dict) else value.groups)]
    return ",".join(dict.fromkeys(groups))


def night_set(
    data: Path,
    name: str,
    nights: int,
    seed: int,
    sizes: Sizes,
    modalities: str,
    prepare_args: tuple[str, ...] = (),
    length: tuple[float, int] | None = None,
) -> Path:
    """``data/<name>_cache``: ``nights`` whole-PSG nights (generator seed ``seed``; ``length``: hours and
    compression, default the sizes') synthesized into ``data/<name>_raw`` and prepared with ``--modalities``
    (and ``prepare_args``, e.g. ``--max-rate 50``), each step skipped when its output exists."""
    raw, cache = data / f"{name}_raw", data / f"{name}_cache"
    hours, compress = length or (sizes.hours, sizes.compress)
    if not raw.is_dir() or not any(raw.glob("*")):
        mvapp(
            *("data", "synth-psg", "--subjects", str(nights), "--format", "physionet2018", "--signals", "psg"),
            *("--hours", str(hours), "--compress", str(compress), "--seed", str(seed), "--out", str(raw)),
            *("--workers", str(min(SYNTH_WORKERS, nights))),
        )
    if not (cache / "manifest.json").is_file():
        mvapp(
            *("data", "prepare", "physionet2018", "--source", str(raw), "--out", str(cache)),
            *("--modalities", modalities, *prepare_args),
        )
    return cache


def prepare_data(data: Path, sizes: Sizes, modalities: str) -> Caches:
    """The night sets' caches under ``data`` (made unless present; no validation nights when
    ``sizes.val_nights`` is 0, no retrieval nights when ``sizes.retrieval_nights`` is 0)."""
    data.mkdir(parents=True, exist_ok=True)
    pretrain = night_set(data, "psg_pretrain", sizes.nights, sizes.seed, sizes, modalities)
    evaluation = night_set(data, "psg_eval", sizes.eval_nights, sizes.eval_seed, sizes, modalities)
    validation = retrieval = None
    if sizes.val_nights:
        validation = night_set(data, "psg_val", sizes.val_nights, sizes.val_seed, sizes, modalities)
    if sizes.retrieval_nights:
        retrieval = night_set(
            data,
            "psg_retrieval",
            sizes.retrieval_nights,
            sizes.retrieval_seed,
            sizes,
            modalities,
            length=(sizes.retrieval_hours, 1),
        )
    return Caches(pretrain, evaluation, validation, retrieval)


def run_config(
    config: Path, cache: Path, runs: Path, loss: str, seed: int, sizes: Sizes, overrides: list[str], setting: dict
) -> Any:
    """The training config of run ``runs/<config stem>_<loss>[_<setting tag>]_seed<seed>``: every pretraining
    night trained on (no held-out split: evaluation uses its own nights), the sizes' steps and batch, the
    loss ``setting`` (:mod:`.psg_select`), ``overrides`` last."""
    from ..config import load_config

    sized = [f"train.max_steps={sizes.steps}"] if sizes.steps else []
    sized += [f"train.batch_size={sizes.batch}"] if sizes.batch else []
    settings = [
        f"output.runs_dir={runs}",
        f"data.options.cache={cache}",
        "data.options.test_fraction=0",
        f"train.seed={seed}",
        f"loss.name={loss}",
        *sized,
        *setting_overrides(setting),
        *overrides,
    ]
    tag = f"_{setting_tag(setting)}" if setting else ""
    return load_config(config, settings, name=f"{config.stem}_{loss}{tag}_seed{seed}")


def trainer(config: Path, cache: Path, runs: Path, sizes: Sizes, overrides: list[str]) -> Any:
    """``(loss, seed, setting) -> run folder``: the run trained unless finished (``ensure_trained``,
    refuse-mismatch)."""
    from .training import ensure_trained

    def train(loss: str, seed: int, setting: dict) -> Path:
        cfg = run_config(config, cache, runs, loss, seed, sizes, overrides, setting)
        ensure_trained(cfg, "refuse-mismatch")
        return cfg.run_dir

    return train


def train_runs(train: Any, sizes: Sizes, chosen: dict[str, dict]) -> dict[tuple[str, int], Path]:
    """``{(loss, seed): run folder}`` of every loss at its ``chosen`` setting and every pretraining seed."""
    return {(loss, seed): train(loss, seed, chosen[loss]) for loss in sizes.losses for seed in sizes.seeds}


def collapse_notes(runs: dict[tuple[str, int], Path]) -> list[str]:
    """A note per run whose projections collapsed (:func:`~multiview_app.train.diagnostics.run_collapse`)."""
    from ..train.diagnostics import run_collapse

    found = {(loss, seed): run_collapse(run) for (loss, seed), run in runs.items()}
    return [
        f"{loss} seed {seed}: projections collapsed (last diag/uniformity {u:.4f}): its retrieval ranks nearly one "
        "point per modality; its other rows read the encoder features under that head"
        for (loss, seed), u in found.items()
        if u is not None
    ]


def window_order(meta: dict[str, list[Any]], windows: Any) -> np.ndarray:
    """Item index of each evaluation window ``(n,)``: items matched by (night, onset) to ``windows``
    (``EvalWindows`` of the cache); a window without an item is an error naming it."""
    position = {(str(r), float(o)): i for i, (r, o) in enumerate(zip(meta["recording"], meta["onset"]))}
    keys = [(str(n), float(o)) for n, o in zip(windows.nights, windows.onsets)]
    missing = [k for k in keys if k not in position]
    if missing:
        raise ValueError(f"{windows.dataset}: {len(missing)} windows without an embedded item, e.g. {missing[0]}")
    return np.array([position[k] for k in keys])


def eval_split(cfg: Any, cache: Path) -> tuple[Any, Any]:
    """``(view policy, dataset)`` of every window of ``cache`` under the run config ``cfg`` (no subject
    held out, items with any number of modalities)."""
    from ..data.adapters import build_adapter
    from ..data.views import build_view_policy

    options = {**cfg.data.options, "cache": str(cache), "test_fraction": 0.0, "test_subjects": None}
    options.update(val_fraction=0.0, val_subjects=None, min_modalities=1)
    adapter = build_adapter(cfg.data.adapter, options)
    return build_view_policy(cfg.views.policy, cfg.views.k, cfg.views.options, adapter), adapter.split("train")


def cache_embeddings(run_dir: Path, weights: str, cache: Path, output: str = "features") -> Any:
    """Frozen encoder features (``output="features"``; ``"embed"``: the projected, L2-normalized embeddings
    the loss aligns) as ``ModalEmbeddings`` (per modality ``(n, f)``, presence, labels, meta) of every window
    of the modality cache ``cache`` (no split) from the run's ``weights`` (``final`` or ``init``)."""
    from ..models.modal_embed import modality_embeddings
    from ..train.run_io import load_run

    cfg, model = load_run(run_dir, weights)
    policy, dataset = eval_split(cfg, cache)
    return modality_embeddings(model, policy, dataset, output=output)


def embed(run_dir: Path, weights: str, cache: Path, windows: Any, output: str = "features") -> dict[str, np.ndarray]:
    """``{modality: (n, f)}`` encoder features (or, ``output="embed"``, projected embeddings) of the
    evaluation windows (in ``windows``' order) from the run's ``weights`` (``final`` or ``init``); a
    modality some window lacks is an error naming it."""
    found = cache_embeddings(run_dir, weights, cache, output)
    order = window_order(found.meta, windows)
    lacking = [m for m, present in found.present.items() if not present[order].all()]
    if lacking:
        raise ValueError(f"{cache}: evaluation windows without modalities {lacking}; use nights that have them all")
    return {m: x[order] for m, x in found.per_modality.items()}


def end_to_end_row(run_dir: Path, cache: Path, windows: Any, sizes: Sizes) -> Any:
    """The end-to-end supervised row (:class:`~.psg_end_to_end.EndToEnd`): the run's architecture from its
    initial weights, reading the evaluation windows of ``cache`` in ``windows``' order, with the sizes'
    budget (batch: the sizes', else the run's)."""
    from ..data.eeg.stages import EPOCH_SECONDS
    from ..train.run_io import load_run
    from .psg_end_to_end import EndToEnd, window_inputs

    cfg, model = load_run(run_dir, "init")
    policy, dataset = eval_split(cfg, cache)
    meta = {"recording": [dataset.recordings[r]["recording"] for r in dataset.recording_of]}
    meta["onset"] = (dataset.epochs * EPOCH_SECONDS).tolist()
    inputs = window_inputs(dataset, policy, window_order(meta, windows))
    return EndToEnd(model, inputs, sizes.e2e_steps, sizes.e2e_lr, sizes.batch or cfg.train.batch_size)


def tasks_for(windows: Any) -> tuple[str, ...]:
    """Every task of ``evaluate_modalities`` (the events only when the windows carry scored events)."""
    events = ("apnea_hypopnea", "arousal") if windows.targets else ()
    return ("staging", "missing_modalities", *events, "retrieval")


def evaluate_each(run: Any, tasks: tuple[str, ...], notes: list[str], label: str) -> list[dict[str, Any]]:
    """``run(task)`` for each task; a task the data cannot support is left out, its reason noted."""
    from ..eval.modalities import UnsupportedEvaluation

    results = []
    for task in tasks:
        try:
            results.append(run(task))
        except UnsupportedEvaluation as err:
            notes.append(f"{label}, {task}: left out ({err})")
    return results


def feature_tasks(
    run: Path, weights: str, caches: tuple[Path, Path], windows: tuple[Any, Any], options: dict[str, Any]
) -> Any:
    """``task -> result`` of one feature set: the run's frozen encoder features of the evaluation cache
    (``caches[0]``, ``windows[0]``) for every task but retrieval, which ranks its projected embeddings of
    the retrieval cache (``caches[1]``, ``windows[1]``; the same cache when there are no retrieval nights)."""
    from ..eval.modalities import evaluate_modalities

    features = embed(run, weights, caches[0], windows[0])

    def evaluate(task: str) -> dict[str, Any]:
        if task == "retrieval":
            aligned = embed(run, weights, caches[1], windows[1], output="embed")
            return evaluate_modalities(aligned, windows[1], tasks=(task,), **options)[0]
        return evaluate_modalities(features, windows[0], tasks=(task,), **options)[0]

    return evaluate


EVALUATION_FILE = "psg_evaluation_{weights}.json"
"""A run's evaluation results (of its ``weights``), kept in its folder with what they were measured on."""
EVALUATION_CODE = ("eval", "models/modal_embed.py", "data/eeg/modal_views.py", "experiments/psg_modalities.py")
"""Package sources whose digest keys the kept evaluations (a change to them evaluates every run again)."""


@functools.cache
def evaluation_code_digest() -> str:
    """sha256 over the :data:`EVALUATION_CODE` sources (``.py`` files, in path order), read once a process."""
    import hashlib

    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for entry in EVALUATION_CODE:
        for path in sorted((root / entry).rglob("*.py")) if (root / entry).is_dir() else [root / entry]:
            digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def kept_evaluation(run: Path, weights: str, caches: tuple[Path, Path], what: tuple, label: str) -> dict[str, Any]:
    """``{"results", "notes"}`` of one feature set (``what``: ``(windows, options, tasks)`` of
    :func:`feature_tasks` / :func:`evaluate_each`), kept in the run folder (:data:`EVALUATION_FILE`) and reused
    while the weights, the caches' manifests, the options, the tasks and the evaluation code are unchanged, so
    an interrupted or extended experiment evaluates only what it has not."""
    from ..fileio import kept_json, sha256_file
    from ..train.run_io import resolve_weights

    windows, options, tasks = what
    key = {
        "weights": sha256_file(resolve_weights(run, weights)),
        "caches": [sha256_file(Path(cache) / "manifest.json") for cache in caches],
        "options": options,
        "tasks": list(tasks),
        "code": evaluation_code_digest(),
    }

    def evaluate() -> dict[str, Any]:
        notes: list[str] = []
        results = evaluate_each(feature_tasks(run, weights, caches, windows, options), tasks, notes, label)
        return {"results": results, "notes": notes}

    return kept_json(Path(run) / EVALUATION_FILE.format(weights=weights), key, evaluate)


def evaluate_runs(
    runs: dict[tuple[str, int], Path], cache: Path, sizes: Sizes, notes: list[str], retrieval: Path | None = None
) -> tuple[dict[str, dict[int, list]], list[dict[str, Any]], Any]:
    """``({method: {seed: results}}, baseline results, windows)``: each run's learned features and (per seed,
    from the first loss's run) its random-init features through ``evaluate_modalities`` (retrieval on the
    ``retrieval`` nights' cache when given, else on ``cache``); the handcrafted baselines of ``cache``, the
    end-to-end model and the retrieval's references (the stage + events oracle, the state read from each
    modality's handcrafted features) once (:func:`evaluate_baselines`), on the same folds, draws, queries and
    candidates."""
    from ..eval.modalities import cache_baselines
    from ..train.run_io import load_run_config

    windows, baseline_rows, info = cache_baselines(cache)
    notes += info["notes"] + [f"{row}: {n} windows failed (column medians)" for row, n in info["failed"].items() if n]
    pair = (cache, retrieval or cache)
    retrieval_windows, retrieval_rows = (windows, baseline_rows)
    if retrieval is not None:
        retrieval_windows, retrieval_rows, found = cache_baselines(retrieval)
        notes += [
            f"retrieval nights, {row}: {n} windows failed (column medians)" for row, n in found["failed"].items() if n
        ]
    both = (windows, retrieval_windows)
    first = runs[(sizes.losses[0], sizes.seeds[0])]
    reader = handcrafted_by_modality(retrieval_rows, load_run_config(first).data.options.get("modalities", "sleepfm"))
    tasks = tasks_for(windows)
    options = dict(shots=sizes.shots, seeds=sizes.draws, n_candidates=sizes.candidates)
    per_method: dict[str, dict[int, list]] = defaultdict(dict)
    jobs = [(loss, seed, run, "final") for (loss, seed), run in runs.items()]
    jobs += [(RANDOM_INIT, seed, runs[(sizes.losses[0], seed)], "init") for seed in sizes.seeds]
    for position, (method, seed, run, weights) in enumerate(jobs, 1):
        print(f"evaluating {method} seed {seed} ({position}/{len(jobs)} feature sets)", file=sys.stderr, flush=True)
        kept = kept_evaluation(run, weights, pair, (both, options, tasks), f"{method} seed {seed}")
        per_method[method][seed] = kept["results"]
        notes += kept["notes"]
    e2e = end_to_end_row(first, cache, windows, sizes) if sizes.e2e_steps > 0 and sizes.e2e_tasks else None
    return dict(per_method), evaluate_baselines(baseline_rows, e2e, both, tasks, sizes, notes, reader), windows


def handcrafted_by_modality(rows: dict[str, np.ndarray], modalities: Any) -> dict[str, np.ndarray]:
    """``{modality: (n, f)}``: the handcrafted baseline ``rows`` of each modality's groups side by side
    (``modalities``: the run's ``data.options.modalities``); a modality with none is left out."""
    from ..data.eeg.modal_views import resolve_modalities
    from ..eval.modalities.cache import BASELINES

    group_of = {name: group for name, group, _ in BASELINES.values()}
    out = {}
    for modality, spec in resolve_modalities(modalities).items():
        parts = [x for name, x in rows.items() if group_of.get(name) in spec.groups]
        if parts:
            out[modality] = np.hstack(parts)
    return out


def evaluate_baselines(
    rows: dict[str, Any],
    e2e: Any,
    windows: tuple[Any, Any],
    tasks: tuple[str, ...],
    sizes: Sizes,
    notes: list[str],
    reader: dict[str, np.ndarray] | None = None,
) -> list[dict[str, Any]]:
    """The rows evaluated once, with the runs' folds and few-shot draws: on the staging and event tasks
    among ``tasks`` (evaluation windows ``windows[0]``), the handcrafted ``rows`` and, for the sizes'
    ``e2e_tasks``, the end-to-end model ``e2e`` (trained per fold; None: no end-to-end row); on retrieval
    (``windows[1]``, the runs' queries and candidates), the stage + events oracle and, with ``reader``
    (modality -> handcrafted features of ``windows[1]``), the state read from each modality."""
    from ..eval.modalities import evaluate_staging, evaluate_state_oracle, evaluate_state_reader
    from ..eval.modalities.events import evaluate_events

    def references() -> dict[str, Any]:
        table = evaluate_state_oracle(windows[1], n_candidates=sizes.candidates)
        if reader and len(reader) > 1:
            table["rows"].update(evaluate_state_reader(reader, windows[1], n_candidates=sizes.candidates)["rows"])
        return table

    def with_e2e(task: str) -> dict[str, Any]:
        return {**rows, E2E_ROW: e2e} if e2e is not None and task in sizes.e2e_tasks else rows

    evaluation = windows[0]
    single = {
        "staging": lambda: evaluate_staging(with_e2e("staging"), evaluation, shots=sizes.shots, seeds=sizes.draws),
        "apnea_hypopnea": lambda: evaluate_events(with_e2e("apnea_hypopnea"), evaluation, "apnea_hypopnea"),
        "arousal": lambda: evaluate_events(with_e2e("arousal"), evaluation, "arousal"),
        "retrieval": references,
    }
    return evaluate_each(lambda t: single[t](), tuple(t for t in tasks if t in single), notes, "baselines")


TABLE_NAMES = {"staging": "staging", "missing_modalities": "missing modalities"}
"""Staging-type result ``task`` -> the stem of its pooled tables (``<stem>, <setting>``)."""


def flat_values(result: dict[str, Any]) -> dict[tuple[str, str, str], float]:
    """``{(table, row, metric): value}`` of one evaluator result (staging: one table per setting)."""
    metrics = METRICS[result["task"]]
    if result["task"] in TABLE_NAMES:
        stem = TABLE_NAMES[result["task"]]
        blocks = {f"{stem}, {setting}": block["rows"] for setting, block in result["settings"].items()}
    else:
        blocks = {result["task"].replace("_", " / "): result["rows"]}
    out = {}
    for table, rows in blocks.items():
        for name, cells in rows.items():
            row = row_label(table, name)
            out.update({(table, row, m): float(cells[m]["value"]) for m in metrics if m in cells})
            if "ahi" in cells:
                out[(table, row, "AHI spearman")] = float(cells["ahi"]["spearman"])
    return out


def pool(per_method: dict[str, dict[int, list]], baselines: list[dict[str, Any]]) -> dict[str, dict[str, dict]]:
    """``{table: {"method: row": {metric: [per-seed values]}}}`` (baseline rows under their own name)."""
    pooled: dict[str, dict[str, dict[str, list[float]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for method, seeds in per_method.items():
        for results in seeds.values():
            for result in results:
                for (table, row, metric), value in flat_values(result).items():
                    pooled[table][f"{method}: {row}"][metric].append(value)
    for result in baselines:
        for (table, row, metric), value in flat_values(result).items():
            pooled[table][row][metric].append(value)
    return json.loads(json.dumps(pooled))


def spread_text(values: list[float]) -> str:
    """``0.712 [0.701, 0.730]`` (mean [min, max] over seeds), one value alone, ``n/a`` when NaN."""
    finite = [v for v in values if np.isfinite(v)]
    if not finite:
        return "n/a"
    if len(values) == 1:
        return f"{finite[0]:.3f}"
    return f"{np.mean(finite):.3f} [{min(finite):.3f}, {max(finite):.3f}]"


def pooled_tables(pooled: dict[str, dict[str, dict]]) -> list[str]:
    """Markdown of the pooled tables: rows ``method: row``, cells mean [min, max] over seeds."""
    from ..eval.modalities.tables import LABELS, markdown

    lines = []
    for table, rows in pooled.items():
        metrics = list(dict.fromkeys(m for cells in rows.values() for m in cells))
        body = [
            [name, *(spread_text(cells.get(m, [np.nan])) for m in metrics), str(max(map(len, cells.values())))]
            for name, cells in rows.items()
        ]
        lines += ["", f"**{table}** (mean [min, max] over seeds)", ""]
        lines += markdown(["features", *(LABELS.get(m, m) for m in metrics), "seeds"], body)
    return lines


def goals(pooled: dict[str, dict[str, dict]], per_method: dict[str, dict[int, list]], sizes: Sizes) -> list[dict]:
    """The issue's goals as measured on the pooled tables (:mod:`.psg_goals`)."""
    context = {"losses": sizes.losses, "candidates": sizes.candidates, "paired": paired_vs_brain(per_method)}
    return measure_goals(pooled, context)


def retrieval_text(sizes: dict[str, Any]) -> str:
    """Where retrieval ran, for the page's first paragraph."""
    if not sizes.get("retrieval_nights"):
        return "retrieval on the evaluation nights; "
    return (
        f"retrieval on {sizes['retrieval_nights']} further nights of {sizes['retrieval_hours']} h, uncompressed "
        f"(seed {sizes['retrieval_seed']}); "
    )


def report(summary: dict[str, Any], per_method: dict[str, dict[int, list]], baselines: list[dict]) -> str:
    """The Markdown page: what ran, the pooled tables, the notes, then every run's evaluator tables (their
    per-subject intervals)."""
    from ..eval.modalities import format_tables

    sizes = summary["sizes"]
    lines = [
        f"# PSG modalities as views ({summary['config']})",
        "",
        f"`{summary['command']}`",
        "",
        f"Pretrained on {sizes['nights']} synthetic whole-PSG nights (generator seed {sizes['seed']}), evaluated on "
        f"{sizes['eval_nights']} fresh nights (seed {sizes['eval_seed']}), {sizes['hours']} h / {sizes['compress']}; "
        f"{retrieval_text(sizes)}"
        f"losses {', '.join(sizes['losses'])}; pretraining seeds {', '.join(map(str, sizes['seeds']))}; frozen "
        "encoder features (retrieval: the projected embeddings the loss aligns), subject folds of the evaluators.",
        *selection_markdown(summary.get("selection", []), Sizes(**sizes)),
        *pooled_tables(summary["pooled"]),
        *goals_markdown(summary.get("goals", [])),
        "",
        "## Notes",
        "",
        *([f"- {note}" for note in summary["notes"]] or ["- none"]),
        "",
        "## Per run (value (subject mean [95 % BCa interval]))",
    ]
    for method, seeds in per_method.items():
        for seed, results in seeds.items():
            lines += ["", f"### {method}, seed {seed}", "", format_tables(results) if results else "(nothing)"]
    if baselines:
        lines += ["", f"### {HANDCRAFTED} baselines and {E2E_ROW}", "", format_tables(baselines)]
    return "\n".join(lines).rstrip() + "\n"


def retrieval_matrix(pooled: dict[str, dict[str, dict]], method: str, modalities: list[str]) -> np.ndarray:
    """``(k, k)`` mean recall@10 over seeds of ``method``'s pair ``row -> column`` (NaN on the diagonal)."""
    rows = pooled.get("retrieval", {})
    matrix = np.full((len(modalities), len(modalities)), np.nan)
    for i, a in enumerate(modalities):
        for j, b in enumerate(modalities):
            values = rows.get(f"{method}: {a} -> {b}", {}).get("R@10", [])
            matrix[i, j] = np.mean(values) if i != j and values else np.nan
    return matrix


def ahi_points(per_method: dict[str, dict[int, list]], baselines: list[dict]) -> dict[str, list[tuple[float, float]]]:
    """``{label: [(true, predicted AHI) per night and seed]}`` of each method's ``all`` row and the
    airflow-amplitude baseline."""
    points: dict[str, list[tuple[float, float]]] = defaultdict(list)
    sources = [(m, r, "all") for m, seeds in per_method.items() for rs in seeds.values() for r in rs]
    sources += [(HANDCRAFTED, r, "airflow amplitude") for r in baselines]
    for method, result, row in sources:
        cells = result.get("rows", {}).get(row, {}) if result["task"] == "apnea_hypopnea" else {}
        nights = cells.get("ahi", {}).get("nights", {})
        label = row if method == HANDCRAFTED else method
        points[label] += [(v["true"], v["predicted"]) for v in nights.values()]
    return dict(points)


def _matrix_panel(ax: Any, matrix: np.ndarray, modalities: list[str], title: str) -> None:
    image = ax.imshow(matrix, vmin=0.0, vmax=1.0, cmap="viridis")
    ax.set_xticks(range(len(modalities)), modalities, rotation=45, ha="right")
    ax.set_yticks(range(len(modalities)), modalities)
    for (i, j), value in np.ndenumerate(matrix):
        if np.isfinite(value):
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", color="w" if value < 0.6 else "k", fontsize=8)
    ax.set_xlabel("candidates")
    ax.set_ylabel("query")
    ax.set_title(title, fontsize=9)
    ax.figure.colorbar(image, ax=ax, fraction=0.046)


def _staging_panel(ax: Any, pooled: dict[str, dict[str, dict]], methods: list[str], modalities: list[str]) -> None:
    table = pooled.get("staging, all labels", {})
    groups = [*modalities, "all"]
    width = 0.8 / max(len(methods), 1)
    for i, method in enumerate(methods):
        values = [table.get(f"{method}: {g}", {}).get("balanced_accuracy", [np.nan]) for g in groups]
        means = [np.nanmean(v) for v in values]
        spread = np.array([[m - np.nanmin(v), np.nanmax(v) - m] for m, v in zip(means, values)]).T
        ax.bar(np.arange(len(groups)) + i * width, means, width, yerr=spread, label=method, capsize=2)
    ax.set_xticks(np.arange(len(groups)) + 0.4 - width / 2, groups, rotation=45, ha="right")
    ax.set_ylabel("balanced accuracy (all labels)")
    ax.set_ylim(0, 1)
    ax.set_title("staging per modality (bars: mean, whiskers: min-max over seeds)", fontsize=9)
    ax.legend(fontsize=7)


def _ahi_panel(ax: Any, points: dict[str, list[tuple[float, float]]], note: str) -> None:
    for label, pairs in points.items():
        if pairs:
            true, predicted = np.array(pairs).T
            ax.scatter(true, predicted, s=14, label=label, alpha=0.7)
    if any(points.values()):
        top = max(max(max(p) for p in pairs) for pairs in points.values() if pairs) * 1.05 + 1e-9
        ax.plot([0, top], [0, top], color="grey", lw=0.8, ls="--")
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, note, ha="center", va="center", wrap=True, fontsize=8, transform=ax.transAxes)
    ax.set_xlabel("true AHI (events / h)")
    ax.set_ylabel("predicted AHI")
    ax.set_title("AHI per test night (all modalities; dashed: identity)", fontsize=9)


def figure(path: Path, summary: dict[str, Any], per_method: dict[str, dict[int, list]], baselines: list) -> Path:
    """``path`` (PNG): retrieval recall@10 matrix of the first loss, per-modality staging bars of every
    method, AHI scatter (predicted vs true per night). Matplotlib's Agg backend (no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modalities, first = summary["modalities"], summary["sizes"]["losses"][0]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    chance = 10 / summary["sizes"]["candidates"]
    matrix = retrieval_matrix(summary["pooled"], first, modalities)
    _matrix_panel(axes[0], matrix, modalities, f"retrieval recall@10, {first} (chance {chance:.3f})")
    _staging_panel(axes[1], summary["pooled"], [*summary["sizes"]["losses"], RANDOM_INIT], modalities)
    skipped = [n for n in summary["notes"] if "apnea_hypopnea: left out" in n]
    _ahi_panel(axes[2], ahi_points(per_method, baselines), skipped[0] if skipped else "no AHI evaluated")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def experiment(
    config: Path,
    out: Path,
    data: Path,
    sizes: Sizes,
    overrides: list[str],
    command: str,
    runs_dir: Path | None = None,
    train_only: bool = False,
) -> dict[str, Any]:
    """The whole experiment (module docstring); writes ``OUT/psg_modalities.{md,json,png}`` and returns the
    summary (``pooled``, ``notes``, ``runs``, ``selection``, ``modalities``, the paths written). ``runs_dir``:
    where runs live (default ``OUT/runs``); ``train_only``: stop after the settings are chosen and every run
    is trained (returns ``runs`` and ``selection``), e.g. to train loss subsets in parallel processes."""
    from ..config import load_config

    cfg = load_config(config, overrides)
    caches = prepare_data(data.resolve(), sizes, cache_modalities(cfg.data.options))
    train = trainer(config, caches.pretrain, (runs_dir or out / "runs").resolve(), sizes, overrides)
    chosen, selection = select_settings(train, caches.validation, sizes)
    runs = train_runs(train, sizes, chosen)
    named_runs = {f"{loss} seed {seed}": str(run) for (loss, seed), run in runs.items()}
    if train_only:
        return {"runs": named_runs, "selection": selection}
    notes: list[str] = collapse_notes(runs)
    per_method, baselines, _ = evaluate_runs(runs, caches.evaluation, sizes, notes, caches.retrieval)
    summary = {
        "command": command,
        "config": str(config),
        "sizes": asdict(sizes),
        "modalities": list(cfg.model.encoders),
        "caches": {name: str(path) for name, path in caches._asdict().items()},
        "selection": selection,
        "runs": named_runs,
        "pooled": pool(per_method, baselines),
        "notes": notes,
    }
    summary["goals"] = goals(summary["pooled"], per_method, sizes)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{TABLE}.md").write_text(report(summary, per_method, baselines))
    summary["figure"] = str(figure(out / f"{TABLE}.png", summary, per_method, baselines))
    details = {"per_run": {m: {str(s): r for s, r in seeds.items()} for m, seeds in per_method.items()}}
    details["baselines"] = baselines
    (out / f"{TABLE}.json").write_text(json.dumps({**summary, **details}, indent=1, default=plain_json) + "\n")
    return summary


__all__ = ["LOSSES", "TABLE", "Sizes", "evaluate_runs", "experiment", "figure", "load_sizes", "pool", "report"]
