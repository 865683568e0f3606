"""NumPy arithmetic on host copies, for `ds.testing`: closeness, default tolerances, finite
differences. Loaded only by `devshim.testing` (which may not import NumPy itself: the
layers keep frameworks, NumPy included, inside backend packages).

Every value here is a NumPy array already on the host: `ds.testing` reads tensors through
devshim's transfer door (`devshim.transfer.to_host`), an explicit copy.

Example:
    >>> from devshim.backends.numpy import _testing
    >>> _testing.mismatch(np.ones(3), np.zeros(3), rtol=0.0, atol=0.5, equal_nan=True).count
    3
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "host_array", "is_scalar", "dtype_name", "is_floating", "default_tolerances", "mismatch", "Mismatch",
    "float64_copy", "rounded_steps", "with_element", "zeros", "cast", "uniform",
    "element_indices", "python_value", "suggested_eps", "TOLERANCES", "GRADIENT_RTOL", "NOISE_FACTOR",
    "unit_roundoff", "float_dtype", "is_half", "gradient_rtol", "loss_difference", "loss", "gradient_mismatch",
    "same_bytes", "changed_count", "allowed_difference", "largest_magnitude", "is_finite_number",
]

#: dtype name -> (rtol, atol) `assert_allclose` uses when none is given: about two units in
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
#: dtype name -> the rtol `check_backward` uses when none is given, by the least precise dtype
#: of the check (inputs, outputs, the numerical pass). The autodiff and the central differences
#: agree to about the dtype's rounding of the gradient's own arithmetic (a few units in the last
#: place, more through deep graphs) plus the differences' truncation error, `eps**2` relative.
#: The rounding of `f`'s outputs is not in it: `check_backward` adds that, measured.
GRADIENT_RTOL = {
    "float64": 1e-4, "float32": 1e-2, "float16": 5e-2, "bfloat16": 1e-1,
    "float8_e4m3fn": 0.25, "float8_e4m3fnuz": 0.25, "float8_e4m3b11fnuz": 0.25, "float8_e5m2": 0.5,
    "float8_e5m2fnuz": 0.5,
}
#: How many roundings at the inputs' precision the noise of a central difference allows for
#: before each output's own last rounding: reductions and a few operations round several times.
NOISE_FACTOR = 15.0
#: `unit_roundoff`'s answers by dtype object (a dtype's name is slow to read in a loop).
_ROUNDOFF_BY_DTYPE: dict = {}
#: Unit roundoff (half the spacing of the values at 1) of each floating dtype.
_UNIT_ROUNDOFF = {
    "float64": 2.0 ** -53, "complex128": 2.0 ** -53, "float32": 2.0 ** -24, "complex64": 2.0 ** -24,
    "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8, "float8_e4m3fn": 2.0 ** -4, "float8_e4m3fnuz": 2.0 ** -4,
    "float8_e4m3b11fnuz": 2.0 ** -4, "float8_e5m2": 2.0 ** -3, "float8_e5m2fnuz": 2.0 ** -3,
}
#: Floating dtypes by precision, least precise first (ml_dtypes' types are not kind "f").
_PRECISION = ("float8_e5m2fnuz", "float8_e5m2", "float8_e4m3b11fnuz", "float8_e4m3fnuz", "float8_e4m3fn",
              "bfloat16", "float16", "complex64", "float32", "complex128", "float64")
#: The spacing of each dtype's values at 1 (its machine epsilon), for suggesting an eps.
_EPSILON = {"float64": 2.0 ** -52, "float32": 2.0 ** -23, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}


def host_array(value) -> "np.ndarray":
    """`value` (a NumPy array, NumPy scalar, Python number or a list of them) as a NumPy array.

    Example:
        >>> host_array(2.0).shape
        ()
    """
    return value if isinstance(value, np.ndarray) else np.asarray(value)


def is_scalar(value) -> bool:
    """Whether `value` is a Python or NumPy scalar (which `assert_allclose` broadcasts).

    Example:
        >>> is_scalar(np.float32(1)), is_scalar(np.ones(1))
        (True, False)
    """
    return isinstance(value, (int, float, complex, np.generic))


def dtype_name(array) -> str:
    """`array`'s dtype as NumPy (and ml_dtypes) name it.

    Example:
        >>> dtype_name(np.ones(2, np.float32))
        'float32'
    """
    return array.dtype.name


def is_floating(array) -> bool:
    """Whether `array` holds real floating-point numbers (bfloat16 and float8 included).

    Example:
        >>> is_floating(np.ones(2)), is_floating(np.arange(2))
        (True, False)
    """
    return array.dtype.kind == "f" or array.dtype.name in _PRECISION and array.dtype.kind != "c"


def default_tolerances(dtypes: list, table: dict = TOLERANCES) -> tuple:
    """(rtol, atol, dtype name) for comparing values of these dtypes: the least precise
    floating dtype's row of `table`, float64's where there is none but a Python float,
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
        """`actual x, desired y` at `index` (`names` for the two sides)."""
        # str(): a NumPy scalar's shortest repr in its own dtype (format() would widen it to float)
        return f"{names[0]} {str(self.actual[index])}, {names[1]} {str(self.desired[index])}"


def _wide(array, complex_: bool):
    if array.dtype.kind in "biu" and not complex_:
        return array.astype(np.float64)
    return array.astype(np.complex128 if complex_ else np.float64)


def mismatch(actual, desired, rtol: float, atol: float, equal_nan: bool):
    """A `Mismatch` where `|actual - desired| > atol + rtol * |desired|` anywhere (NumPy's
    rule, in float64 or complex128; equal infinities match, NaN matches NaN with
    `equal_nan`; integers and booleans without a tolerance compared exactly), else None. The shapes are equal,
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
    """`(value + eps, value - eps, step)`, both rounded to `dtype` as the input holds them
    (Python floats), and `step` the exact distance between the two after rounding.

    Example:
        >>> rounded_steps(1.0, 1e-3, np.dtype("float64"))
        (1.001, 0.999, 0.0020000000000000018)
    """
    plus = float(np.asarray(value + eps, dtype=np.float64).astype(dtype).astype(np.float64))
    minus = float(np.asarray(value - eps, dtype=np.float64).astype(dtype).astype(np.float64))
    return plus, minus, plus - minus


def suggested_eps(value: float, dtype) -> float:
    """An `eps` large enough to move `value` by a few units in the last place of `dtype`.

    Example:
        >>> suggested_eps(1.0, np.dtype("float16"))
        0.00390625
    """
    spacing = _EPSILON.get(np.dtype(dtype).name, 2.0 ** -3)
    return 4 * spacing * max(1.0, abs(value))


def with_element(array, index: tuple, value: float):
    """A copy of `array` with `array[index] = value`.

    Example:
        >>> with_element(np.zeros(2), (1,), 3.0)
        array([0., 3.])
    """
    changed = array.copy()
    changed[index] = value
    return changed


def zeros(shape: tuple):
    """A float64 array of zeros.

    Example:
        >>> zeros((2,))
        array([0., 0.])
    """
    return np.zeros(shape, dtype=np.float64)


def cast(array, dtype):
    """`array` as `dtype` (a NumPy or ml_dtypes dtype), in new memory.

    Example:
        >>> cast(np.ones(2), np.dtype("float32")).dtype
        dtype('float32')
    """
    return np.array(array, dtype=dtype)


def uniform(shape: tuple, dtype, seed):
    """Values drawn uniformly from [-1, 1) with `seed` (an int or a tuple of ints), as `dtype`.

    Example:
        >>> uniform((2,), np.dtype("float32"), 0).dtype
        dtype('float32')
    """
    return np.random.default_rng(seed).uniform(-1.0, 1.0, size=shape).astype(dtype)


def element_indices(shape: tuple):
    """Every index of an array of `shape`, in C order.

    Example:
        >>> list(element_indices((2,)))
        [(0,), (1,)]
    """
    return np.ndindex(*shape)


def python_value(array, index: tuple) -> float:
    """The element at `index` as a Python float.

    Example:
        >>> python_value(np.array([1.5], np.float32), (0,))
        1.5
    """
    return float(np.asarray(array[index], dtype=np.float64))


# ------------------------------------------------------------------ gradient checks (issue 37)


def unit_roundoff(dtype) -> float:
    """Half the spacing of `dtype`'s values at 1 (0 for integers and booleans: they are exact).

    Example:
        >>> unit_roundoff(np.dtype("float32"))
        5.960464477539063e-08
    """
    found = _ROUNDOFF_BY_DTYPE.get(dtype)
    if found is None:
        found = _ROUNDOFF_BY_DTYPE[dtype] = _UNIT_ROUNDOFF.get(np.dtype(dtype).name, 0.0)
    return found


def float_dtype(value):
    """`value` (a NumPy dtype or type, a dtype's name, or a framework's dtype object such as
    `torch.float32` or `tf.float32`) as a real floating NumPy (or ml_dtypes) dtype; None
    when it names none.

    Example:
        >>> float_dtype("float32"), float_dtype("int8")
        (dtype('float32'), None)
    """
    names = [getattr(value, "name", None), str(value).rsplit(".", 1)[-1], value]
    for name in names:
        if name is None or isinstance(name, bool):
            continue
        found = _dtype_named(name)
        if found is not None and is_floating(np.empty(0, found)):
            return found
    return None


def _dtype_named(name):
    try:
        return np.dtype(name)
    except (TypeError, ValueError):
        pass
    if isinstance(name, str) and name in _PRECISION:  # bfloat16, float8: ml_dtypes' types
        try:
            import ml_dtypes
        except ImportError:
            return None
        kind = getattr(ml_dtypes, name, None)
        return None if kind is None else np.dtype(kind)
    return None


def is_half(dtype) -> bool:
    """Whether `dtype` is less precise than float32 (float16, bfloat16, the float8 types).

    Example:
        >>> is_half(np.dtype("float16")), is_half(np.dtype("float32"))
        (True, False)
    """
    return unit_roundoff(dtype) > _UNIT_ROUNDOFF["float32"]


def gradient_rtol(dtypes: list) -> tuple:
    """(rtol, dtype name) for a gradient check over values of these dtypes: the least precise
    floating one's `GRADIENT_RTOL`.

    Example:
        >>> gradient_rtol(["float64", "float32"])
        (0.01, 'float32')
    """
    floating = [name for name in dtypes if name in GRADIENT_RTOL]
    least = min(floating, key=_PRECISION.index) if floating else "float64"
    return GRADIENT_RTOL[least], least


def loss_difference(outputs_plus: list, outputs_minus: list, grad_outputs: list, roundoff: float = 0.0) -> tuple:
    """`(sum((y+ - y-) * gy), noise, changed)` over every output (those whose `gy` is None
    left out), in float64. `noise` bounds the rounding of the outputs that changed: each
    rounded once to its dtype (unit roundoff `u`), after up to `NOISE_FACTOR` roundings in
    the arithmetic before, at `roundoff` (the inputs' unit roundoff; at most `u`):
    `(u + NOISE_FACTOR * min(u, roundoff)) * |gy| * (|y+| + |y-|)`. `changed`: whether any
    output moved.

    Example:
        >>> loss_difference([np.ones(2)], [np.zeros(2)], [np.full(2, 0.5)])[0]
        1.0
    """
    total, noise, changed = 0.0, 0.0, False
    for plus, minus, gy in zip(outputs_plus, outputs_minus, grad_outputs):
        if gy is None:
            continue
        a, b = plus.astype(np.float64), minus.astype(np.float64)
        moved = a != b
        with np.errstate(invalid="ignore", over="ignore"):
            total += float(np.sum((a - b) * gy))
            if moved.any():
                changed = True
                spread = np.abs(gy) * (np.abs(a) + np.abs(b))
                u = unit_roundoff(plus.dtype)
                weight = u + NOISE_FACTOR * (min(u, roundoff) if roundoff else u)
                noise += weight * float(np.nansum(np.where(moved, spread, 0.0)))
    return total, noise, changed


def loss(outputs: list, grad_outputs: list) -> float:
    """`sum(y * gy)` over every output whose `gy` is not None, in float64.

    Example:
        >>> loss([np.ones(2)], [np.full(2, 0.5)])
        1.0
    """
    total = 0.0
    for y, gy in zip(outputs, grad_outputs):
        if gy is not None:
            with np.errstate(invalid="ignore", over="ignore"):
                total += float(np.sum(y.astype(np.float64) * gy))
    return total


def allowed_difference(numerical, noise, rtol: float, atol: float):
    """`atol + rtol * |numerical| + noise`, element by element, in float64.

    Example:
        >>> allowed_difference(np.ones(2), np.zeros(2), 0.1, 0.0)
        array([0.1, 0.1])
    """
    return atol + rtol * np.abs(numerical) + noise


def gradient_mismatch(autodiff, numerical, allowed, limit: int) -> tuple:
    """`(Mismatch or None, worst)`: where `|autodiff - numerical| > allowed` (NaN on either
    side included), and the indices of up to `limit` such elements, greatest difference first.

    Example:
        >>> found, worst = gradient_mismatch(np.zeros(2), np.ones(2), np.full(2, 0.5), 8)
        >>> found.count, worst
        (2, [(0,), (1,)])
    """
    with np.errstate(invalid="ignore", over="ignore"):
        difference = np.abs(autodiff - numerical)
        bad = ~(difference <= allowed)
    count = int(np.count_nonzero(bad))
    if not count:
        return None, []
    rank = np.where(bad, np.nan_to_num(difference, nan=np.inf), -1.0).ravel()
    order = np.argsort(-rank, kind="stable")[:min(limit, count)]
    worst = [tuple(int(i) for i in np.unravel_index(int(flat), bad.shape)) for flat in order]
    return _describe(autodiff, numerical, bad, count), worst


def same_bytes(a, b) -> bool:
    """Whether two arrays hold exactly the same values, bit for bit (NaN payloads and the sign
    of zero included).

    Example:
        >>> same_bytes(np.zeros(2), np.zeros(2))
        True
    """
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def changed_count(before, after) -> int:
    """How many elements differ between two arrays of one shape (NaN equal to NaN).

    Example:
        >>> changed_count(np.zeros(3), np.array([0.0, 1.0, 0.0]))
        1
    """
    if before.shape != after.shape:
        return int(before.size)
    a, b = before.astype(np.float64), after.astype(np.float64)
    return int(np.count_nonzero(~((a == b) | (np.isnan(a) & np.isnan(b)))))


def largest_magnitude(array) -> float:
    """The greatest `|element|` of `array`, NaN left out (0 when there is none).

    Example:
        >>> largest_magnitude(np.array([1.0, -3.0, np.nan]))
        3.0
    """
    magnitudes = np.abs(array.astype(np.float64)).ravel()
    magnitudes = magnitudes[~np.isnan(magnitudes)]
    return float(magnitudes.max()) if magnitudes.size else 0.0


def is_finite_number(value) -> bool:
    """Whether `value` is a real number (int or float, not bool) that is finite.

    Example:
        >>> is_finite_number(1e-3), is_finite_number(float("nan")), is_finite_number(True)
        (True, False, False)
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return False
    return bool(np.isfinite(value))
