"""``mvapp plot embeddings (--export DIR | --run DIR) [--out DIR] [--method umap|tsne] [--color-by ...]
[--max-points N] [--seed S] [--tensorboard DIR]``: a 2-D map of exported embeddings."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..argtypes import nonnegative_int, positive_int
from ..cli import describe

# choices repeated from export/maps.py (which imports numpy): ``mvapp --help`` stays light; a test checks them equal
METHODS = ("umap", "tsne")
COLOR_CHOICES = ("auto", "label", "domain", "subject", "modality", "view", "split")
DEFAULT_MAX_POINTS = 5000


def add_subparser(subparsers: argparse._SubParsersAction) -> None:
    group = subparsers.add_parser(
        "plot",
        **describe(
            "pictures of a run's outputs (embedding maps)",
            "mvapp plot embeddings --export exports/digits_export --color-by label",
        ),
    )
    sub = group.add_subparsers(dest="plot", required=True, metavar="PLOT")
    parser = sub.add_parser(
        "embeddings",
        help="2-D UMAP / t-SNE map of exported embeddings (+ TensorBoard projector files)",
        description="Map the rows of an `mvapp export` folder (or of a run, exported first) to 2-D and colour them "
        "by a metadata column. Exports above --max-points rows are sampled (seeded; the count is printed "
        "and written to map.json).",
        epilog="example: mvapp plot embeddings --export exports/digits_export --method umap --color-by label",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--export", type=Path, help="an mvapp export folder (manifest.json)")
    source.add_argument("--run", type=Path, help="a run folder: its encoder features are exported first (--views mean)")
    parser.add_argument("--split", default="all", help="with --run: the split to export (train, test, ... or all)")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="folder for embeddings_<method>.png and map.json (default: <export>/maps; with --run "
        "required, the export goes to <out>/export)",
    )
    parser.add_argument("--method", choices=METHODS, default="umap", help="umap (umap-learn) or tsne (scikit-learn)")
    parser.add_argument(
        "--color-by",
        choices=COLOR_CHOICES,
        default="auto",
        help="metadata column that colours the points (auto: label, domain, subject, modality, view: "
        "the first with more than one value)",
    )
    parser.add_argument(
        "--max-points",
        type=positive_int,
        default=DEFAULT_MAX_POINTS,
        help="rows mapped at most (a seeded uniform sample above it)",
    )
    parser.add_argument("--seed", type=nonnegative_int, default=0, help="seed of the sample and of UMAP / t-SNE")
    parser.add_argument(
        "--tensorboard",
        type=Path,
        default=None,
        help="also write TensorBoard projector files (add_embedding with metadata) to this folder",
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from .maps import plot_embeddings

    export_dir = args.export
    if args.run is not None:
        from ..console import info
        from ..threads import configure_torch_threads
        from .export import export_embeddings

        if args.out is None:
            raise ValueError("--run needs --out (the export goes to <out>/export, the map to <out>)")
        configure_torch_threads(report=info)
        export_dir = args.out / "export"
        export_embeddings(args.run, export_dir, split=args.split, views="mean", overwrite=True, progress=False)
    summary = plot_embeddings(
        export_dir,
        args.out,
        method=args.method,
        color_by=args.color_by,
        max_points=args.max_points,
        seed=args.seed,
        tensorboard=args.tensorboard,
    )
    coloured = f"coloured by {summary.column}" if summary.column else "one colour (no column with several values)"
    print(
        f"mapped {summary.sampled} of {summary.rows} rows ({summary.method}, seed {summary.seed}, {coloured}): "
        f"{summary.png}" + (f"; TensorBoard projector: {summary.tensorboard}" if summary.tensorboard else "")
    )
    for note in summary.notes:
        print(f"note: {note}")
    return 0
