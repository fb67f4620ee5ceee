"""The synthetic PSG writer's WFDB records (``write_wfdb_record``: a ``wfdb.Record`` with a vectorized range
check) are byte for byte what ``wfdb.wrsamp`` writes; and ``data/eeg``'s writer and readers import without torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

wfdb = pytest.importorskip("wfdb")


def test_records_equal_wfdb_wrsamp_byte_for_byte(tmp_path: Path) -> None:
    from multiview_app.data.eeg.synth import write_wfdb_record

    rng = np.random.default_rng(0)
    signals = {name: (rng.standard_normal(3000) * scale).astype(np.float32) for name, scale in [("A", 30), ("B", 5)]}
    ours = tmp_path / "ours"
    ours.mkdir()
    write_wfdb_record(ours, "tr03-0001", signals, 200.0, [(0, "W")], comments=["subject: S0001"])
    reference = tmp_path / "reference"
    reference.mkdir()
    wfdb.wrsamp(
        "tr03-0001",
        fs=200.0,
        units=["uV", "uV"],
        sig_name=["A", "B"],
        p_signal=np.stack(list(signals.values()), axis=1),
        fmt=["16", "16"],
        comments=["subject: S0001"],
        write_dir=str(reference),
    )
    for suffix in (".hea", ".dat"):
        assert (ours / f"tr03-0001{suffix}").read_bytes() == (reference / f"tr03-0001{suffix}").read_bytes(), suffix


def test_the_vectorized_range_check_refuses_out_of_range_samples() -> None:
    from multiview_app.data.eeg.synth import _fast_checked_record

    record = _fast_checked_record()(
        record_name="r", d_signal=np.array([[0], [40000]], dtype=np.int64), fmt=["16"], sig_len=2, n_sig=1
    )
    with pytest.raises(IndexError, match="outside"):
        record.check_sig_cohesion([], expanded=False)


def test_synthesis_and_prepare_modules_import_without_torch() -> None:
    code = (
        "import sys, multiview_app.data.eeg.synth, multiview_app.data.eeg.cache, multiview_app.data.cli; "
        "sys.exit('torch' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
