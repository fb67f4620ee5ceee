"""scripts/run_eeg_demo.sh: the supervised-ceiling row is opt-in (``ceiling`` in configs/demo_eeg.yaml, off; ``make
run-full`` / ``DEMO_CEILING=true`` on). The script runs against a stand-in ``mvapp`` that records its commands."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FAKE_MVAPP = """#!/usr/bin/env bash
echo "MVAPP $*" >> "$MVAPP_CALLS"
if [ "$1" = train ]; then mkdir -p runs/eeg_synthetic_m3g_demo; fi
if [ "$1 $2" = "data synth-psg" ]; then
  while [ $# -gt 0 ]; do if [ "$1" = --out ]; then mkdir -p "$2" && touch "$2/x"; fi; shift; done
fi
"""


def _demo(tmp_path: Path, ceiling: str | None) -> tuple[int, list[str], str]:
    """Run the demo script with the stand-in: (exit status, the mvapp commands, stderr)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "mvapp").write_text(FAKE_MVAPP)
    (bin_dir / "mvapp").chmod(0o755)
    # the script reads its config with this interpreter; the compile warm-up it starts beside the synthesis is skipped
    (bin_dir / "python").write_text(
        f'#!/usr/bin/env bash\n[ "$1 $2" = "-m multiview_app.losses.warmup" ] && exit 0\nexec {sys.executable} "$@"\n'
    )
    (bin_dir / "python").chmod(0o755)
    calls = tmp_path / "calls.txt"
    calls.write_text("")
    work = tmp_path / "repo"  # a copy of the script and configs: the demo writes runs/ beside them
    (work / "scripts").mkdir(parents=True, exist_ok=True)
    (work / "configs").mkdir(exist_ok=True)
    (work / "scripts" / "run_eeg_demo.sh").write_text((REPO / "scripts" / "run_eeg_demo.sh").read_text())
    (work / "configs" / "demo_eeg.yaml").write_text((REPO / "configs" / "demo_eeg.yaml").read_text())
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEMO_")}
    env.update(MVAPP=str(bin_dir / "mvapp"), MVAPP_CALLS=str(calls), DEMO_DATA=str(tmp_path / "data"))
    if ceiling is not None:
        env["DEMO_CEILING"] = ceiling
    done = subprocess.run(
        ["bash", "scripts/run_eeg_demo.sh"], cwd=work, env=env, capture_output=True, text=True, timeout=120
    )
    return done.returncode, calls.read_text().splitlines(), done.stderr


@pytest.mark.parametrize("ceiling", [None, "true"])
def test_the_ceiling_row_is_trained_and_probed_only_when_asked(tmp_path: Path, ceiling: str | None) -> None:
    status, calls, stderr = _demo(tmp_path, ceiling)
    assert status == 0, stderr
    evals = [c for c in calls if c.startswith("MVAPP eval sleep-staging")]
    trained = any(c.startswith("MVAPP experiment supervised-ceiling") for c in calls)
    assert len(evals) == 2
    if ceiling == "true":
        assert trained and not any("--no-ceiling" in c for c in evals)
    else:  # the config's default
        assert not trained and all(c.endswith("--no-ceiling") for c in evals)


def test_a_bad_ceiling_value_is_one_clear_error(tmp_path: Path) -> None:
    status, calls, stderr = _demo(tmp_path, "maybe")
    assert status == 2 and not calls
    assert stderr.strip() == "DEMO_CEILING / ceiling: expected true or false, got 'maybe'"
