"""The package around the code: metadata, what the sdist carries, the docs tools' pins, and the
docs site's link check (tools/check_site_links.py; `tox -e docs` runs it on the built site)."""

from __future__ import annotations

import ast
import configparser
import importlib.util
import re
from pathlib import Path

import pytest

import devshim

ROOT = Path(__file__).resolve().parent.parent
tomllib = pytest.importorskip("tomllib", reason="tomllib is in Python 3.11 and later")


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_the_license_is_an_spdx_expression_with_its_file():
    project = pyproject()["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    assert not any(c.startswith("License ::") for c in project["classifiers"])  # PEP 639: the expression only
    assert "MIT License" in (ROOT / "LICENSE").read_text(encoding="utf-8")


def test_the_version_is_written_once_in_devshim():
    data = pyproject()
    assert "version" not in data["project"] and "version" in data["project"]["dynamic"]
    assert data["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "devshim.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+(\w+\d*)?", devshim.__version__)


def test_py_typed_ships_in_the_wheel():
    assert (ROOT / "devshim" / "py.typed").is_file()
    assert "py.typed" in pyproject()["tool"]["setuptools"]["package-data"]["devshim"]


def test_python_classifiers_cover_requires_python():
    project = pyproject()["project"]
    lowest = re.fullmatch(r">=3\.(\d+)", project["requires-python"]).group(1)
    minors = sorted(int(c.rsplit(".", 1)[1]) for c in project["classifiers"]
                    if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c))
    assert minors[0] == int(lowest) and minors == list(range(minors[0], minors[-1] + 1))


def test_the_sdist_carries_what_its_tests_and_docs_need():
    manifest = (ROOT / "MANIFEST.in").read_text(encoding="utf-8")
    # tests/ reads docs/, examples/ and tools/ (test_docs, test_examples, this file); tox.ini and
    # mkdocs.yml build and document it; the license goes in by license-files.
    for folder in ("tests", "docs", "examples", "tools"):
        assert re.search(rf"(?m)^graft {folder}$", manifest), folder
    for name in ("tox.ini", "mkdocs.yml", "CHANGELOG.md"):
        assert name in manifest.split()
    assert (ROOT / "CHANGELOG.md").read_text(encoding="utf-8").startswith("# Changelog")


def test_the_conformance_suite_ships_in_the_wheel_beside_devshim():
    """tests/devshim_conformance/ is the package devshim_conformance in the wheel (a backend in a
    package of its own runs it with `pytest --pyargs devshim_conformance`; the tox env of
    tests/plugin_backend does, from the installed wheel), with its fixtures and its harness base."""
    found = pyproject()["tool"]["setuptools"]["packages"]["find"]
    assert "tests" in found["where"] and "devshim_conformance" in found["include"]
    suite = ROOT / "tests" / "devshim_conformance"
    assert all((suite / name).is_file() for name in ("__init__.py", "conftest.py", "fixtures.py", "harness.py"))
    assert not (ROOT / "tests" / "__init__.py").exists()  # only the suite, not the rest of the tests
    assert "devshim_conformance" in (ROOT / "MANIFEST.in").read_text(encoding="utf-8")


def test_the_docs_extra_pins_what_the_docs_env_installs():
    extra = sorted(pyproject()["project"]["optional-dependencies"]["docs"])
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini", encoding="utf-8")
    env = sorted(line.strip() for line in tox["testenv:docs"]["deps"].splitlines() if line.strip())
    assert extra == env


def _link_checker():
    spec = importlib.util.spec_from_file_location("check_site_links", ROOT / "tools" / "check_site_links.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _site(tmp_path, pages: dict) -> Path:
    for name, body in pages.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"<html><body>{body}</body></html>", encoding="utf-8")
    return tmp_path


def test_the_link_check_passes_a_site_that_opens_from_disk(tmp_path):
    site = _site(tmp_path, {
        "index.html": '<a href="guide.html#setup">x</a> <a href="https://example.org/">y</a> '
                      '<a href="#top">z</a> <h1 id="top">t</h1> <img src="img/a.png">',
        "guide.html": '<h2 id="setup">s</h2> <a href="index.html">home</a> <a href="mailto:a@b.c">m</a>',
        "404.html": '<a href="/index.html">served only</a>',
    })
    (site / "img").mkdir()
    (site / "img" / "a.png").write_bytes(b"")
    assert _link_checker().broken_links(site) == []


def test_the_link_check_names_each_broken_link(tmp_path):
    site = _site(tmp_path, {
        "index.html": '<a href="guide/">folder</a> <a href="missing.html">gone</a> '
                      '<a href="guide/index.html#nowhere">anchor</a> <a href="/guide/index.html">abs</a>',
        "guide/index.html": '<h2 id="setup">s</h2>',
    })
    found = {link: problem for _, link, problem in _link_checker().broken_links(site)}
    assert set(found) == {"guide/", "missing.html", "guide/index.html#nowhere", "/guide/index.html"}
    assert "directory listing" in found["guide/"] and "no such file" in found["missing.html"]
    assert "'nowhere'" in found["guide/index.html#nowhere"] and "absolute" in found["/guide/index.html"]


def test_the_link_check_command_exits_1_on_a_broken_link(tmp_path, capsys):
    site = _site(tmp_path, {"index.html": '<a href="gone.html">x</a>'})
    assert _link_checker().main([str(site)]) == 1
    assert "index.html: gone.html: no such file in the site" in capsys.readouterr().out


def test_type_checkers_see_every_public_name_that_devshim_loads_lazily():
    """devshim/__init__.py loads its names on first use; its TYPE_CHECKING imports and its literal
    __all__ are what type checkers and editors read (pyright types ds.x as a module otherwise)."""
    tree = ast.parse((ROOT / "devshim" / "__init__.py").read_text(encoding="utf-8"))
    guarded = next(node for node in tree.body if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING")
    seen = {alias.asname or alias.name for node in ast.walk(guarded) if isinstance(node, ast.ImportFrom)
            and node.module != "typing" for alias in node.names}  # (typing's Any types __getattr__)
    assert seen == set(devshim._EXPORTS) | {"backends", "settings", "testing"}
    assert devshim.__all__ == list(devshim._EXPORTS) + ["testing", "settings", "backends"]
