"""Which of `f`'s outputs a gradient check differentiates, and the gradient it gives each.

`f` returns one tensor or a nest of them (dicts matched by key, whatever their order; None
is an empty part, as in JAX's trees). Floating-point tensors have a gradient; integer and
boolean tensors and values that are no tensors have none, and get none. `grad_outputs` gives
one gradient per output (None leaves that output out of both passes); without it, the checks
draw one for each floating-point output.

Example:
    >>> selection = Selection.build({"y": y, "mask": y > 0}, None, 0, "check_backward")
    >>> [output.title for output in selection.outputs]
    ["output ['y']"]
"""

from __future__ import annotations

from typing import Any

from devshim import transfer
from devshim.backends.dispatch import backend_for_tensor
from devshim.backends.numpy import _testing as host
from devshim.backends.registry import autodiff, interop
from devshim.errors import GradientCheckUsageError
from devshim.testing import _values

__all__ = ["Output", "Selection"]


class Output:
    """One output the check differentiates: where it is in `f`'s result, its dtype and
    shape, and its gradient (a float64 host array).

    Example:
        >>> output.title, output.shape
        ("output ['y']", (3, 2))
    """

    __slots__ = ("steps", "title", "dtype", "shape", "gy")

    def __init__(self, steps: tuple, dtype, shape: tuple, gy) -> None:
        path = _values.path_text(steps)
        self.steps, self.dtype, self.shape, self.gy = steps, dtype, shape, gy
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
        `seed`, an int or a tuple of ints)."""
        found = _values.leaves(result)
        reads = [_read_output(leaf, function) for _, leaf in found]
        given = None if grad_outputs is None else _match([steps for steps, _ in found], grad_outputs)
        outputs = []
        for position, ((steps, _), read) in enumerate(zip(found, reads)):
            if given is None:
                if read is not None and host.is_floating(read):
                    gy = host.float64_copy(host.uniform(tuple(read.shape), read.dtype, _seed(seed, position)))
                    outputs.append(Output(steps, read.dtype, tuple(read.shape), gy))
                continue
            if given[position] is not None:
                outputs.append(_given(steps, read, given[position]))
        if not outputs:
            raise GradientCheckUsageError(
                f"{function}() found no output of f to differentiate: f returned {len(found)} value(s), none of "
                f"them a floating-point tensor with a gradient given (integer and boolean outputs have no "
                f"gradient; None in grad_outputs leaves an output out). Return the values to differentiate.")
        return cls(outputs, function)

    @property
    def grad_outputs(self) -> list:
        """The outputs' gradients, float64 host arrays, in order."""
        return [output.gy for output in self.outputs]

    def pick(self, result) -> list:
        """The selected outputs' tensors in `result` (a later result of `f`)."""
        return [_at(result, output.steps, self.function) for output in self.outputs]

    def read(self, result) -> list:
        """The selected outputs of `result` read to the host (explicit copies)."""
        found = []
        for output, leaf in zip(self.outputs, self.pick(result)):
            adapter = backend_for_tensor(leaf)
            value: Any = (_values.read(leaf, self.function).host if adapter is None
                          else transfer.to_host(adapter, leaf))
            if tuple(value.shape) != output.shape:
                raise GradientCheckUsageError(
                    f"{output.title} of f had shape {output.shape} on f's first call and {tuple(value.shape)} on a "
                    f"later one: a gradient check needs f to return the same shapes for inputs that differ by eps.")
            found.append(value)
        return found

    def upload(self, tensors: list) -> list:
        """The gradients as tensors like `tensors` (the selected outputs of a result): each of
        its output's framework, kind, dtype and device."""
        return [_like(tensor, output) for tensor, output in zip(tensors, self.outputs)]


def _seed(seed, position: int):
    return (*seed, position) if isinstance(seed, tuple) else (seed, position)


def _read_output(leaf, function: str):
    """A leaf of `f`'s result read to the host, or None when it is no tensor."""
    if backend_for_tensor(leaf) is None:
        return None
    return _values.read(leaf, function).host


def _given(steps: tuple, read, gy) -> Output:
    title = Output(steps, None, (), None).title
    if read is None or not host.is_floating(read):
        kind = "no tensor" if read is None else f"a {host.dtype_name(read)} tensor"
        raise GradientCheckUsageError(
            f"grad_outputs gives a gradient for {title} of f, which is {kind}: it has no gradient. Pass None for it.")
    value = host.float64_copy(_values.read(gy, "grad_outputs").host)
    if tuple(value.shape) != tuple(read.shape):
        raise GradientCheckUsageError(
            f"grad_outputs for {title} of f has shape {tuple(value.shape)}, but {title} of f has shape "
            f"{tuple(read.shape)}: each gradient has its output's shape.")
    return Output(steps, read.dtype, tuple(read.shape), value)


def _match(found: list, grad_outputs) -> list:
    """`grad_outputs`' leaves (None included) in the order of `found` (the outputs' steps):
    by path where both name the same leaves (a dict's keys, in whatever order a framework
    rebuilt it), else by position; a None at a place where `f` returned an empty part (JAX's
    None) is dropped."""
    given = _values.leaves(grad_outputs, none_is_leaf=True)
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
        _, children = _values.node(value)
        found = dict(children)
        if step not in found:
            raise GradientCheckUsageError(
                f"{function}(): f returned a result of another structure than on its first call (it has nothing at "
                f"{_values.path_text(steps)}): a gradient check needs f to return the same structure every call.")
        value = found[step]
    return value


def _like(tensor, output: Output):
    adapter = backend_for_tensor(tensor)
    maker = None if adapter is None else interop(adapter.name)
    if adapter is None or maker is None:
        return output.gy
    fresh = transfer.explicitly(maker.from_host, adapter, host.cast(output.gy, output.dtype),
                                adapter.native_device_of(tensor))
    found = autodiff(adapter.name)
    return fresh if found is None else found.gradient_like(tensor, fresh)
