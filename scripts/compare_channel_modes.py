"""The EEG encoder's channel modes compared on the demo's protocols.

    python scripts/compare_channel_modes.py --out OUT [--real-psg DIR] [--modes montage,embedding,agnostic]
        [--pretrain-seeds 0,1,2] [--protocols cross-dataset,dreams]

Every mode is pretrained exactly as ``scripts/run_eeg_demo.sh`` pretrains its encoder (M3G, k = 6 PhysioNet
derivations as views; the demo's data and training settings, read from the demo script's defaults and
overridden by ``DEMO_X`` environment variables as the script itself does: ``multiview_app.experiments.eeg_demo.demo_settings``),
changing only ``model.encoders.eeg.channel_mode``:

- ``agnostic``: the demo's default (the papers' shared network, no channel information);
- ``embedding``: a learned embedding per derivation name plus an "unknown" row, trained with
  ``unknown_rate`` 0.1 (the configs' default for this mode) so unseen derivations get a trained row;
- ``montage``: the embedding computed from the derivation's electrode positions (mne standard 10-05).

Protocols (the demo's evaluation settings; the existing evaluator, ``experiments.staging.staging_result``):

- ``cross-dataset``: few-shot staging of the demo's Sleep-EDF-format nights (Fpz-Cz, Pz-Oz: derivations never
  seen in pretraining), 5 subject folds, s = 10 50 100 1000, ``DEMO_DRAWS`` draws;
- ``dreams``: the 8 real DREAMS excerpts (central C3-A1 / CZ-A1), leave-one-excerpt-out, W/N1/N2/N3,
  s = 10 20 40, 3 draws (``mvapp experiment dreams-transfer``'s protocol; needs ``--real-psg`` or ``$MVAPP_REAL_PSG``).

Layout under OUT (shared with ``mvapp experiment dreams-transfer --out OUT``, whose seed runs are the ``agnostic``
runs here): ``demo_data/`` (synthesized and prepared once), ``dreams_cache/``, ``runs/<name>`` (finished runs and
their stored evaluations are reused: rerunning the command resumes), ``channel_modes.md`` / ``.json``.
Table: per protocol, mode and s, the trained encoder's balanced accuracy and kappa as mean ± std over the
pretraining seeds (each seed: mean over folds x draws; population std; n printed), and the pretrained minus
handcrafted / minus band power differences by test subject (each seed: mean over subjects of the per-subject
differences; ± std over seeds; subjects ahead of n after averaging each subject over seeds and draws).
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
import time
from pathlib import Path
from typing import Any

from multiview_app.argtypes import positive_int
from multiview_app.eval.protocols.probe import mean_std
from multiview_app.eval.protocols.stats import unit_means
from multiview_app.experiments import ensure_trained
from multiview_app.experiments.dreams import REAL_PSG_ENV, prepare_dreams, stage_dreams
from multiview_app.experiments.eeg_demo import RUN_NAME, demo_config, demo_data, demo_settings
from multiview_app.experiments.reproduce import parse_list
from multiview_app.experiments.staging import staging_result
from multiview_app.fileio import atomic_write_text
from multiview_app.threads import configure_torch_threads

# the bench helpers (``scripts/bench/common.py``; scripts are not a package)
_COMMON = runpy.run_path(str(Path(__file__).resolve().parent / "bench" / "common.py"))
command_line, machine_line, markdown_table = _COMMON["command_line"], _COMMON["machine_line"], _COMMON["markdown_table"]

MODES: dict[str, list[str]] = {
    "agnostic": [],  # the demo config's own setting
    "embedding": ["model.encoders.eeg.channel_mode=embedding", "model.encoders.eeg.unknown_rate=0.1"],
    "montage": ["model.encoders.eeg.channel_mode=montage"],
}
"""Overrides of the demo's training config per channel mode (nothing else changes)."""
CONV_ENCODER = (
    "{name: conv, width: 32, out_dim: 64, dropout: 0.0, channel_mode: agnostic, unknown_rate: 0.0, "
    "channel_vocab: [F3-M2, F4-M1, C3-M2, C4-M1, O1-M2, O2-M1]}"
)
"""The encoder whose channel modes are compared (``eeg/conv``; ``DEMO_ENCODER`` overrides it)."""
PROTOCOLS = ("cross-dataset", "dreams")
DREAMS_STAGES = ["W", "N1", "N2", "N3"]
BASELINES = {"handcrafted": "handcrafted", "band power": "bandpower"}
"""Table name -> the evaluator's row name of the non-learned rows the encoder is compared with."""


def run_name(mode: str, seed: int) -> str:
    """``agnostic`` runs carry ``mvapp experiment dreams-transfer``'s names (the same runs); the others add the mode."""
    return f"{RUN_NAME}_seed{seed}" if mode == "agnostic" else f"{RUN_NAME}_{mode}_seed{seed}"


def seed_summary(result: dict[str, Any], shots: list[int]) -> dict[str, Any]:
    """One run's result -> per s: the trained row's mean balanced accuracy / kappa over its fits, the
    baselines' means, and trained minus each baseline by test subject (mean over subjects, per-subject values)."""
    out: dict[str, Any] = {}
    for s in map(str, shots):
        cell = {
            "trained": {m: result["results"]["trained"][s][m]["mean"] for m in ("balanced_accuracy", "kappa")},
            "fits": result["results"]["trained"][s]["n_runs"],
        }
        for name, row in BASELINES.items():
            cell[name] = {m: result["results"][row][s][m]["mean"] for m in ("balanced_accuracy", "kappa")}
            paired = result["paired"][row][s]
            cell[f"minus {name}"] = {"mean": paired["mean"], "units": paired["units"]}
        out[s] = cell
    return out


def over_seeds(per_seed: list[dict[str, Any]], shots: list[int]) -> dict[str, Any]:
    """Mean ± std (population) over pretraining seeds of :func:`seed_summary` cells, per s."""
    out: dict[str, Any] = {}
    for s in map(str, shots):
        cells = [p[s] for p in per_seed]
        out[s] = {
            "n_seeds": len(cells),
            "fits_per_seed": cells[0]["fits"],
            "trained": {m: mean_std([c["trained"][m] for c in cells]) for m in ("balanced_accuracy", "kappa")},
        }
        for name in BASELINES:
            out[s][name] = {m: mean_std([c[name][m] for c in cells]) for m in ("balanced_accuracy", "kappa")}
            per_subject = unit_means((u, v) for c in cells for u, v in c[f"minus {name}"]["units"].items())
            out[s][f"minus {name}"] = {
                **mean_std([c[f"minus {name}"]["mean"] for c in cells]),
                "ahead": sum(v > 0 for v in per_subject.values()),
                "n": len(per_subject),
            }
    return out


def protocol_table(protocol: str, summaries: dict[str, dict[str, Any]], shots: list[int]) -> str:
    """Markdown: per mode the trained encoder (balanced accuracy ± std over seeds / kappa), its differences
    to handcrafted and band power (± std over seeds, subjects ahead / n), then the two baselines once."""
    rows = []
    for mode, summary in summaries.items():
        n = summary[str(shots[0])]["n_seeds"]
        rows.append(
            [f"{mode} (n={n})", "pretrained"]
            + [
                f"{c['trained']['balanced_accuracy']['mean']:.3f} ± {c['trained']['balanced_accuracy']['std']:.3f}"
                f" / {c['trained']['kappa']['mean']:.3f}"
                for c in (summary[str(s)] for s in shots)
            ]
        )
        for name in BASELINES:
            rows.append(
                [f"{mode} (n={n})", f"minus {name}"]
                + [
                    f"{c[f'minus {name}']['mean']:+.3f} ± {c[f'minus {name}']['std']:.3f} "
                    f"({c[f'minus {name}']['ahead']}/{c[f'minus {name}']['n']} subjects ahead)"
                    for c in (summary[str(s)] for s in shots)
                ]
            )
    first = next(iter(summaries.values()))
    for name in BASELINES:
        rows.append(
            ["(any)", name]
            + [
                f"{first[str(s)][name]['balanced_accuracy']['mean']:.3f} / {first[str(s)][name]['kappa']['mean']:.3f}"
                for s in shots
            ]
        )
    return f"### {protocol}\n\n" + markdown_table(["mode (pretraining seeds)", "row", *(f"s={s}" for s in shots)], rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="output folder (data, runs, table, JSON)")
    parser.add_argument(
        "--data",
        type=Path,
        default=None,
        help="folder of the demo's synthetic data, synthesized once and reused (default: OUT/demo_data)",
    )
    parser.add_argument(
        "--real-psg",
        type=Path,
        default=os.environ.get(REAL_PSG_ENV),
        help=f"folder holding dreams-spindles/ (default: ${REAL_PSG_ENV}; needed for --protocols dreams)",
    )
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated, of %(default)s")
    parser.add_argument("--pretrain-seeds", default="0,1,2", help="train.seed of the runs (default: %(default)s)")
    parser.add_argument("--protocols", default=",".join(PROTOCOLS), help="comma-separated, of %(default)s")
    parser.add_argument("--cross-shots", type=positive_int, nargs="+", default=[10, 50, 100, 1000])
    parser.add_argument("--cross-folds", type=positive_int, default=5)
    parser.add_argument("--dreams-shots", type=positive_int, nargs="+", default=[10, 20, 40])
    parser.add_argument("--dreams-draws", type=positive_int, default=3, help="few-shot draws per DREAMS fold")
    args = parser.parse_args(argv)
    modes = parse_list(parser, "--modes", args.modes, str)
    protocols = parse_list(parser, "--protocols", args.protocols, str)
    seeds = parse_list(parser, "--pretrain-seeds", args.pretrain_seeds, int)
    if bad := [m for m in modes if m not in MODES] + [p for p in protocols if p not in PROTOCOLS]:
        parser.error(f"unknown mode / protocol {bad}; expected modes of {list(MODES)}, protocols of {list(PROTOCOLS)}")
    if "dreams" in protocols and args.real_psg is None:
        parser.error(f"--protocols dreams needs --real-psg DIR (or ${REAL_PSG_ENV})")
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    knobs = demo_settings()
    knobs["encoder"] = os.environ.get("DEMO_ENCODER") or CONV_ENCODER  # channel modes are eeg/conv's
    caches = demo_data((args.data or out / "demo_data").resolve(), knobs, sleep_edf="cross-dataset" in protocols)
    if "dreams" in protocols:
        caches["dreams"] = prepare_dreams(Path(args.real_psg), out).resolve()
    configure_torch_threads()  # the evaluations run in this process (training sets its own)
    shots = {"cross-dataset": args.cross_shots, "dreams": args.dreams_shots}
    per_seed: dict[str, dict[str, list[dict[str, Any]]]] = {p: {m: [] for m in modes} for p in protocols}
    timings: list[dict[str, Any]] = []
    for mode in modes:  # all seeds of a mode before the next mode
        for seed in seeds:
            cfg = demo_config(caches["physionet2018"], out / "runs", run_name(mode, seed), seed, knobs, MODES[mode])
            began = time.perf_counter()
            trained = ensure_trained(cfg, "refuse-mismatch")
            timing = {
                "mode": mode,
                "seed": seed,
                "run": str(cfg.run_dir),
                "train_s": round(time.perf_counter() - began, 1),
                "reused": trained.reused,
                "load_after_training": os.getloadavg()[0],
            }
            for protocol in protocols:
                began = time.perf_counter()
                if protocol == "dreams":
                    result = stage_dreams(
                        cfg.run_dir,
                        caches["dreams"],
                        shots["dreams"],
                        args.dreams_draws,
                        DREAMS_STAGES,
                        knobs["combine"],
                    )
                else:
                    result = staging_result(
                        cfg.run_dir,
                        cache=caches["sleep-edf"],
                        folds=args.cross_folds,
                        shots=shots[protocol],
                        draws=int(knobs["draws"]),
                        combine=knobs["combine"],
                    )
                timing[f"{protocol}_s"] = round(time.perf_counter() - began, 1)
                per_seed[protocol][mode].append(seed_summary(result, shots[protocol]))
            timings.append(timing)
            print(f"{mode} seed {seed}: {json.dumps(timing)}", flush=True)
    summaries = {p: {m: over_seeds(per_seed[p][m], shots[p]) for m in modes} for p in protocols}
    settings = {k: knobs[k] for k in sorted(knobs) if k != "data"}
    header = [
        f"command: `{command_line()}`",
        "",
        f"machine: {machine_line()}",
        "",
        f"demo settings: {json.dumps(settings)}",
        "",
        f"pretraining seeds: {seeds}",
        "",
        "balanced accuracy ± std over pretraining seeds / kappa (each seed: mean over folds x draws); "
        "differences by test subject, ± std over seeds (subjects ahead / n, each subject averaged over seeds "
        "and draws)",
        "",
    ]
    text = "\n".join(header) + "\n" + "\n\n".join(protocol_table(p, summaries[p], shots[p]) for p in protocols) + "\n"
    atomic_write_text(out / "channel_modes.md", text)
    atomic_write_text(
        out / "channel_modes.json",
        json.dumps(
            {
                "command": command_line(),
                "settings": settings,
                "seeds": seeds,
                "modes": modes,
                "protocols": protocols,
                "shots": shots,
                "summary": summaries,
                "per_seed": per_seed,
                "timings": timings,
            },
            indent=1,
        ),
    )
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
