"""``mvapp experiment domains-grid``: the leave-one-domain-out (+ domain adaptation) grid on the digit domains
(M3G Table 2 / Fig. 2) with DomainBed's model selection (training-domain validation).

For every loss (``configs/domains_digits_<loss>.yaml``; label-free rows:
``configs/domains_digits_<loss>_labelfree.yaml``), held-out domain and seed: one pretraining run on the other
domains, evaluated by :func:`.domains.evaluate_with_erm` (random-init and ERM references, checkpoint and probe C
chosen on the seen domains' validation share). Losses in ``adapt_losses`` also run the adaptation protocol
(``<loss>+adapt`` rows), those in ``nn_losses`` its nearest-neighbour variant (``<loss>+adapt_nn``). The tables,
the 1-vs-1 figure and the random-init domain-shift matrix then go into the section between the ``domains``
markers of ``--docs``.

Groups (held-out domain, seed) are planned seed-major, so an interrupted sweep leaves whole groups finished and
every seed covers all domains in turn; ``--jobs N`` deals them round robin over N worker processes of this
command (a group's runs, ERM run and reference scores belong to one worker). Finished runs and evaluations are
reused (:mod:`.domains`), so the command resumes.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_LOSSES = ("byol_ave", "infonce_ave", "m3g")
"""The M3G paper's Table 2 losses."""
START, END = "<!-- domains:start -->", "<!-- domains:end -->"
"""The markers of the section the grid (re)writes in ``--docs``."""
MODES = ("train", "no-train", "pretrain-only", "only-finished")
"""``train``: train and evaluate what is missing; ``no-train``: evaluate finished pretraining only;
``pretrain-only``: train, evaluate nothing; ``only-finished``: tables from the evaluations already written."""


@dataclass(frozen=True)
class GridKnobs:
    """Knobs of ``mvapp experiment domains-grid`` (keys of ``configs/experiment_domains_grid.yaml``)."""

    losses: tuple[str, ...] = DEFAULT_LOSSES  #: label-conditioned rows
    label_free_losses: tuple[str, ...] = ("m3g",)  #: losses that also get a label-free row
    adapt_losses: tuple[str, ...] = DEFAULT_LOSSES  #: losses that also run the adaptation protocol
    nn_losses: tuple[str, ...] = ()  #: losses that also run the nearest-neighbour adaptation variant
    holdouts: tuple[str, ...] = ()  #: held-out domains (empty: every domain)
    seeds: tuple[int, ...] = (0, 1, 2)  #: training seeds
    erm: bool = True  #: the supervised ERM baseline in new evaluations
    erm_steps: int | None = None  #: ERM's own budget (None: the evaluator's, 600)
    erm_seeds: tuple[int, ...] | None = None  #: seeds whose new evaluations include ERM (None: every seed)
    max_candidates: int | None = None  #: at most N evenly spaced checkpoints per encoder (None: every one)
    root: str = "data/digit-domains"  #: the digit domains, written first when missing
    configs: str = "configs/domains_digits_{loss}.yaml"  #: pretraining config of a row ({loss} replaced)
    label_free_configs: str = "configs/domains_digits_{loss}_labelfree.yaml"  #: that of a label-free row
    threads: int = 1  #: torch threads of the evaluations (0: automatic; MVAPP_NUM_THREADS wins)


@dataclass(frozen=True)
class Row:
    """One row of the grid: its name, pretraining config, protocols and extra config overrides."""

    name: str
    config: str
    protocols: tuple[str, ...]
    extra: tuple[str, ...] = ()


@dataclass(frozen=True)
class Planned:
    """One planned evaluation: a row's run for one held-out domain, seed and protocol."""

    holdout: str
    seed: int
    row: str
    protocol: str
    cfg: Any  #: the run's :class:`multiview_app.config.Config`

    @property
    def done(self) -> Path:
        """The evaluation's JSON (present once evaluated)."""
        from ..eval.domain_report import KIND

        return self.cfg.run_dir / "eval" / f"{KIND}.json"

    @property
    def label(self) -> str:
        """``<row>[+adapt] <holdout> s<seed>`` for progress lines and the missing / failed lists."""
        adapt = "+adapt" if self.protocol == "adaptation" and "+adapt" not in self.row else ""
        return f"{self.row}{adapt} {self.holdout} s{self.seed}"


def plan_rows(knobs: GridKnobs) -> list[Row]:
    """The grid's rows in table order: each loss (and its ``+adapt_nn`` variant), then the label-free rows."""
    rows = []
    for loss in knobs.losses:
        config = knobs.configs.format(loss=loss)
        both = ("generalization", "adaptation")
        rows.append(Row(loss, config, both if loss in knobs.adapt_losses else both[:1]))
        if loss in knobs.nn_losses:
            rows.append(
                Row(f"{loss}+adapt_nn", config, ("adaptation",), ("data.options.adapt_views=nearest", "views.k=4"))
            )
    rows += [
        Row(f"{loss} (label-free)", knobs.label_free_configs.format(loss=loss), ("generalization",))
        for loss in knobs.label_free_losses
    ]
    if not rows:
        raise ValueError("domains-grid: no rows planned (the knobs losses and label_free_losses are both empty)")
    return rows


def plan_groups(knobs: GridKnobs, rows: list[Row], groups: str | None = None) -> list[tuple[str, int]]:
    """``(held-out domain, seed)`` groups, seed-major; ``groups`` (a worker's share, ``domain:seed,...``) wins."""
    if groups:
        return [(h, int(s)) for h, _, s in (g.partition(":") for g in groups.split(",") if g)]
    from .domains import all_domains

    holdouts = list(knobs.holdouts) or all_domains(rows[0].config, root_overrides(knobs))
    return [(h, s) for s in knobs.seeds for h in holdouts]


def root_overrides(knobs: GridKnobs) -> list[str]:
    """The config overrides every run of the grid shares (the digit domains' folder)."""
    return [f"data.options.root={knobs.root}"]


def plan(knobs: GridKnobs, rows: list[Row], groups: list[tuple[str, int]], out: Path) -> list[Planned]:
    """Every planned evaluation: groups in order, then rows, then protocols."""
    from .domains import run_config

    planned = []
    for holdout, seed in groups:
        for row in rows:
            for protocol in row.protocols:
                overrides = [*root_overrides(knobs), *row.extra]
                cfg = run_config(row.config, out, holdout, seed, protocol, overrides)
                planned.append(Planned(holdout, seed, row.name, protocol, cfg))
    return planned


def evaluate_planned(p: Planned, knobs: GridKnobs, out: Path, mode: str) -> dict[str, Any] | None:
    """Pretrain ``p`` unless done, then (unless ``pretrain-only``) evaluate it with its ERM baseline and
    save the evaluation (with the pretraining's wall and CPU seconds) where :attr:`Planned.done` says."""
    from ..train.run_io import atomic_write_json
    from .domains import REFERENCE_CACHE, ensure_pretrained, evaluate_with_erm

    pretrain_s, pretrain_cpu_s = ensure_pretrained(p.cfg)
    if mode == "pretrain-only":
        return None
    erm_seed = knobs.erm_seeds is None or p.seed in knobs.erm_seeds
    result = evaluate_with_erm(
        p.cfg.run_dir,
        erm=knobs.erm and "label-free" not in p.row and erm_seed,
        erm_steps=knobs.erm_steps,
        erm_cache=out / "erm",
        max_candidates=knobs.max_candidates,
        threads=knobs.threads or None,
        reference_cache=out / REFERENCE_CACHE,
    )
    result["pretrain_s"], result["pretrain_cpu_s"] = pretrain_s, pretrain_cpu_s
    atomic_write_json(p.done, result)
    return result


def sweep(
    planned: list[Planned], knobs: GridKnobs, out: Path, mode: str
) -> tuple[list[dict[str, Any]], dict[str, str], list[str]]:
    """Every planned evaluation in order: reused when written, else trained / evaluated as ``mode`` allows.
    Returns (results, failures by label, labels of the missing runs)."""
    results, failures, missing = [], {}, []
    for p in planned:
        if p.done.is_file() and mode != "pretrain-only":
            results.append(json.loads(p.done.read_text()))
            continue
        trained = (p.cfg.run_dir / "model.safetensors").is_file()
        if mode == "only-finished" or (mode == "no-train" and not trained):
            missing.append(p.label + ("" if trained else " (not pretrained)"))
            continue
        print(f"== {p.label}", flush=True)
        try:
            result = evaluate_planned(p, knobs, out, mode)
        except Exception as exc:  # noqa: BLE001 - recorded in the section; the other runs go on
            failures[p.label] = " ".join(str(exc).split())[:300]
            print(f"!! {p.label} failed: {failures[p.label]}", flush=True)
            continue
        if result is not None:
            results.append(result)
    return results, failures, missing


def shift_matrix(knobs: GridKnobs, config: str, out: Path) -> dict[str, dict[str, float]]:
    """Random-init encoder (``config``'s, torch seed 0): probe on one domain, test on each, as
    ``{trained on: {tested on: accuracy}}``; kept in ``out/random_init_shift_matrix.json`` and reused."""
    cached = out / "random_init_shift_matrix.json"
    if cached.is_file():
        return json.loads(cached.read_text())
    import torch

    from ..config import load_config
    from ..data.adapters import build_adapter
    from ..data.views import build_view_policy
    from ..eval.domain_generalization import domain_shift_matrix
    from ..train.run_io import atomic_write_json, build_model_from_spec, model_spec

    cfg = load_config(config, root_overrides(knobs))
    options = {k: v for k, v in cfg.data.options.items() if k not in ("holdout", "adapt")}
    adapter = build_adapter(cfg.data.adapter, options)
    policy = build_view_policy(cfg.views.policy, cfg.views.k, cfg.views.options, adapter)
    torch.manual_seed(0)
    matrix = domain_shift_matrix(build_model_from_spec(model_spec(cfg)), adapter, policy)
    atomic_write_json(cached, matrix)
    return matrix


def format_matrix(matrix: dict[str, dict[str, float]]) -> str:
    """The shift matrix as a Markdown table (accuracy %) and its in-domain and cross-domain means."""
    domains = list(matrix)
    lines = ["| probe trained on \\ tested on | " + " | ".join(domains) + " |", "|---" * (len(domains) + 1) + "|"]
    lines += [f"| {s} | " + " | ".join(f"{100 * matrix[s][t]:.0f}" for t in domains) + " |" for s in domains]
    diagonal = [matrix[d][d] for d in domains]
    off = [matrix[s][t] for s in domains for t in domains if s != t] or [0.0]
    lines += [
        "",
        f"In-domain mean {100 * sum(diagonal) / len(diagonal):.1f} %, cross-domain mean "
        f"{100 * sum(off) / len(off):.1f} % (chance 10 %).",
    ]
    return "\n".join(lines)


def write_section(path: Path, section: str) -> None:
    """Replace the text between the ``domains`` markers of ``path`` (appended when it has none)."""
    from ..fileio import atomic_write_text

    text = path.read_text() if path.is_file() else ""
    block = f"{START}\n{section.rstrip()}\n{END}\n"
    if START in text and END in text:
        text = text[: text.index(START)] + block + text[text.index(END) + len(END) + 1 :]
    else:
        text = text.rstrip() + "\n\n" + block
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)


def job_shares(groups: list[tuple[str, int]], jobs: int) -> list[list[tuple[str, int]]]:
    """Deal the (seed-major) groups round robin over ``jobs`` workers; workers with nothing to do are dropped."""
    shares = [groups[i::jobs] for i in range(max(1, jobs))]
    return [share for share in shares if share]


def worker_command(base: list[str], share: list[tuple[str, int]], index: int, out: Path) -> list[str]:
    """Worker ``index``'s command line: ``base`` (this command's own options but ``--jobs`` / ``--docs`` /
    ``--figures``), its ``--groups`` share and a throw-away ``--docs`` / ``--figures`` under ``out/jobs/``."""
    import sys

    jobs = out / "jobs"
    return [
        *(sys.executable, "-m", "multiview_app.cli", "experiment", "domains-grid", *base),
        *("--groups", ",".join(f"{h}:{s}" for h, s in share), "--jobs", "1"),
        *("--docs", str(jobs / f"job_{index}.md"), "--figures", str(jobs / f"figures_{index}")),
    ]


def run_workers(commands: list[list[str]], out: Path, done_files: list[Path]) -> list[int]:
    """Start one worker per command (log ``out/jobs/job_<i>.log``; torch threads = usable CPUs / workers
    unless ``MVAPP_NUM_THREADS`` is set), wait for all while a progress bar counts the ``done_files`` that
    exist, and return their exit codes; an interrupt terminates the workers (their runs resume later)."""
    import os
    import subprocess

    from ..console import progress
    from ..threads import usable_cpus

    (out / "jobs").mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("MVAPP_NUM_THREADS", str(max(1, usable_cpus().usable // len(commands))))
    workers = []
    try:
        for index, command in enumerate(commands):
            log = open(out / "jobs" / f"job_{index}.log", "a")  # noqa: SIM115 - closed below, after the worker
            print(f"worker {index}: log {log.name}", flush=True)
            workers.append((subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env), log))
        with progress(desc="runs evaluated", total=len(done_files), unit="run") as bar:
            while any(w.poll() is None for w, _ in workers):
                bar.n = sum(path.is_file() for path in done_files)
                bar.set_postfix(workers=sum(w.poll() is None for w, _ in workers))
                time.sleep(5)
    finally:
        for worker, log in workers:
            if worker.poll() is None:
                worker.terminate()
            worker.wait()
            log.close()
    return [worker.returncode for worker, _ in workers]


def setting_text(config: str, knobs: GridKnobs) -> str:
    """The pretraining setting of ``config`` in one sentence (views, batch, steps, optimizer, encoder)."""
    from ..config import load_config

    cfg = load_config(config, root_overrides(knobs))
    views, encoder = cfg.views.options, cfg.model.encoders["image"]
    return (
        f"k = {cfg.views.k} seen domains as views (`{views.get('stacks')}` stack), n = {cfg.train.batch_size}, "
        f"{cfg.train.max_steps} steps (checkpoints every {cfg.train.checkpoint_every}), AdamW lr {cfg.optim.lr}, "
        f"{encoder['name']} (width {encoder.get('width')}) on {views.get('image_size')} px; "
        f"{100 * cfg.data.options.get('val_fraction', 0):.0f} % of every domain's train split held out as "
        "training-domain validation"
    )


def timing_text(results: list[dict[str, Any]]) -> str:
    """Mean pretraining and evaluation wall time of the runs trained by this call ("" when none was)."""
    timed = [r for r in results if r.get("pretrain_s")]
    if not timed:
        return ""
    train_s = sum(r["pretrain_s"] for r in timed) / len(timed)
    eval_s = sum(r["wall_s"] for r in timed) / len(timed)
    return (
        f"Pretraining took {train_s:.0f} s wall per run on average and its evaluation (incl. ERM when not cached, "
        f"features of every checkpoint) {eval_s:.0f} s ({len(timed)} timed run(s))."
    )


PROTOCOL_TEXT = (
    "**Model selection: training-domain validation** (DomainBed): per run, the checkpoint (every saved step and "
    "the final weights) and the probe's C with the best accuracy on the seen domains' validation share; "
    'test-domain ("oracle") selection only in its own, labelled table. Probe: standardized logistic regression '
    "on frozen encoder features. **The label-conditioned rows build each item's k views from class labels** (one "
    "image of the item's class from each seen domain, the M3G paper's construction), so that pretraining uses the "
    "seen domains' labels; the label-free row uses k augmentation views of one image. `random_init` = the run's "
    "initial weights; `erm` = the same backbone trained with a supervised cross-entropy head on the seen domains' "
    "labels, its own step budget, its checkpoint chosen by the same training-domain validation. `<loss>+adapt`: "
    "the target's train images (no labels) joined pretraining as k augmentation views of one image."
)
"""The protocol paragraph of the generated section."""


@dataclass(frozen=True)
class GridRun:
    """Where and how one call of the grid runs (the command line's part; the knobs say what is planned)."""

    out: Path  #: runs, ERM runs, reference scores, tables
    docs: Path  #: Markdown file whose ``domains`` section is (re)written
    figures: Path  #: folder of the 1-vs-1 figure and the adaptation-gain plot
    mode: str = "train"  #: one of :data:`MODES`
    jobs: int = 1  #: worker processes
    groups: str | None = None  #: a worker's share (``domain:seed,...``)
    command: str = "mvapp experiment domains-grid"  #: the command line named in the section
    worker_base: tuple[str, ...] = ()  #: the options every worker repeats (knobs file, --set, --out, --mode)
    started: float = field(default_factory=time.perf_counter)  #: when the call started (perf_counter s)


def run_in_workers(knobs: GridKnobs, run: GridRun, rows: list[Row], groups: list[tuple[str, int]]) -> dict[str, str]:
    """The groups dealt over ``run.jobs`` workers (the shift matrix computed once before); returns the failed
    workers by name."""
    shift_matrix(knobs, rows[0].config, run.out)  # once, not in every worker
    shares = job_shares(groups, run.jobs)
    commands = [worker_command(list(run.worker_base), share, i, run.out) for i, share in enumerate(shares)]
    codes = run_workers(commands, run.out, [p.done for p in plan(knobs, rows, groups, run.out)])
    log = run.out / "jobs"
    return {f"worker {i}": f"exit code {code}; see {log / f'job_{i}.log'}" for i, code in enumerate(codes) if code}


def figure_lines(summary: dict[str, Any], run: GridRun) -> list[str]:
    """Copy the summary's figures into ``run.figures``; the sentence naming them as ``run.docs`` links them."""
    import shutil

    run.figures.mkdir(parents=True, exist_ok=True)
    names = {"heatmaps": "domains_one_vs_one.png", "gain_plot": "domains_adaptation_gain.png"}
    refs = {}
    for key, name in names.items():
        if summary.get(key):
            shutil.copyfile(summary[key], run.figures / name)
            path = (run.figures / name).resolve()
            base = run.docs.resolve().parent.parent
            refs[key] = str(path.relative_to(base)) if path.is_relative_to(base) else str(path)
    text = (
        f"1-vs-1 (Fig. 2): `{refs['heatmaps']}` (probe trained on one seen domain, tested on the unseen one; "
        "mean over runs)."
    )
    return [text + (f" Adaptation gain per target: `{refs['gain_plot']}`." if "gain_plot" in refs else "")]


def section_text(knobs: GridKnobs, rows: list[Row], results: list[dict[str, Any]], run: GridRun, seconds: float) -> str:
    """The section's header: the command, what was planned, the pretraining setting and the protocol."""
    holdouts = sorted({r["holdout"] for r in results})
    labels = [r.name for r in rows if "label-free" not in r.name]
    free = [r.name.split(" ")[0] for r in rows if "label-free" in r.name]
    return (
        f"Produced by `{run.command}` (this call: {seconds:.0f} s, reusing finished runs and evaluations). Rows: "
        f"{', '.join(labels)}" + (f"; label-free {', '.join(free)}" if free else "") + f"; held-out domains: "
        f"{', '.join(holdouts)}; seeds: {', '.join(map(str, knobs.seeds))}. Pretraining: "
        f"{setting_text(rows[0].config, knobs)}. {PROTOCOL_TEXT} {timing_text(results)}"
    )


def report(knobs: GridKnobs, rows: list[Row], results: list[dict[str, Any]], run: GridRun, notes: list[str]) -> str:
    """The whole generated section: title, header, every table, the figures and the shift matrix, ``notes``."""
    from ..eval.domain_report import write_summary

    summary = write_summary(results, run.out)
    matrix = shift_matrix(knobs, rows[0].config, run.out)
    figures = figure_lines(summary, run)
    parts = [
        "## Unseen-domain generalization and domain adaptation on the digit domains (M3G Table 2 / Fig. 2)",
        "",
        section_text(knobs, rows, results, run, time.perf_counter() - run.started),
        "",
        summary["table"],
        *figures,
        "",
        "Domain shift of the data itself (random-init encoder, probe trained on one domain's train split, "
        "accuracy % on each domain's test split):",
        "",
        format_matrix(matrix),
        "",
        *notes,
    ]
    return "\n".join(parts)


def experiment(knobs: GridKnobs, run: GridRun) -> int:
    """Plan, train / evaluate as ``run.mode`` says (in ``run.jobs`` workers when > 1), then write the section
    into ``run.docs`` and print it. Exit status: 0, or 1 when a run or worker failed or nothing was evaluated."""
    from ..data.domains.synth import synth_domains

    if run.mode not in MODES:
        raise ValueError(f"--mode: expected one of {', '.join(MODES)}, got {run.mode!r}")
    if not Path(knobs.root).is_dir():
        print(f"writing the digit domains to {knobs.root}", flush=True)
        synth_domains(Path(knobs.root))
    rows = plan_rows(knobs)
    groups = plan_groups(knobs, rows, run.groups)
    mode, failures = run.mode, {}
    if run.jobs > 1 and mode != "only-finished":
        failures = run_in_workers(knobs, run, rows, groups)
        if mode == "pretrain-only":
            return 1 if failures else 0
        mode = "only-finished"  # the tables: from what the workers finished
    results, failed, missing = sweep(plan(knobs, rows, groups, run.out), knobs, run.out, mode)
    failures.update(failed)
    if mode == "pretrain-only":
        return 1 if failures else 0
    notes = [f"Not run (planned by this command, missing at the time of writing): {'; '.join(missing)}."]
    notes = (notes if missing else []) + [f"Failed: {label}: {err}" for label, err in failures.items()]
    if not results:
        import sys

        print(f"no run evaluated; {len(missing)} planned run(s) missing", *notes, sep="\n", file=sys.stderr)
        return 1
    section = report(knobs, rows, results, run, notes)
    write_section(run.docs, section)
    print(section)
    return 1 if failures else 0


__all__ = [
    "DEFAULT_LOSSES",
    "MODES",
    "GridKnobs",
    "GridRun",
    "Planned",
    "Row",
    "evaluate_planned",
    "experiment",
    "job_shares",
    "format_matrix",
    "plan",
    "plan_groups",
    "plan_rows",
    "shift_matrix",
    "sweep",
    "worker_command",
    "write_section",
]
