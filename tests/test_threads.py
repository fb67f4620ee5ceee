"""The torch intra-op thread choice (multiview_app/threads.py): usable CPUs from faked affinity and cgroup
quota files, the override precedence, bad values, and that ``mvapp train`` / ``mvapp eval`` report it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from _train_helpers import write_tiny_yaml

from multiview_app import threads
from multiview_app.cli import main
from multiview_app.threads import CpuBudget, cgroup_cpu_quota, choose_threads, configure_torch_threads, usable_cpus


@pytest.fixture(autouse=True)
def _restore_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    reported = threads._reported
    yield
    torch.set_num_threads(before)
    threads._reported = reported


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.mark.parametrize(
    ("affinity", "quota", "usable"),
    [
        (2, None, 2),
        (8, None, 8),
        (8, 1.5, 2),
        (8, 0.5, 1),
        (2, 4.0, 2),
        (16, 3.0, 3),
        (1, None, 1),
    ],
)
def test_usable_cpus_is_min_of_affinity_and_ceil_quota(affinity: int, quota: float | None, usable: int) -> None:
    assert CpuBudget(affinity, quota).usable == usable


def test_cgroup_v2_quota_reads_cpu_max_along_the_hierarchy(tmp_path: Path) -> None:
    proc = "0::/jobs/agent\n"
    assert cgroup_cpu_quota(tmp_path, proc) is None  # no files: unknown = no limit
    _write(tmp_path / "jobs" / "agent" / "cpu.max", "max 100000\n")
    assert cgroup_cpu_quota(tmp_path, proc) is None
    _write(tmp_path / "jobs" / "cpu.max", "150000 100000\n")  # the parent's limit applies to the child
    assert cgroup_cpu_quota(tmp_path, proc) == pytest.approx(1.5)
    _write(tmp_path / "jobs" / "agent" / "cpu.max", "50000 100000\n")  # the smallest along the path
    assert cgroup_cpu_quota(tmp_path, proc) == pytest.approx(0.5)
    _write(tmp_path / "cpu.max", "400000 100000\n")  # a container whose namespace root is /sys/fs/cgroup
    assert cgroup_cpu_quota(tmp_path, "0::/\n") == pytest.approx(4.0)
    assert usable_cpus(affinity=8, quota="read", root=tmp_path).quota is not None


def test_cgroup_v1_quota_reads_cfs_files(tmp_path: Path) -> None:
    proc = "4:memory:/x\n1:cpu,cpuacct:/docker/abc\n0::/\n"
    _write(tmp_path / "cpu,cpuacct" / "docker" / "abc" / "cpu.cfs_quota_us", "-1\n")
    _write(tmp_path / "cpu,cpuacct" / "docker" / "abc" / "cpu.cfs_period_us", "100000\n")
    assert cgroup_cpu_quota(tmp_path, proc) is None  # -1 = no quota
    _write(tmp_path / "cpu,cpuacct" / "docker" / "abc" / "cpu.cfs_quota_us", "250000\n")
    assert cgroup_cpu_quota(tmp_path, proc) == pytest.approx(2.5)
    assert CpuBudget(8, cgroup_cpu_quota(tmp_path, proc)).usable == 3


@pytest.mark.parametrize(("usable", "expected"), [(1, 1), (2, 1), (3, 3), (4, 4), (16, 16)])
def test_auto_is_one_thread_up_to_two_usable_cpus(usable: int, expected: int) -> None:
    choice = choose_threads("auto", env={}, cpus=CpuBudget(usable, None))
    assert (choice.count, choice.source) == (expected, "auto")


def test_auto_uses_the_quota_not_the_core_count() -> None:
    assert choose_threads("auto", env={}, cpus=CpuBudget(64, 2.0)).count == 1
    assert choose_threads("auto", env={}, cpus=CpuBudget(64, 6.0)).count == 6


def test_auto_shares_cpus_among_local_processes() -> None:
    assert choose_threads("auto", env={"LOCAL_WORLD_SIZE": "2"}, cpus=CpuBudget(16, None)).count == 8
    assert choose_threads("auto", env={"LOCAL_WORLD_SIZE": "4"}, cpus=CpuBudget(8, None)).count == 1


def test_override_precedence() -> None:
    cpus = CpuBudget(8, None)
    everything = {"MVAPP_NUM_THREADS": "3", "OMP_NUM_THREADS": "5"}
    assert (choose_threads(2, everything, cpus).count, choose_threads(2, everything, cpus).source) == (
        3,
        "MVAPP_NUM_THREADS",
    )
    assert choose_threads(2, {"OMP_NUM_THREADS": "5"}, cpus).count == 2  # the config key beats OMP_NUM_THREADS
    assert choose_threads("auto", {"OMP_NUM_THREADS": "5"}, cpus).source == "OMP_NUM_THREADS"
    assert choose_threads(None, {"OMP_NUM_THREADS": "5"}, cpus).count == 5
    assert choose_threads("auto", {"MVAPP_NUM_THREADS": "auto", "OMP_NUM_THREADS": "5"}, cpus).count == 5
    assert choose_threads("auto", {"MVAPP_NUM_THREADS": "", "OMP_NUM_THREADS": ""}, cpus).count == 8
    assert choose_threads("4", {}, cpus).count == 4  # a string from an override is read as an integer


@pytest.mark.parametrize(
    ("setting", "env", "named"),
    [
        ("auto", {"MVAPP_NUM_THREADS": "two"}, "MVAPP_NUM_THREADS"),
        ("auto", {"MVAPP_NUM_THREADS": "0"}, "MVAPP_NUM_THREADS"),
        ("auto", {"OMP_NUM_THREADS": "-1"}, "OMP_NUM_THREADS"),
        ("many", {}, "train.num_threads"),
    ],
)
def test_bad_values_name_their_source(setting: str, env: dict[str, str], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        choose_threads(setting, env, CpuBudget(2, None))


def test_configure_applies_and_reports_once() -> None:
    lines: list[str] = []
    threads._reported = None
    choice = configure_torch_threads("auto", report=lines.append, env={}, cpus=CpuBudget(2, None))
    assert choice.count == 1 and torch.get_num_threads() == 1
    assert lines == [
        "torch threads: 1 (2 usable CPUs, cgroup quota none; auto; override with MVAPP_NUM_THREADS=N "
        "or train.num_threads=N)"
    ]
    configure_torch_threads("auto", report=lines.append, env={}, cpus=CpuBudget(2, None))
    assert len(lines) == 1  # the same choice is reported once per process
    configure_torch_threads(2, report=lines.append, env={}, cpus=CpuBudget(2, 1.5))
    assert torch.get_num_threads() == 2 and lines[-1].startswith(
        "torch threads: 2 (2 usable CPUs, cgroup quota 1.5 CPUs"
    )


def test_one_guarded_setter_for_commands_and_scoped_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command option (the domain experiment's ``--threads``) is a setting like ``train.num_threads``
    (MVAPP_NUM_THREADS still wins, the header names the option); every change goes through
    ``set_torch_threads``, which leaves torch alone when the count is already right, and ``torch_threads``
    restores the count after its block (no call at all when nothing changes)."""
    choice = choose_threads(3, {}, CpuBudget(2, None), setting_name="--threads")
    assert (choice.count, choice.source) == (3, "--threads")
    assert choose_threads(3, {"MVAPP_NUM_THREADS": "1"}, CpuBudget(2, None), setting_name="--threads").count == 1
    with pytest.raises(ValueError, match="--threads"):
        choose_threads("many", {}, CpuBudget(2, None), setting_name="--threads")
    torch.set_num_threads(1)
    calls: list[int] = []
    real = torch.set_num_threads
    monkeypatch.setattr(torch, "set_num_threads", lambda n: calls.append(n) or real(n))
    configure_torch_threads(1, report=None, env={}, cpus=CpuBudget(2, None), setting_name="--threads")
    with threads.torch_threads(1):
        assert torch.get_num_threads() == 1
    assert calls == []  # already 1: no 1 -> 1 call, no round trip
    with threads.torch_threads(2):
        assert torch.get_num_threads() == 2
    assert calls == [2, 1] and torch.get_num_threads() == 1
    with threads.torch_threads(None):
        assert calls == [2, 1]


def test_config_key_validates() -> None:
    from multiview_app.config import ConfigError, TrainConfig

    assert TrainConfig(max_steps=1).num_threads == "auto"
    assert TrainConfig(max_steps=1, num_threads=3).num_threads == 3
    with pytest.raises((ValueError, ConfigError)):
        TrainConfig(max_steps=1, num_threads=0)


def test_mvapp_train_and_eval_report_the_choice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("MVAPP_NUM_THREADS", "1")
    threads._reported = None
    config = write_tiny_yaml(
        tmp_path / "tiny.yaml", tmp_path / "runs", train={"max_steps": 2}, eval={"linear_probe": True}
    )
    assert main(["train", "--config", str(config), "--name", "threads_run", "train.num_threads=2"]) == 0
    out = capsys.readouterr().out
    assert "torch threads: 1 (" in out and "; MVAPP_NUM_THREADS;" in out and torch.get_num_threads() == 1
    monkeypatch.delenv("MVAPP_NUM_THREADS")
    threads._reported = None
    assert main(["train", "--config", str(config), "--name", "threads_run2", "train.num_threads=2"]) == 0
    out = capsys.readouterr().out
    assert "torch threads: 2 (" in out and "; train.num_threads;" in out and torch.get_num_threads() == 2
    assert out.count("torch threads:") == 1
    monkeypatch.setenv("MVAPP_NUM_THREADS", "1")
    assert main(["eval", "linear-probe", "--run", str(tmp_path / "runs" / "threads_run"), "--knn-k", "5"]) == 0
    assert "torch threads: 1 (" in capsys.readouterr().out
