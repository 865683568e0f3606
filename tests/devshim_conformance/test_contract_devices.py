"""Conformance: device functions, run against every installed adapter."""

from __future__ import annotations

import copy
import pickle

import pytest

import devshim as ds
from devshim._device import parse_spec


def test_cpu_is_accepted_by_the_framework(harness):
    x = harness.tensor([1.0, 2.0], device=ds.cpu())
    assert ds.neutral_device(x) == "cpu"
    assert ds.neutral_device(x).kind == "cpu"


def test_try_gpu_is_accepted_by_the_framework(harness):
    x = harness.tensor([1.0, 2.0], device=ds.try_gpu())
    expected = "gpu:0" if ds.num_gpus() else "cpu"
    assert ds.neutral_device(x) == expected


def test_try_all_gpus_is_never_empty(harness):
    found = ds.try_all_gpus()
    if ds.num_gpus() == 0:
        assert found == [ds.cpu()]
    else:
        assert len(found) == ds.num_gpus()
        assert [str(ds.Device("gpu", i)) for i in range(ds.num_gpus())] == [
            str(ds.neutral_device(harness.tensor([0.0], device=d))) for d in found
        ]


def test_devices_lists_cpu_first_then_each_gpu(harness):
    found = ds.devices()
    assert len(found) == 1 + ds.num_gpus()
    assert ds.neutral_device(harness.tensor([0.0], device=found[0])) == "cpu"


def test_gpu_beyond_the_count_raises_with_the_count(harness):
    n = ds.num_gpus()
    with pytest.raises(ds.DeviceUnavailableError, match=f"sees {n} GPU"):
        ds.gpu(n)


def test_try_gpu_beyond_the_count_falls_back_to_cpu(harness):
    assert ds.try_gpu(ds.num_gpus() + 5) == ds.cpu()


@pytest.mark.parametrize("bad", [-1, 1.5, "1", True])
def test_gpu_index_must_be_a_non_negative_int(harness, bad):
    with pytest.raises(ds.InvalidDeviceError, match="non-negative int"):
        ds.gpu(bad)
    with pytest.raises(ds.InvalidDeviceError):
        ds.try_gpu(bad)


def test_no_index_is_this_process_s_gpu_which_is_gpu_0_without_a_launcher(harness):
    # (tests/test_launcher.py checks the rule under each launcher)
    assert ds.try_gpu(None) == ds.try_gpu() == ds.try_gpu(0)
    if ds.num_gpus():
        assert ds.gpu(None) == ds.gpu() == ds.gpu(0)


def test_devshim_device_cpu_hides_accelerators(harness, setenv):
    setenv("DEVSHIM_DEVICE", "cpu")
    assert ds.num_gpus() == 0
    assert ds.try_gpu() == ds.cpu()
    assert ds.try_all_gpus() == [ds.cpu()]
    with pytest.raises(ds.DeviceUnavailableError, match="DEVSHIM_DEVICE=cpu"):
        ds.gpu(0)


def test_devshim_device_with_a_bad_value_says_what_works(harness, setenv):
    setenv("DEVSHIM_DEVICE", "tpu")
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
    x = harness.tensor([1.0], device=ds.device(ds.neutral_device(harness.tensor([0.0]))))
    assert ds.neutral_device(x) == "cpu"


@pytest.mark.parametrize("spec", ["gpu", "gpu:0", "cuda", "cuda:3", "gpu(2)", "/GPU:1", "tpu:0", "xpu:5"])
def test_device_for_absent_gpus_raises_unavailable(harness, spec):
    if parse_spec(spec).index < ds.num_gpus():
        pytest.skip(f"{spec} exists here")
    with pytest.raises(ds.DeviceUnavailableError):
        ds.device(spec)


def test_a_native_gpu_the_machine_lacks_is_unavailable_even_with_virtual_devices(harness):
    """A native GPU object names real hardware: virtual GPUs never stand in for it."""
    real = ds.get_backend().accelerator_count()
    native = harness.real_gpu(real)
    if native is None:
        pytest.skip(f"{harness.name} has no GPU device objects")
    with pytest.raises(ds.DeviceUnavailableError, match="real GPU"):
        ds.device(native)
    with pytest.raises(ds.DeviceUnavailableError):
        ds.to_device(harness.tensor([1.0]), native)


def test_meta_is_a_data_less_device_where_the_backend_has_one(harness):
    if not harness.has_meta:
        with pytest.raises(ds.DeviceUnavailableError, match="meta"):
            ds.device("meta")
        return
    x = harness.tensor([1.0, 2.0], device=ds.device("meta"))
    d = ds.neutral_device(x)
    assert (d.kind, str(d)) == ("meta", "meta:0") and d == "meta"
    assert ds.same_device(x, ds.to_device(harness.tensor([3.0]), "meta"))
    assert not ds.same_device(x, harness.tensor([1.0]))
    with pytest.raises(ds.DeviceMismatchError, match="meta:0"):
        ds.ensure_same_device(x, harness.tensor([1.0]))
    for copy_out in (lambda: ds.to_numpy(x), lambda: ds.to_device(x, ds.cpu()),
                     lambda: ds.copy_if_needed(x, "cpu")):
        with pytest.raises(ds.DatalessTensorError, match="no data|nothing to"):
            copy_out()


@pytest.mark.parametrize("spec", ["banana", "gpu:-1", "gpu:x", "", "cuda:0:1", "gpu 1", "xla:0", 42, 1.5, None, object()])
def test_device_rejects_unreadable_specs_listing_accepted_forms(harness, spec):
    with pytest.raises(ds.InvalidDeviceError, match="Accepted forms"):
        ds.device(spec)


def test_device_of_a_tensor_is_neutral_and_comparable(harness):
    x = harness.tensor([1.0, 2.0])
    d = ds.neutral_device(x)
    assert isinstance(d, ds.Device)
    assert (d.kind, d.index, str(d), d.backend, d.virtual) == ("cpu", 0, "cpu:0", harness.name, False)
    assert d == ds.cpu() and d == "cpu" and d == "cpu:0" and d == ds.Device("cpu", 0)
    assert d != "gpu:0" and d != ds.Device("gpu", 0) and d != "not a device"
    assert hash(d) == hash(ds.Device("cpu", 0)) == hash("cpu:0")
    assert {d: 1}[ds.Device("cpu")] == 1 and {"cpu:0": 1}[d] == 1 and {d: 1}["cpu:0"] == 1
    assert ds.neutral_device(harness.tensor([0], device=d.native)) == d


def test_a_nest_without_tensors_still_checks_the_device(harness):
    for fn in (ds.to_device, ds.copy_if_needed):
        with pytest.raises(ds.InvalidDeviceError, match="Accepted forms"):
            fn([], "banana")
        with pytest.raises(ds.DeviceUnavailableError):
            fn({"n": 3}, f"gpu:{ds.num_gpus() + 7}")


def test_specs_given_as_str_subclasses_are_specs(harness):
    np = pytest.importorskip("numpy")
    assert ds.device(np.str_("cpu")) == ds.cpu()
    assert ds.neutral_device(ds.to_device(harness.tensor([1.0]), np.str_("cpu:0"))) == "cpu"


def test_device_pickles_and_gets_its_native_device_back_from_the_backend(harness):
    d = ds.neutral_device(harness.tensor([1.0]))
    restored = pickle.loads(pickle.dumps(d))
    assert restored == d and restored.backend == harness.name and restored is not d
    assert restored.native == d.native
    assert ds.neutral_device(harness.tensor([0.0], device=restored.native)) == d
    assert copy.copy(d) is d and copy.deepcopy(d) is d


@pytest.mark.parametrize("value", [3, 2.5, "cpu", None, [1, 2], object()])
def test_device_of_a_non_tensor_raises_not_a_tensor(harness, value):
    with pytest.raises(ds.NotATensorError, match="expects a tensor") as info:
        ds.neutral_device(value)
    assert isinstance(info.value, TypeError)
