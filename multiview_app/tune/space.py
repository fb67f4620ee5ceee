"""Search space of ``mvapp tune``: ``tune.space`` (dotted config keys -> distributions), the per-loss
defaults, validation against the config schema and the overrides a sampled point becomes."""

from __future__ import annotations

import difflib
from typing import Any

import yaml

from ..config import Config, ConfigError, Distribution, apply_overrides, config_from_dict

#: Loss parameter -> its default search distribution (used when ``tune.space`` is empty).
DEFAULT_PARAMETER_SPACES: dict[str, Distribution] = {
    "epsilon": Distribution(type="float", low=0.01, high=1.0, log=True),  # M3G entropic regularization
    "beta": Distribution(type="float", low=1e-3, high=1e-1, log=True),  # MVEB entropy weight
    "tau": Distribution(type="float", low=0.03, high=1.0, log=True),  # PVC / AggNCE / FlatNCE / InfoNCE temperature
}

#: Config sections whose free-form ``options`` are checked against an adapter / view policy model.
_OPTIONS_SECTIONS = ("data.options", "views.options")


def default_space(loss_name: str) -> dict[str, Distribution]:
    """``loss.<param>`` distributions for the sensitive parameters ``loss_name`` has (ConfigError if none)."""
    from ..losses import loss_parameters

    params = loss_parameters(loss_name)
    space = {f"loss.{name}": dist for name, dist in DEFAULT_PARAMETER_SPACES.items() if name in params}
    if not space:
        raise ConfigError(
            f"tune.space: empty and loss {loss_name!r} has no default search space (defaults exist for "
            f"{', '.join(DEFAULT_PARAMETER_SPACES)}); set tune.space, e.g. optim.lr: {{type: float, low: 1e-4, high: 1e-2, log: true}}"
        )
    return space


def resolve_space(cfg: Config) -> dict[str, Distribution]:
    """``tune.space`` or, when empty, :func:`default_space` of the config's loss."""
    return dict(cfg.tune.space) or default_space(cfg.loss.name)


def _known_keys(raw: dict[str, Any], prefix: str = "") -> list[str]:
    keys = []
    for key, value in raw.items():
        dotted = f"{prefix}{key}"
        keys.append(dotted)
        if isinstance(value, dict):
            keys += _known_keys(value, f"{dotted}.")
    return keys


def _schema_keys(cfg: Config) -> list[str]:
    """Every dotted key the config accepts: resolved keys, loss parameters, adapter / policy options."""
    from ..data.adapters import adapter_options_model
    from ..data.views import VIEW_POLICIES
    from ..losses import loss_parameters

    keys = set(_known_keys(cfg.to_dict()))
    keys |= {f"loss.{name}" for name in loss_parameters(cfg.loss.name)}
    keys |= {f"data.options.{name}" for name in adapter_options_model(cfg.data.adapter).model_fields}
    keys |= {f"views.options.{name}" for name in VIEW_POLICIES.get(cfg.views.policy).Options.model_fields}
    return sorted(keys)


def _corner_values(dist: Distribution) -> list[Any]:
    if dist.type == "categorical":
        return list(dist.choices or [])
    cast = int if dist.type == "int" else float
    return [cast(dist.low), cast(dist.high)]


def validate_space(raw: dict[str, Any], cfg: Config, space: dict[str, Distribution]) -> None:
    """Every key must be a config key (ConfigError naming it and the nearest valid keys), must not be a
    section or the tune section itself, and the config must validate at the bounds / every choice."""
    valid = _schema_keys(cfg)
    resolved = cfg.to_dict()
    for key, dist in space.items():
        if key.startswith(("tune.", "output.")) or key in ("tune", "output"):
            raise ConfigError(f"tune.space.{key}: the tune / output sections cannot be searched")
        if key not in valid:
            near = difflib.get_close_matches(key, valid, n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(near)}?" if near else ""
            raise ConfigError(f"tune.space.{key}: not a config key{hint}")
        node: Any = resolved
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            raise ConfigError(f"tune.space.{key}: is a section; name one of its keys ({', '.join(map(str, node))})")
        for value in _corner_values(dist):
            try:
                config_from_dict(apply_overrides(raw, [override(key, value)]))
            except ConfigError as exc:
                raise ConfigError(f"tune.space.{key}: value {value!r} makes an invalid config: {exc}") from None


def validate_enqueue(points: list[dict[str, Any]], space: dict[str, Distribution]) -> None:
    """Every ``tune.enqueue`` point names exactly the keys of ``space`` with a value the distribution can
    give (a choice; a number within [low, high], an integer for ``int``): ConfigError naming the point."""
    for number, point in enumerate(points):
        where = f"tune.enqueue[{number}]"
        if set(point) != set(space):
            missing, extra = sorted(set(space) - set(point)), sorted(set(point) - set(space))
            raise ConfigError(
                f"{where}: expected the keys of tune.space ({', '.join(sorted(space))}); "
                f"missing: {', '.join(missing) or '-'}; not in tune.space: {', '.join(extra) or '-'}"
            )
        for key, value in point.items():
            dist = space[key]
            if dist.type == "categorical":
                ok = value in (dist.choices or [])
            else:
                numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
                ok = (
                    numeric
                    and float(dist.low) <= value <= float(dist.high)
                    and (dist.type == "float" or float(value).is_integer())
                )
            if not ok:
                expected = (
                    f"one of {dist.choices}"
                    if dist.type == "categorical"
                    else f"a {dist.type} in [{dist.low:g}, {dist.high:g}]"
                )
                raise ConfigError(f"{where}.{key}: {value!r} is not a value of its distribution (expected {expected})")


def override(key: str, value: Any) -> str:
    """``key=value`` with the value in YAML flow form (what ``apply_overrides`` parses back)."""
    text = yaml.safe_dump(value, default_flow_style=True).strip()
    return f"{key}={text.removesuffix('...').strip()}"


def optuna_distributions(space: dict[str, Distribution]) -> dict[str, Any]:
    """The Optuna distribution of every key (params are named by their dotted config key)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    out: dict[str, Any] = {}
    for key, dist in space.items():
        if dist.type == "categorical":
            out[key] = CategoricalDistribution(list(dist.choices or []))
        elif dist.type == "int":
            out[key] = IntDistribution(int(dist.low), int(dist.high), log=dist.log, step=int(dist.step or 1))
        else:
            out[key] = FloatDistribution(float(dist.low), float(dist.high), log=dist.log, step=dist.step)
    return out


def params_to_overrides(params: dict[str, Any]) -> list[str]:
    """Sampled ``{dotted key: value}`` -> ``["key=value", ...]`` (sorted by key)."""
    return [override(key, params[key]) for key in sorted(params)]


__all__ = [
    "DEFAULT_PARAMETER_SPACES",
    "default_space",
    "optuna_distributions",
    "override",
    "params_to_overrides",
    "resolve_space",
    "validate_enqueue",
    "validate_space",
]
