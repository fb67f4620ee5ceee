"""A training step that is not host-bound (issue 28 item 2): between logging steps the trainer reads
no tensor value back into Python, so on a GPU the step never waits for the device.

On the CPU a tensor-to-Python conversion costs nothing, but every one of them on a CUDA tensor is a
host synchronization. The test counts them on the CPU by patching ``torch.Tensor.item``,
``__bool__``, ``__float__``, ``__int__``, ``tolist``, ``cpu``, ``numpy``, ``nonzero`` and boolean-mask
indexing during a short training run (the loss's forward and backward included; every loss on its own:
tests/test_loss_host_reads.py), and asserts that the non-logging optimizer steps make none. Left out of
the count (each named where it is excluded):

* ``torch.optim.AdamW.step``: torch's non-fused AdamW reads its step counter, a CPU tensor by
  construction (no device synchronization; the trainer uses the fused kernel on CUDA);
* view choices drawn on the host by construction (CPU generators, Python strings): the caption order of
  the ``pairs`` policy (``choose_captions``), the domains picked per batch by the ``domains`` policy
  (``DomainsPolicy._pick_domains``) and its pool of target images (``DomainsPolicy._draw_pool``);
* the DataLoader: items are read in a worker process (``train.num_workers = 1``), whose counts never
  reach this process; starting an epoch's workers draws their base seed from a CPU generator, and the
  epoch's index order (``EpochBatchSampler``) is a CPU tensor by construction.

Conversions in the view-building thread (``train.prefetch_views``) are counted: views are built on the
data's device and must not read it back either.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from _device_cases import modality_config
from _host_reads import HostReads

from multiview_app.data.domains.views import DomainsPolicy
from multiview_app.data.images import augment as augment_mod
from multiview_app.data.text import views as text_views
from multiview_app.train import trainer as trainer_mod


def conversions_per_step(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    modality: str = "images",
    data_options: dict[str, Any] | None = None,
    **train: Any,
) -> tuple[dict[int, list[str]], set[int]]:
    """Train a tiny run of ``modality`` (infonce_pwe, 8 steps, log every 4; tests/_device_cases.py; its
    ``data.options`` updated with ``data_options``) with conversions counted; returns the conversions made
    during each optimizer step (from the end of the previous step's callbacks to the end of its own) and
    the set of logging steps."""
    reads = HostReads()
    # the augmentations' GPU choice (masks over every row) instead of the CPU's gathered rows, whose
    # ``nonzero`` is free on the CPU (tests/test_augment.py: both give the same views)
    monkeypatch.setattr(augment_mod, "gathers_rows", lambda device: False)
    reads.exclude_method(monkeypatch, torch.optim.AdamW, "step")
    reads.exclude_method(monkeypatch, text_views, "choose_captions")
    reads.exclude_method(monkeypatch, DomainsPolicy, "_pick_domains")
    reads.exclude_method(monkeypatch, DomainsPolicy, "_draw_pool")
    reads.exclude_generator(monkeypatch, trainer_mod.EpochBatchSampler, "__iter__")
    reads.exclude_method(monkeypatch, torch.utils.data.DataLoader, "__iter__")  # once per epoch: workers' base seed
    per_step: dict[int, list[str]] = {}
    logged: set[int] = set()

    def after_step(step: int, record: dict[str, Any] | None) -> None:
        per_step[step] = list(reads.seen)
        reads.seen.clear()
        if record is not None:
            logged.add(step)

    cfg = modality_config(
        tmp_path,
        modality,
        "host_reads",
        **{"max_steps": 8, "log_every": 4, "checkpoint_every": 0, "num_workers": 1, **train},
    )
    cfg.data.options.update(data_options or {})
    reads.patch(monkeypatch, nonzero=True, transfers=True)
    trainer_mod.train(cfg, callbacks=[after_step])
    return per_step, logged


ADAPT_AUGMENT = {"adapt": "sketch", "adapt_views": "augment", "adapt_share": 0.5}
ADAPT_NEAREST = {"adapt": "sketch", "adapt_views": "nearest"}


@pytest.mark.parametrize(
    ("modality", "prefetch", "data_options"),
    [
        ("images", True, None),
        ("images", False, None),
        ("eeg", True, None),
        ("image_text", True, None),
        ("domains", True, None),
        ("domains", True, ADAPT_AUGMENT),
        ("domains", False, ADAPT_NEAREST),
    ],
    ids=[
        "images-prefetch",
        "images-in-step",
        "eeg-prefetch",
        "image-text-prefetch",
        "domains-prefetch",
        "domains-adapt-augment",
        "domains-adapt-nearest",
    ],
)
def test_non_logging_steps_read_nothing_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, modality: str, prefetch: bool, data_options: dict | None
) -> None:
    """Images: the digits ``simclr`` stack; EEG: channels as views with crop, gain, noise and band-stop,
    and the channel-embedding encoder with ``unknown_rate``; image-text: the tiny open_clip text tower
    with a learned temperature; domains: one view per seen domain, and domain adaptation with target
    items mixed into the batches (``augment``) or a nearest-target view (``nearest``, built in the step
    with the current model) (tests/_device_cases.py)."""
    per_step, logged = conversions_per_step(
        tmp_path,
        monkeypatch,
        modality,
        data_options,
        prefetch_views=prefetch,
        deterministic=not prefetch,
        diagnostics=True,
    )
    assert logged == {4, 8} and sorted(per_step) == list(range(1, 9))
    # step 1 builds the loader and the first views (one-time work); every later non-logging step must read nothing
    offending = {step: seen for step, seen in per_step.items() if step > 1 and step not in logged and seen}
    assert not offending, "host reads in non-logging steps:\n" + "\n".join(
        f"step {step}: " + "\n    ".join(seen) for step, seen in offending.items()
    )


def test_host_read_counter_sees_conversions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The counter itself: a callback that reads a tensor on every step is seen on every step."""
    reads = HostReads()
    reads.patch(monkeypatch)
    value = torch.ones(3)
    float(value.sum()), value.tolist(), bool(value.all()), value.sum().item(), int(value[0])
    assert [s.split(": ")[1].split(" at")[0] for s in reads.seen] == [
        "Tensor.__float__",
        "Tensor.tolist",
        "Tensor.__bool__",
        "Tensor.item",
        "Tensor.__int__",
    ]
    with reads.excluded():
        value.tolist()
    assert len(reads.seen) == 5


@pytest.mark.parametrize(
    ("loss_name", "loss_refuses_nan"),
    [("infonce_pwe", True), ("infonce_pwe", False), ("mveb", False), ("flatnce", False)],
    ids=["loss-raises", "loss-runs-on", "mveb-runs-on", "flatnce-runs-on"],
)
def test_divergence_found_later_still_names_its_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loss_name: str, loss_refuses_nan: bool
) -> None:
    """The NaN check is deferred to logging / checkpoint steps but still names the first bad step and
    writes no checkpoint after it: the loss of step 3 is NaN (so the embeddings of step 4 are), logging
    every 4 steps, checkpoints every 2. ``loss-raises``: the loss checks its input at once
    (``check_finite``, a standalone loss's default) and refuses the NaN embeddings of step 4
    (``ValueError``), which the trainer turns into the divergence error; ``*-runs-on``: the loss as the
    trainer configures it (``check_finite = False``: no host read) takes them, and step 4's log check raises."""
    from multiview_app.train.checkpoint import list_checkpoints

    real_build_loss = trainer_mod.build_loss

    def build_poisoned_loss(name: str, **params: Any) -> torch.nn.Module:
        loss = real_build_loss(name, **params)
        calls = {"n": 0}
        original_forward = loss.forward

        def forward(z: torch.Tensor) -> torch.Tensor:
            calls["n"] += 1
            loss.check_finite = loss_refuses_nan  # after the trainer's setting
            value = original_forward(z)
            return value * float("nan") if calls["n"] == 3 else value

        loss.forward = forward
        return loss

    monkeypatch.setattr(trainer_mod, "build_loss", build_poisoned_loss)
    cfg = modality_config(tmp_path, "images", "nan", max_steps=8, log_every=4, checkpoint_every=2)
    cfg.loss = type(cfg.loss)(name=loss_name)  # default parameters
    with pytest.raises(trainer_mod.TrainingDivergedError, match=r"step 3: loss became NaN/Inf.*step_00000002"):
        trainer_mod.train(cfg)
    assert [p.name for p in list_checkpoints(cfg.run_dir)] == ["step_00000002"]
    assert not (cfg.run_dir / "model.safetensors").exists()


def test_host_values_reads_tensors_once_and_keeps_floats() -> None:
    from multiview_app.train.metrics import host_values

    values = {
        "loss": torch.tensor(1.5, dtype=torch.float64),
        "iterations": torch.tensor(7),
        "tau": 0.1,
        "grad": torch.tensor([2.25], requires_grad=True),
        "half": torch.tensor(0.5, dtype=torch.bfloat16),
    }
    out = host_values(values)
    assert out == {"loss": 1.5, "iterations": 7.0, "tau": 0.1, "grad": 2.25, "half": 0.5}
    assert all(type(v) is float for v in out.values())
