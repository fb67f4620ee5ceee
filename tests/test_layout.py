"""Package layout contracts: modality folders register through one list, train/ never imports
eval/ (neither by an import statement nor by naming the module in a string for a registry or
importlib), config.py imports no layer above the registries, training callbacks plug in by name,
``--resume latest --name RUN`` finds its run."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest
from _train_helpers import tiny_config, write_tiny_yaml

from multiview_app.cli import main
from multiview_app.config import ConfigError
from multiview_app.data.adapters import ADAPTERS, MODALITY_PACKAGES
from multiview_app.data.views import VIEW_POLICIES
from multiview_app.train.callbacks import TRAIN_CALLBACKS, StepEvent, TrainCallback
from multiview_app.train.trainer import train

PACKAGE = Path(__file__).resolve().parents[1] / "multiview_app"


# A string constant that names a module of this package (``"multiview_app.eval.callbacks"``), as
# registries (``Registry(modules=...)``) and ``importlib.import_module`` take them.
_MODULE_STRING = re.compile(r"multiview_app(\.[A-Za-z_][A-Za-z0-9_]*)+")


def _is_package_module(name: str) -> bool:
    """Whether ``name`` (``multiview_app.x.y``) is a module or package of this source tree."""
    relative = Path(*name.split(".")[1:])
    return (PACKAGE / relative).with_suffix(".py").is_file() or (PACKAGE / relative / "__init__.py").is_file()


def _named_modules(tree: ast.AST) -> set[str]:
    """Package modules named by string constants in ``tree`` (string-named imports)."""
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and _MODULE_STRING.fullmatch(node.value)
        and _is_package_module(node.value)
    }


def _imported_modules(path: Path, with_strings: bool = True) -> set[str]:
    """Absolute names of the modules ``path`` imports (relative imports resolved), including (unless
    ``with_strings`` is False) the package modules it names as strings (registries' ``modules=``,
    ``importlib.import_module``)."""
    module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    package = module.rsplit(".", 1)[0] if path.name != "__init__.py" else module.removesuffix(".__init__")
    tree = ast.parse(path.read_text())
    found: set[str] = _named_modules(tree) if with_strings else set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[: len(base) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.add(name)
    return found


@pytest.mark.parametrize(
    "lower, upper",
    [
        ("train", "eval"),
        ("data", "train"),
        ("data", "eval"),
        ("models", "train"),
        ("losses", "train"),
        ("train", "tune"),
        ("eval", "tune"),
        ("data", "tune"),
        ("models", "tune"),
        ("data", "experiments"),
        ("models", "experiments"),
        ("losses", "experiments"),
        ("train", "experiments"),
        ("eval", "experiments"),
        ("tune", "experiments"),
        ("export", "experiments"),
    ],
)
def test_dependencies_point_down(lower: str, upper: str) -> None:
    offenders = [
        str(path.relative_to(PACKAGE))
        for path in (PACKAGE / lower).rglob("*.py")
        if any(
            m == f"multiview_app.{upper}" or m.startswith(f"multiview_app.{upper}.") for m in _imported_modules(path)
        )
    ]
    assert not offenders, f"{lower}/ imports {upper}/: {offenders}"


def test_string_named_imports_are_seen() -> None:
    """The detector finds module paths in strings (so a registration list cannot hide an upward arrow)."""
    tree = ast.parse(
        'REG = Registry("x", modules=("multiview_app.eval.callbacks", "multiview_app.nope"))\n'
        'importlib.import_module("multiview_app.tune.objective"); FORMAT = "multiview_app.export/1"'
    )
    assert _named_modules(tree) == {"multiview_app.eval.callbacks", "multiview_app.tune.objective"}


# Layers above the schema: config.py (imported by every layer) must not import them, statically or by
# name. It may ask the registries of losses / data / models and multiview_app.plugins (the top-level
# list of modules that fill the training-callback registry, loaded lazily on first lookup).
ABOVE_CONFIG = ("train", "eval", "tune", "export", "experiments", "cli", "config_cli")


def test_config_imports_no_layer_above_it() -> None:
    imported = _imported_modules(PACKAGE / "config.py")
    climbing = sorted(
        m
        for m in imported
        for upper in ABOVE_CONFIG
        if m == f"multiview_app.{upper}" or m.startswith(f"multiview_app.{upper}.")
    )
    assert not climbing, f"config.py imports layers above it: {climbing}"


@pytest.mark.parametrize("module", ["config_checks.py", "options.py"])
def test_config_checks_and_options_import_no_layer_above_them(module: str) -> None:
    """The registry checks of a config (config_checks.py) ask only the losses / data / models registries and
    plugins.py; options.py (options models, the one error formatter) imports nothing of the package."""
    imported = {m for m in _imported_modules(PACKAGE / module) if m.startswith("multiview_app")}
    climbing = sorted(
        m
        for m in imported
        for upper in ABOVE_CONFIG
        if m == f"multiview_app.{upper}" or m.startswith(f"multiview_app.{upper}.")
    )
    assert not climbing, f"{module} imports layers above it: {climbing}"
    if module == "options.py":
        assert not imported


def test_protocols_are_pure_maths() -> None:
    """eval/protocols/ takes arrays and returns dicts: it imports no run folders (train/), models, losses,
    adapters or view policies, and none of the evaluators above it."""
    allowed_eval = "multiview_app.eval.protocols"
    forbidden = (
        "multiview_app.train",
        "multiview_app.models",
        "multiview_app.losses",
        "multiview_app.data.adapters",
        "multiview_app.data.views",
        "multiview_app.tune",
        "multiview_app.experiments",
    )
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(
            m
            for m in _imported_modules(path)
            if m.startswith(forbidden) or (m.startswith("multiview_app.eval") and not m.startswith(allowed_eval))
        )
        for path in (PACKAGE / "eval" / "protocols").rglob("*.py")
    }
    assert not {k: v for k, v in offenders.items() if v}, offenders


#: the modules that launch training: the trainer (``train``, ``Trainer``), ``mvapp train`` and the
#: experiments' "train unless done"
TRAINING_LAUNCHERS = ("multiview_app.train.trainer", "multiview_app.train.cli", "multiview_app.experiments")


@pytest.mark.parametrize("layer", ["eval", "export"])
def test_evaluation_layers_launch_no_training(layer: str) -> None:
    """eval/ (evaluators, protocols, ERM's config) and export/ score or write run folders that exist: none of
    their modules imports the trainer or the experiments layer, statically or by name, so training is
    launched only by ``mvapp train``, tune trials and experiments/ (ensure_trained)."""
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(m for m in _imported_modules(path) if m.startswith(TRAINING_LAUNCHERS))
        for path in (PACKAGE / layer).rglob("*.py")
    }
    assert not {k: v for k, v in offenders.items() if v}, offenders


def test_plugins_module_is_a_leaf_naming_only_registration_modules() -> None:
    """plugins.py names upper layers (by design) but imports nothing of the package except the
    registry class, so importing it from config.py or train/ loads no upper layer."""
    path = PACKAGE / "plugins.py"
    statically = {m for m in _imported_modules(path, with_strings=False) if m.startswith("multiview_app")}
    assert statically == {"multiview_app.registry"}
    from multiview_app.plugins import TRAIN_CALLBACK_MODULES

    assert set(TRAIN_CALLBACK_MODULES) == _named_modules(ast.parse(path.read_text()))


def test_generic_data_modules_import_no_modality_folder() -> None:
    for name in ("adapters.py", "views.py", "batch.py"):
        # static imports only: adapters.py's MODALITY_PACKAGES is the one list that names them (by design)
        imported = _imported_modules(PACKAGE / "data" / name, with_strings=False)
        assert not [m for m in imported if any(m.startswith(pkg) for pkg in MODALITY_PACKAGES)], name


def test_every_modality_package_registers_something() -> None:
    import importlib

    for package in MODALITY_PACKAGES:
        module = importlib.import_module(package)
        registered = [n for n in ADAPTERS.names() if ADAPTERS.get(n).__module__.startswith(module.__name__)]
        registered += [n for n in VIEW_POLICIES.names() if VIEW_POLICIES.get(n).__module__.startswith(module.__name__)]
        assert registered, f"{package} registers no adapter and no view policy"


class _Recorder(TrainCallback):
    name = "recorder"
    calls: list[Any] = []

    def __init__(self, cfg: Any) -> None:
        self.steps: list[int] = []

    def on_step_end(self, event: StepEvent) -> None:
        assert event.model.training and event.total_steps == 3
        self.steps.append(event.step)

    def on_train_end(self, run_dir: Path, is_main_process: bool) -> dict[str, Any]:
        assert (run_dir / "model.safetensors").is_file()  # final weights exist before end hooks
        return {"steps": self.steps}

    def report(self, result: dict[str, Any]) -> str:
        return f"recorder saw {result['steps']}"


def test_named_callback_runs_after_each_step_and_at_the_end(tmp_path: Path) -> None:
    if "test-recorder" not in TRAIN_CALLBACKS:
        TRAIN_CALLBACKS.register("test-recorder")(_Recorder)
    cfg = tiny_config(tmp_path, "cb", train={"max_steps": 3, "callbacks": ["test-recorder"]})
    result = train(cfg)
    assert result.evaluation == {"recorder": {"steps": [1, 2, 3]}}
    assert result.reports == ["recorder saw [1, 2, 3]"]


def test_unknown_callback_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="train.callbacks: unknown callback.*'nope'.*available: .*linear-probe"):
        tiny_config(tmp_path, "cb", train={"max_steps": 3, "callbacks": ["nope"]})


def test_resume_latest_with_only_a_run_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # default output.runs_dir is ./runs
    config = write_tiny_yaml(tmp_path / "tiny.yaml", Path("runs"), train={"max_steps": 2, "checkpoint_every": 1})
    assert main(["train", "--config", str(config), "--name", "named", "train.max_steps=2"]) == 0
    capsys.readouterr()
    # a finished run is found by its name alone; resuming it says so and trains nothing (issue 27)
    metrics = (tmp_path / "runs" / "named" / "metrics.jsonl").read_text()
    assert main(["train", "--resume", "latest", "--name", "named"]) == 0
    out = capsys.readouterr().out
    assert "is finished" in out and "--accept-config-changes" in out and "resumed from" not in out
    assert (tmp_path / "runs" / "named" / "metrics.jsonl").read_text() == metrics
    # asked to extend it, it resumes from its last checkpoint
    assert main(["train", "--resume", "latest", "--name", "named", "train.max_steps=3", "--accept-config-changes"]) == 0
    out = capsys.readouterr().out
    assert "resumed from" in out and "trained 1 step (2 -> 3) in " in out and "; the run: 3 steps in " in out
    assert main(["train", "--resume", "latest", "--name", "missing"]) == 2
    assert "no run config at" in capsys.readouterr().err
    assert main(["train", "--resume", "latest"]) == 2
    assert "--resume latest needs --config FILE or --name RUN" in capsys.readouterr().err


def test_library_train_on_a_finished_run_trains_nothing(tmp_path: Path) -> None:
    """The finished-run guard lives in the Trainer, so ``train(cfg, resume=...)`` from Python stops too."""
    cfg = tiny_config(tmp_path, "done", train={"max_steps": 2, "checkpoint_every": 1})
    first = train(cfg)
    metrics = (first.run_dir / "metrics.jsonl").read_text()
    model_mtime = (first.run_dir / "model.safetensors").stat().st_mtime_ns
    again = train(cfg, resume="latest")
    assert again.already_finished and not first.already_finished
    assert again.steps == first.steps == 2
    assert "is finished" in again.notes[-1] and "--accept-config-changes" in again.notes[-1]
    assert (first.run_dir / "metrics.jsonl").read_text() == metrics
    assert (first.run_dir / "model.safetensors").stat().st_mtime_ns == model_mtime
