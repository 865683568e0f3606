"""A NumPy array sent to a device: one behaviour on every machine (docs/tensors.md has the table).

NumPy has no GPU. Sent to a framework's own device object (``ds.cpu()``, ``ds.try_gpu()``, a
``torch.device``...), on the CPU as on a GPU, a NumPy array becomes that framework's tensor there,
in new storage; sent to a GPU spec ("gpu:1"), the selected backend's tensor there (CuPy's under
the numpy and cupy backends); host specs keep it a NumPy array. So code that sends NumPy batches to
``ds.try_gpu()`` gets the same kind of result on a CPU box, on virtual GPUs and on a real GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

import devshim as ds
from devshim_conformance import gpus_reachable, require_module

#: Why a NumPy array cannot land on a backend without interop.py (it refuses, naming the module).
LANDING = "a NumPy array becomes its tensor through interop.from_host"


def framework_of(value) -> str:
    return ds.backends.backend_for_tensor(value).name


def gpu_framework(harness) -> str:
    """Whose tensor a NumPy array becomes on a GPU spec under the harness's backend: its accelerator
    partner's where it has one (NumPy's: CuPy), else its own."""
    partner = ds.backends.accelerator_partner(harness.name)
    return harness.name if partner is None else partner.name


def test_host_specs_keep_a_numpy_array_and_copy_it(harness):
    a = np.arange(3.0)
    for spec in ("cpu", "cpu:0"):
        moved = ds.to_device(a, spec)
        assert type(moved) is np.ndarray and moved is not a and not np.shares_memory(moved, a)
        assert ds.copy_if_needed(a, spec) is a


def test_a_frameworks_own_devices_make_its_tensors_on_the_cpu_as_on_a_gpu(harness):
    require_module(harness.name, "interop", LANDING)
    a = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    for device in {str(d): d for d in (ds.cpu(), ds.try_gpu(), ds.try_gpu(1))}.values():
        for send in (ds.to_device, ds.copy_if_needed):
            moved = send(a, device)
            expected = "numpy" if type(device) is str and device == "cpu" else harness.name  # a host spec
            assert framework_of(moved) == expected, (send.__name__, device)
            assert ds.neutral_device(moved) == ds.backends.describe_native_device(device) or device == "cpu"
            np.testing.assert_array_equal(ds.to_numpy(moved), a)
            assert str(harness.dtype_name(moved)) == "float32" if expected == harness.name else True
    a[0, 0] = 100.0  # the copies are new storage: the array's later changes stay its own
    assert ds.to_numpy(ds.to_device(a, ds.cpu()))[0, 0] == 100.0


def test_gpu_specs_name_the_selected_backends_gpu(harness):
    a = np.ones(4, dtype=np.float32)
    reachable = gpus_reachable(harness.name)
    if reachable:
        require_module(gpu_framework(harness), "interop", LANDING)
    for index in range(min(reachable, 2)):
        moved = ds.to_device(a, f"gpu:{index}")
        assert framework_of(moved) == gpu_framework(harness)
        assert str(ds.neutral_device(moved)) == f"gpu:{index}"
        np.testing.assert_array_equal(ds.to_numpy(moved), a)
    with pytest.raises(ds.DeviceUnavailableError, match=f"gpu:{reachable}"):
        ds.to_device(a, f"gpu:{reachable}")
    if framework_of(a) == harness.name and not reachable:  # the harness's framework is NumPy itself
        with pytest.raises(ds.DeviceUnavailableError, match="NumPy has no GPU"):
            ds.to_device(a, "gpu:0")


def test_numpy_leaves_of_a_nest_land_with_the_frameworks_tensors(harness):
    require_module(harness.name, "interop", LANDING)
    nest = {"x": harness.tensor([1.0, 2.0]), "ids": np.arange(2), "meta": "kept"}
    moved = ds.to_device(nest, ds.try_gpu())
    assert moved["meta"] == "kept"
    assert ds.same_device(moved["x"], moved["ids"])
    assert framework_of(moved["ids"]) == framework_of(moved["x"])
    skipped = ds.to_device(nest, ds.try_gpu(), skip_keys="ids")
    assert skipped["ids"] is nest["ids"]


def test_numpy_arrays_sent_to_devices_are_explicit_copies_under_the_guard(harness):
    require_module(harness.name, "interop", LANDING)
    a = np.arange(3.0)
    with ds.transfer_guard("disallow") as report:
        ds.to_device(a, ds.try_gpu())
        ds.copy_if_needed({"a": a}, ds.try_gpu(1))
    assert report.total == 0
