"""Conformance: device functions, run against every installed adapter."""

from __future__ import annotations

import pickle

import pytest

import devshim as ds
from devshim.device import parse_spec


def test_cpu_is_accepted_by_the_framework(harness):
    x = harness.tensor([1.0, 2.0], device=ds.cpu())
    assert ds.device_of(x) == "cpu"
    assert ds.device_of(x).kind == "cpu"


def test_try_gpu_is_accepted_by_the_framework(harness):
    x = harness.tensor([1.0, 2.0], device=ds.try_gpu())
    expected = "gpu:0" if ds.num_gpus() else "cpu"
    assert ds.device_of(x) == expected


def test_try_all_gpus_is_never_empty(harness):
    found = ds.try_all_gpus()
    if ds.num_gpus() == 0:
        assert found == [ds.cpu()]
    else:
        assert len(found) == ds.num_gpus()
        assert [str(ds.Device("gpu", i)) for i in range(ds.num_gpus())] == [
            str(ds.device_of(harness.tensor([0.0], device=d))) for d in found
        ]


def test_devices_lists_cpu_first_then_each_gpu(harness):
    found = ds.devices()
    assert len(found) == 1 + ds.num_gpus()
    assert ds.device_of(harness.tensor([0.0], device=found[0])) == "cpu"


def test_gpu_beyond_the_count_raises_with_the_count(harness):
    n = ds.num_gpus()
    with pytest.raises(ds.DeviceUnavailableError, match=f"sees {n} GPU"):
        ds.gpu(n)


def test_try_gpu_beyond_the_count_falls_back_to_cpu(harness):
    assert ds.try_gpu(ds.num_gpus() + 5) == ds.cpu()


@pytest.mark.parametrize("bad", [-1, 1.5, "1", None, True])
def test_gpu_index_must_be_a_non_negative_int(harness, bad):
    with pytest.raises(ds.InvalidDeviceError, match="non-negative int"):
        ds.gpu(bad)
    with pytest.raises(ds.InvalidDeviceError):
        ds.try_gpu(bad)


def test_devshim_device_cpu_hides_accelerators(harness, monkeypatch):
    monkeypatch.setenv("DEVSHIM_DEVICE", "cpu")
    assert ds.num_gpus() == 0
    assert ds.try_gpu() == ds.cpu()
    assert ds.try_all_gpus() == [ds.cpu()]
    with pytest.raises(ds.DeviceUnavailableError, match="DEVSHIM_DEVICE=cpu"):
        ds.gpu(0)


def test_devshim_device_with_a_bad_value_says_what_works(harness, monkeypatch):
    monkeypatch.setenv("DEVSHIM_DEVICE", "tpu")
    with pytest.raises(ds.InvalidDeviceError, match="DEVSHIM_DEVICE=cpu"):
        ds.num_gpus()


def test_backend_keyword_overrides_the_selection(harness):
    assert ds.num_gpus(backend=harness.name) == ds.get_backend().num_gpus()
    assert ds.cpu(backend=harness.name) == ds.cpu()


@pytest.mark.parametrize("spec", ["cpu", "CPU", "cpu:0", "/CPU:0", "cpu(0)", "/job:localhost/replica:0/task:0/device:CPU:0"])
def test_device_reads_cpu_specs(harness, spec):
    assert ds.device(spec) == ds.cpu()


def test_device_accepts_native_and_neutral_devices(harness):
    native = ds.cpu()
    assert ds.device(native) == native
    assert ds.device(ds.Device("cpu")) == native
    x = harness.tensor([1.0], device=ds.device(ds.device_of(harness.tensor([0.0]))))
    assert ds.device_of(x) == "cpu"


@pytest.mark.parametrize("spec", ["gpu", "gpu:0", "cuda", "cuda:3", "gpu(2)", "/GPU:1"])
def test_device_for_absent_gpus_raises_unavailable(harness, spec):
    if parse_spec(spec).index < ds.num_gpus():
        pytest.skip(f"{spec} exists here")
    with pytest.raises(ds.DeviceUnavailableError):
        ds.device(spec)


@pytest.mark.parametrize("spec", ["tpu", "gpu:-1", "gpu:x", "", "cuda:0:1", "gpu 1", 42, 1.5, None, object()])
def test_device_rejects_unreadable_specs_listing_accepted_forms(harness, spec):
    with pytest.raises(ds.InvalidDeviceError, match="Accepted forms"):
        ds.device(spec)


def test_device_of_a_tensor_is_neutral_and_comparable(harness):
    x = harness.tensor([1.0, 2.0])
    d = ds.device_of(x)
    assert isinstance(d, ds.Device)
    assert (d.kind, d.index, str(d), d.backend, d.virtual) == ("cpu", 0, "cpu:0", harness.name, False)
    assert d == ds.cpu() and d == "cpu" and d == "cpu:0" and d == ds.Device("cpu", 0)
    assert d != "gpu:0" and d != ds.Device("gpu", 0) and d != "not a device"
    assert hash(d) == hash(ds.Device("cpu", 0))
    assert {d: 1}[ds.Device("cpu")] == 1
    assert ds.device_of(harness.tensor([0], device=d.native)) == d


def test_device_pickles_as_its_neutral_description(harness):
    d = ds.device_of(harness.tensor([1.0]))
    restored = pickle.loads(pickle.dumps(d))
    assert restored == d and restored.backend == harness.name and restored.native is None


@pytest.mark.parametrize("value", [3, 2.5, "cpu", None, [1, 2], object()])
def test_device_of_a_non_tensor_raises_not_a_tensor(harness, value):
    with pytest.raises(ds.NotATensorError, match="expects a tensor") as info:
        ds.device_of(value)
    assert isinstance(info.value, TypeError)
