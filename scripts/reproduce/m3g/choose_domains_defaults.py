"""Re-choose the digit-domain defaults (``optim.lr``, ``views.options.stacks``, or any config setting) by
training-domain validation only.

    python scripts/reproduce/m3g/choose_domains_defaults.py --runs-dir DIR --out DIR [--losses m3g,infonce_ave]
        [--pairs 0.0005:test,0.002:test,0.0005:mild | --settings "default;NAME=KEY=VALUE+KEY=VALUE;..."]
        [--holdout sketch] [--seed 0] [--spread-from A.json,B.json,...] [--root data/digit-domains] [--threads 1]

A designed set, fixed before any trial ran (docs/results.md "Defaults re-chosen by training-domain
validation"): every (lr, stack) pair of ``--pairs`` (the current default and one change of each setting),
or every named override set of ``--settings`` (``default`` = no override), for every loss, one seed, one
held-out domain; each trial is one pretraining run (``configs/domains_digits_<loss>.yaml`` + the trial's
overrides; the default gets no override and no suffix, so it is the very run the results sweep uses under
the same ``--runs-dir``; a named setting's run ends in ``_<NAME>``).
A trial's score is DomainBed's training-domain validation accuracy: the best (checkpoint, probe C) on the
seen domains' pooled validation shares (:func:`select_training_domain`, which refuses to read the held-out
domain; nothing here asks for it).

Tie rule (fixed with the set): a pair's score is the mean over the losses of their validation accuracy;
the current default is kept unless the best pair beats it by more than ``delta = max(0.01, spread)``,
where ``spread`` is the max - min of the training-domain validation accuracy of replicate seeds at the
defaults (``--spread-from``: their ``eval/domain_generalization.json``; none given: 0.01).
Writes ``<out>/trials.json`` and ``<out>/trials.md`` and prints the table and the decision. Resumable:
finished pretraining runs and scored trials (``<run>/eval/training_domain_validation.json``) are reused.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
SCORE_FILE = "training_domain_validation.json"


def trial_overrides(lr: float, stack: str, default_lr: float, default_stack: str) -> tuple[list[str], str]:
    """Overrides and run-name suffix of one (lr, stack) trial; the default pair has neither."""
    overrides, suffix = [], ""
    if lr != default_lr:
        overrides.append(f"optim.lr={lr}")
        suffix += f"_lr{lr:g}"
    if stack != default_stack:
        overrides.append(f"views.options.stacks={stack}")
        suffix += f"_{stack}"
    return overrides, suffix


def validation_score(run_dir: Path, threads: int | None) -> dict[str, Any]:
    """Training-domain validation of a finished run: ``{"candidate", "C", "val_accuracy", "grid"}``
    (seen domains only), kept in ``<run>/eval/training_domain_validation.json``."""
    from multiview_app.data.adapters import build_adapter
    from multiview_app.data.views import build_view_policy
    from multiview_app.eval.domain_generalization import CandidateFeatures, candidates, domain_target
    from multiview_app.eval.protocols.domains import DEFAULT_CS, select_training_domain
    from multiview_app.train.run_io import atomic_write_json, load_run, load_run_config

    done = run_dir / "eval" / SCORE_FILE
    if done.is_file():
        return json.loads(done.read_text())
    cfg = load_run_config(run_dir)
    adapter = build_adapter(cfg.data.adapter, cfg.data.options)
    domain_target(run_dir, adapter)  # a generalization / adaptation run with a validation share
    policy = build_view_policy(cfg.views.policy, cfg.views.k, cfg.views.options, adapter)
    features = CandidateFeatures(
        lambda c: load_run(run_dir, c)[1], adapter, policy, cfg.eval.batch_size, "cpu", progress=False
    )
    chosen = select_training_domain(features, candidates(run_dir), list(adapter.seen_domains), DEFAULT_CS)
    result = {
        "model_selection": "training-domain validation",
        "seen": list(adapter.seen_domains),
        "read": features.items(),
        **chosen,
    }
    atomic_write_json(done, result)
    return result


def named_settings(text: str) -> list[tuple[str, list[str], str]]:
    """``--settings`` (:func:`multiview_app.experiments.reproduce.named_settings`) -> ``[(label, overrides, run
    suffix)]``, the default without a suffix; ``SystemExit`` naming a bad part."""
    from multiview_app.experiments.reproduce import named_settings as parse

    try:
        settings = parse(text)
    except ValueError as error:
        raise SystemExit(str(error)) from None
    return [(name, overrides, "" if name == "default" else f"_{name}") for name, overrides in settings.items()]


def spread_of(paths: list[Path]) -> float | None:
    """max - min of the trained encoder's training-domain validation accuracy over evaluation JSONs."""
    values = [json.loads(p.read_text())["results"]["trained"]["selected"]["val_accuracy"] for p in paths]
    return max(values) - min(values) if len(values) >= 2 else None


def decide(scores: dict[str, dict[str, float]], default: str, delta: float) -> dict[str, Any]:
    """The tie rule over trials named by their label: mean over losses per trial; the best trial replaces the
    default only when its mean is more than ``delta`` above the default's."""
    means = {label: sum(v.values()) / len(v) for label, v in scores.items()}
    best = max(means, key=lambda label: means[label])
    margin = means[best] - means[default]
    chosen = best if margin > delta else default
    return {
        "means": means,
        "best": {"trial": best, "mean": means[best]},
        "default": {"trial": default, "mean": means[default]},
        "margin": margin,
        "delta": delta,
        "chosen": chosen,
        "changed": chosen != default,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--losses", default="m3g,infonce_ave")
    parser.add_argument(
        "--pairs",
        default="0.0005:test,0.002:test,0.0005:mild",
        help="comma-separated lr:stack pairs (one must be the current default)",
    )
    parser.add_argument(
        "--settings",
        default="",
        help="instead of --pairs: 'default;NAME=KEY=VALUE+KEY=VALUE;...' (named override sets)",
    )
    parser.add_argument("--holdout", default="sketch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--spread-from", default="", help="comma-separated eval JSONs of replicate seeds at the defaults"
    )
    parser.add_argument("--root", type=Path, default=ROOT / "data" / "digit-domains")
    parser.add_argument("--runs-dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True, help="folder of trials.json / trials.md")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads of the scoring (training: train.num_threads)"
    )
    args = parser.parse_args()
    from multiview_app.config import load_config
    from multiview_app.experiments.domains import THREADS_OPTION, ensure_pretrained, run_config
    from multiview_app.threads import configure_torch_threads
    from multiview_app.train.run_io import atomic_write_json, atomic_write_text

    split = lambda text: [x for x in text.split(",") if x]  # noqa: E731
    losses = split(args.losses)
    base = load_config(ROOT / "configs" / f"domains_digits_{losses[0]}.yaml", [f"data.options.root={args.root}"])
    if args.settings:
        trials, default = named_settings(args.settings), "default"
    else:
        default_pair = (float(base.optim.lr), str(base.views.options["stacks"]))
        pairs = [(float(lr), stack) for lr, _, stack in (x.partition(":") for x in split(args.pairs))]
        if default_pair not in pairs:
            raise SystemExit(
                f"the designed set must contain the current default lr={default_pair[0]:g} stack={default_pair[1]}"
            )
        trials = [(f"lr={lr:g} stack={stack}", *trial_overrides(lr, stack, *default_pair)) for lr, stack in pairs]
        default = f"lr={default_pair[0]:g} stack={default_pair[1]}"
    spread = spread_of([Path(p) for p in split(args.spread_from)])
    delta = max(0.01, spread or 0.0)
    rows, scores = [], {}
    for loss, (label, overrides, suffix) in itertools.product(losses, trials):
        cfg = run_config(
            ROOT / "configs" / f"domains_digits_{loss}.yaml",
            args.runs_dir,
            args.holdout,
            args.seed,
            "generalization",
            [f"data.options.root={args.root}", *overrides],
            suffix,
        )
        print(f"== {loss} {label}: {cfg.run_dir}", flush=True)
        ensure_pretrained(cfg)
        configure_torch_threads(args.threads or None, report=None, setting_name=THREADS_OPTION)
        score = validation_score(cfg.run_dir, args.threads)
        scores.setdefault(label, {})[loss] = score["val_accuracy"]
        rows.append(
            {
                "loss": loss,
                "trial": label,
                "overrides": overrides,
                "run": str(cfg.run_dir),
                "val_accuracy": score["val_accuracy"],
                "candidate": score["candidate"],
                "C": score["C"],
            }
        )
        print(
            f"   training-domain validation {100 * score['val_accuracy']:.1f} % ({score['candidate']}, C={score['C']:g})",
            flush=True,
        )
    decision = decide(scores, default, delta)
    lines = [
        f"Training-domain validation accuracy % (seen domains' validation shares; held-out {args.holdout} not "
        f"read), seed {args.seed}, best checkpoint and probe C per trial:",
        "",
        "| trial | overrides | " + " | ".join(losses) + " | mean |",
        "|---|---|" + "---|" * (len(losses) + 1),
    ]
    for label, overrides, _ in trials:
        cells = [f"{100 * scores[label][l]:.1f}" for l in losses]
        mark = " (current default)" if label == default else ""
        lines.append(
            f"| {label}{mark} | {' '.join(f'`{o}`' for o in overrides) or '-'} | "
            + " | ".join(cells)
            + f" | {100 * sum(scores[label].values()) / len(losses):.1f} |"
        )
    lines += [
        "",
        f"Tie rule: keep the default unless the best mean beats it by more than delta = max(0.01, spread) = "
        f"{100 * delta:.1f} points (spread = {'none given' if spread is None else f'{100 * spread:.1f} points'}). "
        f"Best: {decision['best']['trial']} ({100 * decision['margin']:+.1f} points over the default). Decision: "
        + (f"**change to {decision['chosen']}**." if decision["changed"] else "**keep the default**."),
    ]
    text = "\n".join(lines) + "\n"
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(
        args.out / "trials.json",
        {
            "trials": rows,
            "decision": decision,
            "spread": spread,
            "command": " ".join(["scripts/reproduce/m3g/choose_domains_defaults.py", *sys.argv[1:]]),
        },
    )
    atomic_write_text(args.out / "trials.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
