"""Sleep-stager networks as EEG encoders: ``eeg/chambon`` (built in) and braindecode's ``eeg/chambon2018``,
``eeg/attnsleep`` (optional extra ``eeg-models``).

``eeg/chambon`` is the network of Chambon et al. (2018), "A deep learning architecture for temporal sleep
stage classification using multivariate and multimodal time series" (IEEE TNSRE), for one channel, written
here in plain torch: the same layers, shapes and (in distribution) initialization as braindecode's
``SleepStagerChambon2018`` feature extractor (a test copies the weights across and compares outputs), so the
demo needs no braindecode.

Each wraps a braindecode model built for one channel (``n_chans = 1``) as a feature extractor: its
classification layer is never built (``return_feats = True``) and a linear layer maps its flattened
features to ``out_dim``. As with ``eeg/conv`` in ``agnostic`` mode, one set of weights encodes every
channel view: ``forward(x (n, T) | (n, 1, T)) -> (n, out_dim)``, and the base's ``forward_views``
encodes k views in one call on their ``(k * n, T)`` concatenation -> ``(n, k, out_dim)``.

- ``chambon2018``: Chambon et al. (2018), two temporal convolutions with max-pooling (braindecode's
  ``SleepStagerChambon2018``; kernel and pool sizes in seconds, so they follow ``sfreq``).
- ``attnsleep``: Eldele et al. (2021) "AttnSleep" (braindecode's ``AttnSleep``, earlier
  ``SleepStagerEldele2021``): a multi-resolution CNN with squeeze-excitation, then a temporal-context
  encoder of multi-head causal self-attention; designed for 30-s windows at 100 Hz (``d_model`` 80).

Both are built for windows of ``window_seconds`` at ``sfreq`` (``n_times`` samples); their flattened
features are time-resolved, so a shorter window (e.g. a training view cropped by
``views.options.crop_seconds``) has its feature map average-pooled (stretched) in time to the length of a
full window before the flatten: at ``n_times`` samples the encoder is exactly braindecode's feature
extractor. Longer windows are an error. When a run starts, :meth:`BraindecodeSleepEncoder.check_input_contract`
compares ``sfreq`` and the window with the prepared cache and refuses a mismatch in one line.
"""

from __future__ import annotations

import inspect
import math
from typing import Any, ClassVar

import torch
from torch import nn

from .encoders import Encoder, load_pretrained, register_encoder

EXTRA_HINT = "pip install 'multiview_app[eeg-models]'"


def braindecode_models(encoder: str) -> Any:
    """The ``braindecode.models`` module, or an ``ImportError`` of one line naming the extra to install."""
    try:
        import braindecode.models as models
    except ImportError as err:
        raise ImportError(f"encoder eeg/{encoder} needs braindecode ({err}): {EXTRA_HINT}") from None
    return models


class BraindecodeSleepEncoder(Encoder):
    """Base of the braindecode encoders: ``forward(x (n, T) | (n, 1, T)) -> (n, out_dim)``.

    Subclasses set ``key`` and build ``self.net`` (a braindecode model with ``feature_extractor``) in
    :meth:`build_net`; :meth:`time_features` gives its ``(n, C, L)`` map before the flatten.
    """

    key: ClassVar[str]
    #: one channel per view: what a modality run checks against a modality's channel count
    fixed_in_channels: ClassVar[int] = 1

    def __init__(
        self, out_dim: int, sfreq: float, window_seconds: float, pretrained_path: str | None, **net_kwargs: Any
    ) -> None:
        super().__init__()
        if out_dim < 1:
            raise ValueError(f"out_dim must be >= 1, got {out_dim}")
        if not sfreq > 0 or not window_seconds > 0:
            raise ValueError(f"sfreq and window_seconds must be > 0, got {sfreq} Hz, {window_seconds} s")
        self.sfreq = float(sfreq)
        self.window_seconds = float(window_seconds)
        self.n_times = int(round(self.sfreq * self.window_seconds))
        try:
            self.net = self.build_net(**net_kwargs)
        except (ValueError, RuntimeError, AssertionError) as err:
            raise ValueError(
                f"encoder eeg/{self.key} cannot be built for {self.window_seconds:g}-s windows at "
                f"{self.sfreq:g} Hz ({self.n_times} samples): {err}"
            ) from None
        with torch.no_grad():
            feats = self._probe(torch.zeros(2, 1, self.n_times))
        self.feature_channels, self.feature_length = int(feats.shape[1]), int(feats.shape[2])
        self.project = nn.Linear(self.feature_channels * self.feature_length, out_dim)
        self.num_features = int(out_dim)
        if pretrained_path:
            load_pretrained(self, pretrained_path)

    def build_net(self, **net_kwargs: Any) -> nn.Module:
        """The network for one channel of ``n_times`` samples, without its classifier."""
        raise NotImplementedError

    def time_features(self, x: torch.Tensor) -> torch.Tensor:
        """``x (m, 1, T)`` -> the network's feature map ``(m, C, L)`` before its flatten."""
        raise NotImplementedError

    def _probe(self, x: torch.Tensor) -> torch.Tensor:
        """:meth:`time_features` in eval mode (BatchNorm untouched), restoring every module's mode."""
        modes = [(m, m.training) for m in self.net.modules()]
        self.net.eval()
        try:
            return self.time_features(x)
        finally:
            for module, was_training in modes:
                module.training = was_training

    @classmethod
    def check_input_contract(cls, options: dict[str, Any], contract: dict[str, Any]) -> None:
        """One ``ValueError`` when the prepared data of an input ``contract`` (``data/eeg/contract.py``: its
        ``sfreq``, ``window_samples``, ``source_cache``) is not at the rate and window of an encoder built with
        ``options`` (called by the trainer when a run starts); a contract that does not know them passes."""
        defaults = inspect.signature(cls.__init__).parameters
        sfreq = float(options.get("sfreq", defaults["sfreq"].default))
        window_seconds = float(options.get("window_seconds", defaults["window_seconds"].default))
        n_times = int(round(sfreq * window_seconds))
        data_sfreq, data_samples = contract.get("sfreq"), contract.get("window_samples")
        if not isinstance(data_sfreq, (int, float)) or not isinstance(data_samples, int):
            return
        if not math.isclose(data_sfreq, sfreq) or data_samples != n_times:
            where = contract.get("source_cache") or "the prepared cache"
            raise ValueError(
                f"encoder eeg/{cls.key} is built for {window_seconds:g}-s windows at {sfreq:g} Hz ({n_times} samples) "
                f"but {where} holds {data_samples / data_sfreq:g}-s windows at {data_sfreq:g} Hz ({data_samples} "
                f"samples): set model.encoders.eeg.sfreq / window_seconds to the data's, or prepare the data with "
                f"--sfreq {sfreq:g}"
            )

    def forward(self, x: torch.Tensor, view_name: str | None = None) -> torch.Tensor:
        if x.dim() == 2:
            x = x[:, None, :]
        if x.dim() != 3 or x.shape[1] != 1:
            raise ValueError(
                f"encoder eeg/{self.key} encodes one channel per view: expected (n, T) or (n, 1, T), "
                f"got {tuple(x.shape)}"
            )
        if x.shape[-1] > self.n_times:
            raise ValueError(
                f"encoder eeg/{self.key} is built for {self.window_seconds:g}-s windows at "
                f"{self.sfreq:g} Hz ({self.n_times} samples), got {x.shape[-1]} samples: set "
                f"model.encoders.eeg.sfreq / window_seconds to the prepared data's"
            )
        h = self.time_features(x)
        if h.shape[-1] != self.feature_length:  # a cropped view: stretch its feature map to a full window's
            h = nn.functional.adaptive_avg_pool1d(h, self.feature_length)
        return self.project(h.flatten(1))


class ChambonLayout(BraindecodeSleepEncoder):
    """The constructor shared by the two Chambon et al. (2018) encoders (``eeg/chambon``, ``eeg/chambon2018``):
    the paper's layer sizes, in seconds; subclasses build the network in :meth:`build_net` from
    ``n_conv_chs``, ``time_conv_size_s``, ``max_pool_size_s``, ``pad_size_s`` and the BatchNorm switch, named
    ``batch_norm_key`` in their ``build_net``.

    Args:
        out_dim: output features (linear map of the flattened ``(n_conv_chs, L)`` features).
        sfreq: sampling rate of the prepared windows (Hz).
        window_seconds: window length the network is built for (30: the scoring epoch).
        n_conv_chs: kernels of both convolutions (paper: 8).
        time_conv_size_s, max_pool_size_s, pad_size_s: convolution kernel, max-pool and padding (seconds).
        batch_norm: BatchNorm after each convolution.
        pretrained_path: local weights of this encoder (.safetensors / torch state dict).
    """

    batch_norm_key: ClassVar[str] = "batch_norm"

    def __init__(
        self,
        out_dim: int = 64,
        sfreq: float = 100.0,
        window_seconds: float = 30.0,
        n_conv_chs: int = 8,
        time_conv_size_s: float = 0.5,
        max_pool_size_s: float = 0.125,
        pad_size_s: float = 0.25,
        batch_norm: bool = False,
        pretrained_path: str | None = None,
    ) -> None:
        super().__init__(
            out_dim,
            sfreq,
            window_seconds,
            pretrained_path,
            n_conv_chs=n_conv_chs,
            time_conv_size_s=time_conv_size_s,
            max_pool_size_s=max_pool_size_s,
            pad_size_s=pad_size_s,
            **{self.batch_norm_key: batch_norm},
        )


@register_encoder("eeg", "chambon")
class ChambonEncoder(ChambonLayout):
    """Chambon et al. (2018) for one channel, in plain torch (no braindecode): two temporal convolutions
    (kernel ``time_conv_size_s``, zero padding ``pad_size_s``) each followed by ReLU and max-pooling
    (``max_pool_size_s``), flattened ``(n_conv_chs, L)`` features, a linear map to ``out_dim``.

    ``forward(x (n, T) | (n, 1, T)) -> (n, out_dim)``; k channel views share the weights -> ``(n, k, out_dim)``.
    Views shorter than ``window_seconds`` (training crops) have their feature map stretched in time to a
    full window's ``L`` before the flatten. Options: :class:`ChambonLayout`.

    Examples:
        >>> import torch
        >>> encoder = ChambonEncoder(out_dim=16)
        >>> encoder(torch.randn(4, 3000)).shape
        torch.Size([4, 16])
    """

    key = "chambon"

    def build_net(
        self, *, n_conv_chs: int, time_conv_size_s: float, max_pool_size_s: float, pad_size_s: float, batch_norm: bool
    ) -> nn.Module:
        kernel, pool, pad = (
            math.ceil(seconds * self.sfreq)
            for seconds in (time_conv_size_s, max_pool_size_s, pad_size_s)  # sizes in samples, rounded up
        )
        if min(kernel, pool) < 1:
            raise ValueError(f"kernel {time_conv_size_s} s and pool {max_pool_size_s} s are under one sample")
        layers: list[nn.Module] = []
        for in_chs in (1, n_conv_chs):
            layers += [
                nn.Conv1d(in_chs, n_conv_chs, kernel, padding=pad),
                nn.BatchNorm1d(n_conv_chs) if batch_norm else nn.Identity(),
                nn.ReLU(),
                nn.MaxPool1d(pool),
            ]
        return nn.Sequential(*layers)

    def time_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


@register_encoder("eeg", "chambon2018")
class Chambon2018Encoder(ChambonLayout):
    """Chambon et al. (2018) via braindecode's ``SleepStagerChambon2018`` (one channel; no classifier).
    Options: :class:`ChambonLayout` (``batch_norm`` is braindecode's ``apply_batch_norm``)."""

    key = "chambon2018"
    batch_norm_key = "apply_batch_norm"

    def build_net(self, **net_kwargs: Any) -> nn.Module:
        return braindecode_models(self.key).SleepStagerChambon2018(
            n_chans=1, sfreq=self.sfreq, n_times=self.n_times, n_outputs=5, return_feats=True, **net_kwargs
        )

    def time_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.net.feature_extractor(x[:, :, None, :]).flatten(1, 2)  # (m, C, 1, L) -> (m, C, L)


@register_encoder("eeg", "attnsleep")
class AttnSleepEncoder(BraindecodeSleepEncoder):
    """Eldele et al. (2021) AttnSleep via braindecode's ``AttnSleep`` (one channel; no classifier).

    The multi-resolution CNN gives ``(n, after_reduced_cnn_size, L)``; its ``L`` time steps are the
    attention's model width, so ``d_model`` must equal ``L`` of a full window (80 at 30 s / 100 Hz) and be
    divisible by ``n_attn_heads``; braindecode's error names the value that fits.

    Args:
        out_dim: output features (linear map of the flattened ``(after_reduced_cnn_size, d_model)`` features).
        sfreq: sampling rate of the prepared windows (Hz).
        window_seconds: window length the network is built for.
        n_tce: temporal-context encoder layers (paper: 2).
        d_model, d_ff, n_attn_heads: attention width (= time steps), feed-forward width, heads.
        after_reduced_cnn_size: CNN output channels (the attention's tokens).
        dropout: dropout of the attention blocks.
        pretrained_path: local weights of this encoder (.safetensors / torch state dict).
    """

    key = "attnsleep"

    def __init__(
        self,
        out_dim: int = 64,
        sfreq: float = 100.0,
        window_seconds: float = 30.0,
        n_tce: int = 2,
        d_model: int = 80,
        d_ff: int = 120,
        n_attn_heads: int = 5,
        after_reduced_cnn_size: int = 30,
        dropout: float = 0.1,
        pretrained_path: str | None = None,
    ) -> None:
        super().__init__(
            out_dim,
            sfreq,
            window_seconds,
            pretrained_path,
            n_tce=n_tce,
            d_model=d_model,
            d_ff=d_ff,
            n_attn_heads=n_attn_heads,
            after_reduced_cnn_size=after_reduced_cnn_size,
            drop_prob=dropout,
        )

    def build_net(self, **net_kwargs: Any) -> nn.Module:
        self.d_model = int(net_kwargs["d_model"])
        return braindecode_models(self.key).AttnSleep(
            n_chans=1, sfreq=self.sfreq, n_times=self.n_times, n_outputs=5, return_feats=True, **net_kwargs
        )

    def time_features(self, x: torch.Tensor) -> torch.Tensor:
        cnn, context = self.net.feature_extractor
        h = cnn(x)
        if h.shape[-1] != self.d_model:
            h = nn.functional.adaptive_avg_pool1d(h, self.d_model)  # a cropped view: the attention width is fixed
        return context(h)
