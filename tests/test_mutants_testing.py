"""`ds.testing`: what `assert_allclose`, the gradient checks and `torch_device_tests` promise that
the mutation env (`tox -e mutation`, tools/mutation.py) found no test holding them to: the whole
text of a failure (its percentage, where the tolerances came from, nothing after the last line
without `err_msg`, how a list of numbers is described), the default tolerances taken from the
less precise side, complex values compared as complex whichever side holds them, NaN matching
only NaN, no warning from infinities or overflow, which lists are read as one array, the
caller's array put back after `f` changed it, the eps suggested when eps does not move an input,
and the virtual GPUs `torch_device_tests` asks for. NumPy values, so that each holds on any
machine; torch's virtual GPUs only where `torch_device_tests` needs them."""

from __future__ import annotations

import os
import sys
import warnings

import numpy as np
import pytest

import devshim as ds
from devshim import settings
from devshim.testing._values import number_array
from devshim.testing.allclose import mismatch


def _failure(actual, desired, **options) -> str:
    with pytest.raises(ds.NotCloseError) as raised:
        ds.testing.assert_allclose(actual, desired, **options)
    return str(raised.value)


# ------------------------------------------------------------------ the failure's text


def test_a_failure_says_the_share_that_differs_and_ends_with_the_sides():
    """Two of four elements differ (50%, not 100 / 2 / 4); tolerances given name no source; no
    `err_msg` adds nothing after the sides."""
    text = _failure(np.array([1.0, 2.0, 3.0, 4.0]), np.array([1.0, 2.5, 3.0, 5.0]), rtol=0.01, atol=0.001)
    assert text == (
        "Not equal to tolerance rtol=0.01, atol=0.001\n"
        "Mismatched elements: 2 / 4 (50%)\n"
        "Greatest absolute difference: 1 at index (3,) (actual 4.0, desired 5.0)\n"
        "Greatest relative difference: 0.2 at index (1,) (actual 2.0, desired 2.5)\n"
        " actual: numpy float64 (4,) on cpu:0\n"
        " desired: numpy float64 (4,) on cpu:0")


def test_err_msg_is_added_on_a_line_of_its_own_after_the_failure():
    text = _failure(np.array([1.0]), np.array([2.0]), err_msg="step 3 of the loop")
    assert text.endswith(" desired: numpy float64 (1,) on cpu:0\nstep 3 of the loop")


def test_a_list_of_numbers_is_one_array_described_as_a_python_list_on_the_host():
    text = _failure(np.array([1.0, 2.0, 3.0, 4.0]), [1.0, 2.5, 3.0, 5.0])
    assert text == (
        "Not equal to tolerance rtol=1e-07, atol=1e-09 (float64's defaults)\n"
        "Mismatched elements: 2 / 4 (50%)\n"
        "Greatest absolute difference: 1 at index (3,) (actual 4.0, desired 5.0)\n"
        "Greatest relative difference: 0.2 at index (1,) (actual 2.0, desired 2.5)\n"
        " actual: numpy float64 (4,) on cpu:0\n"
        " desired: Python list (4,) on the host")


def test_a_list_of_numbers_is_not_broadcast_like_a_number():
    assert _failure([1.0, 2.0], np.ones(3)) == (
        "Shapes differ: actual (2,), desired (3,).\n"
        " actual: Python list (2,) on the host\n"
        " desired: numpy float64 (3,) on cpu:0")


# ------------------------------------------------------------------ the default tolerances


def test_the_default_tolerances_are_the_less_precise_sides_not_the_first_name_in_order():
    """float32 against complex128: float32's row (rtol 1e-5), though "complex128" sorts first."""
    ds.testing.assert_allclose(np.array([1.0], np.float32), np.array([1.0 + 5e-6], np.complex128))
    ds.testing.assert_allclose(np.array([1.0 + 5e-6], np.complex128), np.array([1.0], np.float32))
    text = _failure(np.array([1.0], np.float32), np.array([1.1], np.complex128))
    assert text.startswith("Not equal to tolerance rtol=1e-05, atol=1e-06 (float32's defaults)\n")


# ------------------------------------------------------------------ how elements are compared


def test_a_complex_side_is_compared_with_its_imaginary_part_whichever_side_it_is():
    for actual, desired in ((np.array([1.0 + 1.0j]), np.array([1.0])), (np.array([1.0]), np.array([1.0 + 1.0j]))):
        found = mismatch(actual, desired, 0.0, 0.0, True)
        assert found is not None and (found.count, found.abs_diff) == (1, 1.0)
        text = _failure(actual, desired)
        assert "Mismatched elements: 1 / 1 (100%)\nGreatest absolute difference: 1 at index (0,)" in text


def test_nan_matches_only_nan_with_equal_nan():
    found = mismatch(np.array([np.nan, 1.0, np.nan]), np.array([1.0, np.nan, np.nan]), 1e-7, 0.0, True)
    assert found is not None and found.count == 2
    assert "Mismatched elements: 2 / 3 (66.7%)" in _failure(np.array([np.nan, 1.0, np.nan]),
                                                             np.array([1.0, np.nan, np.nan]))


def test_infinities_and_overflowing_differences_are_compared_without_a_warning():
    """inf - inf (invalid) and 1e308 - -1e308 (overflow) are steps of the comparison, not news."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert mismatch(np.array([np.inf, -np.inf]), np.array([np.inf, -np.inf]), 0.0, 0.0, True) is None
        found = mismatch(np.array([1e308, np.inf]), np.array([-1e308, np.inf]), 1e-7, 0.0, True)
        assert found is not None and found.count == 1 and found.abs_index == (0,)
        assert mismatch(np.array([np.inf]), np.array([-np.inf]), 1e-7, 1.0, True).count == 1


# ------------------------------------------------------------------ lists read as one array


def test_a_list_of_python_numbers_is_one_host_array_that_is_not_a_scalar():
    value = number_array([[1.5, 2.5], [3.5, 4.5]])
    assert value.shape == (2, 2) and value.host.dtype == np.float64
    assert value.host.tolist() == [[1.5, 2.5], [3.5, 4.5]]
    assert (value.framework, value.dtype, value.device, value.scalar) == ("Python list", None, "the host", False)
    assert value.describe() == "Python list (2, 2) on the host"


def test_only_a_nonempty_list_or_tuple_of_python_numbers_is_a_number_array():
    assert number_array(2.5) is None and number_array(3) is None  # one number is no list
    assert number_array([]) is None and number_array([[1.0], [2.0, 3.0]]) is None
    # NumPy scalars are the numpy backend's values, each a leaf of its own
    assert number_array([np.float64(1.0), np.float64(2.0)]) is None
    assert number_array((1.0, 2.0)).shape == (2,)


# ------------------------------------------------------------------ the gradient checks


def test_an_array_f_changed_in_place_is_put_back_as_it_was():
    """Chainer's form of numerical_grad on a NumPy array (no autodiff): every element restored."""
    x = np.array([1.0, 2.0, 3.0])

    def f():
        x[...] += 1.0
        return x * 2.0

    with pytest.raises(ds.InputMutatedError, match="Your array has been put back as it was"):
        ds.testing.numerical_grad(f, (x,), (np.ones(3),))
    assert x.dtype == np.float64 and x.tolist() == [1.0, 2.0, 3.0]


def _eps_advice(value: float, dtype, eps: float) -> str:
    with pytest.raises(ds.GradientCheckUsageError) as raised:
        ds.testing.numerical_grad(lambda y: y * 2.0, (np.array([value], dtype=dtype),), (np.ones(1),), eps=eps)
    text = str(raised.value)
    assert "does not change input 0" in text
    return text.rpartition("Pass a larger eps, e.g. ")[2]


def test_the_eps_suggested_grows_with_the_size_of_the_value():
    """Four spacings of the dtype at the value: 4 * 2**-23 * 1000 for float32 at 1000."""
    assert _eps_advice(1000.0, np.float32, 1e-5) == "eps=0.000476837."
    assert _eps_advice(-0.25, np.float32, 1e-9) == "eps=4.76837e-07."  # below 1: the spacing at 1
    assert _eps_advice(1.0, np.float16, 1e-5) == "eps=0.00390625."


def test_the_eps_suggested_for_float8_is_four_eighths_of_the_value():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    assert _eps_advice(1.0, ml_dtypes.float8_e4m3fn, 1e-3) == "eps=0.5."
    assert _eps_advice(4.0, ml_dtypes.float8_e5m2, 1e-3) == "eps=2."


# ------------------------------------------------------------------ torch's device-generic tests


def test_torch_device_tests_asks_for_the_count_it_is_given(vgpu, setenv, monkeypatch):
    """The count reaches the settings and the variable that interpreters the tests start read."""
    from devshim.backends.torch._virtual import device_tests

    if device_tests._UTILS is None:
        pytest.skip("this torch has no device-generic test framework")
    utils = sys.modules.get(device_tests._UTILS)
    if utils is not None and "vgpu" not in utils.NATIVE_DEVICES:
        pytest.skip("torch's test framework was imported in this process before its virtual GPUs were registered")
    monkeypatch.setenv(device_tests.VARIABLE, device_tests.__file__)  # named already: nothing imports torch's
    setenv(settings.VIRTUAL_DEVICES_VAR, "0")  # none asked for (set, not unset: monkeypatch puts it back after)
    settings.set_virtual_devices(None)
    ds.testing.torch_device_tests(2)
    assert os.environ[settings.VIRTUAL_DEVICES_VAR] == "2"
    assert settings.virtual_device_count() == 2 and not settings.virtual_devices_from_environment()
    assert os.environ[device_tests.VARIABLE] == device_tests.__file__
