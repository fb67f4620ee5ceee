"""Leave-one-domain-out (+ domain adaptation) tables on the embedded digit domains (M3G Table 2 / Fig. 2),
with DomainBed's model selection (training-domain validation).

    python scripts/reproduce/m3g/results_domains.py [--losses byol_ave,infonce_ave,m3g] [--label-free-losses m3g]
        [--adapt-losses byol_ave,infonce_ave,m3g] [--nn-losses ''] [--holdouts all|sketch,clean] [--seeds 0,1,2]
        [--erm-steps 600] [--no-train] [--pretrain-only] [--only-finished] [--root data/digit-domains]
        [--runs-dir runs/results_domains] [--out FILE.md] [--figures DIR] [--jobs N]

Writes the digit domains first when ``--root`` is missing (``mvapp data synth-domains``); then, for every
loss (``configs/domains_digits_<loss>.yaml``; label-free rows: ``configs/domains_digits_<loss>_labelfree.yaml``),
held-out domain and seed, one pretraining run on the other five domains and the domain-generalization
evaluator (checkpoint and probe C chosen by training-domain validation; test-domain "oracle" selection
and the target-labelled probe as separate tables; random-init and ERM references, ERM with its own
budget); ``--adapt-losses`` also run the adaptation protocol (``<loss>+adapt`` rows and a gain table).
Then every table (DomainBed layout: rows = algorithms, columns = held-out domains + Avg; mean +- std
over distinct runs, n printed), the Fig.-2-like 1-vs-1 figure and the random-init domain-shift matrix go
to ``<runs-dir>`` and into the section between the ``domains`` markers of ``--out``.
``--no-train`` evaluates only runs whose pretraining finished and lists the planned runs that are missing;
``--pretrain-only`` trains without evaluating. Resumable: finished runs / evaluations are reused.
``--jobs N`` runs the planned (held-out domain, seed) groups in N worker processes of this script (dealt
seed-major, round robin: a group's runs, its ERM run and its reference scores belong to one worker, so no two
write the same folder; each worker's torch threads = usable CPUs / N unless ``MVAPP_NUM_THREADS`` is set; logs
in ``<runs-dir>/jobs/``), then writes the tables from what finished, as ``--only-finished``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

from multiview_app.train.run_io import atomic_write_json, atomic_write_text  # noqa: E402

DEFAULT_LOSSES = ("byol_ave", "infonce_ave", "m3g")  # the M3G paper's Table 2 losses
START, END = "<!-- domains:start -->", "<!-- domains:end -->"


def shift_matrix(root: Path, runs_dir: Path) -> dict:
    """Random-init encoder (the configs' small_cnn, seed 0): probe on one domain, test on each (reused from
    ``<runs_dir>/random_init_shift_matrix.json`` when that exists)."""
    import torch

    cached = runs_dir / "random_init_shift_matrix.json"
    if cached.is_file():
        return json.loads(cached.read_text())

    from multiview_app.config import load_config
    from multiview_app.data.adapters import build_adapter
    from multiview_app.data.views import build_view_policy
    from multiview_app.eval.domain_generalization import domain_shift_matrix
    from multiview_app.train.run_io import build_model_from_spec, model_spec

    cfg = load_config(ROOT / "configs" / "domains_digits_m3g.yaml", [f"data.options.root={root}"])
    options = {k: v for k, v in cfg.data.options.items() if k != "holdout"}
    adapter = build_adapter(cfg.data.adapter, options)
    policy = build_view_policy(cfg.views.policy, cfg.views.k, cfg.views.options, adapter)
    torch.manual_seed(0)
    matrix = domain_shift_matrix(build_model_from_spec(model_spec(cfg)), adapter, policy)
    atomic_write_json(runs_dir / "random_init_shift_matrix.json", matrix)
    return matrix


def format_matrix(matrix: dict) -> str:
    domains = list(matrix)
    lines = ["| probe trained on \\ tested on | " + " | ".join(domains) + " |", "|---" * (len(domains) + 1) + "|"]
    for source in domains:
        lines.append(f"| {source} | " + " | ".join(f"{100 * matrix[source][t]:.0f}" for t in domains) + " |")
    diagonal = [matrix[d][d] for d in domains]
    off = [matrix[s][t] for s in domains for t in domains if s != t]
    lines.append("")
    lines.append(
        f"In-domain mean {100 * sum(diagonal) / len(diagonal):.1f} %, cross-domain mean "
        f"{100 * sum(off) / len(off):.1f} % (chance 10 %)."
    )
    return "\n".join(lines)


def write_docs(out: Path, section: str) -> None:
    text = out.read_text() if out.is_file() else ""
    block = f"{START}\n{section.rstrip()}\n{END}\n"
    if START in text and END in text:
        text = text[: text.index(START)] + block + text[text.index(END) + len(END) + 1 :]
    else:
        text = text.rstrip() + "\n\n" + block
    atomic_write_text(out, text)


def planned_runs(
    losses: list[str], label_free: list[str], adapt_losses: set[str], nn_losses: set[str]
) -> list[tuple[str, str, tuple[str, ...], list[str]]]:
    """``(row, config, protocols, extra overrides)`` per planned configuration."""
    plan = []
    for loss in losses:
        protocols = ("generalization", "adaptation") if loss in adapt_losses else ("generalization",)
        plan.append((loss, str(ROOT / "configs" / f"domains_digits_{loss}.yaml"), protocols, []))
        if loss in nn_losses:
            plan.append(
                (
                    f"{loss}+adapt_nn",
                    str(ROOT / "configs" / f"domains_digits_{loss}.yaml"),
                    ("adaptation",),
                    ["data.options.adapt_views=nearest", "views.k=4"],
                )
            )
    for loss in label_free:
        plan.append(
            (
                f"{loss} (label-free)",
                str(ROOT / "configs" / f"domains_digits_{loss}_labelfree.yaml"),
                ("generalization",),
                [],
            )
        )
    return plan


def job_shares(groups: list[tuple[str, int]], jobs: int) -> list[list[tuple[str, int]]]:
    """Deal the ``(held-out domain, seed)`` groups (already seed-major) round robin over ``jobs`` workers;
    workers with nothing to do are dropped."""
    shares = [groups[i::jobs] for i in range(max(1, jobs))]
    return [share for share in shares if share]


def worker_command(args: argparse.Namespace, share: list[tuple[str, int]], index: int) -> list[str]:
    """This script's command line for worker ``index`` on ``share``: the same plan and options, its own
    ``--groups``, its own (throw-away) ``--out`` / ``--figures`` under ``<runs-dir>/jobs/``."""
    jobs_dir = args.runs_dir / "jobs"
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--losses",
        args.losses,
        "--label-free-losses",
        args.label_free_losses,
        "--adapt-losses",
        args.adapt_losses,
        "--nn-losses",
        args.nn_losses,
        "--holdouts",
        ",".join(sorted({h for h, _ in share})),
        "--seeds",
        ",".join(str(s) for s in sorted({s for _, s in share})),
        "--groups",
        ",".join(f"{h}:{s}" for h, s in share),
        "--root",
        str(args.root),
        "--runs-dir",
        str(args.runs_dir),
        "--threads",
        str(args.threads),
        "--out",
        str(jobs_dir / f"job_{index}.md"),
        "--figures",
        str(jobs_dir / f"figures_{index}"),
        "--jobs",
        "1",
    ]
    command += ["--erm-steps", str(args.erm_steps)] if args.erm_steps is not None else []
    command += ["--erm-seeds", args.erm_seeds] if args.erm_seeds is not None else []
    command += ["--max-candidates", str(args.max_candidates)] if args.max_candidates is not None else []
    command += [
        flag
        for flag, on in (
            ("--no-erm", args.no_erm),
            ("--no-train", args.no_train),
            ("--pretrain-only", args.pretrain_only),
        )
        if on
    ]
    return command


def run_workers(
    args: argparse.Namespace, shares: list[list[tuple[str, int]]], done_files: list[Path] | None = None
) -> list[int]:
    """Start one worker per share, wait for all (a progress bar counts the planned evaluations in
    ``done_files`` that exist), return their exit codes; an interrupt (Ctrl-C) terminates the workers (their
    runs resume on the next call)."""
    from multiview_app.console import progress as tqdm

    jobs_dir = args.runs_dir / "jobs"
    jobs_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    if "MVAPP_NUM_THREADS" not in env:
        from multiview_app.threads import usable_cpus

        env["MVAPP_NUM_THREADS"] = str(max(1, usable_cpus().usable // len(shares)))
    workers = []
    try:
        for index, share in enumerate(shares):
            log = open(jobs_dir / f"job_{index}.log", "a")
            print(
                f"worker {index}: {len(share)} group(s) {', '.join(f'{h}/s{s}' for h, s in share)}; log {log.name}",
                flush=True,
            )
            workers.append(
                (
                    subprocess.Popen(worker_command(args, share, index), stdout=log, stderr=subprocess.STDOUT, env=env),
                    log,
                )
            )
        done_files = done_files or []
        with tqdm(desc="runs evaluated", total=len(done_files), unit="run") as bar:
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--losses", default=",".join(DEFAULT_LOSSES))
    parser.add_argument(
        "--label-free-losses",
        default="m3g",
        help="losses that also get a label-free row (configs/domains_digits_<loss>_labelfree.yaml: "
        "k augmentation views of one image); '' for none",
    )
    parser.add_argument("--holdouts", default="all", help="'all' or comma-separated domains")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument(
        "--adapt-losses",
        default=",".join(DEFAULT_LOSSES),
        help="losses that also run the adaptation protocol (target train images unlabelled in "
        "pretraining); '' for none",
    )
    parser.add_argument(
        "--nn-losses",
        default="",
        help="losses that also run the nearest-neighbour adaptation variant "
        "(data.options.adapt_views=nearest, views.k=4: <loss>+adapt_nn rows); '' for none",
    )
    parser.add_argument("--erm-steps", type=int, default=None, help="ERM's own budget (default: the evaluator's, 600)")
    parser.add_argument("--no-erm", action="store_true", help="skip the supervised ERM baseline in new evaluations")
    parser.add_argument(
        "--erm-seeds",
        default=None,
        help="seeds whose new evaluations include ERM (default: every seed; ERM costs about two "
        "pretraining runs per held-out domain and seed)",
    )
    parser.add_argument(
        "--max-candidates",
        type=int,
        default=None,
        help="select among at most N evenly spaced checkpoints per encoder (final always kept; "
        "default: every saved one)",
    )
    parser.add_argument(
        "--no-train",
        action="store_true",
        help="train nothing: evaluate the runs whose pretraining finished, list the missing ones",
    )
    parser.add_argument("--pretrain-only", action="store_true", help="pretrain the planned runs, evaluate nothing")
    parser.add_argument(
        "--only-finished",
        action="store_true",
        help="neither train nor evaluate: tables from the evaluations already in --runs-dir",
    )
    parser.add_argument("--root", type=Path, default=ROOT / "data" / "digit-domains")
    parser.add_argument("--runs-dir", type=Path, default=ROOT / "runs" / "results_domains")
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "runs" / "results_domains" / "results.md",
        help="Markdown file whose domains section is (re)written (docs/results.md only when given here)",
    )
    parser.add_argument(
        "--figures",
        type=Path,
        default=ROOT / "runs" / "results_domains" / "figures",
        help="figure folder (docs/figures only when given here)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="worker processes, each taking whole (held-out domain, seed) groups; then the tables",
    )
    parser.add_argument("--groups", default=None, help=argparse.SUPPRESS)  # a worker's share: domain:seed,...
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads of the evaluations (1: no OpenMP stalls on a shared CPU; 0 = the automatic "
        "choice; MVAPP_NUM_THREADS wins; training uses train.num_threads)",
    )
    args = parser.parse_args()
    from multiview_app.experiments.domains import THREADS_OPTION
    from multiview_app.threads import configure_torch_threads

    configure_torch_threads(args.threads or None, setting_name=THREADS_OPTION)  # re-applied before each evaluation

    from multiview_app.data.domains.synth import synth_domains
    from multiview_app.eval.domain_report import KIND, write_summary
    from multiview_app.experiments.domains import (
        REFERENCE_CACHE,
        all_domains,
        ensure_pretrained,
        evaluate_with_erm,
        run_config,
    )

    if not args.root.is_dir():
        print(f"writing the digit domains to {args.root}", flush=True)
        synth_domains(args.root)
    split = lambda text: [x for x in text.split(",") if x]  # noqa: E731
    losses, label_free = split(args.losses), split(args.label_free_losses)
    seeds = [int(x) for x in split(args.seeds)]
    erm_seeds = None if args.erm_seeds is None else {int(x) for x in split(args.erm_seeds)}
    overrides = [f"data.options.root={args.root}"]
    plan = planned_runs(losses, label_free, set(split(args.adapt_losses)), set(split(args.nn_losses)))
    holdouts = all_domains(plan[0][1], overrides) if args.holdouts == "all" else split(args.holdouts)
    groups = [(h, s) for s in seeds for h in holdouts]  # seed-major: every seed covers all domains in turn
    if args.groups is not None:
        groups = [(h, int(s)) for h, _, s in (g.partition(":") for g in split(args.groups))]
    start = time.perf_counter()

    def planned_evaluations():
        """``(holdout, seed, row, protocol, cfg, evaluation JSON path)`` of every planned run: groups in order,
        then rows."""
        for holdout, seed in groups:
            for row, config, protocols, extra in plan:
                for protocol in protocols:
                    cfg = run_config(config, args.runs_dir, holdout, seed, protocol, [*overrides, *extra])
                    yield holdout, seed, row, protocol, cfg, cfg.run_dir / "eval" / f"{KIND}.json"

    worker_failures: dict[str, str] = {}
    if args.jobs > 1 and not args.only_finished:
        shift_matrix(args.root, args.runs_dir)  # once, before the workers (each would compute it otherwise)
        done_files = [done for *_, done in planned_evaluations()]
        codes = run_workers(args, job_shares(groups, args.jobs), done_files)
        worker_failures = {
            f"worker {i}": f"exit code {code}; see {args.runs_dir / 'jobs' / f'job_{i}.log'}"
            for i, code in enumerate(codes)
            if code != 0
        }
        if args.pretrain_only:
            return 1 if worker_failures else 0
        args.only_finished = True  # the tables: from what the workers finished
    results, failures, missing = [], dict(worker_failures), []
    # group-major (seed-major over the held-out domains), then every row: an interrupted sweep leaves whole
    # groups (every row of a held-out domain and seed) finished, and every seed covers all domains in turn
    for holdout, seed, row, protocol, cfg, done in planned_evaluations():
        label = f"{row}{'+adapt' if protocol == 'adaptation' and '+adapt' not in row else ''} {holdout} s{seed}"
        if done.is_file() and not args.pretrain_only:
            results.append(json.loads(done.read_text()))
            continue
        trained = (cfg.run_dir / "model.safetensors").is_file()
        if args.only_finished or (args.no_train and not trained):
            missing.append(label + ("" if trained else " (not pretrained)"))
            continue
        print(f"== {label}", flush=True)
        try:
            pretrain_s, pretrain_cpu_s = ensure_pretrained(cfg)
            if args.pretrain_only:
                continue
            with_erm = not args.no_erm and "label-free" not in row and (erm_seeds is None or seed in erm_seeds)
            result = evaluate_with_erm(
                cfg.run_dir,
                erm=with_erm,
                erm_steps=args.erm_steps,
                erm_cache=args.runs_dir / "erm",
                max_candidates=args.max_candidates,
                threads=args.threads or None,
                reference_cache=args.runs_dir / REFERENCE_CACHE,
            )
            result["pretrain_s"], result["pretrain_cpu_s"] = pretrain_s, pretrain_cpu_s
            atomic_write_json(done, result)
            results.append(result)
        except Exception as exc:  # noqa: BLE001 - record and go on with the other runs
            failures[label] = " ".join(str(exc).split())[:300]
            print(f"!! {label} failed: {failures[label]}", flush=True)
    if args.pretrain_only:
        return 1 if failures else 0
    if not results:
        print(
            f"no run evaluated; {len(missing)} planned run(s) missing"
            + (f": {'; '.join(missing)}" if missing else "")
            + "".join(f"\nfailed: {label}: {err}" for label, err in failures.items()),
            file=sys.stderr,
        )
        return 1
    summary = write_summary(results, args.runs_dir)
    matrix = shift_matrix(args.root, args.runs_dir)
    args.figures.mkdir(parents=True, exist_ok=True)
    figure = args.figures / "domains_one_vs_one.png"
    shutil.copyfile(summary["heatmaps"], figure)
    if summary.get("gain_plot"):
        shutil.copyfile(summary["gain_plot"], args.figures / "domains_adaptation_gain.png")
    per_run = [r for r in results if r.get("pretrain_s")]
    timing = ""
    if per_run:
        mean_train = sum(r["pretrain_s"] for r in per_run) / len(per_run)
        mean_eval = sum(r["wall_s"] for r in per_run) / len(per_run)
        timing = (
            f"Pretraining took {mean_train:.0f} s wall per run on average and its evaluation (incl. ERM when "
            f"not cached, features of every checkpoint) {mean_eval:.0f} s ({len(per_run)} timed run(s); CPU, "
            "1 torch thread, 2 cores shared with other jobs)."
        )
    command = " ".join(["scripts/reproduce/m3g/results_domains.py", *sys.argv[1:]])
    from multiview_app.config import load_config

    cfg = load_config(plan[0][1], overrides)
    views, encoder = cfg.views.options, cfg.model.encoders["image"]
    setting = (
        f"k = {cfg.views.k} seen domains as views (`{views.get('stacks')}` stack), n = {cfg.train.batch_size}, "
        f"{cfg.train.max_steps} steps (checkpoints every {cfg.train.checkpoint_every}), AdamW lr {cfg.optim.lr}, "
        f"{encoder['name']} (width {encoder.get('width')}) on {views.get('image_size')} px; "
        f"{100 * cfg.data.options.get('val_fraction', 0):.0f} % of every domain's train split held out as "
        "training-domain validation"
    )

    def figure_ref(name: str) -> str:
        """A figure's path as the Markdown file at ``--out`` links it (relative when possible)."""
        path = (args.figures / name).resolve()
        try:
            return str(path.relative_to(args.out.resolve().parent.parent))
        except ValueError:
            return str(path)

    section = "\n".join(
        [
            "## Unseen-domain generalization and domain adaptation on the digit domains (M3G Table 2 / Fig. 2)",
            "",
            f"Produced by `python {command}` (this call: {time.perf_counter() - start:.0f} s, reusing finished runs "
            f"and evaluations). Rows: {', '.join(losses)}"
            + (f"; label-free {', '.join(label_free)}" if label_free else "")
            + f"; held-out domains: {', '.join(holdouts)}; seeds: {', '.join(map(str, seeds))}. Pretraining: {setting}. "
            "**Model selection: training-domain validation** (DomainBed): per run, the checkpoint (steps "
            f"{cfg.train.checkpoint_every}, {2 * cfg.train.checkpoint_every}, ... and the final weights) and the probe's C "
            "(0.01, 0.1, 1, 10) with the best accuracy on the seen domains' validation share; test-domain "
            '("oracle") selection only in its own, labelled table. Probe: standardized logistic regression on '
            "frozen encoder features. **The label-conditioned rows build each item's k views from class labels** "
            "(one image of the item's class from each seen domain, the M3G paper's construction), so that "
            "pretraining uses the seen domains' labels; the label-free row uses k augmentation views (`mild` "
            "stack) of one image. `random_init` = the run's initial weights; `erm` = the same backbone trained by "
            "`mvapp train` with a supervised cross-entropy head on the seen domains' labels, its own step budget, "
            "its checkpoint chosen by the same training-domain validation. `<loss>+adapt`: the target's train "
            "images (no labels) joined pretraining as k augmentation views of one image, 25 % of the items. " + timing,
            "",
            summary["table"],
            f"1-vs-1 (Fig. 2): `{figure_ref('domains_one_vs_one.png')}` (probe trained on one seen domain, tested on "
            "the unseen one; mean over runs)."
            + (
                f" Adaptation gain per target: `{figure_ref('domains_adaptation_gain.png')}`."
                if summary.get("gain_plot")
                else ""
            ),
            "",
            "Domain shift of the data itself (random-init encoder, probe trained on one domain's train split, "
            "accuracy % on each domain's test split):",
            "",
            format_matrix(matrix),
            "",
            *(
                [f"Not run (planned by this command, missing at the time of writing): {'; '.join(missing)}."]
                if missing
                else []
            ),
            *(f"Failed: {label}: {err}" for label, err in failures.items()),
        ]
    )
    write_docs(args.out, section)
    print(section)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
