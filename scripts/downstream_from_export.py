"""Train a scikit-learn classifier on an ``mvapp export`` folder and print its metrics.

    python scripts/downstream_from_export.py EXPORT_DIR [--task auto|sleep-staging|classes]
        [--shots 1000] [--draws 5] [--C C] [--knn-k 20] [--json OUT.json]

The export must hold the ``train`` and ``test`` splits (``mvapp export --split all``).
Per-view exports are combined per item first (``--combine``: concat in view order, the
sleep-staging evaluator's default, or mean).

- ``sleep-staging`` (EEG exports): the sleep-staging evaluator's in-domain few-shot protocol
  (``eval.sleep_staging.few_shot_protocol``: same class-balanced draws per s and seed, same
  standardized logistic regression, C tuned on the same validation subjects unless ``--C``) on the
  exported features; for the run's trained weights, ``--combine concat`` and the evaluator's
  ``--shots/--draws/--C`` it reproduces the evaluator's ``trained`` row (single split, no ``--folds``).
- ``classes`` (image exports, e.g. digits): logistic regression + kNN accuracy on the test split
  (the linear-probe evaluator's probe; use ``--combine`` = the run's ``eval.combine``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from multiview_app.eval.features import combine_views  # noqa: E402
from multiview_app.eval.protocols.probe import probe_accuracies  # noqa: E402
from multiview_app.export import load_embeddings  # noqa: E402


def item_features(
    export_dir: str | Path, combine: str | None = None
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray], dict[str, Any]]:
    """Per split: item features ``(N, F)``, labels ``(N,)`` and the ``subject`` column (None-filled
    when the adapter has none), in export order, plus the manifest. Per-view rows are combined
    with ``combine`` (default concat); combined exports are used as they are."""
    embeddings, table, manifest = load_embeddings(export_dir)
    split = np.asarray(table.column("split").to_pylist())
    labels = np.asarray(table.column("label").to_numpy(), dtype=np.int64)
    subject = np.asarray(
        table.column("subject").to_pylist() if "subject" in table.column_names else [None] * table.num_rows
    )
    rows = np.asarray(embeddings)
    if manifest["views"] == "per-view":
        k = manifest["rows_per_item"]
        rows = combine_views(rows.reshape(-1, k, rows.shape[1]), combine or "concat")  # rows are item-major
        split, labels, subject = split[::k], labels[::k], subject[::k]
    elif combine not in (None, manifest["views"]):
        raise ValueError(f"{export_dir}: rows are already combined with '{manifest['views']}'; cannot use {combine}")
    missing = [s for s in ("train", "test") if s not in set(split.tolist())]
    if missing:
        raise ValueError(f"{export_dir}: the export has no {', '.join(missing)} rows; export with --split all")
    pick = {s: split == s for s in ("train", "test")}
    return (
        {s: rows[m] for s, m in pick.items()},
        {s: labels[m] for s, m in pick.items()},
        {s: subject[m] for s, m in pick.items()},
        manifest,
    )


def sleep_staging(
    export_dir: str | Path,
    shots: tuple[int, ...] = (1000,),
    seeds: int = 5,
    C: float | None = None,
    combine: str | None = "concat",
) -> dict[str, Any]:
    """The sleep-staging evaluator's in-domain protocol on an export (classifier trained on the
    run's train subjects, scored on its test subjects; ``C=None`` chooses C by cross-validation inside the
    drawn windows, as the evaluator does): ``{str(s): {metric: {mean, std}}}``."""
    from multiview_app.eval.protocols.staging import few_shot_protocol

    features, labels, subjects, manifest = item_features(export_dir, combine)
    split_feats = {"export": {"train": features["train"], "test": features["test"]}}
    results, drawn, _ = few_shot_protocol(split_feats, labels["train"], labels["test"], shots, seeds, C)
    return {
        "results": results["export"],
        "drawn_per_class": drawn,
        "windows": {s: int(v.size) for s, v in labels.items()},
    }


def classes(export_dir: str | Path, C: float = 1.0, knn_k: int = 20, combine: str | None = "mean") -> dict[str, Any]:
    """Logistic regression + kNN test accuracy (labelled items only)."""
    features, labels, _, _ = item_features(export_dir, combine)
    keep = {s: labels[s] >= 0 for s in labels}
    scores = probe_accuracies(
        features["train"][keep["train"]],
        labels["train"][keep["train"]],
        features["test"][keep["test"]],
        labels["test"][keep["test"]],
        knn_k=knn_k,
        C=C,
    )
    return {"results": scores, "items": {s: int(k.sum()) for s, k in keep.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("export", type=Path)
    parser.add_argument("--task", choices=["auto", "sleep-staging", "classes"], default="auto")
    parser.add_argument(
        "--combine",
        choices=["concat", "mean"],
        default=None,
        help="per-view rows -> item (default: concat for sleep staging, mean for classes)",
    )
    parser.add_argument("--shots", type=int, nargs="+", default=[1000], help="sleep staging: windows per class")
    parser.add_argument("--draws", type=int, default=5, help="sleep staging: few-shot draws per s")
    parser.add_argument(
        "--C",
        type=float,
        default=None,
        help="inverse L2 strength (default: sleep staging chooses it by cross-validation inside the drawn "
        "windows as the evaluator does; classes use 1.0)",
    )
    parser.add_argument("--knn-k", type=int, default=20)
    parser.add_argument("--json", type=Path, default=None, help="also write the result here")
    args = parser.parse_args(argv)
    try:
        _, _, manifest = load_embeddings(args.export)
        task = (
            args.task if args.task != "auto" else ("sleep-staging" if manifest.get("modality") == "eeg" else "classes")
        )
        if task == "sleep-staging":
            result = sleep_staging(
                args.export,
                tuple(args.shots),
                args.draws,
                args.C,
                args.combine or ("concat" if manifest["views"] == "per-view" else None),
            )
            print(f"sleep staging on {args.export} ({result['windows']['test']} test windows, {args.draws} draws)")
            for s, scores in result["results"].items():
                print(
                    f"  s={s}: "
                    + ", ".join(
                        f"{m} {scores[m]['mean']:.4f} ± {scores[m]['std']:.4f}"
                        for m in ("accuracy", "balanced_accuracy", "macro_f1", "kappa")
                    )
                )
        else:
            result = classes(
                args.export,
                args.C if args.C is not None else 1.0,
                args.knn_k,
                args.combine or ("mean" if manifest["views"] == "per-view" else None),
            )
            print(
                f"classes on {args.export} ({result['items']['train']} train / {result['items']['test']} test items): "
                f"logreg acc {result['results']['logreg_acc']:.4f}, kNN acc {result['results']['knn_acc']:.4f}"
            )
    except (OSError, ValueError) as exc:
        print(f"downstream_from_export: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    result.update(task=task, export=str(args.export), run=manifest.get("run"), weights=manifest.get("weights"))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
