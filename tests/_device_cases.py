"""Device-parametrized checks shared by the CPU tests (tests/test_device_cases.py) and the CUDA tests
(tests/test_cuda.py): one raw batch per registered view policy, one tiny training run per modality,
resume against an uninterrupted run. The CPU tests run the very code the CUDA tests run, on the CPU."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from _eeg_helpers import CHANNELS, fake_cache
from _text_helpers import TINY_TEXT, write_pair_folder
from _train_helpers import assert_same_weights, crash_then_resume, tiny_config
from torch.utils.data import default_collate

from multiview_app.data.views import build_view_policy

#: (k, options, raw batch, adapter) of a view policy's case
Case = tuple[int, dict[str, Any], dict[str, Any], Any]

#: the three digit domains of the domain cases
DOMAINS = ["clean", "inverted", "sketch"]


def digits_case(workdir: Path) -> Case:
    from multiview_app.data.adapters import build_adapter

    adapter = build_adapter("digits", {"load_size": 16})
    images = torch.stack([adapter.split("train")[i]["x"] for i in range(6)])
    return 2, {"stacks": "simclr", "image_size": 16}, {"x": images, "label": torch.arange(6)}, adapter


def eeg_case(workdir: Path) -> Case:
    """Channel groups averaged, with every signal augmentation (crop, gain, shift, noise, band-stop)."""
    adapter = SimpleNamespace(modality="eeg", channel_names=["Fpz-Cz", "Pz-Oz", "C3-M2"], sfreq=100.0)
    x = torch.randn(6, 3, 3000, generator=torch.Generator().manual_seed(0))
    options = {
        "channel_split": "average",
        "crop_seconds": 10.0,
        "amplitude_scale": [0.5, 2.0],
        "time_shift_seconds": 1.0,
        "noise_std": 0.1,
        "band_stop_hz": 2.0,
    }
    return 2, options, {"x": x, "label": torch.arange(6)}, adapter


def pairs_case(workdir: Path) -> Case:
    """One image and one caption view of image-text pairs (open_clip tokenizer)."""
    from multiview_app.data.adapters import build_adapter

    folder = workdir / "pairs"
    if not (folder / "pairs.tsv").is_file():
        write_pair_folder(folder, 16)
    adapter = build_adapter("pairs_csv", {"csv": str(folder / "pairs.tsv"), "load_size": 16})
    raw = default_collate([adapter.split("train")[i] for i in range(6)])
    return 2, {"text_views": 1, "image_size": 16, "context_length": 12}, raw, adapter


def domain_root(workdir: Path) -> Path:
    """Three tiny digit domains (20 digits each) under ``workdir`` (written once)."""
    from multiview_app.data.domains.synth import synth_domains

    root = workdir / "digit_domains"
    if not root.is_dir():
        synth_domains(root, seed=0, domains=tuple(DOMAINS), limit=20)
    return root


def domains_case(workdir: Path) -> Case:
    """Domain tuples of three seen domains, k = 2 of them drawn per batch."""
    from multiview_app.data.adapters import build_adapter

    options = {"root": str(domain_root(workdir)), "load_size": 16, "decode_workers": 0, "domains": DOMAINS}
    adapter = build_adapter("domainnet", options)
    raw = default_collate([adapter.split("train")[i] for i in range(6)])
    return 2, {"image_size": 16}, raw, adapter


def modalities_case(workdir: Path) -> Case:
    """PSG modalities as views (SleepFM's three groups) of one tiny whole-PSG night, with the shared crop."""
    from multiview_app.data.adapters import build_adapter
    from multiview_app.data.eeg.cache import prepare
    from multiview_app.data.eeg.preprocess import PrepareOptions
    from multiview_app.data.eeg.stages import PHYSIONET2018_EEG
    from multiview_app.data.eeg.synth import synth_psg

    root = workdir / "psg_case"
    if not (root / "cache" / "manifest.json").is_file():
        synth_psg(
            root / "raw", subjects=1, nights=1, fmt="physionet2018", hours=1, compress=6, progress=False, signals="psg"
        )
        options = PrepareOptions(channels=list(PHYSIONET2018_EEG))
        prepare("physionet2018", root / "raw", root / "cache", options, progress=False, modalities="sleepfm")
    adapter = build_adapter(
        "psg_modalities", {"cache": str(root / "cache"), "modalities": "sleepfm", "test_fraction": 0.0}
    )
    raw = default_collate([adapter.split("train")[i] for i in range(6)])
    return len(adapter.modality_names), {"crop_seconds": 20}, raw, adapter


#: A raw batch and options per view policy; a new policy needs a case here (tests/test_device_cases.py
#: fails for a registered policy without one).
POLICY_CASES: dict[str, Callable[[Path], Case]] = {
    "augment": digits_case,
    "channels": eeg_case,
    "pairs": pairs_case,
    "domains": domains_case,
    "modalities": modalities_case,
}


@contextmanager
def sync_debug(device: torch.device) -> Iterator[None]:
    """On CUDA: any host synchronization inside the block raises (``torch.cuda.set_sync_debug_mode``);
    elsewhere nothing."""
    if device.type != "cuda":
        yield
        return
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(previous)


def check_policy_on(name: str, device: torch.device, workdir: Path) -> None:
    """``name``'s train views on ``device``: k views, all on ``device``, the same for the same generator
    seed, different for another; on CUDA built without a host synchronization (after one warm-up call
    that may cache constants on the device); eval views on ``device`` too."""
    k, options, raw, adapter = POLICY_CASES[name](workdir)
    policy = build_view_policy(name, k, options, adapter)
    raw = {key: value.to(device) if isinstance(value, torch.Tensor) else value for key, value in raw.items()}

    def views(seed: int) -> list[torch.Tensor]:
        return list(policy.train_views(raw, torch.Generator(device=device).manual_seed(seed)).views)

    views(0)  # warm-up
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    with sync_debug(device):
        first = views(3)
    again, other = views(3), views(4)
    assert len(first) == k and all(v.device.type == device.type for v in first)
    for a, b in zip(first, again):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert any(not torch.equal(a, b) for a, b in zip(first, other))
    assert all(v.device.type == device.type for v in policy.eval_views(raw).views)


def modality_config(workdir: Path, modality: str, name: str, **train: Any) -> Any:
    """A tiny training config of ``modality`` (``images``, ``eeg``, ``domains``, ``image_text``)."""
    train = {"max_steps": 1, "batch_size": 8, **train}
    small_cnn = {"name": "small_cnn", "width": 8, "num_features": 16}
    if modality == "images":
        return tiny_config(workdir, name, train=train)
    if modality == "eeg":
        cache = workdir / "eeg_cache"
        if not cache.is_dir():
            fake_cache(cache, subjects=4, windows=8)
        return tiny_config(
            workdir,
            name,
            data={"adapter": "eeg_windows", "options": {"cache": str(cache), "test_fraction": 0.25}},
            views={
                "policy": "channels",
                "k": len(CHANNELS),
                "options": {"crop_seconds": 20.0, "amplitude_scale": [0.5, 2.0], "noise_std": 0.1, "band_stop_hz": 2.0},
            },
            model={
                "encoders": {
                    "eeg": {"name": "conv", "width": 8, "out_dim": 16, "channel_vocab": CHANNELS, "unknown_rate": 0.1}
                },
                "projector": {"hidden_dim": 16, "out_dim": 8},
            },
            train=train,
        )
    if modality == "domains":
        options = {"root": str(domain_root(workdir)), "load_size": 16, "decode_workers": 0, "domains": DOMAINS}
        return tiny_config(
            workdir,
            name,
            data={"adapter": "domainnet", "options": options},
            views={"policy": "domains", "k": 2, "options": {"image_size": 16}},
            model={"encoders": {"image": small_cnn}, "projector": {"hidden_dim": 16, "out_dim": 8}},
            train=train,
        )
    if modality == "image_text":
        folder = workdir / "pairs"
        if not (folder / "pairs.tsv").is_file():
            write_pair_folder(folder, 40)
        return tiny_config(
            workdir,
            name,
            data={
                "adapter": "pairs_csv",
                "options": {
                    "csv": str(folder / "pairs.tsv"),
                    "label_key": "label",
                    "load_size": 16,
                    "test_fraction": 0.3,
                },
            },
            views={"policy": "pairs", "k": 3, "options": {"text_views": 1, "image_size": 16, "context_length": 12}},
            model={"encoders": {"image": small_cnn, "text": TINY_TEXT}, "projector": {"hidden_dim": 16, "out_dim": 8}},
            loss={"name": "infonce_pwe", "tau": 0.1, "learnable_temperature": True},
            train=train,
        )
    raise ValueError(f"unknown modality {modality!r}")


#: the modalities :func:`modality_config` builds
MODALITIES = ("images", "eeg", "domains", "image_text")


def train_one_step(workdir: Path, modality: str, precision: str) -> Any:
    """One optimizer step of ``modality`` in ``precision``; returns the ``TrainResult`` (finite loss checked)."""
    from multiview_app.train.trainer import train

    result = train(modality_config(workdir, modality, f"{modality}_{precision}", precision=precision))
    assert result.steps == 1 and torch.isfinite(torch.tensor(result.final_loss))
    return result


def check_resume_is_exact(workdir: Path, precision: str) -> None:
    """Four steps with a checkpoint every two: a run that crashes after step 3 and resumes from the step-2
    checkpoint ends with the weights of the uninterrupted run, bit for bit."""
    from multiview_app.train.trainer import train

    section = {"max_steps": 4, "checkpoint_every": 2, "precision": precision}
    full = train(tiny_config(workdir, f"full_{precision}", train=section))
    resumed = crash_then_resume(tiny_config(workdir, f"crashed_{precision}", train=section), 3)
    assert resumed.steps == 4 and any("resumed from" in note for note in resumed.notes)
    assert_same_weights(full.run_dir, resumed.run_dir)
