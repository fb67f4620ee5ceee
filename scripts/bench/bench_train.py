"""Training steps: the real trainer's throughput and step split, the EEG demo's step and feature extraction, and
PSG modalities as views against the demo's step; ``--setup`` picks one.

    .venv/bin/python scripts/bench/bench_train.py [--config configs/digits_infonce_pwe.yaml] [--steps 15] [--set KEY=VALUE ...]
    .venv/bin/python scripts/bench/bench_train.py --compare diagnostics [--log-every 10]
    .venv/bin/python scripts/bench/bench_train.py --setup eeg-demo [--repeats 5 --steps 5 --windows 512]
    .venv/bin/python scripts/bench/bench_train.py --setup psg-modalities [--steps 20]

``--setup trainer`` (default; docs/benchmarks.md, "Trainer throughput"): runs the real trainer (Trainer.fit, no
checkpoints, no eval) for 2 x --steps steps and reads the second log window of metrics.jsonl (the first one holds
the warm-up). Reference in the same process: the same trainer with ``train.prefetch_views=false`` (views built in
the step instead of in the background thread). The two variants alternate (on, off, on, off) because the machine
is shared; the table shows the mean per variant. ``time/data`` is the part of the step spent waiting for the next
micro-batch (what prefetching does not hide); ``data_build_s`` is the host time of fetching the batch plus
building its views per step, wherever it ran. On CUDA both are host times (phases timed on the logging steps).
``--compare diagnostics``: reference = ``train.diagnostics=false``; one log window of ``--steps`` steps holds one
diagnostics computation, so the overhead per step at ``train.log_every = L`` is ``diag/time_s / (L x step time)``.

``--setup eeg-demo`` ("EEG demo"): the demo model's training step (channel-agnostic ``eeg/conv`` width 32,
projector 256 -> 64, M3G k = 6, n = 16, epsilon 0.2, Anderson 16, diagonal start; forward + loss + backward +
AdamW) with 2 vs 1 torch intra-op threads, and frozen-encoder feature extraction of ``--windows`` windows in
batches of 256 vs 16 windows x 6 channels (the evaluator's default is 16); interleaved over ``--repeats`` rounds.

``--setup psg-modalities`` ("PSG modalities"): one step (views from a raw batch, forward, M3G, backward, AdamW;
n = 16, one thread) of ``configs/psg_modalities_sleepfm.yaml`` (k = 3 modalities) and
``configs/psg_modalities_six.yaml`` (k = 6) against the EEG demo's (``eeg/chambon``, k = 6 EEG channels as views,
20-s crops, gain, noise, a 2-Hz band stop), on random windows of each shape, interleaved step by step after a
warm-up; median of ``--steps`` steps and the ratio to the demo's (the goal: <= 1.5x).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from common import command_line, machine_line, markdown_table

from multiview_app.config import load_config
from multiview_app.data.batch import ViewBatch
from multiview_app.data.eeg.modal_views import resolve_modalities
from multiview_app.data.views import build_view_policy, items_per_batch
from multiview_app.losses import build_loss
from multiview_app.models import build_model
from multiview_app.train.metrics import PHASES, read_metrics
from multiview_app.train.trainer import train

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
N = 16
GROUPS = {"brain": (6, 100.0), "eyes": (1, 100.0), "muscle": (1, 100.0), "heart": (1, 200.0)}
GROUPS.update({"breathing": (3, 10.0), "oximetry": (1, 1.0)})
DEMO_VIEWS = {"crop_seconds": 20, "amplitude_scale": [0.5, 2.0], "noise_std": 0.1, "band_stop_hz": 2.0}
DEFAULTS = {"trainer": (15, 2), "eeg-demo": (5, 5), "psg-modalities": (20, 1)}
"""Per setup: the default ``--steps`` and ``--repeats``."""


def measure(
    config: str, steps: int, prefetch: bool, diagnostics: bool = True, overrides: tuple[str, ...] = ()
) -> dict[str, float]:
    """The measured log window (items/s, step time, phase shares, data build time) of one short training run."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(
            config,
            [
                *overrides,
                f"train.max_steps={2 * steps}",
                f"train.log_every={steps}",
                "train.checkpoint_every=0",
                "eval.linear_probe=false",
                f"train.prefetch_views={str(prefetch).lower()}",
                f"train.diagnostics={str(diagnostics).lower()}",
                f"output.runs_dir={tmp}",
            ],
            name="bench",
        )
        train(cfg)
        return read_metrics(Path(tmp) / "bench" / "metrics.jsonl")[-1]


def trainer_table(args: argparse.Namespace) -> int:
    """Prefetch on (default) vs off: throughput, step time, phase shares and data build time."""
    runs: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    for _ in range(args.repeats):
        for prefetch in (True, False):
            runs[prefetch].append(measure(args.config, args.steps, prefetch, overrides=args.overrides))
    cfg = load_config(args.config, list(args.overrides))
    items = items_per_batch(cfg.views.batch_mode, cfg.train.batch_size, cfg.views.k)

    def mean(prefetch: bool, key: str) -> float:
        return statistics.mean(r[key] for r in runs[prefetch])

    print(
        f"config {Path(args.config).name}: {items} items x {cfg.views.k} views per step, "
        f"{torch.get_num_threads()} torch threads, {args.steps} measured steps x {args.repeats} repeats\n"
    )
    on, off = mean(True, "items_per_s"), mean(False, "items_per_s")
    rows = [["throughput (items/s)", f"{on:.1f}", f"{off:.1f}", f"{on / off:.2f}"]]
    rows.append(["step time (s)", f"{mean(True, 'step_time_s'):.3f}", f"{mean(False, 'step_time_s'):.3f}", ""])
    shares = {f"share of step: {phase}": (f"time/{phase}",) for phase in PHASES}
    shares["share of step: encoder (forward + backward)"] = ("time/forward", "time/backward")
    shares["share of step: data + loss (goal < 20%)"] = ("time/data", "time/loss")
    rows += [
        [label, *(f"{sum(mean(p, key) for key in keys):.1%}" for p in (True, False)), ""]
        for label, keys in shares.items()
    ]
    build = [mean(p, "data_build_s") for p in (True, False)]
    rows.append(["fetch + views per step (s, host)", f"{build[0]:.4f}", f"{build[1]:.4f}", ""])
    steps = [build[0] / mean(True, "step_time_s"), build[1] / mean(False, "step_time_s")]
    rows.append(["fetch + views / step time", f"{steps[0]:.1%}", f"{steps[1]:.1%}", ""])
    per_step = items * cfg.train.grad_accum
    rows.append(["steps/s (window wall time)", f"{on / per_step:.2f}", f"{off / per_step:.2f}", ""])
    print(markdown_table(["measurement", "prefetch on (default)", "prefetch off (reference)", "on / off"], rows))
    print(f"\n{machine_line()}\n{command_line()}")
    return 0


def diagnostics_table(args: argparse.Namespace) -> int:
    """Diagnostics on (default) vs off: throughput ratio and the measured diagnostics time per step."""
    runs: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    for _ in range(args.repeats):
        for diagnostics in (True, False):
            runs[diagnostics].append(measure(args.config, args.steps, True, diagnostics, args.overrides))
    on = statistics.mean(r["items_per_s"] for r in runs[True])
    off = statistics.mean(r["items_per_s"] for r in runs[False])
    step = statistics.mean(r["step_time_s"] for r in runs[True])
    diag = statistics.mean(r["diag/time_s"] for r in runs[True])
    print(
        f"config {Path(args.config).name}: {torch.get_num_threads()} torch threads, "
        f"{args.steps} measured steps x {args.repeats} repeats\n"
    )
    rows = [["throughput (items/s)", f"{on:.1f}", f"{off:.1f}", f"{on / off:.3f}"]]
    rows.append(["step time (s)", f"{step:.3f}", f"{statistics.mean(r['step_time_s'] for r in runs[False]):.3f}", ""])
    rows.append(["one diagnostics computation (s)", f"{diag:.4f}", "", ""])
    rows.append([f"overhead per step at log_every={args.log_every}", f"{diag / (args.log_every * step):.2%}", "", ""])
    rows.append(["overhead per step at log_every=1", f"{diag / step:.2%}", "", ""])
    print(markdown_table(["measurement", "diagnostics on (default)", "diagnostics off (reference)", "on / off"], rows))
    print(f"\n{machine_line()}\n{command_line()}")
    return 0


class Variant:
    """One model + M3G loss + AdamW and how it gets a batch; ``times``: the recorded step seconds."""

    def __init__(self, model: torch.nn.Module, batch: Callable[[torch.Generator], ViewBatch], **loss: Any) -> None:
        self.model, self.batch = model.train(), batch
        self.loss = build_loss("m3g", epsilon=0.2, anderson=16, init_potentials="diagonal", **loss)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.times: list[float] = []

    def step(self, generator: torch.Generator, record: bool = True) -> None:
        """One timed step: the batch's views, forward, loss, backward, optimizer."""
        start = time.perf_counter()
        loss = self.loss(self.model.embed(self.batch(generator)))
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        if record:
            self.times.append(time.perf_counter() - start)


def ratio_table(title: str, rows: dict[str, list[float]], column: str, scale: float = 1.0) -> list[str]:
    """Median of each row (x ``scale``) and its ratio to the first row's median: the title line, then the table."""
    reference = statistics.median(next(iter(rows.values())))
    medians = {name: statistics.median(values) for name, values in rows.items()}
    cells = [[name, f"{m * scale:.{1 if scale > 1 else 3}f}", f"{m / reference:.2f}"] for name, m in medians.items()]
    return [title, markdown_table(["variant", column, "ratio to the reference"], cells)]


def conv_demo_model() -> torch.nn.Module:
    """The EEG demo's model of ``--setup eeg-demo``: ``eeg/conv`` width 32, channel-agnostic, projector 256 -> 64."""
    torch.manual_seed(0)
    encoder = {"name": "conv", "width": 32, "out_dim": 64, "dropout": 0.0, "channel_mode": "agnostic"}
    return build_model({"eeg": encoder}, {"hidden_dim": 256, "out_dim": 64}, None)


def step_seconds(threads: int, steps: int, x: torch.Tensor) -> float:
    """Median seconds of one optimizer step on ``x (n, 6, T)`` (each channel a view) with ``threads`` threads."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        k = x.shape[1]
        batch = ViewBatch([x[:, c] for c in range(k)], ["eeg"] * k, [f"c{c}" for c in range(k)], None, {})
        variant = Variant(conv_demo_model(), lambda _: batch, max_iter=300)
        for _ in range(steps):
            variant.step(torch.Generator())
        return statistics.median(variant.times)
    finally:
        torch.set_num_threads(previous)


@torch.no_grad()
def extraction_seconds(windows_per_batch: int, x: torch.Tensor) -> float:
    """Seconds to encode every channel of ``x (N, 6, T)`` in batches of ``windows_per_batch`` windows."""
    encoder = conv_demo_model().encoders["eeg"].eval()
    start = time.perf_counter()
    for i in range(0, x.shape[0], windows_per_batch):
        chunk = x[i : i + windows_per_batch]
        encoder(chunk.reshape(-1, chunk.shape[-1]))
    return time.perf_counter() - start


def eeg_demo_table(args: argparse.Namespace) -> int:
    """The demo's step with 2 vs 1 threads, feature extraction in batches of 256 vs 16 windows."""
    generator = torch.Generator().manual_seed(0)
    batch = torch.randn(N, 6, 3000, generator=generator)
    windows = torch.randn(args.windows, 6, 3000, generator=generator)
    steps: dict[str, list[float]] = {"2 threads (reference)": [], "1 thread": []}
    extraction: dict[str, list[float]] = {"256 windows per batch (reference)": [], "16 windows per batch": []}
    for _ in range(args.repeats):
        steps["2 threads (reference)"].append(step_seconds(2, args.steps, batch))
        steps["1 thread"].append(step_seconds(1, args.steps, batch))
        torch.set_num_threads(1)
        extraction["256 windows per batch (reference)"].append(extraction_seconds(256, windows))
        extraction["16 windows per batch"].append(extraction_seconds(16, windows))
    print("\n".join(ratio_table(f"training step, demo model (n = {N}, k = 6)", steps, "median s")), end="\n\n")
    title = f"feature extraction, {args.windows} windows x 6 channels, 1 thread"
    print("\n".join(ratio_table(title, extraction, "median s")))
    print(f"\n{machine_line()}\n{command_line()}")
    return 0


def chambon_demo(generator: torch.Generator) -> Variant:
    """The demo's EEG step of ``--setup psg-modalities``: eeg/chambon on k = 6 channels as views."""
    channels = ["F3-M2", "F4-M1", "C3-M2", "C4-M1", "O1-M2", "O2-M1"]
    adapter = SimpleNamespace(modality="eeg", channel_names=channels, sfreq=100.0, window_seconds=30.0)
    policy = build_view_policy("channels", 6, DEMO_VIEWS, adapter)  # type: ignore[arg-type]
    raw = {"x": torch.randn(N, 6, 3000, generator=generator), "label": torch.zeros(N)}
    torch.manual_seed(0)
    model = build_model({"eeg": {"name": "chambon", "out_dim": 64}}, {"hidden_dim": 256, "out_dim": 64})
    return Variant(model, lambda g: policy.train_views(raw, g))


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
    model = build_model(cfg.model.encoders, cfg.model.projector)
    return Variant(model, lambda g: policy.train_views(raw, g))


def psg_modalities_table(args: argparse.Namespace) -> int:
    """The PSG modality configs' steps against the demo's, interleaved step by step after ``--warmup``."""
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(0)
    variants = {
        "EEG demo: eeg/chambon, k = 6 channels (reference)": chambon_demo(generator),
        "psg_modalities_sleepfm: k = 3 modalities": modalities("psg_modalities_sleepfm.yaml", generator),
        "psg_modalities_six: k = 6 modalities": modalities("psg_modalities_six.yaml", generator),
    }
    for step in range(args.warmup + args.steps):  # interleaved: each variant sees the same machine load
        for variant in variants.values():
            variant.step(generator, record=step >= args.warmup)
    title = f"training step (views + forward + M3G + backward + AdamW), n = {N}, 1 thread, median of {args.steps}"
    print("\n".join(ratio_table(title, {k: v.times for k, v in variants.items()}, "median ms", 1000.0)))
    print(f"\n{machine_line()}\n{command_line()}")
    return 0


SETUPS: dict[str, Callable[[argparse.Namespace], int]] = {
    "trainer": trainer_table,
    "eeg-demo": eeg_demo_table,
    "psg-modalities": psg_modalities_table,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setup", choices=SETUPS, default="trainer", help="what is timed (default: %(default)s)")
    parser.add_argument("--config", default=str(CONFIGS / "digits_infonce_pwe.yaml"), help="trainer: the config")
    parser.add_argument("--steps", type=int, default=None, help=f"measured steps (default per setup: {DEFAULTS})")
    parser.add_argument("--repeats", type=int, default=None, help="rounds (default per setup, as --steps)")
    parser.add_argument("--compare", choices=("prefetch", "diagnostics"), default="prefetch", help="trainer: reference")
    parser.add_argument("--log-every", type=int, default=10, help="train.log_every of the diagnostics overhead")
    parser.add_argument("--windows", type=int, default=512, help="eeg-demo: windows encoded per extraction round")
    parser.add_argument("--warmup", type=int, default=3, help="psg-modalities: untimed steps per variant first")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="trainer: config override (dotted key), repeatable: e.g. --set data.options.cache=demo_data/physionet2018_cache",
    )
    args = parser.parse_args()
    steps, repeats = DEFAULTS[args.setup]
    args.steps, args.repeats = args.steps or steps, args.repeats or repeats
    args.overrides = tuple(args.overrides)
    if args.setup == "trainer" and args.compare == "diagnostics":
        return diagnostics_table(args)
    return SETUPS[args.setup](args)


if __name__ == "__main__":
    raise SystemExit(main())
