"""The synthetic PSG generator writes the same bytes as when ``synth_identity.json`` was recorded: every file
of a few small ``synth_psg`` runs (both formats, 2 subjects, two seeds, excerpts and uncompressed nights, a
wake-padded Sleep-EDF recording) has its recorded SHA-256. A refactoring guard (the split of ``synth.py`` into
a package, the ``--signals`` switch whose default must leave the output alone).

Byte digests of float signals depend on the CPU's SIMD paths and on the numpy / scipy / writer versions
(``tests/test_eeg_synth_events.py`` ``PIN_TOLERANCE``), so the JSON also records that environment and the test
skips, saying so, elsewhere. Re-record on purpose (a deliberate generator change, said in the commit) with
``MVAPP_WRITE_SYNTH_HASHES=1 pytest tests/test_synth_identity.py``."""

from __future__ import annotations

import hashlib
import json
import os
import platform
from importlib.metadata import version
from pathlib import Path

import pytest

HASH_FILE = Path(__file__).with_name("synth_identity.json")
CASES: dict[str, dict] = {
    "sleep-edf/seed0/compress6": {"fmt": "sleep-edf", "seed": 0, "hours": 3.0, "compress": 6},
    "sleep-edf/seed11/compress6": {"fmt": "sleep-edf", "seed": 11, "hours": 3.0, "compress": 6},
    "sleep-edf/seed0/compress1": {"fmt": "sleep-edf", "seed": 0, "hours": 0.5, "compress": 1, "record_hours": 0},
    "sleep-edf/seed11/compress1/padded": {
        "fmt": "sleep-edf",
        "seed": 11,
        "hours": 0.5,
        "compress": 1,
        "record_hours": 1.0,
    },
    "physionet2018/seed0/compress6": {"fmt": "physionet2018", "seed": 0, "hours": 3.0, "compress": 6},
    "physionet2018/seed11/compress6": {"fmt": "physionet2018", "seed": 11, "hours": 3.0, "compress": 6},
    "physionet2018/seed0/compress1": {"fmt": "physionet2018", "seed": 0, "hours": 0.5, "compress": 1},
    "physionet2018/seed11/compress1": {"fmt": "physionet2018", "seed": 11, "hours": 0.5, "compress": 1},
}
"""``synth_psg`` keyword arguments per case (2 subjects, 1 night each)."""


def environment() -> dict[str, object]:
    """What byte digests of generated floats depend on: machine, CPU features numpy dispatches on, versions."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__

        features = sorted(name for name, present in __cpu_features__.items() if present)
    except ImportError:  # a numpy without that private table: the versions still pin most of it
        features = []
    packages = {name: version(name) for name in ("numpy", "scipy", "edfio", "wfdb", "h5py")}
    return {"machine": platform.machine(), "cpu_features": " ".join(features), "packages": packages}


def file_hashes(out: Path, case: dict) -> dict[str, str]:
    """SHA-256 of every file ``synth_psg`` writes for ``case`` into ``out``: file name -> hex digest."""
    from multiview_app.data.eeg.synth import synth_psg

    written = synth_psg(out, subjects=2, nights=1, progress=False, **case)
    assert sorted(p.name for p in written) == sorted(p.name for p in out.iterdir()), "files not listed by synth_psg"
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(written)}


def _recorded() -> dict:
    if os.environ.get("MVAPP_WRITE_SYNTH_HASHES") == "1" or not HASH_FILE.exists():
        return {}
    return json.loads(HASH_FILE.read_text())


@pytest.fixture(scope="module")
def recorded() -> dict:
    """The JSON's content (empty when re-recording); skips the module on a machine it was not recorded on."""
    data = _recorded()
    if data and data["environment"] != environment():
        pytest.skip(f"{HASH_FILE.name} was recorded on {data['environment']}; here {environment()}: re-record")
    return data


@pytest.mark.parametrize("name", list(CASES))
def test_synth_psg_writes_the_recorded_bytes(name: str, tmp_path: Path, recorded: dict) -> None:
    hashes = file_hashes(tmp_path, CASES[name])
    if not recorded:  # recording: merge this case into the file
        data = json.loads(HASH_FILE.read_text()) if HASH_FILE.exists() else {}
        data = {"environment": environment(), "cases": {**data.get("cases", {}), name: hashes}}
        data["cases"] = {k: data["cases"][k] for k in CASES if k in data["cases"]}
        HASH_FILE.write_text(json.dumps(data, indent=1) + "\n")
        pytest.skip(f"recorded {len(hashes)} digests of {name} into {HASH_FILE.name}")
    expected = recorded["cases"][name]
    assert sorted(hashes) == sorted(expected), f"{name}: other files written"
    changed = [file for file, digest in hashes.items() if digest != expected[file]]
    assert not changed, f"{name}: bytes changed in {changed}"


FILES_PER_NIGHT = {"sleep-edf": 2, "physionet2018": 3}
"""Files of one night: PSG + hypnogram EDF; WFDB .hea, .dat, .arousal."""


def test_recorded_cases_are_the_cases(recorded: dict) -> None:
    if not recorded:
        pytest.skip("recording")
    assert list(recorded["cases"]) == list(CASES)
    for name, hashes in recorded["cases"].items():
        assert len(hashes) == 2 * FILES_PER_NIGHT[CASES[name]["fmt"]], name
