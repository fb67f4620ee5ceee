"""``python -m multiview_app.losses.warmup``: compile the numba kernels of the k > 3 MM-Sinkhorn sweeps (or
load them from numba's on-disk cache) before a training needs them; prints the seconds spent. The EEG demo
(``scripts/run_eeg_demo.sh``) runs it beside its synthesis. The work is
:func:`multiview_app.losses.sinkhorn_fast.warm_up` (a module of its own, so that one is not run as ``__main__``
after the package has imported it)."""

from __future__ import annotations

from .sinkhorn_fast import warm_up

if __name__ == "__main__":
    print(f"m3g compiled k > 3 sweeps ready in {warm_up():.1f} s (numba cache: multiview_app/losses/__pycache__)")
