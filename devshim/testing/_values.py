"""Reading the values `ds.testing` compares: each tensor copied to the host through devshim's
transfer door (an explicit copy, which a transfer guard lets through), with what it was: its
framework, dtype, shape and device; and what each dtype can hold. The nests they come in are
walked by `devshim._tree` (`node`, `leaves`, `zip_leaves`), handed these readers.

Example:
    >>> read(torch.ones(2)).describe()
    'torch float32 (2,) on cpu:0'
"""

from __future__ import annotations

from typing import Any

import numpy as np

from devshim import transfer
from devshim.backends.dispatch import backend_for_tensor
from devshim.errors import MultiDeviceValueError, NotATensorError

__all__ = ["Value", "read", "read_copy", "number_array", "is_floating", "is_finite_number", "unit_roundoff",
           "smallest_subnormal", "is_half", "float_dtype"]

_NUMBERS = (bool, int, float, complex, np.generic)

#: Unit roundoff (half the spacing of the values at 1) of each floating dtype.
_UNIT_ROUNDOFF = {
    "float64": 2.0 ** -53, "complex128": 2.0 ** -53, "float32": 2.0 ** -24, "complex64": 2.0 ** -24,
    "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8, "float8_e4m3fn": 2.0 ** -4, "float8_e4m3fnuz": 2.0 ** -4,
    "float8_e4m3b11fnuz": 2.0 ** -4, "float8_e5m2": 2.0 ** -3, "float8_e5m2fnuz": 2.0 ** -3,
}
#: The smallest positive value of each floating dtype (a subnormal): the absolute rounding step
#: of every result below its normal range, which no relative tolerance covers.
_SMALLEST_SUBNORMAL = {
    "float64": 2.0 ** -1074, "complex128": 2.0 ** -1074, "float32": 2.0 ** -149, "complex64": 2.0 ** -149,
    "float16": 2.0 ** -24, "bfloat16": 2.0 ** -133, "float8_e4m3fn": 2.0 ** -9, "float8_e4m3fnuz": 2.0 ** -10,
    "float8_e4m3b11fnuz": 2.0 ** -13, "float8_e5m2": 2.0 ** -16, "float8_e5m2fnuz": 2.0 ** -17,
}
#: Floating dtypes by precision, least precise first (ml_dtypes' types are not kind "f").
PRECISION = ("float8_e5m2fnuz", "float8_e5m2", "float8_e4m3b11fnuz", "float8_e4m3fnuz", "float8_e4m3fn",
             "bfloat16", "float16", "complex64", "float32", "complex128", "float64")


def is_floating(array) -> bool:
    """Whether `array` holds real floating-point numbers (bfloat16 and float8 included).

    Example:
        >>> is_floating(np.ones(2)), is_floating(np.arange(2))
        (True, False)
    """
    return array.dtype.kind == "f" or array.dtype.name in PRECISION and array.dtype.kind != "c"


def is_finite_number(value) -> bool:
    """Whether `value` is a real number (int or float, not bool) that is finite.

    Example:
        >>> is_finite_number(1e-3), is_finite_number(float("nan")), is_finite_number(True)
        (True, False, False)
    """
    real = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    return real and bool(np.isfinite(value))


def unit_roundoff(dtype) -> float:
    """Half the spacing of `dtype`'s values at 1 (0 for integers and booleans: they are exact).

    Example:
        >>> unit_roundoff(np.dtype("float32"))
        5.960464477539063e-08
    """
    return _UNIT_ROUNDOFF.get(np.dtype(dtype).name, 0.0)


def smallest_subnormal(dtype) -> float:
    """The smallest positive value `dtype` holds (0 for integers and booleans).

    Example:
        >>> smallest_subnormal(np.dtype("float16"))
        5.960464477539063e-08
    """
    return _SMALLEST_SUBNORMAL.get(np.dtype(dtype).name, 0.0)


def is_half(dtype) -> bool:
    """Whether `dtype` is less precise than float32 (float16, bfloat16, the float8 types).

    Example:
        >>> is_half(np.dtype("float16")), is_half(np.dtype("float32"))
        (True, False)
    """
    return unit_roundoff(dtype) > _UNIT_ROUNDOFF["float32"]


def float_dtype(value):
    """`value` (a NumPy dtype or type, a dtype's name, or a framework's dtype object such as
    `torch.float32` or `tf.float32`) as a real floating NumPy (or ml_dtypes) dtype; None
    when it names none.

    Example:
        >>> float_dtype("float32"), float_dtype("int8")
        (dtype('float32'), None)
    """
    for name in (getattr(value, "name", None), str(value).rsplit(".", 1)[-1], value):
        found = None if name is None or isinstance(name, bool) else _dtype_named(name)
        if found is not None and is_floating(np.empty(0, found)):
            return found
    return None


def _dtype_named(name):
    try:
        return np.dtype(name)
    except (TypeError, ValueError):
        pass
    if isinstance(name, str) and name in PRECISION:  # bfloat16, float8: ml_dtypes' types
        try:
            import ml_dtypes
        except ImportError:
            return None
        kind = getattr(ml_dtypes, name, None)
        return None if kind is None else np.dtype(kind)
    return None


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
    if adapter is not None:
        array: Any = transfer.to_host(adapter, value)
        try:
            place = adapter.tensor_device(value)
            device = f"{place} (virtual)" if place.virtual else str(place)
        except MultiDeviceValueError:  # a JAX array spread over devices
            device = f"several devices ({adapter.native_device_of(value)})"
        if isinstance(value, _NUMBERS):
            return Value(np.asarray(array), "NumPy scalar", array.dtype.name, device, True)
        return Value(array, adapter.name, array.dtype.name, device, False)
    if isinstance(value, _NUMBERS):
        return Value(np.asarray(value), f"Python {type(value).__name__}", None, "the host", True)
    raise NotATensorError.for_value(value, function)


def read_copy(value, function: str):
    """`value` (a tensor, or a Python or NumPy number) as a host array of its own: a copy,
    never memory the framework may change afterwards (a CPU tensor's `.numpy()` shares it).

    Example:
        >>> read_copy(torch.ones(2), "numerical_grad")
        array([1., 1.], dtype=float32)
    """
    adapter = backend_for_tensor(value)
    if adapter is not None:
        return np.array(transfer.to_host(adapter, value), copy=True)
    if isinstance(value, _NUMBERS):
        return np.array(value)
    raise NotATensorError.for_value(value, function)


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
    return Value(np.asarray(value), "Python list", None, "the host", False)  # rectangular: of that shape


def _number_shape(value: Any):
    """The shape of a rectangular list of Python numbers (`()` for one number), else None."""
    if isinstance(value, (bool, int, float, complex)) and backend_for_tensor(value) is None:
        return ()
    if type(value) not in (list, tuple) or not value:
        return None
    items: Any = value
    shapes = {_number_shape(item) for item in items}
    if len(shapes) != 1 or None in shapes:
        return None
    return (len(items), *shapes.pop())

