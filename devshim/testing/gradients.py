"""`ds.testing.numerical_grad`, `check_backward` and `check_double_backward`: Chainer's
gradient checks for every framework, on the inputs' device.

The function under test runs where its inputs are, in their dtype (or in `dtype`, for the
numerical pass), always on private copies of them (`params`, and the arrays Chainer's form
of `numerical_grad` closes over, are changed in place and put back); devshim reads its outputs
to the host (explicit copies, through the transfer door) and takes the differences there in
float64, which NumPy always has (JAX without x64 has no float64 of its own). The framework's
own autodiff comes from the backend's `autodiff.py` (`Autodiff`). The parts: `_inputs`
(the inputs and their copies), `_outputs` (which outputs, which gradients), `_numerical`
(the differences, and the points where `f` has no derivative), `_compare` (the verdict).

Example:
    >>> ds.testing.check_backward(lambda x, y: x * y + 1, (x, y))
    >>> ds.testing.check_double_backward(lambda x: x * x * x, (x,))
"""

from __future__ import annotations

import contextlib

import numpy as np

from devshim.errors import GradientCheckUsageError, GradientFunctionError, MixedFrameworksError, NoAutodiffError
from devshim.testing import _inputs, _values
from devshim.testing._compare import Settings, compare
from devshim.testing._numerical import Differences, Evaluator

__all__ = ["numerical_grad", "check_backward", "check_double_backward"]

#: The step of the central differences when none is given.
DEFAULT_EPS = 1e-3
#: The dtype the checks take the numerical gradient of a half-precision input in, unless told.
_WIDER = np.dtype("float32")


class _Options:
    """The checked keyword arguments of one call."""

    __slots__ = ("function", "eps", "eps_given", "rtol", "atol", "seed", "dtype", "detect")

    def __init__(self, function: str, eps, rtol=None, atol=None, seed=0, dtype=None, detect=False) -> None:
        self.function, self.eps_given = function, eps is not None
        self.eps = DEFAULT_EPS if eps is None else eps
        if not _values.is_finite_number(self.eps) or self.eps <= 0:
            raise GradientCheckUsageError(
                f"{function}(eps={eps!r}): eps is the step of the central differences, a finite number above 0. "
                f"Pass eps=1e-3 (the default), or a larger one for low-precision outputs (2**-4).")
        for name, value in (("rtol", rtol), ("atol", atol)):
            if value is not None and (not _values.is_finite_number(value) or value < 0):
                raise GradientCheckUsageError(
                    f"{function}({name}={value!r}): a tolerance is a finite number, 0 or more. Pass {name}=None "
                    f"for the default, or a number such as {name}=1e-3.")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise GradientCheckUsageError(f"{function}(seed={seed!r}): the seed is an int, 0 or more.")
        if not isinstance(detect, bool):
            raise GradientCheckUsageError(f"{function}(detect_nondifferentiable={detect!r}): pass True or False.")
        self.rtol, self.atol, self.seed, self.detect = rtol, atol, seed, detect
        self.dtype = None if dtype is None else _values.float_dtype(dtype)
        if dtype is not None and self.dtype is None:
            raise GradientCheckUsageError(
                f"{function}(dtype={dtype!r}): dtype is the floating-point dtype to take the numerical gradient "
                f"in. Pass dtype='float32' or 'float64' (or None: the inputs' own).")
        if function != "numerical_grad" and self.dtype is not None and _values.is_half(self.dtype):
            raise GradientCheckUsageError(
                f"{function}(dtype={self.dtype.name!r}): central differences taken in {self.dtype.name} are "
                f"swamped by its rounding, which would let a backward 10% wrong pass. Pass dtype='float32' or "
                f"'float64', or leave dtype out: half-precision inputs are then differentiated in float32.")

    def numeric_dtypes(self, items: list) -> list:
        """Per item, the dtype its numerical pass takes it in (None: its own): `dtype` for
        floating items, else float32 for half-precision ones; integer items as they are."""
        return [None if not item.floating else self.dtype if self.dtype is not None else
                _WIDER if _values.is_half(item.host.dtype) else None for item in items]


def _check_callable(f, function: str) -> None:
    """Raise `GradientFunctionError` unless `f` can be called."""
    if not callable(f):
        raise GradientFunctionError(
            f"{function}() takes the function to check first, then its inputs; f is a "
            f"{type(f).__module__}.{type(f).__qualname__}, which cannot be called. Pass the function first: "
            f"{function}(f, (x, y)).")


@contextlib.contextmanager
def _running(items: list):
    """Where the checks run: the first input's device, full float32 precision (no TF32)."""
    with contextlib.ExitStack() as stack:
        for found in {id(item.autodiff): item.autodiff for item in items if item.autodiff is not None}.values():
            stack.enter_context(found.full_precision())
        stack.enter_context(items[0].adapter.on_device(items[0].native))
        yield


def numerical_grad(f, inputs, grad_outputs, *, eps: float = DEFAULT_EPS, dtype=None,
                   detect_nondifferentiable: bool = False) -> tuple:
    """The gradients of `sum(f(...) * grad_outputs)` with respect to each input, by central
    differences: `(L(x + eps) - L(x - eps)) / 2eps` for every element of every input.

    `inputs` is a tuple (or list) of floating-point tensors of any framework, on any
    device; the answer is a tuple with one gradient per input, of the input's framework,
    device, dtype and shape. `f` comes in two forms:

    - it takes the inputs as arguments, `f(*inputs)` (every framework, immutable arrays
      included): it is called with private copies of the inputs (a variable as a variable, a
      parameter as a parameter), one of them differing in one element;
    - it takes no arguments and reads the arrays it closes over, which are `inputs`
      (Chainer's form): each element is changed in place, `f`'s outputs are read, and the
      element is put back (so an output that is the input itself, or a view of it, is read
      as it was). This needs arrays that can be changed in place: torch, MXNet, NumPy, CuPy,
      `tf.Variable`; JAX arrays and TensorFlow tensors raise `ImmutableInputError`.

    `f` returns one tensor or a nest of them; `grad_outputs` gives one array per output
    (any framework, NumPy, a number that stands for an array of the output's shape, or None
    to leave that output out: all None gives zero gradients, as in Chainer; integer and
    boolean outputs take None). `f` runs where the inputs are, in their dtype, or in `dtype`
    (`'float64'`, say: the copies are cast to it; in Chainer's form torch tensors change
    their dtype for the call, other frameworks' cannot and are refused). Each output is read
    to the host (an explicit copy) and the differences are taken there in float64, with the
    step the perturbed inputs really have after rounding. An `f` that changes its inputs in
    place raises `InputMutatedError`.

    With `detect_nondifferentiable=True` (Chainer's option), `f` is evaluated at five points
    per element (`x`, `x -+ eps/2`, `x -+ eps`): where an output is finite at some of them
    only, or no parabola fits it (a kink, a step, an infinite slope), `NondifferentiableError`
    names the element, the slopes of `f` on either side and `f`'s values there; elsewhere the
    gradient is the slope of the polynomial through the five points (more accurate).

    Example:
        >>> x = torch.tensor([0.5, 1.0], device=ds.try_gpu())
        >>> gx, = ds.testing.numerical_grad(torch.exp, (x,), (torch.ones(2),))
        >>> ds.testing.assert_allclose(gx, torch.exp(x), rtol=1e-3)
        >>> gx, = ds.testing.numerical_grad(lambda: x * x, (x,), (np.ones(2),))   # Chainer's form
    """
    _check_callable(f, "numerical_grad")
    options = _Options("numerical_grad", eps, dtype=dtype, detect=detect_nondifferentiable)
    items = _inputs.read_inputs(inputs, "numerical_grad")
    closure = _inputs.takes_no_arguments(f, len(items), "numerical_grad", closure_allowed=True)
    if closure:
        _inputs.changed_in_place(items, "When f takes no arguments (it reads the arrays it closes over), "
                                        "numerical_grad()'s inputs are", "numerical_grad(lambda *xs: ..., inputs, "
                                        "grad_outputs)")
    dtypes = [options.dtype] * len(items)
    with _running(items), _inputs.retyped(items, dtypes, "numerical_grad"):
        evaluator = Evaluator(f, items, closure, dtypes, "numerical_grad", grad_outputs)
        gradients = Differences(evaluator, options.eps, detect=options.detect).gradients()
    return tuple(item.gradient(gradient) for item, (gradient, _) in zip(items, gradients))


def _prepare(inputs, params, no_grads, function: str) -> tuple:
    """The inputs and params as items, their autodiff, with `no_grads` applied."""
    items = _inputs.read_inputs(inputs, function, integers=True)
    held = _inputs.changed_in_place(_inputs.read_inputs(params, function, names="param"),
                                    f"{function}()'s params are", f"pass that tensor among them, {function}(lambda "
                                    f"*xs, w: ..., (*inputs, w))")
    names = sorted({item.adapter.name for item in items + held})
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
    if no_grads is not None:
        if not isinstance(no_grads, (tuple, list)) or len(no_grads) != len(items):
            raise GradientCheckUsageError(
                f"{function}(no_grads={no_grads!r}): no_grads has one bool per input ({len(items)} here): True "
                f"leaves that input out of the check, and its gradient must then be none.")
        for item, skip in zip(items, no_grads):
            item.checked = item.floating and not skip
    for item in held:
        if not item.floating:
            raise GradientCheckUsageError(f"{function}(): {item.title} is no floating-point tensor: params have "
                                          f"gradients. Close over it in f instead.")
    return items, held, found


def _check(f, items: list, held: list, found, grad_outputs, seed, options: _Options, subject: str) -> None:
    """The autodiff of `f` at `items` (and the tensors `held` that `f` reads itself) against
    the numerical gradient (`seed`: for the gradients of `f`'s outputs that `grad_outputs`
    does not give)."""
    _inputs.takes_no_arguments(f, len(items), options.function, closure_allowed=False)
    everything = items + held
    with found.differentiating([item.value for item in held]):
        evaluator = Evaluator(f, everything, False, [None] * len(everything), options.function, grad_outputs, seed)
        evaluator.outputs()
        selection = evaluator.selection
        copies = [item.copy() for item in items]
        outputs, pullback = found.vjp(lambda *xs: selection.pick(f(*xs)), tuple(copies),
                                      [item.floating for item in items], [item.value for item in held])
        for item, copy in zip(items, copies):
            item.check_unchanged(copy, item.host, "in the autodiff pass")
        analytic = pullback(selection.upload(list(outputs)))
        dtypes = options.numeric_dtypes(everything)
        numeric_evaluator = evaluator if not any(dtype is not None for dtype in dtypes) else Evaluator(
            f, everything, False, dtypes, options.function)
        numeric_evaluator.selection = selection
        with _inputs.retyped(everything, dtypes, options.function):
            differences = Differences(numeric_evaluator, options.eps, options.detect,
                                      None if options.eps_given else options.function)
            numeric = differences.gradients()
            checked = [item for item in everything if item.checked]
            settings = Settings(options.function, options.eps, options.rtol, options.atol,
                                [item.host.dtype.name for item in checked] + [o.dtype.name for o in selection.outputs],
                                subject, differences.output_dtypes + [d.name for d in dtypes if d is not None])
            compare(everything, analytic, numeric, differences, settings)


def check_backward(f, inputs, grad_outputs=None, params=(), *, eps=None, atol=None, rtol=None, seed: int = 0,
                   dtype=None, no_grads=None, detect_nondifferentiable: bool = False) -> None:
    """Check the gradients the framework's own autodiff gives for `f` against
    `numerical_grad`: fail, naming the input, when they differ.

    `f(*inputs)` is run under the inputs' framework's autodiff (torch autograd, a
    `torch.autograd.Function`'s own `backward` included; `jax.vjp`, so `jax.custom_vjp`
    rules; `tf.GradientTape`, so `tf.custom_gradient`; `mx.autograd`, so
    `mx.autograd.Function`), on the inputs' device, and its vector-Jacobian product with
    `grad_outputs` is compared, element by element, with the numerical gradient of
    `sum(f(*inputs) * grad_outputs)` (`eps` as for `numerical_grad`, 1e-3 by default).
    `grad_outputs` gives one gradient per output of `f` (None leaves one out of both passes;
    all None: both gradients are zero, as in Chainer; a number stands for an array of the
    output's shape); without it, one is drawn for each floating-point output (uniform in
    [-1, 1), in its dtype, seeded with `seed`, so a run repeats). NumPy and CuPy arrays have
    no autodiff and raise `NoAutodiffError`.

    The inputs are one framework's tensors. Integer and boolean inputs are passed to `f` as
    they are, with no gradient (never cast by `dtype`); `no_grads` (one bool per input, as in
    Chainer) leaves floating-point inputs out of the check too, and then requires the autodiff
    to give them no gradient (None, or zeros). `params` are tensors `f` reads itself (a
    module's `nn.Parameter`, a `tf.Variable`, an MXNet array): their gradients are checked
    too, and the numerical pass changes them in place, an element at a time, and puts them
    back (JAX arrays cannot be: pass them as inputs).

    `f` is always called with private copies of the inputs (a `tf.Variable` as a variable,
    an `nn.Parameter` as a parameter, an MXNet `nd` array as one): your tensors keep their
    values and gradients, and so do the parameters of a module `f` calls. An `f` that
    changes its inputs in place raises `InputMutatedError`. Sparse gradients are compared as
    dense ones. Both passes run in full float32 precision (TF32 off on GPUs).

    The comparison, element by element: `|autodiff - numerical| <= atol + rtol * |numerical|
    + noise`. `noise` bounds the rounding that `f`'s outputs carry into that difference (a
    relative part per rounding, an absolute one below a dtype's normal range); `rtol`
    defaults by the least precise dtype of the inputs and outputs (float64 1e-4, float32,
    float16 1e-2, bfloat16 3e-2; 5e-2 and 1e-1 where `f` returns float16 or bfloat16 values
    from wider inputs, whose differences are taken in half precision: then pass `eps`);
    `atol` defaults to `rtol` times the input's greatest numerical gradient, so a wrong
    backward fails however small its true gradient. Half-precision inputs are differentiated
    numerically in float32 unless `dtype` says otherwise, while the autodiff runs in their
    own dtype. A mismatch raises `ds.GradientMismatchError` (an `AssertionError`) naming each
    input whose gradient differs, with the number of elements that differ and the greatest
    differences, their index and both values; a mismatch only where `f` has no derivative (a
    kink, a step, an infinite slope, a value that stops being finite) raises
    `ds.NondifferentiableError` instead, with the slopes of `f` there. With
    `detect_nondifferentiable=True`, every element is looked at so, as in Chainer, whether
    the gradients agree or not.

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
    options = _Options("check_backward", eps, rtol, atol, seed, dtype, detect_nondifferentiable)
    _check_callable(f, "check_backward")
    items, held, found = _prepare(inputs, params, no_grads, "check_backward")
    with _running(items):
        _check(f, items, held, found, grad_outputs, options.seed, options, "The gradient of")


def check_double_backward(f, inputs, grad_outputs=None, grad_grad_inputs=None, params=(), params_grad_grad=None, *,
                          eps=None, atol=None, rtol=None, seed: int = 0, dtype=None, no_grads=None,
                          detect_nondifferentiable: bool = False) -> None:
    """Check the second-order gradients the framework's autodiff gives for `f`: the gradient
    of its backward, against the numerical gradient of that backward (Chainer's
    `check_double_backward`, torch's `gradgradcheck`, JAX's `check_grads(order=2)`).

    The backward of `f` is the function `(*inputs, *grad_outputs) -> gradients of
    sum(f(*inputs) * grad_outputs)`, one per floating-point input and then one per param,
    computed by the framework's autodiff; `check_double_backward` runs `check_backward` on it,
    with `grad_grad_inputs` and `params_grad_grad` (one gradient per floating-point input and
    per param; drawn with `seed` when neither is given) as its `grad_outputs`, and with
    `params` as its params. So the inputs, `grad_outputs` and the params are differentiated:
    the first order is checked along (the backward is linear in `grad_outputs`). Everything
    else is as for `check_backward`: the arguments (`no_grads` has one bool per input of
    `f`), the private copies, the tolerances, the errors. It does not check that the first
    order is right where `grad_outputs` is given; run `check_backward` for that.

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
    options = _Options("check_double_backward", eps, rtol, atol, seed, dtype, detect_nondifferentiable)
    _check_callable(f, "check_double_backward")
    items, held, found = _prepare(inputs, params, no_grads, "check_double_backward")
    if (grad_grad_inputs is None) != (params_grad_grad is None) and held:
        raise GradientCheckUsageError(
            "check_double_backward() got one of grad_grad_inputs and params_grad_grad: give both (one gradient per "
            "floating-point input, one per param), or neither (both drawn).")
    grad_grads = None if grad_grad_inputs is None else _inputs.as_list(grad_grad_inputs) + (
        [] if params_grad_grad is None else _inputs.as_list(params_grad_grad))
    subject = "The gradient of f's backward with respect to"
    _inputs.takes_no_arguments(f, len(items), options.function, closure_allowed=False)
    with _running(items):
        evaluator = Evaluator(f, items + held, False, [None] * (len(items) + len(held)), options.function,
                              grad_outputs, options.seed)
        result = evaluator.result()
        selection = evaluator.selection
        backward = found.gradient_function(lambda *xs: selection.pick(f(*xs)), len(items),
                                           [item.floating for item in items], [item.value for item in held])
        gys = selection.upload(selection.pick(result))
        if found.differentiates_grad_outputs:
            g, checked = backward, items + _inputs.read_inputs(gys, options.function, names="grad_outputs")
        else:  # MXNet: by the inputs only, grad_outputs held
            g, checked = (lambda *xs: backward(*xs, *gys)), items
        _check(g, checked, held, found, grad_grads, (options.seed, 1), options, subject)
