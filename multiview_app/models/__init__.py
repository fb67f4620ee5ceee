"""Encoders (registry by modality), projection / prediction heads, the multi-view model, EMA teacher."""
from __future__ import annotations

from .encoders import ENCODERS, Encoder, available_encoders, build_encoder, register_encoder
from .heads import Predictor, Projector
from .model import MultiViewModel, build_model
from .teacher import EMATeacher, cosine_momentum

# the public face (the other names above stay importable for extensions and the trainer)
__all__ = ["ENCODERS", "available_encoders", "build_encoder", "build_model"]
