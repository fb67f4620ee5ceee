"""Image-text pairs: adapters (``pairs_csv``, ``pairs_hf``, ``pairs_wds``, the embedded default
``digit_captions``), caption tokenizers (``open_clip``, ``minilm``) and the ``pairs`` view policy
(mixed image + caption views), registered on import."""

from . import captions, pairs, shards, views  # noqa: F401  (registration side effects)

__all__ = ["captions", "pairs", "shards", "views"]
