"""Config: YAML + extends, dotted overrides, and errors that name the key, value and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from multiview_app.config import ConfigError, apply_overrides, dump_config, load_config, read_yaml
from multiview_app.losses import available_losses

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def test_every_loss_has_a_digits_config_that_validates() -> None:
    for loss in available_losses():
        path = CONFIGS / f"digits_{loss}.yaml"
        assert path.is_file(), f"missing {path.name}"
        cfg = load_config(path)
        assert cfg.loss.name == loss
        assert cfg.output.name == f"digits_{loss}"
        assert cfg.views.k >= 2


def test_extends_and_overrides(tmp_path: Path) -> None:
    base = tmp_path / "base.yaml"
    base.write_text("train: {max_steps: 10, batch_size: 8}\nloss: {name: infonce_pwe, tau: 0.5}\n")
    child = tmp_path / "child.yaml"
    child.write_text("extends: base.yaml\ntrain: {batch_size: 16}\n")
    raw = read_yaml(child)
    assert raw["train"] == {"max_steps": 10, "batch_size": 16}
    cfg = load_config(
        child, ["loss.tau=0.05", "train.max_steps=3", "optim.betas=[0.8, 0.9]", "output.name=x"], check=False
    )
    assert cfg.loss.params == {"tau": 0.05} and cfg.train.max_steps == 3 and cfg.optim.betas == (0.8, 0.9)
    assert cfg.output.name == "x"
    assert apply_overrides({"a": {"b": 1}}, ["a.c=true"]) == {"a": {"b": 1, "c": True}}


def test_resolved_config_roundtrips(tmp_path: Path) -> None:
    cfg = load_config(CONFIGS / "digits_infonce_pwe.yaml", ["train.max_steps=7"])
    path = tmp_path / "resolved.yaml"
    path.write_text(dump_config(cfg))
    again = load_config(path)
    assert again.to_dict() == cfg.to_dict()


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["train.max_stpes=5"], r"train\.max_stpes: unknown key; allowed: .*max_steps"),
        (["trian.max_steps=5"], r"trian: unknown key; allowed: data, eval, loss"),
        (["train.precision=fp8"], r"train\.precision: .*'no', 'fp16' or 'bf16' \(got 'fp8'\)"),
        (["train.batch_size=0"], r"train\.batch_size: .*greater than or equal to 1 \(got 0\)"),
        (["loss.taau=0.1"], r"loss\.taau: unknown parameter for loss 'infonce_pwe'; valid: tau"),
        (["loss.name=nope"], r"loss\.name: unknown loss 'nope'; available: .*infonce_pwe"),
        (["loss.tau=-1"], r"loss .*tau"),
        (["views.k=1"], r"views\.k: got 1, but loss 'infonce_pwe' is a multi-view loss and needs k >= 2"),
        (["data.adapter=nope"], r"data\.adapter: .*'nope'.*digits"),
        (["data.options.load_sz=3"], r"data\.options\.load_sz: unknown key; allowed: load_size"),
        (["views.options.stacks=bogus"], r"views\.options\.stacks: .*bogus"),
        (["views.batch_mode=shrinking"], r"views\.batch_mode: .*'growing' or 'fixed'"),
        (["model.teacher.enabled=true", "model.teacher.views=[5]"], r"model\.teacher\.views: got \[5\]"),
        (["model.encoders.image={width: 3}"], r"model\.encoders.*needs a 'name'"),
        (["train.max_steps=null"], r"set train\.max_steps and/or train\.epochs"),
        (["no_equals_sign"], r"expected dotted\.key=value"),
    ],
)
def test_errors_name_key_value_and_allowed(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(CONFIGS / "digits_infonce_pwe.yaml", overrides)


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("train: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    loop = tmp_path / "loop.yaml"
    loop.write_text("extends: loop.yaml\n")
    with pytest.raises(ConfigError, match="'extends' cycle"):
        load_config(loop)


def test_switching_a_component_by_override_drops_what_the_new_one_does_not_take() -> None:
    """`loss.name=pvc_geometric` on an M3G config: epsilon / cost are M3G's, dropped with one note; an option the
    user names explicitly is kept (and still refused if the new loss does not take it); `key=null` removes a key."""
    cfg = load_config(CONFIGS / "digits_m3g.yaml", ["loss.name=pvc_geometric"])
    assert cfg.loss.name == "pvc_geometric" and "epsilon" not in cfg.loss.params
    assert cfg.load_notes == [
        "loss.name m3g -> pvc_geometric: dropped loss.epsilon, loss.cost (not options of pvc_geometric)"
    ]
    with pytest.raises(ConfigError, match=r"loss\.epsilon: unknown parameter for loss 'pvc_geometric'"):
        load_config(CONFIGS / "digits_m3g.yaml", ["loss.name=pvc_geometric", "loss.epsilon=0.1"])
    default = load_config(CONFIGS / "digits_m3g.yaml", ["loss.epsilon=null"])
    assert "epsilon" not in default.loss.params and default.load_notes == []
    assert load_config(CONFIGS / "digits_m3g.yaml").load_notes == []
    eeg = load_config(
        CONFIGS / "eeg_synthetic_m3g.yaml",
        ["views.policy=augment", "data.adapter=digits", "views.k=2", "model.encoders={image: {name: small_cnn}}"],
        check=False,
    )
    assert eeg.views.options == {} and "cache" not in eeg.data.options and "channels" not in eeg.data.options
    assert any(n.startswith("data.adapter eeg_windows -> digits: dropped data.options.cache") for n in eeg.load_notes)
