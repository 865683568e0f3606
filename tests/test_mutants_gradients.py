"""`ds.testing`'s gradient checks and `assert_allclose`: what the mutation env (`tox -e mutation`,
tools/mutation.py) found no test holding them to.

- The words of each refusal: which function refused (`numerical_grad`, `check_backward`,
  `check_double_backward`), which input or output, and what to pass instead.
- `check_double_backward`'s own arguments: the draws of `seed` (the first-order gradients with
  `seed`, the second-order ones with `(seed, 1)`), `detect_nondifferentiable`, `no_grads`,
  `grad_outputs`, `params_grad_grad`, and the backward's gradient outputs named `grad_outputs`
  in its messages; the branch that holds them constant (MXNet's), taken here with torch.
- What a non-differentiable point reads as: the slopes on either side, a value that stops being
  finite, the output and the element named.
- The comparison's texts: a gradient `no_grads` forbids, a mismatch beside kinks, kinks alone.
- How many elements an `f` that changed its input in place changed.
- dtypes named by an object's `name`, a dotted path, or ml_dtypes' names.
- `assert_allclose`'s greatest difference where a side is NaN, and no warning for a zero desired.
- `ds.testing.virtual_devices`' checks of its count.

NumPy values where the code under test is framework-neutral, so each holds on any machine;
torch (CPU tensors, float64) where an autodiff is needed, skipped where torch is absent."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import devshim as ds
from devshim import settings
from devshim.testing._values import float_dtype
from devshim.testing.allclose import mismatch


@pytest.fixture(name="torch")
def torch_fixture():
    """torch, for the checks that need an autodiff (imported by the tests that use it)."""
    return pytest.importorskip("torch")


def _raised(error, function, *args, **kwargs) -> str:
    with pytest.raises(error) as raised:
        function(*args, **kwargs)
    return str(raised.value)


def _f64(torch, values):
    return torch.tensor(values, dtype=torch.float64)


# ------------------------------------------------------------------ which function refused


@pytest.mark.parametrize("name", ["numerical_grad", "check_backward", "check_double_backward"])
def test_a_function_that_cannot_be_called_is_refused_by_the_check_it_was_given_to(name):
    """Each check names itself, and how to call it, when `f` is no function (before any input is read)."""
    check = getattr(ds.testing, name)
    args = (np.ones(1),) if name == "numerical_grad" else ()
    assert _raised(ds.GradientFunctionError, check, 5, (np.ones(1),), *args) == (
        f"{name}() takes the function to check first, then its inputs; f is a builtins.int, which cannot be "
        f"called. Pass the function first: {name}(f, (x, y)).")


def test_numerical_grad_names_itself_for_an_input_that_is_no_tensor():
    assert _raised(ds.GradientCheckUsageError, ds.testing.numerical_grad, lambda a: a, ("a",), (np.ones(1),)) == (
        "numerical_grad() input 0 is a builtins.str, not a tensor. Pass the tensors to differentiate by; close "
        "over anything else (lambda x: f(x, other)).")


def test_numerical_grad_says_f_takes_the_inputs_or_none_when_it_takes_neither():
    assert _raised(ds.GradientFunctionError, ds.testing.numerical_grad, lambda a, b: a, (np.ones(2),),
                   (np.ones(2),)) == (
        "numerical_grad() calls f with the 1 input as arguments, or, when f takes none, changes the inputs f "
        "closes over in place; this f(a, b) cannot be called so. Pass one input per argument of f, in order "
        "(close over the others: lambda x: f(x, other)), or write f to take the inputs: lambda x, y: ...")


def test_chainers_form_on_a_read_only_array_is_refused_saying_why_and_how_to_do_without():
    """f that closes over its input needs it writable: a read-only NumPy array is refused, not changed."""
    x = np.array([1.0, 2.0])
    x.flags.writeable = False
    assert _raised(ds.ImmutableInputError, ds.testing.numerical_grad, lambda: x * 2.0, (x,), (np.ones(2),)) == (
        "When f takes no arguments (it reads the arrays it closes over), numerical_grad()'s inputs are changed "
        "in place, an element at a time, since f reads them itself, but input 0 (numpy float64 (2,) on cpu:0) "
        "cannot be changed in place. Write f to take the inputs as arguments instead: numerical_grad(lambda "
        "*xs: ..., inputs, grad_outputs).")


def test_chainers_form_gives_the_gradient_of_the_arrays_f_closes_over():
    """f taking no arguments is called as it is, with its own array moved an element at a time."""
    x = np.array([1.0, 2.0])
    gx, = ds.testing.numerical_grad(lambda: x * x, (x,), (np.ones(2),))
    np.testing.assert_allclose(gx, [2.0, 4.0], rtol=1e-6)
    assert x.tolist() == [1.0, 2.0]


# ------------------------------------------------------------------ non-differentiable points


def test_a_kink_found_by_numerical_grad_names_the_option_the_element_and_both_slopes():
    """abs at 0: slope -1 below, 1 above, and f's five values, from numerical_grad(detect_nondifferentiable=True)."""
    text = _raised(ds.NondifferentiableError, ds.testing.numerical_grad, np.abs, (np.array([0.0, 1.0]),),
                   (np.ones(2),), detect_nondifferentiable=True)
    assert text == (
        "f is not differentiable at element (0,) (value 0) of input 0 (of 1: numpy float64 (2,) on cpu:0), where "
        "numerical_grad(detect_nondifferentiable=True) looked at it over eps=0.001: its slope is -1 just below and "
        "1 just above, in f's value at index (0,) (f there: 0.001 at -0.001, 0.0005 at -0.0005, 0 at 0, 0.0005 at "
        "0.0005, 0.001 at 0.001): a kink, a step or an infinite slope. No central difference there is a "
        "derivative. Move the input further than eps from such a point, or pass a smaller eps.")


def test_a_kink_in_one_output_of_several_names_that_output():
    text = _raised(ds.NondifferentiableError, ds.testing.numerical_grad, lambda a: (a * 2.0, np.abs(a)),
                   (np.array([0.0]),), (np.ones(1), np.ones(1)), detect_nondifferentiable=True)
    assert "its slope is -1 just below and 1 just above, in f's value of output [1] at index (0,) (f there:" in text


def test_a_value_that_stops_being_finite_is_named_at_its_own_element():
    """log near 0: x - eps is negative, so f is NaN there; the element is the second, not the first."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # log of a negative number, NumPy's own warning
        text = _raised(ds.NondifferentiableError, ds.testing.numerical_grad, np.log, (np.array([1.0, 0.0006]),),
                       (np.ones(2),), detect_nondifferentiable=True)
    assert text.startswith(
        "f is not differentiable at element (1,) (value 0.0006) of input 0 (of 1: numpy float64 (2,) on cpu:0), "
        "where numerical_grad(detect_nondifferentiable=True) looked at it over eps=0.001: f's value at index (1,) "
        "is finite at some of the points around it and not at others (f there: nan at -0.0004, ")
    assert text.endswith("): it has no derivative there. No central difference there is a derivative. Move the "
                         "input further than eps from such a point, or pass a smaller eps.")


# ------------------------------------------------------------------ the outputs and their gradients


def test_a_gradient_given_for_an_output_that_is_no_tensor_is_refused():
    assert _raised(ds.GradientCheckUsageError, ds.testing.numerical_grad, lambda a: (a * 2.0, "tag"),
                   (np.ones(2),), (np.ones(2), 1.0)) == (
        "grad_outputs gives a gradient for output [1] of f, which is no tensor: it has no gradient. Pass None "
        "for it.")


def test_a_grad_output_that_is_no_tensor_is_named_as_grad_outputs():
    text = _raised(ds.NotATensorError, ds.testing.numerical_grad, lambda a: a * 2.0, (np.ones(2),), ("many",))
    assert text.startswith("grad_outputs() expects a tensor of an installed framework")


def test_a_none_where_f_returned_an_empty_part_is_matched_by_position():
    """f returns (y, None) and grad_outputs (gy, None): the None faces the empty part, gy faces y."""
    gx, = ds.testing.numerical_grad(lambda a: (a * 3.0, None), (np.array([1.0, 2.0]),), (np.ones(2), None))
    np.testing.assert_allclose(gx, [3.0, 3.0], rtol=1e-9)


def test_a_number_f_returns_takes_a_gradient_and_adds_nothing(torch):
    """A constant output is left out of the autodiff's pass, so check_backward still passes."""
    ds.testing.check_backward(lambda a: (a * 2.0, 1.5), (_f64(torch, [1.0, 2.0]),),
                              grad_outputs=(np.ones(2), 1.0))


# ------------------------------------------------------------------ check_backward's comparison


def _half_backward(torch):
    """x * x whose backward is half the true one: a wrong first order."""

    class Half(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, gy):
            x, = ctx.saved_tensors
            return gy * x

    return Half.apply


def test_check_backward_draws_its_grad_outputs_with_seed_0_by_default(torch):
    """The message (its numbers come from the drawn gradient) is seed 0's, and seed 1's differs."""
    f, x = _half_backward(torch), _f64(torch, [0.5, 1.5])
    default = _raised(ds.GradientMismatchError, ds.testing.check_backward, f, (x,))
    assert default == _raised(ds.GradientMismatchError, ds.testing.check_backward, f, (x,), seed=0)
    assert default != _raised(ds.GradientMismatchError, ds.testing.check_backward, f, (x,), seed=1)


def test_a_gradient_that_no_grads_forbids_is_counted_in_the_singular(torch):
    """x * y with y left out: y's gradient is x * gy, one nonzero element of two."""
    text = _raised(ds.GradientMismatchError, ds.testing.check_backward, lambda a, b: a * b,
                   (_f64(torch, [0.0, 2.0]), _f64(torch, [1.0, 1.0])), (np.ones(2),), no_grads=(False, True))
    assert text == (
        "The gradient of input 1 (of 2: torch float64 (2,) on cpu:0) should be none: no_grads leaves that input "
        "out, and Chainer's rule is that f's backward then gives it no gradient (None, or zeros), but the autodiff "
        "gave 1 nonzero element of 2 (greatest magnitude 2). Stop the gradient in f where that input is used "
        "(x.detach(), jax.lax.stop_gradient, tf.stop_gradient), or pass False for it in no_grads to check its "
        "gradient.")


def test_a_gradient_that_no_grads_forbids_is_counted_in_the_plural(torch):
    text = _raised(ds.GradientMismatchError, ds.testing.check_backward, lambda a, b: a * b,
                   (_f64(torch, [2.0, 0.0, 5.0]), _f64(torch, [1.0, 1.0, 1.0])), (np.ones(3),),
                   no_grads=(False, True))
    assert "but the autodiff gave 2 nonzero elements of 3 (greatest magnitude 5)." in text


def _relu_with_backward(torch, scale: float):
    """relu whose backward is `scale` times the step: at 0 the central difference is 0.5, a kink."""

    class Relu(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return torch.clamp(x, min=0.0)

        @staticmethod
        def backward(ctx, gy):
            x, = ctx.saved_tensors
            return gy * (x > 0).to(gy.dtype) * scale

    return Relu.apply


def test_a_wrong_gradient_beside_a_kink_says_how_many_of_its_elements_are_kinks(torch):
    """relu whose backward is 1.2 times the step: 0.5 apart at the kink (looked at first: the
    greatest), 0.2 at 1 (wrong)."""
    text = _raised(ds.GradientMismatchError, ds.testing.check_backward, _relu_with_backward(torch, 1.2),
                   (_f64(torch, [0.0, 1.0]),), (np.ones(2),))
    lines = text.split("\n")
    assert lines[0].startswith("The gradient of input 0 (of 1: torch float64 (2,) on cpu:0) differs from the "
                               "numerical gradient (central differences, eps=0.001)")
    assert lines[1:3] == ["  mismatched elements: 2 / 2",
                          "  greatest absolute difference: 0.5 at index (0,) (autodiff 0.0, numerical 0.5)"]
    assert lines[3].startswith("  greatest relative difference: 1 at index (0,) (autodiff 0.0, numerical 0.5)")
    assert lines[4:] == ["  (1 of the elements that differ lie where f is not differentiable.)"]


def test_one_kink_alone_is_reported_without_a_count_of_others(torch):
    text = _raised(ds.NondifferentiableError, ds.testing.check_backward, _relu_with_backward(torch, 1.0),
                   (_f64(torch, [0.0, 1.0]),), (np.ones(2),))
    assert text.startswith("f is not differentiable where check_backward() compares input 0 (of 1: torch float64 "
                           "(2,) on cpu:0): at index (0,) (value 0) its slope is 0 just below and 1 just above")
    assert text.endswith(
        "So the central difference there (0.5) is no derivative to compare with the autodiff's 0; neither is "
        "wrong. Move the inputs further than 2 * eps from such a point (relu and abs at 0, max where its "
        "arguments tie, a step, a pole), or pass a smaller eps.")


def test_two_kinks_are_reported_with_the_others_looked_at_and_the_count_in_all(torch):
    text = _raised(ds.NondifferentiableError, ds.testing.check_backward, _relu_with_backward(torch, 1.0),
                   (_f64(torch, [0.0, 0.0, 1.0]),), (np.ones(3),))
    assert ("neither is wrong. So are the other 1 elements looked at (2 differ in all). Move the inputs further"
            in text)


# ------------------------------------------------------------------ check_double_backward


def _flat_cube(torch):
    """x**3 whose backward holds x constant: its second order is wrong (0 instead of 6 x gy)."""

    class FlatCube(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, gy):
            x, = ctx.saved_tensors
            return gy * 3.0 * x.detach() ** 2

    return FlatCube.apply


def _draw(seed: tuple, shape) -> np.ndarray:
    """A gradient as the checks draw one for the first output: uniform in [-1, 1), seeded `(*seed, 0)`."""
    return np.random.default_rng((*seed, 0)).uniform(-1.0, 1.0, size=shape)


@pytest.mark.parametrize("seed", [None, 3])
def test_check_double_backward_draws_grad_outputs_with_seed_and_grad_grads_with_seed_and_1(torch, seed):
    """Drawn (seed 0 by default) or given as the same numbers: one verdict, to the last digit."""
    f, x = _flat_cube(torch), _f64(torch, [0.5, 1.5])
    drawn_with = 0 if seed is None else seed
    given = _raised(ds.GradientMismatchError, ds.testing.check_double_backward, f, (x,),
                    grad_outputs=(_draw((drawn_with,), 2),), grad_grad_inputs=(_draw((drawn_with, 1), 2),))
    options = {} if seed is None else {"seed": seed}
    assert _raised(ds.GradientMismatchError, ds.testing.check_double_backward, f, (x,), **options) == given


def test_check_double_backward_differentiates_grad_outputs_under_that_name(torch):
    """x * x whose backward holds gy constant: the gradient by the backward's second argument is wrong."""

    class FlatGy(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, gy):
            x, = ctx.saved_tensors
            return gy.detach() * 2.0 * x

    text = _raised(ds.GradientMismatchError, ds.testing.check_double_backward, FlatGy.apply,
                   (_f64(torch, [0.5, 1.5]),))
    assert text.startswith("The gradient of f's backward with respect to grad_outputs 0 (of 1: torch float64 (2,) "
                           "on cpu:0) differs from the numerical gradient")


def test_check_double_backward_looks_for_kinks_only_when_asked(torch):
    """x * |x|: its backward 2|x| has a kink at 0 where both gradients are 0, so they agree."""
    x = _f64(torch, [0.0, 1.0])
    ds.testing.check_double_backward(lambda a: a * torch.abs(a), (x,))
    text = _raised(ds.NondifferentiableError, ds.testing.check_double_backward, lambda a: a * torch.abs(a), (x,),
                   detect_nondifferentiable=True)
    assert text.startswith("f is not differentiable at element (0,) (value 0) of input 0 (of 1: torch float64 (2,) "
                           "on cpu:0), where check_double_backward(detect_nondifferentiable=True) looked at it")


def test_check_double_backward_leaves_out_the_inputs_no_grads_names(torch):
    """x * x * y.detach(): the backward's gradient by y is 0, numerically not: fine only with y left out."""
    f = lambda a, b: a * a * b.detach()  # noqa: E731
    xs = (_f64(torch, [0.5, 1.5]), _f64(torch, [2.0, 3.0]))
    ds.testing.check_double_backward(f, xs, no_grads=(False, True))
    text = _raised(ds.GradientMismatchError, ds.testing.check_double_backward, f, xs)
    assert text.startswith("The gradient of f's backward with respect to input 1 (of 2: torch float64 (2,) on cpu:0)")


def test_check_double_backward_uses_the_grad_outputs_it_is_given(torch):
    assert _raised(ds.GradientCheckUsageError, ds.testing.check_double_backward, lambda a: a * a,
                   (_f64(torch, [1.0, 2.0]),), grad_outputs=(np.ones(5),)) == (
        "grad_outputs for the output of f has shape (5,), but the output of f has shape (2,): each gradient has "
        "its output's shape (or is a number).")


def test_check_double_backward_uses_the_params_grad_grad_it_is_given(torch):
    """The params' second-order gradients follow the inputs' ones: the backward's output [1]."""
    w = torch.nn.Parameter(_f64(torch, [0.5, 1.5]))
    assert _raised(ds.GradientCheckUsageError, ds.testing.check_double_backward, lambda a: a * w * a,
                   (_f64(torch, [1.0, 2.0]),), None, (np.ones(2),), (w,), (np.ones(5),)) == (
        "grad_outputs for output [1] of f has shape (5,), but output [1] of f has shape (2,): each gradient has "
        "its output's shape (or is a number).")


def test_check_double_backward_refuses_one_of_grad_grad_inputs_and_params_grad_grad(torch):
    w = torch.nn.Parameter(_f64(torch, [0.5, 1.5]))
    assert _raised(ds.GradientCheckUsageError, ds.testing.check_double_backward, lambda a: a * w,
                   (_f64(torch, [1.0, 2.0]),), params=(w,), params_grad_grad=(np.ones(2),)) == (
        "check_double_backward() got one of grad_grad_inputs and params_grad_grad: give both (one gradient per "
        "floating-point input, one per param), or neither (both drawn).")


@pytest.mark.parametrize("f, signature", [("two", "(a, b)"), ("none", "()")])
def test_check_double_backward_refuses_an_f_that_cannot_take_its_inputs(torch, f, signature):
    """Neither two arguments for one input nor Chainer's form (none): f must take the inputs."""
    x = _f64(torch, [1.0, 2.0])
    function = (lambda a, b: a * b) if f == "two" else (lambda: x * x)
    assert _raised(ds.GradientFunctionError, ds.testing.check_double_backward, function, (x,)) == (
        f"check_double_backward() calls f with the 1 input as arguments; this f{signature} cannot be called so. "
        f"Pass one input per argument of f, in order (close over the others: lambda x: f(x, other)), or write "
        f"f to take the inputs: lambda x, y: ...")


def test_check_double_backward_names_itself_when_f_returns_nothing_to_differentiate(torch):
    assert _raised(ds.GradientCheckUsageError, ds.testing.check_double_backward, lambda a: a > 0,
                   (_f64(torch, [1.0, 2.0]),)) == (
        "check_double_backward() found no output of f to differentiate: f returned 1 value(s), none of them a "
        "floating-point tensor (integer and boolean outputs have no gradient). Return the values to "
        "differentiate, or pass grad_outputs (all None: a zero gradient, as in Chainer).")


def test_a_backward_differentiated_by_its_inputs_only_holds_grad_outputs_constant(torch, monkeypatch):
    """MXNet's branch (the autodiff holds grad_outputs constant), taken with torch's autodiff: the
    backward is called with the inputs and the grad_outputs, and checked by the inputs only."""
    from devshim.backends.registry import autodiff

    monkeypatch.setattr(autodiff("torch"), "differentiates_grad_outputs", False)
    x = _f64(torch, [0.5, 1.5])
    ds.testing.check_double_backward(lambda a: a * a * a, (x,))
    text = _raised(ds.GradientMismatchError, ds.testing.check_double_backward, _flat_cube(torch), (x,))
    assert text.startswith("The gradient of f's backward with respect to input 0 (of 1: torch float64 (2,) on cpu:0)")
    assert "grad_outputs 0" not in text


# ------------------------------------------------------------------ inputs f changed in place


def _changed_text(change) -> str:
    x = np.array([1.0, 2.0, 3.0])

    def f():
        change(x)
        return x * 2.0

    return _raised(ds.InputMutatedError, ds.testing.numerical_grad, f, (x,), (np.ones(3),))


def test_an_element_f_set_in_place_is_counted_alone():
    assert "in place (1 of 3 elements differ after its call" in _changed_text(lambda x: x.__setitem__(1, 7.0))


def test_an_element_f_set_to_nan_in_place_is_counted_as_changed():
    assert "in place (1 of 3 elements differ after its call" in _changed_text(
        lambda x: x.__setitem__(1, np.nan))


def test_an_input_whose_shape_f_changed_in_place_counts_every_element(torch):
    text = _raised(ds.InputMutatedError, ds.testing.numerical_grad, lambda a: a.unsqueeze_(0).sum(),
                   (_f64(torch, [1.0, 2.0, 3.0]),), (1.0,))
    assert text.startswith("f changed input 0 (of 1: torch float64 (3,) on cpu:0) in place (3 of 3 elements differ")


# ------------------------------------------------------------------ dtypes by name


class _NamedDtype:
    """A framework's dtype object: its `name` is NumPy's, its text no dtype's."""

    name = "float32"

    def __str__(self) -> str:
        return "<a framework dtype>"


class _DottedDtype:
    """A dtype object known by a dotted path only."""

    def __str__(self) -> str:
        return "myframework.dtypes.float64"


def test_a_dtype_object_is_read_by_its_name_or_the_last_part_of_its_dotted_path():
    # by name: NumPy's dtype equality reads None as float64
    assert float_dtype(_NamedDtype()).name == "float32"
    assert float_dtype(_DottedDtype()).name == "float64"
    gx, = ds.testing.numerical_grad(lambda a: a * 2.0, (np.array([1.0]),), (np.ones(1),), dtype=_NamedDtype())
    np.testing.assert_allclose(gx, [2.0], rtol=1e-4)


def test_a_name_that_is_no_dtype_is_refused_as_a_dtype_even_where_ml_dtypes_has_it():
    """`__version__` is an attribute of ml_dtypes, not a dtype: a usage error, not a TypeError."""
    pytest.importorskip("ml_dtypes")
    text = _raised(ds.GradientCheckUsageError, ds.testing.numerical_grad, lambda a: a, (np.ones(1),), (np.ones(1),),
                   dtype="__version__")
    assert text.startswith("numerical_grad(dtype='__version__'): dtype is the floating-point dtype to take")


def test_an_ml_dtypes_name_is_read_before_anything_imported_ml_dtypes():
    """NumPy knows "bfloat16" only once ml_dtypes is imported, which devshim does to read the name:
    in a fresh interpreter, a dtype object named "bfloat16" (read once: by its name only)."""
    pytest.importorskip("ml_dtypes")
    import devshim

    script = textwrap.dedent("""
        import sys
        from devshim.testing._values import float_dtype

        class Named:
            name = "bfloat16"

            def __str__(self):
                return "<a framework dtype>"

        assert "ml_dtypes" not in sys.modules, "imported already"
        print(float_dtype(Named()).name)
    """)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(devshim.__file__)))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["bfloat16"]


# ------------------------------------------------------------------ assert_allclose


def test_a_nan_difference_is_the_greatest_absolute_difference():
    found = mismatch(np.array([np.nan, 1.0]), np.array([1.0, 3.0]), 0.0, 0.0, True)
    assert found.abs_index == (0,) and found.rel_index == (0,)


def test_a_difference_from_a_zero_desired_value_raises_no_division_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found = mismatch(np.array([1.0, 2.0]), np.array([0.0, 2.0]), 0.0, 0.0, True)
        assert found.count == 1 and found.rel_diff == np.inf


# ------------------------------------------------------------------ virtual_devices


@pytest.mark.parametrize("count", [-1, True, "2", 1.0])
def test_virtual_devices_refuses_a_count_that_is_no_non_negative_int(count):
    assert _raised(ds.BackendError, ds.testing.virtual_devices, count) == (
        f"virtual_devices() takes a non-negative int, not {count!r}.")


def test_virtual_devices_takes_zero_and_sets_the_count():
    """0 turns the request off (conftest puts the environment's choice back afterwards)."""
    ds.testing.virtual_devices(0)
    assert settings.virtual_device_count() == 0 and not settings.virtual_devices_from_environment()
