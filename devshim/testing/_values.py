"""Reading the values ``ds.testing`` compares: each tensor copied to the host through
devshim's transfer door (an explicit copy, which a transfer guard lets through), with what
it was: its framework, dtype, shape and device.

Example:
    >>> read(torch.ones(2)).describe()
    'torch float32 (2,) on cpu:0'
"""

from __future__ import annotations

import re

from devshim import _tree, transfer
from devshim.backends.dispatch import backend_for_tensor
from devshim.backends.numpy import _testing as host
from devshim.errors import MultiDeviceValueError, NotATensorError

__all__ = ["Value", "read", "number_group", "leaves"]

_NUMBERS = (bool, int, float, complex)
_INDEX_PATH = re.compile(r"(\[\d+\])+")


class Value:
    """One leaf read to the host: ``host`` (a NumPy array) and where it came from.

    ``scalar``: a Python or NumPy scalar, which ``assert_allclose`` broadcasts. ``dtype``:
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
        """``framework dtype shape on device``, for messages.

        Example:
            >>> read(np.ones((2, 3), np.float32)).describe()
            'numpy float32 (2, 3) on cpu:0'
        """
        if self.dtype is None:  # Python numbers: no dtype of their own
            return f"{self.framework} {self.shape} on {self.device}"
        return f"{self.framework} {self.dtype} {self.shape} on {self.device}"


def read(value, function: str = "assert_allclose") -> Value:
    """``value`` (a tensor of any framework, a Python or NumPy scalar) read to the host.

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


def number_group(found: list, start: int, prefix: str):
    """``(Value, count)`` for the leaves of ``found`` (a ``leaves`` list) from ``start`` on that
    lie under ``prefix`` in a list (of lists) of Python numbers, read as one array; None
    when there are none, or they are ragged.

    Example:
        >>> number_group(leaves({"w": [[1, 2], [3, 4]]}), 0, "['w']")[0].shape
        (2, 2)
    """
    indices, numbers = [], []
    for path, leaf in found[start:]:
        suffix = path[len(prefix):] if path.startswith(prefix) else ""
        if not suffix or not isinstance(leaf, _NUMBERS) or backend_for_tensor(leaf) is not None:
            break
        position = _INDEX_PATH.fullmatch(suffix)
        if position is None:
            break
        indices.append(tuple(int(i) for i in suffix[1:-1].split("][")))
        numbers.append(leaf)
    if not numbers or len({len(index) for index in indices}) != 1:
        return None
    shape = tuple(max(index[level] for index in indices) + 1 for level in range(len(indices[0])))
    if _count(shape) != len(numbers):
        return None
    array = host.host_array(numbers).reshape(shape)
    return Value(array, "Python list", None, "the host", False), len(numbers)


def _count(shape: tuple) -> int:
    total = 1
    for size in shape:
        total *= size
    return total


def leaves(nest) -> list:
    """``(path, leaf)`` for every leaf of ``nest`` (devshim's nest walking: dicts, lists,
    tuples, namedtuples, dataclasses); a lone tensor is one leaf at path ``""``.

    Example:
        >>> leaves({"w": [1.0]})
        [("['w'][0]", 1.0)]
    """
    return list(_tree.iter_leaves(nest))
