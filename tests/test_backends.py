"""The registry and backend selection: rows, names, DEVSHIM_BACKEND, set/use_backend, dispatch, threads."""

from __future__ import annotations

import asyncio
import json
import sys
import threading

import numpy as np
import pytest

import devshim as ds
from devshim import backends, settings
from devshim.backends import registry, selection
from devshim.backends.spec import BackendSpec
from helpers import WithoutTensors, run_python

#: Every backend's framework, as the registry names them.
FRAMEWORKS = tuple(spec.import_name for spec in backends.specs().values())


@pytest.fixture
def fresh_selection(setenv):
    """Forget the process-wide selection before and after the test."""
    backends.reset_backend()
    yield setenv
    backends.reset_backend()


@pytest.fixture
def without_keras(monkeypatch):
    """Selection as in a process without Keras (which TensorFlow imports; devshim follows the framework
    Keras runs on: tests/test_keras.py)."""
    monkeypatch.delitem(sys.modules, "keras", raising=False)


def test_import_devshim_imports_no_framework_and_none_of_its_own_modules():
    result = run_python(
        "import sys, json, devshim\n"
        "loaded = [m for m in sys.modules if m.startswith('devshim.')]\n"
        "devshim.Device('gpu', 1) == 'gpu:1'\n"
        f"print(json.dumps([loaded, [m for m in {FRAMEWORKS!r} if m in sys.modules]]))"
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [[], []]


def test_import_devshim_loads_no_module_but_itself():
    """Not even typing, which was most of the time `import devshim` took (its names for type
    checkers are spelt under TYPE_CHECKING)."""
    result = run_python("import sys, json\nbefore = set(sys.modules)\nimport devshim\n"
                        "print(json.dumps(sorted(set(sys.modules) - before)))")
    assert result.returncode == 0, result.stderr
    assert set(json.loads(result.stdout)) <= {"devshim", "__future__"}


def test_using_devshim_imports_only_the_frameworks_it_needs():
    result = run_python(
        "import sys, json, devshim as ds\n"
        "ds.cpu(backend='numpy'); ds.available_backends(); ds.Device('gpu', 1) == 'cuda:1'\n"
        f"print(json.dumps([m for m in {FRAMEWORKS!r} if m in sys.modules and m != 'numpy']))"
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
    assert f"Valid names: {', '.join(backends.backend_names())}" in result.stdout


def test_the_environment_variable_is_read_when_first_needed_not_at_import():
    result = run_python(
        "import os, devshim as ds\n"
        "os.environ['DEVSHIM_BACKEND'] = 'numpy'\n"
        "print(ds.get_backend().name)",
        DEVSHIM_BACKEND="caffe",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "numpy"


# ------------------------------------------------------------ the table


def test_the_registry_is_built_from_each_backend_packages_row():
    table = backends.specs()
    assert {"torch", "tensorflow", "mxnet", "numpy"} <= set(table)
    for name, spec in table.items():
        assert isinstance(spec, BackendSpec) and spec.name == name
        assert spec.package == f"devshim.backends.{name}"
        package = __import__(spec.package, fromlist=["SPEC"])
        assert package.SPEC is spec


def test_backends_are_listed_in_auto_selection_order():
    ranks = [spec.auto_rank for spec in backends.specs().values()]
    ranked = [r for r in ranks if r is not None]
    assert ranks[:len(ranked)] == sorted(ranked)  # ranked ones first, in order; never-auto ones after


@pytest.mark.parametrize("alias,name", [
    ("torch", "torch"), ("pytorch", "torch"), ("PyTorch", "torch"), ("tensorflow", "tensorflow"),
    ("tf", "tensorflow"), ("mxnet", "mxnet"), ("mx", "mxnet"), ("numpy", "numpy"), (" numpy ", "numpy"),
])
def test_names_and_aliases(alias, name):
    assert backends.canonical_name(alias) == name


@pytest.mark.parametrize("bad", ["caffe", "", "torch2", "np"])
def test_unknown_names_list_the_valid_ones(bad):
    with pytest.raises(ds.BackendError, match=f"Valid names: {', '.join(backends.backend_names())}") as info:
        ds.set_backend(bad)
    assert isinstance(info.value, ValueError)
    assert "pytorch (torch)" in str(info.value)


def test_known_but_uninstalled_framework_names_the_pip_extra(monkeypatch):
    spec = backends.specs()["torch"]
    monkeypatch.setattr(BackendSpec, "is_installed", lambda self: self.name != "torch")
    with pytest.raises(ds.BackendError, match=r'pip install "devshim\[torch\]"'):
        ds.get_backend(spec.name)


def test_a_plugin_backend_registers_its_row_and_class():
    class Plugin(WithoutTensors, backends.Backend):
        spec = BackendSpec("plugin", import_name="json", title="A plug-in", auto_rank=None)

        def is_tensor(self, x):
            return False

        def is_native_device(self, obj):
            return False

        def accelerator_count(self):
            return 0

        def make_native_device(self, kind, index):
            return f"plugin-{kind}"

        def describe(self, native):
            return ds.Device("cpu", backend="plugin")

    backends.register_backend(Plugin.spec, Plugin)
    try:
        assert "plugin" in backends.backend_names()
        assert ds.cpu(backend="plugin") == "plugin-cpu"
        assert "plugin" in ds.available_backends()  # its import name, json, is always there
    finally:
        backends.unregister_backend("plugin")
    assert "plugin" not in backends.backend_names()


# ------------------------------------------------------------ selection


def test_selection_from_the_environment_variable(fresh_selection):
    fresh_selection("DEVSHIM_BACKEND", "numpy")
    assert ds.get_backend().name == "numpy"
    assert backends.selection_reason() == "DEVSHIM_BACKEND=numpy"


def test_reload_reads_a_changed_variable_but_keeps_set_backend(fresh_selection):
    fresh_selection("DEVSHIM_BACKEND", "numpy")
    assert ds.get_backend().name == "numpy"
    ds.set_backend("numpy")
    fresh_selection("DEVSHIM_BACKEND", "caffe")  # reloads settings
    assert backends.selection_reason() == "set_backend('numpy')"
    backends.reset_backend()
    with pytest.raises(ds.BackendError, match="caffe"):
        ds.get_backend()


def test_auto_selection_takes_the_first_installed_in_rank_order(fresh_selection, without_keras, monkeypatch):
    fresh_selection("DEVSHIM_BACKEND", None)
    installed = {"tensorflow", "mxnet", "numpy"}
    monkeypatch.setattr(BackendSpec, "is_installed", lambda self: self.name in installed)
    monkeypatch.setattr(selection, "instance", lambda name: f"<{name}>")
    adapter, reason = selection.select_default()
    assert adapter == "<tensorflow>" and "tensorflow is the first installed" in reason


def test_auto_selection_falls_back_to_numpy(fresh_selection, without_keras, monkeypatch):
    fresh_selection("DEVSHIM_BACKEND", None)
    monkeypatch.setattr(BackendSpec, "is_installed", lambda self: self.name == "numpy")
    assert ds.get_backend().name == "numpy"
    assert "numpy is the first installed" in backends.selection_reason()
    assert ds.available_backends() == ["numpy"]


def test_available_backends_lists_installed_ones_in_rank_order():
    names = ds.available_backends()
    assert names == [n for n, s in backends.specs().items() if s.is_installed()]
    assert "numpy" in names


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
    fresh_selection("DEVSHIM_BACKEND", "numpy")
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
    fresh_selection("DEVSHIM_BACKEND", "numpy")

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


# ------------------------------------------------------------ dispatch


def test_eight_threads_dispatching_for_the_first_time_at_once(fresh_selection, monkeypatch):
    """The first dispatch builds adapters and caches; racing threads must agree."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(registry, "_instances", {})
    backends.forget_types()
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
                    type(ds.neutral_device(x)).__name__,
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
    backends.forget_types()
    assert not errors
    for i, (name, device_type, adapter, identity, selected) in enumerate(results):
        assert name == ("torch" if i % 2 else "numpy")
        assert device_type == "Device" and identity and selected is adapter
    assert len({id(r[2]) for r in results}) == 2  # one adapter instance per backend


def test_tensors_dispatch_on_their_own_framework_whatever_is_selected():
    torch = pytest.importorskip("torch")
    with ds.use_backend("numpy"):
        d = ds.neutral_device(torch.ones(1))
        assert d.backend == "torch"
        assert isinstance(ds.to_device(torch.ones(1), "cpu"), torch.Tensor)
        assert ds.neutral_device(np.ones(1)).backend == "numpy"


def test_the_fast_paths_forget_resolved_devices_when_settings_change(setenv):
    x = np.ones(2)
    assert ds.copy_if_needed(x, "cpu") is x
    adapter = ds.get_backend("numpy")
    assert "cpu" in adapter._targets
    settings.reload()
    assert "cpu" not in adapter._targets
    assert ds.copy_if_needed(x, "cpu") is x


@pytest.mark.parametrize("kind", ["cpu", "nvidia", "mac"])
def test_install_hints_give_the_commands_the_readme_recommends_on_each_kind_of_machine(monkeypatch, kind):
    """devshim info and the not-installed errors name what the README recommends for this machine:
    PyTorch's CPU build and tensorflow-cpu without an NVIDIA GPU, the CUDA builds with one."""
    from pathlib import Path

    from devshim.backends import spec

    monkeypatch.setattr(spec, "machine_kind", lambda: kind)
    hints = {name: backends.specs()[name].install_hint() for name in ("torch", "tensorflow", "jax")}
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    if kind == "cpu":
        assert hints["torch"].startswith("pip install torch --index-url https://download.pytorch.org/whl/cpu")
        assert hints["tensorflow"].startswith("pip install tensorflow-cpu")
        assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in readme
        assert "tensorflow-cpu" in readme
    elif kind == "nvidia":
        assert hints["torch"].startswith("pip install torch,")  # its Linux wheel is the CUDA build
        assert hints["tensorflow"].startswith('pip install "tensorflow[and-cuda]"')
        assert hints["jax"].startswith('pip install "jax[cuda12]"')
    else:
        assert hints["torch"].startswith("pip install torch,") and hints["tensorflow"].startswith("pip install tensorflow,")
    assert all('"devshim[' in hint for hint in hints.values())
