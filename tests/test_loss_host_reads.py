"""No host read in any loss (issue 38 item 3): the forward and backward of every registered loss, on
changing batches, read no tensor value back into Python, so on a GPU a training step between logging
steps never waits for the device.

Counted on the CPU (tests/_host_reads.py): ``Tensor.item`` / ``tolist`` / ``__bool__`` / ``__float__`` /
``__int__``, ``Tensor.cpu`` / ``numpy``, ``nonzero`` and ``masked_select``, and indexing with a boolean
mask. Every name of the loss registry is covered (a new loss is picked up automatically), with its
default parameters plus the variants in :data:`VARIANTS`, at ``(n, k)`` = (8, 3), (16, 6) and (64, 3)
(tiny ``d``). Each case is warmed up once (one-time caches), then counted over fresh embeddings on
every call. The loss is configured as the trainer configures it: ``check_finite = False`` (the trainer
flags NaN / Inf on the device and reads the flag on logging steps) and ``quiet_solver = True``.

Exceptions, each bounded here: ``m3g`` runs its sweep blocks with a GPU's block schedule (the numba
``k = 3`` kernels, a CPU-only path that a GPU never takes, are switched off), which by design read one
convergence scalar per block of sweeps: at most :data:`M3G_READS_PER_CALL` per call in steady state (its
own tests pin the details).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from _host_reads import HostReads

from multiview_app.losses import LOSSES, build_loss, sinkhorn

D = 8
SHAPES = [(8, 3), (16, 6), (64, 3)]
#: counted calls per case, each on new embeddings
CALLS = 3
#: the device loop of M3G reads one convergence scalar per block of sweeps (documented in losses/m3g.py)
M3G_READS_PER_CALL = 2
#: parameters every case of a loss gets (the registry default otherwise)
BASE_PARAMS: dict[str, dict[str, Any]] = {
    "m3g": {"epsilon": 0.5},  # a short solve: the reads per call, not accuracy
    "supervised_ce": {"num_classes": 4, "in_dim": D},
}
#: further parameter sets: the other code paths of a loss (learned / scheduled temperature, blockwise)
VARIANTS: list[tuple[str, dict[str, Any]]] = [
    ("infonce_pwe", {"learnable_temperature": True}),
    ("infonce_pwe", {"chunked": True}),
    ("infonce_ave", {"learnable_temperature": True}),
    ("infonce_ave", {"chunked": True}),
    ("pvc_geometric", {"chunked": True}),
    ("pvc_sufficient", {"chunked": True}),
    ("aggnce", {"chunked": True}),
    ("flatnce", {"ess_target": 0.5}),
    ("flatnce", {"ess_target": 0.5, "chunked": True}),
    ("flatnce", {"tau": 0.02, "ess_target": 0.5}),  # 2 / tau beyond the constant-shift limit: general path
]


def cases() -> list[Any]:
    out = []
    for name in LOSSES.names():
        for params in [{}] + [extra for variant, extra in VARIANTS if variant == name]:
            label = name + "".join(f"-{key}={value}" for key, value in params.items())
            for n, k in SHAPES:
                out.append(pytest.param(name, params, n, k, id=f"{label}-{n}x{k}"))
    return out


def test_variants_name_registered_losses() -> None:
    assert {name for name, _ in VARIANTS} <= set(LOSSES.names())


def loss_inputs(loss: torch.nn.Module, n: int, k: int, seed: int) -> tuple[tuple[torch.Tensor, ...], dict[str, Any]]:
    """Fresh inputs of ``loss`` for one call: embeddings ``(n, k, D)`` with gradient (and the EMA target
    for BYOL, the labels for a supervised head)."""
    generator = torch.Generator().manual_seed(seed)
    z = (torch.randn(n, 1, D, generator=generator) + torch.randn(n, k, D, generator=generator)).requires_grad_()
    args: tuple[torch.Tensor, ...] = (z,)
    if getattr(loss, "takes_target", False):
        args = (z, torch.randn(n, k, D, generator=generator))
    kwargs = {"labels": torch.randint(0, 4, (n,), generator=generator)} if loss.uses_labels else {}
    return args, kwargs


@pytest.mark.parametrize(("name", "params", "n", "k"), cases())
def test_loss_forward_and_backward_read_nothing_back(
    name: str, params: dict[str, Any], n: int, k: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    if name == "m3g":  # the blocks with a GPU's block schedule (on the CPU a read costs nothing)
        params = {**params, "backend": "blocks"}
        monkeypatch.setattr(sinkhorn, "_SECOND_BLOCK", {})
    loss = build_loss(name, **{**BASE_PARAMS.get(name, {}), **params})
    loss.check_finite = False  # as the trainer sets it
    loss.quiet_solver = True
    loss.train()
    args, kwargs = loss_inputs(loss, n, k, seed=0)
    loss(*args, **kwargs).backward()  # warm-up: one-time caches (view pairs, compiled kernels)
    reads = HostReads()
    reads.patch(monkeypatch, nonzero=True, transfers=True)
    per_call = []
    for call in range(CALLS):
        args, kwargs = loss_inputs(loss, n, k, seed=call + 1)
        value = loss(*args, **kwargs)
        value.backward()
        assert value.dim() == 0 and args[0].grad is not None
        per_call.append(list(reads.seen))
        reads.seen.clear()
    monkeypatch.undo()
    allowed = M3G_READS_PER_CALL if name == "m3g" else 0
    offending = [seen for seen in per_call if len(seen) > allowed]
    assert not offending, f"{name} {params} at ({n}, {k}): host reads per call (allowed {allowed}):\n" + "\n".join(
        "\n".join(seen) for seen in offending
    )
    assert all(key in loss.last_stats for key in ("loss",))
    stats = dict(loss.last_stats)  # a logging step reads them: plain floats
    assert all(type(value) is float for value in stats.values()), stats


@pytest.mark.parametrize("name", [name for name in LOSSES.names() if name != "supervised_ce"])
def test_standalone_loss_still_refuses_nonfinite_embeddings(name: str) -> None:
    """Outside the trainer (``check_finite`` left on) a loss names the NaN / Inf entries at once."""
    loss = build_loss(name)
    z = torch.randn(6, 3, D)
    z[2, 1, 0] = float("nan")
    z[4, 0, 3] = float("inf")
    args = (z, torch.randn(6, 3, D)) if getattr(loss, "takes_target", False) else (z,)
    with pytest.raises(ValueError, match="embeddings contain 2 non-finite values"):
        loss(*args)
