"""Helpers shared by the benchmark scripts (``scripts/bench/bench_*.py``) and the suite runner ``run.py``.

Timing: every benchmark times its candidates in one process, against a reference run on the same inputs, and
prints a Markdown table plus a line naming the machine and the command. Timings are wall-clock medians after
warm-up; on CUDA every call is bracketed by a device synchronization so asynchronous kernels are counted.

The docs page: every bench script owns one section of docs/benchmarks.md, delimited by two marker lines::

    <!-- bench:bench_losses -->
    ... replaced by each ``run.py SUITE --write-docs`` ...
    <!-- /bench:bench_losses -->

Only the text between a script's two markers changes; the prose around them is the maintainers'.

torch is imported only by the helpers that need it, so the runner stays light. A script in this folder imports
this module as ``common``; a script elsewhere loads it with :func:`runpy.run_path`.
"""

from __future__ import annotations

import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from multiview_app.fileio import atomic_write_text

if TYPE_CHECKING:
    import torch

DOCS = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"
"""The benchmarks page of the documentation site."""


# ----------------------------------------------------------------------------- timing


@dataclass(frozen=True)
class Timing:
    """Wall-clock seconds of ``runs`` timed calls (after warm-up)."""

    runs: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.runs)

    @property
    def best(self) -> float:
        return min(self.runs)

    def ms(self) -> str:
        """The median in milliseconds, 3 significant figures."""
        return f"{self.median * 1e3:.3g}"

    def of(self, stat: str) -> float:
        """``stat`` of the runs: ``"median"`` or ``"min"`` (robust on a loaded machine, where a ms-scale call is
        often preempted for a whole time slice)."""
        return self.best if stat == "min" else self.median


def synchronize(device: torch.device | str | None = None) -> None:
    """Wait for queued work on ``device`` (no-op on CPU)."""
    import torch

    dev = torch.device(device) if device is not None else None
    if dev is not None and dev.type == "cuda":
        torch.cuda.synchronize(dev)


def time_call(
    fn: Callable[[], Any],
    *,
    repeat: int = 5,
    warmup: int = 1,
    device: torch.device | str | None = None,
    budget_s: float = float("inf"),
) -> Timing:
    """Median-ready timings of ``fn()``: ``warmup`` untimed calls, then ``repeat`` timed ones (fewer when the
    timed calls pass ``budget_s`` seconds; at least one)."""
    if repeat < 1 or warmup < 0:
        raise ValueError(f"time_call: repeat must be >= 1 and warmup >= 0, got {repeat}, {warmup}")
    for _ in range(warmup):
        fn()
    synchronize(device)
    runs: list[float] = []
    began = time.perf_counter()
    while len(runs) < repeat and (not runs or time.perf_counter() - began <= budget_s):
        start = time.perf_counter()
        fn()
        synchronize(device)
        runs.append(time.perf_counter() - start)
    return Timing(tuple(runs))


def interleaved(fns: Sequence[Callable[[], Any]], *, repeat: int = 5, warmup: int = 1) -> list[Timing]:
    """Timings of each of ``fns``, the functions alternating within every round (a machine whose load drifts
    slows them alike): ``warmup`` untimed rounds, then ``repeat`` timed ones."""
    runs: list[list[float]] = [[] for _ in fns]
    for round_index in range(warmup + repeat):
        for bucket, fn in zip(runs, fns):
            start = time.perf_counter()
            fn()
            if round_index >= warmup:
                bucket.append(time.perf_counter() - start)
    return [Timing(tuple(bucket)) for bucket in runs]


def parse_sizes(text: str | Sequence[str]) -> list[tuple[int, int]]:
    """Problem sizes ``[(n, k), ...]`` from ``"64x4,128x4"``, ``"16:6,32:3"`` or ``["16x6", "32x4"]``.

    ``ValueError`` naming the item that is not ``NxK`` or ``N:K``."""
    items = text.split(",") if isinstance(text, str) else [part for item in text for part in item.split(",")]
    sizes = []
    for item in filter(None, (i.strip().lower() for i in items)):
        parts = item.replace(":", "x").split("x")
        if len(parts) != 2 or not all(part.isdigit() for part in parts):
            raise ValueError(f"size '{item}': expected NxK or N:K (items x views), e.g. 64x4")
        sizes.append((int(parts[0]), int(parts[1])))
    return sizes


def ratio(reference: float, candidate: float) -> str:
    """``reference / candidate`` as ``"2.35x"`` (> 1: the candidate is faster)."""
    if candidate <= 0:
        return "n/a"
    return f"{reference / candidate:.2f}x"


# ----------------------------------------------------------------------------- memory


def status_kib(field: str) -> int:
    """A Linux ``/proc/self/status`` memory field (``VmRSS``, ``VmHWM``) in KiB; peak-memory probes
    reset ``VmHWM`` first by writing ``5`` to ``/proc/self/clear_refs``."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def peak_rss_growth(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """Run ``fn()`` once: ``(peak resident-set growth in MiB over the RSS before the call, seconds, result)``.

    ``VmHWM`` is reset to the current RSS first (``/proc/self/clear_refs`` = 5, Linux >= 4.0), so earlier
    peaks of the process (imports, warm-up) do not count; unlike ``ru_maxrss`` it is this address space's
    peak. Where the reset is refused the growth can only be under-reported."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass
    before = status_kib("VmRSS")
    start = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - start
    return max(status_kib("VmHWM") - before, 0) / 1024, seconds, result


@contextmanager
def kept_environment(*keys: str) -> Iterator[None]:
    """Environment variables ``keys`` as they were before the block, whatever it set (a bench switches solver
    paths through them; a test process that imports the bench must not inherit its switches)."""
    saved = {key: os.environ.get(key) for key in keys}
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


# ----------------------------------------------------------------------------- the record: machine, command, tables


def host_line() -> str:
    """The machine without torch: architecture, usable CPUs, load average."""
    try:
        load = "load {:.1f}/{:.1f}/{:.1f}".format(*os.getloadavg())
    except OSError:
        load = "load n/a"
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{platform.machine()} {cpus} usable CPUs, {load}"


def machine_line() -> str:
    """One line naming the machine a table was measured on: CPUs, load, torch threads, GPU."""
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{host_line()}, torch {torch.__version__} ({torch.get_num_threads()} intra-op threads), {gpu}"


def command_line() -> str:
    """The command that is running, shell-quoted (for the record in docs/benchmarks.md)."""
    return " ".join(shlex.quote(a) for a in [os.path.relpath(sys.executable), *sys.argv])


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table; cells are ``str()``-ed, widths padded for the console."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    for row in cells:
        if len(row) != len(headers):
            raise ValueError(f"markdown_table: row {row} has {len(row)} cells, expected {len(headers)}")
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(cells[0], widths)) + " |"]
    lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    lines += ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |" for row in cells[1:]]
    return "\n".join(lines)


def markdown_tables(output: str) -> list[str]:
    """The Markdown tables in a script's printed ``output``: every run of consecutive lines that start with
    ``|`` and has a ``|---`` separator line (one string per table, lines right-stripped)."""
    tables, block = [], []
    for line in [*output.splitlines(), ""]:
        if line.lstrip().startswith("|"):
            block.append(line.strip())
            continue
        if len(block) >= 2 and block[1].replace(" ", "").startswith("|-"):
            tables.append("\n".join(block))
        block = []
    return tables


# ----------------------------------------------------------------------------- the docs page


def markers(key: str) -> tuple[str, str]:
    """The opening and closing marker lines of the section of bench script ``key`` (its file stem)."""
    return f"<!-- bench:{key} -->", f"<!-- /bench:{key} -->"


def section_body(command: str, machine: str, tables: list[str]) -> str:
    """What goes between a script's markers: the command, the machine, then its tables."""
    if not tables:
        raise ValueError(f"{command}: printed no Markdown table, nothing to write")
    return "\n\n".join([f"Command: `{command}` ({machine}).", *tables])


def write_docs_section(key: str, body: str, docs: Path = DOCS) -> None:
    """Replace the text between the markers of ``key`` in ``docs`` with ``body``; nothing else changes.

    ``ValueError`` naming the file and the marker lines when they are missing, repeated or out of order."""
    start, end = markers(key)
    text = docs.read_text()
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise ValueError(
            f"{docs}: expected one line '{start}' and, after it, one line '{end}' (found {text.count(start)} and "
            f"{text.count(end)}): add them where the table of {key} belongs"
        )
    head = text[: text.index(start) + len(start)]
    tail = text[text.index(end) :]
    atomic_write_text(docs, f"{head}\n{body.strip(chr(10))}\n{tail}")


def embeddings(
    n: int, k: int, d: int, seed: int = 0, signal: float = 1.0, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """Synthetic view embeddings ``(n, k, d)``: ``signal`` x a direction shared by an item's ``k`` views plus
    unit-variance noise per view (``signal=0``: noise only), drawn from a generator seeded with ``seed``.

    Parameters
    ----------
    n, k, d : int
        Items, views per item and embedding width.
    seed : int
        Seed of the generator (the same seed gives the same tensor).
    signal : float
        Scale of the shared per-item direction; 0 skips its draw.
    dtype : torch.dtype, optional
        Dtype of the result (drawn in float32, then cast; default float32).

    Returns
    -------
    torch.Tensor
        ``(n, k, d)`` embeddings on the CPU, not normalized.
    """
    import torch

    generator = torch.Generator().manual_seed(seed)
    shared = signal * torch.randn(n, 1, d, generator=generator) if signal else 0.0
    return (shared + torch.randn(n, k, d, generator=generator)).to(dtype or torch.float32)


def synthetic_eeg_cache(folder: Path, subjects: int, hours: float, seed: int = 0) -> Path:
    """The prepared cache of ``subjects`` synthetic PhysioNet-2018-format nights of ``hours`` each (generator seed
    ``seed``), under ``folder``, made as the EEG demo makes its own (``mvapp data synth-psg`` then ``prepare``:
    :func:`multiview_app.experiments.eeg_demo.demo_data`); reused when present."""
    from multiview_app.experiments.eeg_demo import demo_data

    settings = {"subjects": subjects, "hours": hours, "compress": 1, "psg_seed": seed}
    return demo_data(folder, {key: str(value) for key, value in settings.items()})["physionet2018"]
