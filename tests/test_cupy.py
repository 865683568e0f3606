"""The CuPy backend, and NumPy's accelerator partner.

CuPy has no CPU device of its own (its host arrays are NumPy's), so it has no conformance
harness; its own checks below need CuPy and a GPU and skip, saying so, without them. How NumPy
arrays reach a partner's GPU is the registry's business and is checked everywhere, with a
stand-in partner backend.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import devshim as ds
from devshim import backends
from devshim.backends import BackendSpec
from devshim._device import Device
from helpers import run_python

# ------------------------------------------------------------ NumPy's accelerator partner


class FakeGpu:
    """A stand-in partner's device object; like cupy.cuda.Device, it has an ``id``."""

    def __init__(self, index: int) -> None:
        self.id = index

    def __eq__(self, other):
        return isinstance(other, FakeGpu) and other.id == self.id

    def __hash__(self):
        return hash(("fakegpu", self.id))


class FakeGpuArray:
    """A stand-in partner's array: values in host memory, tagged with a FakeGpu."""

    def __init__(self, values: np.ndarray, device: FakeGpu) -> None:
        self.values, self.device = values, device


class FakeGpuBackend(backends.Backend):
    """Two GPUs whose host partner is NumPy, the way CuPy's is."""

    spec = BackendSpec("fakegpu", import_name=__name__, title="A stand-in GPU framework",
                       host_partner="numpy")
    copies = 0

    def is_tensor(self, x):
        return isinstance(x, FakeGpuArray)

    def is_native_device(self, obj):
        return isinstance(obj, FakeGpu)

    def accelerator_count(self):
        return 2

    def make_native_device(self, kind, index):
        return "cpu" if kind == "cpu" else FakeGpu(index)

    def describe(self, native):
        if isinstance(native, FakeGpu):
            return Device("gpu", native.id, native=native, backend="fakegpu")
        return Device("cpu", native="cpu", backend="fakegpu")

    def tensor_device(self, x):
        return self.describe(x.device)

    def copy_to(self, x, native, non_blocking):
        FakeGpuBackend.copies += 1
        values = x.values if isinstance(x, FakeGpuArray) else x
        if native == "cpu":
            return values.copy()
        return FakeGpuArray(np.array(values, copy=True), native)

    def tensor_to_numpy(self, x):
        return x.values.copy()


@pytest.fixture
def partner(monkeypatch, setenv):
    """Register the stand-in partner (ahead of a real CuPy, if one is installed) for one test."""
    setenv(ds.settings.VIRTUAL_DEVICES_VAR, None)  # NumPy refuses virtual devices
    backends.register_backend(FakeGpuBackend.spec, FakeGpuBackend)
    real = backends.specs().get("cupy")
    if real is not None:
        monkeypatch.setattr(real, "host_partner", None)
    yield backends.get_backend("fakegpu")
    backends.unregister_backend("fakegpu")


def test_the_registry_names_numpys_accelerator_partner(partner):
    assert backends.accelerator_partner("numpy") is partner
    assert backends.accelerator_partner("torch") is None


def test_a_numpy_array_sent_to_a_gpu_becomes_the_partners_array(partner):
    """Under the numpy backend a GPU spec is the partner's GPU (Chainer's to_gpu); the partner's own
    device object is its GPU under any backend."""
    x = np.arange(3.0)
    with ds.use_backend("numpy"):
        specs = ["gpu:1", "cuda:1", ds.Device("gpu", 1)]
    for spec in [*specs, FakeGpu(1)]:
        with ds.use_backend("numpy" if spec in specs else "fakegpu"):
            y = ds.to_device(x, spec)

        assert isinstance(y, FakeGpuArray) and y.device == FakeGpu(1)
        assert str(ds.neutral_device(y)) == "gpu:1" and not np.shares_memory(y.values, x)
        np.testing.assert_array_equal(y.values, x)
    back = ds.to_device(ds.to_device(x, FakeGpu(0)), "cpu")
    assert isinstance(back, np.ndarray) and ds.neutral_device(back) == "cpu"


def test_copy_if_needed_moves_numpy_arrays_only_to_a_gpu(partner):
    with ds.use_backend("numpy"):  # a GPU spec is the partner's under the numpy backend
        x = np.ones(2)
        assert ds.copy_if_needed(x, "cpu") is x
        moved = ds.copy_if_needed(x, "gpu:0")
        assert isinstance(moved, FakeGpuArray) and moved.device == FakeGpu(0)
        batch = {"x": x, "label": "a", "n": 3}
        assert ds.copy_if_needed(batch, "cpu") is batch
        placed = ds.to_device(batch, "gpu:1")
        assert isinstance(placed["x"], FakeGpuArray) and placed["label"] == "a" and placed["n"] == 3
        assert isinstance(ds.copy_if_needed([x], "gpu:1")[0], FakeGpuArray)


def test_numpy_itself_stays_host_only(partner):
    with pytest.raises(ds.DeviceUnavailableError, match="numpy backend sees 0 GPUs"):
        ds.gpu(backend="numpy")
    with pytest.raises(ds.DeviceUnavailableError):
        ds.device("gpu:0", backend="numpy")
    assert ds.num_gpus(backend="numpy") == 0
    with pytest.raises(ds.DeviceUnavailableError, match="meta"):
        ds.to_device(np.ones(1), "meta")


def test_a_gpu_the_partner_lacks_is_unavailable_with_the_partners_count(partner):
    with ds.use_backend("numpy"), pytest.raises(ds.DeviceUnavailableError, match="fakegpu backend sees 2 GPUs"):
        ds.to_device(np.ones(1), "gpu:2")


def test_without_a_partner_numpy_says_how_to_get_one(monkeypatch, setenv):
    setenv(ds.settings.VIRTUAL_DEVICES_VAR, None)
    installed = BackendSpec.is_installed
    monkeypatch.setattr(BackendSpec, "is_installed", lambda spec: spec.name != "cupy" and installed(spec))  # CuPy absent
    with ds.use_backend("numpy"):
        with pytest.raises(ds.DeviceUnavailableError, match=r"Install CuPy \(pip install cupy-cuda12x, or pip install \"devshim\[cupy\]\" where devshim is installed\)"):
            ds.to_device(np.ones(1), "gpu:0")
        with pytest.raises(ds.DeviceUnavailableError, match="NumPy has no GPU"):
            ds.copy_if_needed({"x": np.ones(1)}, "gpu")


# ------------------------------------------------------------ CuPy missing or without a GPU


def test_devshim_info_says_when_cupy_is_missing_or_sees_no_gpu():
    result = run_python("", "-m", "devshim", "info", "--json", DEVSHIM_BACKEND="numpy")
    assert result.returncode == 0, result.stderr
    entry = next(fw for fw in json.loads(result.stdout)["frameworks"] if fw["name"] == "cupy")
    assert entry["capabilities"]["devices"] and entry["capabilities"]["ops"]
    assert entry["capabilities"]["virtual devices"] is False
    if not backends.specs()["cupy"].is_installed():
        assert entry["status"] == 'not installed (pip install cupy-cuda12x, or pip install "devshim[cupy]" where devshim is installed)'
    elif entry["status"] == "ok" and len(entry["devices"]) == 1:
        assert "CuPy sees no GPU" in entry["devices"][0]["name"]


def _cupy_with_a_gpu():
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed here (pip install \"devshim[cupy]\")")
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError as err:
        pytest.skip(f"CuPy sees no GPU here: {err}")
    if not count:
        pytest.skip("CuPy sees no GPU here")
    return cupy


@pytest.fixture
def cupy():
    module = _cupy_with_a_gpu()
    with ds.use_backend("cupy"):
        yield module


# ------------------------------------------------------------ CuPy on a GPU


def test_cupy_devices_are_cupy_devices_and_with_blocks(cupy):
    assert isinstance(ds.gpu(0), cupy.cuda.Device) and ds.cpu() == "cpu"
    with ds.try_gpu():
        x = cupy.ones((2, 3))
    assert ds.neutral_device(x) == "gpu:0" and ds.neutral_device(x).native.id == 0
    assert ds.num_gpus() == cupy.cuda.runtime.getDeviceCount()


def test_to_device_cpu_gives_numpy_and_numpy_to_gpu_gives_cupy(cupy):
    x = cupy.arange(4.0)
    host = ds.to_device(x, "cpu")
    assert isinstance(host, np.ndarray) and ds.neutral_device(host) == "cpu"
    np.testing.assert_array_equal(host, [0.0, 1.0, 2.0, 3.0])
    back = ds.to_device(host, "gpu:0")
    assert isinstance(back, cupy.ndarray) and back.device.id == 0
    assert ds.copy_if_needed(x, "cpu") is not x and isinstance(ds.copy_if_needed(x, "cpu"), np.ndarray)


def test_the_cupy_backends_host_arrays_are_numpy_arrays_it_reads_as_its_own(cupy):
    """ds.cpu() under the cupy backend is NumPy's host: the arrays made there are NumPy arrays, which
    the backend copies to the host like its own (bench convert --backend all read one so)."""
    adapter = ds.get_backend()
    host = adapter.spec.module("ops").rand((4,), ds.cpu())
    assert type(host) is np.ndarray
    copied = adapter.tensor_to_numpy(host)
    assert type(copied) is np.ndarray and not np.shares_memory(copied, host)
    np.testing.assert_array_equal(copied, host)


def test_cupy_copies_are_new_memory_and_copy_if_needed_keeps_what_is_there(cupy):
    x = cupy.arange(4.0)
    y = ds.to_device(x, ds.gpu(0))
    assert y.data.ptr != x.data.ptr and y.device.id == 0
    y[0] = 9.0
    assert float(x[0]) == 0.0
    assert ds.copy_if_needed(x, "gpu:0") is x
    assert np.array_equal(ds.to_numpy(x), [0.0, 1.0, 2.0, 3.0])


def test_numpy_arrays_go_to_the_gpu_named(cupy):
    last = ds.num_gpus() - 1
    y = ds.to_device(np.ones(3), f"gpu:{last}")
    assert isinstance(y, cupy.ndarray) and y.device.id == last


def test_the_d2l_flow_on_two_gpus(cupy):
    if ds.num_gpus() < 2:
        pytest.skip("needs two GPUs")
    with ds.try_gpu():
        X = cupy.ones((2, 3))
    with ds.try_gpu(1):
        Y = cupy.full((2, 3), 2.0)
    Z = ds.to_device(X, ds.try_gpu(1))
    assert ds.same_device(Y, Z) and not ds.same_device(X, Y)
    with ds.try_gpu(1):
        np.testing.assert_array_equal(ds.to_numpy(Y + Z), np.full((2, 3), 3.0))
    assert ds.copy_if_needed(Z, ds.try_gpu(1)) is Z


def test_array_module_of_cupy_and_numpy_is_cupy(cupy):
    x = cupy.ones(2)
    assert ds.array_module(x) is cupy and ds.array_module(np.ones(2), x) is cupy


def test_numba_device_arrays_are_recognised_through_the_cuda_array_interface(cupy):
    numba_cuda = pytest.importorskip("numba.cuda", reason="Numba is not installed here")
    d = numba_cuda.to_device(np.arange(3.0))
    assert ds.neutral_device(d) == "gpu:0"
    np.testing.assert_array_equal(ds.to_numpy(d), [0.0, 1.0, 2.0])
    moved = ds.to_device(d, "gpu:0")
    assert isinstance(moved, cupy.ndarray) and moved.data.ptr != d.__cuda_array_interface__["data"][0]
    assert ds.copy_if_needed(d, "gpu:0") is d
