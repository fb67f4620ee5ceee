"""An experiment's knobs: a frozen dataclass read from a YAML file (``configs/experiment_<name>.yaml``) with
``KEY=VALUE`` overrides from the command line (``--set steps=20``).

Unknown keys are errors naming the file (or ``--set``) and the keys expected; each value is checked against
the field's default type, so ``steps: ten`` fails there and not an hour into the sweep.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, TypeVar

import yaml

K = TypeVar("K")


def parse_overrides(pairs: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """``["steps=20", "seeds=[0, 1]"]`` -> ``{"steps": 20, "seeds": [0, 1]}`` (each value read as YAML)."""
    parsed = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set: expected KEY=VALUE (e.g. steps=20), got {pair!r}")
        parsed[key.strip()] = yaml.safe_load(value)
    return parsed


def _check_type(name: str, value: Any, default: Any, source: str) -> Any:
    """``value`` as the field's kind (a list for tuple defaults); a wrong kind is an error naming ``source``."""
    if isinstance(default, tuple) and isinstance(value, list | tuple):
        return tuple(value)
    kinds = {bool: (bool,), int: (int,), float: (int, float), str: (str,)}
    expected = kinds.get(type(default))
    if expected and value is not None and (not isinstance(value, expected) or (bool not in expected and value is True)):
        raise ValueError(f"{source}: {name} should be a {type(default).__name__} (default {default!r}), got {value!r}")
    return value


def load_knobs(cls: type[K], path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> K:
    """``cls`` (a dataclass whose fields all have defaults or default factories) from the YAML mapping at ``path`` (None: the
    defaults), then ``overrides`` (``KEY=VALUE``); unknown keys or values of the wrong kind raise
    ``ValueError`` naming the file or ``--set``."""
    raw: dict[str, Any] = {}
    if path is not None:
        raw = yaml.safe_load(Path(path).read_text()) or {}
        if not isinstance(raw, dict):
            raise ValueError(f"{path}: expected a mapping of experiment knobs, got {type(raw).__name__}")
    defaults = {
        f.name: f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]
        for f in dataclasses.fields(cls)  # type: ignore[arg-type]
    }
    values = {}
    for source, mapping in ((str(path), raw), ("--set", parse_overrides(overrides))):
        unknown = sorted(set(mapping) - set(defaults))
        if unknown:
            raise ValueError(f"{source}: unknown experiment knob(s) {unknown}; expected keys among {sorted(defaults)}")
        values.update({k: _check_type(k, v, defaults[k], source) for k, v in mapping.items()})
    return cls(**values)


def knobs_dict(knobs: Any) -> dict[str, Any]:
    """The knobs as a plain mapping (tuples as lists) for a result's JSON."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(knobs).items()}


__all__ = ["knobs_dict", "load_knobs", "parse_overrides"]
