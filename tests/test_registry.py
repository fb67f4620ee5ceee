"""Registry: lookups, errors that list the valid names, lazy registration by module import."""

import sys

import pytest

from multiview_app.registry import Registry


def test_unknown_name_lists_available_and_duplicates_are_refused():
    reg: Registry[int] = Registry("widget")
    reg.register("b")(2)
    reg.register("a")(1)
    assert reg.names() == ["a", "b"] and reg.get("a") == 1 and "b" in reg
    with pytest.raises(ValueError, match=r"unknown widget 'c'; available: a, b"):
        reg.get("c")
    with pytest.raises(ValueError, match="already registered"):
        reg.register("a")(3)


def test_modules_are_imported_once_on_first_lookup(tmp_path, monkeypatch):
    reg: Registry[int] = Registry("gadget", modules=["_mvapp_registry_probe"])
    (tmp_path / "_mvapp_registry_probe.py").write_text("import builtins\nbuiltins._mvapp_probe_reg.register('x')(7)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import builtins

    monkeypatch.setattr(builtins, "_mvapp_probe_reg", reg, raising=False)
    assert "_mvapp_registry_probe" not in sys.modules
    assert reg.get("x") == 7
    assert reg.names() == ["x"]  # a second lookup does not re-import (would raise: already registered)
    sys.modules.pop("_mvapp_registry_probe", None)
