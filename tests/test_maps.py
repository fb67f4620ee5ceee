"""``mvapp plot embeddings``: a seeded sample of an export mapped to 2-D (t-SNE; UMAP where umap-learn is
installed), coloured by a metadata column, TensorBoard projector files with metadata, the sample size reported."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _train_helpers import tiny_config

from multiview_app.cli import main
from multiview_app.export import export_embeddings, load_embeddings, maps, plot_cli
from multiview_app.train.trainer import train


@pytest.fixture(scope="module")
def digits_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("maps")
    train(tiny_config(root / "runs", "digits", train={"max_steps": 2}))
    export_embeddings(root / "runs" / "digits", root / "export", split="test", progress=False)
    return root / "export"


def test_cli_choices_equal_the_modules() -> None:
    assert plot_cli.METHODS == maps.METHODS and plot_cli.COLOR_CHOICES == maps.COLOR_CHOICES
    assert plot_cli.DEFAULT_MAX_POINTS == maps.DEFAULT_MAX_POINTS


def test_sample_is_seeded_sorted_and_without_repeats() -> None:
    first = maps.sample_rows(1000, 100, seed=3)
    assert len(set(first.tolist())) == 100 and np.all(np.diff(first) > 0)
    np.testing.assert_array_equal(first, maps.sample_rows(1000, 100, seed=3))
    assert not np.array_equal(first, maps.sample_rows(1000, 100, seed=4))
    np.testing.assert_array_equal(maps.sample_rows(50, 100, seed=0), np.arange(50))


def test_map_png_and_projector_files_of_a_sample(digits_export: Path, tmp_path: Path) -> None:
    rows = load_embeddings(digits_export)[2]["rows"]
    summary = maps.plot_embeddings(
        digits_export, tmp_path / "map", method="tsne", max_points=120, seed=1, tensorboard=tmp_path / "tb"
    )
    assert (summary.rows, summary.sampled, summary.column, summary.categories) == (rows, 120, "label_name", 10)
    assert Path(summary.png).stat().st_size > 10_000 and Path(summary.png).name == "embeddings_tsne.png"
    written = json.loads((tmp_path / "map" / "map.json").read_text())
    assert written["sampled"] == 120 and f"sampled 120 of {rows} rows (seed 1" in written["notes"][0]
    assert "embeddings" in (tmp_path / "tb" / "projector_config.pbtxt").read_text()
    metadata = next((tmp_path / "tb").rglob("metadata.tsv")).read_text().splitlines()
    tensors = next((tmp_path / "tb").rglob("tensors.tsv")).read_text().splitlines()
    assert metadata[0].split("\t")[:2] == ["label_name", "split"] and len(metadata) == 121 and len(tensors) == 120
    embeddings, table, _ = load_embeddings(digits_export)
    picked = maps.sample_rows(rows, 120, seed=1)
    np.testing.assert_allclose(np.array(tensors[0].split("\t"), dtype=np.float32), embeddings[picked[0]], rtol=1e-6)
    assert metadata[1].split("\t")[0] == table.column("label_name")[int(picked[0])].as_py()


def test_color_by_names_what_the_export_holds(digits_export: Path, tmp_path: Path) -> None:
    with pytest.raises(
        ValueError,
        match=r"--color-by subject: the export has no such column; its metadata columns: "
        r"item_id, split, index, transform",
    ):
        maps.plot_embeddings(digits_export, tmp_path, method="tsne", color_by="subject", max_points=50)
    summary = maps.plot_embeddings(digits_export, tmp_path, method="tsne", color_by="modality", max_points=50)
    assert summary.column == "modality" and summary.categories == 1
    summary = maps.plot_embeddings(digits_export, tmp_path, method="tsne", color_by="view", max_points=50)
    assert summary.column == "transform"  # --color-by view: the column naming each row's view


def test_cli_maps_a_run_after_exporting_it(digits_export: Path, tmp_path: Path, capsys) -> None:
    run = Path(json.loads((digits_export / "manifest.json").read_text())["run"])
    assert (
        main(
            [
                "plot",
                "embeddings",
                "--run",
                str(run),
                "--split",
                "test",
                "--out",
                str(tmp_path / "m"),
                "--method",
                "tsne",
                "--max-points",
                "80",
                "--seed",
                "2",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "mapped 80 of" in out and "seed 2" in out and "coloured by label_name" in out
    assert (tmp_path / "m" / "embeddings_tsne.png").is_file() and (
        tmp_path / "m" / "export" / "manifest.json"
    ).is_file()
    assert main(["plot", "embeddings", "--run", str(run)]) == 2  # --run needs --out


@pytest.mark.slow
def test_umap_map(digits_export: Path, tmp_path: Path) -> None:
    pytest.importorskip("umap", reason="umap-learn not installed (pip install 'multiview_app[maps]')")
    summary = maps.plot_embeddings(digits_export, tmp_path, method="umap", max_points=100, seed=0)
    assert summary.sampled == 100 and Path(summary.png).name == "embeddings_umap.png" and Path(summary.png).is_file()
