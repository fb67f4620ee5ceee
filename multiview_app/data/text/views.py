"""The ``pairs`` view policy: mixed image + caption views of image-text items.

``k = image_views + text_views``; views ``0 .. image_views - 1`` are image augmentations (the
``augment`` policy's stacks, float32 ``(n, 3, S, S)``), the remaining ``text_views`` are captions
tokenized to ``(n, L)`` int64 ids (modality ``text``, view name ``caption``). Each item's caption
views draw distinct captions while it has enough (a random permutation of its captions, cycled).
Eval views: the ``test`` image view and the first caption (k = 2).
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from pydantic import Field, model_validator

from ..adapters import DataAdapter
from ..batch import ViewBatch, host_to_device
from ..images.views import AugmentPolicy
from ..views import VIEW_POLICIES, PolicyOptions, ViewPolicy, host_generator
from .pairs import split_captions
from .tokenize import TOKENIZERS, CaptionTokenizer, build_tokenizer


def choose_captions(captions: list[list[str]], views: int, generator: torch.Generator | None) -> list[list[str]]:
    """``views`` captions per item: a random permutation of the item's captions, cycled.

    ``captions``: n lists (each non-empty). Returns ``views`` lists of n captions (one per view).
    """
    n = len(captions)
    most = max(len(c) for c in captions)
    keys = torch.rand(n, most, generator=host_generator(generator))  # read on the host: drawn there
    counts = torch.tensor([len(c) for c in captions])
    keys[torch.arange(most)[None, :] >= counts[:, None]] = float("inf")  # absent captions sort last
    order = keys.argsort(dim=1).tolist()
    return [[captions[i][order[i][v % len(captions[i])]] for i in range(n)] for v in range(views)]


@VIEW_POLICIES.register("pairs")
class PairsPolicy(ViewPolicy):
    """Image and caption views of image-text pairs (module docstring). ``text_views`` caption views,
    the other ``k - text_views`` are image views configured like the ``augment`` policy
    (``stacks``, ``image_size``, ``crop_scale``, ``jitter_strength``)."""

    modality = "image_text"
    min_k = 2

    class Options(PolicyOptions):
        text_views: int = Field(1, ge=1, description="caption views; the other k - text_views are image views")
        tokenizer: str = Field(
            "open_clip", description="caption tokenizer: open_clip or minilm (must match the text tower)"
        )
        context_length: int | None = Field(
            None, ge=3, le=512, description="token ids per caption (default: the tokenizer's)"
        )
        stacks: str | list[str] | None = None
        image_size: int = Field(32, ge=8, le=1024)
        crop_scale: tuple[float, float] | None = None
        jitter_strength: float = Field(1.0, ge=0.0, le=4.0)

        @model_validator(mode="after")
        def _known_tokenizer(self) -> PairsPolicy.Options:
            if self.tokenizer not in TOKENIZERS:
                raise ValueError(f"tokenizer: unknown {self.tokenizer!r}; available: {', '.join(TOKENIZERS.names())}")
            return self

    def __init__(self, k: int, options: Options, adapter: DataAdapter) -> None:
        super().__init__(k, options, adapter)
        self.text_views = options.text_views
        self.image_views = k - options.text_views
        if self.image_views < 1:
            raise ValueError(f"views.options.text_views={options.text_views} leaves no image view for views.k={k}")
        image_options = AugmentPolicy.Options(
            stacks=options.stacks,
            image_size=options.image_size,
            crop_scale=options.crop_scale,
            jitter_strength=options.jitter_strength,
        )
        self.images = AugmentPolicy(self.image_views, image_options, adapter)
        self.tokenizer: CaptionTokenizer = build_tokenizer(options.tokenizer, options.context_length)

    def tokenize(self, captions: list[str], device: torch.device | str = "cpu") -> torch.Tensor:
        """``(n, L)`` int64 ids of ``captions`` on ``device``; warns when the count of captions cut to
        the context grows by a power of two (1, 2, 4, ... distinct captions), so it is reported, not spammed."""
        before = self.tokenizer.truncated
        ids = host_to_device(self.tokenizer(captions), device)
        after = self.tokenizer.truncated
        if after > before and (after & (after - 1) == 0 or before.bit_length() != after.bit_length()):
            warnings.warn(
                f"{after} distinct caption(s) so far are longer than the {self.tokenizer.name} context of "
                f"{self.tokenizer.context_length} ids and were truncated (views.options.context_length)",
                stacklevel=2,
            )
        return ids

    def train_views(self, raw: dict[str, Any], generator: torch.Generator | None = None) -> ViewBatch:
        image_batch = self.images.train_views(raw, generator)
        per_item = [split_captions(joined) for joined in raw["captions"]]
        chosen = choose_captions(per_item, self.text_views, generator)
        device = raw["x"].device
        text = [self.tokenize(captions, device) for captions in chosen]
        return ViewBatch(
            image_batch.views + text,
            image_batch.modalities + ["text"] * self.text_views,
            image_batch.view_names + ["caption"] * self.text_views,
            image_batch.labels,
            image_batch.meta,
        )

    def eval_image_views(self, raw: dict[str, Any]) -> ViewBatch:
        """The deterministic ``test`` image view (k = 1)."""
        return self.images.eval_views(raw)

    def text_batch(self, captions: list[str], device: torch.device | str = "cpu") -> ViewBatch:
        """One text view of arbitrary captions (k = 1; prompts, all captions of a split)."""
        return ViewBatch([self.tokenize(captions, device)], ["text"], ["caption"])

    def eval_views(self, raw: dict[str, Any]) -> ViewBatch:
        image = self.eval_image_views(raw)
        first = [split_captions(joined)[0] for joined in raw["captions"]]
        text = self.tokenize(first, raw["x"].device)
        return ViewBatch(image.views + [text], ["image", "text"], ["test", "caption"], image.labels, image.meta)


__all__ = ["PairsPolicy", "choose_captions"]
