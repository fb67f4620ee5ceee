"""Image domains: digit-domains generator, domainnet adapter, domains view policy, bad input, and the
guarantee that the held-out domain is never opened during pretraining."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import default_collate

from multiview_app.data.adapters import build_adapter
from multiview_app.data.domains import adapter as domain_adapter
from multiview_app.data.domains.synth import DIGIT_DOMAINS, synth_domains
from multiview_app.data.views import build_view_policy

LIMIT = 100  # first 100 digits: 10 per class, 8 train / 2 test per class and domain


@pytest.fixture(scope="module")
def digit_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("digit_domains")
    synth_domains(root, seed=0, limit=LIMIT)
    return root


def copy_root(root: Path, tmp_path: Path) -> Path:
    out = tmp_path / "copy"
    shutil.copytree(root, out)
    return out


def options(root: Path, **extra) -> dict:
    return {"root": str(root), "load_size": 16, "decode_workers": 0, **extra}


def tiny_three_domain_config(root: Path, tmp_path: Path, loss: dict, **data_options) -> Path:
    """YAML config: clean / inverted / sketch, k = 2, tiny small_cnn, 2 steps."""
    import yaml

    config = tmp_path / "tiny.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "data": {
                    "adapter": "domainnet",
                    "options": options(root, domains=["clean", "inverted", "sketch"], val_fraction=0.2, **data_options),
                },
                "views": {"policy": "domains", "k": 2, "options": {"image_size": 16}},
                "model": {
                    "encoders": {"image": {"name": "small_cnn", "width": 4, "num_features": 8}},
                    "projector": {"hidden_dim": 8, "out_dim": 8},
                },
                "loss": loss,
                "train": {"max_steps": 2, "batch_size": 8, "log_every": 1},
                "eval": {"linear_probe": False, "batch_size": 128},
            }
        )
    )
    return config


# ------------------------------------------------------------------ generator
def test_synth_layout_split_files_and_determinism(digit_root: Path, tmp_path: Path) -> None:
    assert sorted(p.name for p in digit_root.iterdir() if p.is_dir()) == sorted(DIGIT_DOMAINS)
    tests = {}
    for domain in DIGIT_DOMAINS:
        train = (digit_root / f"{domain}_train.txt").read_text().split("\n")[:-1]
        test = (digit_root / f"{domain}_test.txt").read_text().split("\n")[:-1]
        assert len(train) + len(test) == LIMIT and len(test) == 20
        for line in train + test:
            rel, label = line.split()
            assert rel.startswith(f"{domain}/{label}/") and (digit_root / rel).is_file()
        tests[domain] = {line.split()[0].rsplit("_", 1)[1] for line in test}
    # one digit-level split for all domains: a held-out test digit is in no domain's train split
    assert all(t == tests["clean"] for t in tests.values())
    again = tmp_path / "again"
    synth_domains(again, seed=0, limit=30, domains=("sketch", "color"))
    other = tmp_path / "other"
    synth_domains(other, seed=1, limit=30, domains=("sketch", "color"))
    rel = "color/0/color_0000.jpg"
    assert (again / rel).read_bytes() == (digit_root / rel).read_bytes()
    assert (other / rel).read_bytes() != (digit_root / rel).read_bytes()


def test_synth_domains_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from multiview_app.cli import main

    assert main(["data", "synth-domains", "--out", str(tmp_path / "x"), "--limit", "5"]) == 2
    err = capsys.readouterr().err
    assert "--limit 5" in err and err.count("\n") == 1 and "Traceback" not in err
    assert main(["data", "synth-domains", "--out", str(tmp_path / "y"), "--limit", "20"]) == 0
    assert "wrote 120 images in 6 domains" in capsys.readouterr().out


# ------------------------------------------------------------------ adapter
def test_adapter_splits_and_domain_tuples(digit_root: Path) -> None:
    adapter = build_adapter("domainnet", options(digit_root, holdout="sketch"))
    assert adapter.domains == sorted(DIGIT_DOMAINS)
    assert adapter.seen_domains == ["clean", "color", "inverted", "texture", "warped"]
    assert adapter.class_names == [str(c) for c in range(10)]
    assert not any(s.startswith("sketch") for s in adapter.splits)
    tuples = adapter.split("train")
    assert len(tuples) == 5 * 80
    for j in (0, 123, 399):
        item = tuples[j]
        assert item["x"].shape == (5, 3, 16, 16) and item["x"].dtype == torch.uint8
        for d, domain in enumerate(adapter.seen_domains):  # every view: an image of the item's class in that domain
            part = adapter.split(f"{domain}/train")
            same_class = part.images[part.labels == item["label"]]
            assert (same_class == item["x"][d]).flatten(1).all(1).any()
        assert torch.equal(tuples[j]["x"], item["x"])  # deterministic partners
    assert len(adapter.split("test")) == 5 * 20
    assert adapter.split("clean/test")[0]["domain"] == "clean"


def test_partners_redrawn_every_epoch_seeded_and_resumable(digit_root: Path, tmp_path: Path, monkeypatch) -> None:
    """The k partner images of an item are drawn afresh every epoch (seeded by (pair_seed, epoch, j)),
    the trainer sets the epoch before each epoch's loader, and a resumed run redraws the same ones."""
    from safetensors.torch import load_file

    from multiview_app.config import load_config
    from multiview_app.train.trainer import train

    tuples = build_adapter("domainnet", options(digit_root, holdout="sketch")).split("train")
    items = range(0, 400, 7)
    first = [tuples[j]["x"] for j in items]
    tuples.set_epoch(1)
    second = [tuples[j]["x"] for j in items]
    changed = [not torch.equal(a, b) for a, b in zip(first, second)]
    assert sum(changed) > len(changed) // 2  # most items get other partners (10 candidates per class and domain)
    for j, a, b in zip(items, first, second):
        anchor = tuples.domains.index(tuples[j]["domain"])
        assert torch.equal(a[anchor], b[anchor])  # the anchor image itself stays
    again = build_adapter("domainnet", options(digit_root, holdout="sketch")).split("train")
    again.set_epoch(1)
    assert all(torch.equal(again[j]["x"], b) for j, b in zip(items, second))  # reproducible
    tuples.set_epoch(0)
    assert all(torch.equal(tuples[j]["x"], a) for j, a in zip(items, first))

    # the trainer: 3 seen domains x 80 images / 64 per batch = 3 steps per epoch; 7 steps = epochs 0, 1, 2
    epochs: list[int] = []
    real_set_epoch = domain_adapter.DomainTuples.set_epoch

    def recording(self, epoch: int) -> None:
        epochs.append(epoch)
        real_set_epoch(self, epoch)

    monkeypatch.setattr(domain_adapter.DomainTuples, "set_epoch", recording)
    config = tiny_three_domain_config(digit_root, tmp_path, {"name": "infonce_pwe"})
    section = ["train.max_steps=7", "train.batch_size=64", "train.checkpoint_every=2", f"output.runs_dir={tmp_path}"]
    full = train(load_config(config, section, name="full"))
    assert epochs == [0, 1, 2]

    def crash(step: int, record: dict | None) -> None:
        if step == 5:
            raise RuntimeError("simulated crash")

    epochs.clear()
    crashed = load_config(config, section, name="crashed")
    with pytest.raises(RuntimeError, match="simulated crash"):
        train(crashed, callbacks=[crash])
    epochs.clear()
    resumed = train(crashed, resume="latest")  # from the step-4 checkpoint: epoch 1, micro-batch 1
    assert epochs == [1, 2]
    a, b = load_file(str(full.run_dir / "model.safetensors")), load_file(str(resumed.run_dir / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)


def test_loading_does_not_touch_the_global_rng(digit_root: Path) -> None:
    """Model init after the adapter must not depend on which domains were decoded."""
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    build_adapter("domainnet", options(digit_root, holdout="sketch")).split("train")
    assert torch.equal(torch.rand(3), expected)


def test_fallback_split_is_stratified_and_deterministic(digit_root: Path, tmp_path: Path) -> None:
    root = copy_root(digit_root, tmp_path)
    for f in root.glob("*_t*.txt"):
        f.unlink()
    a = build_adapter("domainnet", options(root, domains=["clean", "inverted"]))
    b = build_adapter("domainnet", options(root, domains=["clean", "inverted"]))
    train, test = a.split("clean/train"), a.split("clean/test")
    assert len(train) == 80 and len(test) == 20
    assert np.bincount(test.labels.numpy()).tolist() == [2] * 10
    assert b.split("clean/test").sources == test.sources
    c = build_adapter("domainnet", options(root, domains=["clean", "inverted"], split_seed=3))
    assert c.split("clean/test").sources != test.sources


def test_view_policy_domains(digit_root: Path) -> None:
    adapter = build_adapter("domainnet", options(digit_root, holdout="sketch"))
    raw = default_collate([adapter.split("train")[i] for i in range(6)])
    policy = build_view_policy("domains", 5, {"image_size": 16}, adapter)
    views = policy.train_views(raw, torch.Generator().manual_seed(0))
    assert views.view_names == adapter.seen_domains and len(views.views) == 5
    assert views.views[0].shape == (6, 3, 16, 16) and views.views[0].dtype == torch.float32
    again = policy.train_views(raw, torch.Generator().manual_seed(0))
    assert all(torch.equal(x, y) for x, y in zip(views.views, again.views))
    three = build_view_policy("domains", 3, {"image_size": 16}, adapter)
    names = {tuple(three.train_views(raw, torch.Generator().manual_seed(s)).view_names) for s in range(8)}
    assert len(names) > 1 and all(len(n) == 3 and set(n) <= set(adapter.seen_domains) for n in names)
    single = policy.eval_views(default_collate([adapter.split("clean/test")[i] for i in range(4)]))
    assert single.view_names == ["test"] and single.views[0].shape == (4, 3, 16, 16)
    per_domain = policy.eval_views(raw)
    assert per_domain.view_names == adapter.seen_domains


# ------------------------------------------------------------------ bad input
def test_bad_input_errors(digit_root: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"domain folder\(s\) missing .*: nope"):
        build_adapter("domainnet", options(digit_root, domains=["clean", "nope"]))
    with pytest.raises(ValueError, match="holdout 'paint' is not a domain"):
        build_adapter("domainnet", options(digit_root, holdout="paint"))
    with pytest.raises(ValueError, match="mvapp data synth-domains"):
        build_adapter("domainnet", options(tmp_path / "missing"))
    adapter = build_adapter("domainnet", options(digit_root, domains=["clean", "inverted", "sketch"], holdout="sketch"))
    with pytest.raises(ValueError, match=r"views.k = 3 but only 2 seen domain\(s\)"):
        build_view_policy("domains", 3, {}, adapter)
    with pytest.raises(ValueError, match="holdout and adapt are both 'sketch'"):
        build_adapter("domainnet", options(digit_root, holdout="sketch", adapt="sketch"))

    root = copy_root(digit_root, tmp_path)
    shutil.rmtree(root / "color" / "7")
    with pytest.raises(ValueError, match=r"class folders differ .*color lacks \['7'\].*intersect_classes"):
        build_adapter("domainnet", options(root))
    inter = build_adapter("domainnet", options(root, intersect_classes=True, domains=["clean", "color"]))
    assert "7" not in inter.class_names and len(inter.class_names) == 9
    with pytest.warns(UserWarning, match="dropped 8 images"):
        inter.split("clean/train")
    assert inter.dropped == {"clean/train": 8}

    (root / "clean" / "3" / "clean_0003.jpg").unlink()
    with pytest.raises(
        ValueError, match=r"clean_(train|test)\.txt names 1 image\(s\) that do not exist; first: .*clean_0003"
    ):
        fresh = build_adapter("domainnet", options(root, intersect_classes=True, domains=["clean", "color"]))
        fresh.split("clean/train"), fresh.split("clean/test")


def test_corrupt_images_skipped_counted_or_error(digit_root: Path, tmp_path: Path) -> None:
    root = copy_root(digit_root, tmp_path)
    lines = (root / "inverted_train.txt").read_text().split()[::2]
    for rel in lines[:2]:
        (root / rel).write_bytes(b"not a jpeg at all")
    adapter = build_adapter("domainnet", options(root, domains=["clean", "inverted"], max_bad_fraction=0.05))
    with pytest.warns(UserWarning, match=r"skipped 2 of 80 unreadable images; first: .*inverted"):
        assert len(adapter.split("inverted/train")) == 78
    strict = build_adapter("domainnet", options(root, domains=["clean", "inverted"], max_bad_fraction=0.01))
    with pytest.raises(ValueError, match=r"2 of 80 images are unreadable .*max_bad_fraction=0.01"):
        strict.split("inverted/train")
    lazy = build_adapter("domainnet", options(root, domains=["clean", "inverted"], preload=False))
    ds = lazy.split("inverted/train")
    bad_index = ds.sources.index(str(root / lines[0]))
    with pytest.raises(ValueError, match=r"cannot be decoded"):
        ds[bad_index]


def test_decode_workers_preload_the_same_images_skip_the_same_files_and_keep_the_global_rng(
    digit_root: Path,
    tmp_path: Path,
    monkeypatch,
) -> None:
    """Preloading in 2 DataLoader worker processes (the option's default; every other test here decodes in
    this process) keeps the same files in the same order with the same pixels, and skips and counts the same
    unreadable ones."""
    monkeypatch.setenv("MVAPP_DECODE_CACHE_MB", "0")  # both passes must decode
    root = copy_root(digit_root, tmp_path)
    rel = (root / "inverted_train.txt").read_text().split()[0]
    (root / rel).write_bytes(b"not a jpeg at all")
    torch.manual_seed(0)
    expected = torch.rand(3)
    loaded = {}
    for workers in (0, 2):
        torch.manual_seed(0)
        adapter = build_adapter(
            "domainnet", options(root, domains=["clean", "inverted"], decode_workers=workers, max_bad_fraction=0.05)
        )
        with pytest.warns(UserWarning, match=rf"skipped 1 of 80 unreadable images; first: .*{rel}"):
            loaded[workers] = adapter.domain_split("inverted", "train")
        assert torch.equal(torch.rand(3), expected), workers  # decoding drew nothing from the global RNG
    serial, parallel = loaded[0], loaded[2]
    assert len(parallel) == 79 and str(root / rel) not in parallel.sources and parallel.sources == serial.sources
    assert torch.equal(parallel._labels, serial._labels) and torch.equal(parallel.images, serial.images)


def _counting_decode(monkeypatch) -> list[str]:
    decoded: list[str] = []
    real = domain_adapter.decode_file

    def counting(path: str, load_size: int) -> torch.Tensor:
        decoded.append(path)
        return real(path, load_size)

    monkeypatch.setattr(domain_adapter, "decode_file", counting)
    return decoded


def test_decoded_splits_are_reused_in_process_and_redecoded_when_a_file_changes(
    digit_root: Path,
    tmp_path: Path,
    monkeypatch,
) -> None:
    """A second adapter on the same files (a sweep's next run, its ERM, its evaluation) decodes nothing and
    gets the same pixels; a file whose mtime changed makes its split decode again; an unreadable file is
    reported (and counted) on every adapter, cache hit or not."""
    monkeypatch.setenv("MVAPP_DECODE_CACHE_MB", "64")
    root = copy_root(digit_root, tmp_path)
    rel_bad, rel_touched = (root / "inverted_train.txt").read_text().split()[0:4:2]
    (root / rel_bad).write_bytes(b"not a png")
    decoded = _counting_decode(monkeypatch)
    splits = []
    for _ in range(2):
        adapter = build_adapter("domainnet", options(root, domains=["clean", "inverted"], max_bad_fraction=0.05))
        with pytest.warns(UserWarning, match=rf"skipped 1 of 80 unreadable images; first: .*{rel_bad}"):
            splits.append(adapter.domain_split("inverted", "train"))
    assert len(decoded) == 80 and domain_adapter.DECODED_SPLITS.hits == 1  # decoded once, read twice
    first, second = splits
    assert second.images is first.images and second.sources == first.sources and len(second) == 79
    assert torch.equal(second._labels, first._labels)
    stat = (root / rel_touched).stat()
    os.utime(root / rel_touched, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    decoded.clear()
    adapter = build_adapter("domainnet", options(root, domains=["clean", "inverted"], max_bad_fraction=0.05))
    with pytest.warns(UserWarning, match="skipped 1 of 80"):
        again = adapter.domain_split("inverted", "train")
    assert len(decoded) == 80 and again.images is not first.images and torch.equal(again.images, first.images)
    assert len(adapter.domain_split("clean", "train")) > 0 and len(decoded) > 80  # another split: its own key
    # a file gone between the scan and the decode (a race): the key is still made, decoding skips and counts it
    gone = str(root / rel_touched)
    os.unlink(gone)
    assert domain_adapter.DecodedSplitCache.key([gone], 16) != domain_adapter.DecodedSplitCache.key([gone], 32)


def test_decoded_split_cache_budget_switch_and_bad_setting(digit_root: Path, monkeypatch) -> None:
    """``MVAPP_DECODE_CACHE_MB=0`` decodes every time; a budget below a split keeps nothing; a budget for one
    split keeps the most recently used one; a non-number names the variable."""
    decoded = _counting_decode(monkeypatch)

    def read(domain: str) -> None:
        build_adapter("domainnet", options(digit_root, domains=["clean", "inverted"])).domain_split(domain, "train")

    one_split_mb = 80 * 3 * 16 * 16 / 2**20
    for setting, reads, expected in (
        ("0", ["clean", "clean"], 160),
        (f"{0.5 * one_split_mb}", ["clean", "clean"], 160),
        (f"{1.5 * one_split_mb}", ["clean", "inverted", "inverted", "clean"], 240),
    ):
        monkeypatch.setenv("MVAPP_DECODE_CACHE_MB", setting)
        domain_adapter.DECODED_SPLITS.clear()
        decoded.clear()
        for domain in reads:
            read(domain)
        assert len(decoded) == expected, setting  # last case: clean evicted by inverted, decoded again
    monkeypatch.setenv("MVAPP_DECODE_CACHE_MB", "lots")
    with pytest.raises(ValueError, match="MVAPP_DECODE_CACHE_MB='lots'"):
        read("clean")


# ------------------------------------------------------------------ the held-out domain is never opened
def test_heldout_domain_never_opened_during_pretraining(digit_root: Path, tmp_path: Path, monkeypatch) -> None:
    from multiview_app.config import config_from_dict
    from multiview_app.train.trainer import train

    opened: list[str] = []
    split_files: list[str] = []
    real_decode, real_read = domain_adapter.decode_file, domain_adapter.DomainNetAdapter._read_split_file

    def recording_decode(path: str, load_size: int) -> torch.Tensor:
        opened.append(path)
        return real_decode(path, load_size)

    def recording_read(self, domain, split, path):
        split_files.append(str(path))
        return real_read(self, domain, split, path)

    monkeypatch.setenv("MVAPP_DECODE_CACHE_MB", "0")  # every read opens the file (what is watched)
    monkeypatch.setattr(domain_adapter, "decode_file", recording_decode)
    monkeypatch.setattr(domain_adapter.DomainNetAdapter, "_read_split_file", recording_read)
    for preload in (True, False):
        opened.clear(), split_files.clear()
        cfg = config_from_dict(
            {
                "data": {"adapter": "domainnet", "options": options(digit_root, holdout="sketch", preload=preload)},
                "views": {"policy": "domains", "k": 5, "options": {"image_size": 16}},
                "model": {
                    "encoders": {"image": {"name": "small_cnn", "width": 4, "num_features": 8}},
                    "projector": {"hidden_dim": 8, "out_dim": 8},
                },
                "loss": {"name": "infonce_pwe"},
                "train": {"max_steps": 1, "batch_size": 8, "log_every": 1},
                # the generic end-of-training probe (seen domains only) runs too, once
                "eval": {"linear_probe": not preload, "batch_size": 256},
                "output": {"runs_dir": str(tmp_path), "name": f"held_{preload}"},
            }
        )
        train(cfg)
        assert opened and all("/sketch/" not in p for p in opened)
        assert split_files and all("sketch" not in Path(p).name for p in split_files)
        assert any("/texture/" in p for p in opened)
    # the recorder does see the held-out domain once an evaluator opens it
    adapter = build_adapter("domainnet", options(digit_root, holdout="sketch"))
    adapter.domain_split("sketch", "test")
    assert any("/sketch/" in p for p in opened)


# ------------------------------------------------------------------ evaluator
def test_probe_domains_detects_shift() -> None:
    """Target = domain 'a' exactly; domain 'b' has the class structure but a permuted class->cluster map.
    (The leave-one-domain-out protocol with one candidate and C = 1; ``oracle`` is now the
    target-labelled probe.)"""
    from multiview_app.eval.protocols.domains import leave_one_domain_out

    rng = np.random.default_rng(0)
    centers = rng.normal(size=(4, 8)) * 5

    def domain(mapping: list[int], n: int = 200) -> tuple[np.ndarray, np.ndarray]:
        y = rng.integers(0, 4, n)
        return centers[np.asarray(mapping)[y]] + rng.normal(size=(n, 8)) * 0.3, y

    features = {
        "a/train": domain([0, 1, 2, 3]),
        "b/train": domain([1, 2, 3, 0]),
        "t/train": domain([0, 1, 2, 3]),
        "t/test": domain([0, 1, 2, 3]),
        "a/val": domain([0, 1, 2, 3]),
        "b/val": domain([1, 2, 3, 0]),
        "t/val": domain([0, 1, 2, 3]),
    }
    result = leave_one_domain_out(
        features=lambda c, d, s: features[f"{d}/{s}"], candidates=["final"], seen=["a", "b"], target="t", Cs=(1.0,)
    )
    assert result["one_vs_one"]["a"] == 1.0 and result["target_labelled_probe"] == 1.0
    assert result["one_vs_one"]["b"] == 0.0  # every class predicted as its neighbour
    assert 0.2 < result["five_vs_one"] < 1.0


def test_evaluator_end_to_end_and_holdout_all(
    digit_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from multiview_app.eval.domain_report import format_table

    config = tiny_three_domain_config(digit_root, tmp_path, {"name": "m3g", "epsilon": 0.05}, holdout="sketch")
    out = tmp_path / "dg"
    from multiview_app.cli import main

    cmd = [
        "eval",
        "domain-generalization",
        "--run",
        str(out),
        "--config",
        str(config),
        "--holdout",
        "all",
        "--seeds",
        "0",
        "--erm-steps",
        "4",
    ]
    assert main(cmd) == 0, capsys.readouterr().err[-2000:]
    summary = json.loads((out / "domain_generalization_summary.json").read_text())
    assert len(summary["runs"]) == 3 and summary["domains"] == ["clean", "inverted", "sketch"]
    for run in summary["runs"]:
        assert set(run["results"]) == {"random_init", "trained", "erm"}
        assert run["seen"] == [d for d in summary["domains"] if d != run["holdout"]]
        for scores in run["results"].values():
            assert 0.0 <= scores["five_vs_one"] <= 1.0 and set(scores["one_vs_one"]) == set(run["seen"])
    five = summary["combined"]["five_vs_one"]
    assert set(five) == {"random_init", "erm", "m3g"} and all(five["m3g"][d]["n"] == 1 for d in summary["domains"])
    table = (out / "domain_generalization_table.md").read_text()
    # DomainBed layout: rows = algorithms, columns = held-out domains + Avg
    assert "| algorithm | pretraining views | clean | inverted | sketch | Avg |" in table
    assert format_table(summary["combined"], summary["domains"]) in table
    assert (out / "plots" / "one_vs_one_heatmaps.png").stat().st_size > 1000
    # ERM is shared across runs with the same settings (one model per held-out domain and seed)
    assert len(list((out / "erm").iterdir())) == 3
    # a second call reuses every finished run and evaluation
    capsys.readouterr()
    assert main(cmd) == 0 and "train m3g" not in capsys.readouterr().err
    # bad: --holdout without --config on an existing run -> one line, exit 2
    assert main([*cmd[:2], "--run", str(out / "m3g_sketch_s0"), "--holdout", "clean"]) == 2
    err = capsys.readouterr().err
    assert "--holdout needs --config" in err and "Traceback" not in err


def test_combine_results_mean_std_over_seeds_and_matrix() -> None:
    from multiview_app.eval.domain_report import combine_results, format_table

    def run(loss: str, holdout: str, seen: list[str], acc: float, seed: int = 0) -> dict:
        scores = {
            "five_vs_one": acc,
            "target_labelled_probe": acc + 0.1,
            "oracle_selection": {"five_vs_one": acc},
            "one_vs_one": {d: acc / 2 for d in seen},
        }
        return {
            "loss": loss,
            "holdout": holdout,
            "seen": seen,
            "seed": seed,
            "results": {"trained": scores, "random_init": {**scores, "five_vs_one": 0.1}},
        }

    results = [
        run("m3g", "a", ["b", "c"], 0.4),
        run("m3g", "a", ["b", "c"], 0.6, seed=1),
        run("pvc_geometric", "b", ["a", "c"], 0.3),
    ]
    combined = combine_results(results, ["a", "b", "c"])
    cell = combined["five_vs_one"]["m3g"]["a"]
    assert cell["n"] == 2 and abs(cell["mean"] - 0.5) < 1e-12 and abs(cell["std"] - 0.1) < 1e-12
    assert combined["five_vs_one"]["random_init"]["a"]["n"] == 2  # references pooled over the runs
    assert combined["one_vs_one"]["m3g"] == {"b": {"a": 0.25}, "c": {"a": 0.25}}
    assert combined["one_vs_one"]["pvc_geometric"]["a"] == {"b": 0.15}
    table = format_table(combined, ["a", "b", "c"])
    # DomainBed layout (rows = algorithms, columns = held-out domains + Avg); n printed; one run: no spread
    assert "| algorithm | pretraining views | a | b | Avg |" in table and "| c |" not in table
    assert (
        "| m3g | label-conditioned: one image of the item's class per seen domain | 50.0 ± 10.0 (n=2) | - | - |"
        in table
    )
    assert (
        "| pvc_geometric | label-conditioned: one image of the item's class per seen domain | - | 30.0 (n=1) | - |"
        in table
    )
    assert "| random_init | none (initial weights) | 10.0 ± 0.0 (n=2) | 10.0 (n=1) |" in table


def test_reference_columns_count_distinct_models_only() -> None:
    """--protocol both with one seed: the generalization and adaptation runs share one random init and one
    ERM model; the table counts each once (n = 1, no std), while the trained column has one run per protocol."""
    from multiview_app.eval.domain_report import combine_results, format_table

    def run(protocol: str, seed: int, trained: float) -> dict:
        scores = {
            "five_vs_one": trained,
            "target_labelled_probe": 0.9,
            "oracle_selection": {"five_vs_one": 0.6},
            "one_vs_one": {"b": 0.2},
        }
        reference = {
            "five_vs_one": 0.334,
            "target_labelled_probe": 0.5,
            "oracle_selection": {"five_vs_one": 0.4},
            "one_vs_one": {"b": 0.1},
        }
        return {
            "loss": "m3g",
            "holdout": "a",
            "seen": ["b"],
            "seed": seed,
            "protocol": protocol,
            "reference_ids": {"random_init": f"init{seed}", "erm": f"erm{seed}"},
            "results": {"trained": scores, "random_init": reference, "erm": reference},
        }

    combined = combine_results([run("generalization", 0, 0.5), run("adaptation", 0, 0.6)], ["a", "b"])
    for column in ("random_init", "erm"):
        assert combined["five_vs_one"][column]["a"]["n"] == 1, column
    assert combined["five_vs_one"]["m3g"]["a"]["n"] == 1 and combined["five_vs_one"]["m3g+adapt"]["a"]["n"] == 1
    assert "33.4 (n=1)" in format_table(combined, ["a", "b"]) and "33.4 ± 0.0" not in format_table(combined, ["a", "b"])
    two_seeds = combine_results([run("generalization", 0, 0.5), run("generalization", 1, 0.6)], ["a", "b"])
    assert two_seeds["five_vs_one"]["random_init"]["a"]["n"] == 2  # distinct models still pool


def test_adaptation_gain_paired_by_seed_mean_std() -> None:
    from multiview_app.eval.domain_report import adaptation_gain, format_gain

    def run(protocol: str, seed: int, acc: float, adapt_views: str | None = None) -> dict:
        return {
            "loss": "m3g",
            "holdout": "a",
            "seed": seed,
            "protocol": protocol,
            "adapt_views": adapt_views,
            "results": {"trained": {"five_vs_one": acc}},
        }

    results = [
        run("generalization", 0, 0.5),
        run("generalization", 1, 0.6),
        run("adaptation", 0, 0.7, "augment"),
        run("adaptation", 1, 0.6, "augment"),
        run("adaptation", 2, 0.9, "augment"),  # no generalization partner for seed 2: left out
        run("adaptation", 1, 0.4, "nearest"),
    ]
    gain = adaptation_gain(results)
    cell = gain["m3g+adapt"]["a"]
    assert cell["n"] == 2 and abs(cell["mean"] - 0.1) < 1e-12 and abs(cell["std"] - 0.1) < 1e-12
    nearest = gain["m3g+adapt_nn"]["a"]
    assert nearest["n"] == 1 and abs(nearest["mean"] + 0.2) < 1e-12
    assert "| a | +10.0 ± 10.0 (n=2) | -20.0 (n=1) |" in format_gain(gain)
    # one target: the Avg row repeats it per seed; the pairs adaptation won / lost (seed 1 of m3g+adapt: a tie)
    assert "| Avg | +10.0 ± 10.0 (n=2) | -20.0 (n=1) |" in format_gain(gain)
    assert "| adaptation ahead / behind (pairs) | 1 / 0 (2) | 0 / 1 (1) |" in format_gain(gain)
    assert cell["by_seed"] == {"0": pytest.approx(0.2), "1": pytest.approx(0.0)}
    assert "model selection: training-domain validation" in format_gain(gain)


def test_paired_differences_m3g_minus_each_row_by_domain_and_seed() -> None:
    """m3g minus every other row, paired by (held-out domain, seed); unpaired runs left out; Avg over the seeds
    that cover every domain; wins / losses counted over the pairs; no m3g row -> no table."""
    from multiview_app.eval.domain_report import (
        combine_results,
        format_paired,
        paired_anchors,
        paired_differences,
    )

    def run(
        loss: str, holdout: str, seed: int, acc: float, pairing: str = "label", protocol: str = "generalization"
    ) -> dict:
        scores = {
            "five_vs_one": acc,
            "target_labelled_probe": acc,
            "oracle_selection": {"five_vs_one": acc},
            "one_vs_one": {},
        }
        return {
            "loss": loss,
            "holdout": holdout,
            "seen": [],
            "seed": seed,
            "pairing": pairing,
            "protocol": protocol,
            "reference_ids": {"random_init": f"init{seed}"},
            "results": {"trained": scores, "random_init": {**scores, "five_vs_one": 0.2 + 0.1 * seed}},
        }

    results = [
        run("m3g", "a", 0, 0.5),
        run("m3g", "a", 1, 0.6),
        run("m3g", "b", 0, 0.4),
        run("m3g", "b", 1, 0.7),
        run("infonce_ave", "a", 0, 0.4),
        run("infonce_ave", "a", 1, 0.7),
        run("infonce_ave", "b", 0, 0.4),
        run("infonce_ave", "b", 2, 0.9),  # seed 2 has no m3g partner: left out
        run("m3g", "a", 0, 0.3, pairing="none"),
        run("m3g", "a", 0, 0.8, protocol="adaptation"),
        run("infonce_ave", "a", 0, 0.5, protocol="adaptation"),
    ]
    combined = combine_results(results, ["a", "b"])
    diffs = paired_differences(combined)
    # generalization rows and the references; the adaptation rows are compared with m3g+adapt
    assert set(diffs) == {"random_init", "infonce_ave", "m3g (label-free)"}
    assert paired_anchors(combined) == ["m3g", "m3g+adapt"]
    adapted = paired_differences(combined, anchor="m3g+adapt")
    assert set(adapted) == {"random_init", "infonce_ave+adapt"}
    assert abs(adapted["infonce_ave+adapt"]["a"]["by_seed"]["0"] - 0.3) < 1e-12
    cell = diffs["infonce_ave"]["a"]
    assert cell["n"] == 2 and abs(cell["mean"] - 0.0) < 1e-12 and abs(cell["std"] - 0.1) < 1e-12
    assert diffs["infonce_ave"]["b"]["by_seed"] == {"0": 0.0}
    assert abs(diffs["m3g (label-free)"]["a"]["by_seed"]["0"] - 0.2) < 1e-12
    # random init: seed 0 scores 0.2, seed 1 scores 0.3 on both domains
    assert abs(diffs["random_init"]["b"]["by_seed"]["1"] - 0.4) < 1e-12
    table = format_paired(diffs, ["a", "b"])
    assert "| row | a | b | Avg | mean [95 % CI] over pairs | m3g ahead / behind (pairs) |" in table
    # infonce_ave: a +10 / -10 (2 pairs), b 0 (1 pair); Avg: only seed 0 covers both domains, (10 + 0) / 2;
    # 1 won, 1 lost, 1 tie
    # the CI column: the 3 held-out domain x seed pairs (+10, -10, 0) by the one bootstrap helper
    from multiview_app.eval.protocols.stats import bootstrap_ci

    low, high = bootstrap_ci([10.0, -10.0, 0.0])
    assert (
        f"| infonce_ave | +0.0 ± 10.0 (n=2) | +0.0 (n=1) | +5.0 (n=1) | +0.0 [{low:+.1f}, {high:+.1f}] | 1 / 1 (3) |"
        in table
    )
    # random init: seed 0 Avg (0.3 + 0.2) / 2 = 0.25, seed 1 (0.3 + 0.4) / 2 = 0.35 -> +30.0 ± 5.0 (n=2), 4 of 4 won
    low, high = bootstrap_ci([30.0, 20.0, 30.0, 40.0])
    assert f"| +30.0 ± 5.0 (n=2) | +30.0 [{low:+.1f}, {high:+.1f}] | 4 / 0 (4) |" in table
    assert "| m3g (label-free) | +20.0 (n=1) | - | - | +20.0 [+20.0, +20.0] | 1 / 0 (1) |" in table
    no_anchor = combine_results([r for r in results if r["loss"] != "m3g"], ["a", "b"])
    assert paired_differences(no_anchor) == {}


def test_random_init_shift_matrix_shows_a_real_domain_shift(digit_root: Path) -> None:
    from multiview_app.eval.domain_generalization import domain_shift_matrix
    from multiview_app.models import build_model

    adapter = build_adapter("domainnet", options(digit_root))
    policy = build_view_policy("domains", 2, {"image_size": 16}, adapter)
    torch.manual_seed(0)
    model = build_model(
        {"image": {"name": "small_cnn", "width": 8, "num_features": 32}}, {"hidden_dim": 8, "out_dim": 8}
    )
    matrix = domain_shift_matrix(model, adapter, policy, batch_size=256)
    domains = adapter.domains
    assert list(matrix) == domains and all(list(row) == domains for row in matrix.values())
    diagonal = np.mean([matrix[d][d] for d in domains])
    off = np.mean([matrix[s][t] for s in domains for t in domains if s != t])
    assert diagonal > off + 0.2, (diagonal, off)


# ------------------------------------------------------------------ domain adaptation (unlabelled target)
def test_adaptation_target_unlabelled_and_test_split_unread(digit_root: Path, tmp_path: Path, monkeypatch) -> None:
    from multiview_app.config import config_from_dict
    from multiview_app.train.trainer import train

    with pytest.raises(ValueError, match="adapt 'paint' is not a domain"):
        build_adapter("domainnet", options(digit_root, adapt="paint"))
    opened: list[str] = []
    split_files: list[str] = []
    real_decode, real_read = domain_adapter.decode_file, domain_adapter.DomainNetAdapter._read_split_file
    monkeypatch.setenv("MVAPP_DECODE_CACHE_MB", "0")  # every read opens the file (what is watched)
    monkeypatch.setattr(domain_adapter, "decode_file", lambda p, s: opened.append(p) or real_decode(p, s))
    monkeypatch.setattr(
        domain_adapter.DomainNetAdapter,
        "_read_split_file",
        lambda self, d, s, p: split_files.append(Path(p).name) or real_read(self, d, s, p),
    )
    opts = options(digit_root, adapt="sketch", adapt_share=0.25)
    adapter = build_adapter("domainnet", opts)
    assert "sketch" not in adapter.seen_domains
    train_split = adapter.split("train")
    assert len(train_split) == 400 + round(0.25 / 0.75 * 400)
    target_items = [train_split[i] for i in range(400, 410)]
    assert all(item["label"] == -1 and item["domain"] == "sketch" for item in target_items)
    x = target_items[0]["x"]
    assert x.shape == (5, 3, 16, 16) and all(torch.equal(x[0], x[d]) for d in range(5))  # views of one image
    with pytest.raises(PermissionError, match="labels of domain 'sketch' .* hidden"):
        _ = adapter.domain_split("sketch", "train").labels
    # the target image's k views differ (target stack 'mild') even when the source views are deterministic
    from torch.utils.data import default_collate

    from multiview_app.data.views import build_view_policy

    policy = build_view_policy("domains", 5, {"image_size": 16, "stacks": "test"}, adapter)
    raw = default_collate([train_split[i] for i in (0, 1, 400, 401)])
    views = policy.train_views(raw, torch.Generator().manual_seed(0)).views
    assert torch.equal(views[0][:2], policy.train_views(raw, torch.Generator().manual_seed(1)).views[0][:2])
    assert not torch.equal(views[0][2], views[1][2]) and not torch.equal(views[0][3], views[1][3])
    with pytest.raises(ValueError, match="unknown stack nope"):
        build_view_policy("domains", 5, {"target_stack": "nope"}, adapter)
    cfg = config_from_dict(
        {
            "data": {"adapter": "domainnet", "options": opts},
            "views": {"policy": "domains", "k": 5, "options": {"image_size": 16}},
            "model": {
                "encoders": {"image": {"name": "small_cnn", "width": 4, "num_features": 8}},
                "projector": {"hidden_dim": 8, "out_dim": 8},
            },
            "loss": {"name": "infonce_pwe"},
            "train": {"max_steps": 3, "batch_size": 32, "log_every": 1},
            "eval": {"linear_probe": False},
            "output": {"runs_dir": str(tmp_path), "name": "adapt"},
        }
    )
    opened.clear(), split_files.clear()
    train(cfg)  # a code path reading the target's labels would raise PermissionError here
    assert any("/sketch/" in p for p in opened)  # target train images are used ...
    sketch_test = {
        str(digit_root / line.split()[0]) for line in (digit_root / "sketch_test.txt").read_text().splitlines()
    }
    assert len(sketch_test) == 20 and not sketch_test & set(opened)  # ... but never its test split
    assert "sketch_train.txt" in split_files and "sketch_test.txt" not in split_files
    assert adapter.target_labels("train").shape == (80,)  # evaluation reads them explicitly


def test_adaptation_rows_augmented_once(digit_root: Path, monkeypatch) -> None:
    """Every row of a view goes through exactly one stack: the source stack on source rows, the target
    stack on target rows (no source augmentation of target rows that is then overwritten)."""
    from multiview_app.data.domains import views as domain_views

    adapter = build_adapter("domainnet", options(digit_root, adapt="sketch", adapt_share=0.25))
    policy = build_view_policy("domains", 5, {"image_size": 16, "stacks": "simclr"}, adapter)
    train_split = adapter.split("train")
    raw = default_collate([train_split[i] for i in (0, 1, 2, 400, 401)])  # 3 source + 2 target items
    calls: list[tuple[int, object]] = []
    real_augment = domain_views.augment
    monkeypatch.setattr(
        domain_views,
        "augment",
        lambda images, stack, size, generator=None: (
            calls.append((images.shape[0], stack)) or real_augment(images, stack, size, generator)
        ),
    )
    views = policy.train_views(raw, torch.Generator().manual_seed(0)).views
    assert [v.shape[0] for v in views] == [5] * 5
    assert sum(rows for rows, _ in calls) == 5 * 5  # each row of each view augmented once
    assert sorted((rows, stack is policy.target_spec) for rows, stack in calls) == [(2, True)] * 5 + [(3, False)] * 5
    # same draws in one generator stream -> the same views; target rows differ from their source-stack view
    calls.clear()
    again = policy.train_views(raw, torch.Generator().manual_seed(0)).views
    assert all(torch.equal(a, b) for a, b in zip(views, again))


def test_nearest_neighbour_target_views(digit_root: Path, tmp_path: Path, monkeypatch) -> None:
    """adapt_views: nearest: the train split holds source tuples only; the policy adds one target view per
    item, the target train image nearest (cosine, current embedding) to the item's mean source embedding;
    training and evaluation never read the target's labels or its test split."""
    from multiview_app.config import load_config
    from multiview_app.data.batch import ViewBatch
    from multiview_app.data.domains.views import nearest_indices
    from multiview_app.data.images.augment import augment
    from multiview_app.eval.domain_report import column_name
    from multiview_app.experiments.domains import train_and_evaluate
    from multiview_app.models import build_model
    from multiview_app.train.trainer import train

    rng = torch.Generator().manual_seed(0)
    queries, candidates = torch.randn(7, 5, generator=rng), torch.randn(11, 5, generator=rng)
    q64, c64 = queries.double(), candidates.double()
    cosine = (q64 @ c64.T) / (q64.norm(dim=1)[:, None] * c64.norm(dim=1)[None])
    assert torch.equal(nearest_indices(queries, candidates), cosine.argmax(dim=1))

    opts = options(digit_root, domains=["clean", "inverted", "sketch"], adapt="sketch", adapt_views="nearest")
    adapter = build_adapter("domainnet", opts)
    assert len(adapter.split("train")) == 2 * 80  # no target items: the policy brings the target in
    policy = build_view_policy("domains", 2, {"image_size": 16, "stacks": "test", "target_pool": 1000}, adapter)
    assert policy.k == 3 and policy.uses_model
    raw = default_collate([adapter.split("train")[i] for i in range(0, 160, 20)])
    with pytest.raises(ValueError, match="needs the model"):
        policy.train_views(raw, torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    model = build_model(
        {"image": {"name": "small_cnn", "width": 4, "num_features": 8}}, {"hidden_dim": 8, "out_dim": 8}
    )
    model.train()
    policy.bind_model(model)
    batch = policy.train_views(raw, torch.Generator().manual_seed(0))
    assert batch.view_names == ["clean", "inverted", "sketch"] and model.training  # mode restored
    # brute force (float64): the pool is the whole target train split (target_pool >= 80)
    target = adapter.domain_split("sketch", "train")
    with torch.no_grad():
        double = build_model(
            {"image": {"name": "small_cnn", "width": 4, "num_features": 8}}, {"hidden_dim": 8, "out_dim": 8}
        )
        double.load_state_dict(model.state_dict())
        double.double().eval()

        def embed(images: torch.Tensor) -> torch.Tensor:
            x = augment(images, "test", 16).double()
            return double.embed(ViewBatch([x], ["image"], ["test"]), use_predictor=False)[:, 0]

        items = embed(raw["x"].flatten(0, 1)).view(8, 2, -1).mean(dim=1)
        pool = embed(target.images)
        cos = (items @ pool.T) / (items.norm(dim=1)[:, None] * pool.norm(dim=1)[None])
        expected = target.images[cos.argmax(dim=1)]
    assert torch.allclose(batch.views[2], augment(expected, "test", 16))
    with pytest.raises(PermissionError):
        _ = target.labels

    # end to end: training (+ ERM, evaluator) never reads the target labels nor its test split
    opened: list[str] = []
    real_decode = domain_adapter.decode_file
    monkeypatch.setenv("MVAPP_DECODE_CACHE_MB", "0")  # every read opens the file (what is watched)
    monkeypatch.setattr(domain_adapter, "decode_file", lambda p, s: opened.append(p) or real_decode(p, s))
    config = tiny_three_domain_config(digit_root, tmp_path, {"name": "m3g", "epsilon": 0.05})
    train(
        load_config(
            config,
            ["data.options.adapt=sketch", "data.options.adapt_views=nearest", f"output.runs_dir={tmp_path}"],
            name="nn_only",
        )
    )
    sketch_test = {
        str(digit_root / line.split()[0]) for line in (digit_root / "sketch_test.txt").read_text().splitlines()
    }
    assert any("/sketch/" in p for p in opened) and not sketch_test & set(opened)
    out = tmp_path / "nn"
    results = train_and_evaluate(
        config,
        out,
        ["sketch"],
        [0],
        ["data.options.adapt_views=nearest"],
        protocols=("generalization", "adaptation"),
        erm_steps=4,
        progress=False,
    )
    assert [r["protocol"] for r in results] == ["generalization", "adaptation"]
    assert results[1]["adapt_views"] == "nearest" and (out / "m3g_sketch_adaptnn_s0" / "model.safetensors").is_file()
    assert len(list((out / "erm").iterdir())) == 1  # ERM (source views only) shared by both protocols
    assert column_name(results[1]) == "m3g+adapt_nn"


def test_adaptation_and_generalization_share_one_table(digit_root: Path, tmp_path: Path) -> None:
    from multiview_app.eval.domain_report import write_summary
    from multiview_app.experiments.domains import train_and_evaluate

    config = tiny_three_domain_config(digit_root, tmp_path, {"name": "pvc_geometric", "tau": 0.2})
    out = tmp_path / "both"
    results = train_and_evaluate(
        config, out, ["sketch"], [0], protocols=("generalization", "adaptation"), erm_steps=4, progress=False
    )
    assert [r["protocol"] for r in results] == ["generalization", "adaptation"]
    assert all(r["holdout"] == "sketch" and r["seen"] == ["clean", "inverted"] for r in results)
    assert len(list((out / "erm").iterdir())) == 1  # one ERM model serves both protocols
    erm_scores = [r["results"]["erm"]["five_vs_one"] for r in results]
    assert erm_scores[0] == erm_scores[1]
    summary = write_summary(results, out)
    five = summary["combined"]["five_vs_one"]
    assert {"pvc_geometric", "pvc_geometric+adapt", "erm", "random_init"} == set(five)
    gain = summary["adaptation_gain"]["pvc_geometric+adapt"]["sketch"]
    expected = five["pvc_geometric+adapt"]["sketch"]["mean"] - five["pvc_geometric"]["sketch"]["mean"]
    assert abs(gain["mean"] - expected) < 1e-12 and gain["std"] == 0.0 and gain["n"] == 1
    assert (out / "plots" / "adaptation_gain.png").is_file()
    assert "Gain of adaptation over generalization" in (out / "domain_generalization_table.md").read_text()
