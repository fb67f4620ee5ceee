"""Checks of a :class:`~multiview_app.config.Config` that ask the registries (the schema in ``config.py``
cannot): the loss exists and takes the given parameters, ``views.k`` suits it, it has the teacher it needs,
the adapter / view policy / encoders exist and take their options, the training callbacks are known.

Every component's options are validated by its pydantic options model (:mod:`multiview_app.options`);
errors are one :class:`~multiview_app.options.ConfigError` naming the dotted key and what is accepted.
Registries are imported lazily, so importing the config schema stays cheap. This module may ask the
losses, data, models registries and :mod:`multiview_app.plugins`, never a layer above them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from .options import (
    SECTION_KEYS,
    ConfigError,
    accepts_any_key,
    component_wording,
    options_from_signature,
    validate_options,
)

if TYPE_CHECKING:
    from .config import Config


def check_cross_sections(cfg: Config) -> None:
    """Checks that need the registries: loss name and parameters, ``k`` against the loss, teacher views
    against ``k``, adapter / view policy options, encoder / head options, callbacks. Raises ``ConfigError``."""
    _check_loss(cfg)
    _check_data(cfg)
    _check_model_options(cfg)
    _check_callbacks(cfg)


def _check_loss(cfg: Config) -> None:
    from .losses import LOSSES, available_losses, build_loss

    name = cfg.loss.name
    if name not in available_losses(supervised=True):
        raise ConfigError(
            f"loss.name: unknown loss {name!r}; available: {', '.join(available_losses(supervised=True))}"
        )
    cls = LOSSES.get(name)
    validate_options(
        cls.Options, cfg.loss.params, "loss", component_wording("parameter", f"loss {name!r}"), ConfigError
    )
    try:
        loss = build_loss(name, **cfg.loss.params)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"loss ({name}, params {cfg.loss.params}): {exc}") from None
    if cfg.views.k < loss.min_views:
        raise ConfigError(
            f"views.k: got {cfg.views.k}, but loss {name!r} is a multi-view loss and needs k >= {loss.min_views} views"
        )
    teacher = cfg.model.teacher
    if loss.needs_teacher and not teacher.enabled:
        raise ConfigError(
            f"model.teacher.enabled: loss {name!r} has no negatives and collapses without its EMA "
            "teacher; set model.teacher.enabled=true (and usually a model.predictor)"
        )
    if getattr(loss, "takes_target", False) and teacher.enabled and teacher.views != "all":
        raise ConfigError(
            f"model.teacher.views: loss {name!r} compares each view's online prediction with the target "
            f"projections of all other views; got {teacher.views}, expected 'all'"
        )
    if teacher.enabled and teacher.views != "all":
        bad = [v for v in teacher.views if not 0 <= v < cfg.views.k]
        if bad or not teacher.views:
            raise ConfigError(
                f"model.teacher.views: got {teacher.views}; expected a non-empty list of view indices "
                f"in 0..{cfg.views.k - 1} or 'all'"
            )


def _check_data(cfg: Config) -> None:
    """The adapter and the view policy exist; their options validate (their ``Options`` models)."""
    from .data.adapters import adapter_options_model
    from .data.views import VIEW_POLICIES, available_view_policies

    try:
        adapter_options = adapter_options_model(cfg.data.adapter)
    except ValueError as exc:
        raise ConfigError(f"data.adapter: {exc}") from None
    validate_options(adapter_options, cfg.data.options, "data.options", SECTION_KEYS, ConfigError)
    if cfg.views.policy not in available_view_policies():
        raise ConfigError(
            f"views.policy: unknown view policy {cfg.views.policy!r}; "
            f"available: {', '.join(available_view_policies())}{VIEW_POLICIES.missing_hint()}"
        )
    policy = VIEW_POLICIES.get(cfg.views.policy)
    validate_options(policy.Options, cfg.views.options, "views.options", SECTION_KEYS, ConfigError)
    _check_policy_fits_adapter(cfg.views.policy, policy.modality, cfg.data.adapter)


def _check_policy_fits_adapter(name: str, policy_modality: str, adapter_name: str) -> None:
    """A view policy made for one kind of data refuses an adapter of another (e.g. channels as views, made
    for EEG window caches, on a ``psg_modalities`` adapter, whose views are modalities)."""
    from .data.adapters import ADAPTERS
    from .data.views import available_view_policies

    adapter_modality = ADAPTERS.get(adapter_name).modality
    if policy_modality and adapter_modality and policy_modality != adapter_modality:
        from .data.views import VIEW_POLICIES

        fitting = [p for p in available_view_policies() if VIEW_POLICIES.get(p).modality in ("", adapter_modality)]
        raise ConfigError(
            f"views.policy: {name!r} works on {policy_modality!r} data but data.adapter {adapter_name!r} gives "
            f"{adapter_modality!r} data; policies for it: {', '.join(fitting)}"
        )


def _check_model_options(cfg: Config) -> None:
    """Encoder, projector and predictor options must be options of what they build."""
    from .models.encoders import ENCODERS, encoder_key, encoder_options_model, unknown_encoder_message
    from .models.heads import Predictor, Projector

    for modality, spec in cfg.model.encoders.items():
        key = encoder_key(modality, spec["name"])
        if key in ENCODERS:
            options = {k: v for k, v in spec.items() if k != "name"}
            validate_options(
                encoder_options_model(key),
                options,
                f"model.encoders.{modality}",
                component_wording("option", f"encoder {key!r}"),
                ConfigError,
            )
        elif modality != "image" or "/" in spec["name"]:  # image names fall back to timm (any timm keyword)
            raise ConfigError(f"model.encoders.{modality}.name: {unknown_encoder_message(modality, spec['name'])}")
    for section, head, options in (
        ("projector", Projector, cfg.model.projector),
        ("predictor", Predictor, cfg.model.predictor),
    ):
        if options is not None:
            validate_options(
                options_from_signature(head, ("in_dim",)),
                options,
                f"model.{section}",
                component_wording("option", f"the {section}"),
                ConfigError,
            )


def _check_callbacks(cfg: Config) -> None:
    from .plugins import TRAIN_CALLBACKS

    unknown = [name for name, _ in cfg.train.named_callbacks if name not in TRAIN_CALLBACKS]
    if unknown:
        raise ConfigError(
            f"train.callbacks: unknown callback(s) {', '.join(map(repr, unknown))}; "
            f"available: {', '.join(TRAIN_CALLBACKS.names())}{TRAIN_CALLBACKS.missing_hint()}"
        )
    for name, options in cfg.train.named_callbacks:
        # a callback class may declare an ``Options`` model; a plain function takes no options
        options_cls = getattr(TRAIN_CALLBACKS.get(name), "Options", None)
        if options_cls is not None:
            validate_options(options_cls, options, f"train.callbacks.{name}", SECTION_KEYS, ConfigError)
        elif options:
            raise ConfigError(f"train.callbacks.{name}: this callback takes no options, got {options}")


def component_options_model(where: str, name: Any) -> type[BaseModel] | None:
    """The options model of the component ``name`` configured at ``where`` (``loss``, ``data.options``,
    ``views.options`` or ``model.encoders.<modality>``); None for an unknown name (the checks report it)."""
    try:
        if where == "loss":
            from .losses import LOSSES

            return LOSSES.get(str(name)).Options
        if where == "data.options":
            from .data.adapters import adapter_options_model

            return adapter_options_model(str(name))
        if where == "views.options":
            from .data.views import VIEW_POLICIES

            return VIEW_POLICIES.get(str(name)).Options
        from .models.encoders import encoder_key, encoder_options_model

        return encoder_options_model(encoder_key(where.rsplit(".", 1)[1], str(name)))
    except ValueError:
        return None


def accepted_options(where: str, name: Any) -> list[str] | None:
    """Keys the component ``name`` at ``where`` takes, as written in its config section (the loss section
    and an encoder's mapping also hold ``name``); None: unknown component, or it takes any key."""
    model = component_options_model(where, name)
    if model is None or accepts_any_key(model):
        return None
    named = where == "loss" or where.startswith("model.encoders.")
    return ["name", *model.model_fields] if named else list(model.model_fields)


__all__ = ["accepted_options", "check_cross_sections", "component_options_model"]
