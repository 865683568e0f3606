"""Conformance: ds.testing.assert_allclose, numerical_grad, check_backward and check_double_backward on
every backend and every device it has (the CPU, and each virtual GPU in the virtual pass).

The gradient checks are tried as a hostile user would: no false failures (integer and boolean
outputs, outputs left out, dicts in any key order, half precision), no false passes (a zero backward
of a mean, a backward off by 1%), the caller's tensors untouched and an f that changes its inputs named,
outputs and inputs that do not depend on each other, second order, kinks, and misuse."""

from __future__ import annotations

import numpy as np
import pytest

import devshim as ds
from devshim.backends import backend_for_tensor
from devshim_conformance import require_module

ROWS = np.array([[1.0, 2.0], [3.0, 4.0]])


def where(x) -> str:
    """A tensor's device as ds.testing's messages name it."""
    place = ds.neutral_device(x)
    return f"{place} (virtual)" if place.virtual else str(place)


def inputs(harness, device, count: int, seed: int = 0, dtype: str = "float32", shape=(3, 2)) -> tuple:
    """``count`` arrays of ``shape`` with values in [-1, 1), made the framework's own way."""
    require_module(harness.name, "interop", "ds.testing's checks make its tensors from host values with it")
    rng = np.random.default_rng(seed)
    return tuple(harness.tensor(rng.uniform(-1, 1, shape).astype(dtype).tolist(), device, dtype)
                 for _ in range(count))


def needs_autodiff(harness) -> None:
    if harness.custom_gradient(muladd_forward, muladd_backward) is None:
        pytest.skip(f"{harness.name} has no autodiff: check_backward refuses it (see the first check_backward test)")


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
                                               r"\['b'\]\), desired has 1 leaves \(\['a'\]\)\. They first differ at "
                                               r"the top level: keys only actual has: 'b'; only desired has: none"):
        ds.testing.assert_allclose({"a": x, "b": x}, {"a": ROWS})


def test_assert_allclose_matches_mappings_by_key_in_any_order_and_integer_keys_are_no_positions(harness):
    for device in ds.devices():
        x = harness.tensor(ROWS.tolist(), device, "float32")
        ds.testing.assert_allclose({"w": x, "b": x[0, ...]}, {"b": ROWS[0], "w": ROWS})
        ds.testing.assert_allclose({1: x, 0: x[0, ...]}, {0: ROWS[0], 1: ROWS})
        with pytest.raises(ds.NotCloseError) as info:
            ds.testing.assert_allclose({"w": x, "b": x[0, ...]}, {"b": ROWS, "w": ROWS[0]})
        assert "At ['w']: Shapes differ" in str(info.value)
        with pytest.raises(ds.NotCloseError, match=r"actual has a mapping there, desired a sequence"):
            ds.testing.assert_allclose({0: x[0, ...], 1: x[1, ...]}, [ROWS[0], ROWS[1]])  # a key is no list position
        with pytest.raises(ds.NotCloseError, match=r"actual has a single value there, desired a mapping"):
            ds.testing.assert_allclose(x, {0: [1.0, 2.0], 1: [3.0, 4.0]})


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


def _fills_its_second_input(harness):
    """An `f(a, b)` that writes 5 into `b` in place, then returns `a * b`."""
    def changes_y(a, b):
        harness.fill(b, 5.0)
        return a * b

    return changes_y


def test_numerical_grad_calls_f_with_copies_and_names_an_f_that_changes_its_inputs(harness):
    x, y = inputs(harness, ds.devices()[-1], 2)
    before = harness.values(y).copy()
    seen = []

    def f(a, b):
        seen.append(b)
        return a * b

    ds.testing.numerical_grad(f, (x, y), (np.ones((3, 2)),))
    assert all(b is not y for b in seen)
    if not harness.mutable:
        return  # its arrays cannot be changed in place: f cannot change its inputs

    changes_y = _fills_its_second_input(harness)

    with pytest.raises(ds.InputMutatedError, match=r"^f changed input 1 \(of 2: .*\) in place \(6 of 6 elements "
                                                   r"differ after its call with input 0's element \(0, 0\) moved to "):
        ds.testing.numerical_grad(changes_y, (x, y), (np.ones((3, 2)),))
    np.testing.assert_array_equal(harness.values(y), before)
    with pytest.raises(ds.InputMutatedError, match=r"Your array has been put back as it was"):
        ds.testing.numerical_grad(lambda: changes_y(x, y), (x, y), (np.ones((3, 2)),))
    np.testing.assert_array_equal(harness.values(y), before)


def test_numerical_grad_takes_the_differences_in_a_wider_dtype_when_asked(harness):
    if "float16" not in harness.dtypes:
        pytest.skip(f"{harness.name} has no float16")
    for device in ds.devices():
        x, = inputs(harness, device, 1, dtype="float16")
        gx, = ds.testing.numerical_grad(lambda x: x * x, (x,), (np.ones((3, 2)),), dtype="float32")
        assert harness.dtype_name(gx) == "float16" and ds.neutral_device(gx) == ds.neutral_device(x)
        np.testing.assert_allclose(harness.values(gx).astype(np.float64), 2 * harness.values(x), rtol=2e-3)


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
                                  f"|autodiff - numerical| <= atol + rtol * |numerical| + noise, with "
                                  f"rtol=0.01 (float32's default), atol=")
        assert "(rtol times the greatest numerical gradient, " in message
        assert "\n  mismatched elements: " in message
        assert "input 0" not in message and "input 2" not in message
        assert "  greatest absolute difference: " in message and "(autodiff " in message


def test_check_backward_draws_its_grad_outputs_from_the_seed(harness):
    needs_autodiff(harness)
    x, y, z = inputs(harness, ds.devices()[-1], 3)
    wrong = harness.custom_gradient(muladd_forward, muladd_wrong_backward)

    def failure(seed):
        with pytest.raises(ds.GradientMismatchError) as info:
            ds.testing.check_backward(wrong, (x, y, z), seed=seed)
        return str(info.value)

    assert failure(0) == failure(0) != failure(1)


def test_check_backward_with_several_outputs_and_grad_outputs_given(harness):
    needs_autodiff(harness)
    x, y = inputs(harness, ds.devices()[-1], 2)
    gys = (np.full((3, 2), 0.5), np.full((3, 2), -2.0))
    ds.testing.check_backward(lambda x, y: (x * y, x + y), (x, y), gys)
    with pytest.raises(ds.GradientCheckUsageError, match=r"f returned 2 outputs, but grad_outputs has 1"):
        ds.testing.check_backward(lambda x, y: (x * y, x + y), (x, y), gys[:1])


def test_check_backward_gives_boolean_outputs_no_gradient_and_leaves_out_outputs_given_none(harness):
    """A mask that flips within eps of its threshold, and an output of NaN left out, do not fail a
    correct function: neither takes part in either pass."""
    needs_autodiff(harness)
    for device in ds.devices():
        x = harness.tensor([[0.3004, -0.5], [0.2997, 0.7], [0.1, 0.3]], device, "float32")
        ds.testing.check_backward(lambda x: (x * 2, x > 0.3), (x,))
        ds.testing.check_backward(lambda x: {"mask": x > 0.3, "y": x * x}, (x,))
        def nan_out(x):
            return x * 2, x * float("nan")

        ds.testing.check_backward(nan_out, (x,), (np.ones((3, 2)), None))
        gx, = ds.testing.numerical_grad(nan_out, (x,), (np.ones((3, 2)), None))
        np.testing.assert_allclose(harness.values(gx), 2.0, rtol=1e-3)
        with pytest.raises(ds.GradientCheckUsageError, match=r"grad_outputs gives a gradient for output \[1\] of f, "
                                                             r"which is a bool tensor: it has no gradient\. Pass None"):
            ds.testing.check_backward(lambda x: (x * 2, x > 0.3), (x,), (np.ones((3, 2)), np.ones((3, 2))))


def test_check_backward_matches_dict_outputs_and_their_grad_outputs_by_key(harness):
    needs_autodiff(harness)
    x, = inputs(harness, ds.devices()[-1], 1)
    xp = ds.array_module(x)

    def f(x):
        return {"b": x * 3, "a": xp.sin(x)}

    gys = {"a": np.full((3, 2), 2.0), "b": np.full((3, 2), -1.0)}
    ds.testing.check_backward(f, (x,), gys)
    gx, = ds.testing.numerical_grad(f, (x,), gys)
    np.testing.assert_allclose(harness.values(gx), 2 * np.cos(harness.values(x)) - 3, rtol=1e-3, atol=1e-4)
    ds.testing.check_backward(f, (x,), {"a": None, "b": np.ones((3, 2))})


def test_check_backward_differentiates_half_precision_in_float32_and_refuses_a_half_dtype(harness):
    """Half-precision inputs are differentiated numerically in float32 unless told otherwise (the
    autodiff runs in float16): right passes, a backward 10% wrong fails. Central differences in half
    precision are refused by name: as `dtype`, and for half outputs of wider inputs without `eps`."""
    needs_autodiff(harness)
    if "float16" not in harness.dtypes:
        pytest.skip(f"{harness.name} has no float16")
    for device in ds.devices():
        x16, = inputs(harness, device, 1, dtype="float16")
        ds.testing.check_backward(lambda x: x * x, (x16,))
        ds.testing.check_backward(lambda x: x * x, (x16,), dtype="float64" if "float64" in harness.dtypes else None)
        off = harness.custom_gradient(lambda x: x * x, lambda x, gy: (gy * x * 2.2,))
        with pytest.raises(ds.GradientMismatchError, match=r"rtol=0\.01 \(float16's default\)"):
            ds.testing.check_backward(off, (x16,))
        with pytest.raises(ds.GradientCheckUsageError, match=r"dtype='float16'\): central differences taken in "
                                                             r"float16 are swamped"):
            ds.testing.check_backward(lambda x: x * x, (x16,), dtype="float16")
        x32, = inputs(harness, device, 1)

        def to_half(x):
            return harness.cast(x * x, "float16")

        with pytest.raises(ds.GradientCheckUsageError, match=r"central differences of the output of f in float16.*Pass eps"):
            ds.testing.check_backward(to_half, (x32,))
        ds.testing.check_backward(to_half, (x32,), eps=2 ** -4)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_backward_ten_percent_wrong_fails_in_half_precision_for_twenty_seeds(harness, dtype):
    """x * x with inputs in [0.25, 1] of a half-precision dtype: a backward that returns 2.2 x (10% wrong)
    fails for each of 20 seeds (inputs and grad outputs drawn from each), with the default eps and with
    the 2**-4 once advised for half precision; the right one (2 x) passes for each."""
    needs_autodiff(harness)
    if dtype not in harness.dtypes:
        pytest.skip(f"{harness.name} has no {dtype}")
    if dtype == "bfloat16":
        pytest.importorskip("ml_dtypes", reason="NumPy reads bfloat16 through ml_dtypes (in the framework's extra)")
    right = harness.custom_gradient(lambda x: x * x, lambda x, gy: (gy * x * 2,))
    wrong = harness.custom_gradient(lambda x: x * x, lambda x, gy: (gy * x * 2.2,))
    device = ds.devices()[-1]
    for seed in range(20):
        values = np.random.default_rng(seed).uniform(0.25, 1.0, (3, 2))
        x = harness.tensor(values.astype(np.float32).tolist(), device, dtype)
        ds.testing.check_backward(right, (x,), seed=seed)
        for eps in (None, 2 ** -4):
            with pytest.raises(ds.GradientMismatchError, match=rf"\(of 1: {harness.name} {dtype} \(3, 2\)"):
                ds.testing.check_backward(wrong, (x,), seed=seed, eps=eps)


def test_check_backward_fails_an_all_zero_backward_of_a_mean_of_1000_values(harness):
    """The mean's true gradient (1/1000 of the output's gradient) is below the old fixed atol of
    1e-3: the tolerance follows the gradient's own size."""
    needs_autodiff(harness)
    x, = inputs(harness, ds.devices()[-1], 1, shape=(1000,))
    xp = ds.array_module(x)
    ds.testing.check_backward(lambda x: xp.mean(x), (x,))
    zero = harness.custom_gradient(lambda x: xp.mean(x), lambda x, gy: (x * 0,))
    with pytest.raises(ds.GradientMismatchError, match=r"mismatched elements: 1000 / 1000"):
        ds.testing.check_backward(zero, (x,))
    small = harness.custom_gradient(lambda x: x * x * 1e-4, lambda x, gy: (gy * x * 2.2e-4,))
    with pytest.raises(ds.GradientMismatchError, match=r"mismatched elements: [1-6] / 6"):
        ds.testing.check_backward(small, inputs(harness, ds.devices()[-1], 1))  # 10% off, but below 1e-3


def test_check_backward_fails_a_backward_off_by_one_percent_in_float64(harness):
    needs_autodiff(harness)
    if "float64" not in harness.dtypes:
        pytest.skip(f"{harness.name} has no float64")
    x, = inputs(harness, ds.devices()[-1], 1, dtype="float64")
    xp = ds.array_module(x)
    off = harness.custom_gradient(lambda x: xp.sin(x), lambda x, gy: (gy * xp.cos(x) * 1.01,))
    with pytest.raises(ds.GradientMismatchError, match=r"rtol=0\.0001 \(float64's default\)"):
        ds.testing.check_backward(off, (x,))
    ds.testing.check_backward(off, (x,), rtol=0.02)


def test_check_backward_leaves_the_callers_tensors_alone_and_names_an_f_that_changes_its_inputs(harness):
    needs_autodiff(harness)
    x, y = inputs(harness, ds.devices()[-1], 2)
    before = [harness.values(x).copy(), harness.values(y).copy()]
    seen = []

    def f(a, b):
        seen.extend([a, b])
        return a * b

    ds.testing.check_backward(f, (x, y))
    ds.testing.check_double_backward(f, (x, y)) if harness.custom_second_order else None
    assert seen and all(v is not x and v is not y for v in seen)
    for value, old in zip((x, y), before):
        np.testing.assert_array_equal(harness.values(value), old)
    if not harness.mutable:
        return  # its arrays cannot be changed in place: f cannot change its inputs

    changes_y = _fills_its_second_input(harness)

    with pytest.raises(ds.InputMutatedError, match=r"f changed input 1 .* in place .*Your own tensors are "
                                                   r"unchanged: f was given copies"):
        ds.testing.check_backward(changes_y, (x, y))
    np.testing.assert_array_equal(harness.values(y), before[1])


def test_check_backward_compares_outputs_and_inputs_that_depend_on_nothing(harness):
    needs_autodiff(harness)
    for device in ds.devices():
        x, y = inputs(harness, device, 2)
        constant = harness.tensor([1.0, 2.0], device, "float32")
        ds.testing.check_backward(lambda x, y, c=constant: (x * 2, c), (x, y))
        ds.testing.check_backward(lambda x, y, c=constant: c * 1.0, (x, y))
        ds.testing.check_backward(lambda x, y: x * 2, (x, y))
        with pytest.raises(ds.GradientMismatchError, match=r"The gradient of input 1 \(of 2"):
            ds.testing.check_backward(lambda x, y: x * 2 + harness.stop_gradient(y), (x, y))


def test_check_backward_compares_every_gradient_kind_the_framework_gives(harness):
    """Gathered rows: torch's sparse gradient, TensorFlow's IndexedSlices, MXNet's row_sparse (JAX's is
    dense), each compared as a dense one; and None in f's result, an empty part of it."""
    needs_autodiff(harness)
    rows = [0, 2, 2, 4]
    for device in ds.devices():
        weight, = inputs(harness, device, 1, shape=(5, 3))
        ds.testing.check_backward(lambda w: harness.gather_rows(w, rows), (weight,))
        ds.testing.check_backward(lambda w: (harness.gather_rows(w, rows) * 2, None), (weight,))

        def wrong(w):  # 1.1 times the rows, whose gradient the autodiff sees once
            return harness.gather_rows(w, rows) + harness.gather_rows(harness.stop_gradient(w), rows) * 0.1

        with pytest.raises(ds.GradientMismatchError, match=rf"The gradient of input 0 \(of 1: {harness.name} float32 "
                                                           rf"\(5, 3\)"):
            ds.testing.check_backward(wrong, (weight,))


def test_each_input_reaches_f_as_a_private_copy_of_its_kind(harness):
    """A torch parameter as a parameter, a tf.Variable as a variable, an MXNet nd array as one, on its
    device; the caller's keeps its values; numerical_grad's gradients come back on its device."""
    for device in ds.devices():
        x, = inputs(harness, device, 1)
        special = harness.special_kind(x)
        before = harness.values(special).copy()
        seen: list = []

        def f(v, seen=seen):
            seen.append(v)
            return v * v

        gx, = ds.testing.numerical_grad(f, (special,), (np.ones((3, 2)),))
        assert seen and all(type(v) is type(special) and ds.neutral_device(v) == ds.neutral_device(special)
                            for v in seen)
        if harness.custom_gradient(muladd_forward, muladd_backward) is not None:
            ds.testing.check_backward(f, (special,))  # JAX's vjp hands f tracers: their kind is JAX's
        assert all(v is not special for v in seen)
        assert ds.neutral_device(gx) == ds.neutral_device(special)
        np.testing.assert_array_equal(harness.values(special), before)
        np.testing.assert_allclose(harness.values(gx), 2 * before, rtol=1e-3, atol=1e-4)


def test_check_backward_reports_a_kink_as_a_point_where_f_is_not_differentiable(harness):
    needs_autodiff(harness)
    for device in ds.devices():
        near_zero = harness.tensor([0.0004, -0.0003, 0.0, 0.0007], device, "float32")
        with pytest.raises(ds.NondifferentiableError) as info:
            ds.testing.check_backward(lambda x: abs(x) + x, (near_zero,), np.ones(4))
        assert isinstance(info.value, ValueError)
        message = str(info.value)
        assert message.startswith(f"f is not differentiable where check_backward() compares input 0 (of 1: "
                                  f"{harness.name} float32 (4,) on {where(near_zero)}): at index ")
        assert "its slope is 0 just below and " in message and "Move the inputs further than 2 * eps" in message
        away = harness.tensor([0.5, -0.3, 0.2, -0.7], device, "float32")
        ds.testing.check_backward(lambda x: abs(x) + x, (away,))
        wrong = harness.custom_gradient(lambda x: abs(x) + x, lambda x, gy: (gy * 3,))
        with pytest.raises(ds.GradientMismatchError):
            ds.testing.check_backward(wrong, (away,))


def test_the_checks_name_misuse_and_say_what_to_pass(harness):
    x, y = inputs(harness, ds.devices()[-1], 2)
    checks = [ds.testing.check_backward, ds.testing.check_double_backward]
    for check in checks:
        with pytest.raises(ds.GradientFunctionError, match=r"takes the function to check first.*Pass the function "
                                                           r"first") as info:
            check(x, (x,))
        assert isinstance(info.value, TypeError) and isinstance(info.value, ds.GradientCheckUsageError)
        for keyword in ({"eps": float("nan")}, {"eps": 0}, {"eps": -1e-3}, {"eps": True}, {"rtol": -1.0},
                        {"atol": float("inf")}, {"dtype": "int32"}, {"seed": 1.5}):
            with pytest.raises(ds.GradientCheckUsageError, match=rf"{check.__name__}\({next(iter(keyword))}="):
                check(lambda x: x * 2, (x,), **keyword)
    with pytest.raises(ds.GradientCheckUsageError, match=r"numerical_grad\(eps=nan\)"):
        ds.testing.numerical_grad(lambda x: x, (x,), (np.ones((3, 2)),), eps=float("nan"))
    with pytest.raises(ds.GradientFunctionError, match=r"calls f with the 2 inputs as arguments, or, when f takes "
                                                       r"none, .*this f\(a, b, c\) cannot be called so"):
        ds.testing.numerical_grad(lambda a, b, c: a, (x, y), (np.ones((3, 2)),))
    if harness.custom_gradient(muladd_forward, muladd_backward) is None:
        return
    with pytest.raises(ds.GradientFunctionError, match=r"check_backward\(\) calls f with the 2 inputs as arguments; "
                                                       r"this f\(x\) cannot be called so"):
        ds.testing.check_backward(lambda x: x * 2, (x, y))


def test_the_checks_copy_explicitly_inside_a_guard(harness):
    needs_autodiff(harness)
    x, y, z = inputs(harness, ds.devices()[-1], 3)
    muladd = harness.custom_gradient(muladd_forward, muladd_backward)
    xp = ds.array_module(x)
    with ds.transfer_guard("log") as report:
        ds.testing.check_backward(muladd, (x, y, z))
        ds.testing.numerical_grad(muladd_forward, (x, y, z), (np.ones((3, 2)),))
        ds.testing.check_double_backward(lambda x: xp.exp(x), (x,))
    assert report.total == 0, f"devshim's own copies were not explicit:\n{report}"
    with ds.transfer_guard("disallow"):
        ds.testing.check_backward(muladd, (x, y, z))


# ------------------------------------------------------------------ check_double_backward


def cube_forward(x):
    return x * x * x


def cube_backward(x, gy):
    return (gy * 3 * x * x,)


def test_check_double_backward_passes_a_right_second_order_and_catches_a_wrong_one(harness):
    needs_autodiff(harness)
    cube = harness.custom_gradient(cube_forward, cube_backward)
    first_order_only = harness.custom_gradient(
        cube_forward, lambda x, gy: (gy * 3 * harness.stop_gradient(x) * harness.stop_gradient(x),))
    for device in ds.devices():
        x, y = inputs(harness, device, 2)
        xp = ds.array_module(x)
        ds.testing.check_double_backward(lambda x, xp=xp: xp.exp(xp.tanh(x)), (x,))
        ds.testing.check_backward(first_order_only, (x,))  # right at first order
        if not harness.custom_second_order:
            with pytest.raises(ds.NoAutodiffError, match=r"no second-order gradient for this f: its operator"):
                ds.testing.check_double_backward(cube, (x,))
            continue
        ds.testing.check_double_backward(cube, (x,))
        ds.testing.check_double_backward(harness.custom_gradient(expadd_forward, expadd_backward), (x, y))
        ds.testing.check_double_backward(lambda x, y, xp=xp: x * y * xp.sin(x), (x, y))
        with pytest.raises(ds.GradientMismatchError) as info:
            ds.testing.check_double_backward(first_order_only, (x,))
        assert str(info.value).startswith(f"The gradient of f's backward with respect to input 0 (of 1: "
                                          f"{harness.name} float32 (3, 2) on {where(x)}) differs")


def test_check_double_backward_takes_grad_outputs_and_grad_grad_inputs(harness):
    needs_autodiff(harness)
    x, = inputs(harness, ds.devices()[-1], 1)
    xp = ds.array_module(x)
    gy, ggx = np.full((3, 2), 0.5), np.full((3, 2), -1.5)
    ds.testing.check_double_backward(lambda x: xp.exp(x), (x,), (gy,), (ggx,))
    with pytest.raises(ds.GradientCheckUsageError, match=r"f returned 1 output, but grad_outputs has 2"):
        ds.testing.check_double_backward(lambda x: xp.exp(x), (x,), (ggx,), (ggx, ggx))
