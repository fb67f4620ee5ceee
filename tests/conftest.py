"""Suite-wide fixtures."""

from __future__ import annotations

import sys

import pytest


@pytest.fixture(autouse=True)
def _fresh_decoded_splits():
    """Every test starts without decoded image splits kept by an earlier test of this process
    (``multiview_app.data.domains.adapter.DECODED_SPLITS``), so a test that watches files being decoded
    sees them decoded. Imports nothing when no test has loaded the adapter yet."""
    module = sys.modules.get("multiview_app.data.domains.adapter")
    if module is not None:
        module.DECODED_SPLITS.clear()
    yield
