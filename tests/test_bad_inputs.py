"""The bad-input corpus (issue 16 §6; grouped with one outcome per group in docs/reliability.md).

Every case runs the real CLI entry point (``multiview_app.cli.main``, what the ``mvapp`` console
script calls) and asserts: exit code != 0; exactly one error line on stderr, starting with
``mvapp: error:`` and naming the file / key / value (the expected fragments); no traceback; and
nothing written or overwritten (every file under the case's folder and the shared fixtures has the
same bytes and mode before and after). Progress lines (a tqdm bar, or the plain lines written off a terminal) are not error lines.

A few cases need more than one process or a signal and are separate tests at the end: two processes
writing one run folder, a full disk during a checkpoint, SIGTERM through the console script.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from _eeg_helpers import write_dreams_excerpt, write_sha256sums
from _train_helpers import tiny_raw, write_sleep_edf_nights, write_tiny_yaml
from PIL import Image

from multiview_app.cli import main
from multiview_app.config import config_from_dict
from multiview_app.console import is_progress_line

ROOT = Path(__file__).resolve().parents[1]
EEG_CONFIG = ROOT / "configs" / "eeg_sleepedf_m3g.yaml"
TRAIN = {"max_steps": 3, "checkpoint_every": 2}


# ----------------------------------------------------------------------------- shared fixtures


@dataclass
class Shared:
    """Read-only material shared by the cases (snapshotted around each case)."""

    root: Path
    runs: Path
    run: Path  # finished tiny digits run "run" (3 steps, checkpoint at step 2)
    config: Path  # the YAML that trained it (with --name run)
    raw_eeg: Path  # two synthetic Sleep-EDF nights
    cache: Path  # their prepared cache


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Shared:
    from multiview_app.data.eeg.cache import prepare
    from multiview_app.data.eeg.preprocess import PrepareOptions
    from multiview_app.train.trainer import train

    root = tmp_path_factory.mktemp("shared")
    runs = root / "runs"
    train(config_from_dict(tiny_raw(runs, "run", train=TRAIN)))
    config = write_tiny_yaml(root / "tiny.yaml", runs, train=TRAIN)
    raw = write_sleep_edf_nights(root / "raw", 2, 0.25)
    cache = root / "cache"
    prepare("sleep-edf", raw, cache, PrepareOptions(channels=["Fpz-Cz", "Pz-Oz"]), progress=False)
    return Shared(root, runs, runs / "run", config, raw, cache)


def snapshot(*roots: Path) -> dict[str, tuple[str, int]]:
    """``{path: (sha1 of the bytes or 'dir', mode)}`` of everything under ``roots``."""
    out: dict[str, tuple[str, int]] = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            if "__pycache__" in path.parts:
                continue
            st = path.lstat()
            digest = "dir" if path.is_dir() else hashlib.sha1(path.read_bytes()).hexdigest()
            out[str(path)] = (digest, st.st_mode)
    return out


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``mvapp argv`` in-process: (exit code, the single error line, all of stderr)."""
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse errors
        code = exit_.code if isinstance(exit_.code, int) else 1
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and not is_progress_line(line)]
    assert len(lines) == 1, f"expected one error line, got: {lines}"
    return code, lines[0], err


def assert_refused(argv: list[str], expected: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code, line, err = run_cli(argv, capsys)
    assert code != 0
    assert line.startswith("mvapp: error:"), line
    assert "Traceback" not in err
    for fragment in expected:
        assert fragment in line, f"{fragment!r} not in {line!r}"
    return line


# ----------------------------------------------------------------------------- the cases

Case = Callable[[Path, Shared], tuple[list[str], list[str]]]
CASES: dict[str, Case] = {}


def case(name: str) -> Callable[[Case], Case]:
    def register(fn: Case) -> Case:
        CASES[name] = fn
        return fn

    return register


def _yaml(tmp: Path, shared: Shared, **sections: dict) -> str:
    return str(write_tiny_yaml(tmp / "cfg.yaml", tmp / "runs", **sections))


# --- config: unknown keys, bad values, bad files
@case("unknown top-level section")
def _(tmp, shared):
    return ["config", "show", "--config", str(shared.config), "trian.max_steps=3"], ["trian: unknown key"]


@case("unknown key in a section")
def _(tmp, shared):
    return ["train", "--config", _yaml(tmp, shared), "train.max_stpes=3"], ["train.max_stpes: unknown key", "allowed:"]


@case("unknown loss parameter")
def _(tmp, shared):
    return ["config", "show", "--config", str(shared.config), "loss.taau=1"], [
        "loss.taau: unknown parameter for loss 'infonce_pwe'",
        "valid: tau",
    ]


@case("loss parameter out of range")
def _(tmp, shared):
    return (
        ["train", "--config", _yaml(tmp, shared, loss={"name": "m3g", "epsilon": -1.0})],
        ["loss (m3g", "epsilon", "-1.0"],
    )


@case("unknown encoder option")
def _(tmp, shared):
    return (
        ["config", "show", "--config", str(shared.config), "model.encoders.image.widht=8"],
        ["model.encoders.image.widht: unknown option for encoder 'image/small_cnn'", "valid: "],
    )


@case("unknown projector option")
def _(tmp, shared):
    return (
        ["config", "show", "--config", str(shared.config), "model.projector.hiden_dim=8"],
        ["model.projector.hiden_dim: unknown option for the projector", "hidden_dim"],
    )


@case("unknown predictor option")
def _(tmp, shared):
    return (
        ["config", "show", "--config", str(shared.config), "model.predictor={depth: 2}"],
        ["model.predictor.depth: unknown option for the predictor"],
    )


@case("unknown encoder for a modality")
def _(tmp, shared):
    return (
        ["config", "show", "--config", str(EEG_CONFIG), "model.encoders.eeg.name=transformer"],
        [
            "model.encoders.eeg.name: unknown encoder 'transformer'",
            "available: eeg/attnsleep, eeg/chambon, eeg/chambon2018, eeg/conv",
        ],
    )


@case("unknown view-policy option")
def _(tmp, shared):
    return ["config", "show", "--config", str(shared.config), "views.options.stackz=simclr"], ["views.options.stackz"]


@case("unknown data option")
def _(tmp, shared):
    return ["config", "show", "--config", str(shared.config), "data.options.load_sise=16"], ["data.options.load_sise"]


@case("unknown adapter")
def _(tmp, shared):
    return ["config", "show", "--config", str(shared.config), "data.adapter=mnist"], [
        "data.adapter",
        "'mnist'",
        "available:",
    ]


@case("unknown loss")
def _(tmp, shared):
    return ["config", "show", "--config", str(shared.config), "loss.name=simclr"], ["loss.name: unknown loss 'simclr'"]


@case("too few views for the loss")
def _(tmp, shared):
    return ["train", "--config", _yaml(tmp, shared), "views.k=1"], ["views.k: got 1", "needs k >= 2"]


@case("BYOL without its EMA teacher")
def _(tmp, shared):
    return (
        ["train", "--config", _yaml(tmp, shared, loss={"name": "byol_pwe"})],
        ["model.teacher.enabled", "byol_pwe", "set model.teacher.enabled=true"],
    )


@case("teacher view index out of range")
def _(tmp, shared):
    return (
        ["config", "show", "--config", str(shared.config), "model.teacher={enabled: true, views: [5]}"],
        ["model.teacher.views: got [5]", "0..1"],
    )


@case("wrong value type")
def _(tmp, shared):
    return ["train", "--config", _yaml(tmp, shared), "train.max_steps=many"], ["train.max_steps", "'many'"]


@case("negative learning rate")
def _(tmp, shared):
    return ["train", "--config", _yaml(tmp, shared), "optim.lr=-0.1"], ["optim.lr", "greater than 0", "-0.1"]


@case("unknown precision")
def _(tmp, shared):
    return ["train", "--config", _yaml(tmp, shared), "train.precision=fp8"], ["train.precision", "'fp8'"]


@case("override without '='")
def _(tmp, shared):
    return ["train", "--config", _yaml(tmp, shared), "train.max_steps"], [
        "override 'train.max_steps'",
        "dotted.key=value",
    ]


@case("run name with a parent folder")
def _(tmp, shared):
    return ["train", "--config", _yaml(tmp, shared), "--name", "../escape"], [
        "output.name",
        "one folder name",
        "'../escape'",
    ]


@case("run name that is an absolute path")
def _(tmp, shared):
    return ["train", "--config", _yaml(tmp, shared), "--name", "/tmp/x"], ["output.name", "'/tmp/x'"]


@case("config file missing")
def _(tmp, shared):
    return ["train", "--config", str(tmp / "nope.yaml")], [f"config file not found: {tmp / 'nope.yaml'}"]


@case("config path is a folder")
def _(tmp, shared):
    (tmp / "folder.yaml").mkdir()
    return ["config", "show", "--config", str(tmp / "folder.yaml")], [
        f"{tmp / 'folder.yaml'}: expected a YAML config file"
    ]


@case("truncated YAML config")
def _(tmp, shared):
    text = shared.config.read_text()
    (tmp / "cut.yaml").write_text(text[: text.index("projector")] + "projector: {hidden_dim: 32, out_")
    return ["train", "--config", str(tmp / "cut.yaml")], [f"{tmp / 'cut.yaml'}: not valid YAML"]


@case("binary file as config")
def _(tmp, shared):
    (tmp / "weights.yaml").write_bytes(bytes(range(256)) * 4)
    return ["config", "show", "--config", str(tmp / "weights.yaml")], [f"{tmp / 'weights.yaml'}"]


@case("config is a list, not sections")
def _(tmp, shared):
    (tmp / "list.yaml").write_text("- data\n- train\n")
    return ["config", "show", "--config", str(tmp / "list.yaml")], [
        "list.yaml: expected a mapping of sections",
        "got list",
    ]


@case("extends cycle")
def _(tmp, shared):
    (tmp / "a.yaml").write_text("extends: b.yaml\n")
    (tmp / "b.yaml").write_text("extends: a.yaml\n")
    return ["config", "show", "--config", str(tmp / "a.yaml")], ["'extends' cycle"]


@case("unknown command-line option")
def _(tmp, shared):
    return ["train", "--config", str(shared.config), "--resme", "latest"], ["unrecognized arguments: --resme"]


# --- run folders and resume
@case("new run into an existing run folder")
def _(tmp, shared):
    return ["train", "--config", str(shared.config), "--name", "run"], [f"run folder {shared.run} already exists"]


@case("resume a run that does not exist")
def _(tmp, shared):
    return (
        ["train", "--config", str(shared.config), "--name", "never", "--resume", "latest"],
        [f"no run at {shared.runs / 'never'}"],
    )


@case("resume with a changed loss parameter")
def _(tmp, shared):
    return (
        ["train", "--config", str(shared.config), "--name", "run", "--resume", "latest", "loss.tau=0.5"],
        ["loss.tau: 0.2 -> 0.5", str(shared.run / "config.yaml")],
    )


@case("resume with a longer run but no --accept-config-changes")
def _(tmp, shared):
    return (
        ["train", "--config", str(shared.config), "--name", "run", "--resume", "latest", "train.max_steps=6"],
        ["train.max_steps: 3 -> 6", "--accept-config-changes"],
    )


@case("--accept-config-changes without --resume")
def _(tmp, shared):
    return (
        ["train", "--config", _yaml(tmp, shared), "--accept-config-changes"],
        ["--accept-config-changes only applies with --resume"],
    )


@case("resume from a checkpoint folder that does not exist")
def _(tmp, shared):
    missing = shared.run / "checkpoints" / "step_00000099"
    return ["train", "--resume", str(missing)], [f"--resume {missing}: no such checkpoint or run folder"]


@case("resume from a corrupt checkpoint state")
def _(tmp, shared):
    run = tmp / "runs" / "run"
    shutil.copytree(shared.run, run)
    config = write_tiny_yaml(tmp / "cfg.yaml", tmp / "runs", train=TRAIN)
    (run / "config.yaml").write_text(
        yaml.safe_dump(config_from_dict(tiny_raw(tmp / "runs", "run", train=TRAIN)).to_dict(), sort_keys=False)
    )
    (run / "model.safetensors").unlink()  # an interrupted run: a finished one is not resumed at all
    state = run / "checkpoints" / "step_00000003" / "trainer_state.json"  # the newest (the final state)
    state.write_text(state.read_text()[:20])
    return ["train", "--config", str(config), "--name", "run", "--resume", "latest"], [
        f"{state}: corrupt checkpoint state"
    ]


# --- data
def _folder_yaml(tmp: Path, root: Path) -> str:
    return str(
        write_tiny_yaml(
            tmp / "folder.yaml",
            tmp / "runs",
            data={"adapter": "image_folder", "options": {"root": str(root), "load_size": 16, "max_bad_fraction": 0.2}},
        )
    )


@case("image folder missing")
def _(tmp, shared):
    return ["train", "--config", _folder_yaml(tmp, tmp / "missing")], [str(tmp / "missing"), "does not exist"]


@case("image folder empty")
def _(tmp, shared):
    (tmp / "empty").mkdir()
    return ["train", "--config", _folder_yaml(tmp, tmp / "empty")], [str(tmp / "empty"), "has no images"]


@case("image folder with too many unreadable images")
def _(tmp, shared):
    for c in ("a", "b"):
        (tmp / "imgs" / c).mkdir(parents=True)
        for i in range(2):
            Image.new("RGB", (8, 8), (i * 50, 0, 0)).save(tmp / "imgs" / c / f"{i}.png")
    for i in range(3):
        (tmp / "imgs" / "a" / f"bad{i}.png").write_bytes(b"\x89PNG truncated")
    return ["train", "--config", _folder_yaml(tmp, tmp / "imgs")], ["unreadable", "max_bad_fraction"]


@case("unreadable (permission denied) config")
def _(tmp, shared):
    if os.geteuid() == 0:
        pytest.skip("running as root: file permissions do not stop root from reading")
    path = tmp / "secret.yaml"
    path.write_text(shared.config.read_text())
    path.chmod(0)
    return ["config", "show", "--config", str(path)], [f"{path}: cannot read"]


@case("EEG crop given in samples instead of seconds")
def _(tmp, shared):
    return (
        [
            "train",
            "--config",
            str(EEG_CONFIG),
            f"data.options.cache={shared.cache}",
            "data.options.test_fraction=0",
            f"output.runs_dir={tmp / 'runs'}",
            "views.options.crop_seconds=3000",
        ],
        ["views.options.crop_seconds: 3000 s is longer than", "30-s windows", "seconds, not samples"],
    )


@case("train on a partial EEG cache")
def _(tmp, shared):
    cache = tmp / "partial"
    shutil.copytree(shared.cache, cache)
    manifest = json.loads((cache / "manifest.json").read_text())
    manifest["complete"] = False
    (cache / "manifest.json").write_text(json.dumps(manifest))
    return (
        ["train", "--config", str(EEG_CONFIG), f"data.options.cache={cache}", f"output.runs_dir={tmp / 'runs'}"],
        [f"{cache}: partial cache", "mvapp data prepare sleep-edf"],
    )


@case("data info on an empty folder")
def _(tmp, shared):
    (tmp / "empty").mkdir()
    return ["data", "info", str(tmp / "empty")], [f"{tmp / 'empty'}: not a prepared EEG cache"]


@case("data info on a truncated manifest")
def _(tmp, shared):
    (tmp / "cache").mkdir()
    text = (shared.cache / "manifest.json").read_text()
    (tmp / "cache" / "manifest.json").write_text(text[: len(text) // 2])
    return ["data", "info", str(tmp / "cache")], [f"{tmp / 'cache' / 'manifest.json'}: corrupt manifest"]


@case("prepare from a missing source")
def _(tmp, shared):
    return (
        ["data", "prepare", "sleep-edf", "--source", str(tmp / "nope"), "--out", str(tmp / "cache")],
        [f"--source {tmp / 'nope'}: not a folder"],
    )


@case("prepare from an empty source folder")
def _(tmp, shared):
    (tmp / "src").mkdir()
    return (
        ["data", "prepare", "sleep-edf", "--source", str(tmp / "src"), "--out", str(tmp / "cache")],
        [f"--source {tmp / 'src'}: no sleep-edf recordings found"],
    )


@case("prepare a truncated EDF")
def _(tmp, shared):
    (tmp / "src").mkdir()
    for path in shared.raw_eeg.glob("SC4001*"):
        data = path.read_bytes()
        (tmp / "src" / path.name).write_bytes(data[: len(data) // 3] if path.name.endswith("PSG.edf") else data)
    out = tmp / "cache"
    out.mkdir()  # an existing empty folder: must stay empty
    return (
        ["data", "prepare", "sleep-edf", "--source", str(tmp / "src"), "--out", str(out)],
        ["SC4001E0-PSG.edf: truncated EDF file"],
    )


def _dreams_source(tmp: Path) -> Path:
    """Two DREAMS-format excerpts (4 epochs each) with their SHA256SUMS, in ``tmp/src``."""
    src = tmp / "src"
    write_dreams_excerpt(src, "excerpt1", 100.0, [5] * 12 + [2] * 12)
    write_dreams_excerpt(src, "excerpt2", 200.0, [2] * 12 + [1] * 12, derivation="CZ-A1")
    write_sha256sums(src, ["excerpt1.txt", "excerpt2.txt"])
    return src


@case("prepare a truncated DREAMS excerpt (beside a good one)")
def _(tmp, shared):
    src = _dreams_source(tmp)
    lines = (src / "excerpt2.txt").read_text().splitlines(keepends=True)
    (src / "excerpt2.txt").write_text("".join(lines[: len(lines) // 2]))
    write_sha256sums(src, ["excerpt1.txt", "excerpt2.txt"])  # a consistent folder: the length check refuses it
    return (
        ["data", "prepare", "dreams", "--source", str(src), "--out", str(tmp / "cache")],
        [f"{src / 'excerpt2.txt'}: truncated", "expected at least 24000 samples at 200 Hz, found 11999"],
    )


@case("prepare a DREAMS hypnogram shorter than its signal")
def _(tmp, shared):
    src = _dreams_source(tmp)
    (src / "Hypnogram_excerpt2.txt").write_text("[Hypnogram]\n" + "2\n" * 18)
    write_sha256sums(src, ["excerpt1.txt", "excerpt2.txt"])  # a consistent folder: the length check refuses it
    return (
        ["data", "prepare", "dreams", "--source", str(src), "--out", str(tmp / "cache")],
        [f"{src / 'Hypnogram_excerpt2.txt'}: hypnogram shorter than its signal", "expected 24 labels"],
    )


@case("prepare a DREAMS excerpt whose derivation is unknown")
def _(tmp, shared):
    src = _dreams_source(tmp)
    text = (src / "excerpt2.txt").read_text()
    (src / "excerpt2.txt").write_text("[C4-A2]" + text[text.index("\n") :])
    write_sha256sums(src, ["excerpt1.txt", "excerpt2.txt"])
    return (
        ["data", "prepare", "dreams", "--source", str(src), "--out", str(tmp / "cache")],
        [f"{src / 'excerpt2.txt'}: first line '[C4-A2]' is not a known DREAMS derivation", "[C3-A1], [CZ-A1]"],
    )


@case("prepare a DREAMS EDF whose rate does not divide 30 s")
def _(tmp, shared):
    import edfio
    import numpy as np

    src = _dreams_source(tmp)
    rate = 10 / 7  # 10 samples per 7-s data record
    signal = edfio.EdfSignal(
        np.zeros(180),
        sampling_frequency=rate,
        label="C3-A1",  # 18 records, 126 s
        physical_dimension="uV",
        physical_range=(-250.0, 250.0),
    )
    edfio.Edf([signal], data_record_duration=7.0).write(src / "excerpt1.edf")
    write_sha256sums(src, ["excerpt1.txt", "excerpt2.txt", "excerpt1.edf"])
    return (
        ["data", "prepare", "dreams", "--source", str(src), "--out", str(tmp / "cache")],
        [f"{src / 'excerpt1.edf'}: sampling rate 1.42857 Hz does not give a whole number of samples per 30-s epoch"],
    )


@case("prepare a modified DREAMS excerpt (checksum)")
def _(tmp, shared):
    src = _dreams_source(tmp)
    with open(src / "excerpt1.txt", "a") as handle:
        handle.write("    0.5000\n")
    return (
        ["data", "prepare", "dreams", "--source", str(src), "--out", str(tmp / "cache")],
        [f"{src / 'excerpt1.txt'}: sha256", f"in {src / 'SHA256SUMS'}"],
    )


@case("prepare into a cache made with other options")
def _(tmp, shared):
    return (
        [
            "data",
            "prepare",
            "sleep-edf",
            "--source",
            str(shared.raw_eeg),
            "--out",
            str(shared.cache),
            "--sfreq",
            "50",
            "--h-freq",
            "20",
        ],
        [f"{shared.cache}: cache was prepared with", "'sfreq': 100.0"],
    )


@case("prepare with a band edge above Nyquist (wrong units)")
def _(tmp, shared):
    return (
        ["data", "prepare", "sleep-edf", "--source", str(shared.raw_eeg), "--out", str(tmp / "c"), "--h-freq", "3500"],
        ["prepare options", "h_freq=3500.0 must be below the Nyquist frequency 50.0"],
    )


@case("prepare with an inverted band")
def _(tmp, shared):
    return (
        [
            "data",
            "prepare",
            "sleep-edf",
            "--source",
            str(shared.raw_eeg),
            "--out",
            str(tmp / "c"),
            "--l-freq",
            "30",
            "--h-freq",
            "10",
        ],
        ["l_freq=30.0 must be below h_freq=10.0"],
    )


@case("synth-psg into a non-empty folder")
def _(tmp, shared):
    return (
        [
            "data",
            "synth-psg",
            "--subjects",
            "1",
            "--format",
            "sleep-edf",
            "--hours",
            "0.1",
            "--out",
            str(shared.raw_eeg),
        ],
        [f"--out {shared.raw_eeg}: folder is not empty", "--overwrite"],
    )


@case("synth-psg with zero subjects")
def _(tmp, shared):
    return (
        ["data", "synth-psg", "--subjects", "0", "--format", "sleep-edf", "--out", str(tmp / "out")],
        ["--subjects", "expected an integer >= 1", "0"],
    )


@case("synth-psg --record-hours for the PhysioNet format")
def _(tmp, shared):
    return (
        [
            "data",
            "synth-psg",
            "--subjects",
            "1",
            "--format",
            "physionet2018",
            "--record-hours",
            "20",
            "--out",
            str(tmp / "out"),
        ],
        ["--record-hours 20.0", "--format sleep-edf"],
    )


# --- evaluation
@case("eval of a folder that is not a run")
def _(tmp, shared):
    return ["eval", "linear-probe", "--run", str(tmp)], [f"--run {tmp}: not a run folder"]


@case("eval with --knn-k 0")
def _(tmp, shared):
    return ["eval", "linear-probe", "--run", str(shared.run), "--knn-k", "0"], [
        "--knn-k: expected an integer >= 1, got '0'"
    ]


@case("eval with a negative batch size")
def _(tmp, shared):
    return ["eval", "linear-probe", "--run", str(shared.run), "--batch-size", "-4"], ["--batch-size", "got '-4'"]


@case("eval with C = 0")
def _(tmp, shared):
    return ["eval", "linear-probe", "--run", str(shared.run), "--C", "0"], ["--C: expected a number > 0, got '0'"]


@case("sleep staging with zero shots")
def _(tmp, shared):
    return ["eval", "sleep-staging", "--run", str(shared.run), "--shots", "0", "10"], ["--shots", "got '0'"]


@case("sleep staging with negative draws")
def _(tmp, shared):
    return ["eval", "sleep-staging", "--run", str(shared.run), "--draws", "-1"], ["--draws", "got '-1'"]


@case("sleep staging with a test fraction above 1")
def _(tmp, shared):
    return ["eval", "sleep-staging", "--run", str(shared.run), "--test-fraction", "1.5"], ["--test-fraction", "'1.5'"]


@case("eval of an unfinished run")
def _(tmp, shared):
    run = tmp / "run"
    shutil.copytree(shared.run, run)
    (run / "model.safetensors").unlink()
    return ["eval", "linear-probe", "--run", str(run)], [f"{run / 'model.safetensors'}: missing", "resume it"]


@case("eval of a run with truncated weights")
def _(tmp, shared):
    run = tmp / "run"
    shutil.copytree(shared.run, run)
    weights = run / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    return ["eval", "linear-probe", "--run", str(run)], [f"{weights}: unreadable weights file"]


@case("eval of a run with a truncated config.yaml")
def _(tmp, shared):
    run = tmp / "run"
    shutil.copytree(shared.run, run)
    text = (run / "config.yaml").read_text()
    (run / "config.yaml").write_text(text[: text.index("train:")] + "train: {max_steps: 3, batch_")
    return ["eval", "linear-probe", "--run", str(run)], [f"{run / 'config.yaml'}: not valid YAML"]


@case("hypnogram of another subject renamed to a PSG's night (issue 16 section 2)")
def _(tmp, shared):
    (tmp / "src").mkdir()
    shutil.copy(shared.raw_eeg / "SC4001E0-PSG.edf", tmp / "src")
    other = next(shared.raw_eeg.glob("SC4011*-Hypnogram.edf"))
    shutil.copy(other, tmp / "src" / "SC4001EC-Hypnogram.edf")
    return (
        ["data", "prepare", "sleep-edf", "--source", str(tmp / "src"), "--out", str(tmp / "cache")],
        [f"{tmp / 'src' / 'SC4001EC-Hypnogram.edf'}: patient field", f"its PSG {tmp / 'src' / 'SC4001E0-PSG.edf'}"],
    )


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_refused_in_one_line_and_writes_nothing(
    name: str, shared: Shared, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv, expected = CASES[name](tmp_path, shared)
    before = snapshot(tmp_path, shared.root)
    assert_refused(argv, expected, capsys)
    assert snapshot(tmp_path, shared.root) == before


# ----------------------------------------------------------------------------- several processes, disks, signals

_HOLD_LOCK = (
    "import sys, time\nfrom multiview_app.train.resume import RunLock\n"
    "lock = RunLock(sys.argv[1]).acquire()\nprint('locked', flush=True)\ntime.sleep(120)\n"
)


def test_two_processes_writing_one_run_folder(
    shared: Shared, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another process (holding the run's lock as a training process does) owns the run folder: a
    second ``mvapp train --resume`` into it is refused, naming the folder and the lock holder."""
    runs = tmp_path / "runs"
    shutil.copytree(shared.run, runs / "run")
    config = write_tiny_yaml(tmp_path / "cfg.yaml", runs, train=TRAIN)
    (runs / "run" / "config.yaml").write_text(
        yaml.safe_dump(config_from_dict(tiny_raw(runs, "run", train=TRAIN)).to_dict(), sort_keys=False)
    )
    (runs / "run" / "model.safetensors").unlink()  # an interrupted run: a finished one is not resumed at all
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_LOCK, str(runs / "run")],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        before = snapshot(tmp_path)
        line = assert_refused(
            ["train", "--config", str(config), "--name", "run", "--resume", "latest"],
            [f"run folder {runs / 'run'} is in use by another process", f"pid {holder.pid}"],
            capsys,
        )
        assert "--name" in line
        assert snapshot(tmp_path) == before
    finally:
        holder.kill()
        holder.wait()


def test_full_disk_during_a_checkpoint_keeps_the_older_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second checkpoint write fails with ENOSPC half-way: one error line naming the checkpoint and
    the cause, the temp folder is gone and the first checkpoint is intact and resumable."""
    from accelerate import Accelerator

    real_save = Accelerator.save_state
    calls = {"n": 0}

    def save_state(self, output_dir: str, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            (Path(output_dir) / "model.safetensors").write_bytes(b"partial")
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(self, output_dir=output_dir, **kwargs)

    monkeypatch.setattr(Accelerator, "save_state", save_state)
    config = write_tiny_yaml(tmp_path / "cfg.yaml", tmp_path / "runs", train={"max_steps": 5, "checkpoint_every": 1})
    run = tmp_path / "runs" / "disk"
    assert_refused(
        ["train", "--config", str(config), "--name", "disk"],
        [
            f"{run / 'checkpoints' / 'step_00000002'}: could not write the checkpoint",
            "No space left on device",
            "older checkpoints are intact",
            "step_00000001",
        ],
        capsys,
    )
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_00000001"]
    monkeypatch.setattr(Accelerator, "save_state", real_save)
    assert main(["train", "--config", str(config), "--name", "disk", "--resume", "latest"]) == 0
    assert "resumed from" in capsys.readouterr().out


@pytest.mark.slow
def test_sigterm_through_the_console_script(tmp_path: Path) -> None:
    """SIGTERM: the step finishes, a checkpoint is written, exit 143 with one line naming the resume command."""
    config = write_tiny_yaml(
        tmp_path / "cfg.yaml", tmp_path / "runs", train={"max_steps": 100000, "checkpoint_every": 0, "log_every": 1}
    )
    run = tmp_path / "runs" / "term"
    proc = subprocess.Popen(
        [sys.executable, "-m", "multiview_app.cli", "train", "--config", str(config), "--name", "term"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        deadline = time.monotonic() + 240
        while not ((run / "metrics.jsonl").is_file() and (run / "metrics.jsonl").read_text().count("\n") >= 2):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM
    lines = [line for line in err.splitlines() if line.strip() and not is_progress_line(line)]
    assert len(lines) == 1 and "Traceback" not in err, lines
    assert lines[0].startswith("mvapp: error: interrupted (SIGTERM) after step ")
    assert f"resume with: mvapp train --resume {run}" in lines[0]
    ckpts = sorted((run / "checkpoints").iterdir())
    assert len(ckpts) == 1 and (ckpts[0] / "trainer_state.json").is_file()


def test_unreadable_files_simulated(
    shared: Shared, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Permission denied (EACCES) on a config, on a run's weights and on a cache manifest, simulated at
    the open call so that it also runs as root: one line naming the file, nothing written."""
    denied = {
        str(tmp_path / "cfg.yaml"),
        str(tmp_path / "run" / "model.safetensors"),
        str(tmp_path / "cache" / "manifest.json"),
    }
    real_open = open

    def guarded_open(file, *args, **kwargs):
        if str(file) in denied:
            raise PermissionError(errno.EACCES, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    import builtins
    import io

    shutil.copy(shared.config, tmp_path / "cfg.yaml")
    shutil.copytree(shared.run, tmp_path / "run")
    shutil.copytree(shared.cache, tmp_path / "cache")
    from safetensors import torch as safetensors_torch

    real_load_file = safetensors_torch.load_file

    def guarded_load_file(filename, *args, **kwargs):
        if str(filename) in denied:
            raise PermissionError(errno.EACCES, "Permission denied", str(filename))
        return real_load_file(filename, *args, **kwargs)

    before = snapshot(tmp_path, shared.root)
    monkeypatch.setattr(builtins, "open", guarded_open)
    monkeypatch.setattr(io, "open", guarded_open)  # pathlib opens through io.open
    monkeypatch.setattr("multiview_app.train.run_io.load_file", guarded_load_file)
    assert_refused(
        ["config", "show", "--config", str(tmp_path / "cfg.yaml")],
        [f"{tmp_path / 'cfg.yaml'}: cannot read (Permission denied)"],
        capsys,
    )
    assert_refused(
        ["eval", "linear-probe", "--run", str(tmp_path / "run")],
        [f"{tmp_path / 'run' / 'model.safetensors'}: unreadable weights file", "Permission denied"],
        capsys,
    )
    assert_refused(
        ["data", "info", str(tmp_path / "cache")],
        ["Permission denied", str(tmp_path / "cache" / "manifest.json")],
        capsys,
    )
    monkeypatch.undo()
    assert snapshot(tmp_path, shared.root) == before
