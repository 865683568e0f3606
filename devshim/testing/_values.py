"""Reading the values `ds.testing` compares: each tensor copied to the host through
devshim's transfer door (an explicit copy, which a transfer guard lets through), with what
it was: its framework, dtype, shape and device.

Example:
    >>> read(torch.ones(2)).describe()
    'torch float32 (2,) on cpu:0'
"""

from __future__ import annotations

import dataclasses
from typing import Any

from devshim import _tree, transfer
from devshim.backends.dispatch import backend_for_tensor
from devshim.backends.numpy import _testing as host
from devshim.errors import MultiDeviceValueError, NestCycleError, NotATensorError

__all__ = ["Value", "read", "number_array", "node", "leaves", "path_text", "check_no_cycle"]

_NUMBERS = (bool, int, float, complex)


class Value:
    """One leaf read to the host: `host` (a NumPy array) and where it came from.

    `scalar`: a Python or NumPy scalar, which `assert_allclose` broadcasts. `dtype`:
    the NumPy name of its dtype, None for a Python number (which sets no tolerance).

    Example:
        >>> read(2.0).scalar, read(2.0).dtype
        (True, None)
    """

    __slots__ = ("host", "framework", "dtype", "device", "scalar")

    def __init__(self, host_array, framework: str, dtype, device: str, scalar: bool) -> None:
        self.host, self.framework, self.dtype, self.device, self.scalar = (
            host_array, framework, dtype, device, scalar)

    @property
    def shape(self) -> tuple:
        return tuple(self.host.shape)

    def describe(self) -> str:
        """`framework dtype shape on device`, for messages.

        Example:
            >>> read(np.ones((2, 3), np.float32)).describe()
            'numpy float32 (2, 3) on cpu:0'
        """
        if self.dtype is None:  # Python numbers: no dtype of their own
            return f"{self.framework} {self.shape} on {self.device}"
        return f"{self.framework} {self.dtype} {self.shape} on {self.device}"


def read(value, function: str = "assert_allclose") -> Value:
    """`value` (a tensor of any framework, a Python or NumPy scalar) read to the host.

    Example:
        >>> read(jnp.ones(2)).host
        array([1., 1.], dtype=float32)
    """
    adapter = backend_for_tensor(value)
    if adapter is None:
        if not isinstance(value, _NUMBERS):
            raise NotATensorError.for_value(value, function)
        return Value(host.host_array(value), f"Python {type(value).__name__}", None, "the host", True)
    array = transfer.to_host(adapter, value)
    try:
        place = adapter.tensor_device(value)
        device = f"{place} (virtual)" if place.virtual else str(place)
    except MultiDeviceValueError:  # a JAX array spread over devices
        device = f"several devices ({adapter.native_device_of(value)})"
    if host.is_scalar(value):
        return Value(host.host_array(array), "NumPy scalar", host.dtype_name(array), device, True)
    return Value(array, adapter.name, host.dtype_name(array), device, False)


def number_array(value):
    """`value` read as one array when it is a list or tuple (of lists or tuples) of Python
    numbers of a rectangular shape, as a host `Value`; None otherwise.

    Example:
        >>> number_array([[1, 2], [3, 4]]).shape
        (2, 2)
    """
    shape = _number_shape(value)
    if shape is None or not shape:
        return None
    return Value(host.host_array(_flatten(value)).reshape(shape), "Python list", None, "the host", False)


def _number_shape(value: Any):
    """The shape of a rectangular list of Python numbers (`()` for one number), else None."""
    if isinstance(value, _NUMBERS) and backend_for_tensor(value) is None:
        return ()
    if type(value) not in (list, tuple) or not value:
        return None
    items: Any = value
    shapes = {_number_shape(item) for item in items}
    if len(shapes) != 1 or None in shapes:
        return None
    return (len(items), *shapes.pop())


def _flatten(value) -> list:
    if isinstance(value, (list, tuple)):
        return [number for item in value for number in _flatten(item)]
    return [value]


# ------------------------------------------------------------------ nests, with exact paths

#: What a nest node is: one value to compare, nothing (None, as JAX's trees have it), or a
#: container whose children are found by key (mappings), field name (namedtuples, dataclasses)
#: or position (lists, tuples, deques; sets in iteration order).
LEAF, EMPTY, MAPPING, FIELDS, SEQUENCE, SET = "leaf", "empty", "mapping", "fields", "sequence", "set"
_KINDS = {_tree.DICT: MAPPING, _tree.DICT_SUB: MAPPING, _tree.MAPPING: MAPPING, _tree.NAMEDTUPLE: FIELDS,
          _tree.DATACLASS: FIELDS, _tree.SET: SET}


def node(value: Any, none_is_leaf: bool = False) -> tuple:
    """`(kind, children)` of one nest node: children are `(step, child)` pairs, a step
    `(kind, key)`; a leaf has none. None is an empty node unless `none_is_leaf`.

    Example:
        >>> node({"a": 1})
        ('mapping', [(('mapping', 'a'), 1)])
    """
    if value is None and not none_is_leaf:
        return EMPTY, []
    container: Any = value
    shape = _tree.container_kind(type(container))
    if shape == _tree.LEAF:
        return LEAF, []
    kind = _KINDS.get(shape, SEQUENCE)
    if kind == MAPPING:
        return kind, [((kind, key), item) for key, item in container.items()]
    if kind == FIELDS:
        names = (type(container)._fields if shape == _tree.NAMEDTUPLE
                 else [field.name for field in dataclasses.fields(container)])
        return kind, [((kind, name), getattr(container, name)) for name in names if hasattr(container, name)]
    return kind, [((kind, i), item) for i, item in enumerate(container)]


def path_text(steps: tuple) -> str:
    """A path of steps as Python would index it: `['w'][0].bias`.

    Example:
        >>> path_text((("mapping", "w"), ("sequence", 0), ("fields", "bias")))
        "['w'][0].bias"
    """
    parts = []
    for kind, key in steps:
        parts.append(f".{key}" if kind == FIELDS else f"{{item {key}}}" if kind == SET else f"[{key!r}]")
    return "".join(parts)


def leaves(nest, none_is_leaf: bool = False) -> list:
    """`(steps, leaf)` for every leaf of `nest`, in order; a lone value is one leaf at
    `()`. A nest that contains itself raises `NestCycleError`.

    Example:
        >>> leaves({"w": [1.0]})
        [((('mapping', 'w'), ('sequence', 0)), 1.0)]
    """
    found: list = []
    _collect(nest, (), none_is_leaf, found, [])
    return found


def _collect(value, steps: tuple, none_is_leaf: bool, found: list, open_nodes: list) -> None:
    kind, children = node(value, none_is_leaf)
    if kind == LEAF:
        found.append((steps, value))
        return
    check_no_cycle(value, steps, open_nodes)
    open_nodes.append(value)
    for step, child in children:
        _collect(child, (*steps, step), none_is_leaf, found, open_nodes)
    open_nodes.pop()


def check_no_cycle(value, steps: tuple, open_nodes: list) -> None:
    """Raise `NestCycleError` when `value` is one of the containers being walked."""
    if any(value is other for other in open_nodes):
        raise NestCycleError(
            f"This nest contains itself at {path_text(steps) or 'its top level'}: walking it would never end. "
            f"Pass a nest without the loop.")
