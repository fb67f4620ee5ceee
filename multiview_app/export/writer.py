"""Streaming, atomic shard files of an export folder.

One shard = a contiguous range of rows. :class:`ShardWriter` appends row blocks to temporary
files (hidden names ending in ``.tmp``) and renames them on :meth:`ShardWriter.commit`; on an
error :meth:`ShardWriter.abort` removes them. Memory is bounded by one row block plus
``flush_rows`` buffered metadata rows (kept as Python lists: one Arrow table per flush, since
thousands of small Arrow tables cost far more memory than their contents).

File formats:

- ``npy``: ``embeddings[-SSSSS-of-NNNNN].npy`` float32 ``(rows, dim)`` written with a ``.npy``
  header then raw rows (so it opens with ``np.load(mmap_mode="r")``), plus a row-aligned
  ``metadata-SSSSS-of-NNNNN.parquet`` per shard that :func:`merge_parquet` joins into one
  ``metadata.parquet`` at the end;
- ``parquet``: ``embeddings[-SSSSS-of-NNNNN].parquet`` holding the metadata columns plus an
  ``embedding`` column ``list<float32>`` (readable by ``datasets.load_dataset("parquet", ...)``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .options import FILE_FORMATS

FileFormat = Literal["npy", "parquet"]
TMP_SUFFIX = ".tmp"
EMBEDDING_COLUMN = "embedding"
DTYPE = np.dtype("<f4")


def shard_file(stem: str, index: int, count: int, suffix: str) -> str:
    """``stem.suffix`` when there is one shard, else ``stem-SSSSS-of-NNNNN.suffix``."""
    return f"{stem}.{suffix}" if count == 1 else f"{stem}-{index:05d}-of-{count:05d}.{suffix}"


def tmp_path(path: Path) -> Path:
    """The hidden temporary name ``path`` is written under before the rename."""
    return path.with_name(f".{path.name}{TMP_SUFFIX}")


def _fsync_rename(tmp: Path, final: Path) -> None:
    with open(tmp, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(tmp, final)


class ShardWriter:
    """Write ``rows`` rows (float32, width fixed by the first block) and their metadata to one shard.

    ``embeddings`` is the final file; ``metadata`` the final row-aligned metadata file (``npy``
    format) or None (``parquet`` format: metadata columns live next to the ``embedding`` column).
    """

    def __init__(
        self,
        embeddings: Path,
        metadata: Path | None,
        rows: int,
        file_format: FileFormat,
        flush_rows: int = 8192,
        column_types: dict[str, pa.DataType] | None = None,
    ) -> None:
        if file_format not in FILE_FORMATS:
            raise ValueError(f"format: expected one of {', '.join(FILE_FORMATS)}, got {file_format!r}")
        if (metadata is None) != (file_format == "parquet"):
            raise ValueError("a separate metadata file is used with the npy format only")
        self.embeddings, self.metadata, self.rows, self.file_format = embeddings, metadata, rows, file_format
        self.flush_rows = flush_rows
        self.column_types = dict(column_types or {})
        self.written = 0
        self.dim: int | None = None
        self._npy: Any = None
        self._parquet: pq.ParquetWriter | None = None
        self._schema: pa.Schema | None = None
        self._columns: dict[str, list[Any]] = {}  # buffered as Python lists: one Arrow table per flush
        self._rows: list[np.ndarray] = []  # parquet format: buffered embedding rows
        self._buffered = 0

    @property
    def tmp_files(self) -> list[Path]:
        return [tmp_path(p) for p in (self.embeddings, self.metadata) if p is not None]

    def append(self, rows: np.ndarray, columns: dict[str, list[Any]]) -> None:
        """Append ``rows (m, dim)`` and their metadata ``columns`` (each a list of length m)."""
        if rows.ndim != 2:
            raise ValueError(f"expected rows of shape (m, dim), got {rows.shape}")
        m = rows.shape[0]
        bad = {k: len(v) for k, v in columns.items() if len(v) != m}
        if bad:
            raise ValueError(f"metadata columns {bad} do not have the {m} rows of the block")
        if self.dim is None:
            self.dim = int(rows.shape[1])
        elif rows.shape[1] != self.dim:
            raise ValueError(f"row width changed from {self.dim} to {rows.shape[1]} within {self.embeddings.name}")
        if self.written + m > self.rows:
            raise ValueError(f"{self.embeddings.name}: {self.written + m} rows written, planned {self.rows}")
        rows = np.ascontiguousarray(rows, dtype=DTYPE)
        if self._columns and set(columns) != set(self._columns):
            raise ValueError(
                f"metadata columns changed within {self.embeddings.name}: {sorted(self._columns)} -> {sorted(columns)}"
            )
        for key, values in columns.items():
            self._columns.setdefault(key, []).extend(values)
        if self.file_format == "npy":
            self._write_npy(rows)
        else:
            self._rows.append(rows)
        self._buffered += m
        self.written += m
        if self._buffered >= self.flush_rows:
            self._flush()

    def _write_npy(self, rows: np.ndarray) -> None:
        if self._npy is None:
            self._npy = open(tmp_path(self.embeddings), "wb")
            header = {
                "descr": np.lib.format.dtype_to_descr(DTYPE),
                "fortran_order": False,
                "shape": (self.rows, self.dim),
            }
            np.lib.format.write_array_header_1_0(self._npy, header)
        self._npy.write(rows.tobytes())

    def _flush(self) -> None:
        if not self._buffered:
            return
        table = pa.table(
            {key: pa.array(values, type=self.column_types.get(key)) for key, values in self._columns.items()}
        )
        if self.file_format == "parquet":
            flat = np.concatenate(self._rows).reshape(-1)
            offsets = np.arange(0, flat.size + 1, self.dim, dtype=np.int32)
            table = table.append_column(EMBEDDING_COLUMN, pa.ListArray.from_arrays(offsets, pa.array(flat)))
        self._columns, self._rows, self._buffered = {}, [], 0
        target = self.metadata if self.file_format == "npy" else self.embeddings
        if self._parquet is None:
            self._schema = table.schema
            self._parquet = pq.ParquetWriter(tmp_path(target), self._schema)
        try:
            table = table.cast(self._schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as err:
            raise ValueError(
                f"{target.name}: metadata column types changed between row blocks "
                f"({self._schema} -> {table.schema}): {err}"
            ) from None
        self._parquet.write_table(table)

    def commit(self) -> None:
        """Check the row count, close, fsync and rename the temporary files into place (metadata first,
        so an existing final embeddings file means a finished shard)."""
        if self.written != self.rows or self.dim is None:
            raise ValueError(f"{self.embeddings.name}: wrote {self.written} rows, planned {self.rows}")
        self._flush()
        self._close()
        if self.metadata is not None:
            _fsync_rename(tmp_path(self.metadata), self.metadata)
        _fsync_rename(tmp_path(self.embeddings), self.embeddings)

    def _close(self) -> None:
        if self._npy is not None:
            self._npy.close()
            self._npy = None
        if self._parquet is not None:
            self._parquet.close()
            self._parquet = None

    def abort(self) -> None:
        """Close and delete the temporary files (nothing final is touched)."""
        try:
            self._close()
        except OSError:
            pass  # the write error that got us here is the one to report (close flushes and may fail again)
        finally:
            for path in self.tmp_files:
                path.unlink(missing_ok=True)

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            self.abort()


def merge_parquet(parts: list[Path], target: Path) -> int:
    """Concatenate parquet files (row order kept, one record batch at a time) into ``target``
    atomically; the first part's schema wins. Returns the number of rows."""
    tmp = tmp_path(target)
    rows = 0
    writer: pq.ParquetWriter | None = None
    try:
        for part in parts:
            source = pq.ParquetFile(part)
            if writer is None:
                writer = pq.ParquetWriter(tmp, source.schema_arrow)
            for batch in source.iter_batches():
                writer.write_table(pa.Table.from_batches([batch]).cast(writer.schema))
                rows += batch.num_rows
        if writer is None:
            raise ValueError(f"no metadata parts to merge into {target}")
        writer.close()
        writer = None
        _fsync_rename(tmp, target)
    finally:
        if writer is not None:
            writer.close()
        tmp.unlink(missing_ok=True)
    return rows
