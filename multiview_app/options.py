"""One options mechanism for every registered component (losses, encoders, heads, data adapters, view policies).

A component's options are a pydantic model: adapters and view policies declare theirs (``Options``, a
:class:`ComponentOptions` subclass); losses, encoders and the projection heads derive theirs from the
``__init__`` signature with :func:`options_from_signature` (one field per keyword parameter, its default;
values are still checked by the component itself). Every validation error of a config section or of a
component's options is turned into one message by :func:`format_validation_error`::

    <where>.<key>: unknown <noun>[ for <owner>]; <label>: <accepted keys>
    <where>.<key>: <what was expected> (got <value>)

This module imports nothing of the package (every layer may use it).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError, create_model
from pydantic_core import PydanticUndefined


class ConfigError(ValueError):
    """Invalid configuration; the message names the dotted key, the value and what is allowed."""


class ComponentOptions(BaseModel):
    """Base of every component's options model: unknown keys are rejected."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())


class AnyKeywordOptions(ComponentOptions):
    """Options of a factory that takes ``**kwargs``: the named parameters plus any other key."""

    model_config = ConfigDict(extra="allow", protected_namespaces=())


@cache
def options_from_signature(factory: Callable[..., Any], skip: tuple[str, ...] = ()) -> type[ComponentOptions]:
    """The options model of ``factory`` (a class: its ``__init__``; or a function): one field per keyword
    parameter except ``skip``, in signature order, typed ``Any`` (the component checks the values), with the
    parameter's default (required when it has none). A factory taking ``**kwargs`` accepts any further key."""
    target = factory.__init__ if isinstance(factory, type) else factory
    params = list(inspect.signature(target).parameters.values())
    if isinstance(factory, type):
        params = params[1:]  # self
    fields: dict[str, Any] = {
        p.name: (Any, ... if p.default is p.empty else p.default)
        for p in params
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in skip
    }
    base = AnyKeywordOptions if any(p.kind is p.VAR_KEYWORD for p in params) else ComponentOptions
    name = f"{getattr(factory, '__qualname__', type(factory).__name__)}Options"
    return create_model(name, __base__=base, **fields)


class SignatureOptions:
    """Mixin of component base classes (losses, encoders): a subclass that declares no ``Options`` model gets
    one derived from its ``__init__`` signature (:func:`options_from_signature`)."""

    Options: ClassVar[type[ComponentOptions]] = ComponentOptions

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "Options" not in cls.__dict__:
            cls.Options = options_from_signature(cls)


def accepts_any_key(model: type[BaseModel]) -> bool:
    """Whether ``model`` takes keys beyond its fields (a ``**kwargs`` factory)."""
    return model.model_config.get("extra") == "allow"


def option_defaults(model: type[BaseModel]) -> dict[str, Any]:
    """``{field: default}`` of an options model in declaration order (``inspect.Parameter.empty`` when required)."""
    return {
        name: inspect.Parameter.empty if field.default is PydanticUndefined else field.default
        for name, field in model.model_fields.items()
    }


@dataclass(frozen=True)
class Wording:
    """How :func:`format_validation_error` names an unknown key: ``unknown <noun>[ for <owner>]; <label>:
    <keys>`` (keys sorted when ``sort``, shown as ``key=default`` when ``defaults``)."""

    noun: str = "option"
    owner: str = ""
    label: str = "allowed"
    sort: bool = False
    defaults: bool = False


#: Keys of the config file's sections (and of the adapter / view options written in them).
SECTION_KEYS = Wording(noun="key", sort=True)


def component_wording(noun: str, owner: str) -> Wording:
    """Wording of a registered component's options checked from the config: ``unknown <noun> for <owner>;
    valid: <keys>`` (e.g. ``unknown parameter for loss 'm3g'``, ``unknown option for encoder 'image/small_cnn'``)."""
    return Wording(noun=noun, owner=owner, label="valid")


def _nested_model(model: type[BaseModel], loc: list[Any]) -> type[BaseModel] | None:
    """The (nested) pydantic model at ``loc`` below ``model`` (None where it is not a model)."""
    cls: type[BaseModel] = model
    for part in loc:
        field = cls.model_fields.get(part) if isinstance(part, str) else None
        ann = field.annotation if field is not None else None
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            return None
        cls = ann
    return cls


def _accepted(model: type[BaseModel] | None, wording: Wording) -> str | None:
    """The accepted keys of ``model`` as the wording lists them (None: no model to ask)."""
    if model is None:
        return None
    if wording.defaults:
        names = [f"{k}={v!r}" for k, v in option_defaults(model).items()]
    else:
        names = list(model.model_fields)
    return ", ".join(sorted(names) if wording.sort else names) or "(none)"


def format_validation_error(
    err: ValidationError, where: str, model: type[BaseModel] | None, wording: Wording = Wording()
) -> str:
    """One part per problem of ``err`` (raised by ``model``, validated at dotted ``where``), joined by
    ``"; "``: ``<where>.<key>: unknown <noun>...; <label>: <keys>`` for an unknown key, else
    ``<where>.<key>: <what was expected> (got <value>)`` (no value when it is a whole mapping)."""
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in (where, *e["loc"]) if p != "")
        head = f"{loc}: " if loc else ""  # a whole-model check of an unnamed model: the message alone
        if e["type"] == "extra_forbidden":
            owner = f" for {wording.owner}" if wording.owner else ""
            accepted = _accepted(_nested_model(model, list(e["loc"][:-1])) if model else None, wording)
            hint = f"; {wording.label}: {accepted}" if accepted is not None else ""
            lines.append(f"{head}unknown {wording.noun}{owner}{hint}")
        else:
            msg = e["msg"].removeprefix("Value error, ")
            value = e.get("input")
            got = f" (got {value!r})" if not isinstance(value, dict) else ""
            lines.append(f"{head}{msg}{got}")
    return "; ".join(lines)


def validate_options(
    model: type[BaseModel],
    options: dict[str, Any] | None,
    where: str,
    wording: Wording = Wording(),
    error: type[ValueError] = ValueError,
    prefix: str = "",
) -> BaseModel:
    """``model.model_validate(options)``; a ``ValidationError`` becomes one ``error`` (``prefix`` +
    :func:`format_validation_error`)."""
    try:
        return model.model_validate(options or {})
    except ValidationError as err:
        raise error(prefix + format_validation_error(err, where, model, wording)) from None


__all__ = [
    "AnyKeywordOptions",
    "ComponentOptions",
    "ConfigError",
    "SECTION_KEYS",
    "SignatureOptions",
    "Wording",
    "accepts_any_key",
    "component_wording",
    "format_validation_error",
    "option_defaults",
    "options_from_signature",
    "validate_options",
]
