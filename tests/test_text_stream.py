"""Streaming tar shards into training: per-process / per-worker shard split (2 gloo processes),
shuffle buffer, exact resume of the stream position, and a short streamed training run that resumes
exactly (``pairs_wds`` with ``stream: true``)."""

from __future__ import annotations

import datetime
import json
import os
import tempfile
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from _text_helpers import write_pair_shards
from _train_helpers import assert_same_weights, crash_then_resume
from torch.utils.data import DataLoader, default_collate

from multiview_app.data.streaming import StreamPosition
from multiview_app.data.text.shards import ShardPairStream

SAMPLES, PER_SHARD, WORLD = 60, 10, 2


def _keys(batch: dict) -> list[str]:
    return [s.rsplit(":", 1)[1] for s in batch["source"]]


def _positions_after(batches: list[dict]) -> dict[int, StreamPosition]:
    """What the trainer records: per worker, (epoch, offset + 1) of the last item of its last batch."""
    out = {}
    for b in batches:
        out[int(b["stream_worker"][-1])] = StreamPosition(int(b["stream_epoch"][-1]), int(b["stream_offset"][-1]) + 1)
    return out


def test_stream_covers_each_sample_once_per_worker_epoch_and_resumes_exactly(tmp_path: Path) -> None:
    paths = [str(p) for p in write_pair_shards(tmp_path / "shards", SAMPLES, PER_SHARD)]

    def loader(stream: ShardPairStream) -> DataLoader:
        return DataLoader(stream, batch_size=4, drop_last=True, num_workers=2, collate_fn=default_collate)

    def stream() -> ShardPairStream:
        return ShardPairStream(paths, 16, rank=0, world=1, seed=3, shuffle_shards=True, shuffle_buffer=7, epochs=None)

    it = iter(loader(stream()))
    batches = [next(it) for _ in range(20)]  # 10 batches = 40 items per worker: past its 30-sample epoch
    del it
    by_epoch: dict[int, list[str]] = {}
    for b in batches:
        for key, epoch in zip(_keys(b), b["stream_epoch"].tolist()):
            by_epoch.setdefault(epoch, []).append(key)
    assert sorted(by_epoch[0]) == [f"d{i:04d}" for i in range(SAMPLES)]  # every sample once in epoch 0
    assert len(set(by_epoch[1])) == len(by_epoch[1]) == 20  # epoch 1 started, no repeats
    assert by_epoch[0][:12] != sorted(by_epoch[0][:12])  # the buffer shuffles
    # a stream resumed from the position after 9 batches yields exactly batches 9..19
    resumed = stream()
    resumed.resume_from(_positions_after(batches[:9]), batches_done=9)
    it = iter(loader(resumed))
    again = [next(it) for _ in range(11)]
    del it
    assert [_keys(b) for b in again] == [_keys(b) for b in batches[9:]]
    torch.testing.assert_close(again[-1]["x"], batches[-1]["x"])
    with pytest.raises(ValueError, match="6 shards for 2 process\\(es\\) x 4 DataLoader worker"):
        ShardPairStream(paths, 16, rank=0, world=2).check_workers(4)
    from multiview_app.data.adapters import build_adapter

    with pytest.raises(ValueError, match="stream: true needs test_shards"):
        build_adapter("pairs_wds", {"shards": paths, "stream": True, "load_size": 16})
    adapter = build_adapter(
        "pairs_wds", {"shards": paths[:5], "test_shards": paths[5], "stream": True, "load_size": 16}
    )
    assert isinstance(adapter.split("train"), ShardPairStream) and len(adapter.split("test")) == PER_SHARD


def _worker(rank: int, tmp: str, paths: list[str]) -> None:
    """One gloo process: two epochs of its stream through 2 DataLoader workers -> ``seen_<rank>.json``."""
    dist.init_process_group(
        "gloo",
        init_method=f"file://{os.path.join(tmp, 'store')}",
        rank=rank,
        world_size=WORLD,
        timeout=datetime.timedelta(seconds=120),
    )
    try:
        dist.barrier()
        stream = ShardPairStream(
            paths, 16, seed=5, shuffle_shards=True, shuffle_buffer=4, epochs=2
        )  # rank from the group
        seen = {"rank": stream.rank, "world": stream.world, "items": [], "shards": {}}
        # fork: a process started by mp.spawn would otherwise spawn its DataLoader workers too (each
        # re-importing torch and this module, ~25 s more on a loaded 2-core machine)
        for batch in DataLoader(
            stream, batch_size=5, num_workers=2, collate_fn=default_collate, multiprocessing_context="fork"
        ):
            seen["items"] += [[e, k] for e, k in zip(batch["stream_epoch"].tolist(), _keys(batch))]
        for epoch in range(2):
            seen["shards"][str(epoch)] = [p for w in range(2) for p in stream.epoch_shards(epoch, w, 2)]
        Path(tmp, f"seen_{rank}.json").write_text(json.dumps(seen))
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_gloo_processes_read_disjoint_shards_covering_every_sample_once_per_epoch(tmp_path: Path) -> None:
    paths = [str(p) for p in write_pair_shards(tmp_path / "shards", SAMPLES, PER_SHARD)]
    saved = os.environ.get("GLOO_SOCKET_IFNAME")
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            mp.spawn(_worker, args=(tmp, paths), nprocs=WORLD, join=True)
            seen = [json.loads(Path(tmp, f"seen_{r}.json").read_text()) for r in range(WORLD)]
    finally:
        if saved is None:
            os.environ.pop("GLOO_SOCKET_IFNAME", None)
        else:
            os.environ["GLOO_SOCKET_IFNAME"] = saved
    assert [(s["rank"], s["world"]) for s in seen] == [(0, 2), (1, 2)]
    for epoch in (0, 1):
        shards = [set(s["shards"][str(epoch)]) for s in seen]
        assert not shards[0] & shards[1] and shards[0] | shards[1] == set(paths)
        keys = [[k for e, k in s["items"] if e == epoch] for s in seen]
        assert not set(keys[0]) & set(keys[1])
        assert sorted(keys[0] + keys[1]) == [f"d{i:04d}" for i in range(SAMPLES)]
    assert seen[0]["shards"]["0"] != seen[0]["shards"]["1"]  # shard order reshuffled per epoch


def _stream_config(tmp_path: Path, name: str, shards: Path, **train: object):
    from _train_helpers import tiny_config
    from test_text_models import TINY_TEXT

    return tiny_config(
        tmp_path,
        name,
        data={
            "adapter": "pairs_wds",
            "options": {
                "shards": str(shards / "t-00000[0-4].tar"),
                "test_shards": str(shards / "t-000005.tar"),
                "stream": True,
                "shuffle_buffer": 8,
                "load_size": 16,
            },
        },
        views={
            "policy": "pairs",
            "k": 2,
            "options": {"text_views": 1, "image_size": 16, "context_length": 12, "stacks": "simclr"},
        },
        model={
            "encoders": {"image": {"name": "small_cnn", "width": 8, "num_features": 16}, "text": TINY_TEXT},
            "projector": {"hidden_dim": 32, "out_dim": 16},
        },
        loss={"name": "infonce_pwe", "tau": 0.1},
        train={"max_steps": 6, "batch_size": 8, "checkpoint_every": 3, "num_workers": 2, **train},
    )


@pytest.mark.slow
def test_streamed_training_runs_end_to_end_and_resumes_exactly(tmp_path: Path) -> None:
    from multiview_app.train.checkpoint import read_trainer_state
    from multiview_app.train.trainer import train

    shards = tmp_path / "shards"
    write_pair_shards(shards, SAMPLES, PER_SHARD)  # 5 train shards (50 samples) + 1 test shard
    full = train(_stream_config(tmp_path, "full", shards))  # 6 steps x 8 items: worker epochs of 20 / 30 items pass
    state = read_trainer_state(full.run_dir / "checkpoints" / "step_00000003")
    assert (
        state["stream"]["world"] == 1 and state["stream"]["num_workers"] == 2 and state["stream"]["micro_batches"] == 3
    )
    assert state["stream"]["positions"] == [[[0, 16], [0, 8]]]  # worker 0: batches 0, 2 (+ 4 ...); worker 1: batch 1

    cfg = _stream_config(tmp_path, "crashed", shards)
    resumed = crash_then_resume(cfg, 4)
    assert_same_weights(full.run_dir, resumed.run_dir)
    from multiview_app.export.export import export_embeddings

    with pytest.raises(ValueError, match="streamed"):  # an endless split is refused, not iterated forever
        export_embeddings(full.run_dir, tmp_path / "export", split="all", features="projector", progress=False)
    with pytest.raises(ValueError, match="set train.max_steps"):
        train(_stream_config(tmp_path, "epochs", shards, max_steps=None, epochs=1))
    with pytest.raises(ValueError, match="recorded with"):
        train(
            _stream_config(tmp_path, "crashed", shards, num_workers=1, max_steps=8),
            resume="latest",
            accept_config_changes=True,
        )
