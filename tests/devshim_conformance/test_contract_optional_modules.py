"""Conformance: only `core.py` is required of a backend. Without a capability module it works,
and what needs the module refuses, naming it (docs/adapters.md, "Every rule a backend meets")."""

from __future__ import annotations

import numpy as np
import pytest

import devshim as ds


def lacks(harness, module: str) -> None:
    if ds.backends.specs()[harness.name].has_module(module):
        pytest.skip(f"{harness.name} has {module}.py: the suite's other tests check what it does")


def test_without_interop_numpy_arrays_conversion_and_gradient_checks_refuse_naming_it(harness):
    lacks(harness, "interop")
    x = harness.tensor([1.0, 2.0])
    with pytest.raises(ds.BackendError, match=r"has no interop\.py, so a NumPy array cannot become its tensor"):
        ds.to_device(np.ones(2, dtype=np.float32), ds.cpu())
    with pytest.raises(ds.BackendError, match=r"has no interop\.py, so ds\.convert cannot"):
        ds.convert(x, "numpy")
    with pytest.raises(ds.GradientCheckUsageError, match=r"no interop\.py"):
        ds.testing.numerical_grad(lambda v: v * v, (x,), (np.ones(2),))
    assert ds.backends.interop(harness.name) is None
    np.testing.assert_array_equal(ds.to_numpy(ds.to_device(x, ds.devices()[-1])), [1.0, 2.0])  # its own copies work


def test_without_memory_ds_memory_gives_the_hosts_figures_and_no_error_is_out_of_memory(harness):
    lacks(harness, "memory")
    for device in ds.devices():
        info = ds.memory(device)
        assert info.device == ds.device(device)
        if info.device.kind == "cpu":  # the host's figures, whichever framework asks
            assert info.in_use is not None and info.in_use > 0
    contract = ds.backends.memory(harness.name)
    assert not contract.is_out_of_memory(MemoryError()) and not contract.is_out_of_memory(RuntimeError("out of memory"))
