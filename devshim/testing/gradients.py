"""`ds.testing.numerical_grad`, `check_backward` and `check_double_backward`: Chainer's
gradient checks for every framework, on the inputs' device.

The function under test runs where its inputs are, in their dtype (or in `dtype`, for the
numerical pass), always on private copies of them; devshim reads its outputs to the host
(explicit copies, through the transfer door) and takes the differences there in float64,
which NumPy always has (JAX without x64 has no float64 of its own). The framework's own
autodiff comes from the backend's `autodiff.py` (`Autodiff`). The parts: `_inputs`
(the inputs and their copies), `_outputs` (which outputs, which gradients), `_numerical`
(the central differences), `_compare` (the verdict).

Example:
    >>> ds.testing.check_backward(lambda x, y: x * y + 1, (x, y))
    >>> ds.testing.check_double_backward(lambda x: x * x * x, (x,))
"""

from __future__ import annotations

import contextlib

from devshim.backends.numpy import _testing as host
from devshim.errors import GradientCheckUsageError, MixedFrameworksError, NoAutodiffError
from devshim.testing import _inputs
from devshim.testing._compare import Settings, compare
from devshim.testing._numerical import Differences, Evaluator
from devshim.testing._outputs import Selection

__all__ = ["numerical_grad", "check_backward", "check_double_backward"]

#: The step of the central differences when none is given.
DEFAULT_EPS = 1e-3


class _Options:
    """The checked keyword arguments of one call."""

    __slots__ = ("function", "eps", "eps_given", "rtol", "atol", "seed", "dtype")

    def __init__(self, function: str, eps, rtol=None, atol=None, seed=0, dtype=None) -> None:
        self.function, self.eps_given = function, eps is not None
        self.eps = DEFAULT_EPS if eps is None else eps
        if not host.is_finite_number(self.eps) or self.eps <= 0:
            raise GradientCheckUsageError(
                f"{function}(eps={eps!r}): eps is the step of the central differences, a finite number above 0. "
                f"Pass eps=1e-3 (the default), or a larger one (2**-4) for half-precision values.")
        for name, value in (("rtol", rtol), ("atol", atol)):
            if value is not None and (not host.is_finite_number(value) or value < 0):
                raise GradientCheckUsageError(
                    f"{function}({name}={value!r}): a tolerance is a finite number, 0 or more. Pass {name}=None "
                    f"for the default, or a number such as {name}=1e-3.")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise GradientCheckUsageError(f"{function}(seed={seed!r}): the seed is an int, 0 or more.")
        self.rtol, self.atol, self.seed = rtol, atol, seed
        self.dtype = None if dtype is None else host.float_dtype(dtype)
        if dtype is not None and self.dtype is None:
            raise GradientCheckUsageError(
                f"{function}(dtype={dtype!r}): dtype is the floating-point dtype to take the numerical gradient "
                f"in. Pass dtype='float32' or 'float64' (or None: the inputs' own).")


@contextlib.contextmanager
def _running(items: list):
    """Where the checks run: the first input's device, full float32 precision (no TF32)."""
    first = items[0]
    with contextlib.ExitStack() as stack:
        for found in {id(item.autodiff): item.autodiff for item in items if item.autodiff is not None}.values():
            stack.enter_context(found.full_precision())
        stack.enter_context(first.adapter.on_device(first.native))
        yield


def numerical_grad(f, inputs, grad_outputs, *, eps: float = DEFAULT_EPS, dtype=None) -> tuple:
    """The gradients of `sum(f(...) * grad_outputs)` with respect to each input, by central
    differences: `(L(x + eps) - L(x - eps)) / 2eps` for every element of every input.

    `inputs` is a tuple (or list) of floating-point tensors of any framework, on any
    device; the answer is a tuple with one gradient per input, of the input's framework,
    device, dtype and shape. `f` comes in two forms:

    - it takes the inputs as arguments, `f(*inputs)` (every framework, immutable arrays
      included): it is called with private copies of the inputs (a variable as a variable, a
      parameter as a parameter), one of them differing in one element;
    - it takes no arguments and reads the arrays it closes over, which are `inputs`
      (Chainer's form): each element is changed in place, and restored. This needs arrays
      that can be changed in place: torch, MXNet, NumPy, CuPy, `tf.Variable`; JAX arrays
      and TensorFlow tensors raise `ImmutableInputError`.

    `f` returns one tensor or a nest of them; `grad_outputs` gives one array per output
    (any framework, NumPy, or None to leave that output out; integer and boolean outputs take
    None). `f` runs where the inputs are, in their dtype, or in `dtype` (`'float32'`,
    say, for float16 inputs: the copies are cast to it; the arguments form only). Each output
    is read to the host (an explicit copy) and the differences are taken there in float64,
    with the step the perturbed inputs really have after rounding. An `f` that changes its
    inputs in place raises `InputMutatedError`.

    Example:
        >>> x = torch.tensor([0.5, 1.0], device=ds.try_gpu())
        >>> gx, = ds.testing.numerical_grad(torch.exp, (x,), (torch.ones(2),))
        >>> ds.testing.assert_allclose(gx, torch.exp(x), rtol=1e-3)
        >>> gx, = ds.testing.numerical_grad(lambda: x * x, (x,), (np.ones(2),))   # Chainer's form
    """
    _inputs.check_callable(f, "numerical_grad")
    options = _Options("numerical_grad", eps, dtype=dtype)
    items = _inputs.read_inputs(inputs, "numerical_grad")
    closure = _inputs.takes_no_arguments(f, len(items), "numerical_grad", closure_allowed=True)
    if closure:
        _inputs.check_changeable(items)
        if options.dtype is not None:
            raise GradientCheckUsageError(
                "numerical_grad(dtype=...) casts copies of the inputs, which an f reading the arrays it closes over "
                "never sees. Write f to take the inputs as arguments: numerical_grad(lambda x: ..., (x,), gys, "
                "dtype=...).")
    with _running(items):
        evaluator = Evaluator(f, items, closure, options.dtype, "numerical_grad", grad_outputs)
        gradients = Differences(evaluator, options.eps).gradients()
    return tuple(item.gradient(gradient) for item, (gradient, _) in zip(items, gradients))


def _autodiff_of(items: list, function: str):
    names = sorted({item.adapter.name for item in items})
    if len(names) > 1:
        raise MixedFrameworksError(
            f"{function}() got inputs of several frameworks ({', '.join(names)}); the autodiff it checks is "
            f"one framework's. Convert the inputs to one framework first (ds.convert).")
    found = items[0].autodiff
    if found is None:
        title = items[0].adapter.spec.title
        raise NoAutodiffError(
            f"{title} has no automatic differentiation, so {function}() has no backward to check for "
            f"{title} arrays. Compare your own backward with the numbers instead: "
            f"gx, = ds.testing.numerical_grad(f, (x,), (gy,)); ds.testing.assert_allclose(my_backward(x, gy), gx); "
            f"or check the function written for a framework with autodiff (torch, jax, tensorflow, mxnet).")
    return found


def _prepare(f, inputs, function: str) -> tuple:
    _inputs.check_callable(f, function)
    items = _inputs.read_inputs(inputs, function)
    found = _autodiff_of(items, function)
    _inputs.takes_no_arguments(f, len(items), function, closure_allowed=False)
    return items, found


def _check(f, items: list, found, grad_outputs, seed, options: _Options, subject: str) -> None:
    """The autodiff of `f` at `items` against central differences (`seed`: for the
    gradients of `f`'s outputs that `grad_outputs` does not give)."""
    evaluator = Evaluator(f, items, False, None, options.function)
    selection = evaluator.selection = Selection.build(evaluator.result(), grad_outputs, seed, options.function)
    copies = [item.copy() for item in items]
    outputs, pullback = found.vjp(lambda *xs: selection.pick(f(*xs)), tuple(copies))
    for item, copy in zip(items, copies):
        item.check_unchanged(copy, item.host, "in the autodiff pass")
    analytic = pullback(selection.upload(list(outputs)))
    numeric_evaluator = evaluator if options.dtype is None else Evaluator(
        f, items, False, options.dtype, options.function)
    numeric_evaluator.selection = selection
    differences = Differences(numeric_evaluator, options.eps, None if options.eps_given else options.function)
    numeric = differences.gradients()
    dtypes = ([host.dtype_name(item.host) for item in items] + [output.dtype.name for output in selection.outputs]
              + differences.output_dtypes + ([] if options.dtype is None else [options.dtype.name]))
    compare(items, analytic, numeric, differences, Settings(options.function, options.eps, options.rtol,
                                                            options.atol, dtypes, subject))


def check_backward(f, inputs, grad_outputs=None, *, eps=None, atol=None, rtol=None, seed: int = 0,
                   dtype=None) -> None:
    """Check the gradients the framework's own autodiff gives for `f` against
    `numerical_grad`: fail, naming the input, when they differ.

    `f(*inputs)` is run under the inputs' framework's autodiff (torch autograd, a
    `torch.autograd.Function`'s backward included; `jax.vjp`, so `jax.custom_vjp`
    rules; `tf.GradientTape`, so `tf.custom_gradient`; `mx.autograd`, so
    `mx.autograd.Function`), on the inputs' device, and its vector-Jacobian product with
    `grad_outputs` is compared with central differences of `sum(f(*inputs) * grad_outputs)`
    (`eps` as for `numerical_grad`, 1e-3 by default). `grad_outputs` gives one gradient
    per output of `f` (None leaves one out of both passes); without it, one is drawn for each
    floating-point output (uniform in [-1, 1), in its dtype, seeded with `seed`, so a run
    repeats); integer and boolean outputs get none. The inputs are one framework's
    floating-point tensors; NumPy and CuPy arrays have no autodiff and raise
    `NoAutodiffError`.

    `f` is always called with private copies of the inputs (a `tf.Variable` as a variable,
    an `nn.Parameter` as a parameter, an MXNet `nd` array as one): your tensors keep their
    values and gradients, and so do the parameters of a module `f` calls. An `f` that
    changes its inputs in place raises `InputMutatedError`. Sparse gradients (torch's sparse
    tensors, TensorFlow's `IndexedSlices`) are compared as dense ones. Both passes run in full
    float32 precision (TF32 off on GPUs).

    The comparison, element by element: `|autodiff - numerical| <= atol + rtol * |numerical|
    + noise`. `noise` bounds the rounding that `f`'s outputs (those that moved) carry into
    that central difference: one rounding to each output's dtype, after 15 at the inputs'
    precision for the arithmetic before it; `rtol` defaults by the least precise dtype of the inputs and outputs (float64
    1e-4, float32 1e-2, float16 5e-2, bfloat16 1e-1); `atol` defaults to `rtol` times the
    input's greatest numerical gradient, so a wrong backward fails however small its true
    gradient. Half-precision inputs or outputs need `dtype='float32'` (the numerical pass
    then runs on copies cast to it) or an explicit `eps`; without either,
    `GradientCheckUsageError` says so. A mismatch raises `ds.GradientMismatchError` (an
    `AssertionError`) naming each input whose gradient differs, with the number of elements
    that differ and the greatest differences, their index and both values; a mismatch only
    where `f` has a kink (relu at 0) raises `ds.NondifferentiableError` instead.

    Example:
        >>> class Exp(torch.autograd.Function):
        ...     @staticmethod
        ...     def forward(ctx, x):
        ...         ctx.save_for_backward(x)
        ...         return torch.exp(x)
        ...     @staticmethod
        ...     def backward(ctx, gy):
        ...         x, = ctx.saved_tensors
        ...         return gy * torch.exp(x)
        >>> x = torch.rand(3, 2, device=ds.try_gpu())
        >>> ds.testing.check_backward(Exp.apply, (x,))
    """
    options = _Options("check_backward", eps, rtol, atol, seed, dtype)
    items, found = _prepare(f, inputs, "check_backward")
    with _running(items):
        _check(f, items, found, grad_outputs, options.seed, options, "The gradient of")


def check_double_backward(f, inputs, grad_outputs=None, grad_grad_inputs=None, *, eps=None, atol=None,
                          rtol=None, seed: int = 0, dtype=None) -> None:
    """Check the second-order gradients the framework's autodiff gives for `f`: the gradient
    of its backward, against central differences of that backward (Chainer's
    `check_double_backward`, torch's `gradgradcheck`, JAX's `check_grads(order=2)`).

    The backward of `f` is the function `(*inputs, *grad_outputs) -> gradients of
    sum(f(*inputs) * grad_outputs)`, one per input, computed by the framework's autodiff;
    `check_double_backward` runs `check_backward` on it, with `grad_grad_inputs` (one
    gradient per input of `f`; drawn with `seed` when not given) as its `grad_outputs`. So
    both the inputs and `grad_outputs` are differentiated: the first order is checked along
    (the backward is linear in `grad_outputs`). Everything else is as for `check_backward`:
    the arguments, the private copies, the tolerances, the errors. It does not check that the
    first order is right where `grad_outputs` is given; run `check_backward` for that.

    torch, JAX and TensorFlow differentiate any backward written with their own operations (a
    `torch.autograd.Function` whose backward uses torch operations, a `jax.custom_vjp`
    rule, a `tf.custom_gradient`); MXNet 1.9 only some elementwise operators twice (exp,
    log, tanh, ...), and raises `NoAutodiffError` naming the operator for the others. MXNet
    holds the gradients given to a backward constant, so on MXNet the backward is
    differentiated by the inputs only (`grad_outputs` then stays as given or drawn).

    Example:
        >>> x = torch.rand(3, 2, dtype=torch.float64, device=ds.try_gpu())
        >>> ds.testing.check_double_backward(lambda x: torch.sin(x) * x, (x,))
    """
    options = _Options("check_double_backward", eps, rtol, atol, seed, dtype)
    items, found = _prepare(f, inputs, "check_double_backward")
    with _running(items):
        result = Evaluator(f, items, False, None, options.function).result()
        selection = Selection.build(result, grad_outputs, options.seed, options.function)
        backward = found.gradient_function(lambda *xs: selection.pick(f(*xs)), len(items))
        gys = selection.upload(selection.pick(result))
        if not found.differentiates_grad_outputs:  # MXNet: by the inputs only, grad_outputs held
            _check(lambda *xs: backward(*xs, *gys), items, found, grad_grad_inputs, (options.seed, 1), options,
                   "The gradient of f's backward with respect to")
            return
        cotangents = _inputs.read_inputs(gys, options.function, names="grad_outputs")
        _check(backward, items + cotangents, found, grad_grad_inputs, (options.seed, 1), options,
               "The gradient of f's backward with respect to")
