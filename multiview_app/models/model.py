"""``MultiViewModel``: one encoder + projector per modality (shared over its views), optional predictor.

Shapes: a :class:`~multiview_app.data.batch.ViewBatch` of k views of n items ->
``features (n, k, f)`` -> ``embed (n, k, d)`` (L2-normalized).

How views reach an encoder: ``encoder.forward_views(xs, view_names) -> (n, k_m, f)``, called once with
all of the modality's views and their names (:class:`~multiview_app.models.encoders.Encoder`). Its
default calls the encoder once per view with ``view_name=<name>`` when ``uses_view_name`` is True, else
once on the views concatenated into one ``(k_m * n, ...)`` batch, split back (fastest; BatchNorm
statistics then span all views); an encoder may override it (batched, name-aware; e.g. channel-aware EEG).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..data.batch import ViewBatch
from .encoders import build_encoder, encode_views
from .heads import Predictor, Projector


class MultiViewModel(nn.Module):
    """Encoders, projectors and (optional) predictors, each a ``ModuleDict`` keyed by modality.

    A :class:`~multiview_app.data.batch.ViewBatch` of ``k`` views of ``n`` items goes to
    :meth:`features` ``(n, k, f)`` (encoder outputs, what the evaluators read) and :meth:`embed`
    ``(n, k, d)`` (projected, L2-normalized: what a loss takes). The views of one modality share its
    encoder and projector. Usually built from plain dicts with :func:`build_model`.

    Parameters
    ----------
    encoders : dict of str to nn.Module
        One encoder per modality; each maps a view ``(n, ...)`` to ``(n, f)`` and has ``num_features``.
    projectors : dict of str to nn.Module
        One projector per modality (the same keys), ``(m, f) -> (m, d)``.
    predictors : dict of str to nn.Module, optional
        BYOL-style predictors ``(m, d) -> (m, d)``, applied by :meth:`embed` when present.

    Raises
    ------
    ValueError
        Encoders and projectors for different modalities; at call, a view of a modality without an
        encoder, or modalities whose widths differ.

    Examples
    --------
    >>> import torch
    >>> from multiview_app.data import ViewBatch
    >>> from multiview_app.models import MultiViewModel, build_encoder
    >>> encoder = build_encoder("image", "small_cnn")
    >>> model = MultiViewModel({"image": encoder}, {"image": torch.nn.Linear(encoder.num_features, 8)})
    >>> batch = ViewBatch(views=[torch.randn(4, 3, 32, 32), torch.randn(4, 3, 32, 32)],
    ...                   modalities=["image", "image"], view_names=["crop1", "crop2"])
    >>> model.features(batch).shape == (4, 2, encoder.num_features), model.embed(batch).shape
    (True, torch.Size([4, 2, 8]))
    """

    def __init__(
        self,
        encoders: dict[str, nn.Module],
        projectors: dict[str, nn.Module],
        predictors: dict[str, nn.Module] | None = None,
    ) -> None:
        super().__init__()
        if set(encoders) != set(projectors):
            raise ValueError(f"encoders for {sorted(encoders)} but projectors for {sorted(projectors)}")
        self.encoders = nn.ModuleDict(encoders)
        self.projectors = nn.ModuleDict(projectors)
        self.predictors = nn.ModuleDict(predictors or {})
        #: plain-dict arguments of :func:`build_model` when built through it (for model.json)
        self.spec: dict[str, Any] = {}

    @property
    def modalities(self) -> list[str]:
        return list(self.encoders)

    @property
    def has_predictor(self) -> bool:
        return len(self.predictors) > 0

    def _groups(self, batch: ViewBatch) -> dict[str, list[int]]:
        groups: dict[str, list[int]] = {}
        for i, modality in enumerate(batch.modalities):
            if modality not in self.encoders:
                raise ValueError(
                    f"view '{batch.view_names[i]}' has modality '{modality}' but the model has encoders "
                    f"for: {', '.join(self.encoders)}"
                )
            groups.setdefault(modality, []).append(i)
        return groups

    def _encode(self, modality: str, views: list[torch.Tensor], names: list[str]) -> torch.Tensor:
        """Encode one modality's views -> ``(n, k_m, f)``."""
        return encode_views(self.encoders[modality], views, names)

    def _view_parts(self, batch: ViewBatch, fn: Any) -> list[torch.Tensor]:
        """Apply ``fn(modality, views, names) -> (n, k_m, x)`` per modality -> the k views' ``(n, x)`` in view order."""
        groups = self._groups(batch)
        parts: list[torch.Tensor | None] = [None] * batch.k
        for modality, idx in groups.items():
            out = fn(modality, [batch.views[i] for i in idx], [batch.view_names[i] for i in idx])
            for j, i in enumerate(idx):
                parts[i] = out[:, j]
        return parts  # type: ignore[return-value]

    def _per_view(self, batch: ViewBatch, fn: Any) -> torch.Tensor:
        """Apply ``fn(modality, views, names) -> (n, k_m, x)`` per modality, reassemble ``(n, k, x)``."""
        parts = self._view_parts(batch, fn)
        dims = {p.shape[-1] for p in parts}
        if len(dims) > 1:
            raise ValueError(f"modalities give different widths {sorted(dims)}; they must match to stack views")
        return torch.stack(parts, dim=1)

    def _project(self, modality: str, feats: torch.Tensor) -> torch.Tensor:
        """Encoder features ``(n, k_m, f)`` -> projections ``(k_m, n, d)``: one projector call over all views,
        so that BatchNorm heads see every view (``norm: view_batch``: each view's statistics apart)."""
        return self.projectors[modality](feats.transpose(0, 1))

    def features(self, batch: ViewBatch) -> torch.Tensor:
        """Encoder features ``(n, k, f)`` (what evaluators use)."""
        return self._per_view(batch, self._encode)

    def embed(self, batch: ViewBatch, use_predictor: bool = True) -> torch.Tensor:
        """L2-normalized embeddings ``(n, k, d)``; the predictor is applied when present and asked for."""

        def project(modality: str, views: list[torch.Tensor], names: list[str]) -> torch.Tensor:
            z = self._project(modality, self._encode(modality, views, names))  # (k_m, n, d)
            if use_predictor and modality in self.predictors:
                z = self.predictors[modality](z)
            return z.transpose(0, 1)

        return F.normalize(self._per_view(batch, project), dim=-1)

    def embed_online(self, batch: ViewBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """BYOL's online branch in one pass: ``(predictions, projections, features)``; predictions and
        projections L2-normalized ``(n, k, d)`` (predictions = projections when the model has no
        predictor); features the encoders' ``(n, k, f)`` (what a probe reads), None when the
        modalities' encoders differ in width."""
        widths: dict[str, int] = {}  # encoder width per modality

        def run(modality: str, views: list[torch.Tensor], names: list[str]) -> torch.Tensor:
            feats = self._encode(modality, views, names)  # (n, k_m, f)
            widths[modality] = feats.shape[-1]
            projections = self._project(modality, feats)  # (k_m, n, d)
            predictor = self.predictors[modality] if modality in self.predictors else nn.Identity()
            both = torch.cat([predictor(projections), projections], dim=-1)  # (k_m, n, 2 d)
            return torch.cat([both.transpose(0, 1), feats], dim=-1)  # (n, k_m, 2 d + f)

        parts = self._view_parts(batch, run)
        view_widths = [widths[m] for m in batch.modalities]
        heads = torch.stack([p[:, : p.shape[-1] - f] for p, f in zip(parts, view_widths)], dim=1)  # (n, k, 2 d)
        predictions, projections = heads.chunk(2, dim=-1)
        features = None
        if len(set(view_widths)) == 1:
            features = torch.stack([p[:, -view_widths[0] :] for p in parts], dim=1)  # (n, k, f)
        return F.normalize(predictions, dim=-1), F.normalize(projections, dim=-1), features

    def forward(self, batch: ViewBatch) -> torch.Tensor:
        return self.embed(batch)


def build_model(
    encoders: dict[str, dict[str, Any]],
    projector: dict[str, Any],
    predictor: dict[str, Any] | None = None,
) -> MultiViewModel:
    """Build a :class:`MultiViewModel` from plain dicts.

    Parameters
    ----------
    encoders : dict
        ``{modality: {"name": <encoder name>, **encoder kwargs}}``.
    projector : dict
        :class:`Projector` kwargs except ``in_dim`` (``hidden_dim``, ``out_dim``, ``norm``); one projector
        per modality, input width = that encoder's ``num_features``.
    predictor : dict or None
        :class:`Predictor` kwargs except ``in_dim`` (``hidden_dim``, ``norm``), or None.

    Returns
    -------
    MultiViewModel
        Encoders, projectors (and predictors) per modality; embeds a batch of k views to ``(n, k, d)``.

    Raises
    ------
    ValueError
        For an empty ``encoders`` or an encoder spec without ``name``.

    Examples
    --------
    >>> from multiview_app.models import build_model
    >>> model = build_model({"image": {"name": "small_cnn"}}, {"hidden_dim": 32, "out_dim": 8})
    >>> model.modalities, model.has_predictor
    (['image'], False)
    """
    if not encoders:
        raise ValueError("model.encoders is empty: give at least one {modality: {name: ...}}")
    built_encoders: dict[str, nn.Module] = {}
    projectors: dict[str, nn.Module] = {}
    predictors: dict[str, nn.Module] = {}
    for modality, spec in encoders.items():
        kwargs = dict(spec)
        if "name" not in kwargs:
            raise ValueError(f"model.encoders.{modality}: missing 'name'")
        name = kwargs.pop("name")
        encoder = build_encoder(modality, name, **kwargs)
        built_encoders[modality] = encoder
        projectors[modality] = _build_head(Projector, "model.projector", in_dim=int(encoder.num_features), **projector)
        if predictor is not None:
            out_dim = projectors[modality].out_dim
            predictors[modality] = _build_head(Predictor, "model.predictor", in_dim=out_dim, **predictor)
    model = MultiViewModel(built_encoders, projectors, predictors)
    model.spec = copy.deepcopy({"encoders": encoders, "projector": projector, "predictor": predictor})
    return model


def _build_head(cls: type[nn.Module], where: str, **kwargs: Any) -> nn.Module:
    try:
        return cls(**kwargs)
    except TypeError as err:
        raise ValueError(f"{where}: {err}") from None


__all__ = ["MultiViewModel", "build_model"]
