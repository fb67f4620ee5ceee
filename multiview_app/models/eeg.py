"""1-D convolutional EEG encoder shared by every channel, registered as ``eeg/conv``.

The network is the one of M3G App. A, which follows Brüsch et al. (2023): six blocks of
Conv1d -> Dropout -> GroupNorm -> GELU (kernel = stride = 3, then 2), ``width`` kernels in the
intermediate blocks, ``out_dim`` in the last, a kernel-1 readout convolution, and a mean over
time: ``(n, T) -> (n, out_dim)`` (or ``(n, in_channels, T)`` for the channel-split "stacked"
views, whose first convolution sees a group of channels as input channels). As in both papers, one set of weights ("a single common
network") encodes every channel; the channels are combined afterwards (by the evaluator).

``channel_mode``:

- ``agnostic`` (the papers' setting): the encoder never sees which channel it encodes, so it
  transfers to any channel set (the default of the cross-dataset configs);
- ``embedding`` (an addition of this project, in neither paper): a learned embedding of the channel
  name (vocabulary from the config, plus an "unknown channel" row) is added after the first block.
  A view name "A+B" (an averaged channel group) gets the mean of its members' embeddings. Channels
  outside the vocabulary (e.g. Sleep-EDF's Fpz-Cz for a PhysioNet-trained model) use the "unknown"
  row, which is trained only through ``unknown_rate``: during training each view's channel id is
  replaced by "unknown" with that probability (0 leaves the row untrained: an untrained offset at
  evaluation on unseen channels).
- ``montage`` (an addition of this project, in neither paper nor in the EEG foundation models we know of,
  which learn one embedding per channel name or use a fixed channel set): the channel embedding is computed
  from where the derivation's electrodes sit. Both electrodes of ``ACTIVE-REFERENCE`` are looked up in mne's
  template 10-05 montage (``data/eeg/electrodes.py``), mapped through fixed random Fourier features
  (``sin``/``cos`` of ``2 pi B p`` for head-radius-scaled positions ``p``, ``B`` drawn once from a seeded
  normal with ``montage_frequencies`` rows) and a learned linear layer, so a derivation never seen in
  pretraining (Fpz-Cz, Pz-Oz, Cz-A1) gets an embedding near those of its neighbours instead of an
  "unknown" row. A derivation whose electrode the montage lacks is an error naming it.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from ..data.eeg.electrodes import derivation_members, derivation_positions
from ..data.eeg.stages import PHYSIONET2018_EEG
from .encoders import Encoder, load_pretrained, register_encoder

UNKNOWN = 0  # embedding row of channels outside the vocabulary (and of view_name=None)
CHANNEL_MODES = ("embedding", "agnostic", "montage")
HEAD_RADIUS_M = 0.095  # template head radius: electrode positions are divided by it before the Fourier map


def normalize_channel(name: str) -> str:
    """Case-insensitive name without an "EEG " prefix: "EEG Fpz-Cz" and "fpz-cz" are one channel."""
    name = name.strip()
    if name.upper().startswith("EEG "):
        name = name[4:]
    return name.strip().lower()


class ConvBlock(nn.Sequential):
    """Conv1d(kernel = stride) -> Dropout -> GroupNorm -> GELU: ``(n, c_in, L) -> (n, c_out, L // k)``."""

    def __init__(self, c_in: int, c_out: int, kernel: int, dropout: float, groups: int) -> None:
        super().__init__(
            nn.Conv1d(c_in, c_out, kernel, stride=kernel),
            nn.Dropout(dropout),
            nn.GroupNorm(groups if c_out % groups == 0 else 1, c_out),
            nn.GELU(),
        )


class MontageEmbedding(nn.Module):
    """Derivation name -> ``(width,)`` embedding from its electrodes' positions (``channel_mode: montage``).

    Features of one derivation: ``[sin(2 pi B a), cos(2 pi B a), sin(2 pi B r), cos(2 pi B r), has_ref]``
    with ``a``, ``r`` the active / reference positions over :data:`HEAD_RADIUS_M` and ``B``
    ``(frequencies, 3)`` fixed (seeded normal with std ``scale`` cycles per head radius, saved with the
    weights: the features' inner product approximates a Gaussian kernel of length ``1 / (2 pi scale)``
    head radii, ~0.3 at the default, so neighbouring electrodes get similar features); a reference-free name has zero
    reference features and ``has_ref = 0``. A group "A+B" averages its members' features (so does DREAMS'
    ``central``: C3-A1 and CZ-A1, ``electrodes.derivation_members``). A learned
    linear layer maps the ``4 * frequencies + 1`` features to ``width``.
    """

    def __init__(self, width: int, frequencies: int = 16, scale: float = 0.5, seed: int = 0) -> None:
        super().__init__()
        if frequencies < 1:
            raise ValueError(f"montage_frequencies must be >= 1, got {frequencies}")
        if not scale > 0:
            raise ValueError(f"montage_scale must be > 0, got {scale}")
        generator = torch.Generator().manual_seed(seed)
        frequencies_b = torch.randn(frequencies, 3, generator=generator, dtype=torch.float64) * scale
        self.register_buffer("frequencies", frequencies_b)
        self.project = nn.Linear(4 * frequencies + 1, width)
        self._features: dict[tuple[str, torch.device, torch.dtype], torch.Tensor] = {}

    def position_features(self, view_name: str) -> torch.Tensor:
        """``(4 * frequencies + 1,)`` float64 features of a view name (members of "A+B", and the derivations
        that DREAMS' ``central`` stands for, averaged: ``electrodes.derivation_members``)."""
        rows = []
        for part in derivation_members(view_name):
            active, reference = derivation_positions(part)
            feats = [self._fourier(active)]
            if reference is None:
                feats += [
                    torch.zeros(2 * self.frequencies.shape[0], dtype=torch.float64),
                    torch.zeros(1, dtype=torch.float64),
                ]
            else:
                feats += [self._fourier(reference), torch.ones(1, dtype=torch.float64)]
            rows.append(torch.cat(feats))
        return torch.stack(rows).mean(dim=0)

    def _fourier(self, position: object) -> torch.Tensor:
        """``(3,)`` position in metres -> ``(2 * frequencies,)`` sin / cos features."""
        p = torch.as_tensor(position, dtype=torch.float64) / HEAD_RADIUS_M
        angles = 2 * torch.pi * (self.frequencies.detach().cpu().double() @ p)
        return torch.cat([torch.sin(angles), torch.cos(angles)])

    def forward(self, view_name: str | None) -> torch.Tensor:
        if view_name is None:
            raise ValueError("channel_mode 'montage' needs each view's derivation name (e.g. 'C3-M2'); got none")
        weight = self.project.weight
        key = (view_name, weight.device, weight.dtype)
        feats = self._features.get(key)
        if feats is None:  # built once per name, device and dtype (positions are constants)
            feats = self._features[key] = self.position_features(view_name).to(device=weight.device, dtype=weight.dtype)
        return self.project(feats)


@register_encoder("eeg", "conv")
class ChannelAwareConvEncoder(Encoder):
    """``forward(x (n, T) | (n, 1, T), view_name) -> (n, out_dim)``; ``forward_views`` batches k views.

    Args:
        width: kernels of the intermediate blocks (paper: 256; tests/demo use less).
        out_dim: output features = ``num_features`` (paper: 64).
        kernels: kernel = stride of the six blocks (paper: 3, 2, 2, 2, 2, 2).
        dropout: dropout rate in every block.
        groups: GroupNorm groups (1 when it does not divide the width).
        channel_vocab: channel names with a learned embedding (default: the six PhysioNet 2018 EEG);
            ``[]`` leaves only the "unknown" row (``embedding`` mode).
        channel_mode: ``embedding`` (learned channel embedding), ``agnostic`` (none; the papers) or
            ``montage`` (embedding from the derivation's electrode positions; see the module docstring).
        montage_frequencies: ``montage`` mode: rows of the fixed Fourier matrix (features = 4x that + 1).
        montage_scale: ``montage`` mode: std of the Fourier matrix in cycles per head radius.
        unknown_rate: ``embedding`` mode, training only: probability that a view's channel id is
            replaced by "unknown" (trains that row for channels never seen in pretraining).
        in_channels: input channels of the first convolution: 1 (one channel per view, the
            papers' network) or the group size of ``views.options.channel_split: stacked`` views
            ``(n, in_channels, T)``.
        pretrained_path: local weights (.safetensors / torch state dict).
    """

    uses_view_name = True

    def __init__(
        self,
        width: int = 256,
        out_dim: int = 64,
        kernels: tuple[int, ...] | list[int] = (3, 2, 2, 2, 2, 2),
        dropout: float = 0.0,
        groups: int = 8,
        channel_vocab: list[str] | tuple[str, ...] = PHYSIONET2018_EEG,
        channel_mode: Literal["embedding", "agnostic", "montage"] = "embedding",
        unknown_rate: float = 0.0,
        in_channels: int = 1,
        montage_frequencies: int = 16,
        montage_scale: float = 0.5,
        pretrained_path: str | None = None,
    ) -> None:
        super().__init__()
        if len(kernels) < 1 or any(k < 1 for k in kernels):
            raise ValueError(f"kernels must be positive integers, got {list(kernels)}")
        if channel_mode not in CHANNEL_MODES:
            raise ValueError(f"channel_mode: expected one of {', '.join(CHANNEL_MODES)}, got {channel_mode!r}")
        if not 0.0 <= unknown_rate <= 1.0:
            raise ValueError(f"unknown_rate: expected a probability in [0, 1], got {unknown_rate}")
        if channel_mode != "embedding" and unknown_rate > 0:
            raise ValueError(
                f"unknown_rate only applies to channel_mode 'embedding' ({channel_mode} has no channel ids)"
            )
        if in_channels < 1:
            raise ValueError(f"in_channels must be >= 1, got {in_channels}")
        self.channel_mode = channel_mode
        self.unknown_rate = float(unknown_rate)
        self.in_channels = int(in_channels)
        sizes = [self.in_channels] + [width] * (len(kernels) - 1) + [out_dim]
        self.blocks = nn.ModuleList(
            ConvBlock(sizes[i], sizes[i + 1], k, dropout, groups) for i, k in enumerate(kernels)
        )
        self.readout = nn.Conv1d(out_dim, out_dim, kernel_size=1)
        self.channel_vocab = [str(c) for c in channel_vocab]
        self._index = {normalize_channel(c): i + 1 for i, c in enumerate(self.channel_vocab)}
        if len(self._index) != len(self.channel_vocab):
            raise ValueError(f"channel_vocab has duplicate names: {self.channel_vocab}")
        self.channel_embedding: nn.Embedding | None = None
        self._ids_on_device: dict[tuple[str | None, torch.device], torch.Tensor] = {}
        if channel_mode == "embedding":
            self.channel_embedding = nn.Embedding(len(self.channel_vocab) + 1, sizes[1])
            nn.init.normal_(self.channel_embedding.weight, std=0.1)
        self.montage_embedding = (
            MontageEmbedding(sizes[1], montage_frequencies, montage_scale) if channel_mode == "montage" else None
        )
        self.min_length = 1
        for k in kernels:
            self.min_length *= k
        self.num_features = out_dim
        if pretrained_path:
            load_pretrained(self, pretrained_path)

    def channel_ids(self, view_name: str | None) -> list[int]:
        """Embedding rows of a view: one per member channel ("A+B"), ``[UNKNOWN]`` if not in the vocabulary."""
        if view_name is None:
            return [UNKNOWN]
        return [self._index.get(normalize_channel(part), UNKNOWN) for part in view_name.split("+")]

    def _name_embedding(self, view_name: str | None) -> torch.Tensor | None:
        """``(width,)`` embedding of a view (None in ``agnostic`` mode); while training, the view's
        ids become "unknown" with probability ``unknown_rate``; ``montage`` mode: from electrode positions."""
        if self.montage_embedding is not None:
            return self.montage_embedding(view_name)
        if self.channel_embedding is None:
            return None
        device = self.channel_embedding.weight.device
        key = (view_name, device)
        ids = self._ids_on_device.get(key)
        if ids is None:  # built once per view name and device (a list -> GPU tensor is a blocking copy)
            ids = self._ids_on_device[key] = torch.tensor(self.channel_ids(view_name), device=device)
        if self.training and self.unknown_rate > 0:  # decided on the device: no host read of the draw
            ids = torch.where(torch.rand((), device=device) < self.unknown_rate, torch.full_like(ids, UNKNOWN), ids)
        return self.channel_embedding(ids).mean(dim=0)

    def encode(self, x: torch.Tensor, channel_embedding: torch.Tensor | None) -> torch.Tensor:
        """``x (m, T)``, ``channel_embedding (m, width)`` or None -> ``(m, out_dim)``."""
        return self._readout(x, channel_embedding).mean(dim=-1)

    def time_bins(self, x: torch.Tensor, view_name: str | None = None, bins: int = 4) -> torch.Tensor:
        """Readout pooled into ``bins`` equal time bins (the papers' classifier input):
        ``x (n, T)`` or ``(n, in_channels, T)`` -> ``(n, out_dim, bins)``; their mean over bins is ``forward`` when the readout
        length divides evenly."""
        embedding = self._name_embedding(view_name)
        h = self._readout(x, None if embedding is None else embedding.expand(x.shape[0], -1))
        return nn.functional.adaptive_avg_pool1d(h, bins)

    def _readout(self, x: torch.Tensor, channel_embedding: torch.Tensor | None) -> torch.Tensor:
        """``x (m, T)`` or ``(m, in_channels, T)`` -> readout ``(m, out_dim, L)`` before the mean over time."""
        if x.dim() == 2:
            x = x[:, None, :]
        if x.dim() != 3 or x.shape[1] != self.in_channels:
            expected = "(n, T) or (n, 1, T)" if self.in_channels == 1 else f"(n, {self.in_channels}, T)"
            raise ValueError(
                f"EEG encoder built with in_channels = {self.in_channels} expects {expected}, got {tuple(x.shape)}; "
                f"views.options.channel_split = stacked needs model.encoders.eeg.in_channels = channels per view"
            )
        if x.shape[-1] < self.min_length:
            raise ValueError(f"EEG encoder needs >= {self.min_length} samples per window, got {x.shape[-1]}")
        h = self.blocks[0](x)
        if channel_embedding is not None:
            h = h + channel_embedding[:, :, None]
        for block in self.blocks[1:]:
            h = block(h)
        return self.readout(h)

    def forward(self, x: torch.Tensor, view_name: str | None = None) -> torch.Tensor:
        embedding = self._name_embedding(view_name)
        return self.encode(x, None if embedding is None else embedding.expand(x.shape[0], -1))

    def forward_views(self, xs: list[torch.Tensor], view_names: list[str]) -> torch.Tensor:
        """k views ``(n, T)`` (or ``(n, in_channels, T)``) with their names -> ``(n, k, out_dim)`` in one batched pass."""
        if any(x.shape != xs[0].shape for x in xs[1:]):  # no set of shapes: traceable with a symbolic batch (ONNX)
            return torch.stack([self(x, name) for x, name in zip(xs, view_names)], dim=1)
        n = xs[0].shape[0]
        per_view = [self._name_embedding(name) for name in view_names]
        embeddings = None  # (k * n, width): view j's embedding for rows j * n ... (j + 1) * n - 1
        if per_view[0] is not None:  # expand + reshape (not repeat_interleave): exports to ONNX with a dynamic n
            stacked = torch.stack(per_view)
            embeddings = stacked[:, None, :].expand(-1, n, -1).reshape(-1, stacked.shape[-1])
        out = self.encode(torch.cat(xs, dim=0), embeddings)  # (k * n, f)
        return out.view(len(xs), n, -1).transpose(0, 1)
