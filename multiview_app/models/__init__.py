"""Encoders (registry by modality), projection / prediction heads, the multi-view model, EMA teacher.

The public face: :func:`build_encoder` / :func:`available_encoders` (the ``ENCODERS`` registry, keys
``"<modality>/<name>"``; ``image`` also accepts any timm model name) and :func:`build_model` (encoders +
projectors + optional predictors as one :class:`MultiViewModel`); :class:`Encoder` is the base of a new
encoder (register it with ``register_encoder``).
"""

from __future__ import annotations

from .encoders import ENCODERS, Encoder, available_encoders, build_encoder, register_encoder  # noqa: F401 - importable for new encoders
from .heads import Predictor, Projector, ViewBatchNorm1d  # noqa: F401
from .model import MultiViewModel, build_model
from .teacher import EMATeacher, cosine_momentum  # noqa: F401

__all__ = ["ENCODERS", "Encoder", "MultiViewModel", "available_encoders", "build_encoder", "build_model"]
