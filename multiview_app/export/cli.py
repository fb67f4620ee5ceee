"""``mvapp export --run DIR --out DIR [--weights final|init|step_N] [--split NAME|all] [--config data.yaml]
[data./views. overrides...]``: embeddings of a dataset for downstream classifiers."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..argtypes import nonnegative_int, positive_float, positive_int
from ..cli import describe
from .options import ALL_SPLITS, DEFAULT_MAX_SHARD_MB, FEATURE_KINDS, FILE_FORMATS, VIEW_MODES


def add_subparser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export",
        **describe(
            "export embeddings of a dataset split (for downstream classifiers)",
            "mvapp export --run runs/digits_m3g --out exports/digits_m3g                 # every split, one row per view",
            "mvapp export --run runs/eeg_m3g --out exports/eeg_edf data.options.cache=demo_data/sleep_edf_cache",
        ),
    )
    parser.add_argument("--run", required=True, type=Path, help="run folder (runs/<name>)")
    parser.add_argument("--out", required=True, type=Path, help="output folder (new or empty; see --overwrite)")
    parser.add_argument("--weights", default="final", help="final, init (random-init reference) or step_N (checkpoint)")
    parser.add_argument("--split", default=ALL_SPLITS, help="a split of the data adapter (train, test, ...) or 'all'")
    parser.add_argument("--config", default=None, help="YAML with data: (and views:) sections: export other data")
    parser.add_argument("overrides", nargs="*", help="dotted data./views. overrides, e.g. data.options.cache=DIR")
    parser.add_argument(
        "--features",
        choices=FEATURE_KINDS,
        default="encoder",
        help="encoder: backbone features (linear evaluation); projector: the loss head's space",
    )
    parser.add_argument(
        "--views",
        choices=VIEW_MODES,
        default="per-view",
        help="per-view: one row per item and view; mean / concat: one row per item",
    )
    parser.add_argument("--normalize", action="store_true", help="L2-normalize every exported row")
    parser.add_argument(
        "--format",
        choices=FILE_FORMATS,
        default="npy",
        dest="file_format",
        help="npy (memory-mappable + metadata.parquet) or parquet (embedding list<float32> column)",
    )
    parser.add_argument(
        "--batch-size", type=positive_int, default=None, help="items per forward (default: eval.batch_size)"
    )
    parser.add_argument("--num-workers", type=nonnegative_int, default=0, help="DataLoader workers")
    parser.add_argument("--device", default=None, help="torch device (default: the launcher's device for this process)")
    parser.add_argument(
        "--max-shard-mb", type=positive_float, default=DEFAULT_MAX_SHARD_MB, help="largest embeddings shard"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing export in --out")
    parser.add_argument(
        "--accept-input-differences",
        action="store_true",
        help="export data whose rate / band / units / window / scaling differ from the run's "
        "input_contract.json (refused otherwise; the differences go into the manifest)",
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    import os

    from ..console import info
    from ..threads import configure_torch_threads
    from ..train.input_contract import format_input_differences
    from .export import export_embeddings

    # MVAPP_NUM_THREADS > OMP_NUM_THREADS > auto; the choice printed by the main process of a launch
    configure_torch_threads(report=info if os.environ.get("RANK", "0") == "0" else None)

    if args.batch_size is not None and args.batch_size < 1 or args.num_workers < 0 or args.max_shard_mb <= 0:
        raise ValueError(
            f"--batch-size, --max-shard-mb must be positive and --num-workers >= 0 "
            f"(got {args.batch_size}, {args.max_shard_mb}, {args.num_workers})"
        )
    manifest = export_embeddings(
        args.run,
        args.out,
        weights=args.weights,
        split=args.split,
        features=args.features,
        views=args.views,
        normalize=args.normalize,
        file_format=args.file_format,
        config_file=args.config,
        overrides=args.overrides,
        batch_size=args.batch_size,
        num_workers=args.num_workers,
        device=args.device,
        max_shard_mb=args.max_shard_mb,
        overwrite=args.overwrite,
        accept_input_differences=args.accept_input_differences,
    )
    if manifest.get("input_differences") and _is_main():
        print(f"note: {format_input_differences(manifest['input_differences'])}")
    if manifest.get("timing") is not None and _is_main():
        timing = manifest["timing"]
        print(
            f"exported {manifest['rows']} rows x {manifest['dim']} ({manifest['features']}, {manifest['views']}) of "
            f"split {manifest['split']} in {len(manifest['shards'])} shard(s) to {args.out} "
            f"({timing['rows_per_s_main']} rows/s on the main process)"
        )
    _close_process_group()
    return 0


def _close_process_group() -> None:
    """End a launch's process group once every process is done (left to interpreter exit, gloo's threads may
    abort with 'terminate called without an active exception')."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def _is_main() -> bool:
    from accelerate import PartialState

    return PartialState().is_main_process  # already set up by the export
