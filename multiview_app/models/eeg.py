"""Channel-aware 1-D convolutional EEG encoder (M3G App. A / Brüsch et al. 2023), registered as
``eeg/conv``.

Six blocks of Conv1d -> Dropout -> GroupNorm -> GELU (kernel = stride = 3, then 2), ``width``
kernels in the intermediate blocks, ``out_dim`` in the last, a kernel-1 readout convolution, and
a mean over time: ``(n, T) -> (n, out_dim)``. The same weights serve every channel; a learned
embedding of the channel name (vocabulary from the config, plus an "unknown channel" entry) is
added after the first block, so a model trained on the six PhysioNet 2018 derivations still
embeds Sleep-EDF's Fpz-Cz / Pz-Oz (as "unknown"). A view name "A+B" (an averaged channel group)
gets the mean of its members' embeddings.
"""
from __future__ import annotations

import torch
from torch import nn

from ..data.eeg.stages import PHYSIONET2018_EEG
from .encoders import load_pretrained, register_encoder

UNKNOWN = 0  # embedding row of channels outside the vocabulary (and of view_name=None)


def normalize_channel(name: str) -> str:
    """Case-insensitive name without an "EEG " prefix: "EEG Fpz-Cz" and "fpz-cz" are one channel."""
    name = name.strip()
    if name.upper().startswith("EEG "):
        name = name[4:]
    return name.strip().lower()


class ConvBlock(nn.Sequential):
    """Conv1d(kernel = stride) -> Dropout -> GroupNorm -> GELU: ``(n, c_in, L) -> (n, c_out, L // k)``."""

    def __init__(self, c_in: int, c_out: int, kernel: int, dropout: float, groups: int) -> None:
        super().__init__(nn.Conv1d(c_in, c_out, kernel, stride=kernel), nn.Dropout(dropout),
                         nn.GroupNorm(groups if c_out % groups == 0 else 1, c_out), nn.GELU())


@register_encoder("eeg", "conv")
class ChannelAwareConvEncoder(nn.Module):
    """``forward(x (n, T) | (n, 1, T), view_name) -> (n, out_dim)``; ``forward_views`` batches k views.

    Args:
        width: kernels of the intermediate blocks (paper: 256; tests/demo use less).
        out_dim: output features = ``num_features`` (paper: 64).
        kernels: kernel = stride of the six blocks (paper: 3, 2, 2, 2, 2, 2).
        dropout: dropout rate in every block.
        groups: GroupNorm groups (1 when it does not divide the width).
        channel_vocab: channel names with a learned embedding (default: the six PhysioNet 2018 EEG);
            ``[]`` disables channel awareness (all views share the "unknown" embedding).
        pretrained_path: local weights (.safetensors / torch state dict).
    """

    uses_view_name = True

    def __init__(self, width: int = 256, out_dim: int = 64, kernels: tuple[int, ...] | list[int] = (3, 2, 2, 2, 2, 2),
                 dropout: float = 0.0, groups: int = 8, channel_vocab: list[str] | tuple[str, ...] = PHYSIONET2018_EEG,
                 pretrained_path: str | None = None) -> None:
        super().__init__()
        if len(kernels) < 1 or any(k < 1 for k in kernels):
            raise ValueError(f"kernels must be positive integers, got {list(kernels)}")
        sizes = [1] + [width] * (len(kernels) - 1) + [out_dim]
        self.blocks = nn.ModuleList(ConvBlock(sizes[i], sizes[i + 1], k, dropout, groups) for i, k in enumerate(kernels))
        self.readout = nn.Conv1d(out_dim, out_dim, kernel_size=1)
        self.channel_vocab = [str(c) for c in channel_vocab]
        self._index = {normalize_channel(c): i + 1 for i, c in enumerate(self.channel_vocab)}
        if len(self._index) != len(self.channel_vocab):
            raise ValueError(f"channel_vocab has duplicate names: {self.channel_vocab}")
        self.channel_embedding = nn.Embedding(len(self.channel_vocab) + 1, sizes[1])
        nn.init.normal_(self.channel_embedding.weight, std=0.1)
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

    def _name_embedding(self, view_name: str | None) -> torch.Tensor:
        ids = torch.tensor(self.channel_ids(view_name), device=self.channel_embedding.weight.device)
        return self.channel_embedding(ids).mean(dim=0)  # (width,)

    def encode(self, x: torch.Tensor, channel_embedding: torch.Tensor) -> torch.Tensor:
        """``x (m, T)``, ``channel_embedding (m, width)`` -> ``(m, out_dim)``."""
        if x.dim() == 3 and x.shape[1] == 1:
            x = x[:, 0]
        if x.dim() != 2:
            raise ValueError(f"EEG encoder expects (n, T) or (n, 1, T), got {tuple(x.shape)}")
        if x.shape[1] < self.min_length:
            raise ValueError(f"EEG encoder needs >= {self.min_length} samples per window, got {x.shape[1]}")
        h = self.blocks[0](x[:, None, :]) + channel_embedding[:, :, None]
        for block in self.blocks[1:]:
            h = block(h)
        return self.readout(h).mean(dim=-1)

    def forward(self, x: torch.Tensor, view_name: str | None = None) -> torch.Tensor:
        embedding = self._name_embedding(view_name)
        return self.encode(x, embedding.expand(x.shape[0], -1))

    def forward_views(self, xs: list[torch.Tensor], view_names: list[str]) -> torch.Tensor:
        """k views ``(n, T)`` with their names -> ``(n, k, out_dim)`` in one batched pass."""
        if len({tuple(x.shape) for x in xs}) != 1:
            return torch.stack([self(x, name) for x, name in zip(xs, view_names)], dim=1)
        n = xs[0].shape[0]
        embeddings = torch.stack([self._name_embedding(name) for name in view_names])  # (k, width)
        out = self.encode(torch.cat(xs, dim=0), embeddings.repeat_interleave(n, dim=0))  # (k * n, f)
        return out.view(len(xs), n, -1).transpose(0, 1)
