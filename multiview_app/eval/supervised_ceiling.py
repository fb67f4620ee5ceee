"""The supervised ceiling of a pretrained EEG encoder: its architecture trained end to end on the stage labels.

The ceiling run is an ordinary run folder (``mvapp train``, the same Trainer) derived from a pretraining
run's config by :func:`ceiling_config`: the same cache, channels, subject split, view policy and
augmentations, the same encoder (whatever ``model.encoders`` names), optimizer, batch size and seed; the
loss is ``supervised_ce`` (:mod:`multiview_app.losses.supervised`): one linear head shared by the channels,
applied to every channel's embedding, cross-entropy of each channel's logits with the window's stage,
averaged over channels and windows. No projector is used by the loss, no predictor, no EMA teacher.

It learns from the **pretraining nights only** (the run's ``train`` split; the run's test subjects stay
excluded by the same ``data.options``), trained by :func:`multiview_app.experiments.staging.train_supervised_ceiling`:
validation subjects (:data:`VALIDATION_FRACTION` of the pretraining subjects) are held out, the budget
(``max_steps``: the pretraining run's) is trained with :data:`CANDIDATES` checkpoints; each is scored by
:func:`validation_score` (a linear probe fitted on :data:`SELECTION_SHOTS` windows per stage of the
training subjects, balanced accuracy on the validation subjects' windows) and the best checkpoint **is**
the ceiling: its frozen encoder is probed exactly like the pretrained encoder (the sleep-staging
evaluator's ``supervised_ceiling`` row). :data:`CEILING_FILE` in ``<run>/ceiling/`` records the run, the
checkpoint and every candidate's validation score.

The ceiling is the checkpoint that was scored, not a retraining on every pretraining subject for the chosen
number of steps: end-to-end training of a small ReLU network (``eeg/chambon`` without BatchNorm) is not
reproducible across data orders (in the demo, two of four such trainings left 1-2 of the 8 second-layer
kernels alive and probed ~0.3 balanced accuracy below the others), so a retrained model is not the
one whose score chose it. The price: the validation subjects' labels are not learned from.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from ..config import Config, config_from_dict
from .erm import encoder_feature_dim, supervised_model

CEILING_ROW = "supervised_ceiling"
"""The evaluator's row of the ceiling's frozen encoder."""
CEILING_DIR = "ceiling"
"""Folder (inside the pretraining run) of the ceiling's runs."""
CEILING_FILE = "supervised_ceiling.json"
"""Record of the ceiling (in :data:`CEILING_DIR`): its run and checkpoint (``weights``), the candidates' validation
scores, the step chosen."""
CANDIDATES = 5
"""Checkpoints of the selection run (equally spaced up to the budget), the candidate budgets."""
VALIDATION_FRACTION = 0.25
"""Share of the pretraining subjects held out as validation subjects in the selection run (at least one)."""
SELECTION_SHOTS = 100
"""Windows per stage of the selection-training subjects that fit the validation probe."""
RECIPE = "mvapp train, loss supervised_ce (shared linear head on every channel's embedding, CE averaged over channels)"
NUM_STAGES = 5


def ceiling_key(cfg: Config, steps: int, val_subjects: list[str]) -> dict[str, Any]:
    """Everything that defines one ceiling run of the pretraining config ``cfg``."""
    return {
        "recipe": RECIPE,
        "data": ceiling_data(cfg, val_subjects),
        "views": cfg.views.model_dump(mode="json"),
        "model": supervised_model(cfg),
        "optim": cfg.optim.model_dump(mode="json"),
        "steps": int(steps),
        "batch_size": cfg.train.batch_size,
        "seed": cfg.train.seed,
    }


def ceiling_data(cfg: Config, val_subjects: list[str]) -> dict[str, Any]:
    """The pretraining run's data settings with ``val_subjects`` held out of training besides the run's test
    subjects (the subject split of the test subjects is unchanged: it is drawn first)."""
    options = dict(cfg.data.options)
    options["val_subjects"] = sorted(val_subjects)
    options.pop("val_fraction", None)
    return {"adapter": cfg.data.adapter, "options": options}


def ceiling_config(
    cfg: Config, out_dir: str | Path, steps: int, *, val_subjects: list[str], checkpoints: int = CANDIDATES
) -> Config:
    """The config of the ceiling run of ``steps`` steps in ``out_dir/select_<hash>`` (module docstring),
    ``val_subjects`` held out; ``checkpoints`` > 0 saves that many equally spaced checkpoints, all kept."""
    if cfg.data.adapter != "eeg_windows":
        raise ValueError(
            f"supervised ceiling: needs a run pretrained on EEG windows, got data.adapter {cfg.data.adapter!r}"
        )
    if int(steps) < 1:
        raise ValueError(f"supervised ceiling: need a positive step budget, got {steps}")
    if not val_subjects:
        raise ValueError("supervised ceiling: its steps are chosen on validation subjects; got none")
    key = ceiling_key(cfg, steps, val_subjects)
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
    name = f"select_{digest}"
    raw = cfg.to_dict()
    raw.update(
        data=key["data"],
        model=key["model"],
        loss={"name": "supervised_ce", "num_classes": NUM_STAGES, "in_dim": encoder_feature_dim(cfg)},
        output={**raw["output"], "runs_dir": str(out_dir), "name": name},
        eval={**raw["eval"], "linear_probe": False},
    )
    every = max(1, int(steps) // checkpoints) if checkpoints else 0
    raw["train"] = {
        **raw["train"],
        "max_steps": int(steps),
        "epochs": None,
        "checkpoint_every": every,
        "keep_checkpoints": checkpoints + 1,
        "callbacks": [],
    }
    return config_from_dict(raw)


def validation_subjects(subjects: list[str], seed: int) -> list[str]:
    """:data:`VALIDATION_FRACTION` of the pretraining ``subjects`` (at least one, never all), drawn with ``seed``."""
    if len(subjects) < 2:
        raise ValueError(
            f"supervised ceiling: choosing its steps needs >= 2 pretraining subjects (one for "
            f"validation), got {list(subjects)}"
        )
    order = np.random.default_rng([seed, 17]).permutation(len(subjects))
    n_val = min(len(subjects) - 1, max(1, int(round(VALIDATION_FRACTION * len(subjects)))))
    return sorted(subjects[i] for i in order[:n_val])


def candidate_weights(run_dir: Path, last: int) -> list[tuple[int, str]]:
    """``[(step, weights name)]`` of a finished selection run of ``last`` steps: its checkpoints and ``final``."""
    steps = sorted(int(p.name.split("_")[1]) for p in (run_dir / "checkpoints").glob("step_*"))
    return [(s, f"step_{s}") for s in steps if s < last] + [(last, "final")]


def validation_score(run_dir: Path, weights: str, *, batch_size: int = 16, device: str = "cpu") -> float:
    """:func:`model_validation_score` of the ceiling run ``run_dir`` with ``weights`` (``final`` / ``step_N``)."""
    from ..train.run_io import load_run

    cfg, model = load_run(run_dir, weights)
    return model_validation_score(cfg, model, batch_size=batch_size, device=device)


def model_validation_score(cfg: Config, model: Any, *, batch_size: int = 16, device: str = "cpu") -> float:
    """Balanced accuracy of ``model`` on the validation subjects of the ceiling run config ``cfg``: a
    standardized logistic regression (C = 1) on the frozen encoder's concatenated channel features of
    :data:`SELECTION_SHOTS` windows per stage of its training subjects. Reads no test subject."""
    from sklearn.metrics import balanced_accuracy_score

    from ..data.adapters import build_adapter
    from ..data.eeg.views import staging_views
    from .features import window_features
    from .protocols.probe import fit_linear_classifier
    from .protocols.staging import shot_draw

    adapter = build_adapter(cfg.data.adapter, cfg.data.options)
    policy = staging_views(cfg.views, adapter)
    rows, _ = shot_draw(adapter.split("train").labels, SELECTION_SHOTS, 0)
    x_fit, y_fit, _ = window_features(model, adapter, policy, "train", batch_size, device, rows=rows)
    x_val, y_val, _ = window_features(model, adapter, policy, "val", batch_size, device)
    classifier = fit_linear_classifier(x_fit, y_fit, C=1.0)
    return float(balanced_accuracy_score(y_val, classifier.predict(np.nan_to_num(x_val))))


def ceiling_record(run_dir: str | Path) -> dict[str, Any] | None:
    """The ceiling record of the pretraining run ``run_dir`` (:data:`CEILING_FILE`), or None when there is none."""
    path = Path(run_dir) / CEILING_DIR / CEILING_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def ceiling_weights(record: dict[str, Any]) -> tuple[Path, str] | None:
    """``(run folder, weights name)`` of the ceiling checkpoint a record chose, or None when the record names
    none (a record of an older version, whose ceiling was a retraining: train it again) or its file is missing."""
    from ..train.run_io import resolve_weights

    if "weights" not in record:
        return None
    try:
        resolve_weights(record["run"], record["weights"])
    except FileNotFoundError:
        return None
    return Path(record["run"]), str(record["weights"])


__all__ = [
    "CANDIDATES",
    "CEILING_DIR",
    "CEILING_FILE",
    "CEILING_ROW",
    "SELECTION_SHOTS",
    "VALIDATION_FRACTION",
    "candidate_weights",
    "ceiling_config",
    "ceiling_data",
    "ceiling_key",
    "ceiling_record",
    "ceiling_weights",
    "model_validation_score",
    "validation_score",
    "validation_subjects",
]
