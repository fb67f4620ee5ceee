"""``channels`` view policy: EEG channels as views (M3G Sec. 4.3), optional channel-split views
(random channel groups averaged, Brüsch et al. 2023) and random temporal crops."""
from __future__ import annotations

from typing import Any, Literal

import torch
from pydantic import Field

from ..adapters import DataAdapter
from ..batch import ViewBatch
from ..views import VIEW_POLICIES, PolicyOptions, ViewPolicy, draw_device, labels_and_meta

GROUP_SEPARATOR = "+"
"""View name of an averaged channel group: channel names joined by "+" (the encoder understands it)."""


@VIEW_POLICIES.register("channels")
class ChannelViews(ViewPolicy):
    """Raw batch ``x (n, C, T)`` -> k views ``(n, T')`` named by their channel.

    - ``channel_split: none``: k = number of channels (or a random subset of k channels per batch);
    - ``channel_split: average``: the channels are randomly partitioned into k groups per batch and
      each group is averaged (k >= 2; Brüsch et al. use k = 2);
    - ``crop_seconds``: each view is an independent random crop of that length (train only).
    Eval views: every channel, full length, in the adapter's order (k_eval = C).
    """

    modality = "eeg"
    min_k = 1

    class Options(PolicyOptions):
        channels: list[str] | None = None
        channel_split: Literal["none", "average"] = "none"
        crop_seconds: float | None = Field(None, gt=0)

    def __init__(self, k: int, options: Options, adapter: DataAdapter) -> None:
        super().__init__(k, options, adapter)
        available = list(getattr(adapter, "channel_names", []))
        self.channel_names = list(options.channels or available)
        missing = [c for c in self.channel_names if c not in available]
        if missing:
            raise ValueError(f"views.options.channels: {missing} not provided by the data; available: {', '.join(available)}")
        self.channel_index = [available.index(c) for c in self.channel_names]
        c = len(self.channel_names)
        if k > c:
            raise ValueError(f"views.k = {k} but only {c} channels ({', '.join(self.channel_names)}) are available")
        if options.channel_split == "average" and k < 2:
            raise ValueError("views.k must be >= 2 with views.options.channel_split = average")
        sfreq = float(getattr(adapter, "sfreq", 100.0))
        self.crop_samples = None if options.crop_seconds is None else int(round(options.crop_seconds * sfreq))
        window_seconds = getattr(adapter, "window_seconds", None)
        if options.crop_seconds is not None and window_seconds is not None and options.crop_seconds > window_seconds:
            raise ValueError(
                f"views.options.crop_seconds: {options.crop_seconds:g} s is longer than the data's "
                f"{window_seconds:g}-s windows (the value is in seconds, not samples)"
            )

    def _channels(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 3:
            raise ValueError(f"channels view policy expects raw x of shape (n, C, T), got {tuple(x.shape)}")
        return x[:, self.channel_index] if self.channel_index != list(range(x.shape[1])) else x

    def _crop(self, view: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        n, length = view.shape
        if self.crop_samples is None or self.crop_samples >= length:
            return view
        starts = torch.randint(0, length - self.crop_samples + 1, (n, 1), generator=generator,
                               device=draw_device(generator, view.device)).to(view.device)
        index = starts + torch.arange(self.crop_samples, device=view.device)[None]
        return torch.gather(view, 1, index)

    def train_views(self, raw: dict[str, Any], generator: torch.Generator | None = None) -> ViewBatch:
        x = self._channels(raw["x"]).float()  # (n, C, T)
        c = x.shape[1]
        order = torch.randperm(c, generator=generator, device=draw_device(generator, x.device)).cpu()
        names: list[str] = []
        views: list[torch.Tensor] = []
        if self.options.channel_split == "average":
            for group in torch.tensor_split(order, self.k):
                members = sorted(group.tolist())
                views.append(x[:, members].mean(dim=1))
                names.append(GROUP_SEPARATOR.join(self.channel_names[i] for i in members))
        else:
            chosen = sorted(order[: self.k].tolist()) if self.k < c else list(range(c))
            views = [x[:, i] for i in chosen]
            names = [self.channel_names[i] for i in chosen]
        views = [self._crop(v, generator) for v in views]
        labels, meta = labels_and_meta(raw)
        return ViewBatch(views, ["eeg"] * len(views), names, labels, meta)

    def eval_views(self, raw: dict[str, Any]) -> ViewBatch:
        x = self._channels(raw["x"]).float()
        labels, meta = labels_and_meta(raw)
        return ViewBatch([x[:, i] for i in range(x.shape[1])], ["eeg"] * x.shape[1], list(self.channel_names),
                         labels, meta)
