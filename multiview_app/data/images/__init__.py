"""Image data: adapters (``digits``, ``image_folder``, ``hf_imagefolder``), batched augmentation
stacks (``simclr``, ``byol_global1``, ``byol_global2``, ``test``) and the ``augment`` view policy
(registered on import)."""

from . import adapters, views  # noqa: F401  (registration side effects)

__all__ = ["adapters", "views"]
