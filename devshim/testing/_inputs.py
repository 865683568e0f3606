"""The inputs of a gradient check: each caller's tensor read once to the host, with what it
is; the private copies `f` is called with (of the caller's kind: a variable stays a
variable, a parameter a parameter, an MXNet `nd` array an `nd` array); and the check that
`f` left what it was given as it was.

Example:
    >>> items = read_inputs((x, y), "check_backward")
    >>> items[0].title
    'input 0 (of 2: torch float32 (3, 2) on cpu:0)'
"""

from __future__ import annotations

import inspect

from devshim import transfer
from devshim.backends.dispatch import backend_for_tensor
from devshim.backends.numpy import _testing as host
from devshim.backends.registry import autodiff, interop
from devshim.errors import GradientCheckUsageError, GradientFunctionError, ImmutableInputError, InputMutatedError
from devshim.testing import _values

__all__ = ["Input", "read_inputs", "check_callable", "takes_no_arguments", "check_changeable"]


class Input:
    """One input: the caller's tensor, its backend, autodiff (None: none) and native device,
    its values on the host, and its name in messages (`title`: `input 0 (of 2: torch float32
    (3, 2) on cpu:0)`).

    Example:
        >>> item.copy()          # a private copy of the same kind, on the same device
        tensor([...], requires_grad=True)
    """

    __slots__ = ("value", "adapter", "autodiff", "native", "host", "described", "name", "title")

    def __init__(self, value, adapter, native, host_array, described: str, name: str, count: int) -> None:
        self.value, self.adapter, self.native, self.host, self.described = (
            value, adapter, native, host_array, described)
        self.autodiff = autodiff(adapter.name)
        self.name, self.title = name, f"{name} (of {count}: {described})"

    def fresh(self, host_array):
        """A new plain tensor of the input's framework on its device holding `host_array`
        (which it may share: pass an array no one else holds)."""
        found = interop(self.adapter.name)
        if found is None:
            raise GradientCheckUsageError(
                f"The {self.adapter.name} backend cannot make its tensors from host values (it has no interop.py), "
                f"which the gradient checks need to call f with copies of the inputs.")
        return transfer.explicitly(found.from_host, self.adapter, host_array, self.native)

    def copy(self, host_array=None):
        """A private copy of the input, of its kind, holding `host_array` (default: its own
        values); `host_array`'s dtype is the copy's."""
        values = self.host if host_array is None else host_array
        fresh = self.fresh(host.cast(values, values.dtype))
        return fresh if self.autodiff is None else self.autodiff.copy_like(self.value, fresh)

    def gradient(self, host_array):
        """`host_array` as a gradient for this input: its framework, device and dtype."""
        fresh = self.fresh(host.cast(host_array, self.host.dtype))
        return fresh if self.autodiff is None else self.autodiff.gradient_like(self.value, fresh)

    def changeable(self, tensor) -> bool:
        """Whether `tensor` (the input or a copy of it) can be changed in place."""
        if self.autodiff is not None:
            return self.autodiff.can_change_in_place(tensor)
        return getattr(getattr(tensor, "flags", None), "writeable", True)  # NumPy, CuPy

    def check_unchanged(self, tensor, expected, when, restore: bool = False) -> None:
        """Raise `InputMutatedError` when `tensor` (what `f` was given for this input) no
        longer holds `expected`; with `restore` (the caller's own array), put it back first.
        `when`: the call, in words (or a function that says it)."""
        if not self.changeable(tensor):
            return
        now = transfer.to_host(self.adapter, tensor)
        if host.same_bytes(now, expected):
            return
        when = when() if callable(when) else when
        changed = host.changed_count(expected, now)
        if restore:
            self.assign(tensor, self.host)
        what = ("Your array has been put back as it was." if restore else
                "Your own tensors are unchanged: f was given copies.")
        raise InputMutatedError(
            f"f changed {self.title} in place ({changed} of {max(expected.size, 1)} elements differ after its "
            f"call {when}). A gradient check calls f many times, and each call must see the inputs it was "
            f"given: write f without in-place changes to its inputs (y = x + 1, not x += 1), or copy them first. "
            f"{what}")

    def set_element(self, index: tuple, value: float) -> None:
        """`input[index] = value` in place (Chainer's form of `numerical_grad`)."""
        if self.autodiff is not None:
            transfer.explicitly(self.autodiff.set_element, self.value, index, value)
        else:
            transfer.explicitly(self.value.__setitem__, index, value)

    def assign(self, tensor, host_array) -> None:
        """Every element of `tensor` set from `host_array`, in place."""
        fresh = self.fresh(host.cast(host_array, host_array.dtype))
        if self.autodiff is not None:
            transfer.explicitly(self.autodiff.assign, tensor, fresh)
        else:
            transfer.explicitly(tensor.__setitem__, Ellipsis, fresh)


def read_inputs(inputs, function: str, names: str = "input") -> list:
    """The inputs as `Input`\\ s (one tensor, or a tuple or list of them), each checked to be a
    floating-point tensor.

    Example:
        >>> [item.name for item in read_inputs((x, y), "check_backward")]
        ['input 0', 'input 1']
    """
    values = list(inputs) if isinstance(inputs, (tuple, list)) else [inputs]
    if not values:
        raise GradientCheckUsageError(f"{function}() got no inputs: pass a tuple of the tensors to differentiate by.")
    return [_input(value, position, len(values), function, names) for position, value in enumerate(values)]


def _input(value, position: int, count: int, function: str, names: str) -> Input:
    adapter = backend_for_tensor(value)
    if adapter is None:
        raise GradientCheckUsageError(
            f"{function}() {names} {position} is a {type(value).__module__}.{type(value).__qualname__}, not a "
            f"tensor. Pass the tensors to differentiate by; close over anything else (lambda x: f(x, other)).")
    read = _values.read(value, function)
    if not host.is_floating(read.host):
        raise GradientCheckUsageError(
            f"{function}() {names} {position} is a {read.describe()} array: only floating-point inputs have a "
            f"gradient. Close over it instead (lambda x: f(x, indices)), or cast it to a float dtype.")
    native = adapter.native_device_of(value)
    return Input(value, adapter, native, read.host, read.describe(), f"{names} {position}", count)


def check_callable(f, function: str) -> None:
    """Raise `GradientFunctionError` unless `f` can be called.

    Example:
        >>> check_callable(torch.ones(2), "check_backward")
        Traceback (most recent call last):
        devshim.errors.GradientFunctionError: check_backward() takes the function to check first ...
    """
    if not callable(f):
        raise GradientFunctionError(
            f"{function}() takes the function to check first, then its inputs; f is a "
            f"{type(f).__module__}.{type(f).__qualname__}, which cannot be called. Pass the function first: "
            f"{function}(f, (x, y)).")


def takes_no_arguments(f, count: int, function: str, closure_allowed: bool) -> bool:
    """Whether `f` is Chainer's form of `numerical_grad`'s function, reading the inputs it
    closes over (it takes no arguments), rather than taking the `count` inputs as arguments;
    `GradientFunctionError` when it takes neither (or, without `closure_allowed`, when it
    cannot take the inputs). A function without a signature is taken to take them.

    Example:
        >>> takes_no_arguments(lambda x, y: x * y, 2, "check_backward", False)
        False
    """
    try:
        signature = inspect.signature(f)
    except (TypeError, ValueError):  # a builtin without a signature: it takes arguments
        return False
    forms = ((range(count), False), ((), True)) if closure_allowed else ((range(count), False),)
    for arguments, closes_over in forms:
        try:
            signature.bind(*arguments)
            return closes_over
        except TypeError:
            continue
    either = ", or, when f takes none, changes the inputs f closes over in place" if closure_allowed else ""
    raise GradientFunctionError(
        f"{function}() calls f with the {count} input{'s' if count != 1 else ''} as arguments{either}; this "
        f"f{signature} cannot be called so. Pass one input per argument of f, in order (close over the "
        f"others: lambda x: f(x, other)), or write f to take the inputs: lambda x, y: ...")


def check_changeable(items: list) -> None:
    """Raise `ImmutableInputError` unless every input can be changed in place."""
    for item in items:
        if not item.changeable(item.value):
            raise ImmutableInputError(
                f"numerical_grad() changes the inputs in place when f takes no arguments (it reads the arrays it "
                f"closes over), but {item.name} ({item.described}) cannot be changed in place. Write f to "
                f"take the inputs as arguments instead: numerical_grad(lambda *xs: ..., inputs, grad_outputs).")
