"""Every workflow block of README.md (``<!-- workflow: NAME -->`` + a bash fence) runs as written, in order,
in a folder holding the repository's configs/ and scripts/ and the state `make run` leaves (its demo_data/
caches, made here at a tiny size: the README says each block runs after `make run`), at a tiny size: the only edits are
the substitutions below (fewer nights, steps, draws; narrower encoders: the EEG config's paper width 256 made
its feature extraction take minutes on CPU; digit-domain images decoded in this process), and each must
match the README, so a README change that no longer fits them fails here instead of going stale."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from multiview_app.cli import main

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

#: the digits configs' small_cnn at width 8 (32 in the configs): the linear probes at the end of training
#: encode every digit with the trained and the random-init model
NARROW_DIGITS_CNN = "model.encoders.image.width=8"
#: workflow -> (README text, tiny replacement); every pair must occur in its block
TINY: dict[str, list[tuple[str, str]]] = {
    "eeg": [
        ("train.max_steps=400 ", "train.max_steps=3 model.projector.hidden_dim=32 "),
        ("--folds 2 --draws 3", "--folds 2 --draws 1 --shots 5"),
        ("--folds 5 --draws 3", "--folds 2 --draws 1 --shots 5"),
    ],
    "domains": [
        ("synth-domains --out data/digit-domains", "synth-domains --out data/digit-domains --limit 40"),
        # decoding in this process: 2 DataLoader workers per split of 40 images cost more than the decoding
        # (test_domains.py::test_decode_workers_preload_the_same_images_... covers the workers)
        ("--seeds 0,1", "--seeds 0 --erm-steps 3 --set train.max_steps=3 data.options.decode_workers=0"),
        (
            "--seeds 0 --protocol both",
            "--seeds 0 --protocol both --no-erm --set train.max_steps=3 data.options.decode_workers=0",
        ),
    ],
    "pairs": [("configs/pairs_m3g.yaml train.max_steps=200", "configs/pairs_m3g.yaml train.max_steps=3")],
    "tune": [
        ("--trials 8 --workers 2", f"--trials 2 --workers 1 train.max_steps=4 tune.report_every=2 {NARROW_DIGITS_CNN}")
    ],
    "export": [("train.max_steps=200", f"train.max_steps=3 {NARROW_DIGITS_CNN}")],
}


def workflow_blocks() -> dict[str, list[str]]:
    """``{name: [command lines]}`` of the README's workflow blocks (comments and blank lines dropped)."""
    text = README.read_text()
    blocks = {}
    for match in re.finditer(r"<!-- workflow: (\w+) -->\n```bash\n(.*?)```", text, flags=re.S):
        lines = [line.split("  #")[0].rstrip() for line in match.group(2).splitlines()]
        blocks[match.group(1)] = [line for line in lines if line and not line.startswith("#")]
    return blocks


def test_readme_names_every_workflow_and_each_has_tiny_substitutions() -> None:
    blocks = workflow_blocks()
    assert set(blocks) == set(TINY), f"README workflows {sorted(blocks)} vs tested {sorted(TINY)}"
    for name, pairs in TINY.items():
        text = "\n".join(blocks[name])
        for old, _ in pairs:
            assert old in text, f"README workflow {name!r} no longer contains {old!r}: update TINY"
        assert blocks[name][0] == ". .venv/bin/activate", f"workflow {name!r} must start from the venv"


def run_line(line: str, cwd: Path) -> None:
    """One README command: ``mvapp ...`` in this process, ``python scripts/...`` in a subprocess."""
    argv = shlex.split(line)
    if argv[0] == "mvapp":
        assert main(argv[1:]) == 0, line
    elif argv[0] == "python":
        done = subprocess.run([sys.executable, *argv[1:]], cwd=cwd, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{line}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    else:
        raise AssertionError(f"README command the test cannot run: {line!r}")


#: what `make run` leaves behind (scripts/run_eeg_demo.sh), at a tiny size: its two prepared caches
MAKE_RUN_STATE = [
    "mvapp data synth-psg --subjects 6 --nights 1 --format physionet2018 --hours 4 --compress 6 --seed 0 "
    "--out demo_data/physionet2018_raw",
    "mvapp data prepare physionet2018 --source demo_data/physionet2018_raw --out demo_data/physionet2018_cache",
    "mvapp data synth-psg --subjects 4 --nights 1 --format sleep-edf --hours 4 --compress 6 --seed 1000 "
    "--out demo_data/sleep_edf_raw",
    "mvapp data prepare sleep-edf --source demo_data/sleep_edf_raw --out demo_data/sleep_edf_cache",
]


@pytest.fixture(scope="module")
def make_run_state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with demo_data/ as `make run` leaves it (tiny), made once for every block."""
    root = tmp_path_factory.mktemp("after_make_run")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        for line in MAKE_RUN_STATE:
            run_line(line, root)
    return root / "demo_data"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TINY))
def test_readme_workflow_runs_in_order_at_tiny_size(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_run_state: Path
) -> None:
    for folder in ("configs", "scripts"):
        (tmp_path / folder).symlink_to(ROOT / folder, target_is_directory=True)
    (tmp_path / "demo_data").symlink_to(make_run_state, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    lines = workflow_blocks()[name]
    text = "\n".join(lines[1:])  # the venv line is the environment this test already runs in
    for old, new in TINY[name]:
        text = text.replace(old, new)
    for line in text.splitlines():
        run_line(line, tmp_path)
