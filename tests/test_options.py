"""One options mechanism (multiview_app/options.py): every registered loss, encoder, data adapter and view
policy has a pydantic options model, a bad option of each is refused in one message format that names the
key and what is accepted, names are written once (the registry sets them), and the hooks the config checks,
the trainer and the model read are declared on the base classes with their defaults."""

from __future__ import annotations

import re
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from pydantic import ValidationError

from multiview_app.config import ConfigError, config_from_dict
from multiview_app.config_checks import accepted_options, component_options_model
from multiview_app.data.adapters import ADAPTERS, build_adapter
from multiview_app.data.views import VIEW_POLICIES, PolicyOptions, ViewPolicy, build_view_policy
from multiview_app.losses import LOSSES, MultiViewLoss, build_loss, loss_parameters
from multiview_app.models.encoders import ENCODERS, Encoder, build_encoder, encode_views, encoder_options_model
from multiview_app.options import ComponentOptions, options_from_signature
from multiview_app.registry import Registry
from multiview_app.train.diagnostics import DEFAULT_TAU, loss_temperature

BAD = "bogus_key"
# <where>.bogus_key: unknown <noun>[ for <owner>]; <label>: <accepted keys>
UNKNOWN = r"{where}\.bogus_key: unknown (key|option|parameter)( for [^;]+)?; (allowed|valid): (?P<keys>[^;]*)"


def _refusal(call: Callable[[], Any], error: type[Exception], where: str) -> list[str]:
    """The accepted keys named by the error ``call`` raises for ``bogus_key`` at ``where``."""
    with pytest.raises(error) as info:
        call()
    found = re.search(UNKNOWN.format(where=re.escape(where)), str(info.value))
    assert found, str(info.value)
    return [] if found["keys"] == "(none)" else [key.split("=")[0] for key in found["keys"].split(", ")]


def _components() -> list[tuple[str, str]]:
    return (
        [("loss", n) for n in LOSSES.names()]
        + [("data.options", n) for n in ADAPTERS.names()]
        + [("views.options", n) for n in VIEW_POLICIES.names()]
        + [(f"model.encoders.{key.split('/')[0]}", key.split("/")[1]) for key in ENCODERS.names()]
    )


@pytest.mark.parametrize("where, name", _components())
def test_every_component_has_an_options_model_and_refuses_a_bad_key_naming_it(where: str, name: str) -> None:
    model = component_options_model(where, name)
    assert isinstance(model, type) and issubclass(model, ComponentOptions)
    fields = list(model.model_fields)
    # checked from the config (mvapp train / config show)
    raw: dict[str, Any] = {"train": {"max_steps": 1}}
    if where == "loss":
        raw["loss"] = {"name": name, BAD: 1}
    elif where == "data.options":
        raw["data"] = {"adapter": name, "options": {BAD: 1}}
    elif where == "views.options":
        raw["views"] = {"policy": name, "options": {BAD: 1}}
    else:
        raw["model"] = {"encoders": {where.rsplit(".", 1)[1]: {"name": name, BAD: 1}}}
    listed = _refusal(lambda: config_from_dict(raw), ConfigError, where)
    assert sorted(listed) == sorted(fields)
    # and from the component's own builder
    if where == "loss":
        assert _refusal(lambda: build_loss(name, **{BAD: 1}), ValueError, where) == fields
    elif where == "data.options":
        assert _refusal(lambda: build_adapter(name, {BAD: 1}), ValueError, where) == fields
    elif where == "views.options":
        cls = VIEW_POLICIES.get(name)
        fake = SimpleNamespace(modality=cls.modality)
        assert _refusal(lambda: build_view_policy(name, max(2, cls.min_k), {BAD: 1}, fake), ValueError, where) == fields
    else:
        modality = where.rsplit(".", 1)[1]
        assert _refusal(lambda: build_encoder(modality, name, **{BAD: 1}), ValueError, where) == fields


def test_a_bad_value_names_the_key_what_was_expected_and_the_value() -> None:
    with pytest.raises(ConfigError, match=r"views\.options\.image_size: .*greater than or equal to .* \(got 0\)"):
        config_from_dict({"train": {"max_steps": 1}, "views": {"options": {"image_size": 0}}})
    with pytest.raises(ValueError, match=r"data\.options\.load_size: .*greater than or equal to 8 \(got 2\)"):
        build_adapter("digits", {"load_size": 2})


def test_signature_options_follow_the_signature() -> None:
    def factory(a: int, b: float = 0.5, *, c: str = "x") -> None:
        """A factory with a required, a defaulted and a keyword-only parameter."""

    model = options_from_signature(factory)
    assert list(model.model_fields) == ["a", "b", "c"]
    assert model.model_validate({"a": 1}).model_dump() == {"a": 1, "b": 0.5, "c": "x"}
    with pytest.raises(ValidationError, match="a\n  Field required"):
        model.model_validate({"b": 1.0})

    def anything(a: int = 1, **kwargs: Any) -> None:
        """Takes any keyword."""

    assert accepted_options("model.encoders.image", "no-such-encoder") is None  # unknown: the checks report it
    assert options_from_signature(anything).model_validate({"z": 3}).model_extra == {"z": 3}
    assert loss_parameters("mveb") == {"beta": 0.01, "eta": 0.01, "chunked": None}
    assert accepted_options("loss", "mveb") == ["name", "beta", "eta", "chunked"]
    assert encoder_options_model("image/small_cnn") is ENCODERS.get("image/small_cnn").Options


def test_registry_sets_the_name_once() -> None:
    for name in LOSSES.names():
        assert LOSSES.get(name).name == name
    registry: Registry[type] = Registry("thing", name_attribute="name")

    @registry.register("written-once")
    class Thing:
        name = "base"

    assert Thing.name == "written-once"
    plain: Registry[type] = Registry("plain")

    @plain.register("other")
    class Kept:
        name = "kept"

    assert Kept.name == "kept"  # registries without name_attribute leave the class alone


class _BareLoss(MultiViewLoss):
    def __init__(self, weight: float = 1.0) -> None:
        super().__init__()
        self.weight = weight

    def compute(self, z: torch.Tensor) -> torch.Tensor:
        return self.weight * z.sum()


class _BareEncoder(Encoder):
    def __init__(self, width: int = 3) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, width)
        self.num_features = width

    def forward(self, x: torch.Tensor, view_name: str | None = None) -> torch.Tensor:
        return self.linear(x)


class _BarePolicy(ViewPolicy):
    pass


def test_base_class_hooks_have_their_defaults() -> None:
    loss = _BareLoss()
    assert (loss.min_views, loss.needs_teacher, loss.gather_across_processes) == (2, False, True)
    assert loss.temperature() is None and loss_temperature(loss) == DEFAULT_TAU
    assert list(_BareLoss.Options.model_fields) == ["weight"]
    loss(torch.randn(4, 2, 3))
    assert set(loss.last_stats) == {"loss"}

    encoder = _BareEncoder()
    assert encoder.uses_view_name is False and list(_BareEncoder.Options.model_fields) == ["width"]
    xs = [torch.randn(5, 4), torch.randn(5, 4)]
    out = encoder.forward_views(xs, ["a", "b"])  # default: one call on the concatenated views
    assert out.shape == (5, 2, 3)
    torch.testing.assert_close(out, torch.stack([encoder(x) for x in xs], dim=1))
    torch.testing.assert_close(encode_views(encoder, xs, ["a", "b"]), out)

    policy = _BarePolicy(2, PolicyOptions(), SimpleNamespace(modality=""))
    assert policy.uses_model is False
    policy.bind_model(torch.nn.Linear(1, 1))  # a no-op for policies whose views do not use the model
    assert _BarePolicy.Options is PolicyOptions


def test_overridden_hooks_are_the_ones_read() -> None:
    assert loss_temperature(build_loss("pvc_geometric", tau=0.3)) == pytest.approx(0.3)
    assert LOSSES.get("byol_pwe").needs_teacher and not LOSSES.get("m3g").gather_across_processes
    eeg = ENCODERS.get("eeg/conv")
    assert eeg.uses_view_name and eeg.forward_views is not Encoder.forward_views


def test_one_formatter_for_schema_sections_and_whole_model_checks() -> None:
    from pydantic import BaseModel, model_validator

    from multiview_app.options import format_validation_error

    with pytest.raises(
        ConfigError,
        match=r"^model\.teacher\.bogus_key: unknown key; allowed: enabled, momentum_base, "
        r"views$",
    ):
        config_from_dict({"train": {"max_steps": 1}, "model": {"teacher": {BAD: 1}}})

    class Pair(BaseModel):
        low: float = 0.0
        high: float = 1.0

        @model_validator(mode="after")
        def _ordered(self) -> Pair:
            if self.low > self.high:
                raise ValueError(f"low={self.low} must not exceed high={self.high}")
            return self

    with pytest.raises(ValidationError) as info:
        Pair(low=2.0)
    assert format_validation_error(info.value, "", Pair) == "low=2.0 must not exceed high=1.0"
    assert format_validation_error(info.value, "band", Pair) == "band: low=2.0 must not exceed high=1.0"
