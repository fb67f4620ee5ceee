"""The public faces of the library (each package's ``__all__``): every class and function has a docstring
with an ``Examples`` section, and those examples run (doctest)."""

from __future__ import annotations

import doctest
import importlib
import inspect

import pytest

PACKAGES = ("multiview_app.losses", "multiview_app.models", "multiview_app.data", "multiview_app.eval")

#: Public names whose docstring is being rewritten elsewhere and has no Examples yet. A name listed here
#: that gains its Examples fails the test below, so the list only shrinks.
EXAMPLES_PENDING: set[str] = set()


def _public_callables() -> list[tuple[str, object]]:
    names = []
    for package in PACKAGES:
        module = importlib.import_module(package)
        assert module.__doc__, f"{package} has no module docstring"
        for name in module.__all__:
            obj = getattr(module, name)  # AttributeError: __all__ names a missing object
            if inspect.isclass(obj) or inspect.isfunction(obj):  # registries (constants) are documented by comments
                names.append((f"{package}.{name}", obj))
    return names


PUBLIC = _public_callables()


def test_public_names_are_listed():
    """The loss head's classes are importable by name from the package."""
    from multiview_app.losses import AggNCELoss, FlatNCELoss, M3GLoss, MVEBLoss  # noqa: F401

    assert {
        "multiview_app.losses.M3GLoss",
        "multiview_app.models.build_encoder",
        "multiview_app.data.build_adapter",
        "multiview_app.eval.get_evaluator",
    } <= {name for name, _ in PUBLIC}


@pytest.mark.parametrize("qualified, obj", PUBLIC, ids=[name for name, _ in PUBLIC])
def test_public_name_has_docstring_and_examples(qualified: str, obj: object):
    doc = inspect.getdoc(obj) or ""
    assert doc.strip(), f"{qualified} has no docstring"
    has_examples = "Examples\n--------" in doc
    if qualified in EXAMPLES_PENDING:
        assert not has_examples, f"{qualified} now has Examples: remove it from EXAMPLES_PENDING"
        return
    assert has_examples, f"{qualified}: its docstring has no 'Examples' section (numpy style)"
    assert ">>>" in doc.split("Examples\n--------", 1)[1], f"{qualified}: the Examples section has no doctest"


@pytest.mark.parametrize("qualified, obj", PUBLIC, ids=[name for name, _ in PUBLIC])
def test_public_examples_run(qualified: str, obj: object):
    finder = doctest.DocTestFinder(recurse=False)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = finder.find(obj, qualified, globs={})
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{qualified}: {result.failed} of {result.attempted} doctest examples failed (above)"
    if qualified not in EXAMPLES_PENDING:
        assert result.attempted > 0, f"{qualified}: no doctest example ran"
