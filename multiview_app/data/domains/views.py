"""The ``domains`` view policy (M3G Sec. 4.2): the k views of an item are images of its class from k
different seen domains (view name = domain), each passed through an augmentation stack."""
from __future__ import annotations

from typing import Any

import torch
from pydantic import Field

from ..adapters import DataAdapter
from ..batch import ViewBatch
from ..images.augment import augment
from ..images.views import AugmentPolicy
from ..views import VIEW_POLICIES, labels_and_meta


@VIEW_POLICIES.register("domains")
class DomainsPolicy(AugmentPolicy):
    """Views = seen domains of the ``domainnet`` adapter's domain tuples.

    Train items carry ``x`` uint8 ``(n, K, 3, S, S)`` (one image of the item's class per seen domain,
    K = number of seen domains). ``train_views`` uses all K domains when ``k == K``, else k of them
    drawn per batch from the generator; view ``i`` goes through ``stacks[i]`` (default ``simclr`` for
    every view, the paper's DomainNet choice). ``eval_views``: single images ``(n, 3, S, S)`` -> one
    ``test`` view (resize + center crop); domain tuples -> one ``test`` view per domain.
    """

    class Options(AugmentPolicy.Options):
        stacks: str | list[str] | None = Field("simclr", description="stack name for every view, or one per view")

    def __init__(self, k: int, options: Options, adapter: DataAdapter) -> None:
        seen = getattr(adapter, "seen_domains", None)
        if seen is None:
            raise ValueError(
                f"view policy 'domains' needs domain tuples from the 'domainnet' adapter, got {type(adapter).__name__}"
            )
        if k > len(seen):
            raise ValueError(
                f"views.k = {k} but only {len(seen)} seen domain(s) are left ({', '.join(seen)}); "
                f"the domains policy takes one view per seen domain: set views.k <= {len(seen)}"
            )
        super().__init__(k, options, adapter)
        self.seen_domains = list(seen)

    def _pick_domains(self, generator: torch.Generator | None) -> list[int]:
        count = len(self.seen_domains)
        if self.k == count:
            return list(range(count))
        device = generator.device if generator is not None else "cpu"
        return sorted(torch.randperm(count, generator=generator, device=device)[: self.k].tolist())

    def train_views(self, raw: dict[str, Any], generator: torch.Generator | None = None) -> ViewBatch:
        tuples = raw["x"]
        if tuples.dim() != 5 or tuples.shape[1] != len(self.seen_domains):
            raise ValueError(
                f"view policy 'domains' expects domain tuples (n, {len(self.seen_domains)}, 3, S, S) from the "
                f"domainnet adapter's 'train' split, got {tuple(tuples.shape)}"
            )
        picked = self._pick_domains(generator)
        views = [augment(tuples[:, d], spec, self.image_size, generator) for d, spec in zip(picked, self.specs)]
        labels, meta = labels_and_meta(raw)
        return ViewBatch(views, ["image"] * self.k, [self.seen_domains[d] for d in picked], labels, meta)

    def eval_views(self, raw: dict[str, Any]) -> ViewBatch:
        x = raw["x"]
        labels, meta = labels_and_meta(raw)
        if x.dim() == 4:
            return ViewBatch([augment(x, "test", self.image_size)], ["image"], ["test"], labels, meta)
        views = [augment(x[:, d], "test", self.image_size) for d in range(x.shape[1])]
        return ViewBatch(views, ["image"] * len(views), list(self.seen_domains[: len(views)]), labels, meta)


__all__ = ["DomainsPolicy"]
