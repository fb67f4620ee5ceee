"""Streamed (iterable) train splits: the contract between a streaming dataset and the trainer.

A :class:`StreamingDataset` is an endless ``IterableDataset`` that splits its source over processes
and DataLoader workers itself and tags every item with :data:`STREAM_KEYS` (worker id, the
worker's epoch, the item's offset in that epoch). The trainer batches each worker's items
(``batch_size = items``; PyTorch's DataLoader takes batches from the workers in turn), records the
:class:`StreamPosition` of every worker after each consumed micro-batch, stores them in its
checkpoints and hands them back, with the number of micro-batches consumed, through
:meth:`StreamingDataset.resume_from`.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch.utils.data import IterableDataset

#: Keys a streaming dataset adds to every item (where it is in its worker's stream).
STREAM_KEYS: tuple[str, ...] = ("stream_worker", "stream_epoch", "stream_offset")


@dataclass(frozen=True)
class StreamPosition:
    """Where one DataLoader worker of one process is: ``offset`` items of ``epoch`` already consumed."""

    epoch: int = 0
    offset: int = 0


class StreamingDataset(IterableDataset):
    """Base of streamed train splits (see module docstring). ``seed`` seeds shard order and shuffling
    (the trainer sets it to ``train.seed``); ``epochs`` = passes (None: endless)."""

    seed: int = 0
    epochs: int | None = None

    def check_workers(self, num_workers: int) -> None:
        """Raise ``ValueError`` when ``num_workers`` DataLoader workers per process cannot all be fed."""

    def resume_from(self, positions: dict[int, StreamPosition], batches_done: int = 0) -> None:
        """Start worker ``w`` at ``positions[w]`` (workers not listed start at epoch 0, offset 0).

        Workers are logical: the DataLoader takes batch ``j`` from its worker process ``j % W``,
        and a fresh DataLoader starts with process 0, so after ``batches_done`` batches process ``i``
        plays logical worker ``(i + batches_done) % W``; batch ``j`` of the whole run always comes
        from logical worker ``j % W``."""
        raise NotImplementedError


__all__ = ["STREAM_KEYS", "StreamPosition", "StreamingDataset"]
