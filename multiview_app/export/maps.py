"""Embedding maps of an export folder (``mvapp plot embeddings``): a 2-D UMAP or t-SNE picture coloured
by a metadata column, and TensorBoard projector files.

Exports larger than ``max_points`` rows are sampled uniformly without replacement with a seeded
generator (the same seed gives the same rows); the count sampled is reported and written to
``map.json``. UMAP needs umap-learn (``pip install 'multiview_app[maps]'``), t-SNE scikit-learn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..fileio import atomic_write_json

METHODS: tuple[str, ...] = ("umap", "tsne")
COLOR_CHOICES: tuple[str, ...] = ("auto", "label", "domain", "subject", "modality", "view", "split")
#: ``--color-by auto`` picks the first of these the export's metadata holds with more than one value
AUTO_ORDER: tuple[str, ...] = ("label", "domain", "subject", "modality", "view")
DEFAULT_MAX_POINTS = 5000
MAX_LEGEND = 20
"""Categories up to which the picture has a legend (more: colours only, a note in map.json)."""


@dataclass
class MapSummary:
    """What ``plot_embeddings`` wrote and from how many rows."""

    export: str
    method: str
    color_by: str | None
    column: str | None
    rows: int
    sampled: int
    seed: int
    categories: int
    png: str
    tensorboard: str | None
    notes: list[str]


def sample_rows(rows: int, max_points: int, seed: int) -> np.ndarray:
    """Sorted row indices: all rows when ``rows <= max_points``, else ``max_points`` drawn without
    replacement by ``np.random.default_rng(seed)``."""
    if max_points < 1:
        raise ValueError(f"--max-points must be >= 1, got {max_points}")
    if rows <= max_points:
        return np.arange(rows)
    return np.sort(np.random.default_rng(seed).choice(rows, size=max_points, replace=False))


def color_column(columns: Sequence[str], table: Any, color_by: str, view_name_column: str | None = None) -> str | None:
    """The metadata column behind ``color_by`` (``label`` -> ``label_name``; ``view`` -> the export's column
    naming each row's view, ``view_name_column`` (``transform``, ``channel``, ``view_name``); an adapter
    column may carry a ``meta_`` prefix); ``auto``: the first of :data:`AUTO_ORDER` with more than one value.
    ValueError naming the available columns when asked for one the export lacks."""
    views = [view_name_column] if view_name_column else ["view_name"]

    def resolve(name: str) -> str | None:
        by_name = {"label": ["label_name", "label"], "view": views}
        candidates = by_name.get(name, [name, f"meta_{name}"])
        return next((c for c in candidates if c in columns), None)

    if color_by != "auto":
        column = resolve(color_by)
        if column is None:
            raise ValueError(
                f"--color-by {color_by}: the export has no such column; its metadata columns: {', '.join(columns)}"
            )
        if column.startswith("label") and set(table.column("label").to_pylist()) <= {-1}:
            raise ValueError(f"--color-by {color_by}: the export's rows are unlabelled (label -1)")
        return column
    for name in AUTO_ORDER:
        column = resolve(name)
        if column is None:
            continue
        if name == "label" and set(table.column("label").to_pylist()) <= {-1}:
            continue
        if len(set(table.column(column).to_pylist())) > 1:
            return column
    return None


def project_2d(points: np.ndarray, method: str, seed: int) -> np.ndarray:
    """``(m, dim)`` -> ``(m, 2)`` by UMAP (umap-learn) or t-SNE (scikit-learn), seeded."""
    m = points.shape[0]
    if m < 3:
        raise ValueError(f"a 2-D map needs at least 3 points, the export gives {m}")
    points = np.asarray(points, dtype=np.float32)
    if method == "umap":
        try:
            import umap
        except ImportError:
            raise ValueError(
                "--method umap needs umap-learn: pip install 'multiview_app[maps]' (or use --method tsne)"
            ) from None
        reducer = umap.UMAP(n_components=2, n_neighbors=min(15, m - 1), random_state=seed, n_jobs=1)
        return np.asarray(reducer.fit_transform(points), dtype=np.float64)
    if method == "tsne":
        from sklearn.manifold import TSNE

        perplexity = float(min(30.0, max(1.0, (m - 1) / 3)))
        return TSNE(n_components=2, perplexity=perplexity, init="pca", random_state=seed).fit_transform(points)
    raise ValueError(f"--method: expected one of {', '.join(METHODS)}, got {method!r}")


def _draw(coords: np.ndarray, values: list[Any] | None, title: str, path: Path, column: str | None) -> int:
    """Scatter ``coords (m, 2)`` coloured by ``values``; returns the number of categories."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 6.5))
    categories = 0
    if values is None:
        ax.scatter(coords[:, 0], coords[:, 1], s=6, alpha=0.7, color="tab:blue", linewidths=0)
    else:
        names = sorted({str(v) for v in values}, key=lambda s: (len(s), s))
        categories = len(names)
        codes = np.array([names.index(str(v)) for v in values])
        cmap = plt.get_cmap("tab10" if categories <= 10 else "tab20" if categories <= 20 else "turbo")
        colors = cmap(codes % 20 if categories <= 20 else codes / max(categories - 1, 1))
        ax.scatter(coords[:, 0], coords[:, 1], s=6, alpha=0.7, c=colors, linewidths=0)
        if categories <= MAX_LEGEND:
            handles = [
                plt.Line2D([], [], marker="o", linestyle="", color=cmap(i % 20 if categories <= 20 else 0), label=name)
                for i, name in enumerate(names)
            ]
            ax.legend(handles=handles, title=column, fontsize=7, markerscale=1.2, loc="best", frameon=False)
    ax.set_title(title, fontsize=9)
    ax.set_xticks([])
    ax.set_yticks([])
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return categories


def write_projector(log_dir: Path, points: np.ndarray, table: Any, columns: list[str], tag: str) -> Path:
    """TensorBoard projector files (``add_embedding``: tensors, metadata with ``columns`` as header)."""
    import torch
    from torch.utils.tensorboard import SummaryWriter

    data = {c: [str(v) for v in table.column(c).to_pylist()] for c in columns}
    metadata = [[data[c][i] for c in columns] for i in range(points.shape[0])]
    writer = SummaryWriter(log_dir=str(log_dir))
    try:
        if len(columns) == 1:
            writer.add_embedding(
                torch.from_numpy(np.ascontiguousarray(points)), metadata=[m[0] for m in metadata], tag=tag
            )
        else:
            writer.add_embedding(
                torch.from_numpy(np.ascontiguousarray(points)), metadata=metadata, metadata_header=columns, tag=tag
            )
    finally:
        writer.close()
    return log_dir


def plot_embeddings(
    export_dir: str | Path,
    out_dir: str | Path | None = None,
    *,
    method: str = "umap",
    color_by: str = "auto",
    max_points: int = DEFAULT_MAX_POINTS,
    seed: int = 0,
    tensorboard: str | Path | None = None,
) -> MapSummary:
    """Map the rows of export ``export_dir``: ``<out_dir>/embeddings_<method>.png`` (+ ``map.json``) and,
    with ``tensorboard``, projector files there. ``out_dir`` defaults to ``<export_dir>/maps``."""
    from .export import load_embeddings

    if method not in METHODS:
        raise ValueError(f"--method: expected one of {', '.join(METHODS)}, got {method!r}")
    if color_by not in COLOR_CHOICES:
        raise ValueError(f"--color-by: expected one of {', '.join(COLOR_CHOICES)}, got {color_by!r}")
    export_dir = Path(export_dir)
    embeddings, table, manifest = load_embeddings(export_dir)
    out = Path(out_dir) if out_dir is not None else export_dir / "maps"
    rows = int(manifest["rows"])
    index = sample_rows(rows, max_points, seed)
    points = np.asarray(embeddings[index], dtype=np.float32)
    sampled = table.take(index)
    columns = [c for c in table.column_names]
    column = color_column(columns, table, color_by, manifest.get("view_column"))
    notes = []
    if column is None:
        notes.append(
            "no metadata column with more than one value to colour by (label, domain, subject, modality, view)"
        )
    if len(index) < rows:
        notes.append(f"sampled {len(index)} of {rows} rows (seed {seed}, uniform without replacement)")
    if not np.isfinite(points).all():
        raise ValueError(f"{export_dir}: the sampled embeddings hold non-finite values")
    coords = project_2d(points, method, seed)
    values = sampled.column(column).to_pylist() if column else None
    title = (
        f"{method.upper()} of {manifest.get('features', '?')} embeddings, {len(index)} of {rows} rows "
        f"({manifest.get('views', '?')}, split {manifest.get('split', '?')})\n{manifest.get('run', export_dir)}"
    )
    png_path = out / f"embeddings_{method}.png"
    categories = _draw(coords, values, title, png_path, column)
    if categories > MAX_LEGEND:
        notes.append(f"{categories} categories of {column}: colours only, no legend")
    board = None
    if tensorboard is not None:
        meta_columns = [c for c in ("label_name", "split", "modality", "item_id") if c in columns]
        meta_columns += [c for c in columns if c not in meta_columns and c not in ("index", "view_index", "label")]
        board = str(write_projector(Path(tensorboard), points, sampled, meta_columns, tag=export_dir.name or "export"))
    summary = MapSummary(
        str(export_dir), method, color_by, column, rows, int(len(index)), seed, categories, str(png_path), board, notes
    )
    atomic_write_json(out / "map.json", asdict(summary))
    return summary


__all__ = [
    "COLOR_CHOICES",
    "METHODS",
    "MapSummary",
    "color_column",
    "plot_embeddings",
    "project_2d",
    "sample_rows",
    "write_projector",
]
