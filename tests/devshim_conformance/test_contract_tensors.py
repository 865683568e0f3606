"""Conformance: to_device, copy_if_needed, same_device, ensure_same_device, to_numpy."""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

import numpy as np
import pytest

import devshim as ds
from devshim_conformance import gpus_reachable

Pair = collections.namedtuple("Pair", "first second")


@dataclasses.dataclass
class Batch:
    x: Any
    label: str
    extra: Any = None


# ------------------------------------------------------------ to_device


def test_to_device_copies_even_when_already_there(harness):
    x = harness.tensor([1.0, 2.0, 3.0])
    y = ds.to_device(x, ds.neutral_device(x))
    assert y is not x
    assert ds.neutral_device(y) == ds.neutral_device(x)
    np.testing.assert_array_equal(harness.values(y), [1.0, 2.0, 3.0])
    assert not harness.aliases(x, y)


def test_mutating_a_to_device_result_leaves_the_source_alone(harness):
    if not harness.mutable:
        pytest.skip(f"{harness.name} tensors are immutable")
    x = harness.tensor([1.0, 2.0, 3.0])
    y = ds.to_device(x, ds.cpu())
    harness.fill(y, 9.0)
    np.testing.assert_array_equal(harness.values(x), [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(harness.values(y), [9.0, 9.0, 9.0])


@pytest.mark.parametrize("spec_kind", ["native", "string", "Device"])
def test_to_device_accepts_every_spec_form(harness, spec_kind):
    spec = {"native": ds.cpu(), "string": "cpu:0", "Device": ds.Device("cpu")}[spec_kind]
    y = ds.to_device(harness.tensor([1.0]), spec)
    assert ds.neutral_device(y) == "cpu"


def test_to_device_walks_nested_containers_and_keeps_their_types(harness):
    a, b, c = harness.tensor([1.0]), harness.tensor([2.0]), harness.tensor([3.0])
    marker = object()
    nested = collections.OrderedDict(
        pair=Pair(a, [b, (c, marker)]), batch=Batch(x=a, label="train"), n=7
    )
    moved = ds.to_device(nested, ds.cpu())
    assert type(moved) is collections.OrderedDict and list(moved) == ["pair", "batch", "n"]
    assert type(moved["pair"]) is Pair and type(moved["pair"].second[1]) is tuple
    assert type(moved["batch"]) is Batch and moved["batch"].label == "train"
    assert moved["pair"].second[1][1] is marker and moved["n"] == 7
    for before, after in [(a, moved["pair"].first), (b, moved["pair"].second[0]),
                          (c, moved["pair"].second[1][0]), (a, moved["batch"].x)]:
        assert after is not before
        np.testing.assert_array_equal(harness.values(after), harness.values(before))


@pytest.mark.parametrize("empty", [[], (), {}, Pair((), [])])
def test_empty_containers_come_back_empty_and_of_the_same_type(harness, empty):
    for fn in (ds.to_device, ds.copy_if_needed):
        result = fn(empty, ds.cpu())
        assert result == empty and type(result) is type(empty)
    assert ds.same_device(empty)


@pytest.mark.parametrize("value", [3, "text", None, b"raw"])
def test_to_device_of_a_bare_non_tensor_raises(harness, value):
    with pytest.raises(ds.NotATensorError):
        ds.to_device(value, ds.cpu())
    with pytest.raises(ds.NotATensorError):
        ds.copy_if_needed(value, ds.cpu())
    with pytest.raises(ds.NotATensorError):
        ds.to_numpy(value)


def test_to_device_with_a_bad_or_absent_device_raises(harness):
    x = harness.tensor([1.0])
    with pytest.raises(ds.InvalidDeviceError):
        ds.to_device(x, "banana:0")
    # One past the GPUs x can reach: the backend's own, or for a NumPy array CuPy's, NumPy's partner
    # under the numpy backend (tests/devshim_conformance/test_contract_numpy_arrays.py).
    with pytest.raises(ds.DeviceUnavailableError):
        ds.to_device(x, f"gpu:{gpus_reachable(harness.name)}")


def test_zero_dim_and_zero_size_tensors_keep_shape_and_dtype(harness):
    for x in (harness.tensor(5.0, dtype="float32"), harness.tensor(np.zeros((0, 3)), dtype="float32")):
        for fn in (ds.to_device, ds.copy_if_needed):
            y = fn(x, ds.cpu())
            assert harness.shape(y) == harness.shape(x)
            assert harness.dtype_name(y) == harness.dtype_name(x)
            assert harness.bits(y) == harness.bits(x)


def test_non_contiguous_views_are_copied_by_value(harness):
    base = harness.tensor(np.arange(12.0).reshape(3, 4))
    view = harness.strided(base)
    y = ds.to_device(view, ds.cpu())
    np.testing.assert_array_equal(harness.values(y), np.arange(12.0).reshape(3, 4)[:, ::2])
    assert harness.shape(y) == (3, 2)


def test_gradients_flow_through_to_device_and_copy_if_needed(harness):
    if not harness.has_autograd:
        pytest.skip(f"{harness.name} has no autograd")
    for fn in (ds.to_device, ds.copy_if_needed):
        grad = harness.grad_of_sum(lambda x, fn=fn: fn(x * 3.0, ds.cpu()) * 2.0, [1.0, 2.0])
        np.testing.assert_allclose(grad, [6.0, 6.0])


# ------------------------------------------------------------ copy_if_needed


def test_copy_if_needed_returns_the_same_object_when_already_there(harness):
    x = harness.tensor([1.0, 2.0])
    for spec in (ds.neutral_device(x), ds.cpu(), "cpu", ds.Device("cpu")):
        assert ds.copy_if_needed(x, spec) is x


def test_copy_if_needed_returns_the_same_container_when_nothing_moves(harness):
    batch = {"x": harness.tensor([1.0]), "y": [harness.tensor([2.0]), "label"]}
    assert ds.copy_if_needed(batch, ds.cpu()) is batch


# ------------------------------------------------------------ same_device / ensure_same_device


def test_same_device_over_tensors_and_nests(harness):
    x, y = harness.tensor([1.0]), harness.tensor([2.0])
    assert ds.same_device(x)
    assert ds.same_device(x, y, {"k": [y, "not a tensor", 3]})
    assert ds.same_device()


def test_ensure_same_device_returns_the_common_device(harness):
    x, y = harness.tensor([1.0]), harness.tensor([2.0])
    found = ds.ensure_same_device(x, (y,))
    # the framework's own device object, as device_of's: it goes back into the framework's calls
    assert found == ds.device_of(x) and ds.neutral_device(x) == found and ds.neutral_device(x) == "cpu"
    assert ds.neutral_device(harness.tensor([3.0], device=found)) == ds.neutral_device(x)


def test_ensure_same_device_finds_a_nests_device_past_its_other_leaves(harness):
    for place in ds.devices():
        t = harness.tensor([1.0, 2.0, 3.0], device=place)
        for nest in ([1, "a", t], {"a": 1, "b": t}, (None, {"deep": [t, t]})):
            found = ds.ensure_same_device(nest)
            assert ds.neutral_device(t) == found and ds.device(found) == ds.device_of(t)
            assert ds.same_device(nest)
    assert ds.same_device([1, "a"])  # no tensor: nothing apart, and nothing to find


def test_ensure_same_device_without_tensors_raises(harness):
    with pytest.raises(ds.NotATensorError, match="no tensor"):
        ds.ensure_same_device([], {"a": 1})


# ------------------------------------------------------------ to_numpy


def test_to_numpy_copies_values_to_a_host_array(harness):
    x = harness.tensor([[1.0, 2.0], [3.0, 4.0]], dtype="float32")
    host = ds.to_numpy(x)
    assert isinstance(host, np.ndarray) and host.dtype == np.float32
    np.testing.assert_array_equal(host, [[1.0, 2.0], [3.0, 4.0]])
    host[0, 0] = 100.0
    np.testing.assert_array_equal(harness.values(x), [[1.0, 2.0], [3.0, 4.0]])


def test_to_numpy_walks_nests(harness):
    out = ds.to_numpy({"a": [harness.tensor([1.0])], "tag": "t"})
    assert isinstance(out["a"][0], np.ndarray) and out["tag"] == "t"


# ------------------------------------------------------------ elements


def test_an_element_of_a_tensor_is_on_its_device_and_moves_like_one(harness):
    """``x[0]``: a 0-d tensor on most frameworks, a NumPy scalar (``np.float64``) on NumPy, as is
    what a reduction returns (``np.ones(3).sum()``). NumPy 2.0's arrays have ``.device`` and its
    scalars none (from 2.1 they do): ``ds.device_of`` of one raised AttributeError there."""
    device = ds.try_gpu()
    x = harness.tensor([1.0, 2.0], device=device)
    element = harness.run_on(device, lambda: x[0])
    assert ds.device_of(element) == ds.device_of(x)
    assert ds.neutral_device(element) == ds.neutral_device(x)
    assert ds.same_device(element, x)
    assert ds.copy_if_needed(element, device) is element
    copied = ds.to_device(element, device)
    assert copied is not element and float(harness.values(copied)) == 1.0
    np.testing.assert_array_equal(ds.to_numpy(element), 1.0)
