"""``mvapp export-model --run DIR --out DIR [--weights final|init|step_N] [--modality M] [--onnx]``: the
encoder as safetensors + config.json + model card (README.md), loadable by ``multiview_app.load_encoder``."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_subparser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export-model",
        help="write a run's encoder as safetensors + config + model card (+ ONNX) for other tools",
        description="Write the encoder of a run to a folder that multiview_app.load_encoder(DIR) (and timm, for timm "
        "image encoders) loads without the run folder: encoder.safetensors, config.json, README.md "
        "(model card: data, loss, steps, metrics, input contract), and with --onnx encoder.onnx.",
        epilog="example: mvapp export-model --run runs/digits_export --out exports/digits_encoder --onnx",
    )
    parser.add_argument("--run", required=True, type=Path, help="run folder (runs/<name>)")
    parser.add_argument("--out", required=True, type=Path, help="output folder (new or empty; see --overwrite)")
    parser.add_argument("--weights", default="final", help="final, init (random-init reference) or step_N (checkpoint)")
    parser.add_argument("--modality", default=None, help="which encoder of a multimodal run (image, text, eeg)")
    parser.add_argument(
        "--onnx",
        action="store_true",
        help="also write encoder.onnx (dynamic batch), checked against PyTorch under onnxruntime",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace the files of an existing encoder folder")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from ..console import info
    from ..threads import configure_torch_threads
    from .encoder import export_encoder

    configure_torch_threads(report=info)
    config = export_encoder(
        args.run, args.out, weights=args.weights, modality=args.modality, onnx=args.onnx, overwrite=args.overwrite
    )
    onnx = config.get("onnx")
    print(
        f"wrote {config['modality']}/{config['encoder']} encoder ({len(config['tensors'])} tensors, "
        f"{config['num_features']} features) to {args.out}"
        + (f"; ONNX checked against PyTorch: max |difference| {onnx['checked_max_abs_diff']:.2g}" if onnx else "")
    )
    return 0
