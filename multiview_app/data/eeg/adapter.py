"""``eeg_windows`` adapter: items from a prepared window cache, subject-wise train/test split."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import Field, model_validator
from torch.utils.data import Dataset

from ..adapters import ADAPTERS, AdapterOptions, DataAdapter
from .cache import load_manifest
from .contract import EEGInputContract, check_input, contract_for
from .stages import EPOCH_SECONDS, STAGES


def window_meta(record: dict[str, Any], index: int, labels: np.ndarray, epochs: np.ndarray) -> dict[str, Any]:
    """The label and metadata of item ``index`` (a window of the manifest ``record``): label, index, subject,
    recording, window (its epoch in the night) and onset in seconds; shared by every window dataset."""
    return {
        "label": int(labels[index]),
        "index": int(index),
        "subject": record["subject"],
        "recording": record["recording"],
        "window": int(epochs[index]),
        "onset": float(epochs[index] * EPOCH_SECONDS),
    }


class WindowDataset(Dataset):
    """Windows of some recordings of a cache. Item: ``{"x": (c, T) float32, "label", "index",
    "subject", "recording", "window", "onset"}`` where ``window`` is the epoch index in its night and
    ``onset`` its start in seconds from the recording start.

    Memory maps are opened lazily per process (DataLoader workers each open their own).
    """

    def __init__(self, cache_dir: Path, recordings: list[dict], channel_index: list[int]) -> None:
        self.cache_dir = cache_dir
        self.recordings = recordings
        self.channel_index = np.asarray(channel_index)
        self._all_channels = channel_index == list(range(len(channel_index)))
        counts = np.array([r["n_windows"] for r in recordings], dtype=np.int64)
        self.recording_of = np.repeat(np.arange(len(recordings)), counts)  # (N,)
        self.offset_of = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
        self.labels = (
            np.concatenate([np.asarray(r["labels"], dtype=np.int64) for r in recordings])
            if recordings
            else np.zeros(0, dtype=np.int64)
        )
        self.epochs = (
            np.concatenate([np.asarray(r["epochs"], dtype=np.int64) for r in recordings])
            if recordings
            else np.zeros(0, dtype=np.int64)
        )
        self.subjects = (
            np.array([r["subject"] for r in recordings])[self.recording_of] if recordings else np.zeros(0, dtype=str)
        )
        self._maps: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return int(self.labels.size)

    def _windows(self, recording: int) -> np.ndarray:
        if recording not in self._maps:
            self._maps[recording] = np.load(self.cache_dir / self.recordings[recording]["file"], mmap_mode="r")
        return self._maps[recording]

    def window(self, index: int) -> np.ndarray:
        """Window ``index`` as ``(c, T)`` float32 (picked channels, cache order)."""
        data = self._windows(int(self.recording_of[index]))[int(self.offset_of[index])]
        if not self._all_channels:
            data = data[self.channel_index]
        return np.array(data, dtype=np.float32)  # copy out of the read-only memory map

    def __getitem__(self, index: int) -> dict[str, Any]:
        record = self.recordings[int(self.recording_of[index])]
        return {"x": torch.from_numpy(self.window(index)), **window_meta(record, index, self.labels, self.epochs)}

    def __getstate__(self) -> dict[str, Any]:  # workers re-open their own memory maps
        return {**self.__dict__, "_maps": {}}


@ADAPTERS.register("eeg_windows")
class EEGWindowsAdapter(DataAdapter):
    """Prepared EEG windows (``mvapp data prepare``), split by subject.

    Options: ``cache`` folder; ``channels`` subset (default: all cached, in cache order);
    ``test_subjects`` (explicit) or ``test_fraction`` of subjects drawn with ``split_seed``
    (0 -> only a ``train`` split); likewise ``val_subjects`` or ``val_fraction`` (of all subjects,
    drawn from the non-test ones with ``split_seed``) -> a ``val`` split whose subjects no longer train.
    """

    modality = "eeg"
    default_tune_metric = "sleep_staging.balanced_accuracy"

    class Options(AdapterOptions):
        cache: str
        channels: list[str] | None = None
        test_fraction: float = Field(0.25, ge=0.0, lt=1.0)
        test_subjects: list[str] | None = None
        val_fraction: float = Field(0.0, ge=0.0, lt=1.0)
        val_subjects: list[str] | None = None
        split_seed: int = 0

        @model_validator(mode="after")
        def _one_split_rule(self) -> EEGWindowsAdapter.Options:
            if self.test_subjects is not None and len(self.test_subjects) == 0:
                raise ValueError("test_subjects is empty; omit it to use test_fraction")
            if self.val_subjects is not None and len(self.val_subjects) == 0:
                raise ValueError("val_subjects is empty; omit it to use val_fraction")
            overlap = set(self.test_subjects or ()) & set(self.val_subjects or ())
            if overlap:
                raise ValueError(f"subjects both in val_subjects and test_subjects: {sorted(overlap)}")
            return self

    def __init__(self, options: Options) -> None:
        super().__init__(options)
        self.cache_dir = Path(options.cache).expanduser()
        manifest = load_manifest(self.cache_dir)
        cached = list(manifest["channels"])
        self.channel_names = list(options.channels or cached)
        missing = [c for c in self.channel_names if c not in cached]
        if missing:
            raise ValueError(
                f"data.options.channels: {missing} not in cache {self.cache_dir}; available: {', '.join(cached)}"
            )
        self.channel_index = [cached.index(c) for c in self.channel_names]
        self.sfreq = float(manifest["sfreq"])
        self.window_seconds = float(manifest["window_seconds"])
        self.class_names = list(STAGES)
        self.manifest = manifest
        recordings = [r for r in manifest["recordings"] if r["n_windows"] > 0]
        if not recordings:
            raise ValueError(f"data.options.cache: {self.cache_dir} holds no windows")
        subjects = sorted({r["subject"] for r in recordings})
        if options.test_subjects is not None:
            unknown = [s for s in options.test_subjects if s not in subjects]
            if unknown:
                raise ValueError(
                    f"data.options.test_subjects: {unknown} not in the cache; subjects: {', '.join(subjects)}"
                )
            test = set(options.test_subjects)
        elif options.test_fraction > 0:
            if len(subjects) < 2:
                raise ValueError(
                    f"data.options.test_fraction: a subject-wise split needs >= 2 subjects, "
                    f"cache {self.cache_dir} has {len(subjects)}; set test_fraction: 0"
                )
            order = np.random.default_rng(options.split_seed).permutation(len(subjects))
            n_test = min(len(subjects) - 1, max(1, int(round(options.test_fraction * len(subjects)))))
            test = {subjects[i] for i in order[:n_test]}
        else:
            test = set()
        val = self._val_subjects(options, subjects, test)
        self.split_subjects = {"train": sorted(set(subjects) - test - val), "test": sorted(test)}
        if val:
            self.split_subjects["val"] = sorted(val)
        if not self.split_subjects["train"]:
            raise ValueError(
                "data.options.test_subjects / val_subjects: every subject is held out; none left to train on"
            )
        self.splits = ("train",) + (("val",) if val else ()) + (("test",) if test else ())
        self._recordings = {
            name: [r for r in recordings if r["subject"] in set(self.split_subjects[name])] for name in self.splits
        }

    @staticmethod
    def _val_subjects(options: EEGWindowsAdapter.Options, subjects: list[str], test: set[str]) -> set[str]:
        """Validation subjects: explicit ``val_subjects`` or ``round(val_fraction * all)`` of the
        non-test subjects (at least 1, at most all but one), drawn with ``split_seed + 1``."""
        if options.val_subjects is not None:
            unknown = [s for s in options.val_subjects if s not in subjects]
            if unknown:
                raise ValueError(
                    f"data.options.val_subjects: {unknown} not in the cache; subjects: {', '.join(subjects)}"
                )
            return set(options.val_subjects)
        if options.val_fraction <= 0:
            return set()
        pool = [s for s in subjects if s not in test]
        if len(pool) < 2:
            raise ValueError(
                f"data.options.val_fraction: a subject-wise val split needs >= 2 non-test subjects, "
                f"have {len(pool)}; set val_fraction: 0"
            )
        order = np.random.default_rng(options.split_seed + 1).permutation(len(pool))
        n_val = min(len(pool) - 1, max(1, int(round(options.val_fraction * len(subjects)))))
        return {pool[i] for i in order[:n_val]}

    def input_contract(self, encoder: dict[str, Any], views: list[str]) -> dict[str, Any]:
        """The input contract (``data/eeg/contract.py``) of an encoder with config ``encoder`` trained on
        this adapter's channels seen as ``views``, as a JSON-able dict."""
        return contract_for(self.manifest, self.channel_names, views, encoder, self.cache_dir).to_dict()

    def check_input_contract(
        self, contract: dict[str, Any], *, whose: str, accept: bool = False, accept_hint: str = ""
    ) -> list[str]:
        """Refuse this cache when it differs from ``contract`` in rate, band, units, window or scaling
        (one ``InputContractError`` naming every field and what would be done) unless ``accept``; returns
        the lines that report every difference (channels included)."""
        return check_input(
            EEGInputContract.from_dict(contract, f"input contract of {whose}"),
            self.manifest,
            self.channel_names,
            cache=self.cache_dir,
            whose=whose,
            accept=accept,
            accept_hint=accept_hint,
        )

    def _build_split(self, name: str) -> WindowDataset:
        return WindowDataset(self.cache_dir, self._recordings[name], self.channel_index)
