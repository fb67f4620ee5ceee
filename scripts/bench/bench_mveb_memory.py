#!/usr/bin/env python
"""MVEB memory: blockwise (chunked) Stein solve vs the dense path, peak RSS growth of one forward+backward.

Each (path, n, k) runs once in a fresh interpreter (peak RSS is per process): the probe resets the
high-water mark (``/proc/self/clear_refs`` = 5, Linux >= 4.0), builds the input, runs one
forward+backward of ``build_loss("mveb", chunked=...)`` and reports ``VmHWM - VmRSS(before)`` (MiB),
the seconds of that call and the loss value. Inputs: float32 ``(n, k, d)``, ``signal`` x a shared
direction per item + unit view noise (seeded), so the views agree as in training. Dense rows above
``--dense-max-nk`` are skipped (their kernel matrices alone would take several GiB of a shared
machine). A second table compares both paths' values and gradients in float64 at ``--check`` size.

    python scripts/bench/bench_mveb_memory.py --out /tmp/mveb-bench                 # n*k = 32,768, d = 256
    python scripts/bench/bench_mveb_memory.py --sizes 1024x2,8192x4 --dense-max-nk 2048 --out DIR

Output: the tables on stdout and ``DIR/bench_mveb_memory.md`` (same text).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import torch
from common import command_line, embeddings, machine_line, markdown_table, peak_rss_growth

from multiview_app.losses import build_loss


def probe(chunked: bool, n: int, k: int, d: int) -> dict[str, float]:
    """Child-process entry: peak RSS growth (MiB), seconds and value of one forward+backward."""
    loss = build_loss("mveb", chunked=chunked)
    small = embeddings(8, k, d).requires_grad_()
    loss(small).backward()  # load kernels / libraries on a tiny input
    z = embeddings(n, k, d).requires_grad_()

    def forward_backward() -> torch.Tensor:
        value = loss(z)
        value.backward()
        return value

    mib, seconds, value = peak_rss_growth(forward_backward)
    return {"mib": mib, "seconds": seconds, "value": float(value), "bandwidth": loss.last_stats["bandwidth"]}


def run_probe(chunked: bool, n: int, k: int, d: int, threads: int) -> dict[str, float] | None:
    """:func:`probe` in a fresh interpreter; None (with a note) if it failed."""
    cmd = [sys.executable, __file__, "--_probe", json.dumps([chunked, n, k, d]), "--threads", str(threads)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        print(f"  (probe chunked={chunked} n={n} k={k} failed: {out.stderr.strip().splitlines()[-1:]})")
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def agreement(n: int, k: int, d: int) -> list[str]:
    """Value and gradient of both paths in float64 on one input: ``[value dense, value chunked,
    |value diff|, max |grad diff| / max |grad|]``."""
    z = embeddings(n, k, d, seed=1, dtype=torch.float64)
    results = []
    for chunked in (False, True):
        x = z.clone().requires_grad_()
        value = build_loss("mveb", chunked=chunked)(x)
        value.backward()
        results.append((float(value.detach()), x.grad))
    (v_dense, g_dense), (v_chunked, g_chunked) = results
    grad_error = float((g_dense - g_chunked).abs().max() / g_dense.abs().max())
    return [f"{v_dense:.12f}", f"{v_chunked:.12f}", f"{abs(v_dense - v_chunked):.1e}", f"{grad_error:.1e}"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="8192x4", help="n x k pairs, comma-separated (default 8192x4: n*k = 32,768)")
    parser.add_argument("--d", type=int, default=256, help="embedding dimension (default 256)")
    parser.add_argument("--dense-max-nk", type=int, default=4096, help="skip the dense path above this n*k")
    parser.add_argument("--check", default="512x3", help="n x k of the float64 agreement table (default 512x3)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("--out", type=Path, help="folder for bench_mveb_memory.md")
    parser.add_argument("--_probe", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args._probe:
        print(json.dumps(probe(*json.loads(args._probe))))
        return
    if args.out is None:
        parser.error("--out FOLDER is required (where bench_mveb_memory.md is written)")
    lines = [
        f"# MVEB memory ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
        "",
        f"`{command_line()}`",
        "",
        machine_line(),
        "",
    ]
    rows = []
    for item in args.sizes.split(","):
        n, k = (int(v) for v in item.split("x"))
        for chunked in (True, False):
            if not chunked and n * k > args.dense_max_nk:
                rows.append([n, k, n * k, "dense", "skipped", "-", "-", "-"])
                continue
            result = run_probe(chunked, n, k, args.d, args.threads)
            if result is None:
                rows.append([n, k, n * k, "chunked" if chunked else "dense", "failed", "-", "-", "-"])
                continue
            rows.append(
                [
                    n,
                    k,
                    n * k,
                    "chunked" if chunked else "dense",
                    f"{result['mib']:.0f}",
                    f"{result['seconds']:.1f}",
                    f"{result['value']:.6f}",
                    f"{result['bandwidth']:.4f}",
                ]
            )
            print(
                markdown_table(
                    ["n", "k", "n*k", "path", "peak RSS growth MiB", "s (fwd+bwd)", "value", "bandwidth"], rows[-1:]
                ),
                flush=True,
            )
    lines += [
        f"Peak RSS growth of one forward+backward, float32 input, d = {args.d}, "
        f"{args.threads} thread(s), fresh process per row:",
        "",
        markdown_table(["n", "k", "n*k", "path", "peak RSS growth MiB", "s (fwd+bwd)", "value", "bandwidth"], rows),
        "",
    ]
    n, k = (int(v) for v in args.check.split("x"))
    lines += [
        f"Both paths in float64 at n = {n}, k = {k}, d = {args.d} (same input):",
        "",
        markdown_table(
            ["value dense", "value chunked", "abs. difference", "max grad difference / max grad"],
            [agreement(n, k, args.d)],
        ),
        "",
    ]
    text = "\n".join(lines)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench_mveb_memory.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
