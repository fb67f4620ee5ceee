"""Training metrics: step-time split, ``metrics.jsonl`` (append, resume-safe) and ``curves.png``."""

from __future__ import annotations

import importlib.util
import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

PHASES = ("data", "forward", "loss", "backward", "optim")


class StepTimer:
    """Accumulates wall time per phase (``data, forward, loss, backward, optim``) over a log window.

    On the CPU every step is timed. On CUDA the clock only means something after a device
    synchronization (kernels run asynchronously), and a synchronization per phase would make every
    step wait for the GPU; so only the steps started with ``timed=True`` (the trainer: the logging
    steps) are synchronized at each phase boundary and timed, and their phases stand for the window.
    ``timed_steps`` counts the steps in the totals. :meth:`skip` drops the time since the last mark
    (work that is reported on its own, such as the diagnostics).
    """

    def __init__(self, device: torch.device) -> None:
        self.sync = device.type == "cuda"
        self.totals: dict[str, float] = defaultdict(float)
        self.timed_steps = 0
        self._active = True
        self._last = time.perf_counter()

    def start(self, timed: bool = True) -> None:
        """Begin a step; on CUDA it is timed only when ``timed`` (on the CPU always)."""
        self._active = timed or not self.sync
        if not self._active:
            return
        self.timed_steps += 1
        if self.sync:
            torch.cuda.synchronize()
        self._last = time.perf_counter()

    def mark(self, phase: str) -> None:
        """Charge the time since the previous mark to ``phase`` (nothing on an untimed step)."""
        if not self._active:
            return
        if self.sync:
            torch.cuda.synchronize()
        now = time.perf_counter()
        self.totals[phase] += now - self._last
        self._last = now

    def skip(self) -> None:
        """Restart the clock without charging the time since the previous mark to any phase."""
        if not self._active:
            return
        if self.sync:
            torch.cuda.synchronize()
        self._last = time.perf_counter()

    def pop(self) -> tuple[dict[str, float], int]:
        """(seconds per phase, timed steps) since the last pop, then reset."""
        out = {p: self.totals.get(p, 0.0) for p in PHASES}, self.timed_steps
        self.totals = defaultdict(float)
        self.timed_steps = 0
        return out


def host_values(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with every tensor entry (0-d, or one element) as a Python float, read back with one
    device-to-host copy per device; other entries unchanged. The trainer keeps step values (loss,
    the loss's ``last_stats``, gradient norm) as device tensors and calls this on logging steps only."""
    out = dict(values)
    by_device: dict[torch.device, list[str]] = defaultdict(list)
    for key, value in values.items():
        if isinstance(value, torch.Tensor):
            by_device[value.device].append(key)
    for keys in by_device.values():
        stacked = torch.stack([values[k].detach().reshape(()).to(torch.float64) for k in keys])
        for key, number in zip(keys, stacked.tolist()):
            out[key] = number
    return out


class MetricsLog:
    """Appends one JSON object per logged step to ``metrics.jsonl``; on resume drops lines with a
    step beyond the checkpoint so the curve stays consistent."""

    def __init__(self, path: str | Path, resume_step: int | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is not None and self.path.is_file():
            kept = [line for line in self.path.read_text().splitlines() if _step_of(line) <= resume_step]
            tmp = self.path.with_name(f".{self.path.name}.tmp")
            tmp.write_text("".join(line + "\n" for line in kept))
            tmp.replace(self.path)
        elif resume_step is None and self.path.exists():
            self.path.unlink()
        self._fh = self.path.open("a")

    def write(self, record: dict[str, Any]) -> None:
        self._fh.write(json.dumps(record) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


def _step_of(line: str) -> int:
    try:
        return int(json.loads(line).get("step", 0))
    except (ValueError, AttributeError):
        return 1 << 62


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """All records of a ``metrics.jsonl``."""
    path = Path(path)
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def plot_curves(metrics_path: str | Path, out_png: str | Path) -> Path | None:
    """Loss, learning rate and throughput against step -> PNG (matplotlib Agg). None if no records, or
    without matplotlib (the ``eval`` extra; metrics.jsonl holds the same numbers)."""
    records = read_metrics(metrics_path)
    if not records or importlib.util.find_spec("matplotlib") is None:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [k for k in ("loss", "lr", "items_per_s") if any(k in r for r in records)]
    fig, axes = plt.subplots(1, len(keys), figsize=(4.2 * len(keys), 3.2), squeeze=False)
    for ax, key in zip(axes[0], keys):
        pts = [(r["step"], r[key]) for r in records if key in r]
        ax.plot([p[0] for p in pts], [p[1] for p in pts])
        ax.set_xlabel("step")
        ax.set_title(key)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    out_png = Path(out_png)
    tmp = out_png.with_name(f".{out_png.stem}.tmp.png")
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    tmp.replace(out_png)
    return out_png
