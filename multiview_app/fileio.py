"""Atomic file writes (temp file in the same folder + ``os.replace``) that honour the user's umask.

``tempfile.mkstemp`` creates files with mode 0600; every helper here gives the finished file the
mode a plain ``open(path, "w")`` would have (``0o666 & ~umask``), so run folders and caches are
readable by whoever the user's umask allows. Shared by ``train/`` (run folders) and ``data/``
(prepared caches, synthetic recordings).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO


def current_umask() -> int:
    """The process umask (read from /proc when possible: ``os.umask`` can only be read by setting it)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def default_file_mode() -> int:
    """Mode of a newly created regular file under the current umask (``0o666 & ~umask``)."""
    return 0o666 & ~current_umask()


def temp_sibling(path: Path, suffix: str = "") -> Path:
    """An empty temp file next to ``path`` (same suffix when given) with the umask's file mode."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix or ".tmp", dir=path.parent)
    os.fchmod(fd, default_file_mode())
    os.close(fd)
    return Path(tmp)


def atomic_write_bytes(path: str | Path, write: Callable[[BinaryIO], Any], suffix: str = "") -> Path:
    """Call ``write(handle)`` on a temp file next to ``path``, fsync, then ``os.replace`` it into place
    (a crash or a full disk leaves the old ``path`` untouched and no temp file behind)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(path, suffix)
    try:
        with open(tmp, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def atomic_write_with(path: str | Path, write_path: Callable[[Path], Any], suffix: str = "") -> Path:
    """Call ``write_path(tmp)`` for a library that writes a file by name (safetensors, ONNX, h5py, ...; some
    recreate it with mode 0600), give ``tmp`` the umask's file mode, then ``os.replace`` it into ``path``
    (a failure leaves the old ``path`` untouched and no temp file behind)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(path, suffix)
    try:
        write_path(tmp)
        os.chmod(tmp, default_file_mode())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return atomic_write_bytes(path, lambda handle: handle.write(text.encode("utf-8")))


def atomic_write_json(path: str | Path, obj: Any) -> Path:
    """JSON (indented) written atomically."""
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def kept_json(path: str | Path, key: Any, compute: Callable[[], Any], field: str = "value") -> Any:
    """``compute()``'s JSON-able result, kept in ``path`` as ``{"key": key, field: result}`` (atomic) and
    reused while the kept ``key`` equals ``key``; numpy values are written as plain numbers and lists, and the
    result is returned as read back, so a kept and a fresh result are the same objects."""
    path = Path(path)
    if path.is_file():
        kept = json.loads(path.read_text())
        if kept.get("key") == key and field in kept:
            return kept[field]
    text = json.dumps({"key": key, field: compute()}, indent=1, default=plain_json)
    atomic_write_text(path, text + "\n")
    return json.loads(text)[field]


def plain_json(value: Any) -> Any:
    """JSON form of numpy scalars and arrays (``json.dumps(default=...)``)."""
    import numpy as np

    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def sha256_file(path: str | Path, chunk: int = 1 << 22) -> str:
    """Hex sha256 of a file's bytes (read in ``chunk``-byte blocks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


__all__ = [
    "atomic_write_bytes",
    "atomic_write_json",
    "kept_json",
    "plain_json",
    "atomic_write_text",
    "atomic_write_with",
    "current_umask",
    "default_file_mode",
    "sha256_file",
    "temp_sibling",
]
