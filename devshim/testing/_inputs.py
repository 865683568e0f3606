"""The inputs of a gradient check: each caller's tensor read once to the host, with what it
is; the private copies `f` is called with (of the caller's kind: a variable stays a
variable, a parameter a parameter, an MXNet `nd` array an `nd` array); the tensors a check
changes in place instead (what Chainer's form of `numerical_grad` closes over, and `params`);
and the check that `f` left what it was given as it was.

Example:
    >>> items = read_inputs((x, y), "check_backward")
    >>> items[0].title
    'input 0 (of 2: torch float32 (3, 2) on cpu:0)'
"""

from __future__ import annotations

import contextlib
import inspect

import numpy as np

from devshim import transfer
from devshim.backends.dispatch import backend_for_tensor
from devshim.backends.registry import autodiff, interop
from devshim.errors import GradientCheckUsageError, GradientFunctionError, ImmutableInputError, InputMutatedError
from devshim.testing import _values

__all__ = ["Input", "read_inputs", "as_list", "takes_no_arguments", "changed_in_place", "retyped"]


class Input:
    """One input: the caller's tensor, its backend, autodiff (None: none) and native device,
    its values on the host, and its name in messages (`title`: `input 0 (of 2: torch float32
    (3, 2) on cpu:0)`). `floating`: it has a gradient; `checked`: the check compares it
    (floating, and not left out by `no_grads`); `in_place`: `f` reads the caller's tensor
    itself (a closure's, a param), which a check changes an element at a time and puts back.

    Example:
        >>> item.copy()          # a private copy of the same kind, on the same device
        tensor([...], requires_grad=True)
    """

    __slots__ = ("value", "adapter", "autodiff", "native", "host", "described", "name", "title", "floating",
                 "checked", "in_place")

    def __init__(self, value, adapter, read, name: str, count: int) -> None:
        self.value, self.adapter, self.host, self.described = value, adapter, read.host, read.describe()
        self.native = adapter.native_device_of(value)
        self.autodiff = autodiff(adapter.name)
        self.name, self.title = name, f"{name} (of {count}: {self.described})"
        self.floating = self.checked = _values.is_floating(read.host)
        self.in_place = False

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
        fresh = self.fresh(np.array(self.host if host_array is None else host_array))  # a copy keeps the dtype
        return fresh if self.autodiff is None else self.autodiff.copy_like(self.value, fresh)

    def gradient(self, host_array):
        """`host_array` as a gradient for this input: its framework, device and dtype."""
        fresh = self.fresh(np.array(host_array, dtype=self.host.dtype))
        return fresh if self.autodiff is None else self.autodiff.gradient_like(self.value, fresh)

    def changeable(self, tensor) -> bool:
        """Whether `tensor` (the input or a copy of it) can be changed in place."""
        if self.autodiff is not None:
            return self.autodiff.can_change_in_place(tensor)
        return getattr(getattr(tensor, "flags", None), "writeable", True)  # NumPy, CuPy

    def check_unchanged(self, tensor, expected, when, restore=None) -> None:
        """Raise `InputMutatedError` when `tensor` (what `f` was given for this input) no
        longer holds `expected`; `restore` (the caller's own tensor): the values to put back
        first. `when`: the call, in words (or a function that says it)."""
        if not self.changeable(tensor):
            return
        now = transfer.to_host(self.adapter, tensor)
        if now.shape == expected.shape and now.dtype == expected.dtype and now.tobytes() == expected.tobytes():
            return
        when = when() if callable(when) else when
        changed = _changed_count(expected, now)
        if restore is not None:
            self.assign(tensor, restore)
        what = ("Your array has been put back as it was." if restore is not None else
                "Your own tensors are unchanged: f was given copies.")
        raise InputMutatedError(
            f"f changed {self.title} in place ({changed} of {max(expected.size, 1)} elements differ after its "
            f"call {when}). A gradient check calls f many times, and each call must see the inputs it was "
            f"given: write f without in-place changes to its inputs (y = x + 1, not x += 1), or copy them first. "
            f"{what}")

    def set_element(self, index: tuple, value: float) -> None:
        """`input[index] = value` in place (the tensor `f` reads itself)."""
        if self.autodiff is not None:
            transfer.explicitly(self.autodiff.set_element, self.value, index, value)
        else:
            transfer.explicitly(self.value.__setitem__, index, value)

    def assign(self, tensor, host_array) -> None:
        """Every element of `tensor` set from `host_array`, in place."""
        fresh = self.fresh(np.array(host_array, dtype=host_array.dtype))
        if self.autodiff is not None:
            transfer.explicitly(self.autodiff.assign, tensor, fresh)
        else:
            transfer.explicitly(tensor.__setitem__, Ellipsis, fresh)


def _changed_count(before, after) -> int:
    if before.shape != after.shape:
        return int(before.size)
    a, b = before.astype(np.float64), after.astype(np.float64)
    return int(np.count_nonzero(~((a == b) | (np.isnan(a) & np.isnan(b)))))


def read_inputs(inputs, function: str, names: str = "input", integers: bool = False) -> list:
    """The inputs as `Input`\\ s (one tensor, or a tuple or list of them): floating-point
    tensors, and with `integers` integer and boolean ones too (passed to `f` as they are,
    with no gradient). Complex inputs are refused, saying how to check them.

    Example:
        >>> [item.name for item in read_inputs((x, y), "check_backward")]
        ['input 0', 'input 1']
    """
    values = as_list(inputs)
    if not values and names == "input":
        raise GradientCheckUsageError(f"{function}() got no inputs: pass a tuple of the tensors to differentiate by.")
    return [_input(value, position, len(values), function, names, integers) for position, value in enumerate(values)]


def as_list(values) -> list:
    """`values` as a list: a tuple's or list's items, or the one value."""
    return list(values) if isinstance(values, (tuple, list)) else [values]


def _input(value, position: int, count: int, function: str, names: str, integers: bool) -> Input:
    adapter = backend_for_tensor(value)
    if adapter is None:
        raise GradientCheckUsageError(
            f"{function}() {names} {position} is a {type(value).__module__}.{type(value).__qualname__}, not a "
            f"tensor. Pass the tensors to differentiate by; close over anything else (lambda x: f(x, other)).")
    read = _values.read(value, function)
    kind = read.host.dtype.kind
    if kind == "c":
        raise GradientCheckUsageError(
            f"{function}() {names} {position} is a {read.describe()} array. devshim's gradient checks take real "
            f"inputs only: frameworks give the gradient of a complex input by different conventions (torch "
            f"and TensorFlow the conjugate Wirtinger derivative, JAX its conjugate), which they do not compare. "
            f"Check it as two real inputs, its real and imaginary parts: lambda re, im: f(re + 1j * im).")
    if not _values.is_floating(read.host) and not integers:
        raise GradientCheckUsageError(
            f"{function}() {names} {position} is a {read.describe()} array: central differences move each "
            f"element by eps, which an integer or boolean array cannot hold. Close over it instead "
            f"(lambda x: f(x, indices)), or cast it to a float dtype.")
    return Input(value, adapter, read, f"{names} {position}", count)


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


def changed_in_place(items: list, why: str, how: str) -> list:
    """`items` marked as tensors `f` reads itself, which the numerical pass changes an element
    at a time; `ImmutableInputError` for one that cannot be changed in place (a JAX array, a
    TensorFlow tensor that is no variable), saying `why` they would be and `how` to do without.

    Example:
        >>> changed_in_place(read_inputs((w,), "check_backward", names="param"), "params are", "...")
    """
    for item in items:
        if not item.changeable(item.value):
            raise ImmutableInputError(
                f"{why} changed in place, an element at a time, since f reads them itself, but {item.name} "
                f"({item.described}) cannot be changed in place. Write f to take the inputs as arguments instead: "
                f"{how}.")
        item.in_place = True
    return items


@contextlib.contextmanager
def retyped(items: list, dtypes: list, function: str):
    """The tensors `f` reads itself (`in_place` items) holding their values in `dtypes` (one
    NumPy dtype, or None, per item) for the block, where that differs from their own:
    torch's change their dtype in place (`tensor.data`); other frameworks' cannot, and are
    refused, naming what to do.

    Example:
        >>> with retyped(items, [np.dtype("float64")], "numerical_grad"):
        ...     f()
    """
    with contextlib.ExitStack() as stack:
        for item, dtype in zip(items, dtypes):
            if not item.in_place or dtype is None or dtype == item.host.dtype:
                continue
            fresh = item.fresh(item.host.astype(dtype))
            restore = None if item.autodiff is None else item.autodiff.retype(item.value, fresh)
            if restore is None:
                raise GradientCheckUsageError(
                    f"{function}(dtype={dtype.name!r}) takes the numerical gradient of the values f reads in "
                    f"{dtype.name}, but {item.name} ({item.described}) is read by f itself, and only torch can "
                    f"change a tensor's dtype in place. Pass it as an argument of f instead: "
                    f"{function}(lambda x: ..., (x,), ..., dtype={dtype.name!r}).")
            stack.callback(restore)
        yield
