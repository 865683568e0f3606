"""Canaries for the private framework names devshim uses (``devshim/backends/<name>/_internals.py``)
and the probe mechanism behind them (``devshim/backends/probes.py``).

Each internal of each backend whose framework is installed here is probed on this release: one
that a release moved fails its canary in CI (the newest-release envs, torch-latest, jax-latest,
tensorflow, see it first), instead of a feature degrading quietly for users."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import re
import subprocess
import sys
import textwrap
import types
import warnings
from pathlib import Path

import pytest

import devshim as ds
from devshim.backends import probes
from devshim.backends.torch import _internals as torch_internals

ROOT = Path(__file__).resolve().parent.parent
#: The backends that use private framework names: those whose folder has an `_internals.py` (a
#: backend that uses none needs none).
BACKENDS = tuple(name for name, spec in ds.backends.specs().items() if spec.has_module("_internals"))


def internals_of(backend: str):
    return ds.backends.specs()[backend].module("_internals").INTERNALS


CASES = [pytest.param(internal, id=f"{backend}:{internal.name}")
         for backend in BACKENDS for internal in internals_of(backend)]


@pytest.mark.parametrize("internal", CASES)
def test_each_internal_is_where_devshim_looks_on_this_release(internal):
    for framework in {internal.owner.framework, internal.framework}:
        if importlib.util.find_spec(framework) is None:
            pytest.skip(f"{framework} is not installed in this environment")
        importlib.import_module(framework)
    internal.reset()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", ds.FrameworkInternalWarning)
            found = internal.get()  # a release that moved it (and should have it) warns: an error here
        if internal.expected():
            assert found is not None
    finally:
        internal.reset()




def _framework_names() -> list:
    """How backend code names a framework's modules: each backend's import name, the libraries of
    theirs that are no backend (Keras, jaxlib: the lint's list), and each name backend code gives
    one on import (`import tensorflow as tf`, `from jax import numpy as jnp`)."""
    tops = {spec.import_name for spec in ds.backends.specs().values()} | {"keras", "jaxlib"}
    names = set(tops)
    for path in (ROOT / "devshim" / "backends").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {alias.asname for alias in node.names if alias.asname and alias.name.split(".")[0] in tops}
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in tops:
                names |= {alias.asname for alias in node.names if alias.asname}
    return sorted(names, key=len, reverse=True)


# What names a framework's private attribute or module in backend code: torch._C, jax._src,
# keras.src, tf.__internal__, mxnet.base._LIB, `from torch._dynamo import ...`, and TensorFlow's
# private package (`tensorflow.python`, outside its public `tf.*`).
_FRAMEWORKS = f"(?:{'|'.join(map(re.escape, _framework_names()))})"
_PRIVATE = re.compile(
    rf"(?<![\w.]){_FRAMEWORKS}(?:\.[A-Za-z]\w*)*\.(?:_(?!_)\w+|src\b)"  # (dunders are public protocol)
    rf"|^\s*from {_FRAMEWORKS}(?:\.\w+)*\.(?:_\w+|src)\b"
    rf"|^\s*from {_FRAMEWORKS}(?:\.\w+)* import _\w+"
    r"|(?<![\w.])(?:tensorflow|tf)\.python\b",
    re.M,
)
# A private name spelt as a string (what getattr, setattr and a guard's patch() take, and the
# frame names a guard looks for): "_value", "_imperative_invoke". devshim's own attribute names
# are spelt "_devshim..." or listed here; names in __slots__ are devshim's own.
_PRIVATE_STRING = re.compile(r"""(?<![\w])(["'])_(?!_|devshim)[A-Za-z]\w*\1""")
# ("_host" and "_device" are a virtual torch tensor's own attributes: its values and its device;
# "_traced" is the torch backend's module of devshim's calls as torch.compile traces them.)
_DEVSHIM_OWN_STRINGS = {'"_fw"', '"_local"', '"_internals"', '"_host"', '"_device"', '"_traced"'}
# ATen operator names (torch.ops.aten._to_copy): the registry's spelling, not Python privacy. The
# list is torch/_internals.py's ATEN_OPERATORS, whose canary below checks each is an operator.
_ATEN_OPERATOR_STRINGS = {f'"{name}"' for name in (*torch_internals.ATEN_OPERATORS, torch_internals.FOREACH_PREFIX)}
_SLOTS = re.compile(r"__slots__\s*=\s*\([^)]*\)")
# _internals.py and probes.py are where the private names live.
_WHERE_THEY_LIVE = ("_internals.py", "probes.py")


def _code_of(text: str) -> str:
    code = "\n".join(line.split("  #")[0] for line in text.splitlines() if not line.lstrip().startswith("#"))
    code = re.sub(r'"""(?:.|\n)*?"""', "", code)  # docstrings may speak of them
    return _SLOTS.sub("", code)


def _private_names_in(code: str) -> list:
    found = [match.group(0).strip() for match in _PRIVATE.finditer(code)]
    return found + [match.group(0) for match in _PRIVATE_STRING.finditer(code)
                    if match.group(0).replace("'", '"') not in _DEVSHIM_OWN_STRINGS | _ATEN_OPERATOR_STRINGS]


def test_backend_modules_name_no_private_framework_name_outside_their_internals():
    found = []
    for path in sorted((ROOT / "devshim" / "backends").rglob("*.py")):
        relative = path.relative_to(ROOT / "devshim" / "backends").as_posix()
        if any(part in relative for part in _WHERE_THEY_LIVE):
            continue
        found += [f"{relative}: {name}" for name in _private_names_in(_code_of(path.read_text()))]
    assert found == []


@pytest.mark.parametrize("line", [
    "from tensorflow.python import pywrap_tfe", "from tensorflow.python.framework import ops as _ops",
    "from jax._src import array", "x = torch._C._get_privateuse1_backend_name()",
    "from mxnet.ndarray.numpy import _api_internal", "hooks.patch(ArrayImpl, '_value', wrapper)",
    'getattr(x, "_npy_value", None)', '_JIT_FRAME = "_run_python_pjit"',
])
def test_the_scan_sees_a_private_name_in_each_form_the_guards_used(line):
    assert _private_names_in(_code_of(line)) != []


@pytest.mark.parametrize("line", [
    "import tensorflow as tf", "x = tf.python_function", '__slots__ = ("_previous", "_tokens")',
    'object.__setattr__(device, "_local", threading.local())', '_PLACED = "_devshim_first_call_device"',
    "self.patch(*_VALUE, wrapper)  # Slot(ArrayImpl, '_value')", 'READS = {"__float__": "float(t)"}',
])
def test_the_scan_lets_public_and_devshims_own_names_be(line):
    assert _private_names_in(_code_of(line)) == []


def test_the_docs_list_every_internal_with_its_fallback():
    page = (ROOT / "docs" / "supported-versions.md").read_text()
    missing = [internal.name for backend in BACKENDS if ds.backends.specs()[backend].package.startswith("devshim.")
               for internal in internals_of(backend) if f"`{internal.name}`" not in page]
    assert missing == []


def test_each_aten_operator_the_virtual_gpus_name_is_one_on_this_release():
    torch = pytest.importorskip("torch")
    if torch_internals.PRIVATEUSE1_NAME.get() is None or torch_internals.ACCELERATION_HOOKS.get() is None:
        pytest.skip(f"torch {torch.__version__} has no virtual GPUs")
    missing = sorted(name for name in torch_internals.ATEN_OPERATORS if not hasattr(torch.ops.aten, name))
    assert missing == []
    assert any(name.startswith(f"aten::{torch_internals.FOREACH_PREFIX}")
               for name in torch._C._dispatch_get_all_op_names())


@pytest.mark.same_in_every_pass  # a fresh interpreter with DEVSHIM_BACKEND=torch
def test_virtual_gpus_are_refused_by_name_on_a_torch_without_one_of_their_internals():
    """A torch that moved one (simulated: its probe finds nothing) is told which, with one
    FrameworkInternalWarning naming the feature, and nothing is registered."""
    pytest.importorskip("torch")
    result = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import warnings, torch, devshim as ds
        from devshim.backends.torch import _internals
        if _internals.ACCELERATION_HOOKS.get() is None:
            print("SKIP")
            raise SystemExit
        _internals.TENSOR_TEXT.reset()
        def moved():
            raise AttributeError("module 'torch._tensor_str' has no attribute '_str'")
        _internals.TENSOR_TEXT._find = moved
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                ds.num_gpus()
            except ds.BackendError as err:
                print("REFUSED", err)
        print([str(w.message).split(" (")[0] for w in caught if w.category is ds.FrameworkInternalWarning])
        print(torch._C._get_privateuse1_backend_name())
    """)], capture_output=True, text=True, env={**os.environ, "DEVSHIM_BACKEND": "torch",
                                                  "DEVSHIM_VIRTUAL_DEVICES": "2"}, timeout=300)
    assert result.returncode == 0, result.stderr
    if result.stdout.startswith("SKIP"):
        pytest.skip("this torch has no virtual GPUs")
    refused, warned, slot = result.stdout.strip().splitlines()
    assert refused.startswith("REFUSED devshim cannot present virtual GPUs on this torch")
    assert "it lacks torch._tensor_str._str, which the virtual GPUs rest on" in refused
    assert warned.startswith("['torch ") and "has no torch._tensor_str._str" in warned
    assert slot == "privateuseone"


def test_every_internals_module_is_a_probed_table():
    """(A backend needs one only to name private framework names: the scan above fails one elsewhere.)"""
    assert BACKENDS
    for backend in BACKENDS:
        internals = internals_of(backend)
        assert isinstance(internals, probes.Internals) and internals.tested


# ------------------------------------------------------------ the probe mechanism


@pytest.fixture
def fake_framework(monkeypatch):
    module = types.ModuleType("devshim_fake_framework")
    module.__version__ = "2.9.1+cu128"
    monkeypatch.setitem(sys.modules, "devshim_fake_framework", module)
    return module


def _moved():
    raise AttributeError("module 'devshim_fake_framework' has no attribute '_gone'")


def test_a_moved_internal_warns_once_naming_the_feature_and_its_fallback(fake_framework):
    internals = probes.Internals("devshim_fake_framework", title="Fake", tested="2.4 to 2.9")
    gone = internals.add("devshim_fake_framework._gone", feature="the frobnicator",
                         fallback="frobnication is skipped.", find=_moved)
    with pytest.warns(ds.FrameworkInternalWarning) as caught:
        assert gone.get() is None
    message = str(caught[0].message)
    assert "devshim_fake_framework 2.9.1 has no devshim_fake_framework._gone" in message
    assert "the frobnicator" in message and "frobnication is skipped." in message and "2.4 to 2.9" in message
    assert len(caught) == 1 and isinstance(caught[0].message, ds.DevshimWarning)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert gone.get() is None and not gone.available()  # once per internal and process


def test_an_internal_newer_than_the_release_is_missing_quietly(fake_framework):
    internals = probes.Internals("devshim_fake_framework", title="Fake", tested="2.4 to 2.9")
    newer = internals.add("devshim_fake_framework._new", feature="f", fallback="g", find=_moved, since=(2, 10))
    assert not newer.expected()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert newer.get() is None


def test_a_found_internal_is_looked_up_once(fake_framework):
    calls = []
    internals = probes.Internals("devshim_fake_framework", title="Fake", tested="2.4 to 2.9")
    here = internals.add("devshim_fake_framework.thing", feature="f", fallback="g",
                         find=lambda: calls.append(1) or "the thing")
    assert here.get() == here.get() == "the thing" and here.available()
    assert calls == [1] and list(internals) == [here] and len(internals) == 1


@pytest.mark.parametrize("version,expected", [("2.9.1+cu128", (2, 9, 1)), ("0.4", (0, 4, 0)),
                                              ("1.26.4", (1, 26, 4)), ("unknown", None)])
def test_release_reads_the_imported_version(fake_framework, version, expected):
    fake_framework.__version__ = version
    assert probes.release("devshim_fake_framework") == expected
    assert probes.release("devshim_not_imported_framework") is None
