"""``mvapp experiment psg-real``: one real PSG night (an EDF) staged by a classifier trained on synthetic nights.

1. :func:`~.psg_modalities.night_set`: a few whole-PSG synthetic nights (PhysioNet 2018 format) prepared with
   the config's modality grouping at a rate cap (``--max-rate``, default 50 Hz: every group at
   ``min(its rate, cap)``, its band below the new Nyquist frequency).
2. :func:`prepare_real`: the real EDF through the generic reader (``--stages``, ``--stage-map``) into a
   modality cache with the same grouping and cap. The file is read where it is: the cache's source folder
   holds a symbolic link to it, never a copy.
3. :func:`train_run`: one short training run on the synthetic nights (``ensure_trained``), its encoders'
   rates, channel counts and band-stop augmentations fitted to the capped caches (:func:`input_overrides`).
4. :func:`stage_real`: frozen encoder features of both caches per modality; a modality the real night lacks
   (e.g. no usable SpO2) is left out with its count and reason; logistic regression on the synthetic nights'
   features (each modality alone, leave-one-out subsets, all concatenated) predicts the real night's stages.
5. :func:`report`: ``OUT/psg_real.md`` (confusion matrices, balanced accuracy, kappa, per-stage counts) and
   ``OUT/psg_real.json``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .psg_modalities import Sizes, cache_modalities, night_set, run_config

TABLE = "psg_real"
"""Stem of the written files (``OUT/psg_real.md``, ``.json``)."""
MAX_RATE = 50.0
"""Default rate cap (Hz): a 50-Hz recording such as DREAMS excerpt 3."""
CLASSIFIER_C = 1.0
"""Inverse regularization of the staging classifier (standardized logistic regression)."""


@dataclass(frozen=True)
class RealNight:
    """The real recording and how to read it (``mvapp data prepare edf`` options)."""

    edf: Path  #: the EDF / BDF file (read in place)
    stages: str = "channel:hypnogram"  #: where its stages come from (``--stages``)
    stage_map: str = "dreams"  #: its label map (``--stage-map``)
    channels: list[str] = field(default_factory=list)  #: brain channels (empty: every EEG channel of the file)


def file_channels(night: RealNight) -> dict[str, list[str]]:
    """Signal type -> the file's channels of that type, in file order, as the generic reader types them;
    ``eeg`` is ``night.channels`` when given (``ValueError`` naming the file when it has no EEG channel)."""
    from ..data.eeg.generic import read_psg

    recording, _ = read_psg(night.edf, night.stages, night.stage_map)
    found: dict[str, list[str]] = {}
    for name, kind in zip(recording.channel_names, recording.channel_types):
        found.setdefault(kind, []).append(name)
    if night.channels:
        found["eeg"] = list(night.channels)
    if not found.get("eeg"):
        raise ValueError(
            f"{night.edf}: no EEG channel (by the labels of datasets/modalities/psg.yaml); name --channels"
        )
    return found


def _distance(a: str, b: str) -> tuple[float, float]:
    """How far derivation ``b`` is from ``a``: ``(between their active electrodes, between their references)``,
    compared in that order (the active site decides; A1 and M1 are both left-sided references)."""
    from ..data.eeg.electrodes import derivation_positions

    (a_active, a_ref), (b_active, b_ref) = derivation_positions(a), derivation_positions(b)
    refs = 0.0 if a_ref is None or b_ref is None else float(np.linalg.norm(a_ref - b_ref))
    return round(float(np.linalg.norm(a_active - b_active)), 4), refs


def paired_channels(real: list[str], candidates: list[str]) -> list[str]:
    """For each of the first ``len(candidates)`` ``real`` EEG derivations, the unused candidate nearest to it
    (electrode positions of mne's 10-05 template; C3-A1 -> C3-M2, FP1-A1 -> F3-M2), in ``real``'s order; a
    derivation without montage positions takes the next unused candidate."""
    free, paired = list(candidates), []
    for name in real[: len(candidates)]:
        try:
            best = min(free, key=lambda other: _distance(name, other))
        except ValueError:
            best = free[0]
        free.remove(best)
        paired.append(best)
    return paired


def real_modalities(modalities: str, types: dict[str, list[str]], counts: dict[str, int]) -> str:
    """``--modalities`` for the real file: ``modalities``' groups, each group other than brain that has more
    channels in the file (``types``: type -> labels) than the synthetic nights (``counts``) limited to its first
    ``counts[group]`` channels (``group=A+B``), so every modality has the encoder's channel count."""
    from ..data.eeg.modalities import parse_modalities
    from ..data.eeg.signals import load_vocabulary

    groups = load_vocabulary().groups
    items = []
    for group in parse_modalities(modalities):
        labels = [label for kind in groups[group].types for label in types.get(kind, [])]
        limit = counts.get(group, len(labels))
        items.append(f"{group}={'+'.join(labels[:limit])}" if group != "brain" and 0 < limit < len(labels) else group)
    return ",".join(items)


def prepare_real(night: RealNight, data: Path, modalities: str, max_rate: float) -> Path:
    """``data/real_cache``: the real night prepared (edf reader; brain: ``night.channels``) with ``modalities``
    at ``max_rate`` Hz, unless present. Its source folder ``data/real_source`` holds a symbolic link to
    ``night.edf``."""
    from ..data.eeg.cache import prepare
    from ..data.eeg.preprocess import PrepareOptions

    if not night.edf.is_file():
        raise ValueError(f"--edf {night.edf}: not a file")
    source, cache = data / "real_source", data / "real_cache"
    if (cache / "manifest.json").is_file():
        return cache
    source.mkdir(parents=True, exist_ok=True)
    link = source / night.edf.name
    if not link.is_symlink():
        link.symlink_to(night.edf.resolve())
    options = PrepareOptions(channels=list(night.channels))
    reader = {"stages": night.stages, "stage_map": night.stage_map}
    prepare("edf", source, cache, options, modalities=modalities, max_rate=max_rate, reader_options=reader)
    return cache


def band_stop_overrides(views_options: dict[str, Any], groups: dict[str, dict[str, Any]]) -> list[str]:
    """``views.options.group_augment.<group>=...`` for each cached group (manifest ``modality_groups``) whose
    band stop reaches above its band's high edge (or 90 % of Nyquist): the stop's range ends below it, or the
    band stop is left out when no range fits."""
    from ..data.eeg.modal_views import augment_table

    table = {**augment_table(), **(views_options.get("group_augment") or {})}
    overrides = []
    for group, info in groups.items():
        spec = table.get(group)
        spec = spec.model_dump() if hasattr(spec, "model_dump") else dict(spec or {})
        width = spec.get("band_stop_hz")
        top = info["h_freq"] if info.get("h_freq") is not None else 0.45 * info["sfreq"]
        if width is None or spec["band_stop_range"][1] + width / 2 <= top:
            continue
        low, high = spec["band_stop_range"][0], top - width / 2
        spec.update({"band_stop_range": [low, high]} if high > low else {"band_stop_hz": None})
        overrides.append(f"views.options.group_augment.{group}={json.dumps(spec)}")
    return overrides


def input_overrides(cfg: Any, cache: Path) -> list[str]:
    """Config overrides fitting a run's encoders to ``cache``: each encoder's ``sfreq`` and ``in_channels`` set
    to its modality's there (the adapter's ``modality_contracts``), then :func:`band_stop_overrides`."""
    from ..data.adapters import build_adapter
    from ..data.eeg.cache import load_manifest

    options = {**cfg.data.options, "cache": str(cache), "test_fraction": 0.0, "test_subjects": None}
    contracts = build_adapter(cfg.data.adapter, options).modality_contracts()
    overrides = []
    for name, encoder in cfg.model.encoders.items():
        for key in ("sfreq", "in_channels"):
            value = contracts.get(name, {}).get(key)
            if value is not None and key in encoder and float(encoder[key]) != float(value):
                overrides.append(f"model.encoders.{name}.{key}={value:g}")
    return overrides + band_stop_overrides(dict(cfg.views.options), load_manifest(cache)["modality_groups"])


def train_run(config: Path, cache: Path, runs: Path, sizes: Sizes, overrides: list[str]) -> Path:
    """The run folder of one training run on ``cache`` (the sizes' first loss and seed), trained unless
    finished with the same config (``refuse-mismatch``); ``overrides`` after :func:`input_overrides`."""
    from ..config import load_config
    from .training import ensure_trained

    fitted = input_overrides(load_config(config, overrides), cache)
    cfg = run_config(config, cache, runs, sizes.losses[0], sizes.seeds[0], sizes, [*fitted, *overrides], {})
    ensure_trained(cfg, "refuse-mismatch")
    return cfg.run_dir


def missing_reasons(cache: Path) -> dict[str, list[str]]:
    """Modality group -> ``"<recording>: <why>"`` for each recording of ``cache`` that misses it."""
    from ..data.eeg.cache import load_manifest

    reasons: dict[str, list[str]] = {}
    for record in load_manifest(cache)["recordings"]:
        for group, why in record.get("missing_modalities", {}).items():
            reasons.setdefault(group, []).append(f"{record['recording']}: {why}")
    return reasons


def usable_modalities(
    synthetic: Any, real: Any, groups_of: dict[str, list[str]], reasons: dict[str, list[str]]
) -> tuple[list[str], list[str]]:
    """The modalities present in every synthetic and every real window (``ModalEmbeddings.present``), and one
    note per modality left out: how many windows have it and why (``reasons`` of its ``groups_of`` groups)."""
    kept, notes = [], []
    for name, present in real.present.items():
        if present.all() and synthetic.present[name].all():
            kept.append(name)
            continue
        why = [f"{group} missing in {text}" for group in groups_of.get(name, []) for text in reasons.get(group, [])]
        notes.append(
            f"{name}: left out (in {int(present.sum())} of {present.size} real windows and "
            f"{int(synthetic.present[name].sum())} of {synthetic.present[name].size} synthetic windows"
            + (f"; {'; '.join(why)})" if why else ")")
        )
    return kept, notes


def predict_rows(synthetic: Any, real: Any, modalities: list[str], seed: int) -> dict[str, dict[str, Any]]:
    """Per row of the staging table (each modality alone, leave-one-out subsets, ``all``: the features
    concatenated ``(n, sum f)``): logistic regression fit on the synthetic windows, the real windows' predicted
    stages ``(w,)``, their confusion matrix ``(5, 5)`` (rows true, columns predicted, in ``STAGES`` order),
    balanced accuracy and Cohen's kappa."""
    from sklearn.metrics import confusion_matrix

    from ..data.eeg.stages import STAGES
    from ..eval.modalities.staging import modality_subsets, subset_features
    from ..eval.protocols.probe import fit_linear_classifier
    from ..eval.protocols.staging import staging_metrics

    subsets = modality_subsets(modalities)
    train = subset_features({m: synthetic.per_modality[m] for m in modalities}, subsets)
    test = subset_features({m: real.per_modality[m] for m in modalities}, subsets)
    rows = {}
    for name in subsets:
        model = fit_linear_classifier(train[name], synthetic.labels, C=CLASSIFIER_C, seed=seed)
        predicted = model.predict(np.nan_to_num(test[name]))
        metrics = staging_metrics(real.labels, predicted)
        rows[name] = {
            "balanced_accuracy": metrics["balanced_accuracy"],
            "kappa": metrics["kappa"],
            "confusion": confusion_matrix(real.labels, predicted, labels=list(range(len(STAGES)))).tolist(),
            "predicted": np.bincount(predicted, minlength=len(STAGES)).tolist(),
        }
    return rows


def stage_real(run_dir: Path, synthetic_cache: Path, real_cache: Path, seed: int) -> dict[str, Any]:
    """Embed both caches with the run's final encoders and stage the real night (:func:`predict_rows`);
    ``{"rows", "modalities", "notes", "true_counts", "train_counts"}`` (counts per stage, ``STAGES`` order)."""
    from ..data.eeg.modal_views import resolve_modalities
    from ..train.run_io import load_run
    from .psg_modalities import cache_embeddings

    cfg, _ = load_run(run_dir, "final")
    groups_of = {m: list(s.groups) for m, s in resolve_modalities(cfg.data.options.get("modalities")).items()}
    synthetic = cache_embeddings(run_dir, "final", synthetic_cache)
    real = cache_embeddings(run_dir, "final", real_cache)
    modalities, notes = usable_modalities(synthetic, real, groups_of, missing_reasons(real_cache))
    if not modalities:
        raise ValueError(
            f"{real_cache}: no modality is present in every real and synthetic window; " + "; ".join(notes)
        )
    return {
        "rows": predict_rows(synthetic, real, modalities, seed),
        "modalities": modalities,
        "notes": notes,
        "true_counts": np.bincount(real.labels, minlength=5).tolist(),
        "train_counts": np.bincount(synthetic.labels, minlength=5).tolist(),
    }


def confusion_lines(matrix: list[list[int]]) -> list[str]:
    """Markdown of a ``(5, 5)`` confusion matrix: rows true stage, columns predicted, row totals."""
    from ..data.eeg.stages import STAGES
    from ..eval.modalities.tables import markdown

    body = [[f"true {stage}", *map(str, row), str(sum(row))] for stage, row in zip(STAGES, matrix)]
    return markdown(["", *(f"pred {stage}" for stage in STAGES), "total"], body)


def night_sentence(counts: list[int]) -> str:
    """What the real night's scored windows are: per-stage counts, its largest stage, whether it has REM."""
    from ..data.eeg.stages import STAGES

    total, largest = sum(counts), int(np.argmax(counts))
    parts = ", ".join(f"{stage} {n}" for stage, n in zip(STAGES, counts))
    text = f"{total} scored windows ({parts}): {STAGES[largest]}-heavy ({counts[largest]} of {total})"
    rem = counts[STAGES.index("REM")]
    return text + ("; no REM window, so the true-REM row is empty." if rem == 0 else f"; {rem} REM windows.")


def report(summary: dict[str, Any]) -> str:
    """The Markdown page: the command, the real night, the training, the staging table and the confusion
    matrices (``all`` first)."""
    from ..eval.modalities.tables import markdown

    sizes, staged = summary["sizes"], summary["staged"]
    rows = staged["rows"]
    lines = [
        f"# A real PSG night staged from synthetic nights ({Path(summary['edf']).name})",
        "",
        f"`{summary['command']}`",
        "",
        f"Real night: {night_sentence(staged['true_counts'])}",
        "",
        f"Every modality group prepared at min(its rate, {summary['max_rate']:g} Hz). Encoders trained on "
        f"{sizes['nights']} synthetic whole-PSG nights (generator seed {sizes['seed']}, {sizes['hours']} h / "
        f"{sizes['compress']}; {sum(staged['train_counts'])} windows: "
        + ", ".join(f"{s} {n}" for s, n in zip(summary["stages"], staged["train_counts"]))
        + f") with {sizes['losses'][0]}, seed {sizes['seeds'][0]}, {summary['steps']} steps; frozen encoder "
        f"features; logistic regression (standardized, C = {CLASSIFIER_C:g}) fit on the synthetic windows, "
        "evaluated on every scored window of the real night (balanced accuracy over the stages it has).",
        "",
        f"Modalities used: {', '.join(staged['modalities'])}.",
        *([""] + [f"- {note}" for note in staged["notes"]] if staged["notes"] else []),
        "",
        *markdown(
            ["features", "balanced accuracy", "kappa", "predicted " + "/".join(summary["stages"])],
            [
                [name, f"{row['balanced_accuracy']:.3f}", f"{row['kappa']:.3f}", "/".join(map(str, row["predicted"]))]
                for name, row in rows.items()
            ],
        ),
    ]
    for name in sorted(rows, key=lambda n: n != "all"):
        lines += ["", f"**Confusion matrix, {name}** (rows: true stage; columns: predicted)", ""]
        lines += confusion_lines(rows[name]["confusion"])
    return "\n".join(lines) + "\n"


def group_counts(cache: Path) -> dict[str, int]:
    """Modality group -> its channel count in ``cache`` (the first recording that has the group)."""
    from ..data.eeg.cache import load_manifest

    counts: dict[str, int] = {}
    for record in load_manifest(cache)["recordings"]:
        for group, info in record.get("modalities", {}).items():
            counts.setdefault(group, len(info["channels"]))
    return counts


def prepare_caches(
    night: RealNight, data: Path, modalities: str, sizes: Sizes, max_rate: float
) -> tuple[Path, Path, list[str]]:
    """The synthetic and the real cache at ``max_rate`` Hz with the same groups and channel counts: the
    synthetic nights' brain channels paired with the file's EEG (:func:`paired_channels`), the file's other
    groups limited to the synthetic counts (:func:`real_modalities`); and a note on the pairing."""
    from ..data.eeg.stages import PHYSIONET2018_EEG

    types = file_channels(night)
    brain = types["eeg"][: len(PHYSIONET2018_EEG)]
    paired = paired_channels(brain, list(PHYSIONET2018_EEG))
    cap = ("--max-rate", f"{max_rate:g}")
    name = f"psg_synth_{max_rate:g}hz_{'_'.join(paired)}"
    synthetic = night_set(data, name, sizes.nights, sizes.seed, sizes, modalities, ("--channels", *paired, *cap))
    spec = real_modalities(modalities, types, group_counts(synthetic))
    real = prepare_real(RealNight(night.edf, night.stages, night.stage_map, brain), data, spec, max_rate)
    note = f"brain channels: the real {', '.join(brain)} paired with the synthetic {', '.join(paired)}"
    return synthetic, real, [note + f"; real file prepared with --modalities {spec}"]


def experiment(
    config: Path, night: RealNight, out: Path, sizes: Sizes, max_rate: float, overrides: list[str], command: str
) -> dict[str, Any]:
    """The whole experiment (module docstring); writes ``OUT/psg_real.md`` and ``.json`` and returns the
    summary (``staged``: rows, modalities, notes, counts; the caches and the run)."""
    from ..config import load_config
    from ..data.eeg.stages import STAGES

    cfg = load_config(config, overrides)
    data = (out / "data").resolve()
    data.mkdir(parents=True, exist_ok=True)
    synthetic, real, notes = prepare_caches(night, data, cache_modalities(cfg.data.options), sizes, max_rate)
    run = train_run(config, synthetic, (out / "runs").resolve(), sizes, overrides)
    staged = stage_real(run, synthetic, real, sizes.seeds[0])
    staged["notes"] = notes + staged["notes"]
    summary = {
        "command": command,
        "config": str(config),
        "edf": str(night.edf),
        "max_rate": max_rate,
        "sizes": asdict(sizes),
        "steps": sizes.steps or cfg.train.max_steps,
        "stages": list(STAGES),
        "caches": {"synthetic": str(synthetic), "real": str(real)},
        "run": str(run),
        "staged": staged,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{TABLE}.md").write_text(report(summary))
    (out / f"{TABLE}.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


__all__ = ["MAX_RATE", "TABLE", "RealNight", "experiment", "input_overrides", "predict_rows", "prepare_real", "report"]
