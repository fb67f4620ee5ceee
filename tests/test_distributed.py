"""Gather-with-grad across 2 gloo CPU processes == 1 process on the full batch (loss and gradients).

Why the two-process fixture once errored (1 of 12 full runs) and what makes it robust now:
- A rank could leave the process group (``destroy_process_group`` + process exit) while its peer was
  still using the gloo pair connection, which gloo reports as "Connection closed by peer" in the
  peer (the pattern of PyTorch's own flaky gloo tests, fixed there by an explicit barrier). Both
  ranks now meet at a barrier right after initialisation and again before tearing the group down.
- Results travelled through an ``mp.Manager`` dict holding tensors (shared-memory file descriptors
  passed between three processes); each rank now writes plain float64 ``.npy`` files instead.
- gloo picked its network interface from the host name; it is pinned to the loopback device
  (``GLOO_SOCKET_IFNAME=lo``), and initialisation has a 120 s timeout so a stuck rendezvous is an
  error with the rank's traceback instead of a hang.
- 2026-11-23: the fixture errored once more (both tests that use it) in a full run beside other test
  suites on the loaded machine; the message was not kept, and 18 reruns (6 at a time, load > 10) passed.
  A gloo transport failure (connection closed / reset / refused, rendezvous timeout) now gets one fresh
  attempt and is reported as a pytest warning with the ranks' message; any other error fails at once.
"""

from __future__ import annotations

import datetime
import os
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from multiview_app.losses import build_loss
from multiview_app.train.distributed import gather_with_grad, gradient_scale, world_size

N_PER_PROC, K, D_IN, D_OUT, WORLD = 6, 3, 5, 4, 2


def _data() -> torch.Tensor:
    """Full batch ``(WORLD * N_PER_PROC, K, D_IN)``, float64 for exact comparisons."""
    return torch.randn(WORLD * N_PER_PROC, K, D_IN, generator=torch.Generator().manual_seed(1), dtype=torch.float64)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Linear(D_IN, D_OUT).double()


def _reference(loss_name: str) -> tuple[float, torch.Tensor]:
    """One process: loss and weight gradient on the full batch."""
    model = _model()
    loss = build_loss(loss_name)(model(_data()))
    loss.backward()
    return float(loss.detach()), model.weight.grad.clone()


def _worker(rank: int, tmp: str, loss_name: str) -> None:
    """One process: the gathered and the per-process variant; writes ``<gather>_<rank>.npy`` files
    (loss, world size, gathered shape, weight gradient) into ``tmp``."""
    dist.init_process_group(
        "gloo",
        init_method=f"file://{os.path.join(tmp, 'store')}",
        rank=rank,
        world_size=WORLD,
        timeout=datetime.timedelta(seconds=120),
    )
    try:
        dist.barrier()  # every rank has its pair connections before anyone computes
        for gather in (True, False):
            model = DDP(_model())
            x = _data()[rank * N_PER_PROC : (rank + 1) * N_PER_PROC]
            z = model(x)
            z_all = gather_with_grad(z) if gather else z
            loss = build_loss(loss_name)(z_all)
            (loss * gradient_scale(gather)).backward()
            header = np.array([float(loss.detach()), world_size(), *z_all.shape], dtype=np.float64)
            np.save(os.path.join(tmp, f"{int(gather)}_{rank}_header.npy"), header)
            np.save(os.path.join(tmp, f"{int(gather)}_{rank}_grad.npy"), model.module.weight.grad.numpy())
        dist.barrier()  # nobody leaves while a peer may still use the connection
    finally:
        dist.destroy_process_group()


TRANSIENT_GLOO = ("connection closed by peer", "connection reset", "connection refused", "timed out", "timeout")


def _spawn_and_read(tmp: str) -> dict:
    """One attempt: spawn the ranks, read their result files."""
    mp.spawn(_worker, args=(tmp, "infonce_pwe"), nprocs=WORLD, join=True)
    out = {}
    for gather in (True, False):
        for rank in range(WORLD):
            header = np.load(Path(tmp) / f"{int(gather)}_{rank}_header.npy")
            grad = torch.from_numpy(np.load(Path(tmp) / f"{int(gather)}_{rank}_grad.npy"))
            out[(gather, rank)] = (float(header[0]), grad, int(header[1]), tuple(int(v) for v in header[2:]))
    return out


@pytest.fixture(scope="module")
def two_process_results() -> dict:
    """Spawn WORLD gloo processes once (file:// rendezvous, no ports, loopback only) and read
    their result files: ``{(gather, rank): (loss, grad, world, gathered shape)}``.

    A transport failure of gloo itself (connection closed / reset / refused, rendezvous timeout: the
    machine, not the code under test) gets one fresh attempt, and its message is reported as a warning
    so a recurrence stays visible; any other error, or a second transport failure, fails the test."""
    saved = os.environ.get("GLOO_SOCKET_IFNAME")
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    try:
        for attempt in range(2):
            with tempfile.TemporaryDirectory() as tmp:
                try:
                    return _spawn_and_read(tmp)
                except mp.ProcessRaisedException as err:
                    if attempt == 1 or not any(word in str(err).lower() for word in TRANSIENT_GLOO):
                        raise
                    warnings.warn(
                        f"two-process fixture: gloo transport failure, retried once: {str(err)[-2000:]}", stacklevel=1
                    )
        raise AssertionError("unreachable")
    finally:
        if saved is None:
            os.environ.pop("GLOO_SOCKET_IFNAME", None)
        else:
            os.environ["GLOO_SOCKET_IFNAME"] = saved


def test_gathered_loss_and_gradients_equal_single_process_full_batch(two_process_results: dict) -> None:
    ref_loss, ref_grad = _reference("infonce_pwe")
    for rank in range(WORLD):
        loss, grad, world, shape = two_process_results[(True, rank)]
        assert world == WORLD
        assert shape == (WORLD * N_PER_PROC, K, D_OUT)
        assert loss == pytest.approx(ref_loss, rel=1e-12)
        torch.testing.assert_close(grad, ref_grad, rtol=1e-10, atol=1e-12)


@pytest.mark.slow
def test_without_gather_gradients_are_mean_of_per_process_losses(two_process_results: dict) -> None:
    """Per-process objectives (gather_across_processes=False, e.g. M3G): DDP averages local gradients."""
    data = _data()
    grads, losses = [], []
    for rank in range(WORLD):
        model = _model()
        loss = build_loss("infonce_pwe")(model(data[rank * N_PER_PROC : (rank + 1) * N_PER_PROC]))
        loss.backward()
        grads.append(model.weight.grad.clone())
        losses.append(float(loss.detach()))
    for rank in range(WORLD):
        loss, grad, _, shape = two_process_results[(False, rank)]
        assert shape == (N_PER_PROC, K, D_OUT)
        assert loss == pytest.approx(losses[rank], rel=1e-12)
        torch.testing.assert_close(grad, torch.stack(grads).mean(0), rtol=1e-10, atol=1e-12)


def test_single_process_is_identity() -> None:
    z = torch.randn(4, 2, 3, requires_grad=True)
    assert gather_with_grad(z) is z
    assert gradient_scale(True) == 1.0 and world_size() == 1


@pytest.mark.slow
def test_accelerate_launch_runs_two_cpu_processes(tmp_path: Path) -> None:
    """The README's CPU multi-process command: ``accelerate launch --multi_gpu --num_processes 2``
    (``--cpu --num_processes 2`` starts a single process; accelerate's multi-process launcher is the
    ``--multi_gpu`` one, and on a machine without GPUs it runs gloo CPU processes)."""
    from _launch_helpers import launch
    from _train_helpers import write_tiny_yaml

    config = write_tiny_yaml(
        tmp_path / "tiny.yaml", tmp_path / "runs", train={"max_steps": 3, "checkpoint_every": 2, "batch_size": 16}
    )
    proc = launch("accelerate", ["train", "--config", str(config), "--name", "acc"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    ckpt = tmp_path / "runs" / "acc" / "checkpoints" / "step_00000002"
    assert sorted(p.name for p in ckpt.glob("random_states_*.pkl")) == ["random_states_0.pkl", "random_states_1.pkl"]
    assert proc.stdout.count("trained 3 steps") == 1  # only the main process reports
