"""Conformance: ds.testing.assert_allclose, numerical_grad and check_backward on every backend and
every device it has (the CPU, and each virtual GPU in the virtual pass)."""

from __future__ import annotations

import numpy as np
import pytest

import devshim as ds
from devshim.backends import backend_for_tensor

ROWS = np.array([[1.0, 2.0], [3.0, 4.0]])


def where(x) -> str:
    """A tensor's device as ds.testing's messages name it."""
    place = ds.neutral_device(x)
    return f"{place} (virtual)" if place.virtual else str(place)


def inputs(harness, device, count: int, seed: int = 0, dtype: str = "float32") -> tuple:
    """``count`` arrays of shape (3, 2) with values in [-1, 1), made the framework's own way."""
    rng = np.random.default_rng(seed)
    return tuple(harness.tensor(rng.uniform(-1, 1, (3, 2)).astype(dtype).tolist(), device, dtype)
                 for _ in range(count))


# The Chainer tutorial's functions, forward and backward written once with xp.
def expadd_forward(x, y):
    xp = ds.array_module(x, y)
    return xp.exp(x) + xp.exp(y)


def expadd_backward(x, y, gz):
    xp = ds.array_module(x, y, gz)
    return gz * xp.exp(x), gz * xp.exp(y)


def muladd_forward(x, y, z):
    return x * y + z


def muladd_backward(x, y, z, gw):
    return y * gw, x * gw, gw


def muladd_wrong_backward(x, y, z, gw):
    return y * gw, y * gw, gw  # d(xy + z)/dy is x, not y


# ------------------------------------------------------------------ assert_allclose


def test_assert_allclose_takes_tensors_on_every_device_numpy_scalars_and_nests(harness):
    for device in ds.devices():
        x = harness.tensor(ROWS.tolist(), device, "float32")
        on_cpu = harness.tensor(ROWS.tolist(), ds.cpu(), "float32")
        with ds.transfer_guard("log") as report:
            ds.testing.assert_allclose(x, ROWS)
            ds.testing.assert_allclose(ROWS.astype(np.float32), x)
            ds.testing.assert_allclose(x, on_cpu)
            ds.testing.assert_allclose(x, ROWS.tolist())
            ds.testing.assert_allclose({"x": [x, 2.0]}, {"x": [ROWS, np.float32(2.0)]})
            ds.testing.assert_allclose(harness.tensor([3.0, 3.0], device, "float32"), 3)
        assert report.total == 0, f"the reads were not explicit copies:\n{report}"


def test_assert_allclose_failure_says_how_many_where_by_how_much_and_what_each_side_is(harness):
    device = ds.devices()[-1]
    changed = ROWS.copy()
    changed[1, 0] += 0.5
    x = harness.tensor(changed.tolist(), device, "float32")
    with pytest.raises(AssertionError) as info:
        ds.testing.assert_allclose(x, ROWS, err_msg="after one step")
    assert isinstance(info.value, ds.NotCloseError)
    message = str(info.value)
    assert message.startswith("Not equal to tolerance rtol=1e-05, atol=1e-06 (float32's defaults)\n")
    assert "Mismatched elements: 1 / 4 (25%)" in message
    assert "Greatest absolute difference: 0.5 at index (1, 0) (actual 3.5, desired 3.0)" in message
    assert "Greatest relative difference: 0.166667 at index (1, 0)" in message
    assert f" actual: {harness.name} float32 (2, 2) on {where(x)}\n desired: numpy float64 (2, 2) on cpu:0" in message
    assert message.endswith("after one step")


def test_assert_allclose_says_when_shapes_or_structures_differ(harness):
    x = harness.tensor(ROWS.tolist(), ds.devices()[-1], "float32")
    with pytest.raises(ds.NotCloseError, match=r"^Shapes differ: actual \(2, 2\), desired \(4,\)\.\n actual: "):
        ds.testing.assert_allclose(x, ROWS.reshape(4))
    with pytest.raises(ds.NotCloseError, match=r"The nests differ in structure: actual has 2 leaves \(\['a'\], "
                                               r"\['b'\]\), desired has 1 leaves \(\['a'\]\)"):
        ds.testing.assert_allclose({"a": x, "b": x}, {"a": ROWS})


def test_assert_allclose_default_tolerance_is_the_less_precise_sides(harness):
    close = ROWS * (1 + 3e-6)  # within float32's rtol (1e-5), beyond float64's (1e-7)
    ds.testing.assert_allclose(harness.tensor(close.tolist(), None, "float32"), ROWS)
    if "float64" not in harness.dtypes:
        return
    with pytest.raises(ds.NotCloseError, match=r"rtol=1e-07, atol=1e-09 \(float64's defaults\)"):
        ds.testing.assert_allclose(harness.tensor(close.tolist(), None, "float64"), ROWS)
    ds.testing.assert_allclose(harness.tensor(close.tolist(), None, "float64"), ROWS, rtol=1e-5)


# ------------------------------------------------------------------ numerical_grad


def test_numerical_grad_gives_each_gradient_in_its_inputs_framework_device_and_dtype(harness):
    gw = np.random.default_rng(5).uniform(-1, 1, (3, 2))
    for device in ds.devices():
        x, y, z = inputs(harness, device, 3)
        grads = ds.testing.numerical_grad(muladd_forward, (x, y, z), (gw,))
        expected = [harness.values(y) * gw, harness.values(x) * gw, gw]
        assert len(grads) == 3
        for gradient, want in zip(grads, expected):
            assert backend_for_tensor(gradient).name == harness.name
            assert ds.neutral_device(gradient) == ds.neutral_device(x)
            assert harness.dtype_name(gradient) == "float32"
            np.testing.assert_allclose(harness.values(gradient), want, rtol=1e-3, atol=1e-4)


def test_numerical_grad_is_exact_to_eps_squared_in_float64(harness):
    if "float64" not in harness.dtypes:
        pytest.skip(f"{harness.name} has no float64")
    x, = inputs(harness, ds.devices()[-1], 1, dtype="float64")
    gx, = ds.testing.numerical_grad(lambda x: x * x * x, (x,), (np.ones((3, 2)),), eps=1e-4)
    # (x+e)^3 - (x-e)^3 = 6x^2 e + 2e^3: the error is e^2 = 1e-8, far below float32's rounding
    np.testing.assert_allclose(harness.values(gx), 3 * harness.values(x) ** 2, rtol=0, atol=2e-8)


def test_numerical_grad_of_a_function_reading_its_inputs_changes_them_in_place_and_restores_them(harness):
    x, y = inputs(harness, ds.devices()[-1], 2)
    before = harness.values(x).copy()
    if not harness.mutable:
        with pytest.raises(ds.ImmutableInputError, match=r"cannot be changed in place\. Write f to take the "
                                                         r"inputs as arguments"):
            ds.testing.numerical_grad(lambda: x * y, (x,), (np.ones((3, 2)),))
        return
    gx, = ds.testing.numerical_grad(lambda: x * y, (x,), (np.ones((3, 2)),))
    np.testing.assert_allclose(harness.values(gx), harness.values(y), rtol=1e-3, atol=1e-4)
    np.testing.assert_array_equal(harness.values(x), before)


# ------------------------------------------------------------------ check_backward


def test_check_backward_passes_a_right_backward_and_names_the_input_a_wrong_one_gets_wrong(harness):
    if harness.custom_gradient(muladd_forward, muladd_backward) is None:
        x, y = inputs(harness, None, 2)
        with pytest.raises(ds.NoAutodiffError, match=r"has no automatic differentiation.*numerical_grad"):
            ds.testing.check_backward(expadd_forward, (x, y))
        return
    for device in ds.devices():
        x, y, z = inputs(harness, device, 3)
        ds.testing.check_backward(harness.custom_gradient(expadd_forward, expadd_backward), (x, y))
        ds.testing.check_backward(harness.custom_gradient(muladd_forward, muladd_backward), (x, y, z))
        ds.testing.check_backward(lambda x, y: x * y + x, (x, y))  # the framework's own ops
        with pytest.raises(AssertionError) as info:
            ds.testing.check_backward(harness.custom_gradient(muladd_forward, muladd_wrong_backward), (x, y, z))
        assert isinstance(info.value, ds.GradientMismatchError)
        message = str(info.value)
        assert message.startswith(f"The gradient of input 1 (of 3: {harness.name} float32 (3, 2) on {where(x)}) "
                                  f"differs from the numerical gradient (central differences, eps=0.001) beyond "
                                  f"rtol=0.01, atol=0.001:\n  mismatched elements: ")
        assert "input 0" not in message and "input 2" not in message
        assert "  greatest absolute difference: " in message and "(autodiff " in message


def test_check_backward_draws_its_grad_outputs_from_the_seed(harness):
    if harness.custom_gradient(muladd_forward, muladd_backward) is None:
        pytest.skip(f"{harness.name} has no autodiff")
    x, y, z = inputs(harness, ds.devices()[-1], 3)
    wrong = harness.custom_gradient(muladd_forward, muladd_wrong_backward)

    def failure(seed):
        with pytest.raises(ds.GradientMismatchError) as info:
            ds.testing.check_backward(wrong, (x, y, z), seed=seed)
        return str(info.value)

    assert failure(0) == failure(0) != failure(1)


def test_check_backward_with_several_outputs_and_grad_outputs_given(harness):
    if harness.custom_gradient(muladd_forward, muladd_backward) is None:
        pytest.skip(f"{harness.name} has no autodiff")
    x, y = inputs(harness, ds.devices()[-1], 2)
    gys = (np.full((3, 2), 0.5), np.full((3, 2), -2.0))
    ds.testing.check_backward(lambda x, y: (x * y, x + y), (x, y), gys)
    with pytest.raises(ds.GradientCheckUsageError, match=r"f returned 2 outputs, but grad_outputs has 1"):
        ds.testing.check_backward(lambda x, y: (x * y, x + y), (x, y), gys[:1])


def test_the_checks_copy_explicitly_inside_a_guard(harness):
    if harness.custom_gradient(muladd_forward, muladd_backward) is None:
        pytest.skip(f"{harness.name} has no autodiff")
    x, y, z = inputs(harness, ds.devices()[-1], 3)
    muladd = harness.custom_gradient(muladd_forward, muladd_backward)
    with ds.transfer_guard("log") as report:
        ds.testing.check_backward(muladd, (x, y, z))
        ds.testing.numerical_grad(muladd_forward, (x, y, z), (np.ones((3, 2)),))
    assert report.total == 0, f"devshim's own copies were not explicit:\n{report}"
    with ds.transfer_guard("disallow"):
        ds.testing.check_backward(muladd, (x, y, z))
