"""Ctrl-C during ``mvapp tune`` (SIGINT to the whole foreground process group, as a terminal sends
it): one line ``mvapp: error: interrupted``, exit 130, no traceback from the fork server or anyone.

The tune process starts with SIGINT at its default, as a foreground job of a terminal does: a shell without
job control starts background commands (``pytest ... &``) with SIGINT ignored, children inherit that,
and Python then installs no KeyboardInterrupt handler, so Ctrl-C would rightly do nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml
from _train_helpers import tiny_raw

ROOT = Path(__file__).resolve().parents[1]


def _foreground_sigint() -> None:
    """In the child before exec: SIGINT at its default disposition, whatever this test process inherited."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_during_tune_prints_one_clean_line(tmp_path: Path) -> None:
    raw = tiny_raw(tmp_path / "runs", train={"max_steps": 100_000, "log_every": 1})
    raw["data"]["options"]["val_fraction"] = 0.2
    raw["output"].pop("name")
    raw["tune"] = {
        "space": {"loss.tau": {"type": "float", "low": 0.05, "high": 0.5}},
        "report_every": 0,
        "pruner": "none",
    }
    config = tmp_path / "interrupt.yaml"
    config.write_text(yaml.safe_dump(raw))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "multiview_app.cli", "tune", "--config", str(config), "--trials", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
        preexec_fn=_foreground_sigint,
    )
    metrics = tmp_path / "runs" / "tune" / "interrupt" / "trial_0" / "metrics.jsonl"
    deadline = time.monotonic() + 600
    try:
        while not (metrics.is_file() and metrics.stat().st_size):  # a trial is training
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no trial started"
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGINT)  # the terminal's Ctrl-C: the tune process and its fork server
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.strip().splitlines()[-1] == "mvapp: error: interrupted", err
