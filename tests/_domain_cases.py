"""Shared tiny digit-domain setting of tests/test_dg_selection.py and tests/test_erm_trainer.py: three
domains (sketch held out) at 16 px with a training-domain validation share."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def tiny_domain_config(
    root: Path,
    path: Path,
    *,
    width: int,
    num_features: int,
    loss: dict[str, Any],
    train: dict[str, Any],
    optim: dict[str, Any] | None = None,
) -> Path:
    """Write a YAML config to ``path``: clean / inverted / sketch, k = 2 `test` views, small_cnn."""
    path.write_text(
        yaml.safe_dump(
            {
                "data": {
                    "adapter": "domainnet",
                    "options": {
                        "root": str(root),
                        "load_size": 16,
                        "decode_workers": 0,
                        "domains": ["clean", "inverted", "sketch"],
                        "holdout": "sketch",
                        "val_fraction": 0.2,
                    },
                },
                "views": {"policy": "domains", "k": 2, "options": {"image_size": 16, "stacks": "test"}},
                "model": {
                    "encoders": {"image": {"name": "small_cnn", "width": width, "num_features": num_features}},
                    "projector": {"hidden_dim": 8, "out_dim": 8},
                },
                "loss": loss,
                **({"optim": optim} if optim else {}),
                "train": train,
                "eval": {"linear_probe": False, "batch_size": 256},
            }
        )
    )
    return path
