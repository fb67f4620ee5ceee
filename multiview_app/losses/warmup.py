"""``python -m multiview_app.losses.warmup [N K]``: run M3G's CPU solver once for batches of ``N`` items and ``K``
views (default 16 x 6 with Anderson 16 and the diagonal start: the EEG demo's loss) before a training needs it,
so that what it compiles on first use is in the on-disk caches: the numba kernels where the dispatch table
(:data:`.m3g.AUTO_NUMBA_ON_CPU`) routes the size, else the sweep blocks' inductor graphs when CPU compiling is
on (``MVAPP_M3G_COMPILE=1``; eager blocks need nothing); prints the seconds spent. The EEG demo
(``scripts/run_eeg_demo.sh``) runs it beside its synthesis."""

from __future__ import annotations

import sys
import time

import torch

from .m3g import M3GLoss


def warm_up(n: int = 16, k: int = 6, anderson: int = 16, init_potentials: str = "diagonal", calls: int = 3) -> float:
    """Run ``calls`` M3G forward+backward passes on random float32 ``(n, k, 8)`` CPU batches (every kernel or
    graph a training of that size uses gets compiled or loaded from its cache); returns the seconds spent."""
    start = time.perf_counter()
    loss = M3GLoss(epsilon=0.2, anderson=anderson, init_potentials=init_potentials)
    generator = torch.Generator().manual_seed(0)
    for _ in range(calls):
        z = (torch.randn(n, 1, 8, generator=generator) + torch.randn(n, k, 8, generator=generator)).requires_grad_()
        loss(z).backward()
    return time.perf_counter() - start


if __name__ == "__main__":
    size = [int(arg) for arg in sys.argv[1:3]] or [16, 6]
    print(f"m3g solver for {size[0]} x {size[1]} ready in {warm_up(*size):.1f} s (numba / inductor on-disk caches)")
