"""What is specific to the torch adapter: accelerator platforms, dtypes NumPy lacks, Parameters."""

from __future__ import annotations

import numpy as np
import pytest

import devshim as ds

torch = pytest.importorskip("torch")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA/ROCm GPU")
needs_two_cuda = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two CUDA GPUs"
)


@pytest.fixture
def bk():
    with ds.use_backend("torch") as adapter:
        yield adapter


@pytest.fixture
def fake_mps(bk, monkeypatch):
    """Make this torch build look like an Apple machine with MPS and no CUDA."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    return bk


def test_mps_counts_as_the_gpu(fake_mps):
    assert ds.num_gpus() == 1
    assert ds.try_gpu() == torch.device("mps", 0)
    assert ds.try_all_gpus() == [torch.device("mps", 0)]
    assert ds.device("gpu") == torch.device("mps", 0)
    assert ds.device("mps") == torch.device("mps", 0)
    mps_device = fake_mps.describe(torch.device("mps"))
    assert (mps_device.kind, mps_device.index, mps_device.platform) == ("gpu", 0, "mps")


def test_naming_the_wrong_platform_says_to_write_gpu(fake_mps):
    with pytest.raises(ds.DeviceUnavailableError, match="'gpu'"):
        ds.device("cuda:0")


def test_devshim_device_cpu_hides_mps_too(fake_mps, monkeypatch):
    monkeypatch.setenv("DEVSHIM_DEVICE", "cpu")
    assert ds.num_gpus() == 0 and ds.try_gpu() == torch.device("cpu")


def test_cuda_counts_come_from_torch_cuda(bk, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    assert ds.num_gpus() == 3
    assert ds.try_gpu(2) == torch.device("cuda", 2)
    assert ds.try_gpu(3) == torch.device("cpu")
    assert ds.try_all_gpus() == [torch.device("cuda", i) for i in range(3)]
    with pytest.raises(ds.DeviceUnavailableError, match="sees 3 GPUs"):
        ds.gpu(3)


def test_native_torch_devices_describe_to_neutral_ones(bk):
    assert ds.Device("cpu") == torch.device("cpu")
    assert torch.device("cpu") == ds.device_of(torch.ones(1))
    assert ds.Device("gpu", 1) == torch.device("cuda", 1)
    assert ds.Device("gpu", 1) != torch.device("cuda", 0)


def test_unsupported_torch_device_types_say_what_is_handled(bk):
    with pytest.raises(ds.InvalidDeviceError, match="cpu, cuda and mps"):
        ds.device_of(torch.ones(1, device="meta"))


def test_torch_devices_work_for_numpy_arrays_on_the_same_hardware():
    moved = ds.to_device(np.arange(3), torch.device("cpu"))
    assert isinstance(moved, np.ndarray)
    with pytest.raises(ds.DeviceUnavailableError, match="numpy backend sees 0 GPUs"):
        ds.to_device(np.arange(3), ds.Device("gpu", 0))


def test_mixed_framework_nests_move_leaf_by_leaf():
    t, a = torch.arange(3), np.arange(3)
    moved = ds.to_device({"t": t, "a": a}, "cpu")
    assert isinstance(moved["t"], torch.Tensor) and isinstance(moved["a"], np.ndarray)
    assert moved["t"] is not t and moved["a"] is not a
    assert ds.same_device(t, a)
    assert ds.ensure_same_device(t, a) == "cpu"


def test_parameters_copy_as_tensors_with_gradient(bk):
    layer = torch.nn.Linear(2, 1)
    weight = ds.to_device(layer.weight, "cpu")
    assert ds.copy_if_needed(layer.weight, "cpu") is layer.weight
    weight.sum().backward()
    assert torch.equal(layer.weight.grad, torch.ones(1, 2))


def test_to_numpy_keeps_bfloat16_exactly_through_ml_dtypes(bk):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = torch.tensor([1.5, -2.25, float("inf")], dtype=torch.bfloat16)
    host = ds.to_numpy(x)
    assert host.dtype == ml_dtypes.bfloat16
    assert host.view(np.int16).tobytes() == x.view(torch.int16).numpy().tobytes()


def test_to_numpy_of_conjugate_and_grad_tensors(bk):
    z = torch.tensor([1 + 2j]).conj()
    np.testing.assert_array_equal(ds.to_numpy(z), [1 - 2j])
    w = torch.ones(2, requires_grad=True)
    np.testing.assert_array_equal(ds.to_numpy(w * 2), [2.0, 2.0])


def test_non_blocking_is_accepted(bk):
    x = torch.ones(4)
    y = ds.to_device(x, ds.try_gpu(), non_blocking=True)
    ds.get_backend().synchronize(None)
    assert torch.equal(y.cpu(), x)


def test_virtual_devices_are_refused_naming_the_backends_that_can(bk, monkeypatch):
    monkeypatch.setenv("DEVSHIM_VIRTUAL_DEVICES", "2")
    with pytest.raises(ds.BackendError, match="cannot present virtual devices") as info:
        ds.num_gpus()
    assert "DEVSHIM_VIRTUAL_DEVICES" in str(info.value)


@needs_cuda
def test_on_a_real_gpu_to_device_and_back(bk):
    x = torch.arange(6.0).reshape(2, 3)
    g = ds.to_device(x, ds.try_gpu())
    assert g.is_cuda and ds.device_of(g) == "gpu:0" and ds.device_of(g) == "cuda:0"
    assert ds.copy_if_needed(g, "gpu") is g and ds.copy_if_needed(g, "cuda") is g
    assert ds.copy_if_needed(g, torch.device("cuda")) is g
    np.testing.assert_array_equal(ds.to_numpy(g), x.numpy())
    assert not ds.same_device(x, g)
    with pytest.raises(ds.DeviceMismatchError):
        ds.ensure_same_device(x, g)


@needs_two_cuda
def test_on_two_real_gpus(bk):
    X = torch.ones(2, 3, device=ds.try_gpu())
    Y = torch.rand(2, 3, device=ds.try_gpu(1))
    Z = ds.to_device(X, ds.try_gpu(1))
    assert ds.same_device(Y, Z) and torch.equal((Y + Z).cpu(), Y.cpu() + 1)
    assert ds.copy_if_needed(Z, ds.try_gpu(1)) is Z
