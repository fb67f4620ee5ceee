"""Benchmark: domain-tuple loader throughput vs the training step's consumption; decode path vs PIL.

Usage: ``python scripts/bench/bench_domains.py [--root data/digit-domains] [--config configs/domains_digits_m3g.yaml]
[--batches 40] [--steps 15] [--workers 2] [--files 2000]`` or ``python scripts/bench/bench_domains.py --eval-run RUN
--erm-run ERM_RUN [--max-candidates N]`` or ``python scripts/bench/bench_domains.py --preload-sweep N``

1. Loader: the default config's ``domainnet`` adapter with ``preload: false`` (every image read and
   decoded on access, as for the real DomainNet), ``workers`` DataLoader workers, batches of n = 16
   domain tuples (k = 5 images each), then the ``domains`` policy's simclr views in the main
   process: images/s through the whole input path.
2. Consumption: optimizer steps of the same config on ready view batches (forward, loss, backward,
   AdamW) in the same process -> images/s the training step eats. Ratio loader / consumption:
   goal >= 3x (the loader then hides behind the step even when it gets a third of the CPU).
3. Decode: the same ``--files`` files read by ``decode_file`` (torchvision.io, libjpeg-turbo) vs PIL
   (``Image.open`` + RGB + bilinear resize, the image adapters' ``to_uint8_rgb``), one thread; then
   the same on ``--large-files`` DomainNet-sized JPEGs (the digits up-sampled to ``--large-size`` px).
Prints a markdown table.

With ``--eval-run RUN --erm-run ERM [--max-candidates N]`` it times the domain evaluator instead, three
times on the same finished run in one process (CPU seconds, ``time.process_time``, which a loaded machine
distorts less than wall time; both printed): the former path (every probe refitted where it is used, no
reference cache), the current path on a cold reference cache (the first run of a target and seed) and on a
warm one (every later loss / protocol of that target and seed: random init and ERM are read back). All
three results must be identical (printed; exit 1 if not).

With ``--preload-sweep N`` it times what a sweep (``mvapp experiment domains-grid``: a pretraining, an ERM and an
evaluation per run, each building the adapter anew) spends decoding: N adapters of the config, preloaded, each
reading every split of every domain, without (``MVAPP_DECODE_CACHE_MB=0``) and with the in-process decoded-split
cache; same pixels required (exit 1 if not).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, default_collate

ROOT = Path(__file__).resolve().parents[2]

from common import machine_line, markdown_table, ratio  # noqa: E402

from multiview_app.config import load_config  # noqa: E402
from multiview_app.data.adapters import build_adapter  # noqa: E402
from multiview_app.data.domains.adapter import decode_file  # noqa: E402
from multiview_app.data.images.adapters import to_uint8_rgb  # noqa: E402
from multiview_app.data.views import build_view_policy  # noqa: E402
from multiview_app.losses import build_loss  # noqa: E402
from multiview_app.train.run_io import build_model_from_spec, model_spec  # noqa: E402


def loader_rate(adapter, policy, n: int, batches: int, workers: int) -> float:
    """Images/s of read + decode + resize (workers) + simclr views (main process), after one warm-up batch."""
    dataset = adapter.split("train")
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(0))[: n * (batches + 1)]
    loader = DataLoader(
        dataset,
        batch_sampler=order.view(-1, n).tolist(),
        num_workers=workers,
        collate_fn=default_collate,
        persistent_workers=False,
    )
    it = iter(loader)
    generator = torch.Generator().manual_seed(0)
    policy.train_views(next(it), generator)  # warm-up (workers started)
    start = time.perf_counter()
    images = 0
    for raw in it:
        views = policy.train_views(raw, generator)
        images += sum(v.shape[0] for v in views.views)
    return images / (time.perf_counter() - start)


def step_rate(cfg, adapter, policy, steps: int) -> float:
    """Images/s consumed by forward + loss + backward + AdamW on ready view batches."""
    torch.manual_seed(0)
    model = build_model_from_spec(model_spec(cfg)).train()
    loss_fn = build_loss(cfg.loss.name, **cfg.loss.params)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.optim.lr)
    dataset = adapter.split("train")
    n = cfg.train.batch_size
    generator = torch.Generator().manual_seed(1)
    batches = [
        policy.train_views(default_collate([dataset[i] for i in range(s * n, (s + 1) * n)]), generator)
        for s in range(steps + 1)
    ]

    def one(batch) -> None:
        loss = loss_fn(model.embed(batch))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    one(batches[0])
    start = time.perf_counter()
    for batch in batches[1:]:
        one(batch)
    return steps * n * cfg.views.k / (time.perf_counter() - start)


def decode_rates(paths: list[str], size: int) -> tuple[float, float]:
    """Images/s of :func:`decode_file` and of the PIL baseline on the same files (one thread)."""
    from PIL import Image

    def pil(path: str) -> torch.Tensor:
        with Image.open(path) as img:
            return to_uint8_rgb(img, size)

    rates = []
    for fn in (lambda p: decode_file(p, size), pil):
        fn(paths[0])
        start = time.perf_counter()
        for p in paths:
            fn(p)
        rates.append(len(paths) / (time.perf_counter() - start))
    return rates[0], rates[1]


def large_decode_rates(paths: list[str], side: int, load_size: int) -> tuple[float, float]:
    """:func:`decode_rates` on DomainNet-sized files: the digit images up-sampled to ``side`` px and
    saved as JPEG (quality 90) in a temporary folder, decoded to ``load_size``."""
    import tempfile

    from PIL import Image

    with tempfile.TemporaryDirectory() as tmp:
        big = []
        for i, path in enumerate(paths):
            with Image.open(path) as img:
                out = f"{tmp}/{i}.jpg"
                img.convert("RGB").resize((side, side), Image.BICUBIC).save(out, quality=90)
                big.append(out)
        return decode_rates(big, load_size)


def eval_rates(run: Path, erm_run: Path, max_candidates: int | None) -> int:
    """The evaluator three ways (module docstring): table of CPU / wall seconds and ratios; 0 when the three
    results are identical."""
    import json
    import tempfile

    import multiview_app.eval.protocols.domains as protocol
    from multiview_app.eval.domain_generalization import evaluate_run
    from multiview_app.eval.protocols.probe import fit_linear_classifier

    class Refit(protocol.ProbeFits):
        """The former path: a probe fitted wherever it is used."""

        def __call__(self, features, candidate, domains, C):  # noqa: ANN001, ANN204
            return fit_linear_classifier(*protocol.pooled(features, candidate, domains, "train"), C=C)

    def timed(**kwargs) -> tuple[float, float, dict]:
        wall, cpu = time.perf_counter(), time.process_time()
        result = evaluate_run(run, erm_run=erm_run, progress=False, max_candidates=max_candidates, **kwargs)
        return time.process_time() - cpu, time.perf_counter() - wall, result

    shared = protocol.ProbeFits
    protocol.ProbeFits = Refit
    try:
        reference = timed()
    finally:
        protocol.ProbeFits = shared
    with tempfile.TemporaryDirectory() as cache:
        cold = timed(reference_cache=cache)
        warm = timed(reference_cache=cache)
    same = all(
        json.dumps(r[2]["results"], sort_keys=True) == json.dumps(reference[2]["results"], sort_keys=True)
        for r in (cold, warm)
    )
    candidates = {k: len(v) for k, v in reference[2]["selection_candidates"].items()}
    print(f"run {run} (candidates per encoder {candidates}), ERM {erm_run}; {machine_line()}")
    rows = [
        [name, f"{cpu:.1f}", f"{wall:.1f}", ratio(reference[0], cpu)]
        for name, (cpu, wall, _) in (
            ("former: probes refitted, no reference cache", reference),
            ("probes fitted once, reference cache cold (first run of a target/seed)", cold),
            ("probes fitted once, reference cache warm (later runs)", warm),
        )
    ]
    print(markdown_table(["evaluation path", "CPU s", "wall s", "CPU ratio vs former"], rows))
    print(f"results identical (selection, every score) across the three: {'yes' if same else 'NO'}")
    return 0 if same else 1


def preload_sweep(root: Path, config: Path, repeats: int) -> int:
    """Seconds for ``repeats`` adapter builds reading every split, without / with the decoded-split cache."""
    import os

    from multiview_app.data.domains.adapter import DECODED_SPLITS

    cfg = load_config(config, [f"data.options.root={root}", "data.options.holdout=null"])

    def sweep() -> tuple[float, float, torch.Tensor]:
        DECODED_SPLITS.clear()
        start_wall, start_cpu = time.perf_counter(), time.process_time()
        for _ in range(repeats):
            adapter = build_adapter(cfg.data.adapter, cfg.data.options)
            parts = [adapter.domain_split(d, s).images for d in adapter.domains for s in adapter.domain_splits]
        return time.perf_counter() - start_wall, time.process_time() - start_cpu, torch.cat(parts)

    before = os.environ.get("MVAPP_DECODE_CACHE_MB")
    os.environ["MVAPP_DECODE_CACHE_MB"] = "0"
    off = sweep()
    if before is None:
        del os.environ["MVAPP_DECODE_CACHE_MB"]
    else:
        os.environ["MVAPP_DECODE_CACHE_MB"] = before
    on = sweep()
    same = torch.equal(off[2], on[2])
    print(
        f"{repeats} adapter builds of {config.name}, every split of every domain ({len(on[2])} images per build, "
        f"{cfg.data.options.get('load_size')} px, decode_workers {cfg.data.options.get('decode_workers', 2)}); "
        f"{machine_line()}"
    )
    rows = [
        ["decode every build (MVAPP_DECODE_CACHE_MB=0)", f"{off[1]:.1f}", f"{off[0]:.1f}", "1.00x"],
        ["decoded-split cache (default)", f"{on[1]:.1f}", f"{on[0]:.1f}", ratio(off[0], on[0])],
    ]
    print(markdown_table(["path", "CPU s (main process)", "wall s", "wall ratio"], rows))
    print(f"same pixels: {'yes' if same else 'NO'}")
    return 0 if same else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT / "data" / "digit-domains")
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "domains_digits_m3g.yaml")
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the main process")
    parser.add_argument("--large-files", type=int, default=300, help="files for the DomainNet-sized decode rows")
    parser.add_argument("--large-size", type=int, default=400, help="side of those JPEGs")
    parser.add_argument("--large-load", type=int, default=256, help="load size they are decoded to")
    parser.add_argument("--eval-run", type=Path, default=None, help="time the domain evaluator on this finished run")
    parser.add_argument("--erm-run", type=Path, default=None, help="its finished ERM run (with --eval-run)")
    parser.add_argument("--max-candidates", type=int, default=None, help="with --eval-run: checkpoints per encoder")
    parser.add_argument(
        "--preload-sweep",
        type=int,
        default=0,
        metavar="N",
        help="time N adapter builds reading every split, without / with the decoded-split cache",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)  # DataLoader workers run with 1 thread; 1 avoids OpenMP stalls on a shared CPU
    if args.eval_run is not None:
        if args.erm_run is None:
            parser.error("--eval-run needs --erm-run")
        return eval_rates(args.eval_run, args.erm_run, args.max_candidates)
    if not args.root.is_dir():
        from multiview_app.data.domains.synth import synth_domains

        synth_domains(args.root)
    if args.preload_sweep:
        return preload_sweep(args.root, args.config, args.preload_sweep)
    cfg = load_config(args.config, [f"data.options.root={args.root}", "data.options.preload=false"])
    adapter = build_adapter(cfg.data.adapter, cfg.data.options)
    policy = build_view_policy(cfg.views.policy, cfg.views.k, cfg.views.options, adapter)
    size = cfg.data.options.get("load_size", 32)
    load = loader_rate(adapter, policy, cfg.train.batch_size, args.batches, args.workers)
    consume = step_rate(cfg, adapter, policy, args.steps)
    paths = [p for d in adapter.seen_domains for p in adapter.split(f"{d}/train").sources][: args.files]
    fast, slow = decode_rates(paths, size)
    big_fast, big_slow = large_decode_rates(paths[: args.large_files], args.large_size, args.large_load)
    print(
        f"config {args.config.name}: n = {cfg.train.batch_size}, k = {cfg.views.k}, loss {cfg.loss.name}, "
        f"{size} px, torch threads {torch.get_num_threads()}"
    )
    large = f"{args.large_size}-px JPEGs -> {args.large_load} px"
    rows = [
        [
            f"loader: read + decode + resize ({args.workers} workers) + simclr views",
            f"{load:.0f}",
            f"{load / consume:.1f}x the step",
        ],
        [f"training step ({cfg.loss.name}, fwd + loss + bwd + AdamW)", f"{consume:.0f}", "1.0x"],
        ["decode_file (torchvision.io)", f"{fast:.0f}", f"{fast / slow:.2f}x PIL"],
        ["PIL open + RGB + resize", f"{slow:.0f}", "1.0x"],
        [f"decode_file, {large}", f"{big_fast:.0f}", f"{big_fast / big_slow:.2f}x PIL"],
        [f"PIL, {large}", f"{big_slow:.0f}", "1.0x"],
    ]
    print(markdown_table(["path", "images/s", "ratio"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
