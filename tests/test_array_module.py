"""ds.array_module (Chainer's get_array_module): CPU/GPU generic code on every backend."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

import devshim as ds
from devshim import generic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from generic_softplus import softplus  # noqa: E402

def module_of(harness):
    """The module ``ds.array_module`` answers for the harness's arrays (the harness says, in its
    framework's words); a skip where the framework has none."""
    module = harness.array_module()
    if module is None:
        with pytest.raises(ds.UnsupportedValueError):
            ds.array_module(harness.tensor([1.0]))
        pytest.skip(f"{harness.name} has no array module: ds.array_module refuses its arrays")
    return module


def test_each_framework_gets_its_array_module(harness):
    x = harness.tensor([1.0, 2.0])
    assert ds.array_module(x) is module_of(harness)
    assert ds.get_array_module is ds.array_module


def test_the_chainer_softplus_runs_on_every_backend_and_stays_on_the_device(harness):
    module_of(harness)
    values = [-1000.0, -1.0, 0.0, 1.0, 1000.0]
    x = harness.tensor(values, device=ds.try_gpu())
    # (TensorFlow runs ops on the scope's device, else its default one: docs/generic.md)
    y = harness.run_on(ds.neutral_device(x).native, lambda: softplus(x))
    assert ds.backends.backend_for_tensor(y).name == harness.name
    assert ds.neutral_device(y) == ds.neutral_device(x)
    np.testing.assert_allclose(ds.to_numpy(y), np.logaddexp(0.0, values), rtol=1e-6)


def test_numbers_and_none_are_ignored_and_no_array_means_numpy(harness):
    module_of(harness)
    x = harness.tensor([1.0])
    assert ds.array_module(3, None, x, 2.5) is ds.array_module(x)
    assert ds.array_module() is np and ds.array_module(1.0, None) is np


def test_arrays_of_two_frameworks_have_no_one_module(harness):
    if ds.backends.backend_for_tensor(np.ones(1)).name == harness.name:
        pytest.skip("needs a second framework next to NumPy")
    x = harness.tensor([1.0])
    with pytest.raises(ds.MixedArrayModulesError, match="several frameworks") as info:
        ds.array_module(x, np.ones(1))
    assert isinstance(info.value, TypeError) and "numpy.ndarray" in str(info.value)


def test_numpy_scalars_are_numpy():
    assert ds.array_module(np.float32(1.0), np.ones(2)) is np


def test_a_value_of_no_framework_is_ignored_like_a_number():
    assert ds.array_module([1.0, 2.0], "text", object()) is np


def test_jax_tracers_get_jax_numpy_so_generic_code_jits():
    jax = pytest.importorskip("jax")
    points = np.array([-1.0, 0.5, 3.0])  # not 0, where max and abs have no derivative
    x = jax.numpy.array(points)
    np.testing.assert_allclose(np.asarray(jax.jit(softplus)(x)), np.logaddexp(0.0, points), rtol=1e-6)
    sigmoid = 1.0 / (1.0 + np.exp(-points))  # softplus' derivative
    np.testing.assert_allclose(np.asarray(jax.grad(lambda t: softplus(t).sum())(x)), sigmoid, rtol=1e-6)


@pytest.mark.same_in_every_pass  # torch's own tensor, whichever backend is selected
def test_torch_without_array_api_compat_says_what_to_install(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setitem(sys.modules, "array_api_compat", None)  # import fails as if not installed
    monkeypatch.setattr(generic, "_module_for_type", {})
    with pytest.raises(ds.BackendError, match=r"pip install \"devshim\[torch\]\""):
        ds.array_module(torch.ones(1))


def test_torch_through_array_api_compat_takes_python_numbers():
    torch = pytest.importorskip("torch")
    if importlib.util.find_spec("array_api_compat") is None:
        pytest.skip("array-api-compat is not installed here")
    xp = ds.array_module(torch.ones(2))
    assert xp.maximum(0, torch.tensor([-1.0, 2.0])).tolist() == [0.0, 2.0]  # torch.maximum refuses 0


def test_classic_mxnet_ndarrays_have_no_array_module():
    mx = pytest.importorskip("mxnet")
    with pytest.raises(ds.UnsupportedValueError, match="as_np_ndarray"):
        ds.array_module(mx.nd.ones(2))
