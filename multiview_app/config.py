"""Typed run configuration (pydantic v2, unknown keys rejected), YAML loading, dotted overrides.

A config file has the sections ``data, views, model, loss, optim, train, eval, tune, output``; a file may
start with ``extends: other.yaml`` (path relative to the file) and is deep-merged over it. Command
line overrides are ``dotted.key=value`` with YAML-parsed values (``loss.epsilon=0.1``).
Every validation problem is reported as ``ConfigError`` whose message names the dotted key, the
value and what is allowed (:func:`multiview_app.options.format_validation_error`). This module is the
schema and its loading; the checks that ask the registries (loss, adapter, view policy, encoders,
callbacks) are in :mod:`multiview_app.config_checks`.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from .config_checks import accepted_options, check_cross_sections
from .options import SECTION_KEYS, ConfigError, format_validation_error


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=())


class DataConfig(_Strict):
    """Which adapter reads the source files, and its options (validated by the adapter's ``Options``)."""

    adapter: str = "digits"
    options: dict[str, Any] = Field(default_factory=dict)


class ViewsConfig(_Strict):
    """View policy, number of training views ``k`` and batch mode (poly-view Sec. 3.2)."""

    policy: str = "augment"
    k: int = Field(2, ge=1)
    batch_mode: Literal["growing", "fixed"] = "growing"
    options: dict[str, Any] = Field(default_factory=dict)


class TeacherConfig(_Strict):
    """EMA teacher (``train/methods.py``). With a BYOL loss (``byol_pwe`` / ``byol_ave``) it is BYOL's
    target branch (EMA encoder + projector, no gradient) on every view (``views: all``), compared with
    the online predictions; with any other loss (M3G Sec. 2.1) it embeds the listed views (detached)
    and the loss is averaged over them, each time replacing the student's embedding of that view."""

    enabled: bool = False
    momentum_base: float = Field(0.99, gt=0.0, lt=1.0)
    views: list[int] | Literal["all"] = "all"


class ModelConfig(_Strict):
    """Encoders per modality (``{modality: {name, **kwargs}}``), projector, optional predictor, teacher."""

    encoders: dict[str, dict[str, Any]] = Field(default_factory=lambda: {"image": {"name": "small_cnn"}})
    projector: dict[str, Any] = Field(default_factory=dict)
    predictor: dict[str, Any] | None = None
    teacher: TeacherConfig = Field(default_factory=TeacherConfig)

    @field_validator("encoders")
    @classmethod
    def _encoders_named(cls, encoders: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        if not encoders:
            raise ValueError("need at least one {modality: {name: ...}}")
        for modality, spec in encoders.items():
            if "name" not in spec:
                raise ValueError(f"encoder for modality '{modality}' needs a 'name' (e.g. small_cnn)")
        return encoders


class LossConfig(BaseModel):
    """``name`` of the loss head plus its parameters as extra keys (checked against the loss)."""

    model_config = ConfigDict(extra="allow", protected_namespaces=())
    name: str = "infonce_pwe"

    @property
    def params(self) -> dict[str, Any]:
        """Loss parameters (every key except ``name``)."""
        return dict(self.model_extra or {})


class OptimConfig(_Strict):
    """AdamW with linear warmup and cosine decay to ``min_lr_ratio * lr``."""

    lr: float = Field(1e-3, gt=0.0)
    weight_decay: float = Field(1e-4, ge=0.0)
    warmup_steps: int = Field(0, ge=0)
    betas: tuple[float, float] = (0.9, 0.999)
    grad_clip: float | None = Field(1.0, gt=0.0)
    min_lr_ratio: float = Field(0.0, ge=0.0, le=1.0)
    predictor_lr_scale: float = Field(
        1.0,
        gt=0.0,
        description="learning rate of the predictor head = lr * this (SimSiam Sec. 4.2, BYOL: a faster predictor "
        "keeps it near its optimum); the schedule applies to it too",
    )


class TrainConfig(_Strict):
    """Length, batch, precision and bookkeeping of a run. ``max_steps`` counts optimizer steps."""

    max_steps: int | None = Field(None, ge=1)
    epochs: int | None = Field(None, ge=1)
    batch_size: int = Field(64, ge=1)
    precision: Literal["no", "fp16", "bf16"] = "no"
    grad_accum: int = Field(1, ge=1)
    checkpoint_every: int = Field(0, ge=0)
    keep_checkpoints: int = Field(2, ge=1)
    seed: int = 0
    deterministic: bool = Field(
        False, description="torch deterministic algorithms; also builds views inside the step (no prefetch thread)"
    )
    num_workers: int = Field(0, ge=0)
    num_threads: Literal["auto"] | Annotated[int, Field(ge=1)] = Field(
        "auto",
        description="torch intra-op threads: auto (1 on <= 2 usable CPUs, else the usable CPUs) or an "
        "integer >= 1; MVAPP_NUM_THREADS overrides it, it overrides OMP_NUM_THREADS (multiview_app/threads.py)",
    )
    prefetch_views: bool = True  # build the next micro-batch's views in a background thread
    log_every: int = Field(10, ge=1)
    diagnostics: bool = Field(
        True,
        description="every log_every steps: RankMe, alignment/uniformity, ESS, PVC bound, grad norm (train/diagnostics.py)",
    )
    callbacks: list[str | dict[str, dict[str, Any]]] = Field(
        default_factory=list,
        description="training callbacks by name (train/callbacks.py TRAIN_CALLBACKS); "
        "an entry {name: {option: value}} passes options (e.g. {knn-monitor: {every: 200}})",
    )

    @field_validator("callbacks")
    @classmethod
    def _one_name_per_entry(cls, callbacks: list[Any]) -> list[Any]:
        for entry in callbacks:
            if isinstance(entry, dict) and len(entry) != 1:
                raise ValueError(
                    f"an entry with options is one name and its options, e.g. "
                    f"{{knn-monitor: {{every: 200}}}}; got {entry}"
                )
        return callbacks

    @property
    def named_callbacks(self) -> list[tuple[str, dict[str, Any]]]:
        """``callbacks`` as ``(name, options)`` pairs (options ``{}`` for a plain name)."""
        return [(entry, {}) if isinstance(entry, str) else next(iter(entry.items())) for entry in self.callbacks]

    @model_validator(mode="after")
    def _has_length(self) -> TrainConfig:
        if self.max_steps is None and self.epochs is None:
            raise ValueError("set train.max_steps and/or train.epochs")
        return self


class EvalConfig(_Strict):
    """Evaluation at the end of training (linear probe on frozen features)."""

    linear_probe: bool = True
    batch_size: int = Field(256, ge=1)
    knn_k: int = Field(20, ge=1)
    combine: Literal["mean", "concat", "first"] = "mean"
    max_train_items: int | None = Field(None, ge=1)


class Distribution(_Strict):
    """One search dimension of ``tune.space``: ``float`` (``low``, ``high``, ``log``, ``step``),
    ``int`` (``low``, ``high``, ``log``, ``step``) or ``categorical`` (``choices``)."""

    type: Literal["float", "int", "categorical"]
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = Field(None, gt=0.0)
    choices: list[Any] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Distribution:
        if self.type == "categorical":
            if not self.choices:
                raise ValueError("a categorical distribution needs a non-empty 'choices' list")
            if self.low is not None or self.high is not None:
                raise ValueError("a categorical distribution takes 'choices', not low/high")
            return self
        if self.low is None or self.high is None:
            raise ValueError(f"a {self.type} distribution needs 'low' and 'high'")
        if self.choices is not None:
            raise ValueError(f"a {self.type} distribution takes low/high, not 'choices'")
        if not self.low < self.high:
            raise ValueError(f"expected low < high, got low={self.low}, high={self.high}")
        if self.log and self.low <= 0:
            raise ValueError(f"a log distribution needs low > 0, got low={self.low}")
        if self.log and self.step is not None:
            raise ValueError("'log' and 'step' cannot be combined")
        if self.type == "int" and (self.low != int(self.low) or self.high != int(self.high)):
            raise ValueError(f"an int distribution needs integer bounds, got {self.low}, {self.high}")
        return self


class TuneConfig(_Strict):
    """Hyperparameter search (``mvapp tune``, ``multiview_app/tune``).

    ``space``: dotted config keys -> :class:`Distribution` (empty: the loss's default space, see
    ``tune.space.DEFAULT_SPACES``). ``metric``: an objective name of ``tune.objective.METRICS``
    computed on the ``val`` split (a list: multi-objective, NSGA-II, no pruning); ``None`` picks the
    adapter's default. ``direction``: per metric (``None``: the metric's own).
    """

    space: dict[str, Distribution] = Field(default_factory=dict)
    metric: str | list[str] | None = None
    direction: Literal["maximize", "minimize"] | list[Literal["maximize", "minimize"]] | None = None
    report_every: int = Field(20, ge=0, description="intermediate val metric every N steps (0: only at the end)")
    report_items: int | None = Field(
        128,
        ge=1,
        strict=True,
        description="intermediate reports (pruning only) score a fixed class-stratified subset of about "
        "this many items per split (None: every item); the objective itself always uses the full val split",
    )
    pruner: Literal["median", "hyperband", "none"] = "median"
    pruner_options: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of the Optuna pruner")
    sampler: Literal["tpe", "random", "nsga2"] | None = Field(None, description="None: tpe, nsga2 when multi-objective")
    sampler_seed: int = 0
    enqueue: list[dict[str, Any]] = Field(
        default_factory=list,
        description="points tried first, in this order, before the sampler's: each {dotted key "
        "of tune.space: value} naming every key of the space (a designed set of trials; Optuna enqueue_trial)",
    )
    max_train_items: int | None = Field(
        2000, ge=1, description="probe training items of the val metric (seeded subsample)"
    )
    shots: int = Field(100, ge=1, description="windows per class of the sleep-staging val metric")
    val_cache: str | None = Field(
        None,
        description="sleep-staging val metric on the nights of this other prepared cache (cross-dataset "
        "validation: other people, e.g. a validation generator seed): half its subjects fit the few-shot "
        "classifier, the others score; None: the val subjects of data.options.cache",
    )
    test_cache: str | None = Field(
        None,
        description="the cache whose nights are the reported test set: tune.val_cache must share no "
        "recording with it (sha256 of a source file or synthetic person), nor with the pretraining cache",
    )
    max_retries: int = Field(2, ge=0, description="reruns of a trial whose worker was killed")
    heartbeat_interval: int = Field(20, ge=1, description="seconds between heartbeats (RDB storages)")
    grace_period: int = Field(60, ge=2, description="seconds without heartbeat before a trial counts as dead (RDB)")

    @property
    def metrics(self) -> list[str]:
        """The objective names as a list (empty: adapter default, resolved by ``tune.objective``)."""
        if self.metric is None:
            return []
        return [self.metric] if isinstance(self.metric, str) else list(self.metric)


class OutputConfig(_Strict):
    """Run folder ``<runs_dir>/<name>``; ``name`` defaults to the config file's stem and is one path
    component (no ``/``, not ``.`` or ``..``)."""

    runs_dir: str = "runs"
    name: str | None = None
    curves: bool = Field(True, description="write curves.png at the end of training (tune trials: false)")

    @field_validator("name")
    @classmethod
    def _one_component(cls, name: str | None) -> str | None:
        if name is not None and (
            not name.strip() or name in (".", "..") or "/" in name or "\\" in name or "\0" in name
        ):
            raise ValueError(
                "run name must be one folder name (no '/', not '.' or '..'); choose where runs go with output.runs_dir"
            )
        return name


class Config(_Strict):
    """The whole run configuration (see module docstring)."""

    data: DataConfig = Field(default_factory=DataConfig)
    views: ViewsConfig = Field(default_factory=ViewsConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    loss: LossConfig = Field(default_factory=LossConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    train: TrainConfig = Field(default_factory=lambda: TrainConfig(max_steps=100))
    eval: EvalConfig = Field(default_factory=EvalConfig)
    tune: TuneConfig = Field(default_factory=TuneConfig)
    output: OutputConfig = Field(default_factory=OutputConfig)
    _load_notes: list[str] = PrivateAttr(default_factory=list)

    @property
    def load_notes(self) -> list[str]:
        """What loading changed beyond the file and the overrides (e.g. options dropped by a component switch)."""
        return list(self._load_notes)

    @property
    def run_dir(self) -> Path:
        """``<runs_dir>/<name>`` (``name`` must be set)."""
        if not self.output.name:
            raise ConfigError("output.name: not set; pass --name or set output.name")
        return Path(self.output.runs_dir) / self.output.name

    def to_dict(self) -> dict[str, Any]:
        """Plain, YAML-safe dict (loss parameters included)."""
        return self.model_dump(mode="json")


# ----------------------------------------------------------------------------- paths

#: Option keys that hold file-system paths (in ``data.options``, ``model.encoders.<modality>`` and
#: ``output``): exactly these names, or names ending in one of ``PATH_KEY_SUFFIXES``.
PATH_KEYS = frozenset({"root", "cache", "path", "dir", "file"})
PATH_KEY_SUFFIXES = ("_root", "_cache", "_path", "_dir", "_file")


def is_path_key(key: str) -> bool:
    """Whether an option named ``key`` holds a path (see :data:`PATH_KEYS`)."""
    return key in PATH_KEYS or key.endswith(PATH_KEY_SUFFIXES)


def _absolute(value: Any, base: Path) -> Any:
    if not isinstance(value, str) or not value or "://" in value:
        return value
    path = Path(value).expanduser()
    return str(path if path.is_absolute() else (base / path).resolve())


def resolve_paths(cfg: Config, base: str | Path | None = None) -> Config:
    """A copy of ``cfg`` whose relative paths (data roots and caches, encoder weight files,
    ``output.runs_dir``) are absolute, resolved against ``base`` (default: the current folder), so a
    run's ``config.yaml`` means the same files from any working directory."""
    base = Path(base or Path.cwd()).resolve()
    raw = cfg.to_dict()
    raw["data"]["options"] = {k: _absolute(v, base) if is_path_key(k) else v for k, v in raw["data"]["options"].items()}
    for spec in raw["model"]["encoders"].values():
        for key in [k for k in spec if is_path_key(k)]:
            spec[key] = _absolute(spec[key], base)
    raw["output"]["runs_dir"] = _absolute(raw["output"]["runs_dir"], base)
    return Config.model_validate(raw)


# ----------------------------------------------------------------------------- loading


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` merged into a deep copy of ``base``: nested dicts merge key by key, anything else replaces."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def read_yaml(path: str | Path, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """Read a config YAML file, following ``extends:`` (relative to the file)."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"config file not found: {path.resolve()}")
    if not path.is_file():
        raise ConfigError(f"{path.resolve()}: expected a YAML config file, found a folder")
    if path.resolve() in _seen:
        raise ConfigError(f"{path}: 'extends' cycle through {', '.join(str(p) for p in _seen)}")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a text (UTF-8) YAML file") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}".replace("\n", " ")) from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of sections at the top, got {type(raw).__name__}")
    parent = raw.pop("extends", None)
    if parent is not None:
        parent_path = path.parent / str(parent)
        if not parent_path.is_file():
            raise ConfigError(
                f"{path}: extends: {parent} -> {parent_path.resolve()} is not a config file "
                "(the path is relative to the file that extends it)"
            )
        base = read_yaml(parent_path, (*_seen, path.resolve()))
        raw = deep_merge(base, raw)
    return raw


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``a.b.c=value`` overrides (value parsed as YAML) to a nested dict (copy)."""
    out = copy.deepcopy(raw)
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key or any(not part for part in key.split(".")):
            raise ConfigError(f"override {item!r}: expected dotted.key=value (e.g. train.max_steps=50)")
        try:
            value = yaml.safe_load(text) if text != "" else None
        except yaml.YAMLError:
            value = text
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"override {item!r}: {part!r} holds {child!r}, not a section")
            node = child
        node[parts[-1]] = value
    return out


def config_from_dict(raw: dict[str, Any], *, check: bool = True) -> Config:
    """Validate a nested dict into :class:`Config` (plus cross-section checks when ``check``)."""
    try:
        cfg = Config.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, "", Config, SECTION_KEYS)) from None
    if check:
        check_cross_sections(cfg)
    return cfg


def _component_sections(raw: dict[str, Any]) -> dict[str, tuple[Any, dict[str, Any] | None]]:
    """``{where: (registry name, options dict)}`` of every registry-named component of a raw config:
    the loss (options = the loss section), the adapter, the view policy, each modality's encoder."""
    out: dict[str, tuple[Any, dict[str, Any] | None]] = {}
    loss, data, views = raw.get("loss"), raw.get("data"), raw.get("views")
    if isinstance(loss, dict):
        out["loss"] = (loss.get("name"), loss)
    if isinstance(data, dict):
        out["data.options"] = (data.get("adapter"), data.get("options"))
    if isinstance(views, dict):
        out["views.options"] = (views.get("policy"), views.get("options"))
    encoders = (raw.get("model") or {}).get("encoders") if isinstance(raw.get("model"), dict) else None
    for modality, spec in (encoders or {}).items():
        if isinstance(spec, dict):
            out[f"model.encoders.{modality}"] = (spec.get("name"), spec)
    return out


def switch_components(
    base: dict[str, Any], raw: dict[str, Any], overrides: list[str]
) -> tuple[dict[str, Any], list[str]]:
    """Make ``key=value`` overrides that switch a registry name usable: when an override changes ``loss.name``,
    ``data.adapter``, ``views.policy`` or ``model.encoders.<m>.name``, the options the new component does not
    take are dropped (one note lists them); a ``key=null`` override inside a component's options removes the
    key (the component's default applies). Returns ``(raw, notes)``."""
    raw = copy.deepcopy(raw)
    notes: list[str] = []
    before = _component_sections(base)
    given = {item.partition("=")[0]: item.partition("=")[2] for item in overrides}
    for where, (name, options) in _component_sections(raw).items():
        if not isinstance(options, dict):
            continue
        for key in [k for k, v in options.items() if v is None and f"{where}.{k}" in given and k != "name"]:
            del options[key]  # `loss.epsilon=null`: back to the component's default
        old_name = before.get(where, (None, None))[0]
        if old_name is None or name == old_name:
            continue
        accepted = accepted_options(where, name)
        if accepted is None:
            continue
        dropped = [k for k in options if k not in accepted and f"{where}.{k}" not in given]
        for key in dropped:
            del options[key]
        if dropped:
            label = {"loss": "loss.name", "data.options": "data.adapter", "views.options": "views.policy"}.get(
                where, f"{where}.name"
            )
            notes.append(
                f"{label} {old_name} -> {name}: dropped {', '.join(f'{where}.{k}' for k in dropped)} "
                f"(not options of {name})"
            )
    return raw, notes


def load_config(
    path: str | Path, overrides: list[str] | tuple[str, ...] = (), *, name: str | None = None, check: bool = True
) -> Config:
    """Load a YAML config, apply dotted ``overrides`` and validate. ``output.name`` defaults to
    ``name`` or the file's stem. An override that switches a component (``loss.name=...``) drops the
    options the new one does not take; the notes are in ``cfg.load_notes`` (:func:`switch_components`)."""
    base = read_yaml(path)
    raw, notes = switch_components(base, apply_overrides(base, list(overrides)), list(overrides))
    if name:
        raw.setdefault("output", {})["name"] = name
    cfg = config_from_dict(raw, check=check)
    if not cfg.output.name:
        cfg.output.name = Path(path).stem
    cfg._load_notes = notes
    return cfg


def dump_config(cfg: Config) -> str:
    """The resolved config as YAML text."""
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False)
