"""NumPy arithmetic on host copies, for ``ds.testing``: closeness, default tolerances, finite
differences. Loaded only by ``devshim.testing`` (which may not import NumPy itself: the
layers keep frameworks, NumPy included, inside backend packages).

Every value here is a NumPy array already on the host: ``ds.testing`` reads tensors through
devshim's transfer door (``devshim.transfer.to_host``), an explicit copy.

Example:
    >>> from devshim.backends.numpy import _testing
    >>> _testing.mismatch(np.ones(3), np.zeros(3), rtol=0.0, atol=0.5, equal_nan=True).count
    3
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "host_array", "is_scalar", "dtype_name", "is_floating", "default_tolerances", "mismatch", "Mismatch",
    "float64_copy", "rounded_steps", "with_element", "directional_sum", "zeros", "cast", "uniform",
    "element_indices", "python_value", "suggested_eps", "TOLERANCES", "GRADIENT_TOLERANCES",
]

#: dtype name -> (rtol, atol) ``assert_allclose`` uses when none is given: about two units in
#: the last place for the half-precision types, looser than that for float32 (sums taken in
#: another order on another device), near NumPy's own rtol for float64.
TOLERANCES = {
    "float64": (1e-7, 1e-9), "complex128": (1e-7, 1e-9),
    "float32": (1e-5, 1e-6), "complex64": (1e-5, 1e-6),
    "float16": (2e-3, 1e-4),
    "bfloat16": (1.6e-2, 1e-3),
    "float8_e4m3fn": (0.25, 1e-2), "float8_e4m3fnuz": (0.25, 1e-2), "float8_e4m3b11fnuz": (0.25, 1e-2),
    "float8_e5m2": (0.5, 1e-2), "float8_e5m2fnuz": (0.5, 1e-2),
}
#: dtype name -> (rtol, atol) ``check_backward`` uses when none is given. Central differences
#: with eps=1e-3 are exact to about eps**2 in float64, but in float32 the rounding of each
#: output (a unit in its last place, 6e-8 relative) is divided by the step: about 1e-4 of the
#: outputs' size. Half-precision types need a larger eps (2**-4, say) and looser tolerances.
GRADIENT_TOLERANCES = {
    "float64": (1e-4, 1e-5), "float32": (1e-2, 1e-3), "float16": (5e-2, 5e-2), "bfloat16": (1e-1, 1e-1),
}
#: Floating dtypes by precision, least precise first (ml_dtypes' types are not kind "f").
_PRECISION = ("float8_e5m2fnuz", "float8_e5m2", "float8_e4m3b11fnuz", "float8_e4m3fnuz", "float8_e4m3fn",
              "bfloat16", "float16", "complex64", "float32", "complex128", "float64")
#: The spacing of each dtype's values at 1 (its machine epsilon), for suggesting an eps.
_EPSILON = {"float64": 2.0 ** -52, "float32": 2.0 ** -23, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}


def host_array(value) -> "np.ndarray":
    """``value`` (a NumPy array, NumPy scalar, Python number or a list of them) as a NumPy array.

    Example:
        >>> host_array(2.0).shape
        ()
    """
    return value if isinstance(value, np.ndarray) else np.asarray(value)


def is_scalar(value) -> bool:
    """Whether ``value`` is a Python or NumPy scalar (which ``assert_allclose`` broadcasts).

    Example:
        >>> is_scalar(np.float32(1)), is_scalar(np.ones(1))
        (True, False)
    """
    return isinstance(value, (int, float, complex, np.generic))


def dtype_name(array) -> str:
    """``array``'s dtype as NumPy (and ml_dtypes) name it.

    Example:
        >>> dtype_name(np.ones(2, np.float32))
        'float32'
    """
    return array.dtype.name


def is_floating(array) -> bool:
    """Whether ``array`` holds real floating-point numbers (bfloat16 and float8 included).

    Example:
        >>> is_floating(np.ones(2)), is_floating(np.arange(2))
        (True, False)
    """
    return array.dtype.kind == "f" or array.dtype.name in _PRECISION and array.dtype.kind != "c"


def default_tolerances(dtypes: list, table: dict = TOLERANCES) -> tuple:
    """(rtol, atol, dtype name) for comparing values of these dtypes: the least precise
    floating dtype's row of ``table``, float64's where there is none but a Python float,
    (0, 0) for integers and booleans only.

    Example:
        >>> default_tolerances(["float32", "float64"])
        (1e-05, 1e-06, 'float32')
    """
    floating = [name for name in dtypes if name in table]
    if not floating:
        if dtypes and all(np.dtype(name).kind in "biu" for name in dtypes):
            return 0.0, 0.0, dtypes[0]
        return (*table["float64"], "float64")
    least = min(floating, key=_PRECISION.index)
    return (*table[least], least)


class Mismatch:
    """Where two arrays differ beyond the tolerance: how many elements, and the greatest
    absolute and relative differences with their index and the two values there.

    Example:
        >>> found = mismatch(np.array([1.0, 2.0]), np.array([1.0, 3.0]), 0.0, 0.0, True)
        >>> found.count, found.abs_index
        (1, (1,))
    """

    __slots__ = ("count", "total", "abs_diff", "abs_index", "rel_diff", "rel_index", "actual", "desired")

    def __init__(self, count, total, abs_diff, abs_index, rel_diff, rel_index, actual, desired) -> None:
        self.count, self.total = count, total
        self.abs_diff, self.abs_index, self.rel_diff, self.rel_index = abs_diff, abs_index, rel_diff, rel_index
        self.actual, self.desired = actual, desired

    def value_at(self, index: tuple, names: tuple = ("actual", "desired")) -> str:
        """``actual x, desired y`` at ``index`` (``names`` for the two sides)."""
        # str(): a NumPy scalar's shortest repr in its own dtype (format() would widen it to float)
        return f"{names[0]} {str(self.actual[index])}, {names[1]} {str(self.desired[index])}"


def _wide(array, complex_: bool):
    if array.dtype.kind in "biu" and not complex_:
        return array.astype(np.float64)
    return array.astype(np.complex128 if complex_ else np.float64)


def mismatch(actual, desired, rtol: float, atol: float, equal_nan: bool):
    """A ``Mismatch`` where ``|actual - desired| > atol + rtol * |desired|`` anywhere (NumPy's
    rule, in float64 or complex128; equal infinities match, NaN matches NaN with
    ``equal_nan``; integers and booleans without a tolerance compared exactly), else None. The shapes are equal,
    or one side is 0-d.

    Example:
        >>> mismatch(np.ones(2), np.ones(2), 1e-7, 0.0, True) is None
        True
    """
    actual, desired = np.broadcast_arrays(actual, desired)
    complex_ = actual.dtype.kind == "c" or desired.dtype.kind == "c"
    if actual.dtype.kind in "biu" and desired.dtype.kind in "biu" and rtol == 0 and atol == 0:
        bad = actual != desired  # exactly, without a detour through float64 (int64 has more digits)
    else:
        a, d = _wide(actual, complex_), _wide(desired, complex_)
        with np.errstate(invalid="ignore", over="ignore"):
            # An infinity matches only itself: inf - (-inf) is within an infinite tolerance.
            close = (a == d) | (np.isfinite(a) & np.isfinite(d) & (np.abs(a - d) <= atol + rtol * np.abs(d)))
        if equal_nan:
            close |= np.isnan(a) & np.isnan(d)
        bad = ~close
    count = int(np.count_nonzero(bad))
    if not count:
        return None
    return _describe(actual, desired, bad, count)


def _describe(actual, desired, bad, count: int) -> Mismatch:
    complex_ = actual.dtype.kind == "c" or desired.dtype.kind == "c"
    a, d = _wide(actual, complex_), _wide(desired, complex_)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        abs_diff = np.abs(a - d)
        rel_diff = abs_diff / np.abs(d)
    # NaN differences (one side NaN) rank first: they are the worst kind of mismatch.
    abs_rank = np.where(bad, np.nan_to_num(abs_diff, nan=np.inf), -1.0)
    rel_rank = np.where(bad, np.nan_to_num(rel_diff, nan=np.inf), -1.0)
    abs_index = tuple(int(i) for i in np.unravel_index(int(np.argmax(abs_rank)), bad.shape))
    rel_index = tuple(int(i) for i in np.unravel_index(int(np.argmax(rel_rank)), bad.shape))
    return Mismatch(count, int(bad.size), float(abs_diff[abs_index]), abs_index, float(rel_diff[rel_index]),
                    rel_index, actual, desired)


def float64_copy(array):
    """A float64 copy of a real floating-point array.

    Example:
        >>> float64_copy(np.ones(2, np.float32)).dtype
        dtype('float64')
    """
    return np.array(array, dtype=np.float64)


def rounded_steps(value: float, eps: float, dtype) -> tuple:
    """``(value + eps, value - eps, step)``, both rounded to ``dtype`` as the input holds them
    (Python floats), and ``step`` the exact distance between the two after rounding.

    Example:
        >>> rounded_steps(1.0, 1e-3, np.dtype("float64"))
        (1.001, 0.999, 0.0020000000000000018)
    """
    plus = float(np.asarray(value + eps, dtype=np.float64).astype(dtype).astype(np.float64))
    minus = float(np.asarray(value - eps, dtype=np.float64).astype(dtype).astype(np.float64))
    return plus, minus, plus - minus


def suggested_eps(value: float, dtype) -> float:
    """An ``eps`` large enough to move ``value`` by a few units in the last place of ``dtype``.

    Example:
        >>> suggested_eps(1.0, np.dtype("float16"))
        0.00390625
    """
    spacing = _EPSILON.get(np.dtype(dtype).name, 2.0 ** -3)
    return 4 * spacing * max(1.0, abs(value))


def with_element(array, index: tuple, value: float):
    """A copy of ``array`` with ``array[index] = value``.

    Example:
        >>> with_element(np.zeros(2), (1,), 3.0)
        array([0., 3.])
    """
    changed = array.copy()
    changed[index] = value
    return changed


def directional_sum(outputs_plus: list, outputs_minus: list, grad_outputs: list) -> float:
    """``sum((y+ - y-) * gy)`` over every output, in float64 (outputs whose ``gy`` is None
    are left out).

    Example:
        >>> directional_sum([np.ones(2)], [np.zeros(2)], [np.full(2, 0.5)])
        1.0
    """
    total = 0.0
    for plus, minus, gy in zip(outputs_plus, outputs_minus, grad_outputs):
        if gy is None:
            continue
        total += float(np.sum((plus.astype(np.float64) - minus.astype(np.float64)) * gy))
    return total


def zeros(shape: tuple):
    """A float64 array of zeros.

    Example:
        >>> zeros((2,))
        array([0., 0.])
    """
    return np.zeros(shape, dtype=np.float64)


def cast(array, dtype):
    """``array`` as ``dtype`` (a NumPy or ml_dtypes dtype), in new memory.

    Example:
        >>> cast(np.ones(2), np.dtype("float32")).dtype
        dtype('float32')
    """
    return np.array(array, dtype=dtype)


def uniform(shape: tuple, dtype, seed: int):
    """Values drawn uniformly from [-1, 1) with ``seed``, as ``dtype``.

    Example:
        >>> uniform((2,), np.dtype("float32"), 0).dtype
        dtype('float32')
    """
    return np.random.default_rng(seed).uniform(-1.0, 1.0, size=shape).astype(dtype)


def element_indices(shape: tuple):
    """Every index of an array of ``shape``, in C order.

    Example:
        >>> list(element_indices((2,)))
        [(0,), (1,)]
    """
    return np.ndindex(*shape)


def python_value(array, index: tuple) -> float:
    """The element at ``index`` as a Python float.

    Example:
        >>> python_value(np.array([1.5], np.float32), (0,))
        1.5
    """
    return float(np.asarray(array[index], dtype=np.float64))
