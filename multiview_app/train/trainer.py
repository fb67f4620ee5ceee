"""The Accelerate trainer: one code path for CPU, one GPU, multi-GPU and multi-node.

Per optimizer step (``train.grad_accum`` micro-batches per step, per process)::

    raw batch --policy.train_views--> ViewBatch --student.embed--> z (n, k, d)
      [the training method (methods.py): plain; EMA teacher slot replacement; BYOL online vs. EMA target]
      [gather across processes with gradient when loss.gather_across_processes]
      --loss head--> 0-d loss --backward (x world when gathered)--> clip --AdamW--> LR schedule --EMA

Data order is a seeded per-epoch permutation (seed, epoch) split over processes, and the view
randomness of each micro-batch is seeded by (seed, step, micro-batch, rank), so a run resumed from
a checkpoint continues mid-epoch with exactly the batches and views of an uninterrupted run.

Resuming keeps the run's saved config (``train/resume.py``); a run stopped before its first
checkpoint restarts from step 0. SIGINT / SIGTERM finish the current step, write a checkpoint and
raise :class:`TrainingInterrupted` (a second signal acts as usual). One process at a time writes a
run folder (``RunLock``).
"""

from __future__ import annotations

import importlib.util
import logging
import math
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, Sampler, default_collate

from ..config import Config, OptimConfig, dump_config, resolve_paths
from ..console import info
from ..data.batch import ViewBatch, to_device
from ..data.streaming import STREAM_KEYS, StreamingDataset, StreamPosition
from ..losses import build_loss
from ..threads import configure_torch_threads
from .callbacks import StepCallback, StepEvent, TrainCallback, callbacks_for
from .checkpoint import latest_checkpoint, load_checkpoint, read_trainer_state, resolve_resume, save_checkpoint
from .diagnostics import step_diagnostics, write_diagnostics_summary
from .distributed import gather_with_grad, gradient_scale, world_size
from .input_contract import check_run_input, format_input_differences, write_run_contract
from .methods import StepOutputs, TrainMethod, as_float64, build_method
from .metrics import MetricsLog, StepTimer, host_values, plot_curves, read_metrics
from .resume import RunLock, reconcile_resume_config, refuse_stale_extension
from .run_io import atomic_write_json, atomic_write_text, keep_previous_final, model_spec, save_weights

#: What the trainer checks for NaN/Inf each step, in the order it checks them.
NONFINITE_CHECKS: tuple[str, ...] = ("embeddings", "loss")


class TrainingDivergedError(RuntimeError):
    """The loss (or the embeddings) became NaN/Inf; the message names the step and the last good checkpoint."""


class TrainingInterrupted(RuntimeError):
    """SIGINT / SIGTERM: the current step finished and a checkpoint was written; the message says how to
    resume. ``exit_code`` is ``128 + signal number`` (the CLI exits with it)."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.signum = signum
        self.exit_code = 128 + signum


#: TensorBoard logging where the ``eval`` extra installed it (metrics.jsonl is written either way)
_TRACKER = "tensorboard" if importlib.util.find_spec("tensorboard") is not None else None


def ignore_sigint(worker_id: int) -> None:
    """DataLoader workers ignore Ctrl-C (the terminal sends it to the whole process group): the main
    process finishes its step and checkpoints, which needs the workers alive."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class StopRequest:
    """Turns the first SIGINT / SIGTERM into a flag that the loop checks after each optimizer step
    (installed only in the main thread); the handlers are then restored, so a second signal
    interrupts at once (an interrupted checkpoint write never touches older checkpoints)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, self._handle) for sig in self.SIGNALS}
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.signum = signum
        self._restore()

    def _restore(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous = {}

    def __exit__(self, *exc: object) -> None:
        self._restore()


@dataclass
class TrainResult:
    """Summary of a finished run: ``steps`` is the run's total, ``wall_time_s`` and ``items_per_s`` are this
    process's (the steps from ``start_step`` on); ``run_time_s`` is the training time of all the run's steps,
    earlier processes included (None when a checkpoint from before it was recorded was resumed)."""

    run_dir: Path
    steps: int
    final_loss: float
    wall_time_s: float
    items_per_s: float
    evaluation: dict[str, Any] | None = None  # end-of-training callback results by callback name
    notes: list[str] = field(default_factory=list)
    is_main_process: bool = True
    reports: list[str] = field(default_factory=list)  # console texts of the callbacks' results
    #: True when ``resume`` found the run finished (``model.safetensors`` written) and nothing was trained
    already_finished: bool = False
    start_step: int = 0  # the step this process started from (> 0 after a resume)
    run_time_s: float | None = None

    @property
    def steps_run(self) -> int:
        """Optimizer steps this process ran."""
        return self.steps - self.start_step


def group_batches(groups: np.ndarray, per_batch: int, generator: torch.Generator) -> list[torch.Tensor]:
    """Global micro-batches of items that share a group id (``groups (N,)``, e.g. the modality set of
    each item of a PSG modality split, so every batch has one k): each group's items in a random order cut
    into batches of ``per_batch`` (its incomplete tail dropped), then the batches of all groups in a random
    order."""
    batches: list[torch.Tensor] = []
    for group in np.unique(groups):
        members = torch.from_numpy(np.flatnonzero(groups == group))
        members = members[torch.randperm(members.numel(), generator=generator)]
        batches += list(members[: members.numel() // per_batch * per_batch].split(per_batch))
    order = torch.randperm(len(batches), generator=generator).tolist()
    return [batches[i] for i in order]


def micro_batches_per_epoch(dataset: Any, num_items: int, per_batch: int) -> int:
    """Global micro-batches of one epoch: ``num_items // per_batch``, or with the dataset's ``batch_groups``
    the sum over groups (batches never mix groups)."""
    groups = getattr(dataset, "batch_groups", None)
    if groups is None:
        return num_items // per_batch
    return int(sum(count // per_batch for count in np.unique(np.asarray(groups), return_counts=True)[1]))


def undrawn_groups_note(dataset: Any, per_batch: int) -> str | None:
    """A note naming the batch groups (a dataset's ``batch_groups``: modality sets, or nights under
    ``data.options.batch_within: night``) with fewer items than one global micro-batch of ``per_batch``:
    :func:`group_batches` never draws their items. None when every group fills a batch (or there are none)."""
    groups = getattr(dataset, "batch_groups", None)
    if groups is None or len(groups) == 0:
        return None
    ids, counts = np.unique(np.asarray(groups), return_counts=True)
    short = counts < per_batch
    if not short.any():
        return None
    return (
        f"data: {int(short.sum())} of {ids.size} batch groups (a batch holds items of one group: one modality set, "
        f"or one night) have fewer than {per_batch} items; their {int(counts[short].sum())} items are never drawn "
        "(lower train.batch_size to use them)"
    )


class EpochBatchSampler(Sampler[list[int]]):
    """Micro-batches of one epoch for one process, starting at micro-batch ``start``.

    The epoch's order is ``randperm(num_items)`` seeded by ``(seed, epoch)``; it is cut into
    ``num_batches`` global micro-batches of ``items * world`` indices and process ``rank`` takes
    its contiguous slice of each (incomplete tail dropped, so every process sees the same n).
    With ``groups`` (an id per item, a dataset's ``batch_groups``) every global micro-batch holds items of
    one group (:func:`group_batches`).
    """

    def __init__(
        self,
        num_items: int,
        items: int,
        num_batches: int,
        seed: int,
        epoch: int,
        rank: int = 0,
        world: int = 1,
        start: int = 0,
        groups: np.ndarray | None = None,
    ) -> None:
        self.num_items, self.items, self.num_batches = num_items, items, num_batches
        self.seed, self.epoch, self.rank, self.world, self.start = seed, epoch, rank, world, start
        self.groups = groups

    def __iter__(self) -> Iterator[list[int]]:
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        per_batch = self.items * self.world
        if self.groups is not None:
            chunks = group_batches(np.asarray(self.groups), per_batch, gen)
        else:
            order = torch.randperm(self.num_items, generator=gen)
            chunks = [order[b * per_batch : (b + 1) * per_batch] for b in range(self.num_batches)]
        for b in range(self.start, self.num_batches):
            yield chunks[b][self.rank * self.items : (self.rank + 1) * self.items].tolist()

    def __len__(self) -> int:
        return max(0, self.num_batches - self.start)


def set_dataset_epoch(dataset: Any, epoch: int) -> None:
    """``dataset.set_epoch(epoch)`` when the train split draws per epoch (e.g. the partner images of
    domain tuples); called before each epoch's DataLoader is built, so workers see it."""
    set_epoch = getattr(dataset, "set_epoch", None)
    if callable(set_epoch):
        set_epoch(epoch)


class ViewStream:
    """Views of consecutive micro-batches, the next one prepared in a background thread while the
    model computes on the current one (``prefetch``), so the step only waits for what is not hidden.

    Micro-batch ``i`` (global index ``first_index + i``) gets its view randomness from its own
    generator seeded by ``view_seed(index)``, so the views are the same with and without prefetching
    and after a resume.
    """

    def __init__(
        self,
        loader: DataLoader,
        policy: Any,
        device: torch.device,
        view_seed: Callable[[int], int],
        first_index: int,
        prefetch: bool = True,
        positions: dict[int, StreamPosition] | None = None,
    ) -> None:
        #: streamed train split: per DataLoader worker, the position after its last handed-out batch
        self.positions: dict[int, StreamPosition] = dict(positions or {})
        self._batches = iter(loader)
        self._policy, self._device, self._view_seed = policy, device, view_seed
        self._index = first_index
        self._build_s = 0.0  # host seconds spent making the micro-batches handed out since the last pop
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="views") if prefetch else None
        self._pending: Future | None = self._pool.submit(self._make, self._take_index()) if self._pool else None

    def _take_index(self) -> int:
        index, self._index = self._index, self._index + 1
        return index

    def _make(self, index: int) -> tuple[ViewBatch, tuple[int, StreamPosition] | None, float] | None:
        start = time.perf_counter()
        raw = next(self._batches, None)
        if raw is None:
            return None
        position = None
        if STREAM_KEYS[0] in raw:  # one worker's batch: where that worker is after it
            worker, epoch, offset = (raw.pop(key) for key in STREAM_KEYS)
            position = (int(worker[-1]), StreamPosition(int(epoch[-1]), int(offset[-1]) + 1))
        generator = torch.Generator(device=self._device).manual_seed(self._view_seed(index))
        views = self._policy.train_views(to_device(raw, self._device), generator)
        return views, position, time.perf_counter() - start

    def __next__(self) -> ViewBatch:
        if self._pool is None or self._pending is None:
            made = self._make(self._take_index())
        else:
            made = self._pending.result()
            self._pending = self._pool.submit(self._make, self._take_index()) if made is not None else None
        if made is None:
            raise StopIteration
        batch, position, seconds = made
        if position is not None:
            self.positions[position[0]] = position[1]
        self._build_s += seconds
        return batch

    def pop_build_seconds(self) -> float:
        """Host seconds spent fetching (DataLoader) and building the views (device copy + policy) of the
        micro-batches handed out since the last call; with prefetching most of it overlaps the step.
        On CUDA this is the time to issue the view kernels, not to run them."""
        seconds, self._build_s = self._build_s, 0.0
        return seconds

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


class EmbedStep(nn.Module):
    """The DDP-wrapped unit, so that the gradient synchronisation hooks of DDP see the forward pass:
    ``forward(batch)`` -> ``model.embed(batch)`` ``(n, k, d)`` (``output="embed"``), the encoder's
    ``model.features(batch)`` ``(n, k, f)`` (``"features"``, e.g. the supervised head) or BYOL's online
    ``model.embed_online(batch)`` = (predictions, projections, encoder features) (``"online"``)."""

    OUTPUTS: ClassVar[dict[str, str]] = {"embed": "embed", "features": "features", "online": "embed_online"}

    def __init__(self, model: nn.Module, output: str = "embed") -> None:
        super().__init__()
        if output not in self.OUTPUTS:
            raise ValueError(f"EmbedStep output must be one of {', '.join(self.OUTPUTS)}, got {output!r}")
        self.model = model
        self.output = output

    def forward(self, batch: ViewBatch) -> Any:
        return getattr(self.model, self.OUTPUTS[self.output])(batch)


def param_groups(model: nn.Module, optim: OptimConfig) -> list[dict[str, Any]]:
    """AdamW parameter groups of ``model``: the predictor heads at ``lr * optim.predictor_lr_scale``
    (when it is not 1 and the model has predictors), everything else at ``optim.lr``."""
    predictors = getattr(model, "predictors", None)
    scaled = isinstance(predictors, nn.Module) and optim.predictor_lr_scale != 1.0
    head = list(predictors.parameters()) if scaled else []
    if not head:
        return [{"params": list(model.parameters())}]
    ids = {id(p) for p in head}
    rest = [p for p in model.parameters() if id(p) not in ids]
    return [{"params": rest}, {"params": head, "lr": optim.lr * optim.predictor_lr_scale}]


def lr_lambda(warmup_steps: int, total_steps: int, min_ratio: float) -> Callable[[int], float]:
    """Linear warmup over ``warmup_steps`` then cosine decay to ``min_ratio`` at ``total_steps``."""

    def factor(step: int) -> float:
        if warmup_steps > 0 and step < warmup_steps:
            return (step + 1) / warmup_steps
        span = max(1, total_steps - warmup_steps)
        progress = min(1.0, (step - warmup_steps) / span)
        return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


def sync_loss_gradients(loss_fn: nn.Module, gathered: bool) -> None:
    """Gradients of the loss head's own parameters (not under DDP) as one process on the full batch:
    mean over processes, and undo the ``world`` factor of a gathered loss."""
    world = world_size()
    for p in loss_fn.parameters():
        if p.grad is not None and world > 1:
            torch.distributed.all_reduce(p.grad)
            p.grad.div_(world * gradient_scale(gathered))


def resolve_precision(requested: str, device: torch.device) -> tuple[str, str | None]:
    """Mixed precision for ``device``: fp16/bf16 only on CUDA; returns (precision, note)."""
    if requested != "no" and device.type != "cuda":
        return "no", f"train.precision={requested} needs a GPU; training in fp32 on {device.type}"
    return requested, None


@dataclass
class DataPlan:
    """The train split and how it is cut: ``items`` per micro-batch and process, ``micro_per_epoch``
    micro-batches per epoch and process (a multiple of ``train.grad_accum``), ``total_steps``."""

    adapter: Any
    policy: Any
    train_set: Dataset
    n_items: int  # -1 for a streamed split (size unknown)
    items: int
    micro_per_epoch: int
    total_steps: int
    world: int
    grad_accum: int
    streaming: bool = False  # train_set is a StreamingDataset: one endless pass, no epochs of the trainer

    @property
    def items_per_step(self) -> int:
        """Items of one optimizer step over all processes."""
        return self.items * self.grad_accum * self.world


@dataclass
class Parts:
    """What the loop trains: the DDP-wrapped ``step_module`` (around the model), loss, the training
    method (plain / EMA teacher / BYOL: ``methods.py``), optimizer."""

    step_module: nn.Module
    loss_fn: nn.Module
    method: TrainMethod
    optimizer: Any
    scheduler: Any
    gathered: bool


@dataclass
class Position:
    """Where the run is: optimizer ``step`` done, ``epoch``, micro-batch ``position`` in the epoch."""

    step: int = 0
    epoch: int = 0
    position: int = 0


class Trainer:
    """Builds data, model, loss, optimizer from a :class:`Config` and trains (see module docstring).

    :meth:`fit` runs the named steps in order: :meth:`_plan_data`, :meth:`_build_parts`,
    :meth:`_start_or_resume`, :meth:`_run_epochs` (per step: :meth:`_optimizer_step`,
    :meth:`_log_step`, :meth:`_maybe_checkpoint`, callbacks) and :meth:`_finish`.
    """

    def __init__(
        self,
        cfg: Config,
        *,
        resume: str | None = None,
        callbacks: Sequence[TrainCallback | StepCallback] = (),
        accept_config_changes: bool = False,
    ) -> None:
        self.cfg = resolve_paths(cfg)  # the run folder's config.yaml holds absolute paths
        self.resume = resume
        self.accept_config_changes = accept_config_changes
        self._restart_from_zero = False  # --resume of a run stopped before its first checkpoint
        self.callbacks = callbacks_for(self.cfg, callbacks)
        self.run_dir = self.cfg.run_dir
        self.notes: list[str] = []
        self._main = True
        self._diagnostics: dict[str, float] = {}  # diag/* of the step about to be logged
        self._first_nonfinite: torch.Tensor | None = None  # device flag of _flag_nonfinite
        self._stream_positions: dict[int, StreamPosition] = {}  # streamed split: this process's workers
        self._solver_announced = False  # the first unconverged solve was reported (_solver_window)
        #: training seconds of the run before this process (from the resumed checkpoint; None: not recorded)
        self._prior_train_s: float | None = 0.0
        self._process_start = time.perf_counter()  # reset when this process's training starts (fit)

    # ------------------------------------------------------------------ setup
    def _make_accelerator(self) -> Any:
        from accelerate import Accelerator
        from accelerate.utils import set_seed

        probe_device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        precision, note = resolve_precision(self.cfg.train.precision, probe_device)
        accelerator = Accelerator(
            mixed_precision=precision,
            log_with=_TRACKER,
            project_dir=str(self.run_dir),
            cpu=probe_device.type == "cpu",
        )
        self._main = accelerator.is_main_process
        # intra-op threads from the usable CPUs / train.num_threads / MVAPP_NUM_THREADS (multiview_app/threads.py)
        configure_torch_threads(self.cfg.train.num_threads, report=self._report_threads if self._main else None)
        if note:
            self._note(note)
        set_seed(self.cfg.train.seed, deterministic=self.cfg.train.deterministic)
        return accelerator

    def _report_threads(self, header: str) -> None:
        """The thread choice's header line: printed, logged (``multiview_app`` logger), kept in the notes."""
        self.notes.append(header)
        logging.getLogger("multiview_app").info(header)
        info(header)  # held by the CLI until training starts (a failing command prints only its error)

    def _note(self, message: str) -> None:
        """Record a note for the result and print it (main process)."""
        self.notes.append(message)
        if self._main:
            info(f"note: {message}")

    def _check_run_dir(self) -> None:
        """A new run needs a new folder; a resumed one an existing run whose saved config matches
        (``train/resume.py``). A run without a checkpoint yet restarts from step 0."""
        if self.resume is None:
            if (self.run_dir / "config.yaml").exists():
                raise FileExistsError(
                    f"run folder {self.run_dir} already exists; use --resume latest to continue it or "
                    "--name to start a new run"
                )
            return
        explicit = Path(self.resume) if self.resume != "latest" else None
        if explicit is not None and not explicit.exists():
            raise FileNotFoundError(f"--resume {explicit.resolve()}: no such checkpoint or run folder")
        if not (self.run_dir / "config.yaml").is_file():
            raise FileNotFoundError(
                f"--resume {self.resume}: no run at {self.run_dir} (no config.yaml); start it without --resume"
            )
        try:
            ckpt: Path | None = resolve_resume(self.run_dir, self.resume)
        except FileNotFoundError:
            if explicit is not None and explicit.resolve() != self.run_dir.resolve():
                raise
            ckpt = None
        if ckpt is not None:
            read_trainer_state(ckpt)  # a corrupt state file is an error before anything runs
        if self.accept_config_changes and (explicit is None or explicit.resolve() == self.run_dir.resolve()):
            refuse_stale_extension(self.run_dir, ckpt)  # extending a finished run: from its final state only
        # refuse a differing config now; accepted changes are recorded once the checkpoint is restored
        self.cfg = reconcile_resume_config(
            self.run_dir, self.cfg, accept_changes=self.accept_config_changes, write=False
        )
        if ckpt is None:
            self._restart_from_zero = True
            self._note(
                f"--resume {self.resume}: {self.run_dir} has no checkpoint yet (stopped before its first one); "
                "starting it from step 0"
            )

    def _finished_already(self) -> bool:
        """A run resumed as a whole (``latest`` or its run folder) whose final model is written is finished:
        resuming it trains nothing (its saved config was already compared by :meth:`_check_run_dir`).
        ``accept_config_changes`` (e.g. a larger ``train.max_steps``) is the way to extend it from its final
        checkpoint; naming one checkpoint folder explicitly goes back to that checkpoint, as asked (either way
        the finished model is kept in ``final_step<N>/`` before training again)."""
        if self.resume is None or self.accept_config_changes or not (self.run_dir / "model.safetensors").is_file():
            return False
        return self.resume == "latest" or Path(self.resume).resolve() == self.run_dir.resolve()

    def _finished_result(self, is_main_process: bool) -> TrainResult:
        """The summary of a finished run, read from its ``metrics.jsonl`` (nothing is written)."""
        records = read_metrics(self.run_dir / "metrics.jsonl") if (self.run_dir / "metrics.jsonl").is_file() else []
        last = records[-1] if records else {}
        message = (
            f"run {self.run_dir} is finished (its model.safetensors is written); nothing to do. To train it "
            f"further: mvapp train --resume {self.run_dir} train.max_steps=<more steps> --accept-config-changes"
        )
        self.notes.append(message)
        return TrainResult(
            self.run_dir,
            int(last.get("step", 0)),
            float(last.get("loss", float("nan"))),
            0.0,
            0.0,
            notes=self.notes,
            is_main_process=is_main_process,
            already_finished=True,
        )

    def _plan_data(self, world: int) -> DataPlan:
        """Adapter, view policy and the train split cut into micro-batches and optimizer steps."""
        from ..data.adapters import build_adapter
        from ..data.views import build_view_policy, items_per_batch

        cfg, tcfg = self.cfg, self.cfg.train
        adapter = build_adapter(cfg.data.adapter, cfg.data.options)
        policy = build_view_policy(cfg.views.policy, cfg.views.k, cfg.views.options, adapter)
        train_set: Dataset = adapter.split("train")
        items = items_per_batch(cfg.views.batch_mode, tcfg.batch_size, cfg.views.k)
        if isinstance(train_set, StreamingDataset):
            return self._plan_stream(adapter, policy, train_set, items, world)
        n_items = len(train_set)  # type: ignore[arg-type]
        steps_per_epoch = micro_batches_per_epoch(train_set, n_items, items * world) // tcfg.grad_accum
        undrawn = undrawn_groups_note(train_set, items * world)
        if undrawn:
            self._note(undrawn)
        if steps_per_epoch < 1:
            raise ValueError(
                f"data: the train split has {n_items} items, fewer than one optimizer step needs "
                f"({items} items x {world} processes x {tcfg.grad_accum} accumulation); lower train.batch_size"
            )
        total_steps = min(s for s in (tcfg.max_steps, tcfg.epochs and tcfg.epochs * steps_per_epoch) if s)
        return DataPlan(
            adapter,
            policy,
            train_set,
            n_items,
            items,
            steps_per_epoch * tcfg.grad_accum,
            total_steps,
            world,
            tcfg.grad_accum,
        )

    def _plan_stream(self, adapter: Any, policy: Any, stream: StreamingDataset, items: int, world: int) -> DataPlan:
        """A streamed train split: ``train.max_steps`` steps of one endless pass (the stream's own
        epochs are per DataLoader worker, see ``data/streaming.py``)."""
        tcfg = self.cfg.train
        if tcfg.max_steps is None:
            raise ValueError(
                "data: the train split is streamed (its size is not known in advance); set train.max_steps "
                "instead of train.epochs"
            )
        stream.seed = tcfg.seed
        stream.check_workers(tcfg.num_workers)
        total_micro = tcfg.max_steps * tcfg.grad_accum
        return DataPlan(
            adapter, policy, stream, -1, items, total_micro, tcfg.max_steps, world, tcfg.grad_accum, streaming=True
        )

    def _build_parts(self, accelerator: Any, plan: DataPlan) -> Parts:
        """Model, loss, training method (+ EMA teacher), AdamW and the LR schedule, prepared by Accelerate."""
        from ..models import build_model

        cfg = self.cfg
        model = build_model(**model_spec(cfg))
        loss_fn = build_loss(cfg.loss.name, **cfg.loss.params).to(accelerator.device)
        loss_fn.quiet_solver = True  # non-convergence is counted and reported by _log_step / _report_solver
        loss_fn.check_finite = False  # NaN / Inf: flagged on the device (_flag_nonfinite), read on logging steps
        gathered = loss_fn.gather_across_processes and plan.world > 1
        method = build_method(cfg, model, loss_fn, accelerator.device)
        step_module = EmbedStep(model, method.step_output)
        loss_params = [p for p in loss_fn.parameters() if p.requires_grad]  # e.g. a learnable logit scale
        optimizer = (
            torch.optim.AdamW(  # on CUDA the fused kernel: a few launches per step instead of one per op and group
                [*param_groups(model, cfg.optim), {"params": loss_params, "weight_decay": 0.0}],
                lr=cfg.optim.lr,
                betas=cfg.optim.betas,
                weight_decay=cfg.optim.weight_decay,
                fused=True if accelerator.device.type == "cuda" else None,
            )
        )
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lr_lambda(cfg.optim.warmup_steps, plan.total_steps, cfg.optim.min_lr_ratio)
        )
        step_module, optimizer = accelerator.prepare(step_module, optimizer)
        # scheduler / teacher go into the checkpoint as weights-only files (checkpoint.py), the loss
        # module (learnable temperature, warm-start potentials) as loss_state_<rank>.pt
        return Parts(step_module, loss_fn, method, optimizer, scheduler, gathered)

    def _start_or_resume(self, accelerator: Any, parts: Parts, plan: DataPlan) -> Position:
        """Restore the newest checkpoint (``--resume``) or write the new run folder's first files."""
        at = Position()
        if self.resume is not None and not self._restart_from_zero:
            ckpt = resolve_resume(self.run_dir, self.resume)
            differences = check_run_input(
                self.run_dir,
                plan.adapter,
                accept=self.accept_config_changes,
                accept_hint="pass --accept-config-changes to resume on it anyway",
            )
            if differences:  # the cache under the run's data.options.cache was re-prepared since
                self._note(format_input_differences(differences))
            state = load_checkpoint(accelerator, ckpt, parts.loss_fn, self._extra_states(parts))
            at = Position(int(state["step"]), int(state["epoch"]), int(state["batch_position"]))
            self._prior_train_s = state.get("train_time_s") if at.step else 0.0
            if at.step > plan.total_steps:
                raise ValueError(
                    f"--resume: checkpoint {ckpt} is at step {at.step}, beyond the run's {plan.total_steps} steps "
                    "(train.max_steps / train.epochs)"
                )
            if plan.streaming:
                self._stream_positions = self._restore_stream(state, ckpt, accelerator.process_index, plan)
                at.epoch, at.position = 0, int(state["stream"]["micro_batches"])  # one endless pass
            self._note(f"resumed from {ckpt} (step {at.step}, epoch {at.epoch}, micro-batch {at.position})")
            if state["loss_state"] == "missing":
                self._note(f"{ckpt} holds no loss state (older checkpoint): the loss starts from its initial state")
            self._record_config_changes(accelerator, at.step)
            if at.step < plan.total_steps and accelerator.is_main_process:
                kept = keep_previous_final(self.run_dir)  # a finished model is never overwritten
                if kept is not None:
                    self._note(f"the finished model is kept in {kept}/; training continues to step {plan.total_steps}")
        elif accelerator.is_main_process:
            if self._restart_from_zero:
                self._record_config_changes(accelerator, 0)
            self.run_dir.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.run_dir / "config.yaml", dump_config(self.cfg))
            atomic_write_json(self.run_dir / "model.json", model_spec(self.cfg))
            save_weights(accelerator.unwrap_model(parts.step_module).model, self.run_dir / "init.safetensors")
            write_run_contract(self.run_dir, self.cfg, plan.adapter, plan.policy)  # EEG: channels, rate, band, ...
        accelerator.wait_for_everyone()
        return at

    def _stream_layout(self, plan: DataPlan) -> dict[str, int]:
        """What a streamed split's recorded positions depend on (must match on resume)."""
        return {"world": plan.world, "num_workers": self.cfg.train.num_workers, "items": plan.items}

    def _restore_stream(
        self, state: dict[str, Any], ckpt: Path, rank: int, plan: DataPlan
    ) -> dict[int, StreamPosition]:
        """This process's worker positions from a checkpoint of a streamed run; a different layout
        (processes, DataLoader workers, items per micro-batch) cannot continue exactly: an error."""
        stream = state.get("stream")
        if not isinstance(stream, dict) or not {"positions", "micro_batches"} <= set(stream):
            raise ValueError(
                f"{ckpt}: no stream positions in {ckpt / 'trainer_state.json'} (not a streamed run's checkpoint); "
                "a streamed train split can only resume from its own checkpoints"
            )
        recorded = {key: stream.get(key) for key in self._stream_layout(plan)}
        if recorded != self._stream_layout(plan):
            raise ValueError(
                f"{ckpt}: the stream positions were recorded with {recorded}, this run has {self._stream_layout(plan)}; "
                "resume a streamed run with the same processes, train.num_workers and batch size"
            )
        return {int(w): StreamPosition(int(e), int(o)) for w, (e, o) in enumerate(stream["positions"][rank])}

    def _record_config_changes(self, accelerator: Any, step: int) -> None:
        """Accepted config changes of a resume -> ``config_history.jsonl`` + ``config.yaml`` (main process)."""
        reconcile_resume_config(
            self.run_dir,
            self.cfg,
            accept_changes=self.accept_config_changes,
            step=step,
            write=accelerator.is_main_process,
        )

    # ------------------------------------------------------------------ main loop
    def fit(self) -> TrainResult:
        """Train to ``train.max_steps`` / ``train.epochs``; write the run folder; return a summary."""
        accelerator = self._make_accelerator()
        lock = RunLock(self.run_dir) if accelerator.is_main_process else None
        if lock is not None:
            lock.acquire()
        try:
            self._check_run_dir()
            if self._finished_already():
                return self._finished_result(accelerator.is_main_process)
            plan = self._plan_data(accelerator.num_processes)
            parts = self._build_parts(accelerator, plan)
            at = self._start_or_resume(accelerator, parts, plan)
            start_step = at.step
            accelerator.init_trackers("tb")
            self._process_start = time.perf_counter()
            last_loss = self._run_epochs(accelerator, plan, parts, at)
            wall = time.perf_counter() - self._process_start
            self._save_checkpoint(accelerator, plan, parts, at)  # the final state: extending the run starts here
            evaluation, reports = self._finish(accelerator, parts, at.step)
        finally:
            if lock is not None:
                lock.release()
        return TrainResult(
            self.run_dir,
            at.step,
            last_loss,
            wall,
            (at.step - start_step) * plan.items_per_step / max(wall, 1e-12),
            evaluation,
            self.notes,
            accelerator.is_main_process,
            reports,
            start_step=start_step,
            run_time_s=None if self._prior_train_s is None else self._prior_train_s + wall,
        )

    def _run_epochs(self, accelerator: Any, plan: DataPlan, parts: Parts, at: Position) -> float:
        """Optimizer steps from ``at`` to ``plan.total_steps`` (``at`` is advanced in place);
        returns the last step's loss."""
        from ..console import progress

        cfg, tcfg = self.cfg, self.cfg.train
        device, main, rank = accelerator.device, accelerator.is_main_process, accelerator.process_index
        resumed = self.resume is not None and not self._restart_from_zero
        metrics = MetricsLog(self.run_dir / "metrics.jsonl", resume_step=at.step if resumed else None) if main else None
        bar = progress(
            total=plan.total_steps, initial=at.step, disable=not main, desc=f"train {cfg.output.name}", unit="step"
        )
        timer = StepTimer(device)
        window = {"steps": 0, "start": time.perf_counter(), "data_build_s": 0.0}
        last_loss: torch.Tensor | None = None  # on the device; read back on logging steps and at the end
        loader_gen = torch.Generator()  # keeps DataLoader seeding off the global RNG (resume-exact)
        model = accelerator.unwrap_model(parts.step_module).model
        # a policy whose views depend on the model (e.g. nearest-neighbour target views) gets the model and
        # builds each micro-batch's views synchronously, with the weights of the step they feed
        uses_model = bool(plan.policy.uses_model)
        if uses_model:
            plan.policy.bind_model(model)

        stop = StopRequest().__enter__()
        try:
            while at.step < plan.total_steps:
                batches = self._view_stream(plan, at, rank, device, loader_gen, uses_model)
                try:
                    while at.step < plan.total_steps and at.position < plan.micro_per_epoch:
                        last_loss, stats = self._optimizer_step(
                            batches, at.step, accelerator, parts, timer, plan.total_steps
                        )
                        at.step += 1
                        at.position += tcfg.grad_accum
                        self._stream_positions = dict(batches.positions)
                        window["steps"] += 1
                        window["data_build_s"] += batches.pop_build_seconds()
                        bar.update(1)
                        record = self._log_step(accelerator, plan, parts, at, last_loss, stats, timer, window, metrics)
                        if record is not None:
                            bar.set_postfix(loss=f"{record['loss']:.4f}")
                        self._maybe_checkpoint(accelerator, plan, parts, at)
                        self._notify_step_end(StepEvent(at.step, plan.total_steps, record, model, self.run_dir, main))
                        self._stop_if_requested(accelerator, plan, parts, at, stop)
                finally:
                    batches.close()
                if at.position >= plan.micro_per_epoch:
                    at.epoch, at.position = at.epoch + 1, 0
        finally:
            stop.__exit__()
            bar.close()
            if metrics is not None:
                metrics.close()
        self._raise_if_diverged(accelerator)
        self._report_solver(parts.loss_fn)
        return float("nan") if last_loss is None else float(host_values({"loss": last_loss})["loss"])

    def _view_stream(
        self,
        plan: DataPlan,
        at: Position,
        rank: int,
        device: torch.device,
        loader_gen: torch.Generator,
        uses_model: bool,
    ) -> ViewStream:
        """The epoch's micro-batches of views from ``at`` on; view randomness is seeded per (micro-batch, rank)."""
        tcfg = self.cfg.train

        def view_seed(micro_index: int) -> int:
            return (tcfg.seed * 1_000_003 + micro_index) * 4_096 + rank

        loader = self._train_loader(plan, at, rank, device, loader_gen)
        prefetch = self._prefetch_views(uses_model)
        return ViewStream(
            loader, plan.policy, device, view_seed, at.step * tcfg.grad_accum, prefetch, self._stream_positions
        )

    def _notify_step_end(self, event: StepEvent) -> None:
        """Every callback's ``on_step_end`` after an optimizer step."""
        for callback in self.callbacks:
            callback.on_step_end(event)

    def _prefetch_views(self, uses_model: bool) -> bool:
        """Build views one micro-batch ahead in a thread? Not when the policy reads the model (views
        must see the step's weights) and not under ``train.deterministic``: the view thread and the step
        share torch's intra-op threads, which can change how a reduction is split (observed: two
        2-process runs differing in the 7th digit), so deterministic runs build views in the step."""
        tcfg = self.cfg.train
        return tcfg.prefetch_views and not uses_model and not tcfg.deterministic

    def _train_loader(
        self, plan: DataPlan, at: Position, rank: int, device: torch.device, generator: torch.Generator
    ) -> DataLoader:
        """The DataLoader of this epoch from micro-batch ``at.position``: a seeded epoch permutation
        (:class:`EpochBatchSampler`), or for a streamed split each worker's own batches from its
        recorded position."""
        tcfg = self.cfg.train
        common = {
            "num_workers": tcfg.num_workers,
            "collate_fn": default_collate,
            "generator": generator,
            "pin_memory": device.type == "cuda",
            "worker_init_fn": ignore_sigint if tcfg.num_workers else None,
        }
        if plan.streaming:
            plan.train_set.resume_from(self._stream_positions, at.position)  # type: ignore[attr-defined]
            return DataLoader(plan.train_set, batch_size=plan.items, drop_last=True, **common)
        set_dataset_epoch(plan.train_set, at.epoch)
        sampler = EpochBatchSampler(
            plan.n_items,
            plan.items,
            plan.micro_per_epoch,
            tcfg.seed,
            at.epoch,
            rank,
            plan.world,
            at.position,
            getattr(plan.train_set, "batch_groups", None),
        )
        return DataLoader(plan.train_set, batch_sampler=sampler, **common)

    def _stop_if_requested(
        self, accelerator: Any, plan: DataPlan, parts: Parts, at: Position, stop: StopRequest
    ) -> None:
        """After a SIGINT / SIGTERM (on any process): checkpoint this step and raise
        :class:`TrainingInterrupted` naming the resume command (nothing to do after the last step)."""
        requested = float(stop.signum or 0)
        if world_size() > 1:
            flag = torch.tensor([requested], device=accelerator.device)
            requested = float(accelerator.reduce(flag, reduction="sum").max())
        if not requested or at.step >= plan.total_steps:
            return
        ckpt = self._save_checkpoint(accelerator, plan, parts, at)
        signum = int(stop.signum or signal.SIGTERM)
        raise TrainingInterrupted(
            f"interrupted ({signal.Signals(signum).name}) after step {at.step} of {plan.total_steps}; checkpoint "
            f"{ckpt}; resume with: mvapp train --resume {self.run_dir}",
            signum,
        )

    def _is_log_step(self, step: int, total_steps: int) -> bool:
        """Whether optimizer step ``step`` (1-based) writes a metrics row."""
        return step % self.cfg.train.log_every == 0 or step == total_steps

    def _log_step(
        self,
        accelerator: Any,
        plan: DataPlan,
        parts: Parts,
        at: Position,
        loss_value: torch.Tensor,
        stats: dict[str, Any],
        timer: StepTimer,
        window: dict[str, Any],
        metrics: MetricsLog | None,
    ) -> dict[str, Any] | None:
        """Every ``train.log_every`` steps (and the last): one metrics row to TensorBoard and metrics.jsonl.
        The step's device values (loss, ``stats``) are read back here, in one copy; nothing is read on
        the other steps."""
        if not self._is_log_step(at.step, plan.total_steps):
            return None
        now = time.perf_counter()
        phases, timed_steps = timer.pop()
        step_time = sum(phases.values()) or 1e-12
        epoch = min((p.epoch for p in self._stream_positions.values()), default=0) if plan.streaming else at.epoch
        values = host_values({"loss": loss_value, **{f"stats/{k}": v for k, v in stats.items()}})
        record = {
            "step": at.step,
            "epoch": epoch,
            "loss": values.pop("loss"),
            "lr": float(parts.scheduler.get_last_lr()[0]),
            **values,
            "items_per_s": window["steps"] * plan.items_per_step / max(now - window["start"], 1e-12),
            **{f"time/{p}": phases[p] / step_time for p in phases},
            "step_time_s": step_time / max(timed_steps, 1),
            "data_build_s": window["data_build_s"] / window["steps"],
            **self._diagnostics,
            **self._solver_window(parts.loss_fn, at.step),
        }
        self._diagnostics = {}
        event = StepEvent(
            at.step,
            plan.total_steps,
            None,
            accelerator.unwrap_model(parts.step_module).model,
            self.run_dir,
            accelerator.is_main_process,
        )
        probe_start = time.perf_counter()
        for callback in self.callbacks:  # e.g. the kNN monitor
            record.update(callback.on_log_step(event) or {})
        probe_s = time.perf_counter() - probe_start  # not training time: left out of the next items_per_s
        window["steps"], window["start"], window["data_build_s"] = 0, now + probe_s, 0.0
        accelerator.log(record, step=at.step)
        if metrics is not None:
            metrics.write(record)
        return record

    def _solver_window(self, loss_fn: nn.Module, step: int) -> dict[str, int]:
        """``solver/solves`` and ``solver/unconverged`` of the loss's iterative solver since the last
        logged step (nothing when the loss has no solver); the first unconverged solve of the run is
        announced once (:meth:`_report`), the totals come at the end (:meth:`_report_solver`)."""
        tally = getattr(loss_fn, "solver_tally", None)
        if tally is None:
            return {}
        solves, unconverged = tally.pop_window()
        if unconverged and not self._solver_announced:
            self._solver_announced = True
            self._report(
                f"{tally.solver}: {tally.unconverged} of {tally.solves} solves up to step {step} did not converge "
                f"({tally.limits}); their gradients are approximate. Counted per logged step in "
                "metrics.jsonl (solver/unconverged); totals at the end of the run"
            )
        return {"solver/solves": solves, "solver/unconverged": unconverged}

    def _report_solver(self, loss_fn: nn.Module) -> None:
        """Once, at the end: how many of this process's solves did not converge (nothing if all did)."""
        tally = getattr(loss_fn, "solver_tally", None)
        summary = tally.summary() if tally is not None else None
        if summary:
            self._report(f"{summary}; their gradients are approximate: raise loss.max_iter or loss.epsilon")

    def _report(self, message: str) -> None:
        """A note during training: kept in the notes, logged (``multiview_app`` logger) and printed
        above the progress bar (main process)."""
        from ..console import write

        self.notes.append(message)
        logging.getLogger("multiview_app").info(message)
        if self._main:
            write(f"note: {message}")

    def _maybe_checkpoint(self, accelerator: Any, plan: DataPlan, parts: Parts, at: Position) -> None:
        """Every ``train.checkpoint_every`` steps (not after the last): see :meth:`_save_checkpoint`."""
        tcfg = self.cfg.train
        if not tcfg.checkpoint_every or at.step % tcfg.checkpoint_every != 0 or at.step >= plan.total_steps:
            return
        self._save_checkpoint(accelerator, plan, parts, at)

    def _save_checkpoint(self, accelerator: Any, plan: DataPlan, parts: Parts, at: Position) -> Path:
        """An atomic checkpoint (model, optimizer, schedule, teacher, RNG, loss state) that records where
        the next micro-batch starts; never of a diverged run (checked first)."""
        self._raise_if_diverged(accelerator)
        tcfg = self.cfg.train
        ep, pos = (at.epoch, at.position) if at.position < plan.micro_per_epoch else (at.epoch + 1, 0)
        state: dict[str, Any] = {
            "step": at.step,
            "epoch": ep,
            "batch_position": pos,
            "total_steps": plan.total_steps,
            "train_time_s": self._train_time_s(),
            "data_rng": {
                "seed": tcfg.seed,
                "permutation": "randperm(seed*1000003+epoch)",
                "views": "seed per (global micro-batch index, rank)",
            },
        }
        if plan.streaming:
            state["data_rng"]["permutation"] = (
                "streamed: shard order and shuffle buffers seeded by (seed, epoch, rank, worker)"
            )
            state["stream"] = self._stream_layout(plan) | {
                "micro_batches": at.step * tcfg.grad_accum,
                "positions": self._gather_stream_positions(accelerator),
            }
        return save_checkpoint(
            accelerator,
            self.run_dir,
            at.step,
            state,
            tcfg.keep_checkpoints,
            parts.loss_fn,
            self._extra_states(parts),
        )

    def _train_time_s(self) -> float | None:
        """Training seconds of the run up to now: earlier processes' (from the resumed checkpoint) plus this
        process's since its training started; None when the resumed checkpoint did not record its time."""
        if self._prior_train_s is None:
            return None
        return round(self._prior_train_s + time.perf_counter() - self._process_start, 3)

    def _gather_stream_positions(self, accelerator: Any) -> list[list[list[int]]]:
        """``[rank][worker] = [epoch, offset]`` of every process's DataLoader workers (all processes call it)."""
        workers = max(1, self.cfg.train.num_workers)
        local = torch.tensor(
            [[p.epoch, p.offset] for p in (self._stream_positions.get(w, StreamPosition()) for w in range(workers))],
            dtype=torch.int64,
            device=accelerator.device,
        )
        gathered = accelerator.gather(local) if world_size() > 1 else local
        return gathered.view(-1, workers, 2).tolist()

    @staticmethod
    def _extra_states(parts: Parts) -> dict[str, Any]:
        """Stateful training objects besides model / optimizer / loss, by checkpoint file name."""
        return {"lr_schedule": parts.scheduler, **parts.method.states()}

    def _finish(self, accelerator: Any, parts: Parts, step: int) -> tuple[dict[str, Any] | None, list[str]]:
        """Final weights, model.json and curves (main process), then the callbacks' end hooks;
        returns their results by callback name (None when there are none) and their console reports."""
        accelerator.wait_for_everyone()
        main = accelerator.is_main_process
        if main:
            save_weights(
                accelerator.unwrap_model(parts.step_module).model,
                self.run_dir / "model.safetensors",
                metadata={"step": str(step)},
            )
            atomic_write_json(self.run_dir / "model.json", model_spec(self.cfg))
            if self.cfg.output.curves:
                plot_curves(self.run_dir / "metrics.jsonl", self.run_dir / "curves.png")
            write_diagnostics_summary(self.run_dir)
        results: dict[str, Any] = {}
        reports: list[str] = []
        for callback in self.callbacks:
            result = callback.on_train_end(self.run_dir, main)
            if result is not None:
                results[callback.name] = result
                text = callback.report(result)
                if text:
                    reports.append(text)
        accelerator.wait_for_everyone()
        accelerator.end_training()  # last: it may tear down the process group
        return results or None, reports

    # ------------------------------------------------------------------ one optimizer step
    def _optimizer_step(
        self,
        batches: ViewStream,
        step: int,
        accelerator: Any,
        parts: Parts,
        timer: StepTimer,
        total_steps: int,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """``grad_accum`` micro-batches -> one AdamW step -> the method's update (EMA); returns (loss,
        averaged stats), kept as float64 device tensors (Python floats stay floats): nothing is read back to
        the host here except on a logging step (divergence check, diagnostics, the timer's synchronizations)."""
        cfg, step_module = self.cfg, parts.step_module
        accum = cfg.train.grad_accum
        scale = gradient_scale(parts.gathered) / accum
        log_step = self._is_log_step(step + 1, total_steps)
        loss_sum: torch.Tensor | None = None
        stats_sum: dict[str, Any] = {}
        timer.start(timed=log_step)
        for micro in range(accum):
            batch = next(batches)
            timer.mark("data")
            ctx = accelerator.no_sync(step_module) if micro < accum - 1 else nullcontext()
            with ctx:
                with accelerator.autocast():
                    out = parts.method.forward(step_module, batch)
                timer.mark("forward")
                loss, stats = self._loss(out, parts, step, accelerator, log_step)
                timer.mark("loss")
                accelerator.backward(loss * scale)
                timer.mark("backward")
            loss64 = as_float64(loss)
            loss_sum = loss64 if loss_sum is None else loss_sum + loss64
            for key, value in stats.items():
                stats_sum[key] = stats_sum.get(key, 0.0) + as_float64(value) / accum
        sync_loss_gradients(parts.loss_fn, parts.gathered)
        if log_step:
            self._raise_if_diverged(accelerator)  # before the diagnostics read the embeddings
            if cfg.train.diagnostics:
                self._diagnostics = step_diagnostics(out.online, parts.loss_fn, step_module.parameters())
                timer.skip()  # reported as diag/time_s, not charged to a phase
        if cfg.optim.grad_clip is not None:
            norm = accelerator.clip_grad_norm_(step_module.parameters(), cfg.optim.grad_clip)
            stats_sum["grad_norm"] = as_float64(norm)
        parts.optimizer.step()
        parts.scheduler.step()
        parts.optimizer.zero_grad(set_to_none=True)
        stats_sum.update(parts.method.after_step(accelerator.unwrap_model(step_module).model, step, total_steps))
        timer.mark("optim")
        assert loss_sum is not None  # accum >= 1
        return loss_sum / accum, stats_sum

    def _loss(
        self, out: StepOutputs, parts: Parts, step: int, accelerator: Any, log_step: bool = False
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """The method's loss of one micro-batch's outputs (gathered across processes with gradient when
        the loss asks for it); the online embeddings and the loss are flagged when not finite."""
        self._flag_nonfinite(out.online, step, "embeddings")
        if out.labels is not None and parts.gathered:
            raise ValueError("a loss that uses labels runs on one process")
        gather = gather_with_grad if parts.gathered else (lambda z: z)

        def call(loss_fn: nn.Module, *tensors: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
            return self._call_loss(loss_fn, accelerator, *tensors, labels=labels)

        loss, stats = parts.method.loss(out, parts.loss_fn, call, gather, log_step)
        self._flag_nonfinite(loss, step, "loss")
        return loss, stats

    def _call_loss(
        self, loss_fn: nn.Module, accelerator: Any, *tensors: torch.Tensor, labels: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``loss_fn(*tensors)`` (``loss_fn(*tensors, labels=labels)`` with labels); a loss that refuses
        non-finite embeddings (``ValueError``) after the trainer flagged a non-finite value raises
        :class:`TrainingDivergedError` naming that step instead."""
        try:
            return loss_fn(*tensors) if labels is None else loss_fn(*tensors, labels=labels)
        except ValueError:
            self._raise_if_diverged(accelerator, collective=False)
            raise

    def _flag_nonfinite(self, value: torch.Tensor, step: int, what: str) -> None:
        """Record on the device, without reading anything back, whether ``value`` (of optimizer step
        ``step``, 0-based) has NaN/Inf: ``self._first_nonfinite`` keeps the code
        ``(step + 1) * len(NONFINITE_CHECKS) + NONFINITE_CHECKS.index(what)`` of the first one (0: none).
        :meth:`_raise_if_diverged` reads it on logging steps, before checkpoints and at the end."""
        code = (step + 1) * len(NONFINITE_CHECKS) + NONFINITE_CHECKS.index(what)
        flag = self._first_nonfinite
        if flag is None or flag.device != value.device:
            flag = torch.zeros((), dtype=torch.int64, device=value.device)
        bad = ~torch.isfinite(value.detach()).all()
        self._first_nonfinite = torch.where(bad & (flag == 0), code, flag)

    def _raise_if_diverged(self, accelerator: Any, collective: bool = True) -> None:
        """Raise :class:`TrainingDivergedError` naming the first step whose embeddings or loss were
        NaN/Inf on any process (one host read; with several processes an all-reduce of the earliest,
        which every process must join unless ``collective`` is false)."""
        flag = self._first_nonfinite
        if flag is None:
            return
        if collective and world_size() > 1:
            none = torch.iinfo(torch.int64).max
            flag = torch.where(flag == 0, none, flag)
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MIN)
            flag = torch.where(flag == none, 0, flag)
        code = int(flag.item())
        if code:
            step, what = divmod(code, len(NONFINITE_CHECKS))
            last = latest_checkpoint(self.run_dir)
            raise TrainingDivergedError(
                f"step {step}: {NONFINITE_CHECKS[what]} became NaN/Inf; training stopped. Last good checkpoint: "
                f"{last if last else 'none (set train.checkpoint_every)'}; lower optim.lr or enable "
                "optim.grad_clip, then resume with --resume latest"
            )


def train(
    cfg: Config,
    *,
    resume: str | None = None,
    callbacks: Sequence[TrainCallback | StepCallback] = (),
    accept_config_changes: bool = False,
) -> TrainResult:
    """Train ``cfg`` (see :class:`Trainer`)."""
    return Trainer(cfg, resume=resume, callbacks=callbacks, accept_config_changes=accept_config_changes).fit()
