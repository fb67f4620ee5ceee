"""How well the intermediate reports' item subset (``tune.report_items``) ranks models like the full val split.

Usage: ``python scripts/tune_report_subset.py [--models 8] [--steps 40] [--sizes 64,128,256] [--out /tmp/tune_subset]``

Trains ``--models`` short digits runs (``configs/digits_infonce_pwe.yaml``, val_fraction 0.1) whose
``loss.tau`` and ``optim.lr`` are drawn log-uniformly (seed 0) from the default tau range and
3e-4..1e-2, like the trials of a search, then scores every final model with the tune objective
(``linear_probe.logreg_acc``) on the full val split and as an intermediate report on each subset
size. Prints per size: Spearman rank correlation with the full value over the models, the mean and
max absolute difference, and whether the model the median pruner would rank lowest is the same.
"""
from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr


from repro_common import ROOT, parse_list  # noqa: E402

from multiview_app.config import load_config  # noqa: E402
from multiview_app.train.run_io import load_run  # noqa: E402
from multiview_app.train.trainer import train  # noqa: E402
from multiview_app.tune.objective import METRICS, MetricState  # noqa: E402
from multiview_app.tune.space import override  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", type=int, default=8)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--sizes", default="64,128,256", help="comma-separated tune.report_items values")
    parser.add_argument("--out", type=Path, default=Path("/tmp/tune_subset"))
    args = parser.parse_args()
    sizes = parse_list(parser, "--sizes", args.sizes, int)
    shutil.rmtree(args.out, ignore_errors=True)
    rng = np.random.default_rng(0)
    metric = METRICS["linear_probe.logreg_acc"].compute
    full: list[float] = []
    partial: dict[int, list[float]] = {s: [] for s in sizes}
    for m in range(args.models):
        tau, lr = float(np.exp(rng.uniform(np.log(0.03), np.log(1.0)))), float(np.exp(rng.uniform(np.log(3e-4), np.log(1e-2))))
        cfg = load_config(ROOT / "configs" / "digits_infonce_pwe.yaml", [
            f"train.max_steps={args.steps}", "train.checkpoint_every=0", "eval.linear_probe=false",
            "output.curves=false", "data.options.val_fraction=0.1", f"loss.tau={tau}", f"optim.lr={lr}",
            override("output.runs_dir", str(args.out))], name=f"model_{m}")
        _, net = load_run(train(cfg).run_dir)
        state = MetricState(cfg)
        state.begin(partial=False)
        full.append(metric(net, state))
        for size in sizes:
            cfg.tune.report_items = size
            state.begin(partial=True)
            partial[size].append(metric(net, state))
        print(f"model {m}: tau {tau:.3f} lr {lr:.2e} full {full[-1]:.4f} "
              + " ".join(f"{s}: {partial[s][-1]:.4f}" for s in sizes), flush=True)
    print()
    print("| report_items | Spearman vs full | mean abs diff | max abs diff | same lowest model |")
    print("|---|---|---|---|---|")
    for size in sizes:
        values = np.array(partial[size])
        rho = spearmanr(values, full).statistic
        diff = np.abs(values - np.array(full))
        print(f"| {size} | {rho:.3f} | {diff.mean():.4f} | {diff.max():.4f} | "
              f"{'yes' if int(np.argmin(values)) == int(np.argmin(full)) else 'no'} |")


if __name__ == "__main__":
    main()
