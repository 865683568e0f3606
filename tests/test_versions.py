"""Declared = tested: every floor pyproject.toml declares (Python, numpy, each extra's requirements)
is pinned in a tox env (its deps or its constraint file), and no extra caps its framework, so that
installing it over a supported release keeps that release (issue 27)."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="tomllib arrived in Python 3.11")

ROOT = Path(__file__).resolve().parent.parent
# Never installed by tox (the test machines have no GPU): its range is stated as untested.
UNTESTED = {"cupy-cuda12x"}
# The tox envs install the CPU build of the same release.
SAME_RELEASE = {"tensorflow": "tensorflow-cpu"}
REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*(.*)$")


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def release(version: str) -> tuple:
    parts = tuple(int(part) for part in re.findall(r"\d+", version))
    return parts + (0,) * (3 - len(parts))


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def tox() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(ROOT / "tox.ini")
    return parser


_PIN = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*==\s*([^\s;#]+)", re.M)


def pinned_in(text: str) -> dict:
    """{normalised name: version} for each ``name==version`` line of ``text`` (deps or a constraint file)."""
    return {normalise(name): version for name, version in _PIN.findall(text)}


def pins() -> dict:
    """{name: {pinned releases}} from every tox env's deps and every constraint file."""
    parser = tox()
    texts = [parser[section].get("deps", "") for section in parser.sections()]
    texts += [path.read_text() for path in (ROOT / "tests").glob("constraints-*.txt")]
    found: dict = {}
    for text in texts:
        for name, version in pinned_in(text).items():
            found.setdefault(name, set()).add(release(version))
    return found


def floors() -> list:
    """(requirement name, floor) for every ``>=`` in dependencies and the extras."""
    meta = project()
    requirements = list(meta["dependencies"])
    for extra in meta["optional-dependencies"].values():
        requirements += extra
    found = []
    for requirement in requirements:
        name, spec = REQUIREMENT.match(requirement).groups()
        floor = re.search(r">=\s*([0-9][^,;\s]*)", spec)
        if floor and normalise(name) not in UNTESTED:
            found.append((normalise(name), floor.group(1)))
    return found


@pytest.mark.parametrize(("name", "floor"), floors(), ids=lambda value: str(value))
def test_every_declared_floor_is_pinned_in_a_tox_env(name, floor):
    pinned = pins()
    names = {name, normalise(SAME_RELEASE.get(name, name))}
    assert any(release(floor) in pinned.get(candidate, set()) for candidate in names), (
        f"{name}>={floor} is declared, but no tox env pins {name}=={floor}")


def test_the_oldest_python_declared_has_a_tox_env():
    oldest = re.search(r">=\s*(3\.\d+)", project()["requires-python"]).group(1)
    parser = tox()
    pythons = {parser[section].get("basepython", "").strip() for section in parser.sections()}
    assert f"python{oldest}" in pythons


def test_no_extra_caps_its_framework():
    for extra, requirements in project()["optional-dependencies"].items():
        for requirement in requirements:
            name, spec = REQUIREMENT.match(requirement).groups()
            if normalise(name).startswith(normalise(extra).split("-")[0]):
                assert "<" not in spec and "==" not in spec and "~=" not in spec, requirement


def test_a_floor_envs_pins_agree_with_its_constraint_file():
    """The floor envs name their pins in tox.ini (where a reader looks) and in the constraint file
    (which holds them for every install there, the extras' requirements included): never two
    different releases."""
    parser = tox()
    checked = 0
    for section in parser.sections():
        constraint = re.search(r"PIP_CONSTRAINT\s*=\s*\{toxinidir\}/(\S+)", parser[section].get("setenv", ""))
        if constraint is None:
            continue
        pinned = pinned_in((ROOT / constraint.group(1)).read_text())
        for name, version in pinned_in(parser[section].get("deps", "")).items():
            if name in pinned:
                assert pinned[name] == version, (section, name, version, constraint.group(1))
                checked += 1
    assert checked >= 8


def test_every_env_in_the_matrix_is_defined():
    parser = tox()
    listed = [name.strip() for name in re.split(r"[,\s]+", parser["tox"]["envlist"]) if name.strip()]
    assert {"py39-floor", "torch-floor", "tensorflow-floor", "jax-floor", "torch-latest", "py313-latest"} <= set(listed)
    assert all(f"testenv:{name}" in parser for name in listed)


# Releases inside a declared range where devshim's behaviour changed (issue 36), each with a tox env
# of its own that runs the conformance suite: env -> (package, release). tools/version_sweep.py
# tests every other minor release in range, outside CI.
CHANGED = {"torch27": ("torch", "2.7.1"), "jax05": ("jax", "0.5.3"), "numpy20": ("numpy", "2.0.2")}


def envlist() -> list:
    return [name.strip() for name in re.split(r"[,\s]+", tox()["tox"]["envlist"]) if name.strip()]


@pytest.mark.parametrize("env", sorted(CHANGED))
def test_each_release_where_behaviour_changed_has_an_env_in_range_running_the_conformance_suite(env):
    parser = tox()
    assert env in envlist()
    package, version = CHANGED[env]
    section = parser[f"testenv:{env}"]
    assert pinned_in(section["deps"]).get(package) == version
    floor = dict(floors())[package]
    newest = max(pins()[package])
    assert release(floor) < release(version) < newest, (package, floor, version, newest)
    commands = section.get("commands", parser["testenv"]["commands"])
    assert "tests/devshim_conformance" in commands or re.search(r"^\s*pytest \{posargs\}\s*$", commands, re.M), commands
