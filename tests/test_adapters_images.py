"""Image adapters: digits counts and split, image_folder (skip + count, errors), hf_imagefolder, option errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import default_collate

from multiview_app.data.adapters import available_adapters, build_adapter
from multiview_app.data.images.adapters import stratified_split


@pytest.fixture(scope="module")
def digits():
    return build_adapter("digits", {})


def test_registry_lists_image_adapters():
    assert {"digits", "image_folder", "hf_imagefolder"} <= set(available_adapters())
    with pytest.raises(ValueError, match="unknown data adapter 'digts'; available: .*digits"):
        build_adapter("digts", {})


def test_digits_counts_split_and_items(digits):
    train, test = digits.split("train"), digits.split("test")
    assert digits.modality == "image" and digits.splits == ("train", "test")
    assert digits.class_names == [str(i) for i in range(10)]
    assert len(train) + len(test) == 1797
    assert len(test) == 359  # round(0.2 * n_c) per class
    train_src = {train[i]["source"] for i in range(len(train))}
    test_src = {test[i]["source"] for i in range(len(test))}
    assert not train_src & test_src and len(train_src | test_src) == 1797
    labels = train.labels.numpy()
    assert sorted(np.unique(labels).tolist()) == list(range(10))
    counts = np.bincount(test.labels.numpy(), minlength=10)
    assert counts.min() >= 35 and counts.max() <= 37  # stratified
    item = train[3]
    assert item["x"].shape == (3, 32, 32) and item["x"].dtype == torch.uint8
    assert item["index"] == 3 and isinstance(item["label"], int)
    assert torch.equal(item["x"][0], item["x"][1]) and int(item["x"].max()) > 200
    raw = default_collate([train[i] for i in range(4)])
    assert raw["x"].shape == (4, 3, 32, 32) and raw["label"].shape == (4,)


def test_digits_split_is_fixed_and_load_size(digits):
    again = build_adapter("digits", {"load_size": 16})
    assert again.split("test").sources == digits.split("test").sources
    assert again.split("train")[0]["x"].shape == (3, 16, 16)
    with pytest.raises(ValueError, match="has no split 'val'; available: train, test"):
        digits.split("val")


def test_option_errors_name_the_key():
    with pytest.raises(ValueError, match=r"data\.options\.load_sze: unknown option; allowed: load_size, test_fraction"):
        build_adapter("digits", {"load_sze": 32})
    with pytest.raises(ValueError, match=r"data\.options\.load_size: .*greater than or equal to 8 \(got 2\)"):
        build_adapter("digits", {"load_size": 2})
    with pytest.raises(ValueError, match=r"data\.options\.root: Field required"):
        build_adapter("image_folder", {})


def test_stratified_split_is_deterministic_and_disjoint():
    labels = np.repeat(np.arange(3), [10, 5, 1])
    tr, te = stratified_split(labels, 0.2, seed=0)
    tr2, te2 = stratified_split(labels, 0.2, seed=0)
    assert np.array_equal(te, te2) and np.array_equal(tr, tr2)
    assert not set(tr) & set(te) and len(tr) + len(te) == 16
    assert np.bincount(labels[te], minlength=3).tolist() == [2, 1, 0]


def _write_folder(root: Path, classes: dict[str, int], size: tuple[int, int] = (12, 9), corrupt: int = 0) -> None:
    rng = np.random.default_rng(0)
    for name, count in classes.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(count):
            arr = rng.integers(0, 255, size=(size[1], size[0], 3), dtype=np.uint8)
            Image.fromarray(arr).save(root / name / f"img{i}.png")
    first_class = root / next(iter(classes))
    for i in range(corrupt):
        if i % 2 == 0:
            (first_class / f"broken{i}.png").write_bytes(b"not a png at all")
        else:  # a real PNG cut in half: the header reads, decoding fails
            good = (first_class / "img0.png").read_bytes()
            (first_class / f"broken{i}.png").write_bytes(good[: len(good) // 2])


@pytest.mark.parametrize("preload", [True, False])
def test_image_folder_skips_and_counts_corrupt(tmp_path, preload):
    _write_folder(tmp_path, {"cat": 20, "dog": 20}, corrupt=2)
    with pytest.warns(UserWarning, match=r"skipped 2 of 42 unreadable images; first: .*broken0\.png"):
        adapter = build_adapter(
            "image_folder", {"root": str(tmp_path), "load_size": 16, "preload": preload, "max_bad_fraction": 0.1}
        )
    assert adapter.class_names == ["cat", "dog"]
    train, test = adapter.split("train"), adapter.split("test")
    assert len(train) + len(test) == 40 and len(test) == 8
    item = train[0]
    assert item["x"].shape == (3, 16, 16) and item["x"].dtype == torch.uint8
    assert item["source"].endswith(".png") and "broken" not in item["source"]
    assert not any("broken" in src for src in train.sources + test.sources)
    raw = default_collate([test[i] for i in range(len(test))])
    assert raw["x"].shape == (8, 3, 16, 16) and raw["index"].tolist() == list(range(8))


def test_image_folder_mostly_corrupt_errors(tmp_path):
    _write_folder(tmp_path, {"a": 5}, corrupt=3)
    with pytest.raises(ValueError, match=r"3 of 8 images are unreadable .*max_bad_fraction=0.05"):
        build_adapter("image_folder", {"root": str(tmp_path)})
    # a looser threshold accepts it
    with pytest.warns(UserWarning, match="skipped 3 of 8"):
        adapter = build_adapter("image_folder", {"root": str(tmp_path), "max_bad_fraction": 0.5})
    assert len(adapter.split("train")) + len(adapter.split("test")) == 5


def test_image_folder_missing_and_empty(tmp_path):
    with pytest.raises(ValueError, match=r"image folder '.*nope' does not exist"):
        build_adapter("image_folder", {"root": str(tmp_path / "nope")})
    (tmp_path / "empty" / "cls").mkdir(parents=True)
    with pytest.raises(ValueError, match=r"image folder '.*empty' has no images: expected .*<class>/<image>"):
        build_adapter("image_folder", {"root": str(tmp_path / "empty")})


def test_image_folder_uses_train_test_subfolders(tmp_path):
    _write_folder(tmp_path / "train", {"a": 3, "b": 2})
    _write_folder(tmp_path / "test", {"b": 2})
    adapter = build_adapter("image_folder", {"root": str(tmp_path), "load_size": 8})
    assert adapter.class_names == ["a", "b"]
    assert len(adapter.split("train")) == 5 and len(adapter.split("test")) == 2
    assert adapter.split("test").labels.tolist() == [1, 1]
    _write_folder(tmp_path / "test", {"c": 1})
    with pytest.raises(ValueError, match="classes missing from train: c"):
        build_adapter("image_folder", {"root": str(tmp_path)})


def test_hf_imagefolder_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    _write_folder(tmp_path / "data" / "train", {"x": 4, "y": 4})
    _write_folder(tmp_path / "data" / "test", {"x": 2, "y": 2})
    adapter = build_adapter(
        "hf_imagefolder", {"data_dir": str(tmp_path / "data"), "load_size": 8, "cache_dir": str(tmp_path / "cache")}
    )
    assert adapter.class_names == ["x", "y"]
    assert len(adapter.split("train")) == 8 and len(adapter.split("test")) == 4
    assert sorted(adapter.split("test").labels.tolist()) == [0, 0, 1, 1]
    assert adapter.split("train")[0]["x"].shape == (3, 8, 8)
    # without a test folder: the fixed stratified split
    flat = build_adapter("hf_imagefolder", {"data_dir": str(tmp_path / "data" / "train"), "load_size": 8})
    assert len(flat.split("train")) == 6 and sorted(flat.split("test").labels.tolist()) == [0, 1]
    with pytest.raises(ValueError, match="data_dir '.*missing' does not exist"):
        build_adapter("hf_imagefolder", {"data_dir": str(tmp_path / "missing")})


def test_image_folder_lazy_decode_error_names_the_file(tmp_path):
    _write_folder(tmp_path, {"a": 4, "b": 4})
    adapter = build_adapter("image_folder", {"root": str(tmp_path), "preload": False, "load_size": 8})
    train = adapter.split("train")
    assert train[0]["x"].shape == (3, 8, 8)
    Path(train.sources[1]).write_bytes(b"broken later")
    with pytest.raises(ValueError, match=r"image '.*\.png' passed the scan but cannot be decoded"):
        train[1]


def test_digits_val_split_is_held_out_part_of_train_and_reproducible():
    plain = build_adapter("digits", {"load_size": 8})
    with_val = build_adapter("digits", {"load_size": 8, "val_fraction": 0.25})
    again = build_adapter("digits", {"load_size": 8, "val_fraction": 0.25})
    assert plain.splits == ("train", "test") and with_val.splits == ("train", "val", "test")
    sources = {s: set(with_val.split(s).sources) for s in with_val.splits}
    assert sources["train"].isdisjoint(sources["val"]) and sources["val"].isdisjoint(sources["test"])
    assert sources["train"] | sources["val"] == set(plain.split("train").sources)  # val comes out of train only
    assert sources["test"] == set(plain.split("test").sources)  # the test split is untouched
    assert with_val.split("val").sources == again.split("val").sources
    val_labels = with_val.split("val").labels.numpy()
    train_counts = np.bincount(plain.split("train").labels.numpy())
    assert np.bincount(val_labels).tolist() == [int(round(0.25 * c)) for c in train_counts]
    assert set(np.unique(val_labels).tolist()) == set(range(10))  # stratified: every class


def test_val_fraction_too_small_is_an_error():
    with pytest.raises(ValueError, match="val_fraction=0.001"):
        build_adapter("digits", {"load_size": 8, "val_fraction": 0.001})
