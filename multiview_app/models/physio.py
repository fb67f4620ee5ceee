"""1-D CNN encoders of the cardiorespiratory PSG modalities, sized from their sampling rate.

:class:`PhysioCNN` takes ``(n, in_channels, T)`` (or ``(n, T)`` for one channel) at ``sfreq`` Hz: a stem
convolution whose kernel and stride are set in seconds (``stem_seconds``, ``stem_stride_seconds``, so the
same network sees the same time spans at 200 Hz ECG and at 10 Hz breathing), then ``blocks`` blocks of
Conv1d (kernel 5, stride 2) -> GroupNorm -> GELU, a mean over time and a linear map to ``out_dim``.
Crops (shorter windows) pass unchanged: the mean over time makes it length-agnostic.

Registered with the rate and channels of their modality as defaults (every option can be set in the config):

- ``ecg/cnn``: the heart modality, one ECG channel at 200 Hz;
- ``resp/cnn``: the breathing modality, four channels (ABD, CHEST, AIRFLOW, SaO2 upsampled) at 10 Hz;
- ``spo2/cnn``: the oximetry modality on its own, one SpO2 channel at 1 Hz.

``sfreq`` and ``in_channels`` are the encoder's input contract: a run refuses a modality whose rate or
channel count differs (``train/input_contract.py``).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .encoders import Encoder, load_pretrained, register_encoder


class PhysioCNN(Encoder):
    """``forward(x (n, in_channels, T) | (n, T)) -> (n, out_dim)``.

    Args:
        in_channels: input channels (the modality's channels, group by group).
        sfreq: input rate (Hz); sets the stem's kernel and stride in samples.
        width: channels of every convolution.
        out_dim: output features (``num_features``).
        blocks: strided blocks after the stem (each halves the time axis).
        stem_seconds: stem kernel length in seconds (at least 3 samples).
        stem_stride_seconds: stem stride in seconds (at least 1 sample).
        dropout: dropout after every block.
        groups: GroupNorm groups (1 when it does not divide ``width``).
        pretrained_path: local weights (.safetensors / torch state dict).
    """

    def __init__(
        self,
        in_channels: int = 1,
        sfreq: float = 200.0,
        width: int = 32,
        out_dim: int = 64,
        blocks: int = 3,
        stem_seconds: float = 0.1,
        stem_stride_seconds: float = 0.05,
        dropout: float = 0.0,
        groups: int = 8,
        pretrained_path: str | None = None,
    ) -> None:
        super().__init__()
        if in_channels < 1 or width < 1 or out_dim < 1 or blocks < 0:
            raise ValueError(
                f"in_channels, width and out_dim must be >= 1 and blocks >= 0, got {in_channels}, {width}, "
                f"{out_dim}, {blocks}"
            )
        if not sfreq > 0:
            raise ValueError(f"sfreq must be > 0, got {sfreq}")
        self.in_channels, self.sfreq = int(in_channels), float(sfreq)
        kernel = max(3, math.ceil(stem_seconds * sfreq)) | 1  # odd
        stride = max(1, round(stem_stride_seconds * sfreq))
        norm_groups = groups if width % groups == 0 else 1
        layers: list[nn.Module] = [
            nn.Conv1d(in_channels, width, kernel, stride=stride, padding=kernel // 2),
            nn.GroupNorm(norm_groups, width),
            nn.GELU(),
        ]
        for _ in range(blocks):
            layers += [
                nn.Conv1d(width, width, 5, stride=2, padding=2),
                nn.GroupNorm(norm_groups, width),
                nn.GELU(),
                nn.Dropout(dropout),
            ]
        self.body = nn.Sequential(*layers)
        self.readout = nn.Linear(width, out_dim)
        self.num_features = int(out_dim)
        if pretrained_path:
            load_pretrained(self, pretrained_path)

    def forward(self, x: torch.Tensor, view_name: str | None = None) -> torch.Tensor:
        if x.dim() == 2:
            x = x[:, None, :]
        if x.dim() != 3 or x.shape[1] != self.in_channels:
            raise ValueError(
                f"encoder built for in_channels = {self.in_channels} at {self.sfreq:g} Hz expects "
                f"(n, {self.in_channels}, T), got {tuple(x.shape)}"
            )
        return self.readout(self.body(x).mean(dim=-1))


@register_encoder("ecg", "cnn")
class ECGEncoder(PhysioCNN):
    """:class:`PhysioCNN` for one ECG channel at 200 Hz (the heart modality). Options: :class:`PhysioCNN`."""

    def __init__(
        self,
        in_channels: int = 1,
        sfreq: float = 200.0,
        width: int = 32,
        out_dim: int = 64,
        blocks: int = 3,
        stem_seconds: float = 0.1,
        stem_stride_seconds: float = 0.05,
        dropout: float = 0.0,
        groups: int = 8,
        pretrained_path: str | None = None,
    ) -> None:
        super().__init__(
            in_channels,
            sfreq,
            width,
            out_dim,
            blocks,
            stem_seconds,
            stem_stride_seconds,
            dropout,
            groups,
            pretrained_path,
        )


@register_encoder("resp", "cnn")
class RespirationEncoder(PhysioCNN):
    """:class:`PhysioCNN` for the breathing modality: four channels at 10 Hz (a 0.5-s stem, stride 1 sample)."""

    def __init__(
        self,
        in_channels: int = 4,
        sfreq: float = 10.0,
        width: int = 32,
        out_dim: int = 64,
        blocks: int = 3,
        stem_seconds: float = 0.5,
        stem_stride_seconds: float = 0.1,
        dropout: float = 0.0,
        groups: int = 8,
        pretrained_path: str | None = None,
    ) -> None:
        super().__init__(
            in_channels,
            sfreq,
            width,
            out_dim,
            blocks,
            stem_seconds,
            stem_stride_seconds,
            dropout,
            groups,
            pretrained_path,
        )


@register_encoder("spo2", "cnn")
class OximetryEncoder(PhysioCNN):
    """:class:`PhysioCNN` for one SpO2 channel at 1 Hz (the oximetry modality; 3-s stem, stride 1 sample)."""

    def __init__(
        self,
        in_channels: int = 1,
        sfreq: float = 1.0,
        width: int = 32,
        out_dim: int = 64,
        blocks: int = 2,
        stem_seconds: float = 3.0,
        stem_stride_seconds: float = 1.0,
        dropout: float = 0.0,
        groups: int = 8,
        pretrained_path: str | None = None,
    ) -> None:
        super().__init__(
            in_channels,
            sfreq,
            width,
            out_dim,
            blocks,
            stem_seconds,
            stem_stride_seconds,
            dropout,
            groups,
            pretrained_path,
        )


__all__ = ["ECGEncoder", "OximetryEncoder", "PhysioCNN", "RespirationEncoder"]
