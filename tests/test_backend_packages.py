"""Every backend is one folder: a declaration row, a core module implementing the contract,
and optional capability modules. Adding a backend is one folder plus passing the conformance suite."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import pathlib
import pkgutil
import subprocess
import sys

import pytest

import devshim
import devshim as ds
from devshim.backends import Backend, BackendSpec, specs
from devshim.backends.autodiff_base import Autodiff
from devshim.backends.interop_base import Interop
from devshim.backends.memory_base import DeviceMemory
from devshim.backends.model_base import ModelPlacement
from devshim.backends.spec import CAPABILITY_MODULES
from devshim.guard.hooks import GuardHooks

#: Every registered backend: devshim's folders, and the installed packages' (entry points).
PACKAGES = list(specs())
OPS = ("rand", "from_numpy", "matmul", "norm", "stack", "split", "concat", "add", "item",
       "native_calls", "native_copy_dict", "native_copy_lists")
# What devshim selftest's placement checks need from a backend that places models.
MODEL_OPS = ("small_model", "forward")


def test_every_folder_is_a_registered_backend():
    folders = sorted(m.name for m in pkgutil.iter_modules(devshim.backends.__path__) if m.ispkg)
    own = [name for name, spec in specs().items() if spec.package == f"devshim.backends.{name}"]
    assert sorted(own) == folders == devshim.backends.registry.backend_folders()


@pytest.mark.parametrize("name", PACKAGES)
def test_the_package_declares_its_row_and_imports_no_framework(name):
    package = importlib.import_module(specs()[name].package)
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


# The optional modules' contracts: module name -> (base class, what it is for).
CONTRACTS = {
    "guard": (GuardHooks, "transfer-guard hooks"),
    "model": (ModelPlacement, "model placement"),
    "interop": (Interop, "ds.convert's side of the framework"),
    "autodiff": (Autodiff, "the framework's autodiff, for ds.testing.check_backward"),
    "memory": (DeviceMemory, "the framework's memory figures, for ds.memory"),
}


@pytest.mark.parametrize("module_name", sorted(CONTRACTS))
@pytest.mark.parametrize("name", PACKAGES)
def test_optional_modules_implement_their_contract(name, module_name):
    spec = specs()[name]
    if not spec.has_module(module_name):
        pytest.skip(f"{name} has no {module_name}.py")
    if not spec.is_installed():
        pytest.skip(f"{name} is not installed in this environment: {module_name}.py imports it")
    base, _ = CONTRACTS[module_name]
    module = spec.module(module_name)
    classes = [v for v in vars(module).values() if isinstance(v, type) and issubclass(v, base)
               and v is not base and v.__module__ == module.__name__]
    assert len(classes) == 1, f"{module.__name__} must define exactly one {base.__name__} subclass"
    assert not inspect.isabstract(classes[0]), f"abstract methods left: {classes[0].__abstractmethods__}"
    found = {"guard": ds.backends.guard_hooks, "model": ds.backends.model_placement,
             "interop": ds.backends.interop, "autodiff": ds.backends.autodiff,
             "memory": ds.backends.memory}[module_name](name)
    assert type(found) is classes[0]


def test_the_capability_table_names_every_contract_module():
    assert {"core", "ops"} | set(CONTRACTS) == set(CAPABILITY_MODULES.values())


def _devshim_modules():
    root = pathlib.Path(devshim.__file__).parent
    for path in sorted(root.rglob("*.py")):
        yield ".".join(path.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__"), path


# Modules that may use the public API through `import devshim`: the layers above it.
_ABOVE_THE_API = ("devshim.bench", "devshim.selftest", "devshim.cli", "devshim.__main__",
                  "devshim.pytest_plugin")


def test_nothing_below_the_public_api_reaches_it_through_the_root_package():
    """`import devshim` then `devshim.to_device(...)` is an import of the API that
    import-linter cannot see (the root package's names are loaded by name, on demand)."""
    offenders = []
    for name, path in _devshim_modules():
        if name == "devshim" or name.startswith(_ABOVE_THE_API):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import) and any(a.name == "devshim" for a in node.names):
                offenders.append(f"{name}:{node.lineno}")
            elif isinstance(node, ast.ImportFrom) and node.module == "devshim" and node.level == 0:
                root = pathlib.Path(devshim.__file__).parent
                not_modules = [a.name for a in node.names
                               if not (root / f"{a.name}.py").exists() and not (root / a.name).is_dir()]
                if not_modules:
                    offenders.append(f"{name}:{node.lineno}")
    assert not offenders, f"import the lower module itself, not the root package: {offenders}"


_IMPORT_EACH = """
import importlib, json, sys
frameworks, found = {frameworks!r}, {{}}
for module in {modules!r}:
    before = {{name for name in frameworks if name in sys.modules}}
    importlib.import_module(module)
    new = sorted(name for name in frameworks if name in sys.modules and name not in before)
    if new:
        found[module] = new
print(json.dumps(found))
"""


def test_devshim_and_each_backends_package_and_core_load_no_framework():
    """`import devshim`, and loading a backend's `__init__.py` and `core.py` (which the registry
    and dispatch do for every backend), import no framework: in a fresh interpreter, each is
    imported in turn and no backend's framework may follow it. Every registered backend, devshim's
    folders and installed plug-ins alike; modules that may import it (`ops.py`, `guard.py`, ...)
    are loaded only once it is in use. (ruff's TID253 checks the rest of devshim's modules.)"""
    frameworks = sorted({spec.import_name for spec in specs().values()})
    modules = ["devshim"] + [module for spec in specs().values() for module in (spec.package, f"{spec.package}.core")]
    code = _IMPORT_EACH.format(frameworks=frameworks, modules=modules)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {}
