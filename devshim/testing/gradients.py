"""``ds.testing.numerical_grad`` and ``ds.testing.check_backward``: Chainer's gradient checks
for every framework, on the inputs' device.

The function under test runs where its inputs are, in their dtype; devshim reads its
outputs to the host (explicit copies, through the transfer door) and takes the differences
there in float64, which NumPy always has (JAX without x64 has no float64 of its own). The
framework's own autodiff comes from the backend's ``autodiff.py`` (``Autodiff``).

Example:
    >>> ds.testing.check_backward(lambda x, y: x * y + 1, (x, y))
"""

from __future__ import annotations

import inspect

from devshim import transfer
from devshim._tree import map_nest
from devshim.backends.dispatch import backend_for_tensor
from devshim.backends.numpy import _testing as host
from devshim.backends.registry import autodiff, interop
from devshim.errors import (
    GradientCheckUsageError, GradientMismatchError, ImmutableInputError, MixedFrameworksError, NoAutodiffError,
)
from devshim.testing import _values

__all__ = ["numerical_grad", "check_backward"]


class _Input:
    """One input: the tensor, its backend and native device, and its values on the host."""

    __slots__ = ("value", "adapter", "native", "host", "described")

    def __init__(self, value, adapter, native, host_array, described: str) -> None:
        self.value, self.adapter, self.native, self.host, self.described = (
            value, adapter, native, host_array, described)


def _inputs(inputs, function: str) -> list:
    """The inputs as ``_Input``\\ s (one tensor or a tuple/list of them), each checked to be a
    floating-point tensor."""
    values = list(inputs) if isinstance(inputs, (tuple, list)) else [inputs]
    if not values:
        raise GradientCheckUsageError(f"{function}() got no inputs: pass a tuple of the tensors to differentiate by.")
    found = []
    for position, value in enumerate(values):
        adapter = backend_for_tensor(value)
        if adapter is None:
            raise GradientCheckUsageError(
                f"{function}() input {position} is a {type(value).__module__}.{type(value).__qualname__}, not a "
                f"tensor. Pass the tensors to differentiate by; close over anything else (lambda x: f(x, other)).")
        read = _values.read(value, function)
        if not host.is_floating(read.host):
            raise GradientCheckUsageError(
                f"{function}() input {position} is a {read.describe()} array: only floating-point inputs have a "
                f"gradient. Close over it instead (lambda x: f(x, indices)), or cast it to a float dtype.")
        found.append(_Input(value, adapter, adapter.native_device_of(value), read.host, read.describe()))
    return found


def _takes_no_arguments(f, count: int, function: str) -> bool:
    """Whether ``f`` is Chainer's form, reading the inputs it closes over (it takes no
    arguments), rather than taking the inputs as arguments."""
    try:
        signature = inspect.signature(f)
    except (TypeError, ValueError):  # a builtin without a signature: it takes arguments
        return False
    for arguments, closes_over in ((range(count), False), ((), True)):
        try:
            signature.bind(*arguments)
            return closes_over
        except TypeError:
            continue
    raise GradientCheckUsageError(
        f"{function}() calls f with the {count} inputs as arguments, or, when f takes none, changes the "
        f"inputs f closes over in place; this f{signature} takes neither. Write f to take the inputs as "
        f"arguments (lambda x, y: ...).")


def _check_changeable(items: list) -> None:
    for position, item in enumerate(items):
        found = autodiff(item.adapter.name)
        if found is not None:
            changeable = found.can_change_in_place(item.value)
        else:  # NumPy, CuPy: their arrays, unless read-only (a NumPy scalar, a read-only view)
            changeable = getattr(getattr(item.value, "flags", None), "writeable", True)
        if not changeable:
            raise ImmutableInputError(
                f"numerical_grad() changes the inputs in place when f takes no arguments (it reads the arrays it "
                f"closes over), but input {position} ({item.described}) cannot be changed in place. Write f to "
                f"take the inputs as arguments instead: numerical_grad(lambda *xs: ..., inputs, grad_outputs).")


def _set_element(item: _Input, index: tuple, value: float) -> None:
    found = autodiff(item.adapter.name)
    if found is not None:
        transfer.explicitly(found.set_element, item.value, index, value)
    else:
        transfer.explicitly(item.value.__setitem__, index, value)


def _upload(item: _Input, host_array):
    """A new tensor of ``item``'s framework on its device holding ``host_array`` (an explicit copy)."""
    found = interop(item.adapter.name)
    if found is None:
        raise GradientCheckUsageError(
            f"The {item.adapter.name} backend cannot make its tensors from host values (it has no interop.py), "
            f"which numerical_grad needs for f taking its inputs as arguments.")
    return transfer.explicitly(found.from_host, item.adapter, host_array, item.native)


def _read_outputs(outputs, grad_outputs: list) -> list:
    """Every output leaf read to the host, in the order of ``grad_outputs`` (``(path, array or
    None)`` pairs): matched by path where both name the same leaves (a dict's keys, in
    whatever order a framework rebuilt it), else by position; checked against them."""
    found = [(path, _values.read(leaf, "numerical_grad").host) for path, leaf in _values.leaves(outputs)]
    if len(found) != len(grad_outputs):
        raise GradientCheckUsageError(
            f"f returned {len(found)} output{'s' if len(found) != 1 else ''}, but grad_outputs has "
            f"{len(grad_outputs)}: give one gradient (or None) per output, in the order of f's outputs.")
    by_path = dict(found)
    if len(by_path) == len(found) and set(by_path) == {path for path, _ in grad_outputs}:
        found = [(path, by_path[path]) for path, _ in grad_outputs]
    for position, ((path, y), (_, gy)) in enumerate(zip(found, grad_outputs)):
        if gy is not None and tuple(y.shape) != tuple(gy.shape):
            raise GradientCheckUsageError(
                f"grad_outputs {path or position} has shape {tuple(gy.shape)}, but output {path or position} of f "
                f"has shape {tuple(y.shape)}: each gradient has its output's shape.")
    return [y for _, y in found]


class _Differences:
    """Central differences of ``sum(f(...) * grad_outputs)`` for one call of numerical_grad."""

    def __init__(self, f, items: list, grad_outputs: list, eps: float, in_place: bool) -> None:
        self.f, self.items, self.grad_outputs, self.eps, self.in_place = f, items, grad_outputs, eps, in_place

    def gradients(self) -> list:
        """One float64 host array per input."""
        found = []
        for position, item in enumerate(self.items):
            gradient = host.zeros(tuple(item.host.shape))
            for index in host.element_indices(tuple(item.host.shape)):
                gradient[index] = self.derivative(position, index)
            found.append(gradient)
        return found

    def derivative(self, position: int, index: tuple) -> float:
        item = self.items[position]
        value = host.python_value(item.host, index)
        plus, minus, step = host.rounded_steps(value, self.eps, item.host.dtype)
        if step == 0:
            raise GradientCheckUsageError(
                f"eps={self.eps:g} does not change input {position} ({item.described}) at index {index}: "
                f"{value:g} + eps and {value:g} - eps round to the same {host.dtype_name(item.host)} value. "
                f"Pass a larger eps, e.g. eps={host.suggested_eps(value, item.host.dtype):g}.")
        try:
            outputs_plus = self.evaluate(position, index, plus)
            outputs_minus = self.evaluate(position, index, minus)
        finally:
            if self.in_place:
                _set_element(item, index, value)
        gys = [gy for _, gy in self.grad_outputs]
        return host.directional_sum(outputs_plus, outputs_minus, gys) / step

    def evaluate(self, position: int, index: tuple, value: float) -> list:
        item, first = self.items[position], self.items[0]
        if self.in_place:
            _set_element(item, index, value)
            with first.adapter.on_device(first.native):
                outputs = self.f()
        else:
            arguments = [each.value for each in self.items]
            arguments[position] = _upload(item, host.with_element(item.host, index, value))
            with first.adapter.on_device(first.native):
                outputs = self.f(*arguments)
        return _read_outputs(outputs, self.grad_outputs)


def _host_grad_outputs(grad_outputs) -> list:
    """``grad_outputs`` (one tensor, or a nest with one per output; None for an output to
    leave out) as ``(path, float64 host array or None)`` pairs."""
    found = []
    for path, leaf in _values.leaves(grad_outputs):
        found.append((path, None if leaf is None else host.float64_copy(_values.read(leaf, "numerical_grad").host)))
    return found


def numerical_grad(f, inputs, grad_outputs, *, eps: float = 1e-3) -> tuple:
    """The gradients of ``sum(f(...) * grad_outputs)`` with respect to each input, by central
    differences: ``(L(x + eps) - L(x - eps)) / 2eps`` for every element of every input.

    ``inputs`` is a tuple (or list) of floating-point tensors of any framework, on any
    device; the answer is a tuple with one gradient per input, of the input's framework,
    device, dtype and shape. ``f`` comes in two forms:

    - it takes the inputs as arguments, ``f(*inputs)`` (every framework, immutable arrays
      included): it is called with copies of the inputs that differ in one element;
    - it takes no arguments and reads the arrays it closes over, which are ``inputs``
      (Chainer's form): each element is changed in place, and restored. This needs arrays
      that can be changed in place: torch, MXNet, NumPy, CuPy, ``tf.Variable``; JAX arrays
      and TensorFlow tensors raise ``ImmutableInputError``.

    ``f`` returns one tensor or a nest of them; ``grad_outputs`` gives one array per output
    (any framework, NumPy, or None to leave that output out). ``f`` runs where the inputs
    are, in their dtype; each output is read to the host (an explicit copy) and the
    differences are taken there in float64, with the step the perturbed inputs really have
    after rounding to their dtype. For float16 and bfloat16 inputs pass a larger ``eps``
    (``2**-4``, say).

    Example:
        >>> x = torch.tensor([0.5, 1.0], device=ds.try_gpu())
        >>> gx, = ds.testing.numerical_grad(torch.exp, (x,), (torch.ones(2),))
        >>> ds.testing.assert_allclose(gx, torch.exp(x), rtol=1e-3)
        >>> gx, = ds.testing.numerical_grad(lambda: x * x, (x,), (np.ones(2),))   # Chainer's form
    """
    items = _inputs(inputs, "numerical_grad")
    in_place = _takes_no_arguments(f, len(items), "numerical_grad")
    if in_place:
        _check_changeable(items)
    gradients = _Differences(f, items, _host_grad_outputs(grad_outputs), eps, in_place).gradients()
    return tuple(_upload(item, host.cast(gradient, item.host.dtype)) for item, gradient in zip(items, gradients))


# ------------------------------------------------------------------ check_backward


def _autodiff_of(items: list):
    names = sorted({item.adapter.name for item in items})
    if len(names) > 1:
        raise MixedFrameworksError(
            f"check_backward() got inputs of several frameworks ({', '.join(names)}); the autodiff it checks is "
            f"one framework's. Convert the inputs to one framework first (ds.convert).")
    found = autodiff(names[0])
    if found is None:
        title = items[0].adapter.spec.title
        raise NoAutodiffError(
            f"{title} has no automatic differentiation, so check_backward() has no backward to check for "
            f"{title} arrays. Compare your own backward with the numbers instead: "
            f"gx, = ds.testing.numerical_grad(f, (x,), (gy,)); ds.testing.assert_allclose(my_backward(x, gy), gx); "
            f"or check the function written for a framework with autodiff (torch, jax, tensorflow, mxnet).")
    return found


def _grad_outputs_for(outputs, grad_outputs, seed: int) -> list:
    """``(path, float64 host array)`` for each output of ``f`` (as autodiff returned them):
    ``grad_outputs``' values, or random ones (uniform in [-1, 1), drawn with ``seed`` in each
    output's dtype)."""
    read = [(path, _values.read(leaf, "check_backward").host) for path, leaf in _values.leaves(outputs)]
    if grad_outputs is None:
        return [(path, host.float64_copy(host.uniform(tuple(y.shape), y.dtype, seed + position)))
                for position, (path, y) in enumerate(read)]
    given = _host_grad_outputs(grad_outputs)
    _read_outputs(outputs, given)  # the same count and shapes
    by_path = dict(given)
    if len(by_path) == len(given) and set(by_path) == {path for path, _ in read}:
        given = [(path, by_path[path]) for path, _ in read]  # a dict's keys, in the outputs' order
    return [(path, host.zeros(tuple(y.shape)) if gy is None else gy) for (path, y), (_, gy) in zip(read, given)]


def _framework_grad_outputs(outputs, grad_outputs: list):
    """``grad_outputs`` as tensors in the nest structure of ``outputs``, each of its output's
    framework, dtype and device."""
    pending = iter(gy for _, gy in grad_outputs)

    def like(y):
        gy = next(pending)
        adapter = backend_for_tensor(y)
        if adapter is None:
            return gy
        read = _values.read(y, "check_backward").host
        item = _Input(y, adapter, adapter.native_device_of(y), read, "")
        return _upload(item, host.cast(gy, read.dtype))

    return map_nest(outputs, lambda leaf: like)


def check_backward(f, inputs, grad_outputs=None, *, eps: float = 1e-3, atol=None, rtol=None,
                   seed: int = 0) -> None:
    """Check the gradients the framework's own autodiff gives for ``f`` against
    ``numerical_grad``: fail, naming the input, when they differ.

    ``f(*inputs)`` is run under the inputs' framework's autodiff (torch autograd, a
    ``torch.autograd.Function``'s backward included; ``jax.vjp``, so ``jax.custom_vjp``
    rules; ``tf.GradientTape``, so ``tf.custom_gradient``; ``mx.autograd``, so
    ``mx.autograd.Function``), on the inputs' device, and its vector-Jacobian product with
    ``grad_outputs`` is compared with central differences of ``sum(f(*inputs) * grad_outputs)``
    (``eps`` as for ``numerical_grad``). Without ``grad_outputs``, random ones are drawn
    (uniform in [-1, 1), seeded with ``seed``, so a run repeats). The inputs are one
    framework's floating-point tensors; NumPy and CuPy arrays have no autodiff and raise
    ``NoAutodiffError``. The caller's tensors are left as they were (no ``.grad`` written).

    Default tolerances, by the inputs' least precise dtype: float64 ``rtol=1e-4, atol=1e-5``;
    float32 ``rtol=1e-2, atol=1e-3`` (the outputs' rounding, divided by the step, is about
    1e-4 of their size); float16 ``5e-2, 5e-2`` and bfloat16 ``1e-1, 1e-1`` (with a larger
    ``eps``). A mismatch raises ``ds.GradientMismatchError`` (an ``AssertionError``) naming
    each input whose gradient differs, with the number of elements that differ and the
    greatest differences, their index and both values.

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
    items = _inputs(inputs, "check_backward")
    found = _autodiff_of(items)
    first = items[0]
    with first.adapter.on_device(first.native):
        outputs, pullback = found.vjp(f, tuple(item.value for item in items))
    gys = _grad_outputs_for(outputs, grad_outputs, seed)
    with first.adapter.on_device(first.native):
        analytic = pullback(_framework_grad_outputs(outputs, gys))
    numeric = _Differences(f, items, gys, eps, False).gradients()
    _compare_gradients(items, analytic, numeric, eps, rtol, atol)


def _compare_gradients(items: list, analytic: list, numeric: list, eps: float, rtol, atol) -> None:
    default_rtol, default_atol, dtype = host.default_tolerances(
        [host.dtype_name(item.host) for item in items], host.GRADIENT_TOLERANCES)
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    problems = []
    for position, (item, got, want) in enumerate(zip(items, analytic, numeric)):
        got = host.zeros(want.shape) if got is None else host.float64_copy(_values.read(got).host)
        where = f"The gradient of input {position} (of {len(items)}: {item.described})"
        if tuple(got.shape) != tuple(want.shape):
            problems.append(f"{where} has shape {tuple(got.shape)} from the framework's autodiff; the input's "
                            f"is {tuple(want.shape)}.")
            continue
        found = host.mismatch(got, want, rtol, atol, equal_nan=False)
        if found is not None:
            names = ("autodiff", "numerical")
            problems.append("\n".join([
                f"{where} differs from the numerical gradient (central differences, eps={eps:g}) beyond "
                f"rtol={rtol:g}, atol={atol:g}:",
                f"  mismatched elements: {found.count} / {found.total}",
                f"  greatest absolute difference: {found.abs_diff:g} at index {found.abs_index} "
                f"({found.value_at(found.abs_index, names)})",
                f"  greatest relative difference: {found.rel_diff:g} at index {found.rel_index} "
                f"({found.value_at(found.rel_index, names)})",
            ]))
    if problems:
        raise GradientMismatchError("\n".join(problems))
