"""How many torch intra-op threads a computing ``mvapp`` process uses, chosen once at start.

Every computing entry point (``mvapp train`` and the tune trials it runs, ``mvapp eval``, ``mvapp export``)
calls :func:`configure_torch_threads`. The count comes from, first match wins:

1. ``MVAPP_NUM_THREADS`` (environment; an integer >= 1 or ``auto``),
2. the config key ``train.num_threads`` when it is an integer (``mvapp train``, tune trials), or a
   command's own option (``mvapp experiment domain-generalization --threads``, ``setting_name``),
3. ``OMP_NUM_THREADS`` set by the user (an integer >= 1),
4. ``auto``: from the CPUs this process may really use, ``min(affinity, ceil(cgroup quota))``:
   **1 thread when at most 2 CPUs are usable**, else all usable CPUs (divided among the processes of a
   multi-process launch, ``LOCAL_WORLD_SIZE``); torch's own default counts the machine's cores, not the
   affinity mask or the container's quota.

Why 1 on <= 2 CPUs (docs/benchmarks.md "CPU under contention"): with one other busy process on a 2-core
machine, torch's default of 2 OpenMP workers made an M3G forward+backward 7-50x slower (the workers spin
at each parallel region's barrier while the foreign process holds a core), whereas one thread loses at
most ~2x to the competing process in the worst case and is within a few percent of 2 threads on a quiet
machine for this project's small per-op work (n <= 128 embeddings, k <= 6 views, small encoders).

Every change of the count goes through :func:`set_torch_threads`, which calls ``torch.set_num_threads``
only when the count differs: each change of the pool is a chance to hit torch's MKL batched-LU bug after a
1 -> 2 change in one process (tests/test_mveb.py), so no needless round trips. :func:`torch_threads` runs
a block at a given count and restores the previous one (tests pinning values computed at 1 thread).

This module imports torch only inside its functions (``mvapp --help`` stays fast).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .console import info

ENV_VAR = "MVAPP_NUM_THREADS"
#: at most this many usable CPUs -> one intra-op thread in ``auto`` (measured, see the module docstring)
SINGLE_THREAD_UP_TO_CPUS = 2
CGROUP_ROOT = Path("/sys/fs/cgroup")
OVERRIDE_HINT = f"override with {ENV_VAR}=N or train.num_threads=N"


@dataclass(frozen=True)
class CpuBudget:
    """The CPUs this process may use: ``affinity`` (CPUs in its affinity mask) and ``quota``
    (cgroup CPU quota in CPUs, e.g. 1.5; ``None`` when unlimited or unknown)."""

    affinity: int
    quota: float | None

    @property
    def usable(self) -> int:
        """``min(affinity, ceil(quota))``, at least 1."""
        limit = self.affinity if self.quota is None else min(self.affinity, math.ceil(self.quota - 1e-9))
        return max(1, limit)

    def describe(self) -> str:
        quota = "none" if self.quota is None else f"{self.quota:g} CPUs"
        return f"{self.usable} usable CPU{'s' if self.usable != 1 else ''}, cgroup quota {quota}"


@dataclass(frozen=True)
class ThreadChoice:
    """The chosen intra-op thread ``count``, where it came from (``source``: ``MVAPP_NUM_THREADS``,
    ``train.num_threads``, ``OMP_NUM_THREADS`` or ``auto``) and the CPU budget it was chosen for."""

    count: int
    source: str
    cpus: CpuBudget

    def header(self) -> str:
        """The line printed at start, e.g. ``torch threads: 1 (2 usable CPUs, cgroup quota none; auto; override
        with MVAPP_NUM_THREADS=N or train.num_threads=N)``."""
        return f"torch threads: {self.count} ({self.cpus.describe()}; {self.source}; {OVERRIDE_HINT})"


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _cgroup_dirs(root: Path, proc_cgroup: str | None, controller: str | None) -> list[Path]:
    """The process's cgroup folder under ``root`` and its ancestors (deepest first); ``controller``
    None: the v2 unified entry (``0::/path``), else the v1 line naming that controller."""
    relative = ""
    for line in (proc_cgroup or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if (controller is None and parts[0] == "0" and parts[1] == "") or (
            controller is not None and controller in parts[1].split(",")
        ):
            relative = parts[2].strip("/")
            break
    folder = root / relative if relative else root
    dirs = [folder]
    while folder != root and root in folder.parents:
        folder = folder.parent
        dirs.append(folder)
    return dirs


def _quota_v2(root: Path, proc_cgroup: str | None) -> float | None:
    """Smallest ``cpu.max`` quota (``"QUOTA PERIOD"``, ``max`` = none) along the v2 hierarchy, in CPUs."""
    quotas: list[float] = []
    for folder in _cgroup_dirs(root, proc_cgroup, None):
        fields = (_read(folder / "cpu.max") or "").split()
        if len(fields) == 2 and fields[0] != "max":
            try:
                quota, period = float(fields[0]), float(fields[1])
            except ValueError:
                continue
            if quota > 0 and period > 0:
                quotas.append(quota / period)
    return min(quotas) if quotas else None


def _quota_v1(root: Path, proc_cgroup: str | None) -> float | None:
    """Smallest ``cpu.cfs_quota_us / cpu.cfs_period_us`` (-1 = none) along the v1 ``cpu`` hierarchy, in CPUs."""
    quotas: list[float] = []
    for mount in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
        base = root / mount
        if not base.is_dir():
            continue
        for folder in _cgroup_dirs(base, proc_cgroup, "cpu"):
            try:
                quota = float(_read(folder / "cpu.cfs_quota_us") or "-1")
                period = float(_read(folder / "cpu.cfs_period_us") or "0")
            except ValueError:
                continue
            if quota > 0 and period > 0:
                quotas.append(quota / period)
        break
    return min(quotas) if quotas else None


def cgroup_cpu_quota(root: Path = CGROUP_ROOT, proc_cgroup: str | None = None) -> float | None:
    """The cgroup CPU quota of this process in CPUs (v2 ``cpu.max``, else v1 ``cpu.cfs_quota_us``);
    ``None`` when unlimited or unreadable. ``proc_cgroup``: the text of ``/proc/self/cgroup`` (read when None)."""
    if proc_cgroup is None:
        proc_cgroup = _read(Path("/proc/self/cgroup"))
    quota = _quota_v2(root, proc_cgroup)
    return quota if quota is not None else _quota_v1(root, proc_cgroup)


def _affinity_count() -> int:
    getter: Callable[[int], set[int]] | None = getattr(os, "sched_getaffinity", None)
    if getter is not None:
        try:
            return max(1, len(getter(0)))
        except OSError:
            pass
    return max(1, os.cpu_count() or 1)


def usable_cpus(affinity: int | None = None, quota: float | None | str = "read", root: Path = CGROUP_ROOT) -> CpuBudget:
    """The :class:`CpuBudget` of this process (``affinity`` / ``quota`` given: used as they are, for tests)."""
    return CpuBudget(
        affinity=_affinity_count() if affinity is None else affinity,
        quota=cgroup_cpu_quota(root) if quota == "read" else quota,  # type: ignore[arg-type]
    )


def _parse_count(value: str | int, where: str) -> int | None:
    """An integer >= 1 from ``value`` (``auto`` / empty: None); anything else raises naming ``where``."""
    if isinstance(value, int) and not isinstance(value, bool):
        count = value
    else:
        text = str(value).strip().lower()
        if text in ("", "auto"):
            return None
        try:
            count = int(text)
        except ValueError:
            raise ValueError(f"{where}: expected 'auto' or an integer >= 1, got {value!r}") from None
    if count < 1:
        raise ValueError(f"{where}: expected 'auto' or an integer >= 1, got {value!r}")
    return count


def auto_threads(cpus: CpuBudget, local_processes: int = 1) -> int:
    """The ``auto`` policy: the usable CPUs shared by the ``local_processes`` of a multi-process launch on
    this machine; 1 thread when that share is at most :data:`SINGLE_THREAD_UP_TO_CPUS` CPUs, else the share."""
    share = max(1, cpus.usable // max(1, local_processes))
    return 1 if share <= SINGLE_THREAD_UP_TO_CPUS else share


def choose_threads(
    setting: str | int | None = "auto",
    env: Mapping[str, str] | None = None,
    cpus: CpuBudget | None = None,
    setting_name: str = "train.num_threads",
) -> ThreadChoice:
    """The intra-op thread count for ``setting`` (the config's ``train.num_threads``, or the command option
    named ``setting_name``: ``auto``, an int, or None when the command has neither), the environment ``env``
    (``os.environ`` when None) and ``cpus`` (:func:`usable_cpus` when None). Precedence:
    ``MVAPP_NUM_THREADS`` > ``setting`` > ``OMP_NUM_THREADS`` > auto. A bad value raises ``ValueError``
    naming the variable, key or option."""
    env = os.environ if env is None else env
    cpus = usable_cpus() if cpus is None else cpus
    if env.get(ENV_VAR, "").strip():
        count = _parse_count(env[ENV_VAR], ENV_VAR)
        if count is not None:
            return ThreadChoice(count, ENV_VAR, cpus)
    if setting is not None:
        count = _parse_count(setting, setting_name)
        if count is not None:
            return ThreadChoice(count, setting_name, cpus)
    if env.get("OMP_NUM_THREADS", "").strip():
        count = _parse_count(env["OMP_NUM_THREADS"].split(",")[0], "OMP_NUM_THREADS")
        if count is not None:
            return ThreadChoice(count, "OMP_NUM_THREADS", cpus)
    local = _parse_count(env.get("LOCAL_WORLD_SIZE", "") or "1", "LOCAL_WORLD_SIZE") or 1  # torchrun / accelerate
    return ThreadChoice(auto_threads(cpus, local), "auto" if local == 1 else f"auto, {local} local processes", cpus)


_reported: ThreadChoice | None = None


def set_torch_threads(count: int) -> int:
    """Apply ``count`` intra-op threads (``torch.set_num_threads`` only when the count changes; module
    docstring); returns the previous count."""
    import torch

    previous = torch.get_num_threads()
    if previous != count:
        torch.set_num_threads(count)
    return previous


@contextmanager
def torch_threads(count: int | None) -> Iterator[None]:
    """Run the block with ``count`` intra-op threads (``None``: unchanged), then restore the previous
    count; both through :func:`set_torch_threads`."""
    if count is None:
        yield
        return
    previous = set_torch_threads(count)
    try:
        yield
    finally:
        set_torch_threads(previous)


def configure_torch_threads(
    setting: str | int | None = None,
    *,
    report: Callable[[str], None] | None = info,
    env: Mapping[str, str] | None = None,
    cpus: CpuBudget | None = None,
    setting_name: str = "train.num_threads",
) -> ThreadChoice:
    """Choose (:func:`choose_threads`) and apply (:func:`set_torch_threads`) the intra-op thread count;
    ``report`` gets the header line once per process (again only when the choice changes)."""
    global _reported

    choice = choose_threads(setting, env, cpus, setting_name)
    set_torch_threads(choice.count)
    if report is not None and choice != _reported:
        report(choice.header())
    _reported = choice
    return choice
