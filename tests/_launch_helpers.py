"""Start ``python -m multiview_app.cli`` in several CPU (gloo) processes with torchrun or ``accelerate launch``."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAUNCHERS = ("torchrun", "accelerate")


def free_port() -> int:
    """A port the OS just handed out (bound then released; the launcher binds it right after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_env() -> dict[str, str]:
    """This checkout first on the path, one BLAS thread, gloo on loopback, no GPU."""
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        "GLOO_SOCKET_IFNAME": "lo",
        "CUDA_VISIBLE_DEVICES": "",
    }


def launch_command(launcher: str, nproc: int, port: int, cli_args: list[str]) -> list[str]:
    """The command line running ``mvapp <cli_args>`` in ``nproc`` processes.

    torchrun needs ``--`` after the module (its parser would take ``--run`` for ``--run-path``);
    accelerate's multi-process CPU launcher is ``--multi_gpu`` (``--cpu`` starts one process)."""
    if launcher == "torchrun":
        return [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            str(nproc),
            "--nnodes",
            "1",
            "--master_addr",
            "127.0.0.1",
            "--master_port",
            str(port),
            "-m",
            "multiview_app.cli",
            "--",
            *cli_args,
        ]
    if launcher == "accelerate":
        accelerate = shutil.which("accelerate", path=str(Path(sys.executable).parent))
        assert accelerate, "accelerate's console script is installed with the package"
        return [
            accelerate,
            "launch",
            "--multi_gpu",
            "--num_processes",
            str(nproc),
            "--num_machines",
            "1",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
            "--main_process_ip",
            "127.0.0.1",
            "--main_process_port",
            str(port),
            "-m",
            "multiview_app.cli",
            *cli_args,
        ]
    raise ValueError(f"launcher: expected one of {LAUNCHERS}, got {launcher!r}")


def launch(launcher: str, cli_args: list[str], nproc: int = 2, timeout_s: float = 300) -> subprocess.CompletedProcess:
    """Run ``mvapp <cli_args>`` in ``nproc`` gloo processes; retried once on a port clash."""
    for attempt in range(2):
        cmd = launch_command(launcher, nproc, free_port(), cli_args)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=cpu_env(), timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"{launcher} timed out after {timeout_s} s; stderr tail:\n{str(exc.stderr)[-3000:]}")
        if proc.returncode == 0 or "address already in use" not in proc.stderr.lower() or attempt == 1:
            return proc
    return proc
