"""``channels`` view policy: EEG channels as views (M3G Sec. 4.3), optional channel-split views
(random channel groups averaged or stacked as input channels, Brüsch et al. 2023), random
temporal crops and signal augmentations (``augment.py``: amplitude scaling, time shift, additive
noise, band-stop)."""

from __future__ import annotations

from typing import Any, Literal

import torch
from pydantic import Field, model_validator

from ..adapters import DataAdapter
from ..batch import ViewBatch
from ..views import VIEW_POLICIES, PolicyOptions, ViewPolicy, draw_device, host_generator, labels_and_meta
from . import augment
from .rereference import bipolar_derivations, check_bipolar_pair

GROUP_SEPARATOR = "+"
"""View name of a channel group: channel names joined by "+" (the encoder understands it)."""


def stacked_group_size(channels: int, k: int) -> int:
    """Channels per view of ``channel_split: stacked`` (= the encoder's ``in_channels``); the
    channels must split into k equal groups."""
    if k < 2 or channels % k:
        raise ValueError(
            f"views.options.channel_split = stacked needs k >= 2 equal channel groups: views.k = {k} "
            f"does not divide the {channels} channels"
        )
    return channels // k


@VIEW_POLICIES.register("channels")
class ChannelViews(ViewPolicy):
    """Raw batch ``x (n, C, T)`` -> k views ``(n, T')`` named by their channel.

    - ``channel_split: none``: k = number of channels (or a random subset of k channels per batch);
    - ``channel_split: average``: the channels are randomly partitioned into k groups per batch and
      each group is averaged (k >= 2; Brüsch et al. use k = 2);
    - ``channel_split: stacked``: the same random partition into k groups of ``g = C / k`` channels
      (k must divide C), each group kept as ``g`` input channels of one view ``(n, g, T')``
      (members in channel order; the encoder needs ``in_channels = g``); view name ``A+B+C``;
    - ``crop_seconds``: each view is an independent random crop of that length (train only; the
      channels of a stacked view share their crop);
    - signal augmentations (train only, after the crop, each item of each view its own draw, in
      this order): ``amplitude_scale: [low, high]`` (log-uniform gain), ``time_shift_seconds``
      (circular shift up to ± that), ``noise_std`` (additive white noise, in units of the z-scored
      window), ``band_stop_hz`` (zero a band that wide, centre uniform in ``band_stop_range``, with
      probability ``band_stop_p``).
    - ``bipolar: {F3-C3: [F3-M2, C3-M2], ...}``: derivations computed from two referential channels
      of the data with one shared reference (the reference cancels), added after ``channels`` as
      further channels named by the derivation (train and eval views alike): with k below the
      channel count, each batch's k views are a random mix of referential and bipolar channels of
      the same epochs (the montage shift as an augmentation).
    Eval views: every channel, full length, in the adapter's order (k_eval = C); with ``stacked``:
    the channels in order cut into k contiguous groups of g (:meth:`eval_groups`), ``(n, g, T)`` each.
    """

    modality = "eeg"
    min_k = 1

    class Options(PolicyOptions):
        channels: list[str] | None = None
        channel_split: Literal["none", "average", "stacked"] = "none"
        crop_seconds: float | None = Field(None, gt=0)
        amplitude_scale: tuple[float, float] | None = None
        time_shift_seconds: float | None = Field(None, gt=0)
        noise_std: float | None = Field(None, gt=0)
        band_stop_hz: float | None = Field(None, gt=0)
        band_stop_p: float = Field(0.5, ge=0, le=1)
        band_stop_range: tuple[float, float] = (0.5, 30.0)
        bipolar: dict[str, list[str]] | None = None

        @model_validator(mode="after")
        def _ranges(self) -> ChannelViews.Options:
            for name, pair in (self.bipolar or {}).items():
                check_bipolar_pair(name, pair)
            if self.amplitude_scale is not None and not 0 < self.amplitude_scale[0] <= self.amplitude_scale[1]:
                raise ValueError(
                    f"views.options.amplitude_scale: expected [low, high] with 0 < low <= high, "
                    f"got {list(self.amplitude_scale)}"
                )
            low, high = self.band_stop_range
            if not 0 <= low <= high:
                raise ValueError(
                    f"views.options.band_stop_range: expected [low, high] Hz with 0 <= low <= high, got {[low, high]}"
                )
            return self

    def __init__(self, k: int, options: Options, adapter: DataAdapter) -> None:
        super().__init__(k, options, adapter)
        available = list(getattr(adapter, "channel_names", []))
        self.channel_names = list(options.channels or available)
        missing = [c for c in self.channel_names if c not in available]
        if missing:
            raise ValueError(
                f"views.options.channels: {missing} not provided by the data; available: {', '.join(available)}"
            )
        self.channel_index = [available.index(c) for c in self.channel_names]
        self._index_on: dict[torch.device, torch.Tensor] = {}
        self.bipolar_pairs: list[tuple[int, int]] = []  # (minuend, subtrahend) indices into the data's channels
        for name, pair in (options.bipolar or {}).items():
            absent = [c for c in pair if c not in available]
            if absent:
                raise ValueError(
                    f"views.options.bipolar.{name}: channel(s) {absent} not provided by the data; "
                    f"available: {', '.join(available)}"
                )
            if name in self.channel_names:
                raise ValueError(f"views.options.bipolar.{name}: already a channel of the data; pick another name")
            self.bipolar_pairs.append((available.index(pair[0]), available.index(pair[1])))
            self.channel_names.append(name)
        c = len(self.channel_names)
        if k > c:
            raise ValueError(f"views.k = {k} but only {c} channels ({', '.join(self.channel_names)}) are available")
        if options.channel_split == "average" and k < 2:
            raise ValueError("views.k must be >= 2 with views.options.channel_split = average")
        self.group_size = stacked_group_size(c, k) if options.channel_split == "stacked" else 1
        sfreq = float(getattr(adapter, "sfreq", 100.0))
        self.sfreq = sfreq
        self.crop_samples = None if options.crop_seconds is None else int(round(options.crop_seconds * sfreq))
        self.shift_samples = 0 if options.time_shift_seconds is None else int(round(options.time_shift_seconds * sfreq))
        if options.band_stop_hz is not None and options.band_stop_range[1] > sfreq / 2:
            raise ValueError(
                f"views.options.band_stop_range: {options.band_stop_range[1]:g} Hz is above the "
                f"Nyquist frequency of the data ({sfreq / 2:g} Hz)"
            )
        window_seconds = getattr(adapter, "window_seconds", None)
        if options.crop_seconds is not None and window_seconds is not None and options.crop_seconds > window_seconds:
            raise ValueError(
                f"views.options.crop_seconds: {options.crop_seconds:g} s is longer than the data's "
                f"{window_seconds:g}-s windows (the value is in seconds, not samples)"
            )

    def _channels(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 3:
            raise ValueError(f"channels view policy expects raw x of shape (n, C, T), got {tuple(x.shape)}")
        picked = self._picked(x)
        if not self.bipolar_pairs:
            return picked
        return torch.cat([picked, bipolar_derivations(x, self.bipolar_pairs)], dim=1)

    def _picked(self, x: torch.Tensor) -> torch.Tensor:
        """The configured referential ``channels`` of raw ``x (n, C, T)``, in their order."""
        if self.channel_index == list(range(x.shape[1])):
            return x
        index = self._index_on.get(x.device)
        if index is None:  # made once per device (a list index on a GPU tensor is a blocking copy)
            index = self._index_on[x.device] = torch.tensor(self.channel_index, device=x.device)
        return x.index_select(1, index)

    def eval_groups(self) -> list[list[str]]:
        """Channel groups of the eval views: one per channel, or (``stacked``) the channels in
        order cut into k contiguous groups of ``group_size``."""
        if self.options.channel_split != "stacked":
            return [[name] for name in self.channel_names]
        g = self.group_size
        return [self.channel_names[i : i + g] for i in range(0, len(self.channel_names), g)]

    def _crop(self, view: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """``(n, T)`` or ``(n, g, T)`` -> the same with ``T' = crop_samples`` (one start per item)."""
        n, length = view.shape[0], view.shape[-1]
        if self.crop_samples is None or self.crop_samples >= length:
            return view
        starts = torch.randint(
            0, length - self.crop_samples + 1, (n, 1), generator=generator, device=draw_device(generator, view.device)
        ).to(view.device)
        return augment.gather_time(view, starts + torch.arange(self.crop_samples, device=view.device)[None])

    def _augment(self, view: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """The configured signal augmentations of one (cropped) training view, in the documented order."""
        o = self.options
        if o.amplitude_scale is not None:
            view = augment.scale_amplitude(view, o.amplitude_scale[0], o.amplitude_scale[1], generator)
        if self.shift_samples:
            view = augment.shift_time(view, self.shift_samples, generator)
        if o.noise_std is not None:
            view = augment.add_noise(view, o.noise_std, generator)
        if o.band_stop_hz is not None:
            view = augment.band_stop(view, self.sfreq, o.band_stop_hz, o.band_stop_p, *o.band_stop_range, generator)
        return view

    def train_views(self, raw: dict[str, Any], generator: torch.Generator | None = None) -> ViewBatch:
        x = self._channels(raw["x"]).float()  # (n, C, T)
        c = x.shape[1]
        # which channels form which view is read on the host (view names): drawn there (host_generator)
        order = torch.randperm(c, generator=host_generator(generator))
        names: list[str] = []
        views: list[torch.Tensor] = []
        if self.options.channel_split in ("average", "stacked"):
            for group in torch.tensor_split(order, self.k):
                members = sorted(group.tolist())
                group = torch.stack([x[:, i] for i in members], dim=1)  # (n, g, T) by slicing: no index tensor to copy
                views.append(group.mean(dim=1) if self.options.channel_split == "average" else group)
                names.append(GROUP_SEPARATOR.join(self.channel_names[i] for i in members))
        else:
            chosen = sorted(order[: self.k].tolist()) if self.k < c else list(range(c))
            views = [x[:, i] for i in chosen]
            names = [self.channel_names[i] for i in chosen]
        views = [self._augment(self._crop(v, generator), generator) for v in views]
        labels, meta = labels_and_meta(raw)
        return ViewBatch(views, ["eeg"] * len(views), names, labels, meta)

    def eval_views(self, raw: dict[str, Any]) -> ViewBatch:
        x = self._channels(raw["x"]).float()
        labels, meta = labels_and_meta(raw)
        if self.options.channel_split == "stacked":
            groups = self.eval_groups()
            g = self.group_size
            views = [x[:, i * g : (i + 1) * g] for i in range(len(groups))]
            return ViewBatch(views, ["eeg"] * len(groups), [GROUP_SEPARATOR.join(m) for m in groups], labels, meta)
        return ViewBatch(
            [x[:, i] for i in range(x.shape[1])], ["eeg"] * x.shape[1], list(self.channel_names), labels, meta
        )


def staging_views(views_cfg: Any, adapter: DataAdapter) -> ChannelViews:
    """Eval views for sleep staging with a run trained under ``views_cfg`` (its ``views`` config):
    every channel of ``adapter`` on its own, or, for a ``channel_split: stacked`` run, the
    adapter's channels in k contiguous groups (the encoder takes groups of that size)."""
    options = dict(getattr(views_cfg, "options", None) or {})
    if getattr(views_cfg, "policy", None) == "channels" and options.get("channel_split") == "stacked":
        return ChannelViews(int(views_cfg.k), ChannelViews.Options(channel_split="stacked"), adapter)
    return ChannelViews(len(adapter.channel_names), ChannelViews.Options(), adapter)
