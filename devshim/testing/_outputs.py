"""Which of `f`'s outputs a gradient check differentiates, and the gradient it gives each.

`f` returns one tensor or a nest of them (dicts matched by key, whatever their order; None
is an empty part, as in JAX's trees). Floating-point tensors have a gradient; integer and
boolean tensors and values that are no tensors have none, and get none. `grad_outputs` gives
one gradient per output (None leaves that output out of both passes; a Python or NumPy number
stands for an array of the output's shape, as in Chainer); without it, the checks draw one
for each floating-point output. A number `f` returns (a constant) takes a gradient too: it
adds nothing to either pass.

Example:
    >>> selection = Selection.build({"y": y, "mask": y > 0}, None, 0, "check_backward")
    >>> [output.title for output in selection.outputs]
    ["output ['y']"]
"""

from __future__ import annotations

import numpy as np

from devshim import _tree, transfer
from devshim.backends.dispatch import backend_for_tensor
from devshim.backends.registry import autodiff, interop
from devshim.errors import GradientCheckUsageError
from devshim.testing import _values

__all__ = ["Output", "Selection"]


class Output:
    """One output the check differentiates: where it is in `f`'s result, its dtype and
    shape, its gradient (a float64 host array), and whether it is a tensor (a number `f`
    returns is a constant, with no gradient of the autodiff's to give).

    Example:
        >>> output.title, output.shape
        ("output ['y']", (3, 2))
    """

    __slots__ = ("steps", "title", "dtype", "shape", "gy", "tensor")

    def __init__(self, steps: tuple, dtype, shape: tuple, gy, tensor: bool = True) -> None:
        path = _tree.path_text(steps)
        self.steps, self.dtype, self.shape, self.gy, self.tensor = steps, dtype, shape, gy, tensor
        self.title = f"output {path}" if path else "the output"


class Selection:
    """The outputs a check differentiates (`outputs`), picked from each result of `f`.

    Example:
        >>> selection.read(f(x))
        [array([...], dtype=float32)]
    """

    def __init__(self, outputs: list, function: str) -> None:
        self.outputs, self.function = outputs, function

    @classmethod
    def build(cls, result, grad_outputs, seed, function: str) -> "Selection":
        """From `f`'s first result: each floating-point output, with its gradient from
        `grad_outputs` (None: drawn uniformly from [-1, 1) in the output's dtype, with
        `seed`, an int or a tuple of ints). Given grad outputs that are all None select no
        output: the gradients are zero, as in Chainer."""
        found = _tree.leaves(result)
        reads = [_read_output(leaf, function) for _, leaf in found]
        if grad_outputs is not None:
            given = _match([steps for steps, _ in found], grad_outputs)
            return cls([_given(steps, leaf, read, gy) for (steps, leaf), read, gy in zip(found, reads, given)
                        if gy is not None], function)
        outputs = []
        for position, ((steps, leaf), read) in enumerate(zip(found, reads)):
            if read is not None and _values.is_floating(read) and not isinstance(leaf, _NUMBERS):
                rng = np.random.default_rng((*seed, position) if isinstance(seed, tuple) else (seed, position))
                gy = rng.uniform(-1.0, 1.0, size=read.shape).astype(read.dtype).astype(np.float64)
                outputs.append(Output(steps, read.dtype, tuple(read.shape), gy))
        if not outputs:
            raise GradientCheckUsageError(
                f"{function}() found no output of f to differentiate: f returned {len(found)} value(s), none of "
                f"them a floating-point tensor (integer and boolean outputs have no gradient). Return the values "
                f"to differentiate, or pass grad_outputs (all None: a zero gradient, as in Chainer).")
        return cls(outputs, function)

    @property
    def grad_outputs(self) -> list:
        """The outputs' gradients, float64 host arrays, in order."""
        return [output.gy for output in self.outputs]

    def pick(self, result) -> list:
        """The selected outputs' tensors in `result` (a later result of `f`); those that are
        numbers (constants) are left out: the autodiff has nothing to differentiate there."""
        return [_at(result, output.steps, self.function) for output in self.outputs if output.tensor]

    def read(self, result) -> list:
        """The selected outputs of `result` read to the host: copies, taken at once, so that an
        output that is a view of an input `f` closes over keeps the values it had."""
        found = []
        for output in self.outputs:
            value = _values.read_copy(_at(result, output.steps, self.function), self.function)
            if tuple(value.shape) != output.shape:
                raise GradientCheckUsageError(
                    f"{output.title} of f had shape {output.shape} on f's first call and {tuple(value.shape)} on a "
                    f"later one: a gradient check needs f to return the same shapes for inputs that differ by eps.")
            found.append(value)
        return found

    def upload(self, tensors: list) -> list:
        """The gradients as tensors like `tensors` (the picked outputs of a result): each of
        its output's framework, kind, dtype and device."""
        return [_like(tensor, output) for tensor, output in zip(tensors, [o for o in self.outputs if o.tensor])]


#: Python numbers `f` may return: constants to the autodiff, values to the numerical pass.
_NUMBERS = (bool, int, float)


def _read_output(leaf, function: str):
    """A leaf of `f`'s result read to the host (a number as a 0-d array), or None when it is
    neither a tensor nor a number."""
    if isinstance(leaf, _NUMBERS) or backend_for_tensor(leaf) is not None:
        return _values.read(leaf, function).host
    return None


def _given(steps: tuple, leaf, read, gy) -> Output:
    title = Output(steps, None, (), None).title
    constant = isinstance(leaf, _NUMBERS)
    if read is None or not constant and not _values.is_floating(read):
        kind = "no tensor" if read is None else f"a {read.dtype.name} tensor"
        raise GradientCheckUsageError(
            f"grad_outputs gives a gradient for {title} of f, which is {kind}: it has no gradient. Pass None for it.")
    value = _values.read(gy, "grad_outputs")
    grad = np.asarray(value.host, dtype=np.float64)
    if value.scalar:  # a number stands for an array of the output's shape
        grad = np.full(read.shape, grad)
    if tuple(grad.shape) != tuple(read.shape):
        raise GradientCheckUsageError(
            f"grad_outputs for {title} of f has shape {tuple(grad.shape)}, but {title} of f has shape "
            f"{tuple(read.shape)}: each gradient has its output's shape (or is a number).")
    return Output(steps, read.dtype, tuple(read.shape), grad, tensor=not constant)


def _match(found: list, grad_outputs) -> list:
    """`grad_outputs`' leaves (None included) in the order of `found` (the outputs' steps):
    by path where both name the same leaves (a dict's keys, in whatever order a framework
    rebuilt it), else by position; a None at a place where `f` returned an empty part (JAX's
    None) is dropped."""
    given = _tree.leaves(grad_outputs, none_is_leaf=True)
    places = set(found)
    for candidates in (given, [(steps, gy) for steps, gy in given if gy is not None or steps in places]):
        by_steps = dict(candidates)
        if len(by_steps) == len(candidates) and set(by_steps) == places and len(places) == len(found):
            return [by_steps[steps] for steps in found]
        if len(candidates) == len(found):
            return [gy for _, gy in candidates]
    raise GradientCheckUsageError(
        f"f returned {len(found)} output{'s' if len(found) != 1 else ''}, but grad_outputs has {len(given)}: give "
        f"one gradient (or None) per output, in the order of f's outputs.")


def _at(result, steps: tuple, function: str):
    value = result
    for step in steps:
        _, children = _tree.node(value)
        found = dict(children)
        if step not in found:
            raise GradientCheckUsageError(
                f"{function}(): f returned a result of another structure than on its first call (it has nothing at "
                f"{_tree.path_text(steps)}): a gradient check needs f to return the same structure every call.")
        value = found[step]
    return value


def _like(tensor, output: Output):
    adapter = backend_for_tensor(tensor)
    maker = None if adapter is None else interop(adapter.name)
    if adapter is None or maker is None:
        return output.gy
    fresh = transfer.explicitly(maker.from_host, adapter, np.array(output.gy, dtype=output.dtype),
                                adapter.native_device_of(tensor))
    found = autodiff(adapter.name)
    return fresh if found is None else found.gradient_like(tensor, fresh)
