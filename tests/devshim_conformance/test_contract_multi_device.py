"""Conformance on two distinct devices: real GPUs, or virtual ones where the backend has them.

These tests skip (with the reason) on a backend that sees a single device.
"""

from __future__ import annotations

import numpy as np
import pytest

import devshim as ds


def test_copy_between_devices_lands_on_the_target(harness, two_devices):
    first, second = two_devices
    x = harness.tensor([1.0, 2.0], device=first)
    z = ds.to_device(x, second)
    assert ds.neutral_device(x) == ds.device(first)
    assert ds.neutral_device(z) == ds.device(second) != ds.neutral_device(x)
    np.testing.assert_array_equal(harness.values(z), [1.0, 2.0])


def test_same_device_is_false_across_devices(harness, two_devices):
    first, second = two_devices
    x = harness.tensor([1.0], device=first)
    y = harness.tensor([1.0], device=second)
    assert not ds.same_device(x, y)
    assert not ds.same_device({"a": x}, [y])


def test_ensure_same_device_names_each_device_and_the_fix(harness, two_devices):
    first, second = two_devices
    x = harness.tensor([1.0], device=first)
    y = harness.tensor([1.0], device=second)
    with pytest.raises(ds.DeviceMismatchError) as info:
        ds.ensure_same_device(x, {"y": y})
    message = str(info.value)
    assert str(ds.neutral_device(x)) in message and str(ds.neutral_device(y)) in message
    assert "argument 1['y']" in message and "ds.copy_if_needed" in message


def test_copy_if_needed_moves_only_what_is_elsewhere(harness, two_devices):
    first, second = two_devices
    x = harness.tensor([1.0], device=first)
    y = harness.tensor([2.0], device=second)
    moved = ds.copy_if_needed({"x": x, "y": y}, second)
    assert moved["y"] is y
    assert moved["x"] is not x and ds.neutral_device(moved["x"]) == ds.neutral_device(y)


def test_the_d2l_flow_through_devshim(harness, two_devices):
    """X on try_gpu(), Y on try_gpu(1), Z = copy of X onto gpu 1, Y + Z, copy_if_needed identity."""
    first, second = two_devices
    X = harness.tensor(np.ones((2, 3)), device=first)
    Y = harness.tensor(np.full((2, 3), 2.0), device=second)
    Z = ds.to_device(X, second)
    assert ds.same_device(Y, Z) and not ds.same_device(X, Y)
    np.testing.assert_array_equal(harness.values(harness.add(Y, Z)), np.full((2, 3), 3.0))
    assert ds.copy_if_needed(Z, second) is Z
