"""Runtime docstrings (issue 26): help(prefixkv.Engine.store) shows the
documentation. The text lives in the pybind11 definitions
(python/src/docstrings.h, py_records.cc); every public callable and property
has some, and python/prefixkv/_prefixkv.pyi repeats it word for word."""
import ast
import inspect
import pathlib
import pydoc

import pytest

import prefixkv
from prefixkv import _prefixkv

STUBS = pathlib.Path(__file__).resolve().parents[1] / "prefixkv" / "_prefixkv.pyi"


def text_of(obj):
    """The documentation of `obj` without pybind11's signature line."""
    doc = inspect.getdoc(obj) or ""
    if callable(obj) and not inspect.isclass(obj):
        first, _, rest = doc.partition("\n")
        if first.startswith(getattr(obj, "__name__", "?") + "("):
            doc = rest
    return inspect.cleandoc(doc)


def public_members():
    """(qualified name, object) of every public class, function, method and
    property the package exports, the dunder protocol methods included."""
    for name in prefixkv.__all__:
        obj = getattr(prefixkv, name)
        if inspect.ismodule(obj) or (inspect.isclass(obj) and
                                     issubclass(obj, BaseException)):
            continue  # pure Python: their own docstrings, checked by pydoc below
        yield name, obj
        if not inspect.isclass(obj):
            continue
        for attr, value in vars(obj).items():
            if attr.startswith("_") and attr not in ("__init__", "__enter__", "__exit__"):
                continue
            yield f"{name}.{attr}", getattr(obj, attr)


@pytest.mark.parametrize("name,obj", list(public_members()), ids=lambda v: str(v)[:40])
def test_every_public_callable_is_documented(name, obj):
    assert text_of(obj), f"{name} has no documentation"


def test_help_shows_the_documentation():
    text = pydoc.render_doc(prefixkv.Engine.store, renderer=pydoc.plaintext)
    assert "reuse=\"unlikely\"" in text and "C-contiguous" in text
    assert "prefixkv.resp" in pydoc.render_doc(prefixkv.resp, renderer=pydoc.plaintext)


def stub_docstrings():
    """(qualified name, docstring) of every class and def in the stubs."""
    tree = ast.parse(STUBS.read_text())
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            yield node.name, ast.get_docstring(node)
        if isinstance(node, ast.ClassDef):
            for member in node.body:
                if isinstance(member, ast.FunctionDef):
                    yield f"{node.name}.{member.name}", ast.get_docstring(member)


@pytest.mark.parametrize("name,doc", list(stub_docstrings()), ids=lambda v: str(v)[:40])
def test_the_stubs_say_what_the_module_says(name, doc):
    obj = _prefixkv
    for part in name.split("."):
        obj = getattr(obj, part)
    assert doc == text_of(obj), f"{name}: the .pyi's docstring differs from the module's"
