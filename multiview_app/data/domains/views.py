"""The ``domains`` view policy (M3G Sec. 4.2): the k views of an item are images of its class from k
different seen domains (view name = domain), each passed through an augmentation stack.

Domain adaptation with ``data.options.adapt_views: nearest``: after the k source views comes one view
of the (unlabelled) target domain, the target train image nearest to the item in the current embedding
(:meth:`DomainsPolicy.target_view`); the trainer gives the policy its model (``uses_model``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from pydantic import Field, field_validator

from ..adapters import DataAdapter
from ..batch import ViewBatch, host_to_device
from ..images.augment import STACKS, augment, customized
from ..images.views import AugmentPolicy
from ..views import VIEW_POLICIES, host_generator, labels_and_meta
from .adapter import DomainNetAdapter


@contextmanager
def frozen_eval(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """``model`` in eval mode without gradients for the block (BatchNorm statistics untouched), then
    its previous mode again."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield model
    finally:
        model.train(was_training)


def nearest_indices(queries: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
    """Index ``(n,)`` of the candidate ``(m, d)`` with the largest cosine similarity to each query
    ``(n, d)`` (first one on ties)."""
    return (F.normalize(queries, dim=-1) @ F.normalize(candidates, dim=-1).T).argmax(dim=1)


@VIEW_POLICIES.register("domains")
class DomainsPolicy(AugmentPolicy):
    """Views = seen domains of the ``domainnet`` adapter's domain tuples.

    Train items carry ``x`` uint8 ``(n, K, 3, S, S)`` (one image of the item's class per seen domain,
    K = number of seen domains). ``train_views`` uses all K domains when the number of source views
    equals K, else that many drawn per batch from the generator; view ``i`` goes through ``stacks[i]``
    (default ``simclr`` for every view, the paper's DomainNet choice). ``eval_views``: single images
    ``(n, 3, S, S)`` -> one ``test`` view (resize + center crop); domain tuples -> one ``test`` view
    per domain.

    ``views.k`` = source views. With ``adapt_views: nearest`` (domain adaptation) one more view follows
    (``policy.k = views.k + 1``; name = the target domain): per item, the target train image whose embedding is nearest
    (cosine) to the mean embedding of the item's K source images, among ``target_pool`` target images
    drawn per batch; embeddings = the current model's ``embed`` (eval mode, no gradient, ``test``
    views, no predictor). The trainer binds the model (:meth:`bind_model`, ``uses_model``) and builds
    these views synchronously (no prefetch), so they use the weights of the step they feed.
    """

    class Options(AugmentPolicy.Options):
        stacks: str | list[str] | None = Field("simclr", description="stack name for every view, or one per view")
        target_pool: int = Field(
            64,
            ge=1,
            le=65536,
            description="adapt_views=nearest: target train images drawn per batch to match items against",
        )
        target_stack: str = Field(
            "mild",
            description="adapt_views=augment: stack of every view of an adaptation-target item (one target image "
            "repeated per view, label -1); a deterministic stack such as 'test' would make its views "
            "identical copies",
        )

        @field_validator("target_stack")
        @classmethod
        def _known_target_stack(cls, value: str) -> str:
            if value not in STACKS:
                raise ValueError(f"unknown stack {value}; valid: {', '.join(STACKS.names())}")
            return value

    def __init__(self, k: int, options: Options, adapter: DataAdapter) -> None:
        if not isinstance(adapter, DomainNetAdapter):
            raise ValueError(
                f"view policy 'domains' needs domain tuples from the 'domainnet' adapter, got {type(adapter).__name__}"
            )
        seen = adapter.seen_domains
        self.target_domain: str | None = adapter.adapt if adapter.options.adapt_views == "nearest" else None
        if k > len(seen):
            raise ValueError(
                f"views.k = {k} but only {len(seen)} seen domain(s) are left ({', '.join(seen)}); "
                f"the domains policy takes one view per seen domain: set views.k <= {len(seen)}"
            )
        super().__init__(k, options, adapter)
        self.seen_domains = list(seen)
        self.source_count = k
        if self.target_domain is not None:
            self.k = k + 1  # + the nearest target view (its stack: the last one of the source views)
        self.target_spec = customized(STACKS.get(options.target_stack), options.crop_scale, options.jitter_strength)
        #: adaptation-target items (label -1) can be in the train batches (``adapt_views: augment``); only
        #: then are a batch's rows split between the two stacks (by its host-side ``domain`` column)
        self.mixes_target_rows = adapter.adapt is not None and adapter.options.adapt_views == "augment"
        #: the trainer binds its model and skips prefetching when this is true
        self.uses_model = self.target_domain is not None
        self.model: torch.nn.Module | None = None

    def bind_model(self, model: torch.nn.Module) -> None:
        """The model whose current embedding picks the nearest target images (``adapt_views: nearest``)."""
        self.model = model

    def _pick_domains(self, generator: torch.Generator | None) -> list[int]:
        """The seen domains of this batch's source views (all, or ``source_count`` drawn on the host)."""
        count = len(self.seen_domains)
        if self.source_count == count:
            return list(range(count))
        order = torch.randperm(count, generator=host_generator(generator))
        return sorted(order[: self.source_count].tolist())

    def _check_tuples(self, raw: dict[str, Any]) -> torch.Tensor:
        tuples = raw["x"]
        if tuples.dim() != 5 or tuples.shape[1] != len(self.seen_domains):
            raise ValueError(
                f"view policy 'domains' expects domain tuples (n, {len(self.seen_domains)}, 3, S, S) from the "
                f"domainnet adapter's 'train' split, got {tuple(tuples.shape)}"
            )
        return tuples

    def source_views(self, raw: dict[str, Any], generator: torch.Generator | None = None) -> ViewBatch:
        """The source-domain views only (``source_count`` of them; what the supervised ERM baseline sees)."""
        tuples = self._check_tuples(raw)
        picked = self._pick_domains(generator)
        labels, meta = labels_and_meta(raw)
        rows = self._row_split(raw, tuples.device) if self.mixes_target_rows else None
        views = [self._augment_rows(tuples[:, d], spec, rows, generator) for d, spec in zip(picked, self.specs)]
        return ViewBatch(views, ["image"] * len(views), [self.seen_domains[d] for d in picked], labels, meta)

    def _row_split(self, raw: dict[str, Any], device: torch.device) -> tuple[torch.Tensor, torch.Tensor] | None:
        """``(source rows, target rows)`` as index tensors on ``device`` when the batch mixes adaptation-target
        items (augment mode) with source items, else None. Told by the batch's ``domain`` column (a host-side
        list of names: nothing is read back from the device)."""
        domains = raw.get("domain")
        if not isinstance(domains, (list, tuple)) or len(domains) != raw["x"].shape[0]:
            raise ValueError(
                "view policy 'domains' with adapt_views: augment needs the batch's 'domain' column (one domain "
                "name per item, as the domainnet adapter's items carry it)"
            )
        is_target = [name == self.adapter.adapt for name in domains]
        if not any(is_target):
            return None
        source = [i for i, target in enumerate(is_target) if not target]
        target = [i for i, target in enumerate(is_target) if target]
        return host_to_device(torch.tensor(source, dtype=torch.long), device), host_to_device(
            torch.tensor(target, dtype=torch.long), device
        )

    def _augment_rows(
        self,
        images: torch.Tensor,
        spec: Any,
        rows: tuple[torch.Tensor, torch.Tensor] | None,
        generator: torch.Generator | None,
    ) -> torch.Tensor:
        """``(n, 3, S, S)`` -> one view: ``spec`` on the source rows only, the target stack on the target rows
        only (each row augmented once); ``rows``: :meth:`_row_split` (None: every row is a source row)."""
        if rows is None:
            return augment(images, spec, self.image_size, generator)
        source_rows, target_rows = rows
        if not len(source_rows):
            return augment(images, self.target_spec, self.image_size, generator)
        source = augment(images.index_select(0, source_rows), spec, self.image_size, generator)
        view = source.new_empty((images.shape[0], *source.shape[1:]))
        view.index_copy_(0, source_rows, source)
        target = augment(images.index_select(0, target_rows), self.target_spec, self.image_size, generator)
        return view.index_copy_(0, target_rows, target.to(view.dtype))

    def train_views(self, raw: dict[str, Any], generator: torch.Generator | None = None) -> ViewBatch:
        batch = self.source_views(raw, generator)
        if self.target_domain is None:
            return batch
        target = augment(self.target_view(raw["x"], generator), self.specs[-1], self.image_size, generator)
        return ViewBatch(
            [*batch.views, target],
            [*batch.modalities, "image"],
            [*batch.view_names, self.target_domain],
            batch.labels,
            batch.meta,
        )

    def _embed_images(self, images: torch.Tensor) -> torch.Tensor:
        """``(m, 3, S, S)`` uint8 -> current embeddings ``(m, d)`` of their ``test`` views."""
        assert self.model is not None
        device = next(self.model.parameters()).device
        view = augment(images.to(device), "test", self.image_size)
        return self.model.embed(ViewBatch([view], ["image"], ["test"], None, {}), use_predictor=False)[:, 0]

    def target_view(self, tuples: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """uint8 ``(n, 3, S, S)``: per item of ``tuples`` ``(n, K, 3, S, S)``, the nearest of
        ``target_pool`` target train images drawn from ``generator`` (class docstring)."""
        if self.target_domain is None:
            raise ValueError("target_view needs data.options.adapt with adapt_views: nearest")
        if self.model is None:
            raise ValueError(
                "view policy 'domains' with adapt_views: nearest needs the model: call bind_model(model) "
                "(the trainer does)"
            )
        pool_set = self.adapter.domain_split(self.target_domain, "train")  # labels stay hidden
        size = min(self.options.target_pool, len(pool_set))
        drawn = self._draw_pool(len(pool_set), size, generator)
        pool = host_to_device(torch.stack([pool_set.image(i) for i in drawn]), tuples.device)
        n, count = tuples.shape[:2]
        with frozen_eval(self.model):
            items = self._embed_images(tuples.flatten(0, 1)).view(n, count, -1).mean(dim=1)
            candidates = self._embed_images(pool)
        return pool[nearest_indices(items, candidates).to(pool.device)]

    def _draw_pool(self, count: int, size: int, generator: torch.Generator | None) -> list[int]:
        """``size`` distinct indices of ``count`` target images, drawn on the host (a CPU generator)."""
        return torch.randperm(count, generator=host_generator(generator, stream=1))[:size].tolist()

    def eval_views(self, raw: dict[str, Any]) -> ViewBatch:
        x = raw["x"]
        labels, meta = labels_and_meta(raw)
        if x.dim() == 4:
            return ViewBatch([augment(x, "test", self.image_size)], ["image"], ["test"], labels, meta)
        views = [augment(x[:, d], "test", self.image_size) for d in range(x.shape[1])]
        return ViewBatch(views, ["image"] * len(views), list(self.seen_domains[: len(views)]), labels, meta)


__all__ = ["DomainsPolicy", "frozen_eval", "nearest_indices"]
