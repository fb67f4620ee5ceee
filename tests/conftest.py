"""Suite-wide fixtures."""

from __future__ import annotations

import os
import sys

import pytest

# M3G's device loop runs eagerly in the suite (inductor's first compile of each shape costs tens of seconds to
# minutes on a 2-core CPU); tests/test_m3g_compiled.py turns compiling on for itself. Subprocesses inherit it.
os.environ.setdefault("MVAPP_M3G_COMPILE", "0")

# Under pytest-xdist (``make test`` runs two workers on a 2-core machine) each worker and the CLI processes it
# starts use one intra-op thread, so the two workers do not oversubscribe the cores.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_variable, "1")


@pytest.fixture(autouse=True)
def _fresh_decoded_splits():
    """Every test starts without decoded image splits kept by an earlier test of this process
    (``multiview_app.data.domains.adapter.DECODED_SPLITS``), so a test that watches files being decoded
    sees them decoded. Imports nothing when no test has loaded the adapter yet."""
    module = sys.modules.get("multiview_app.data.domains.adapter")
    if module is not None:
        module.DECODED_SPLITS.clear()
    yield
