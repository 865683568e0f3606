"""Chainer's own gradient-check tests (chainer/chainer, tests/chainer_tests/test_gradient_check.py),
case group by case group, held against ds.testing on every backend: NumPy, torch, JAX, TensorFlow and
MXNet where each has what a case needs, on the CPU and on each (virtual) GPU the backend has.

Chainer's cases are restated here in devshim's words; its code is not copied. Where devshim
deliberately differs from Chainer (it refuses by name where Chainer asserts, it compares every
element where Chainer compares one random direction), the test says so and why;
docs/coming-from-chainer.md lists the differences."""

from __future__ import annotations

import math

import numpy as np
import pytest

import devshim as ds

F32 = "float32"


def tensor(harness, values, device=None, dtype=F32):
    return harness.tensor(np.asarray(values, dtype=np.float64).astype(dtype).tolist(), device, dtype)


def uniform(harness, shape, seed, device=None, low=-1.0, high=1.0, dtype=F32):
    return tensor(harness, np.random.default_rng(seed).uniform(low, high, shape), device, dtype)


def last_device():
    """The device the heavier cases run on: the last GPU, real or virtual, else the CPU."""
    return ds.devices()[-1]


def needs_autodiff(harness):
    if harness.identity(1) is None:
        pytest.skip(f"{harness.name} has no autodiff: check_backward refuses it by name (NoAutodiffError)")


# ------------------------------------------------------------------ numerical gradients


def test_numerical_gradient_of_a_square_at_three_steps_in_both_forms(harness):
    """x**2 at a (2, 1) input: the numerical gradient is 2 x gy at eps 1e-2, 1e-3 and 1e-4, within 1e-3,
    whether f takes the inputs as arguments or (Chainer's form) reads the arrays it closes over."""
    for device in ds.devices():
        x, gy = uniform(harness, (2, 1), 0, device), uniform(harness, (2, 1), 1, device)
        want = 2 * harness.values(x) * harness.values(gy)
        changeable = harness.in_place_kind(x)
        for eps in (1e-2, 1e-3, 1e-4):
            gx, = ds.testing.numerical_grad(lambda x: (x * x,), (x,), (gy,), eps=eps)
            np.testing.assert_allclose(harness.values(gx), want, atol=1e-3, rtol=1e-3)
            if changeable is not None:
                gx, = ds.testing.numerical_grad(_closing_over(lambda x: x * x, changeable), (changeable,), (gy,),
                                                eps=eps)
                np.testing.assert_allclose(harness.values(gx), want, atol=1e-3, rtol=1e-3)


def test_numerical_gradient_of_a_constant_is_zero(harness):
    """An f that returns the number 1 whatever its 0-d input: the gradient is 0."""
    x = uniform(harness, (), 0, last_device())
    gx, = ds.testing.numerical_grad(lambda x: (1,), (x,), (uniform(harness, (), 1),))
    assert harness.values(gx) == 0.0


def test_numerical_gradient_of_exp_at_steps_where_no_digits_cancel(harness):
    """exp at eps 1e-2 and 1e-3 (smaller steps cancel float32's digits, as Chainer notes)."""
    x, gy = uniform(harness, (2, 1), 2, last_device()), uniform(harness, (2, 1), 3, last_device())
    for eps in (1e-2, 1e-3):
        gx, = ds.testing.numerical_grad(lambda x: (ds.array_module(x).exp(x),), (x,), (gy,), eps=eps)
        np.testing.assert_allclose(harness.values(gx), np.exp(harness.values(x)) * harness.values(gy), atol=1e-3,
                                   rtol=1e-3)


def _three_sums(x, y):
    return 2 * x + 3 * y, 4 * x + 5 * y, 6 * x + 7 * y


def test_numerical_gradient_with_two_inputs_three_outputs_and_an_output_left_out(harness):
    """Three linear outputs of two inputs: each input's gradient adds up its coefficient times each
    output's gradient; an output whose gradient is None adds nothing (Chainer: zero); all None: zero."""
    device = last_device()
    x, y = uniform(harness, (2, 1), 4, device), uniform(harness, (2, 1), 5, device)
    g = [harness.values(uniform(harness, (2, 1), seed, device)) for seed in (6, 7, 8)]
    gx, gy = ds.testing.numerical_grad(_three_sums, (x, y), tuple(g))
    np.testing.assert_allclose(harness.values(gx), 2 * g[0] + 4 * g[1] + 6 * g[2], atol=1e-2, rtol=1e-2)
    np.testing.assert_allclose(harness.values(gy), 3 * g[0] + 5 * g[1] + 7 * g[2], atol=1e-2, rtol=1e-2)
    gx, gy = ds.testing.numerical_grad(_three_sums, (x, y), (g[0], None, g[2]))
    np.testing.assert_allclose(harness.values(gx), 2 * g[0] + 6 * g[2], atol=5e-3, rtol=5e-3)
    np.testing.assert_allclose(harness.values(gy), 3 * g[0] + 7 * g[2], atol=5e-3, rtol=5e-3)
    gx, = ds.testing.numerical_grad(lambda x: (x * x,), (x,), (None,))
    assert not np.any(harness.values(gx))


# ------------------------------------------------------------------ the output that is the input


def test_an_output_that_is_the_input_or_a_view_of_it_has_the_identitys_gradient(harness):
    """Chainer's issue 488: in Chainer's form f returns the array it reads (or a view of it); each
    element is put back only after f's outputs are read, so the gradient is the identity's, never
    zero. A framework whose arrays cannot change in place (JAX) is refused by name and checked with f
    taking the input as an argument."""
    for device in ds.devices():
        x = uniform(harness, (2, 3), 9, device)
        changeable = harness.in_place_kind(x)
        for how, view in harness.views():
            shape = np.shape(harness.values(view(x)))
            gy = np.random.default_rng(10).uniform(-1, 1, shape)
            want = _scatter(view, harness, gy)
            gx, = ds.testing.numerical_grad(lambda x, view=view: (view(x),), (x,), (gy,))
            np.testing.assert_allclose(harness.values(gx), want, atol=1e-3, err_msg=f"{how}, as an argument")
            if changeable is None:
                with pytest.raises(ds.ImmutableInputError, match=r"cannot be changed in place"):
                    ds.testing.numerical_grad(_closing_over(view, x), (x,), (gy,))
                continue
            gx, = ds.testing.numerical_grad(_closing_over(view, changeable), (changeable,), (gy,))
            np.testing.assert_allclose(harness.values(gx), want, atol=1e-3, err_msg=f"{how}, closed over")
        if changeable is not None:  # Chainer's own case: the gradient output is the number 1
            gx, = ds.testing.numerical_grad(_closing_over(lambda x: x, changeable), (changeable,), (1,))
            np.testing.assert_allclose(harness.values(gx), 1.0, atol=1e-3)


def _closing_over(view, x):
    """Chainer's form: an f of no arguments that returns `view` of the `x` it closes over."""
    return lambda: (view(x),)


def _scatter(view, harness, gy):
    """Where each element of `view` of a (2, 3) array comes from, summed: the identity's gradient."""
    index = np.arange(6, dtype=np.float64).reshape(2, 3)
    picked = np.reshape(harness.values(view(harness.tensor(index.tolist(), None, F32))), -1)
    found = np.zeros(6)
    np.add.at(found, picked.astype(int), np.reshape(gy, -1))
    return found.reshape(2, 3)


def test_numerical_gradient_of_a_piecewise_function_is_exact_at_three_steps(harness):
    """f is x on (-1, 1), 2x on (-2, 2) beyond that, and 0 further out; at x = 0 with gy = 1 the
    central difference is exactly 1 at eps 0.5, 2 at eps 1.5 and 0 at eps 2.5."""
    x = tensor(harness, 0.0, last_device())

    def piecewise(x):
        xp = ds.array_module(x)
        size = xp.abs(x)
        return (xp.where(size < 1, x, xp.where(size < 2, 2 * x, 0 * x)),)

    for eps, want in ((0.5, 1.0), (1.5, 2.0), (2.5, 0.0)):
        gx, = ds.testing.numerical_grad(piecewise, (x,), (1.0,), eps=eps)
        assert harness.values(gx) == want


def test_an_eps_that_is_no_step_is_refused_by_name(harness):
    """Chainer asserts eps > 0 (an AssertionError); devshim raises GradientCheckUsageError (a
    ValueError) naming eps and what to pass: a wrong argument, not a failed check."""
    x = uniform(harness, (2, 1), 0)
    for eps in (0, -1.0):
        with pytest.raises(ds.GradientCheckUsageError, match=rf"numerical_grad\(eps={eps!r}\): eps is the step"):
            ds.testing.numerical_grad(lambda x: (x * x,), (x,), (np.ones((2, 1)),), eps=eps)


def test_inputs_on_different_devices_are_taken_each_where_it_is(harness):
    """Chainer refuses CPU and GPU arrays mixed in one numerical_grad (RuntimeError). devshim copies
    each input where it is and reads every output explicitly, so they may be mixed: each gradient
    comes back on its own input's device. The function decides whether it can mix them."""
    first, last = ds.devices()[0], last_device()
    x, y = uniform(harness, (2,), 0, first), uniform(harness, (2,), 1, last)
    gx, gy = ds.testing.numerical_grad(lambda x, y: (x * 3, y * 2), (x, y), (np.ones(2), np.ones(2)))
    assert ds.neutral_device(gx) == ds.neutral_device(x) and ds.neutral_device(gy) == ds.neutral_device(y)
    np.testing.assert_allclose(harness.values(gx), 3.0, rtol=1e-3)
    np.testing.assert_allclose(harness.values(gy), 2.0, rtol=1e-3)


# ------------------------------------------------------------------ non-differentiable points

EPS = 1e-3


def _zero(x, xp):
    return xp.zeros_like(x)


def _linear(x, xp):
    return 2 * x


def _quadratic(x, xp):
    return x * x + 2.0


def _cubic(x, xp):
    return -3 * x * x * x + 2 * x * x + 1


def _absolute(x, xp):
    return xp.abs(x)


def _step(x, xp):
    return xp.where(x > 0, xp.ones_like(x), xp.zeros_like(x))


def _clip(x, xp):
    return xp.clip(x, 0.0, 1.0)


def _floor(x, xp):
    return xp.floor(x)


def _exp(x, xp):
    return xp.exp(x)


def _log(x, xp):
    return xp.log(x)


def _tan(x, xp):
    return xp.tan(x)


def _nan_between(x, xp):
    """1 outside (-1, 1), NaN inside."""
    return xp.where((x > -1) & (x < 1), xp.full_like(x, float("nan")), xp.ones_like(x))


_NORMAL = np.random.default_rng(488)
#: (function, x, eps, whether f has no derivative there): Chainer's table of points, with its verdicts.
#: None as eps is the default. "domain": not differentiable in Chainer's verdict, and x lies where f has no
#: finite value (so no numerical gradient to compare).
TABLE = [
    (_zero, [-100.0], None, False), (_zero, [100.0], None, False), (_zero, [0.0], None, False),
    (_zero, [EPS / 10], None, False), (_zero, _NORMAL.normal(size=(3, 2)), None, False),
    (_zero, _NORMAL.normal(size=()), None, False),
    (_linear, [-100.0], None, False), (_linear, [100.0], None, False), (_linear, [0.0], None, False),
    (_linear, _NORMAL.normal(size=(3, 2)), None, False), (_linear, _NORMAL.normal(size=()), None, False),
    (_linear, [np.inf], None, "domain"),
    (_quadratic, [-100.0], None, False), (_quadratic, [100.0], None, False), (_quadratic, [0.0], None, False),
    (_cubic, [-100.0], None, False), (_cubic, [100.0], None, False), (_cubic, [0.0], None, False),
    (_cubic, [0.0], 1e-1, True),  # a step so wide the cubic term shows
    (_absolute, [0.0], None, True), (_absolute, [[3, 1], [0, 2]], None, True),
    (_absolute, [EPS * 0.8], None, True), (_absolute, [-EPS * 0.8], None, True),
    (_absolute, [EPS * 1.2], None, False), (_absolute, [-EPS * 1.2], None, False),
    (_absolute, [100.0], None, False), (_absolute, [-100.0], None, False),
    (_step, [0.0], None, True), (_step, [EPS * 0.8], None, True), (_step, [-EPS * 0.8], None, True),
    (_step, [EPS * 1.2], None, False), (_step, [-EPS * 1.2], None, False), (_step, [100.0], None, False),
    (_step, [-100.0], None, False),
    (_clip, [0.0], None, True), (_clip, [1.0], None, True), (_clip, [0.5], None, False),
    (_floor, [0.0], None, True), (_floor, [100 + EPS * 0.8], None, True), (_floor, [100 - EPS * 0.8], None, True),
    (_floor, [100 + EPS * 1.2], None, False), (_floor, [100 - EPS * 1.2], None, False),
    (_exp, [-100.0], None, False), (_exp, [0.0], None, False), (_exp, [13.0], None, False),
    (_log, [100.0], None, False), (_log, [1e-3], 1e-6, False),  # a steep slope needs a small step
    (_log, [0.0], None, True), (_log, [-10.0], None, "domain"),
    (_tan, [EPS * 1.2], None, False), (_tan, [EPS * 0.8], None, False),
    (_tan, [math.pi / 2], None, True), (_tan, [-math.pi / 2], None, True), (_tan, [3 * math.pi / 2], None, True),
    (_tan, [3 * math.pi / 2 + EPS * 0.8], None, True), (_tan, [3 * math.pi / 2 - EPS * 0.8], None, True),
    (_tan, [3 * math.pi / 2 + 1e-3], 1e-6, False), (_tan, [3 * math.pi / 2 - 1e-3], 1e-6, False),
    (_nan_between, [0.0], None, "domain"), (_nan_between, [-1.0], None, True), (_nan_between, [1.0], None, True),
]


def _rows():
    return [pytest.param(row, id=f"{row[0].__name__[1:]}-{np.asarray(row[1]).ravel()[:2].tolist()}-{row[2]}")
            for row in TABLE]


def _row_inputs(harness, row, outputs: int, seed: int):
    function, values, eps, _ = row
    x = tensor(harness, values, last_device())
    shape = np.shape(np.asarray(values))
    gys = tuple(np.random.default_rng((seed, i)).uniform(-1, 1, shape).astype(np.float32) for i in range(outputs))

    def f(x):
        return (function(x, ds.array_module(x)),) * outputs

    return x, gys, f, EPS if eps is None else eps


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("row", _rows())
def test_nondifferentiable_points_are_found_as_chainer_finds_them(harness, row):
    """numerical_grad(..., detect_nondifferentiable=True) at each point of Chainer's table, in float32,
    with one output and with two: NondifferentiableError exactly where Chainer's verdict is True
    (kinks, steps, infinite slopes, values that stop being finite); no error elsewhere, exp at -100
    (a subnormal result) and points outside a function's domain included."""
    for outputs in (1, 2):
        x, gys, f, eps = _row_inputs(harness, row, outputs, seed=outputs)
        if row[3] is True:
            with pytest.raises(ds.NondifferentiableError, match=r"f is not differentiable at element \(.*\) of input 0 \(of 1: "):
                ds.testing.numerical_grad(f, (x,), gys, eps=eps, detect_nondifferentiable=True)
        else:
            ds.testing.numerical_grad(f, (x,), gys, eps=eps, detect_nondifferentiable=True)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("row", _rows())
def test_check_backward_finds_the_same_points(harness, row):
    """check_backward of each of the table's functions (the framework's own operations) at each point:
    with detect_nondifferentiable=True, NondifferentiableError exactly where Chainer's verdict is True;
    with or without it, no failure where f is differentiable. The points outside a function's domain
    (log at -10, 2x at inf) have no finite value, so no numerical gradient to compare: there
    check_backward fails with GradientMismatchError, as Chainer's does, and never calls it a kink."""
    needs_autodiff(harness)
    x, gys, f, eps = _row_inputs(harness, row, 1, seed=3)
    if row[3] is True:
        with pytest.raises(ds.NondifferentiableError, match=r"f is not differentiable at element \(.*\) of input 0 "):
            ds.testing.check_backward(f, (x,), gys, eps=eps, detect_nondifferentiable=True)
    elif row[3] == "domain":
        with pytest.raises(ds.GradientMismatchError):
            ds.testing.check_backward(f, (x,), gys, eps=eps, detect_nondifferentiable=True)
    else:
        ds.testing.check_backward(f, (x,), gys, eps=eps, detect_nondifferentiable=True)
        ds.testing.check_backward(f, (x,), gys, eps=eps)


# ------------------------------------------------------------------ assert_allclose


def test_assert_allclose_at_the_edges_of_atol_and_rtol(harness):
    """Identical values pass with no tolerance at all; a difference passes an atol (rtol 0) above the
    greatest absolute difference and fails one just below it; likewise rtol (atol 0) and the greatest
    relative difference, for values in [1, 2). Chainer takes the edges 1 below and 1 above, which for
    values in [-1, 1) makes the lower one negative: devshim refuses a negative tolerance by name
    (ToleranceError, a ValueError), so here the lower edge is just below the difference."""
    for device in ds.devices():
        for seed in range(5):
            x, y = uniform(harness, (2, 3), seed, device), uniform(harness, (2, 3), seed + 10, device)
            ds.testing.assert_allclose(x, x, atol=0, rtol=0)
            most = float(np.max(np.abs(harness.values(x).astype(np.float64) - harness.values(y))))
            with pytest.raises(AssertionError):
                ds.testing.assert_allclose(x, y, atol=most * (1 - 1e-6), rtol=0)
            ds.testing.assert_allclose(x, y, atol=most + 1, rtol=0)
            z = uniform(harness, (2, 3), seed + 20, device, low=1.0, high=2.0)
            wide_z = harness.values(z).astype(np.float64)
            ratio = float(np.max(np.abs(harness.values(x) - wide_z) / wide_z))
            with pytest.raises(AssertionError):
                ds.testing.assert_allclose(x, z, atol=0, rtol=ratio * (1 - 1e-6))
            ds.testing.assert_allclose(x, z, atol=0, rtol=ratio + 1)
    with pytest.raises(ds.ToleranceError, match=r"assert_allclose\(atol=-0\.5\)"):
        ds.testing.assert_allclose(x, y, atol=-0.5, rtol=0)


# ------------------------------------------------------------------ check_backward


@pytest.mark.parametrize("dtype", [None, "float32", "float64"])
def test_check_backward_of_several_outputs(harness, dtype):
    """f(x, y) = (s, u): s and t the identity's two outputs (the framework's own custom-gradient
    function), u the identity of t; given gradients for both, with atol 1e-4 and rtol 1e-3."""
    needs_autodiff(harness)
    if dtype == "float64" and not _has_float64(harness):
        dtype = None
    identity2, identity1 = harness.identity(2), harness.identity(1)
    for device in ds.devices():
        x1, x2, g1, g2 = (tensor(harness, [1.0], device) for _ in range(4))

        def f(x, y):
            s, t = identity2(x, y)
            return s, identity1(t)

        ds.testing.check_backward(f, (x1, x2), (g1, g2), dtype=dtype, atol=1e-4, rtol=1e-3)


def _has_float64(harness) -> bool:
    """Whether the framework makes float64 arrays here (JAX only with jax_enable_x64)."""
    if "float64" not in harness.dtypes:
        return False
    return harness.dtype_name(harness.tensor([1.0], None, "float64")) == "float64"


@pytest.mark.parametrize("dtype", [None, "float32", "float64"])
def test_check_backward_passes_integer_inputs_as_they_are(harness, dtype):
    """An integer input gets no gradient and is not checked; f receives it as an integer array, even
    where dtype casts the floating inputs of the numerical pass."""
    needs_autodiff(harness)
    if dtype == "float64" and not _has_float64(harness):
        dtype = None
    identity = harness.identity(1)
    x1, g1 = tensor(harness, [1.0]), tensor(harness, [1.0])
    x2 = harness.tensor([0, 1], None, "int32")
    seen = []

    def f(x, y):
        seen.append(harness.dtype_name(y))
        return (identity(x),)

    ds.testing.check_backward(f, (x1, x2), (g1,), dtype=dtype)
    assert seen and set(seen) == {"int32"}


def test_no_grads_requires_the_backward_to_give_no_gradient(harness):
    """f(x, y) = x + y with y's gradient stopped. With no_grads=[True, True] neither is checked, and the
    gradient the backward computes for x is an error: Chainer raises RuntimeError, devshim
    GradientMismatchError (an AssertionError: a backward that does not keep to no_grads is a failed
    check, and the message says which input and what to do). With no_grads=[False, False] y's
    numerical gradient is 1 where the backward gives none: a mismatch, as in Chainer."""
    needs_autodiff(harness)
    x1, x2, g1 = tensor(harness, [2.0]), tensor(harness, [3.0]), tensor(harness, [5.0])

    def f(x, y):
        return (x + harness.stop_gradient(y),)

    with pytest.raises(ds.GradientMismatchError, match=r"The gradient of input 0 \(of 2: .*\) should be none: "
                                                       r"no_grads leaves that input out"):
        ds.testing.check_backward(f, (x1, x2), (g1,), no_grads=[True, True])
    with pytest.raises(ds.GradientMismatchError, match=r"The gradient of input 1 \(of 2"):
        ds.testing.check_backward(f, (x1, x2), (g1,), no_grads=[False, False])
    ds.testing.check_backward(f, (x1, x2), (g1,), no_grads=[False, True])
    with pytest.raises(ds.GradientCheckUsageError, match=r"no_grads has one bool per input \(2 here\)"):
        ds.testing.check_backward(f, (x1, x2), (g1,), no_grads=[True])


@pytest.mark.parametrize("dtype", [None, "float32", "float64"])
def test_no_grads_with_a_dtype_casts_the_skipped_input_too(harness, dtype):
    """f uses x only; y is left out by no_grads. Where dtype is given, every call of the numerical pass
    sees both x and y in it, as in Chainer (the skipped floating input is cast too)."""
    needs_autodiff(harness)
    if dtype == "float64" and not _has_float64(harness):
        dtype = None
    identity = harness.identity(1)
    x1, x2, g1 = tensor(harness, [1.0]), tensor(harness, [1.0]), tensor(harness, [1.0])
    seen = []

    def f(x, y):
        seen.append((harness.dtype_name(x), harness.dtype_name(y)))
        return (identity(x),)

    ds.testing.check_backward(f, (x1, x2), (g1,), eps=1e-3, no_grads=[False, True], dtype=dtype)
    if dtype is not None:
        assert (dtype, dtype) in seen


@pytest.mark.parametrize("dtype", [None, "float32", "float64"])
@pytest.mark.parametrize("size", [3, 1])
def test_grad_outputs_of_none_leave_an_output_out(harness, dtype, size):
    """The identity of two inputs, checked with both output gradients, and with either one None (that
    output is left out of both passes: its backward gets a zero, as in Chainer's None convention)."""
    needs_autodiff(harness)
    if dtype == "float64" and not _has_float64(harness):
        dtype = None
    identity2 = harness.identity(2)
    x1, x2 = tensor(harness, np.arange(size)), tensor(harness, np.arange(size))
    g1, g2 = tensor(harness, np.ones(size)), tensor(harness, np.ones(size))
    for gys in ((g1, g2), (g1, None), (None, g2)):
        ds.testing.check_backward(lambda x, y: identity2(x, y), (x1, x2), gys, dtype=dtype, atol=1e-2, rtol=1e-2)


def test_a_broken_backward_fails(harness):
    """x * x whose backward returns 3 x gy: an AssertionError (GradientMismatchError), on every device."""
    needs_autodiff(harness)
    broken = harness.custom_gradient(lambda x: x * x, lambda x, gy: (3 * x * gy,))
    for device in ds.devices():
        x, gy = uniform(harness, (2, 3), 0, device), uniform(harness, (2, 3), 1, device)
        with pytest.raises(AssertionError) as info:
            ds.testing.check_backward(broken, x, gy)
        assert isinstance(info.value, ds.GradientMismatchError)


@pytest.mark.parametrize("shape", [(2, 3), (2, 0)])
def test_a_backward_with_a_wrong_number_of_gradients_is_the_frameworks_error(harness, shape):
    """A backward that returns two gradients for one input. Chainer raises ValueError; every framework
    here refuses it itself, with its own error, which devshim lets through unchanged (it is the
    backward's own fault, and the framework names it best), a 0-size input included. A right backward
    of a 0-size input passes."""
    needs_autodiff(harness)
    if 0 in shape and not harness.runs_backward_of_empty:
        pytest.skip(f"{harness.name} does not raise a custom backward's error on a 0-size input (it prints it and "
                    f"goes on), and its next custom backward in the process then fails: not run here")
    x, gy = uniform(harness, shape, 0), uniform(harness, shape, 1)
    broken = harness.custom_gradient(lambda x: x * x, lambda x, gy: (2 * x * gy, 3 * x * gy))
    with pytest.raises(Exception, match=harness.wrong_gradient_count) as info:
        ds.testing.check_backward(broken, x, gy)
    assert not isinstance(info.value, ds.DevshimError)
    ds.testing.check_backward(harness.custom_gradient(lambda x: x * x, lambda x, gy: (2 * x * gy,)), x, gy)


def test_every_element_is_compared_not_one_random_direction(harness):
    """Chainer compares the gradients along one random unit direction (its _sample_unit_vector); devshim
    compares every element, so a backward wrong in one element of 64 fails, naming that element."""
    needs_autodiff(harness)
    values = np.random.default_rng(0).uniform(-1, 1, 64)
    values[17] = 2.0  # the one element the backward gets wrong: the only one above 1.5
    x = tensor(harness, values, last_device())
    xp = ds.array_module(x)

    def doubled_at_17(x, gy):
        xp = ds.array_module(x)
        return (2 * x * gy * xp.where(x > 1.5, x * 0 + 2, x * 0 + 1),)

    wrong = harness.custom_gradient(lambda x: x * x, doubled_at_17)
    with pytest.raises(ds.GradientMismatchError, match=r"mismatched elements: 1 / 64\n.*at index \(17,\)"):
        ds.testing.check_backward(wrong, (x,), (xp.ones_like(x),))


def test_check_backward_with_params(harness):
    """Chainer's check_backward(link, x, gy, (link.W, link.b)): f reads w and b itself; their gradients
    are checked with the inputs', a wrong one named as a param. The numerical pass changes them in
    place and puts them back. JAX arrays cannot be changed in place: refused by name."""
    needs_autodiff(harness)
    device = last_device()
    x, gy = uniform(harness, (2, 3), 0, device), uniform(harness, (2, 3), 1, device)
    w_values, b_values = uniform(harness, (2, 3), 2, device), uniform(harness, (2, 3), 3, device)
    w, b = harness.in_place_kind(w_values), harness.in_place_kind(b_values)
    if w is None:
        with pytest.raises(ds.ImmutableInputError, match=r"check_backward\(\)'s params are changed in place.*param 0"):
            ds.testing.check_backward(lambda x: x * w_values + b_values, x, gy, (w_values, b_values))
        return
    before = harness.values(w).copy()
    ds.testing.check_backward(lambda x: x * w + b, x, gy, (w, b))
    np.testing.assert_array_equal(harness.values(w), before)
    with pytest.raises(ds.GradientMismatchError, match=r"The gradient of param 1 \(of 2: "):
        ds.testing.check_backward(lambda x: x * w + harness.stop_gradient(b), x, gy, (w, b))


# ------------------------------------------------------------------ check_double_backward


def test_check_double_backward_of_several_inputs_and_outputs(harness):
    """f(x, y) = ((x + y)**2, (x + 2y)**2) with all-ones inputs and gradients, numerically in float64
    where the framework has it, atol and rtol 1e-3. MXNet differentiates few operators twice (not
    `*`), and says so by name."""
    needs_autodiff(harness)
    dtype = "float64" if _has_float64(harness) else None
    for device in ds.devices():
        x1, x2, gy1, gy2, ggx1, ggx2 = (tensor(harness, np.ones((2, 3)), device) for _ in range(6))

        def f(x, y):
            w1 = x + y
            w2 = w1 + y
            return w1 * w1, w2 * w2

        if not harness.custom_second_order:
            with pytest.raises(ds.NoAutodiffError, match=r"no second-order gradient for this f"):
                ds.testing.check_double_backward(f, (x1, x2), (gy1, gy2), (ggx1, ggx2), dtype=dtype)
            continue
        ds.testing.check_double_backward(f, (x1, x2), (gy1, gy2), (ggx1, ggx2), dtype=dtype, atol=1e-3, rtol=1e-3)


def test_check_double_backward_with_params(harness):
    """f(x) = x * w, w a tensor f reads itself (a parameter), given as params with its own gradient of
    the first-order gradient (params_grad_grad); all ones. JAX arrays cannot be changed in place, which
    params needs: refused by name (pass w among the inputs instead)."""
    needs_autodiff(harness)
    x, gy, ggx, w_values, ggw = (tensor(harness, np.ones((2, 3)), last_device()) for _ in range(5))
    w = harness.in_place_kind(w_values)
    if w is None:
        with pytest.raises(ds.ImmutableInputError, match=r"check_double_backward\(\)'s params are changed in place"):
            ds.testing.check_double_backward(lambda x: x * w_values, x, gy, ggx, w_values, ggw)
        return

    def f(x):
        return x * w

    if not harness.custom_second_order:
        with pytest.raises(ds.NoAutodiffError, match=r"no second-order gradient"):
            ds.testing.check_double_backward(f, x, gy, ggx, w, ggw, atol=1e-3, rtol=1e-3)
        return
    ds.testing.check_double_backward(f, x, gy, ggx, w, ggw, atol=1e-3, rtol=1e-3)
    with pytest.raises(ds.GradientMismatchError, match=r"f's backward with respect to param 0 \(of 1"):
        ds.testing.check_double_backward(lambda x: x * harness.stop_gradient(w), x, gy, ggx, w, ggw)
