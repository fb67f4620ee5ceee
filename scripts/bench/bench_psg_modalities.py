"""Training step of PSG modalities as views vs the EEG demo's step (docs/benchmarks.md, "PSG modalities").

One training step = the views built from a raw batch (crops, augmentations; for the modality views also the
SpO2 upsampling) + forward + loss + backward + AdamW, at n = 16 items, one torch thread:

- reference: the EEG demo (``configs/demo_eeg.yaml``): ``eeg/chambon`` (out_dim 64), k = 6 EEG channels as
  views, 20-s crops, gain, noise and a 2-Hz band stop;
- ``configs/psg_modalities_sleepfm.yaml``: k = 3 modalities (brain 7 channels at 100 Hz, heart at 200 Hz,
  breathing 4 channels at 10 Hz with SpO2 upsampled), each through its own encoder;
- ``configs/psg_modalities_six.yaml``: k = 6 modalities.

All use M3G (epsilon 0.2, Anderson 16, diagonal start) and the projector 256 -> 64. The variants run in this
process on random windows of the right shapes, interleaved step by step after a warm-up; the table gives the
median of ``--steps`` steps and the ratio to the reference (the goal: <= 1.5x).

    python scripts/bench/bench_psg_modalities.py [--steps 20]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from common import machine_line

from multiview_app.config import load_config
from multiview_app.data.eeg.modal_views import resolve_modalities
from multiview_app.data.views import build_view_policy
from multiview_app.losses import build_loss
from multiview_app.models import build_model

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
N = 16
GROUPS = {"brain": (6, 100.0), "eyes": (1, 100.0), "muscle": (1, 100.0), "heart": (1, 200.0)}
GROUPS.update({"breathing": (3, 10.0), "oximetry": (1, 1.0)})
DEMO_VIEWS = {"crop_seconds": 20, "amplitude_scale": [0.5, 2.0], "noise_std": 0.1, "band_stop_hz": 2.0}


class Variant:
    """One model + loss + optimizer + view policy, and its raw batch."""

    def __init__(self, model: torch.nn.Module, policy: Any, raw: dict[str, Any]) -> None:
        self.model, self.policy, self.raw = model.train(), policy, raw
        self.loss = build_loss("m3g", epsilon=0.2, anderson=16, init_potentials="diagonal")
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.times: list[float] = []

    def step(self, generator: torch.Generator, record: bool = True) -> None:
        start = time.perf_counter()
        batch = self.policy.train_views(self.raw, generator)
        loss = self.loss(self.model.embed(batch))
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        if record:
            self.times.append(time.perf_counter() - start)


def eeg_demo(generator: torch.Generator) -> Variant:
    """The demo's EEG step: eeg/chambon on k = 6 channels as views."""
    channels = ["F3-M2", "F4-M1", "C3-M2", "C4-M1", "O1-M2", "O2-M1"]
    adapter = SimpleNamespace(modality="eeg", channel_names=channels, sfreq=100.0, window_seconds=30.0)
    policy = build_view_policy("channels", 6, DEMO_VIEWS, adapter)  # type: ignore[arg-type]
    torch.manual_seed(0)
    model = build_model({"eeg": {"name": "chambon", "out_dim": 64}}, {"hidden_dim": 256, "out_dim": 64})
    return Variant(model, policy, {"x": torch.randn(N, 6, 3000, generator=generator), "label": torch.zeros(N)})


def modalities(config: str, generator: torch.Generator) -> Variant:
    """The step of a PSG modality config (its encoders, views and augmentations) on random windows."""
    cfg = load_config(CONFIGS / config, ["data.options.cache=unused"])
    specs = resolve_modalities(cfg.data.options["modalities"])  # type: ignore[arg-type]
    rates = {g: rate for g, (_, rate) in GROUPS.items()}
    view_rates = {m: s.sfreq or max(rates[g] for g in s.groups) for m, s in specs.items()}
    adapter = SimpleNamespace(
        modality="psg", modalities=specs, group_rates=rates, modality_rates=view_rates, window_seconds=30.0
    )
    policy = build_view_policy("modalities", len(specs), dict(cfg.views.options), adapter)  # type: ignore[arg-type]
    raw: dict[str, Any] = {
        f"x/{g}": torch.randn(N, c, int(30 * rate), generator=generator) for g, (c, rate) in GROUPS.items()
    }
    raw.update({"modalities": [",".join(specs)] * N, "label": torch.zeros(N)})
    torch.manual_seed(0)
    return Variant(build_model(cfg.model.encoders, cfg.model.projector), policy, raw)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="timed steps per variant (median)")
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(0)
    variants = {
        "EEG demo: eeg/chambon, k = 6 channels (reference)": eeg_demo(generator),
        "psg_modalities_sleepfm: k = 3 modalities": modalities("psg_modalities_sleepfm.yaml", generator),
        "psg_modalities_six: k = 6 modalities": modalities("psg_modalities_six.yaml", generator),
    }
    for step in range(args.warmup + args.steps):  # interleaved: each variant sees the same machine load
        for variant in variants.values():
            variant.step(generator, record=step >= args.warmup)
    reference = statistics.median(next(iter(variants.values())).times)
    print(f"training step (views + forward + M3G + backward + AdamW), n = {N}, 1 thread, median of {args.steps}")
    print("| variant | median ms | ratio to the EEG demo step |")
    print("|---|---|---|")
    for name, variant in variants.items():
        median = statistics.median(variant.times)
        print(f"| {name} | {median * 1000:.1f} | {median / reference:.2f} |")
    print()
    print(machine_line())


if __name__ == "__main__":
    main()
