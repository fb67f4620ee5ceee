"""Local Hugging Face ``datasets`` folders, read offline, for the adapters built on them
(``hf_imagefolder`` images, ``pairs_hf`` image-text pairs).

One place decides how a folder is opened (``save_to_disk`` output via ``load_from_disk``, else the
packaged ``imagefolder`` builder with ``data_dir``: nothing is fetched from the Hub), turns any
failure into one error naming the adapter and the folder, requires a ``train`` split, and keeps
image columns undecoded (``bytes`` / ``path``) so the adapters decode with their own
skip-and-count routine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def load_local_splits(
    path: Path,
    *,
    adapter: str,
    image_column: str = "image",
    cache_dir: str | None = None,
    save_to_disk: bool = False,
    expected: str = "an imagefolder layout",
) -> dict[str, Any]:
    """Split name -> ``datasets.Dataset`` of the local folder ``path``.

    ``save_to_disk``: also accept a folder written by ``Dataset(Dict).save_to_disk`` (a lone
    ``Dataset`` becomes the ``train`` split). ``expected`` describes the accepted layouts in the error.
    Raises ``ValueError`` naming ``adapter`` and ``path`` when the folder cannot be loaded or has no
    ``train`` split.
    """
    import datasets

    try:
        if save_to_disk and ((path / "dataset_dict.json").is_file() or (path / "state.json").is_file()):
            loaded = datasets.load_from_disk(str(path))
            if isinstance(loaded, datasets.Dataset):
                loaded = datasets.DatasetDict({"train": loaded})
        else:
            loaded = datasets.load_dataset("imagefolder", data_dir=str(path), cache_dir=cache_dir)
    except Exception as err:  # datasets raises many types; one clear error
        raise ValueError(
            f"{adapter} could not load '{path}' ({type(err).__name__}: {err}); expected {expected} (no network is used)"
        ) from err
    if "train" not in loaded:
        raise ValueError(f"{adapter} '{path}': no 'train' split (got {', '.join(loaded)})")
    splits = {}
    for name, ds in loaded.items():
        if image_column in ds.column_names and isinstance(ds.features[image_column], datasets.Image):
            ds = ds.cast_column(image_column, datasets.Image(decode=False))
        splits[name] = ds
    return splits
