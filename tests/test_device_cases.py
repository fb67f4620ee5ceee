"""The CUDA tests' code paths on the CPU (tests/test_cuda.py runs the same helpers on a GPU): every
registered view policy has a case and builds reproducible views on the data's device, one training step
per modality, resume equal to an uninterrupted run bit for bit."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _device_cases import MODALITIES, POLICY_CASES, check_policy_on, check_resume_is_exact, train_one_step

from multiview_app.data.views import VIEW_POLICIES

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Data shared by the cases of this module (digit domains, pair folder, EEG cache: written once)."""
    return tmp_path_factory.mktemp("device_cases")


def test_every_registered_view_policy_has_a_device_case() -> None:
    missing = [name for name in VIEW_POLICIES.names() if name not in POLICY_CASES]
    assert not missing, f"add a case for view policy/policies {missing} to POLICY_CASES in tests/_device_cases.py"
    assert set(POLICY_CASES) == set(VIEW_POLICIES.names()), "POLICY_CASES names a policy that is not registered"


@pytest.mark.parametrize("name", sorted(POLICY_CASES))
def test_view_policy_runs_on_cpu(name: str, workdir: Path) -> None:
    check_policy_on(name, CPU, workdir)


@pytest.mark.parametrize("modality", MODALITIES)
def test_one_training_step_per_modality(modality: str, workdir: Path) -> None:
    result = train_one_step(workdir, modality, "no")
    assert result.run_dir.is_dir()


def test_resume_equals_uninterrupted_run(tmp_path: Path) -> None:
    check_resume_is_exact(tmp_path, "no")
