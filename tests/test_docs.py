"""The docs agree with the code: the API reference covers every public name, every documented
function and method has an example, and the capability table is the registry's.
(`tox -e docs` builds the site itself, strictly.)"""

from __future__ import annotations

import importlib
import inspect
import re
import typing
from pathlib import Path

import pytest

import devshim as ds
from devshim.backends import specs

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "docs" / "reference"
DIRECTIVE = re.compile(r"^::: ([\w.]+)\s*$", re.M)


def directives() -> list:
    return [name for page in sorted(REFERENCE.glob("*.md")) for name in DIRECTIVE.findall(page.read_text())]


def resolve(path: str):
    """The object a ``::: a.b.c`` directive names (a module, or an attribute of one)."""
    try:
        return importlib.import_module(path)
    except ImportError:
        module, _, name = path.rpartition(".")
        return getattr(importlib.import_module(module), name)


def has_example(obj) -> bool:
    doc = inspect.getdoc(obj) or ""
    return ">>>" in doc or "Example" in doc


def documented_objects() -> list:
    """(label, object) for everything the reference renders: each directive's object, a
    class's public methods and properties, a module's listed or public members."""
    found = []
    for path in directives():
        obj = resolve(path)
        if inspect.ismodule(obj):
            members = getattr(obj, "__all__", [])
            # (a type alias, devshim.types', is Any at run time: its docstring is the module's text)
            found += [(f"{path}.{n}", getattr(obj, n)) for n in members
                      if callable(getattr(obj, n)) and getattr(obj, n) is not typing.Any]
            continue
        found.append((path, obj))
        if inspect.isclass(obj) and not issubclass(obj, BaseException):
            for name, member in vars(obj).items():
                if not name.startswith("_") and (inspect.isfunction(member) or isinstance(member, property)):
                    found.append((f"{path}.{name}", member))
    return found


def test_every_public_name_is_in_the_api_reference():
    named = {path.rpartition(".")[2] for path in directives()}
    modules = {path for path in directives() if inspect.ismodule(resolve(path))}
    missing = []
    for name in ds.__all__:
        value = getattr(ds, name)
        if inspect.ismodule(value):
            continue
        in_module = any(name in getattr(importlib.import_module(m), "__all__", []) for m in modules)
        if name not in named and not in_module:
            missing.append(name)
    assert not missing, f"not in docs/reference/*.md: {missing}"


@pytest.mark.parametrize("label, obj", documented_objects(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_documented_function_has_an_example(label, obj):
    assert has_example(obj), f"{label}'s docstring has no example"


def test_the_capability_table_in_the_backends_page_is_the_registrys():
    page = (ROOT / "docs" / "backends.md").read_text()
    rows = {}
    for line in page.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] in specs() and len(cells) == 1 + len(next(iter(specs().values())).capabilities()):
            rows[cells[0]] = cells[1:]
    assert set(rows) == set(specs())
    for name, spec in specs().items():
        expected = ["yes" if v else "-" for v in spec.capabilities().values()]
        assert rows[name] == expected, f"docs/backends.md says {rows[name]} for {name}, devshim info {expected}"


def test_the_readme_links_the_docs():
    readme = (ROOT / "README.md").read_text()
    assert "docs/getting-started.md" in readme and "tox -e docs" in readme
