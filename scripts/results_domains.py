"""Leave-one-domain-out (+ domain adaptation) table on the embedded digit domains (M3G Table 2 / Fig. 2).

    .venv/bin/python scripts/results_domains.py [--losses m3g,infonce_pwe] [--holdouts all|sketch,clean]
        [--seeds 0,1,2,3] [--adapt-losses m3g,infonce_pwe,pvc_geometric] [--nn-losses m3g] [--steps N]
        [--nn-set views.k=4] [--no-erm] [--only-finished] [--root data/digit-domains] [--runs-dir runs/results_domains]

Writes the digit domains first when ``--root`` is missing (``mvapp data synth-domains``); then, for
every loss (``configs/domains_digits_<loss>.yaml``), held-out domain and seed, one pretraining run
on the other five domains and the domain-generalization evaluator (5-vs-1, 1-vs-1, oracle; random
init and ERM references); for ``--adapt-losses`` also the adaptation protocol (the target's train
images unlabelled in pretraining), as ``<loss>+adapt`` columns and a gain table; for ``--nn-losses`` also
the nearest-neighbour variant (``data.options.adapt_views=nearest``, ``<loss>+adapt_nn`` columns). Then the combined table (mean +- std over seeds), the Fig.-2-like heatmaps
and the random-init domain-shift matrix go to ``<runs-dir>`` and into the section between the
``domains`` markers of ``docs/results.md`` (the rest of that file is left as it is).
Resumable: finished runs / evaluations are reused.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from multiview_app.train.run_io import atomic_write_json, atomic_write_text  # noqa: E402

DEFAULT_LOSSES = ("m3g", "infonce_pwe", "infonce_ave", "byol_ave", "pvc_geometric")
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
    lines.append(f"In-domain mean {100 * sum(diagonal) / len(diagonal):.1f} %, cross-domain mean "
                 f"{100 * sum(off) / len(off):.1f} % (chance 10 %).")
    return "\n".join(lines)


def write_docs(out: Path, section: str) -> None:
    text = out.read_text() if out.is_file() else ""
    block = f"{START}\n{section.rstrip()}\n{END}\n"
    if START in text and END in text:
        text = text[: text.index(START)] + block + text[text.index(END) + len(END) + 1 :]
    else:
        text = text.rstrip() + "\n\n" + block
    atomic_write_text(out, text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--losses", default=",".join(DEFAULT_LOSSES))
    parser.add_argument("--holdouts", default="all", help="'all' or comma-separated domains")
    parser.add_argument("--seeds", default="0,1,2,3")
    parser.add_argument("--adapt-losses", default="m3g,infonce_pwe,pvc_geometric",
                        help="losses that also run the adaptation protocol (target train images unlabelled in "
                             "pretraining); '' for none")
    parser.add_argument("--nn-losses", default="m3g",
                        help="losses that also run the nearest-neighbour adaptation variant "
                             "(data.options.adapt_views=nearest: <loss>+adapt_nn columns); '' for none")
    parser.add_argument("--nn-set", nargs="*", default=["views.k=4"], metavar="KEY=VALUE",
                        help="config overrides of the nearest-neighbour runs only (default views.k=4: 4 source views "
                             "+ the target view, so M3G's n^k solver works at k = 5 as the other runs)")
    parser.add_argument("--steps", type=int, default=None, help="train.max_steps (default: the configs')")
    parser.add_argument("--no-erm", action="store_true",
                        help="skip the supervised ERM baseline in new evaluations (its column then pools the runs "
                             "that have it)")
    parser.add_argument("--only-finished", action="store_true",
                        help="train nothing: table, figures and docs from the evaluations already in --runs-dir")
    parser.add_argument("--root", type=Path, default=ROOT / "data" / "digit-domains")
    parser.add_argument("--runs-dir", type=Path, default=ROOT / "runs" / "results_domains")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "results_domains" / "results.md",
                        help="Markdown file whose domains section is (re)written (docs/results.md only when given here)")
    parser.add_argument("--figures", type=Path, default=ROOT / "runs" / "results_domains" / "figures",
                        help="figure folder (docs/figures only when given here)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads for the whole script (1: no OpenMP stalls on a shared CPU; 0 = default)")
    args = parser.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)

    from multiview_app.data.domains.synth import synth_domains
    from multiview_app.eval.domain_generalization import train_and_evaluate, write_summary

    if not args.root.is_dir():
        print(f"writing the digit domains to {args.root}", flush=True)
        synth_domains(args.root)
    losses = [x for x in args.losses.split(",") if x]
    adapt_losses = {x for x in args.adapt_losses.split(",") if x}
    nn_losses = {x for x in args.nn_losses.split(",") if x}
    nn_overrides = list(args.nn_set)
    seeds = [int(x) for x in args.seeds.split(",") if x]
    holdouts = "all" if args.holdouts == "all" else [x for x in args.holdouts.split(",") if x]
    overrides = [f"data.options.root={args.root}"] + ([f"train.max_steps={args.steps}"] if args.steps else [])
    start = time.perf_counter()
    results, failures = [], {}
    if args.only_finished:
        results = [r for r in (json.loads(f.read_text()) for f in sorted(args.runs_dir.glob("*/eval/domain_generalization.json")))
                   if r["loss"] in losses]
        args.holdouts = ",".join(sorted({r["holdout"] for r in results}))
        args.seeds = ",".join(str(x) for x in sorted({r["seed"] for r in results}))
        adapted = [r for r in results if r.get("protocol") == "adaptation"]
        adapt_losses = {r["loss"] for r in adapted if r.get("adapt_views", "augment") == "augment"}
        nn_losses = {r["loss"] for r in adapted if r.get("adapt_views") == "nearest"}
    for loss in [] if args.only_finished else losses:
        print(f"== {loss}", flush=True)
        try:
            protocols = ("generalization", "adaptation") if loss in adapt_losses else ("generalization",)
            config = ROOT / "configs" / f"domains_digits_{loss}.yaml"
            results += train_and_evaluate(config, args.runs_dir, holdouts, seeds, overrides, protocols=protocols,
                                          erm=not args.no_erm)
            if loss in nn_losses:
                results += train_and_evaluate(config, args.runs_dir, holdouts, seeds,
                                              [*overrides, "data.options.adapt_views=nearest", *nn_overrides],
                                              protocols=("adaptation",), erm=not args.no_erm)
        except Exception as exc:  # noqa: BLE001 - record and go on with the other losses
            failures[loss] = " ".join(str(exc).split())[:300]
            print(f"!! {loss} failed: {failures[loss]}", flush=True)
    if not results:
        print("no run finished", file=sys.stderr)
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
        mean_total = sum(r["pretrain_s"] + r["wall_s"] for r in per_run) / len(per_run)
        mean_train = sum(r["pretrain_s"] for r in per_run) / len(per_run)
        cpu = [r["pretrain_cpu_s"] + r["cpu_s"] for r in per_run if r.get("pretrain_cpu_s") and r.get("cpu_s")]
        cpu_text = (f"; {sum(cpu) / len(cpu):.0f} s of CPU time of the main process on average over the {len(cpu)} "
                    "run(s) that recorded it" if cpu else "")
        timing = (f"One target domain for one loss took {mean_total:.0f} s wall on average (pretraining "
                  f"{mean_train:.0f} s + evaluation incl. ERM when not cached {mean_total - mean_train:.0f} s; "
                  f"{len(per_run)} timed run(s){cpu_text}; CPU, 2 cores shared with other jobs).")
    command = " ".join(["scripts/results_domains.py", *sys.argv[1:]])
    from multiview_app.config import load_config

    cfg = load_config(ROOT / "configs" / f"domains_digits_{losses[0]}.yaml", overrides)
    views, encoder = cfg.views.options, cfg.model.encoders["image"]
    stack = ("`test` stack: no random augmentation" if views.get("stacks") == "test" else
             f"{views.get('stacks')} stack, crop scale {views.get('crop_scale') or '(0.08, 1)'}, jitter x "
             f"{views.get('jitter_strength', 1.0)}")
    setting = (f"k = {cfg.views.k} seen domains as views ({stack}), n = "
               f"{cfg.train.batch_size}, {cfg.train.max_steps} steps, AdamW lr {cfg.optim.lr}, {encoder['name']} "
               f"(width {encoder.get('width')}) on {views.get('image_size')} px")
    table = summary["table"]
    nn_runs = [r for r in results if r.get("adapt_views") == "nearest"]
    nn_k = sorted({load_config(Path(r["run"]) / "config.yaml").views.k for r in nn_runs})
    nn_views = (f"{' / '.join(map(str, nn_k))} source view(s) + the target view" if nn_k else "")
    def figure_ref(name: str) -> str:
        """A figure's path as the Markdown file at ``--out`` links it (relative when possible)."""
        path = (args.figures / name).resolve()
        try:
            return str(path.relative_to(args.out.resolve().parent.parent))
        except ValueError:
            return str(path)

    section = "\n".join([
        "## Unseen-domain generalization and domain adaptation on the digit domains (M3G Table 2 / Fig. 2)",
        "",
        f"Produced by `.venv/bin/python {command}` (this call, reusing finished runs: "
        f"{time.perf_counter() - start:.0f} s). Losses: "
        f"{', '.join(losses)}; held-out domains: {args.holdouts}; seeds: {args.seeds}. Pretraining: {setting}. "
        "Probes: standardized logistic regression (C = 1) on frozen encoder "
        "features; `random_init` = the run's initial weights, `erm` = the same backbone trained with "
        "cross-entropy on the seen domains' labels with the same steps and batches. `<loss>+adapt`: the "
        f"target's train images (no labels) joined pretraining ({'adaptation for ' + ', '.join(sorted(adapt_losses)) if adapt_losses else 'not run'}; "
        "k augmentation views of one target image, 25 % of the items); `<loss>+adapt_nn` "
        f"({', '.join(sorted(nn_losses)) or 'not run'}): instead one extra view per source item, the target train "
        "image nearest to the item in the current embedding (among 64 drawn per batch)"
        + (f"; {nn_views}" if nn_views else "") + ". " + timing,
        "",
        table,
        f"1-vs-1 (Fig. 2): `{figure_ref('domains_one_vs_one.png')}` (rows: probe training domain; columns: "
        "unseen domain; mean over seeds)." + (" Adaptation gain per target: "
                                               f"`{figure_ref('domains_adaptation_gain.png')}`." if summary.get("gain_plot") else ""),
        "",
        "Domain shift of the data itself (random-init encoder, probe trained on one domain's train split, "
        "accuracy % on each domain's test split):",
        "",
        format_matrix(matrix),
        "",
        *(f"Failed: {loss}: {err}" for loss, err in failures.items()),
    ])
    write_docs(args.out, section)
    print(section)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
