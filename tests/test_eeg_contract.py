"""The EEG input contract: written with a run (channels and derivations, rate, band-pass, units, window,
scaling), carried by an exported encoder, and enforced when features come from another cache (export, sleep
staging, resume): each differing field is named with what would be done; a matching cache passes; channel
differences are reported, never zero-filled."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from _eeg_helpers import CHANNELS, fake_cache

from multiview_app.cli import main
from multiview_app.data.eeg.contract import (
    EEGInputContract,
    InputContractError,
    check_input,
    compare_input,
    contract_for,
    derivation,
)
from multiview_app.data.eeg.preprocess import PrepareOptions
from multiview_app.export import load_embeddings

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "eeg_synthetic_m3g.yaml"


def prepared_cache(folder: Path, channels: list[str] | None = None, **options) -> Path:
    """:func:`fake_cache` whose manifest records the preparation options of ``mvapp data prepare``
    (defaults: 100 Hz, 0.5-30 Hz, recording scaling) updated by ``options``; ``channels`` renames the channels."""
    fake_cache(folder, subjects=4, windows=6)
    manifest = json.loads((folder / "manifest.json").read_text())
    prepared = PrepareOptions(channels=channels or CHANNELS, **options)
    manifest.update({"options": prepared.model_dump(), "channels": prepared.channels, "sfreq": prepared.sfreq})
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def train_args(cache: Path, runs: Path, name: str, *extra: str) -> list[str]:
    return [
        "train",
        "--config",
        str(CONFIG),
        "--name",
        name,
        f"data.options.cache={cache}",
        f"data.options.channels={json.dumps(CHANNELS)}",
        "views.k=4",
        "data.options.test_fraction=0.25",
        f"output.runs_dir={runs}",
        "train.batch_size=4",
        "model.encoders.eeg.width=8",
        "model.encoders.eeg.out_dim=8",
        "model.projector.hidden_dim=16",
        "model.projector.out_dim=8",
        "model.encoders.eeg.channel_mode=embedding",
        f"model.encoders.eeg.channel_vocab={json.dumps(CHANNELS)}",
        "model.encoders.eeg.unknown_rate=0.1",
        *extra,
    ]


@pytest.fixture(scope="module")
def eeg_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("eeg")
    cache = prepared_cache(root / "cache")
    assert main(train_args(cache, root / "runs", "eeg", "train.max_steps=2", "train.checkpoint_every=0")) == 0
    return root / "runs" / "eeg"


def _contract(**changes) -> EEGInputContract:
    manifest = json.loads(
        json.dumps(
            {
                "dataset": "physionet2018",
                "sfreq": 100.0,
                "window_seconds": 30.0,
                "options": PrepareOptions(channels=CHANNELS).model_dump(),
            }
        )
    )
    contract = contract_for(manifest, CHANNELS, CHANNELS, {"name": "conv", "channel_mode": "agnostic"})
    for key, value in changes.items():
        setattr(contract, key, value)
    return contract


# ----------------------------------------------------------------------------- the contract itself


def test_derivations_name_active_and_reference_electrodes() -> None:
    assert derivation("EEG Fpz-Cz") == {"name": "EEG Fpz-Cz", "active": "Fpz", "reference": "Cz"}
    assert derivation("C3-M2") == {"name": "C3-M2", "active": "C3", "reference": "M2"}
    assert derivation("Cz") == {"name": "Cz", "active": "Cz", "reference": None}


def test_run_writes_its_contract_from_the_cache_manifest_and_config(eeg_run: Path) -> None:
    contract = json.loads((eeg_run / "input_contract.json").read_text())
    assert contract["channels"] == CHANNELS and contract["views"] == CHANNELS
    assert contract["derivations"][3] == {"name": "O2-M1", "active": "O2", "reference": "M1"}
    assert (contract["sfreq"], contract["window_seconds"], contract["window_samples"]) == (100.0, 30.0, 3000)
    assert (contract["l_freq"], contract["h_freq"], contract["scaling"]) == (0.5, 30.0, "recording")
    assert contract["units"] == "uV before scaling" and contract["dataset"] == "physionet2018"
    assert (contract["channel_mode"], contract["channel_vocab"], contract["unknown_rate"]) == (
        "embedding",
        CHANNELS,
        0.1,
    )


def test_a_prepared_cache_records_every_field_of_the_contract(tmp_path: Path) -> None:
    from _eeg_helpers import write_dreams_excerpt, write_sha256sums

    from multiview_app.data.eeg.cache import prepare

    write_dreams_excerpt(tmp_path / "src", "excerpt1", 100.0, [5] * 12 + [2] * 12 + [0] * 12, "C3-A1")
    write_sha256sums(tmp_path / "src", ["excerpt1.txt"])
    prepare(
        "dreams",
        tmp_path / "src",
        tmp_path / "cache",
        PrepareOptions(channels=["central"], h_freq=35.0),
        progress=False,
    )
    manifest = json.loads((tmp_path / "cache" / "manifest.json").read_text())
    assert manifest["units"] == "uV" and manifest["options"]["scaling"] == "recording"
    contract = contract_for(manifest, ["central"], ["central"], {"name": "conv", "channel_mode": "agnostic"})
    assert '"unknown"' not in json.dumps(contract.to_dict())  # no field the manifest left unsaid
    assert (
        contract.sfreq,
        contract.window_samples,
        contract.l_freq,
        contract.h_freq,
        contract.scaling,
        contract.units,
    ) == (100.0, 3000, 0.5, 35.0, "recording", "uV before scaling")


@pytest.mark.parametrize(
    "field, options, named, action",
    [
        ("sfreq", {"sfreq": 200.0}, "sampling rate: encoder 100 Hz, cache 200 Hz", "would resample 200 -> 100 Hz"),
        (
            "band",
            {"l_freq": 0.3, "h_freq": 35.0},
            "band-pass: encoder 0.5-30 Hz, cache 0.3-35 Hz",
            "would band-pass to 0.5-30 Hz",
        ),
        (
            "narrow band",
            {"h_freq": 20.0},
            "band-pass: encoder 0.5-30 Hz, cache 0.5-20 Hz",
            "the cache has lost 20-30 Hz",
        ),
        ("no filter", {"l_freq": None, "h_freq": None}, "band-pass: encoder 0.5-30 Hz, cache none", "would band-pass"),
        ("scaling", {"scaling": "window"}, "scaling: encoder recording, cache window", "would re-scale"),
    ],
)
def test_each_differing_field_is_named_with_what_would_be_done(field, options, named, action, tmp_path: Path) -> None:
    cache = prepared_cache(tmp_path / "cache", **options)
    manifest = json.loads((cache / "manifest.json").read_text())
    blocking = [d for d in compare_input(_contract(), manifest, CHANNELS) if d.blocking]
    assert len(blocking) == (2 if field == "sfreq" else 1)  # a rate change also changes the samples per window
    with pytest.raises(InputContractError) as caught:
        check_input(_contract(), manifest, CHANNELS, cache=cache, whose="run R")
    message = str(caught.value)
    assert named in message and action in message and f"cache {cache}" in message
    assert (
        "mvapp data prepare physionet2018" in message
        and "--sfreq 100 --l-freq 0.5 --h-freq 30 --scaling recording" in message
    )
    lines = check_input(_contract(), manifest, CHANNELS, cache=cache, whose="run R", accept=True)
    assert any(named in line and line.endswith("(accepted)") for line in lines)


def test_units_and_window_length_are_checked(tmp_path: Path) -> None:
    manifest = json.loads((prepared_cache(tmp_path / "cache").resolve() / "manifest.json").read_text())
    manifest.update({"units": "mV", "window_seconds": 20.0})
    names = {d.field for d in compare_input(_contract(), manifest, CHANNELS) if d.blocking}
    assert names == {"units", "window length"}


def test_a_band_the_cache_no_longer_holds_cannot_be_restored_by_filtering() -> None:
    manifest = {"sfreq": 100.0, "window_seconds": 30.0, "options": PrepareOptions(channels=CHANNELS).model_dump()}
    [band] = compare_input(_contract(l_freq=None, h_freq=None), manifest, CHANNELS)
    assert (band.contract, band.cache) == ("none", "0.5-30 Hz")
    assert "the cache has lost 0-0.5 Hz, 30-Nyquist Hz" in band.action and "cannot restore it" in band.action


def test_a_matching_cache_passes_and_unrecorded_fields_are_notes(tmp_path: Path) -> None:
    manifest = json.loads((prepared_cache(tmp_path / "same").resolve() / "manifest.json").read_text())
    assert compare_input(_contract(), manifest, CHANNELS) == []
    assert check_input(_contract(), manifest, CHANNELS, cache="same", whose="run R") == []
    manifest["options"] = {}  # an older cache: band and scaling not recorded
    notes = compare_input(_contract(), manifest, CHANNELS)
    assert {d.field for d in notes} == {"band-pass", "scaling"} and not any(d.blocking for d in notes)


def test_channel_differences_say_how_each_channel_is_encoded_and_never_zero_fill() -> None:
    manifest = {"sfreq": 100.0, "window_seconds": 30.0, "options": PrepareOptions(channels=CHANNELS).model_dump()}
    other = ["Fpz-Cz", "C3-M2", "EEG O1-M2"]
    agnostic = {d.field: d for d in compare_input(_contract(), manifest, other)}
    assert not any(d.blocking for d in agnostic.values())
    assert agnostic["channel Fpz-Cz"].action == "encoded by the shared channel-agnostic network"
    assert (
        "nothing zero-filled" in agnostic["channel F3-M2"].action
        and "nothing zero-filled" in agnostic["channel O2-M1"].action
    )
    assert "channel EEG O1-M2" not in agnostic  # the same derivation under its EDF name
    embedding = {
        d.field: d
        for d in compare_input(
            _contract(channel_mode="embedding", channel_vocab=CHANNELS, unknown_rate=0.1), manifest, other
        )
    }
    assert "'unknown channel' embedding (trained with unknown_rate 0.1)" in embedding["channel Fpz-Cz"].action
    untrained = compare_input(_contract(channel_mode="embedding", channel_vocab=CHANNELS), manifest, other)
    assert "never trained" in next(d.action for d in untrained if d.field == "channel Fpz-Cz")
    stacked = compare_input(_contract(in_channels=2), manifest, other)
    assert [d.field for d in stacked if d.blocking] == ["channels"]


def test_differences_are_reported_under_one_heading() -> None:
    """The run / cache heading is written once, then one line per difference (not one long prefix per
    channel); printed as one ``note:``."""
    from multiview_app.train.input_contract import format_input_differences

    manifest = {"sfreq": 100.0, "window_seconds": 30.0, "options": PrepareOptions(channels=CHANNELS).model_dump()}
    other = ["Fpz-Cz", "C3-M2", "EEG O1-M2"]
    lines = check_input(_contract(), manifest, other, cache="C", whose="run R")
    differences = compare_input(_contract(), manifest, other)
    assert lines == ["input contract of run R vs cache C:", *(d.text() for d in differences)] and len(differences) == 3
    note = format_input_differences(lines)
    assert note.count("input contract of") == 1
    assert note.splitlines()[1:] == [f"  {d.text()}" for d in differences]


# ----------------------------------------------------------------------------- enforced on other data


def test_export_on_a_differing_cache_is_refused_naming_each_field(eeg_run: Path, tmp_path: Path, capsys) -> None:
    other = prepared_cache(tmp_path / "other", sfreq=200.0, l_freq=0.3, h_freq=35.0, scaling="window")
    args = ["export", "--run", str(eeg_run), "--out", str(tmp_path / "x"), f"data.options.cache={other}"]
    assert main(args) == 2
    error = capsys.readouterr().err
    for named in (
        "sampling rate: encoder 100 Hz, cache 200 Hz -> would resample 200 -> 100 Hz",
        "window samples: encoder 3000, cache 6000",
        "band-pass: encoder 0.5-30 Hz, cache 0.3-35 Hz",
        "scaling: encoder recording, cache window",
        "--accept-input-differences",
    ):
        assert named in error, named
    assert not (tmp_path / "x").exists()
    assert main([*args, "--accept-input-differences"]) == 0
    _, _, manifest = load_embeddings(tmp_path / "x")
    assert any("sampling rate" in line and "(accepted)" in line for line in manifest["input_differences"])


def test_export_on_a_matching_cache_passes_and_records_channel_differences(eeg_run: Path, tmp_path: Path) -> None:
    same = shutil.copytree(json.loads((eeg_run / "input_contract.json").read_text())["source_cache"], tmp_path / "same")
    assert main(["export", "--run", str(eeg_run), "--out", str(tmp_path / "a"), f"data.options.cache={same}"]) == 0
    assert load_embeddings(tmp_path / "a")[2]["input_differences"] == []
    renamed = ["Fpz-Cz", "C3-M2", "O1-M2", "O2-M1"]
    montage = prepared_cache(tmp_path / "montage", channels=renamed)
    assert (
        main(
            [
                "export",
                "--run",
                str(eeg_run),
                "--out",
                str(tmp_path / "b"),
                f"data.options.cache={montage}",
                f"data.options.channels={json.dumps(renamed)}",
            ]
        )
        == 0
    )
    rows, table, manifest = load_embeddings(tmp_path / "b")
    lines = manifest["input_differences"]
    assert any("channel Fpz-Cz" in line and "'unknown channel' embedding" in line for line in lines)
    assert any("channel F3-M2" in line and "nothing zero-filled" in line for line in lines)
    assert sorted(set(table.column("channel").to_pylist())) == sorted(renamed)  # no view for the absent F3-M2


def test_export_prints_the_channel_differences_under_one_note(eeg_run: Path, tmp_path: Path, capsys) -> None:
    renamed = ["Fpz-Cz", "C3-M2", "O1-M2", "O2-M1"]
    montage = prepared_cache(tmp_path / "montage", channels=renamed)
    capsys.readouterr()
    assert (
        main(
            [
                "export",
                "--run",
                str(eeg_run),
                "--out",
                str(tmp_path / "b"),
                f"data.options.cache={montage}",
                f"data.options.channels={json.dumps(renamed)}",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.count("note: ") == 1 and out.count("input contract of") == 1
    assert f"note: input contract of run {eeg_run} (input_contract.json) vs cache {montage}:\n  channel " in out
    assert "\n  channel Fpz-Cz: " in out and "\n  channel F3-M2: " in out


def test_sleep_staging_on_a_differing_cache_is_refused(eeg_run: Path, tmp_path: Path) -> None:
    from multiview_app.eval.sleep_staging import run_sleep_staging

    other = prepared_cache(tmp_path / "other", sfreq=128.0, h_freq=40.0)
    with pytest.raises(
        InputContractError,
        match=r"sampling rate: encoder 100 Hz, cache 128 Hz -> would resample "
        r"128 -> 100 Hz.*band-pass: encoder 0.5-30 Hz, cache 0.5-40 Hz",
    ):
        run_sleep_staging(eeg_run, cache=str(other), shots=(2,), seeds=1, progress=False, baselines=False)


def test_resume_on_a_re_prepared_cache_is_refused(tmp_path: Path) -> None:
    cache = prepared_cache(tmp_path / "cache")
    runs = tmp_path / "runs"
    assert main(train_args(cache, runs, "r", "train.max_steps=2", "train.checkpoint_every=1")) == 0
    (runs / "r" / "model.safetensors").unlink()  # as if stopped after its last checkpoint
    manifest = json.loads((cache / "manifest.json").read_text())
    manifest["sfreq"] = manifest["options"]["sfreq"] = 250.0
    (cache / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(
        InputContractError,
        match=r"sampling rate: encoder 100 Hz, cache 250 Hz -> would resample "
        r"250 -> 100 Hz.*--accept-config-changes",
    ):
        main(["--debug", "train", "--resume", str(runs / "r")])


# ----------------------------------------------------------------------------- exported EEG encoders


def test_exported_eeg_encoder_knows_its_contract_and_its_onnx_graph_equals_pytorch(
    eeg_run: Path, tmp_path: Path
) -> None:
    from multiview_app.export.encoder import ChannelWindowsEncoder, load_encoder, missing_onnx_packages
    from multiview_app.train.run_io import load_run

    missing = missing_onnx_packages()
    assert (
        main(["export-model", "--run", str(eeg_run), "--out", str(tmp_path / "enc"), *([] if missing else ["--onnx"])])
        == 0
    )
    encoder = load_encoder(tmp_path / "enc")
    run_contract = json.loads((eeg_run / "input_contract.json").read_text())
    assert encoder.input_contract.to_dict() == run_contract
    card = (tmp_path / "enc" / "README.md").read_text()
    for fact in (
        "O2-M1 (O2 - M1)",
        "sampling rate: 100 Hz",
        "band-pass: 0.5-30 Hz",
        "3000 samples",
        "scaling: recording",
        "uV before scaling",
        "unknown_rate 0.1",
    ):
        assert fact in card, fact
    x = torch.from_numpy(np.random.default_rng(0).standard_normal((5, 4, 3000)).astype(np.float32))
    windows = ChannelWindowsEncoder(encoder, run_contract["channels"], run_contract["views"])
    _, model = load_run(eeg_run)
    with torch.no_grad():
        expected = model.encoders["eeg"].forward_views([x[:, i] for i in range(4)], CHANNELS)
        torch.testing.assert_close(windows(x), expected, rtol=0, atol=0)
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (pip install 'multiview_app[onnx]'): ONNX part not run")
    import onnxruntime as ort

    session = ort.InferenceSession(str(tmp_path / "enc" / "encoder.onnx"), providers=["CPUExecutionProvider"])
    got = session.run(None, {"x": x.numpy()})[0]
    assert got.shape == (5, 4, 8)
    torch.testing.assert_close(torch.from_numpy(got), expected, rtol=1e-4, atol=1e-5)
