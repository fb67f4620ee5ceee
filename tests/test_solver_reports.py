"""Solver non-convergence inside training: counted per logged step (``solver/*`` in metrics.jsonl and
diagnostics.json), announced once and totalled once through the run's notes / logger, never a raw
``RuntimeWarning``; a standalone loss still warns."""

from __future__ import annotations

import json
import logging
import warnings
from pathlib import Path

import pytest
import torch
from _train_helpers import tiny_config

from multiview_app.losses import build_loss
from multiview_app.losses.base import SolverTally
from multiview_app.train.metrics import read_metrics
from multiview_app.train.trainer import train


def test_tally_counts_windows_and_totals() -> None:
    tally = SolverTally("S", "max_iter 3")
    for converged, error in ((True, 0.0), (False, 0.5), (False, 0.2)):
        tally.add(converged, error)
    assert tally.pop_window() == (3, 2) and tally.pop_window() == (0, 0)
    tally.add(True, 0.0)
    assert (tally.solves, tally.unconverged, tally.worst_error) == (4, 2, 0.5)
    assert tally.summary() == "S: 2 of 4 solves did not converge (max_iter 3; worst error 0.5)"
    assert SolverTally("S", "x").summary() is None


def test_standalone_m3g_counts_and_still_warns() -> None:
    loss = build_loss("m3g", epsilon=0.05, max_iter=1)
    z = torch.randn(8, 3, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    with pytest.warns(RuntimeWarning, match="did not converge"):
        loss(z)
    loss(z)
    assert loss.solver_tally.solves == 2 and loss.solver_tally.unconverged == 2


def test_training_reports_unconverged_solves_once_with_counts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tiny_config(
        tmp_path, loss={"name": "m3g", "epsilon": 0.05, "max_iter": 1}, train={"max_steps": 4, "log_every": 2}
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a raw RuntimeWarning fails the test
        with caplog.at_level(logging.INFO, logger="multiview_app"):
            result = train(cfg)
    rows = [r for r in read_metrics(result.run_dir / "metrics.jsonl")]
    assert [(r["solver/solves"], r["solver/unconverged"]) for r in rows] == [(2, 2), (2, 2)]
    solver_notes = [n for n in result.notes if n.startswith("M3G MM-Sinkhorn")]
    assert len(solver_notes) == 2  # the first occurrence, then the totals
    assert "2 of 2 solves up to step 2 did not converge (max_iter 1, tol 0.001, epsilon 0.05)" in solver_notes[0]
    assert solver_notes[1].startswith("M3G MM-Sinkhorn: 4 of 4 solves did not converge (max_iter 1")
    assert sum("M3G MM-Sinkhorn" in r.getMessage() for r in caplog.records) == 2
    out = capsys.readouterr()
    assert out.out.count("note: M3G MM-Sinkhorn") == 2 and "RuntimeWarning" not in out.err
    summary = json.loads((result.run_dir / "diagnostics.json").read_text())
    assert summary["solver/unconverged"]["max"] == 2


def test_converged_training_says_nothing(tmp_path: Path) -> None:
    cfg = tiny_config(tmp_path, loss={"name": "m3g", "epsilon": 0.5, "max_iter": 1000}, train={"max_steps": 2})
    result = train(cfg)
    assert not [n for n in result.notes if "M3G" in n]
    assert all(r["solver/unconverged"] == 0 for r in read_metrics(result.run_dir / "metrics.jsonl"))


def test_mveb_blockwise_solves_are_counted_and_quiet_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    import multiview_app.losses.mveb as mveb

    real = mveb.conjugate_gradient
    monkeypatch.setattr(mveb, "NYSTROM_RANK", 1)
    monkeypatch.setattr(mveb, "conjugate_gradient", lambda op, b, rtol, max_iter, pre: real(op, b, rtol, 1, pre))
    z = torch.randn(12, 3, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    dense = build_loss("mveb", chunked=False)
    dense(z)
    assert dense.solver_tally is None  # a direct solve: nothing to count
    loss = build_loss("mveb", chunked=True)
    with pytest.warns(RuntimeWarning, match="mveb: blockwise Stein solve stopped after 1 conjugate-gradient steps"):
        loss(z)
    loss.quiet_solver = True
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        loss(z)
    assert (loss.solver_tally.solves, loss.solver_tally.unconverged) == (6, 6)  # one solve per view and call
    assert loss.solver_tally.summary().startswith("MVEB blockwise Stein solve: 6 of 6 solves did not converge")
