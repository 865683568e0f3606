"""Backend selection: DEVSHIM_BACKEND, aliases, set_backend, use_backend, dispatch, threads."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import devshim as ds
from devshim import backends
from devshim.backends.numpy_backend import NumpyBackend

FRAMEWORKS = ("torch", "tensorflow", "mxnet", "jax", "cupy")


@pytest.fixture
def fresh_selection(monkeypatch):
    """Forget the process-wide selection before and after the test."""
    backends.reset_backend()
    yield monkeypatch
    backends.reset_backend()


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("DEVSHIM_")}
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=120
    )


def test_import_devshim_imports_no_framework():
    result = run_python(
        "import sys, json, devshim\n"
        "devshim.Device('gpu', 1) == 'gpu:1'\n"
        f"print(json.dumps([m for m in {FRAMEWORKS!r} if m in sys.modules]))"
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []


def test_import_never_fails_even_with_a_bad_backend_variable():
    result = run_python(
        "import devshim as ds\n"
        "try:\n"
        "    ds.get_backend()\n"
        "except ds.BackendError as err:\n"
        "    print('BackendError:', err)\n",
        DEVSHIM_BACKEND="caffe",
    )
    assert result.returncode == 0, result.stderr
    assert "BackendError: Unknown backend 'caffe'" in result.stdout
    assert "torch, tensorflow, mxnet, jax, numpy" in result.stdout


def test_the_environment_variable_is_read_when_first_needed_not_at_import():
    result = run_python(
        "import os, devshim as ds\n"
        "os.environ['DEVSHIM_BACKEND'] = 'numpy'\n"
        "print(ds.get_backend().name)",
        DEVSHIM_BACKEND="caffe",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "numpy"


@pytest.mark.parametrize("alias,name", [
    ("torch", "torch"), ("pytorch", "torch"), ("PyTorch", "torch"), ("tensorflow", "tensorflow"),
    ("tf", "tensorflow"), ("mxnet", "mxnet"), ("mx", "mxnet"), ("jax", "jax"), ("numpy", "numpy"),
    (" numpy ", "numpy"),
])
def test_names_and_aliases(alias, name):
    assert backends.canonical_name(alias) == name


@pytest.mark.parametrize("bad", ["caffe", "", "torch2", "np"])
def test_unknown_names_list_the_valid_ones(bad):
    with pytest.raises(ds.BackendError, match="Valid names: torch, tensorflow, mxnet, jax, numpy") as info:
        ds.set_backend(bad)
    assert isinstance(info.value, ValueError)


def test_known_but_uninstalled_framework_names_the_pip_extra(monkeypatch):
    monkeypatch.setattr(NumpyBackend, "is_installed", classmethod(lambda cls: False))
    with pytest.raises(ds.BackendError, match=r'pip install "devshim\[numpy\]"'):
        ds.get_backend("numpy")


def test_selection_from_the_environment_variable(fresh_selection):
    fresh_selection.setenv("DEVSHIM_BACKEND", "numpy")
    assert ds.get_backend().name == "numpy"
    assert backends.selection_reason() == "DEVSHIM_BACKEND=numpy"


def test_auto_selection_takes_the_first_installed_in_preference_order(fresh_selection):
    fresh_selection.delenv("DEVSHIM_BACKEND", raising=False)
    installed = {"tensorflow", "mxnet"}
    for name in ("torch", "tensorflow", "mxnet"):
        cls = backends._adapter_class(name)
        fresh_selection.setattr(cls, "is_installed", classmethod(lambda c, n=name: n in installed))
    fresh_selection.setattr(backends, "_instance", lambda name: f"<{name}>")
    adapter, reason = backends._select_default()
    assert adapter == "<tensorflow>" and "tensorflow is the first installed" in reason


def test_auto_selection_falls_back_to_numpy(fresh_selection):
    fresh_selection.delenv("DEVSHIM_BACKEND", raising=False)
    for name in ("torch", "tensorflow", "mxnet"):
        fresh_selection.setattr(backends._adapter_class(name), "is_installed", classmethod(lambda c: False))
    assert ds.get_backend().name == "numpy"
    assert "numpy is the fallback" in backends.selection_reason()
    assert ds.available_backends() == ["numpy"]


def test_available_backends_lists_installed_ones_in_preference_order():
    names = ds.available_backends()
    assert names[-1] == "numpy"
    expected = [n for n in ("torch", "tensorflow", "mxnet") if backends._adapter_class(n).is_installed()]
    assert names[:-1] == [n for n in ("torch", "tensorflow", "jax", "mxnet") if n in expected]


def test_set_backend_is_process_wide_and_use_backend_wins_inside_its_block(fresh_selection):
    assert ds.set_backend("numpy").name == "numpy"
    assert ds.get_backend().name == "numpy"
    assert backends.selection_reason() == "set_backend('numpy')"
    with ds.use_backend("numpy") as adapter:
        assert adapter is ds.get_backend()
        assert backends.selection_reason() == "use_backend('numpy')"


def test_get_backend_returns_one_instance_per_name():
    assert ds.get_backend("numpy") is ds.get_backend("numpy")
    assert ds.get_backend("numpy").name == "numpy"


def test_use_backend_restores_the_previous_selection_after_an_error(fresh_selection):
    ds.set_backend("numpy")
    before = ds.get_backend()
    with pytest.raises(RuntimeError):
        with ds.use_backend("numpy"):
            raise RuntimeError("boom")
    assert ds.get_backend() is before


def test_use_backend_is_isolated_per_thread(fresh_selection):
    torch = pytest.importorskip("torch")
    fresh_selection.setenv("DEVSHIM_BACKEND", "numpy")
    barrier = threading.Barrier(2)
    seen = {}

    def inside_block():
        with ds.use_backend("torch"):
            barrier.wait()  # both threads are now running, one inside a block
            seen["inside"] = ds.get_backend().name
            barrier.wait()

    def outside_block():
        barrier.wait()
        seen["outside"] = ds.get_backend().name
        barrier.wait()

    threads = [threading.Thread(target=inside_block), threading.Thread(target=outside_block)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == {"inside": "torch", "outside": "numpy"}
    assert torch.ones(1, device=ds.cpu(backend="torch")).device.type == "cpu"


def test_use_backend_is_isolated_per_asyncio_task(fresh_selection):
    pytest.importorskip("torch")
    fresh_selection.setenv("DEVSHIM_BACKEND", "numpy")

    async def task(name, started, proceed):
        with ds.use_backend(name):
            started.set()
            await proceed.wait()
            return ds.get_backend().name

    async def main():
        started_a, started_b, proceed = asyncio.Event(), asyncio.Event(), asyncio.Event()
        a = asyncio.create_task(task("torch", started_a, proceed))
        b = asyncio.create_task(task("numpy", started_b, proceed))
        await started_a.wait()
        await started_b.wait()
        outside = ds.get_backend().name
        proceed.set()
        return await a, await b, outside

    assert asyncio.run(main()) == ("torch", "numpy", "numpy")


def test_eight_threads_dispatching_for_the_first_time_at_once(fresh_selection):
    """The first dispatch builds adapters and caches; racing threads must agree."""
    torch = pytest.importorskip("torch")
    fresh_selection.setattr(backends, "_instances", {})
    fresh_selection.setattr(backends, "_type_owner", {})
    barrier = threading.Barrier(8)
    results, errors = [None] * 8, []

    def work(i):
        try:
            barrier.wait()
            name = "torch" if i % 2 else "numpy"
            x = torch.ones(2) if i % 2 else np.ones(2)
            with ds.use_backend(name):
                results[i] = (
                    ds.get_backend().name,
                    type(ds.device_of(x)).__name__,
                    ds.get_backend(name),
                    ds.copy_if_needed(x, ds.cpu()) is x,
                    ds.get_backend(),
                )
        except Exception as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    for i, (name, device_type, adapter, identity, selected) in enumerate(results):
        assert name == ("torch" if i % 2 else "numpy")
        assert device_type == "Device" and identity and selected is adapter
    assert len({id(r[2]) for r in results}) == 2  # one adapter instance per backend


def test_tensors_dispatch_on_their_own_framework_whatever_is_selected():
    torch = pytest.importorskip("torch")
    with ds.use_backend("numpy"):
        d = ds.device_of(torch.ones(1))
        assert d.backend == "torch"
        assert isinstance(ds.to_device(torch.ones(1), "cpu"), torch.Tensor)
        assert ds.device_of(np.ones(1)).backend == "numpy"


def test_registry_and_adapter_classes_name_the_same_framework():
    """The registry repeats each adapter's framework module so dispatch never imports
    adapters of frameworks that are not loaded; the two must not drift apart."""
    for name, (framework, _, _) in backends._ADAPTERS.items():
        cls = backends._adapter_class(name)
        assert (cls.name, cls.module) == (name, framework)
