"""Encoder registry keyed ``"<modality>/<name>"`` and the image encoders.

Contract: ``build_encoder(modality, name, **kwargs) -> nn.Module`` with attribute
``num_features: int`` and ``forward(x, view_name: str | None = None) -> (n, f)``.

For ``image``, any timm model name is accepted (``timm.create_model(name, pretrained=False,
num_classes=0)``; weights only from a local file via ``pretrained_path``), plus the registered
``image/small_cnn`` (a few conv layers, fast on CPU).

Registered encoders subclass :class:`Encoder`, which declares the hooks
:class:`~multiview_app.models.model.MultiViewModel` calls, with their defaults:
``uses_view_name`` (False; True: the encoder needs each view's name, e.g. an EEG channel) and
``forward_views(xs: list[(n, ...)], view_names: list[str]) -> (n, k, f)`` (default: one call per view
with its name when ``uses_view_name``, else one call on the concatenated views; an encoder may
override it with a batched, name-aware path). An encoder's options are its ``Options`` model,
derived from its ``__init__`` signature (:func:`encoder_options_model`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from ..options import ComponentOptions, SignatureOptions, component_wording, options_from_signature, validate_options
from ..registry import Registry

#: Encoders by ``"<modality>/<name>"``; the listed modules register more on first lookup.
ENCODERS: Registry[Callable[..., nn.Module]] = Registry(
    "encoder",
    modules=(
        "multiview_app.models.eeg",
        "multiview_app.models.braindecode_sleep",
        "multiview_app.models.clip",
        "multiview_app.models.physio",
    ),
)


def encoder_key(modality: str, name: str) -> str:
    """Registry key of encoder ``name`` of ``modality``: ``"<modality>/<name>"``, or ``name`` itself when it is
    a full key (``"eeg/conv"`` for a PSG modality such as ``brain``, whose encoder is registered under another
    modality's name)."""
    return name if "/" in name else f"{modality}/{name}"


def encoder_input(key: str, options: dict[str, Any]) -> dict[str, Any]:
    """What the registered encoder ``key`` built with ``options`` takes: ``{"sfreq": Hz or None (any rate),
    "in_channels": count or None (any)}``, from its ``sfreq`` / ``in_channels`` options (their defaults when
    not given) or its class's ``fixed_in_channels``."""
    import inspect

    factory = ENCODERS.get(key)
    params = inspect.signature(factory).parameters

    def value(name: str) -> Any:
        return options.get(name, params[name].default) if name in params else None

    channels = value("in_channels")
    return {
        "sfreq": value("sfreq"),
        "in_channels": channels if channels is not None else getattr(factory, "fixed_in_channels", None),
    }


def _default_forward_views(
    encoder: nn.Module, by_name: bool, xs: list[torch.Tensor], view_names: list[str]
) -> torch.Tensor:
    """k views ``(n, ...)`` -> ``(n, k, f)``: one call per view with its name when ``by_name``, else one call
    on the ``(k * n, ...)`` concatenation (BatchNorm statistics then span all views)."""
    if by_name:
        return torch.stack([encoder(x, view_name=name) for x, name in zip(xs, view_names)], dim=1)
    n = xs[0].shape[0]
    out = encoder(torch.cat(xs, dim=0))  # (k * n, f)
    return out.view(len(xs), n, -1).transpose(0, 1)


class Encoder(SignatureOptions, nn.Module):
    """Base of the encoders: ``forward(x (n, ...), view_name: str | None = None) -> (n, num_features)``;
    subclasses set ``num_features`` in ``__init__``. Hooks (see the module docstring): ``uses_view_name``,
    :meth:`forward_views`; ``Options``: the options model derived from ``__init__``.

    Register a subclass with ``@register_encoder("<modality>", "<name>")`` to use it by name in a config
    (``model.encoders.<modality>.name``); its ``__init__`` keywords become the config's options.

    Examples
    --------
    >>> import torch
    >>> from multiview_app.models.encoders import Encoder
    >>> class MeanPool(Encoder):  # (n, channels, T) -> (n, channels)
    ...     def __init__(self, channels: int = 3) -> None:
    ...         super().__init__()
    ...         self.num_features = channels
    ...     def forward(self, x, view_name=None):
    ...         return x.mean(dim=-1)
    >>> encoder = MeanPool(channels=3)
    >>> encoder.forward_views([torch.randn(5, 3, 10), torch.randn(5, 3, 10)], ["a", "b"]).shape
    torch.Size([5, 2, 3])
    >>> sorted(encoder.Options.model_fields)
    ['channels']
    """

    num_features: int
    uses_view_name: ClassVar[bool] = False

    def forward_views(self, xs: list[torch.Tensor], view_names: list[str]) -> torch.Tensor:
        """k views ``(n, ...)`` with their names -> ``(n, k, num_features)`` (per view with its name when
        ``uses_view_name``, else one call on the concatenated views)."""
        return _default_forward_views(self, self.uses_view_name, xs, view_names)


def encode_views(encoder: nn.Module, xs: list[torch.Tensor], view_names: list[str]) -> torch.Tensor:
    """``encoder.forward_views(xs, view_names) -> (n, k, f)``. A plain ``nn.Module`` used as an encoder
    (not an :class:`Encoder`, e.g. a user's module) has its hooks read duck-typed, with the base's defaults."""
    if isinstance(encoder, Encoder):
        return encoder.forward_views(xs, view_names)
    own = getattr(encoder, "forward_views", None)
    if own is not None:
        return own(xs, view_names)
    return _default_forward_views(
        encoder, bool(getattr(encoder, "uses_view_name", Encoder.uses_view_name)), xs, view_names
    )


def register_encoder(modality: str, name: str) -> Callable[[Callable[..., nn.Module]], Callable[..., nn.Module]]:
    """Decorator: ``@register_encoder("image", "small_cnn")`` on a class or factory."""
    return ENCODERS.register(f"{modality}/{name}")


def available_encoders(modality: str | None = None) -> list[str]:
    """Registered ``"<modality>/<name>"`` keys, sorted (image also accepts any timm model name).

    Examples
    --------
    >>> from multiview_app.models import available_encoders
    >>> "image/small_cnn" in available_encoders("image"), "eeg/conv" in available_encoders("eeg")
    (True, True)
    """
    return [k for k in ENCODERS.names() if modality is None or k.startswith(f"{modality}/")]


def unknown_encoder_message(modality: str, name: str) -> str:
    """The error of an unregistered encoder: the modality's registered encoders, or every registered one
    when it has none (a PSG modality names a full key such as ``eeg/conv``)."""
    own = available_encoders(modality) if "/" not in name else []
    listed = own or available_encoders()
    where = "available" if own else "available (the registered encoders; give a full key such as eeg/conv)"
    return f"unknown encoder '{name}' for modality '{modality}'; {where}: {', '.join(listed)}"


def encoder_options_model(key: str) -> type[ComponentOptions]:
    """The options model of the registered encoder ``"<modality>/<name>"`` (an :class:`Encoder`'s ``Options``;
    for another factory, derived from its signature). Raises ``ValueError`` for an unknown key."""
    factory = ENCODERS.get(key)
    if isinstance(factory, type) and issubclass(factory, Encoder):
        return factory.Options
    return options_from_signature(factory)


def build_encoder(modality: str, name: str, **kwargs: Any) -> nn.Module:
    """Build encoder ``name`` for ``modality``; ``image`` falls back to timm for unregistered names.

    The encoder maps one view ``(n, ...)`` to features ``(n, num_features)``. Raises ``ValueError`` for an
    unknown name (listing the registered ones) or a bad keyword argument.

    Examples
    --------
    >>> import torch
    >>> from multiview_app.models import build_encoder
    >>> encoder = build_encoder("image", "small_cnn")
    >>> encoder(torch.randn(2, 3, 32, 32)).shape == (2, encoder.num_features)
    True
    """
    key = encoder_key(modality, name)
    if key in ENCODERS:
        factory = ENCODERS.get(key)
    elif modality == "image" and "/" not in name:
        return TimmImageEncoder(name, **kwargs)
    else:
        raise ValueError(unknown_encoder_message(modality, name))
    prefix = f"bad arguments for encoder '{key}': "
    validate_options(
        encoder_options_model(key),
        kwargs,
        f"model.encoders.{modality}",
        component_wording("option", f"encoder {key!r}"),
        prefix=prefix,
    )
    try:
        return factory(**kwargs)
    except TypeError as err:
        raise ValueError(f"{prefix}{err}") from None


def load_state_dict_file(path: str | Path) -> dict[str, torch.Tensor]:
    """Tensors of a local ``.safetensors`` file, or of a torch file loaded with ``weights_only=True``.

    A torch checkpoint holding ``{"state_dict": ...}`` or ``{"model": ...}`` is unwrapped.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise ValueError(f"pretrained_path '{path}' does not exist")
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(str(path))
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as err:  # corrupt file, pickle with non-tensor objects, ...
        raise ValueError(f"pretrained_path '{path}' cannot be read as weights ({type(err).__name__}: {err})") from None
    for key in ("state_dict", "model"):
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"pretrained_path '{path}' does not hold a state dict of tensors")
    return state


def load_pretrained(module: nn.Module, path: str | Path) -> None:
    """Load local weights into ``module``: missing keys are an error, unexpected ones a warning."""
    state = load_state_dict_file(path)
    own = module.state_dict()
    mismatched = [
        f"{k} {tuple(v.shape)} in file vs {tuple(own[k].shape)}"
        for k, v in state.items()
        if k in own and v.shape != own[k].shape
    ]
    if mismatched:
        raise ValueError(
            f"pretrained_path '{path}': {len(mismatched)} weights do not fit the encoder (size mismatch), e.g. "
            + "; ".join(mismatched[:3])
        )
    result = module.load_state_dict(state, strict=False)
    if result.missing_keys:
        raise ValueError(
            f"pretrained_path '{path}' lacks {len(result.missing_keys)} weights of the encoder, e.g. "
            f"{', '.join(result.missing_keys[:5])}"
        )
    if result.unexpected_keys:
        warnings.warn(
            f"pretrained_path '{path}': ignored {len(result.unexpected_keys)} unexpected weights, e.g. "
            f"{', '.join(result.unexpected_keys[:5])}",
            stacklevel=2,
        )


class TimmImageEncoder(Encoder):
    """Any timm model as a feature extractor: ``(n, 3, S, S) -> (n, num_features)``.

    Args:
        model_name: timm name (``resnet18``, ``vit_tiny_patch16_224``, ...).
        image_size: input side; passed as ``img_size`` to models that take it (ViTs); CNNs ignore it.
        small_input_stem: CIFAR-style stem for ResNets (3x3 stride-1 ``conv1``, no max-pool).
        pretrained_path: local ``.safetensors`` / torch state dict of this encoder (no downloads).
        **timm_kwargs: passed to ``timm.create_model`` (e.g. ``patch_size=4``, ``drop_path_rate``).
    """

    def __init__(
        self,
        model_name: str,
        image_size: int | None = None,
        small_input_stem: bool = False,
        pretrained_path: str | None = None,
        **timm_kwargs: Any,
    ) -> None:
        super().__init__()
        import timm

        if not timm.is_model(model_name):
            close = timm.list_models(f"*{model_name.split('_')[0]}*")[:8]
            raise ValueError(
                f"unknown image encoder '{model_name}': not registered ({', '.join(available_encoders('image'))}) "
                f"and not a timm model" + (f"; similar timm names: {', '.join(close)}" if close else "")
            )
        kwargs: dict[str, Any] = dict(pretrained=False, num_classes=0, **timm_kwargs)
        if image_size is not None and "img_size" not in kwargs:
            try:
                self.model = timm.create_model(model_name, img_size=image_size, **kwargs)
                kwargs["img_size"] = image_size
            except TypeError as err:
                if "img_size" not in str(err):
                    raise ValueError(f"bad arguments for timm model '{model_name}': {err}") from None
                self.model = timm.create_model(model_name, **kwargs)  # size-agnostic CNN
        else:
            try:
                self.model = timm.create_model(model_name, **kwargs)
            except TypeError as err:
                raise ValueError(f"bad arguments for timm model '{model_name}': {err}") from None
        #: the ``timm.create_model`` arguments that built ``self.model`` (before ``small_input_stem``)
        self.create_kwargs: dict[str, Any] = kwargs
        if small_input_stem:
            self._small_input_stem(model_name)
        if pretrained_path:
            load_pretrained(self.model, pretrained_path)
        self.model_name = model_name
        self.num_features = int(self.model.num_features)

    def _small_input_stem(self, model_name: str) -> None:
        conv1 = getattr(self.model, "conv1", None)
        if not isinstance(conv1, nn.Conv2d) or not hasattr(self.model, "maxpool"):
            raise ValueError(
                f"small_input_stem needs a ResNet-style timm model (conv1 + maxpool); '{model_name}' has none"
            )
        self.model.conv1 = nn.Conv2d(conv1.in_channels, conv1.out_channels, 3, stride=1, padding=1, bias=False)
        self.model.maxpool = nn.Identity()

    def forward(self, x: torch.Tensor, view_name: str | None = None) -> torch.Tensor:
        return self.model(x)


@register_encoder("image", "small_cnn")
class SmallCNN(Encoder):
    """Four 3x3 conv blocks (BatchNorm, ReLU; stride 2 from the second), global average pool.

    ``(n, 3, S, S) -> (n, num_features)``; ~0.1 M parameters at the defaults; fast on CPU.
    """

    def __init__(
        self, width: int = 32, num_features: int = 128, in_channels: int = 3, pretrained_path: str | None = None
    ) -> None:
        super().__init__()
        channels = [in_channels, width, width * 2, width * 4, num_features]
        layers: list[nn.Module] = []
        for i in range(4):
            layers += [
                nn.Conv2d(channels[i], channels[i + 1], 3, stride=1 if i == 0 else 2, padding=1, bias=False),
                nn.BatchNorm2d(channels[i + 1]),
                nn.ReLU(inplace=True),
            ]
        self.body = nn.Sequential(*layers)
        self.num_features = num_features
        if pretrained_path:
            load_pretrained(self, pretrained_path)

    def forward(self, x: torch.Tensor, view_name: str | None = None) -> torch.Tensor:
        return self.body(x).mean(dim=(-2, -1))


__all__ = [
    "ENCODERS",
    "Encoder",
    "SmallCNN",
    "TimmImageEncoder",
    "available_encoders",
    "build_encoder",
    "encode_views",
    "encoder_input",
    "encoder_key",
    "encoder_options_model",
    "load_pretrained",
    "load_state_dict_file",
    "register_encoder",
    "unknown_encoder_message",
]
