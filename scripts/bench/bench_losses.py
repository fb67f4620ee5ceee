#!/usr/bin/env python
"""Benchmarks of the loss head (forward + backward, median wall time and peak memory, CPU).

Sections (``--section``; default ``all``):

* ``pvc``: ``pvc_geometric`` / ``pvc_arithmetic`` vs a faithful re-implementation of the poly-view
  paper's loop pseudocode (App. F.3.2, Algorithm 1: a Python loop over view pairs, masked
  cross-entropy per pair) at n=256, k=8, d=128. Goal: >= 10x faster.
* ``infonce``: ``infonce_pwe`` (k=2) and ``pvc_geometric`` (k=2, the same value as NT-Xent) vs
  lightly's ``NTXentLoss`` (optional ``bench`` extra). Goal: ratio <= 1.0.
* ``chunked``: the blockwise (chunked) logsumexp path vs the dense path of the same loss and vs
  lightly's ``NTXentLoss`` (k=2, d=256) up to n*k = 32,768, where the dense logits no longer fit
  (references above ``--dense-max-nk`` are skipped: their logits alone take several GiB of a
  shared machine). Goal: peak memory < 2 GiB at n*k = 32,768, same values.
* ``m3g``: ``scripts/bench/bench_m3g.py``'s table (unknown options pass through to it).

Timing: every row is measured in this process on the same inputs, ratios are vs the reference of
the same row. Peak memory: each (implementation, size) runs once in a fresh child process and the
growth of the peak resident set size (``VmHWM``) over the resident size before the call is
reported. ``--quick`` runs a small smoke version (smaller sizes, fewer repeats, no memory probes).

    python scripts/bench/bench_losses.py              # full tables
    python scripts/bench/bench_losses.py --quick      # smoke run
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]

from common import embeddings, interleaved, parse_sizes, peak_rss_growth  # noqa: E402

from multiview_app.losses import build_loss  # noqa: E402

LARGE_NUM = 1e9


# --------------------------------------------------------------------------- references
def paper_pvc_loop(z: torch.Tensor, tau: float, method: str) -> torch.Tensor:
    """Poly-view Algorithm 1 (App. F.3.2) as printed, with einops replaced by torch.

    In the paper's notation ``k`` is the number of items and ``m`` the number of views; ``z`` is
    ``(k, m, d)``. The arithmetic line is kept as printed (``logsumexp(losses) - log(k)``), so only
    the geometric value is comparable with ``pvc_geometric`` (it equals it: averaging over ordered
    pairs makes anchoring the negatives at alpha or at beta the same).
    """
    k, m, _ = z.shape
    z = F.normalize(z, dim=-1)

    def get_mask(beta: int) -> torch.Tensor:
        mask_sample = torch.eye(k, dtype=z.dtype).view(k, 1, k)
        mask_beta = torch.ones(m, dtype=z.dtype).view(1, m, 1)
        mask_beta[:, beta] = 0
        return mask_beta * mask_sample  # [k, m, k]

    scores = torch.einsum("jmd,knd->jmnk", z, z) / tau  # [k, m, m, k]
    losses_alpha = []
    for alpha in range(m):
        losses_alpha_beta = []
        for beta in range(m):
            if alpha != beta:
                logits = scores[:, alpha]  # [k, m, k]
                labels = torch.arange(k) + beta * k
                mask = get_mask(beta)
                logits = (logits - mask * LARGE_NUM).reshape(k, m * k)
                losses_alpha_beta.append(F.cross_entropy(logits, labels, reduction="none"))
        stacked = torch.stack(losses_alpha_beta, dim=-1)  # [k, m-1]
        if method == "arithmetic":
            loss_alpha = torch.logsumexp(stacked, dim=-1) - math.log(k)
        else:
            loss_alpha = stacked.mean(dim=-1)
        losses_alpha.append(loss_alpha)
    losses = torch.stack(losses_alpha, dim=-1)  # [k, m]
    return losses.mean(dim=-1).mean()


def lightly_ntxent(tau: float) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """lightly's NTXentLoss on ``z[:, 0], z[:, 1]``, or None when lightly is not installed."""
    try:
        from lightly.loss import NTXentLoss
    except ImportError:
        return None
    loss = NTXentLoss(temperature=tau)
    return lambda z: loss(z[:, 0], z[:, 1])


def implementation(name: str, tau: float) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """Callable ``z (n, k, d) -> 0-d loss`` for a row label (None: unavailable)."""
    if name.startswith("paper_loop_"):
        method = name.removeprefix("paper_loop_")
        return lambda z: paper_pvc_loop(z, tau, method)
    if name == "lightly_ntxent":
        return lightly_ntxent(tau)
    for suffix, chunked in ((":chunked", True), (":dense", False)):
        if name.endswith(suffix):
            return build_loss(name.removesuffix(suffix), tau=tau, chunked=chunked)
    return build_loss(name, tau=tau)


# --------------------------------------------------------------------------- measurement
def forward_backward(fn: Callable[[torch.Tensor], torch.Tensor], z: torch.Tensor) -> float:
    """One forward + backward; returns the loss value."""
    x = z.detach().clone().requires_grad_()
    value = fn(x)
    value.backward()
    return float(value.detach())


def median_times(fns: list[Callable[[torch.Tensor], torch.Tensor]], z: torch.Tensor, repeats: int) -> list[float]:
    """Median seconds of ``repeats`` forward+backward calls of each function, after one warm-up
    call each; the calls are interleaved so that load from other processes hits all of them alike."""
    calls = [lambda fn=fn: forward_backward(fn, z) for fn in fns]
    return [timing.median for timing in interleaved(calls, repeat=repeats)]


def probe_memory(name: str, n: int, k: int, d: int, tau: float) -> dict[str, float]:
    """Child-process entry: peak RSS growth (MiB), seconds and value of one forward+backward of ``name``."""
    fn = implementation(name, tau)
    assert fn is not None
    forward_backward(fn, embeddings(4, k, d, signal=0))  # load kernels / libraries on a tiny input
    z = embeddings(n, k, d, signal=0)
    mib, seconds, value = peak_rss_growth(lambda: forward_backward(fn, z))
    return {"mib": mib, "seconds": seconds, "value": value}


def probe(name: str, n: int, k: int, d: int, tau: float, threads: int) -> dict[str, float] | None:
    """Run :func:`probe_memory` in a fresh interpreter (peak RSS is per process): peak MiB, the
    seconds of that one forward+backward and its value."""
    cmd = [sys.executable, __file__, "--_probe", json.dumps([name, n, k, d, tau]), "--threads", str(threads)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        print(f"  (memory probe of {name} failed: {out.stderr.strip().splitlines()[-1:]})")
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def peak_memory_mib(name: str, n: int, k: int, d: int, tau: float, threads: int) -> float | None:
    """Peak RSS growth (MiB) of one forward+backward of ``name`` in a fresh interpreter."""
    result = probe(name, n, k, d, tau, threads)
    return None if result is None else result["mib"]


def run_rows(
    title: str,
    rows: list[tuple[str, str]],
    n: int,
    k: int,
    d: int,
    tau: float,
    repeats: int,
    memory: bool,
    threads: int,
) -> None:
    """Print a markdown table; ``rows`` are ``(ours, reference)`` implementation names."""
    z = embeddings(n, k, d, signal=0)
    print(f"\n### {title}: n={n}, k={k}, d={d}, tau={tau}, float32, {threads} thread(s), median of {repeats}\n")
    print(
        "| loss | reference | ours (ms) | reference (ms) | speed-up (ref / ours) | ours peak MiB | ref peak MiB | memory ratio | value ours | value ref |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for ours, reference in rows:
        ours_fn, ref_fn = implementation(ours, tau), implementation(reference, tau)
        v_ours = forward_backward(ours_fn, z)
        m_ours = peak_memory_mib(ours, n, k, d, tau, threads) if memory else None
        if ref_fn is None:
            (t_ours,) = median_times([ours_fn], z, repeats)
            print(
                f"| {ours} | {reference} | {1e3 * t_ours:.1f} | unavailable (not installed) | - | "
                f"{_fmt(m_ours)} | - | - | {v_ours:.5f} | - |"
            )
            continue
        t_ours, t_ref = median_times([ours_fn, ref_fn], z, repeats)
        v_ref = forward_backward(ref_fn, z)
        m_ref = peak_memory_mib(reference, n, k, d, tau, threads) if memory else None
        mem_ratio = f"{m_ref / m_ours:.1f}x" if m_ours and m_ref else "-"
        print(
            f"| {ours} | {reference} | {1e3 * t_ours:.1f} | {1e3 * t_ref:.1f} | {t_ref / t_ours:.1f}x | "
            f"{_fmt(m_ours)} | {_fmt(m_ref)} | {mem_ratio} | {v_ours:.5f} | {v_ref:.5f} |"
        )
        sys.stdout.flush()


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


# --------------------------------------------------------------------------- sections
def section_pvc(args: argparse.Namespace) -> None:
    n, k = (64, 4) if args.quick else (256, 8)
    rows = [("pvc_geometric", "paper_loop_geometric"), ("pvc_arithmetic", "paper_loop_arithmetic")]
    run_rows("pvc vs the paper's loop pseudocode", rows, n, k, 128, 0.1, args.repeats, not args.quick, args.threads)
    # the matmul share of the reference: how much of its time is not the Python loop
    z = embeddings(n, k, 128, signal=0)
    weights = torch.randn(n, k, k, n, generator=torch.Generator().manual_seed(1))
    gram_only = lambda x: (torch.einsum("jmd,knd->jmnk", x, x) * weights).sum()  # noqa: E731
    t_gram, t_ref = median_times([gram_only, implementation("paper_loop_geometric", 0.1)], z, args.repeats)
    print(
        f"\nFor scale: the paper's own Gram einsum alone (forward + backward, no softmax) takes "
        f"{1e3 * t_gram:.1f} ms = {100 * t_gram / t_ref:.0f}% of the paper loop's {1e3 * t_ref:.1f} ms "
        f"(measured interleaved); the fast path forms only the k (k + 1) / 2 upper view blocks."
    )
    print(
        "\nThe paper loop's arithmetic value differs by design (its `logsumexp(losses) - log(k)` line is "
        "not the Eq. 12 estimator); the geometric values must agree."
    )


def section_infonce(args: argparse.Namespace) -> None:
    sizes = [64] if args.quick else [256, 1024]
    rows = [("infonce_pwe", "lightly_ntxent"), ("pvc_geometric", "lightly_ntxent")]
    for n in sizes:
        run_rows("k=2 vs lightly NTXentLoss", rows, n, 2, 128, 0.1, args.repeats, not args.quick, args.threads)
    print(
        "\n`infonce_pwe` (M3G Eq. 1/3) contrasts each view against the n items of the other view; "
        "NTXentLoss (== `pvc_geometric` at k=2) also uses the same-view negatives (2n-2), so only the "
        "pvc_geometric row has equal values."
    )


def section_chunked(args: argparse.Namespace) -> None:
    sizes = [(512, 2), (256, 4)] if args.quick else [(2048, 2), (8192, 2), (16384, 2), (8192, 4)]
    if args.chunked_sizes:
        sizes = parse_sizes(args.chunked_sizes)
    d, tau = 256, 0.1
    print(
        f"\n### blockwise (chunked) path vs dense path vs lightly NTXentLoss, d={d}, tau={tau}, float32, "
        f"{args.threads} thread(s); dense / lightly skipped above n*k = {args.dense_max_nk}\n"
    )
    print("| loss | n | k | n*k | implementation | ms | vs chunked | peak MiB | value |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n, k in sizes:
        z = embeddings(n, k, d, signal=0)
        names = ["pvc_geometric:chunked", "pvc_geometric:dense", "flatnce:chunked", "infonce_pwe:chunked"]
        if k == 2:
            names.append("lightly_ntxent")
        big = n * k > args.dense_max_nk
        runnable = [name for name in names if not big or name.endswith(":chunked")]
        fns = [implementation(name, tau) for name in runnable]
        runnable = [name for name, fn in zip(runnable, fns) if fn is not None]
        fns = [fn for fn in fns if fn is not None]
        memories: dict[str, float | None] = {}
        if big:  # one call each in a fresh process (time, value and peak memory): ~1e12 multiply-adds
            times, values = {}, {}
            for name in runnable:
                result = probe(name, n, k, d, tau, args.threads) or {
                    "mib": None,
                    "seconds": float("nan"),
                    "value": float("nan"),
                }
                times[name], values[name], memories[name] = result["seconds"], result["value"], result["mib"]
        else:
            times = dict(zip(runnable, median_times(fns, z, args.repeats)))
            values = {name: forward_backward(fn, z) for name, fn in zip(runnable, fns)}
        for name in runnable:
            memory = (
                memories[name] if big else peak_memory_mib(name, n, k, d, tau, args.threads) if not args.quick else None
            )
            base = times.get(name.split(":")[0] + ":chunked", times.get("pvc_geometric:chunked"))
            print(
                f"| {name.split(':')[0]} | {n} | {k} | {n * k} | {name.split(':')[-1] if ':' in name else name} | "
                f"{1e3 * times[name]:.0f} | {times[name] / base:.2f} | {_fmt(memory)} | {values[name]:.5f} |"
            )
            sys.stdout.flush()
        for name in names:
            if name not in runnable:
                print(
                    f"| {name.split(':')[0]} | {n} | {k} | {n * k} | {name.split(':')[-1] if ':' in name else name} | "
                    f"skipped | - | - | - |"
                )


def section_m3g(args: argparse.Namespace, extra: list[str]) -> None:
    """``bench_m3g.py``'s table; the options this script does not know pass through to it."""
    from bench_m3g import main as m3g_main

    m3g_main((["--quick"] if args.quick else []) + extra)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--section", choices=["all", "pvc", "infonce", "chunked", "m3g"], default="all")
    parser.add_argument("--chunked-sizes", default=None, help="chunked section sizes, e.g. '2048x2,16384x2' (n x k)")
    parser.add_argument(
        "--dense-max-nk",
        type=int,
        default=16384,
        help="chunked section: skip the dense path and lightly above this n*k",
    )
    parser.add_argument("--quick", action="store_true", help="small smoke run (no memory probes)")
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats per row (default 7, quick 3)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("--_probe", help=argparse.SUPPRESS)
    args, extra = parser.parse_known_args(argv)
    torch.set_num_threads(args.threads)
    if args._probe:
        name, n, k, d, tau = json.loads(args._probe)
        print(json.dumps(probe_memory(name, n, k, d, tau)))
        return
    if args.repeats is None:
        args.repeats = 3 if args.quick else 7
    if extra and args.section not in ("all", "m3g"):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    print(f"# loss-head benchmarks ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, torch {torch.__version__})")
    if args.section in ("all", "pvc"):
        section_pvc(args)
    if args.section in ("all", "infonce"):
        section_infonce(args)
    if args.section in ("all", "chunked"):
        section_chunked(args)
    if args.section in ("all", "m3g"):
        section_m3g(args, extra)


if __name__ == "__main__":
    main()
