"""``mvapp experiment channel-modes``: the EEG encoder's channel modes compared on the demo's protocols.

Every mode is pretrained exactly as ``scripts/run_eeg_demo.sh`` pretrains its encoder (the demo's data and
training settings, :func:`.eeg_demo.demo_settings`, ``DEMO_<KEY>`` overrides included), changing only
``model.encoders.eeg.channel_mode`` of the ``eeg/conv`` encoder:

- ``agnostic``: the papers' shared network, no channel information (the demo's default);
- ``embedding``: a learned embedding per derivation name plus an "unknown" row, trained with ``unknown_rate``
  0.1 so unseen derivations get a trained row;
- ``montage``: the embedding computed from the derivation's electrode positions (mne standard 10-05).

Protocols: ``cross-dataset`` stages the demo's Sleep-EDF-format nights (derivations never seen in pretraining)
by subject folds (:func:`.staging.staging_result`); ``dreams`` stages the 8 real DREAMS excerpts
leave-one-excerpt-out (``mvapp experiment dreams-transfer``'s protocol, :func:`.dreams.stage_dreams`). Cells:
the trained encoder's balanced accuracy and kappa as mean ± std (population) over pretraining seeds, and its
difference to the handcrafted and band-power rows by test subject. Runs and evaluations are reused; the
``agnostic`` runs carry ``dreams-transfer``'s run names, so the two commands share them under one ``--out``.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
METRICS = ("balanced_accuracy", "kappa")
TABLE = "channel_modes"


@dataclass(frozen=True)
class ChannelModesKnobs:
    """Knobs of ``mvapp experiment channel-modes`` (keys of ``configs/experiment_channel_modes.yaml``)."""

    modes: tuple[str, ...] = tuple(MODES)  #: channel modes compared
    seeds: tuple[int, ...] = (0, 1, 2)  #: pretraining seeds per mode
    protocols: tuple[str, ...] = PROTOCOLS  #: evaluation protocols
    cross_shots: tuple[int, ...] = (10, 50, 100, 1000)  #: labelled windows per class, cross-dataset
    cross_folds: int = 5  #: subject folds, cross-dataset
    dreams_shots: tuple[int, ...] = (10, 20, 40)  #: labelled windows per class, DREAMS
    dreams_draws: int = 3  #: few-shot draws per DREAMS fold

    def check(self, real_psg: Path | None) -> None:
        """Unknown modes / protocols, or the DREAMS protocol without its data, are errors naming the knob."""
        bad = [m for m in self.modes if m not in MODES] + [p for p in self.protocols if p not in PROTOCOLS]
        if bad:
            raise ValueError(
                f"modes / protocols: unknown {bad}; expected modes of {list(MODES)}, protocols of {PROTOCOLS}"
            )
        if "dreams" in self.protocols and real_psg is None:
            raise ValueError(
                "protocols: dreams needs --real-psg DIR (or $MVAPP_REAL_PSG): the folder of dreams-spindles/"
            )

    def shots(self, protocol: str) -> list[int]:
        """The protocol's shots (labelled windows per class)."""
        return list(self.dreams_shots if protocol == "dreams" else self.cross_shots)


def run_name(mode: str, seed: int) -> str:
    """``agnostic`` runs carry ``mvapp experiment dreams-transfer``'s names (the same runs); the others add the mode."""
    from .eeg_demo import RUN_NAME

    return f"{RUN_NAME}_seed{seed}" if mode == "agnostic" else f"{RUN_NAME}_{mode}_seed{seed}"


def seed_summary(result: dict[str, Any], shots: list[int]) -> dict[str, Any]:
    """One run's result -> per s: the trained row's mean balanced accuracy / kappa over its fits, the
    baselines' means, and trained minus each baseline by test subject (mean over subjects, per-subject values)."""
    out: dict[str, Any] = {}
    for s in map(str, shots):
        trained = result["results"]["trained"][s]
        cell = {"trained": {m: trained[m]["mean"] for m in METRICS}, "fits": trained["n_runs"]}
        for name, row in BASELINES.items():
            cell[name] = {m: result["results"][row][s][m]["mean"] for m in METRICS}
            paired = result["paired"][row][s]
            cell[f"minus {name}"] = {"mean": paired["mean"], "units": paired["units"]}
        out[s] = cell
    return out


def over_seeds(per_seed: list[dict[str, Any]], shots: list[int]) -> dict[str, Any]:
    """Mean ± std (population) over pretraining seeds of :func:`seed_summary` cells, per s; the differences also
    count the subjects ahead after averaging each subject over seeds."""
    from ..eval.protocols.probe import mean_std
    from ..eval.protocols.stats import unit_means

    out: dict[str, Any] = {}
    for s in map(str, shots):
        cells = [p[s] for p in per_seed]
        out[s] = {"n_seeds": len(cells), "fits_per_seed": cells[0]["fits"]}
        for name in ("trained", *BASELINES):
            out[s][name] = {m: mean_std([c[name][m] for c in cells]) for m in METRICS}
        for name in BASELINES:
            diffs = [c[f"minus {name}"] for c in cells]
            per_subject = unit_means((u, v) for d in diffs for u, v in d["units"].items())
            ahead = {"ahead": sum(v > 0 for v in per_subject.values()), "n": len(per_subject)}
            out[s][f"minus {name}"] = {**mean_std([d["mean"] for d in diffs]), **ahead}
    return out


def markdown(headers: list[str], rows: list[list[str]]) -> str:
    """A Markdown table of ``rows`` under ``headers``."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def protocol_table(protocol: str, summaries: dict[str, dict[str, Any]], shots: list[int]) -> str:
    """Markdown: per mode the trained encoder (balanced accuracy ± std over seeds / kappa), its differences
    to handcrafted and band power (± std over seeds, subjects ahead / n), then the two baselines once."""
    rows = []
    for mode, summary in summaries.items():
        cells = [summary[str(s)] for s in shots]
        label = f"{mode} (n={cells[0]['n_seeds']})"
        trained = [c["trained"] for c in cells]
        rows.append(
            [label, "pretrained"] + [f"{_pm(t['balanced_accuracy'])} / {t['kappa']['mean']:.3f}" for t in trained]
        )
        for name in BASELINES:
            diffs = [c[f"minus {name}"] for c in cells]
            rows.append(
                [label, f"minus {name}"]
                + [f"{d['mean']:+.3f} ± {d['std']:.3f} ({d['ahead']}/{d['n']} subjects ahead)" for d in diffs]
            )
    first = [next(iter(summaries.values()))[str(s)] for s in shots]
    for name in BASELINES:
        rows.append(
            ["(any)", name]
            + [f"{c[name]['balanced_accuracy']['mean']:.3f} / {c[name]['kappa']['mean']:.3f}" for c in first]
        )
    return f"### {protocol}\n\n" + markdown(["mode (pretraining seeds)", "row", *(f"s={s}" for s in shots)], rows)


def _pm(cell: dict[str, float]) -> str:
    """``mean ± std`` of a :func:`mean_std` cell."""
    return f"{cell['mean']:.3f} ± {cell['std']:.3f}"


def evaluate(
    protocol: str, run_dir: Path, caches: dict[str, Path], knobs: ChannelModesKnobs, demo: dict[str, str]
) -> dict[str, Any]:
    """One run's stored (or new) evaluation under ``protocol``."""
    from .dreams import stage_dreams
    from .staging import staging_result

    shots = knobs.shots(protocol)
    if protocol == "dreams":
        return stage_dreams(run_dir, caches["dreams"], shots, knobs.dreams_draws, DREAMS_STAGES, demo["combine"])
    return staging_result(
        run_dir,
        cache=caches["sleep-edf"],
        folds=knobs.cross_folds,
        shots=shots,
        draws=int(demo["draws"]),
        combine=demo["combine"],
    )


def run_mode(
    mode: str, seed: int, out: Path, caches: dict[str, Path], knobs: ChannelModesKnobs, demo: dict[str, str]
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Train ``mode`` with ``seed`` unless done (refusing a finished run of another config), evaluate it under
    every protocol; returns (timing record, per protocol its :func:`seed_summary`)."""
    from . import ensure_trained
    from .eeg_demo import demo_config

    cfg = demo_config(caches["physionet2018"], out / "runs", run_name(mode, seed), seed, demo, MODES[mode])
    began = time.perf_counter()
    trained = ensure_trained(cfg, "refuse-mismatch")
    timing = {"mode": mode, "seed": seed, "run": str(cfg.run_dir), "train_s": round(time.perf_counter() - began, 1)}
    timing.update(reused=trained.reused, load_after_training=os.getloadavg()[0])
    summaries = {}
    for protocol in knobs.protocols:
        began = time.perf_counter()
        result = evaluate(protocol, cfg.run_dir, caches, knobs, demo)
        timing[f"{protocol}_s"] = round(time.perf_counter() - began, 1)
        summaries[protocol] = seed_summary(result, knobs.shots(protocol))
    return timing, summaries


def experiment(knobs: ChannelModesKnobs, out: Path, data: Path | None, real_psg: Path | None, command: str) -> str:
    """Prepare the data, train and evaluate every mode x seed (all seeds of a mode before the next), write
    ``out/channel_modes.md`` / ``.json``; returns the Markdown page."""
    from ..threads import configure_torch_threads
    from .dreams import prepare_dreams
    from .eeg_demo import demo_data, demo_settings

    knobs.check(real_psg)
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    demo = {**demo_settings(), "encoder": os.environ.get("DEMO_ENCODER") or CONV_ENCODER}  # modes are eeg/conv's
    caches = demo_data((data or out / "demo_data").resolve(), demo, sleep_edf="cross-dataset" in knobs.protocols)
    if "dreams" in knobs.protocols:
        caches["dreams"] = prepare_dreams(Path(real_psg), out).resolve()  # type: ignore[arg-type]
    configure_torch_threads()  # the evaluations run in this process (training sets its own)
    per_seed: dict[str, dict[str, list[dict[str, Any]]]] = {p: {m: [] for m in knobs.modes} for p in knobs.protocols}
    timings = []
    for mode in knobs.modes:
        for seed in knobs.seeds:
            timing, summaries = run_mode(mode, seed, out, caches, knobs, demo)
            for protocol, summary in summaries.items():
                per_seed[protocol][mode].append(summary)
            timings.append(timing)
            print(f"{mode} seed {seed}: {json.dumps(timing)}", flush=True)
    settings = {k: demo[k] for k in sorted(demo) if k != "data"}
    return write(out, knobs, command, settings, per_seed, timings)


def write(
    out: Path,
    knobs: ChannelModesKnobs,
    command: str,
    settings: dict[str, str],
    per_seed: dict[str, dict[str, list[dict[str, Any]]]],
    timings: list[dict[str, Any]],
) -> str:
    """Pool over seeds and write the page and its JSON (numbers, settings, per-seed cells, timings)."""
    from ..fileio import atomic_write_json, atomic_write_text
    from .knobs import knobs_dict

    summaries = {
        p: {m: over_seeds(cells, knobs.shots(p)) for m, cells in per_mode.items()} for p, per_mode in per_seed.items()
    }
    header = [
        f"command: `{command}`",
        f"demo settings: {json.dumps(settings)}",
        f"pretraining seeds: {list(knobs.seeds)}",
        "balanced accuracy ± std over pretraining seeds / kappa (each seed: mean over folds x draws); differences "
        "by test subject, ± std over seeds (subjects ahead / n, each subject averaged over seeds and draws)",
    ]
    tables = [protocol_table(p, summaries[p], knobs.shots(p)) for p in knobs.protocols]
    text = "\n\n".join(header + tables) + "\n"
    atomic_write_text(out / f"{TABLE}.md", text)
    record = {"command": command, "settings": settings, "knobs": knobs_dict(knobs), "summary": summaries}
    atomic_write_json(out / f"{TABLE}.json", {**record, "per_seed": per_seed, "timings": timings})
    return text


__all__ = ["CONV_ENCODER", "MODES", "PROTOCOLS", "TABLE", "ChannelModesKnobs", "experiment", "over_seeds", "run_name"]
