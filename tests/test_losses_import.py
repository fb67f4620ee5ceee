"""``import multiview_app.losses`` loads nothing beyond what ``import torch`` loads, plus pydantic (the options'
models): numba, scipy and the other optional packages are imported where they are used."""

from __future__ import annotations

import json
import subprocess
import sys

LOADED = "import json, sys\n{imports}\nprint(json.dumps(sorted(sys.modules)))"
# torch, then pydantic with the parts the package's option models use
BASELINE = (
    "import torch\nimport pydantic, pydantic.fields, pydantic.json_schema, pydantic.types\n"
    "from pydantic import BaseModel, ConfigDict, ValidationError, create_model"
)


def loaded_modules(imports: str) -> set[str]:
    """Names in ``sys.modules`` of a fresh interpreter after ``imports``."""
    done = subprocess.run(
        [sys.executable, "-c", LOADED.format(imports=imports)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_importing_the_losses_loads_only_torch_and_pydantic() -> None:
    baseline = loaded_modules(BASELINE)
    after = loaded_modules("import torch\nimport multiview_app.losses")
    own = {"multiview_app", "pydantic", "pydantic_core"}  # the package, and pydantic's lazily loaded parts
    extra = sorted(name for name in after - baseline if name.split(".")[0] not in own)
    assert extra == [], f"import multiview_app.losses also loads {extra}"
