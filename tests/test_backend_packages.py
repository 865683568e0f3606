"""Every backend is one folder: a declaration row, a core module implementing the contract,
and optional capability modules. Adding a backend is one folder plus passing the conformance suite."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import devshim
from devshim.backends import Backend, BackendSpec, specs
from devshim.backends.spec import CAPABILITY_MODULES

PACKAGES = [m.name for m in pkgutil.iter_modules(devshim.backends.__path__) if m.ispkg]
OPS = ("rand", "from_numpy", "matmul", "norm", "stack", "split", "concat", "add", "item",
       "native_copy", "native_move", "native_device_of")
# What devshim selftest's placement checks need from a backend that places models.
MODEL_OPS = ("small_model", "forward")


def test_every_folder_is_a_registered_backend():
    assert sorted(PACKAGES) == sorted(specs())
    assert devshim.backends.registry.backend_folders() == sorted(PACKAGES)


@pytest.mark.parametrize("name", PACKAGES)
def test_the_package_declares_its_row_and_imports_no_framework(name):
    package = importlib.import_module(f"devshim.backends.{name}")
    spec = package.SPEC
    assert isinstance(spec, BackendSpec) and spec.name == name
    assert spec.title and spec.import_name and spec.distributions
    assert spec.auto_rank is None or isinstance(spec.auto_rank, int)
    source = inspect.getsource(package)
    assert f"import {spec.import_name}" not in source.replace(f"import {spec.import_name}_", "")


@pytest.mark.parametrize("name", PACKAGES)
def test_core_implements_the_contract(name):
    spec = specs()[name]
    core = spec.module("core")
    classes = [v for v in vars(core).values()
               if isinstance(v, type) and issubclass(v, Backend) and v is not Backend]
    assert len(classes) == 1, f"{spec.package}.core must define exactly one Backend subclass"
    cls = classes[0]
    assert cls.spec is spec and cls.name == name
    assert not inspect.isabstract(cls), f"abstract methods left: {cls.__abstractmethods__}"
    for method in ("is_tensor", "tensor_device", "copy_to", "tensor_to_numpy"):
        assert getattr(cls, method) is not getattr(Backend, method)


@pytest.mark.parametrize("name", PACKAGES)
def test_modules_are_the_same_names_in_every_package(name):
    spec = specs()[name]
    modules = {m.name for m in pkgutil.iter_modules(importlib.import_module(spec.package).__path__)}
    assert "core" in modules
    public = {m for m in modules if not m.startswith("_")}  # _private helpers of one backend are its own
    assert public <= set(CAPABILITY_MODULES.values()), f"unexpected modules: {public}"


@pytest.mark.parametrize("name", PACKAGES)
def test_the_ops_module_has_what_the_experiments_need(name):
    spec = specs()[name]
    if not spec.has_module("ops"):
        pytest.skip(f"{name} has no ops module")
    if not spec.is_installed():
        pytest.skip(f"{name} is not installed in this environment")
    ops = spec.module("ops")
    for function in OPS + (MODEL_OPS if spec.has_module("model") else ()):
        assert hasattr(ops, function), f"{spec.package}.ops lacks {function}"
