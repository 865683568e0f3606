"""`ds.testing.assert_allclose`: values of any framework on any device, compared on the host.

Example:
    >>> ds.testing.assert_allclose(torch.ones(2, device=ds.try_gpu()), jnp.ones(2))
"""

from __future__ import annotations

import numpy as np

from devshim import _tree
from devshim.errors import NotCloseError, ToleranceError
from devshim.testing import _values
from devshim.testing._values import Value

__all__ = ["assert_allclose", "Mismatch", "mismatch", "TOLERANCES"]

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


def assert_allclose(actual, desired, *, rtol=None, atol=None, equal_nan: bool = True, err_msg: str = "") -> None:
    """Fail, with an `AssertionError`, unless `actual` and `desired` hold the same values
    up to the tolerance: `|actual - desired| <= atol + rtol * |desired|` element by element.

    Each side is a tensor of any framework on any device (mixed in one call: a torch tensor
    on a GPU against a JAX array on the CPU), a NumPy array, a Python or NumPy scalar (which
    stands for an array of any shape), a list of numbers (read as one array), or a nest of
    these (dicts, lists, tuples, namedtuples, dataclasses) of the same structure on both
    sides (mappings match by key, in whatever order each was written: a dict `jax.jit`
    returned with its keys sorted matches yours; an integer key is a key, never a list
    position). None is an empty part of a nest, as in JAX's trees. Other shapes must be equal:
    they are not broadcast. Every tensor is read with an
    explicit copy to the host (`ds.to_numpy`'s), so this works inside
    `ds.transfer_guard("disallow")` and counts no implicit transfer.

    Default tolerances, taken from the less precise dtype of the two sides (a Python number
    sets none) when `rtol` or `atol` is not given:

    | dtype | rtol | atol |
    | --- | --- | --- |
    | float64, complex128 | 1e-7 | 1e-9 |
    | float32, complex64 | 1e-5 | 1e-6 |
    | float16 | 2e-3 | 1e-4 |
    | bfloat16 | 1.6e-2 | 1e-3 |
    | float8 (e4m3 / e5m2) | 0.25 / 0.5 | 1e-2 |
    | integers, bool | 0 (exact) | 0 |

    Values are compared in float64 (complex128 for complex values); equal infinities
    match, and NaN matches NaN unless `equal_nan=False`. A failure raises
    `ds.NotCloseError` (an `AssertionError`) saying how many elements differ, the
    greatest absolute and relative difference with their index and the values there, and
    each side's framework, dtype, shape and device; `err_msg` is added to it. Differing
    shapes or nest structures fail, saying so. A negative, NaN or infinite `rtol` or `atol`
    raises `ds.ToleranceError`.

    Example:
        >>> x = torch.tensor([1.0, 2.0], device=ds.try_gpu())
        >>> ds.testing.assert_allclose(x, np.array([1.0, 2.0]))        # a GPU tensor and NumPy
        >>> ds.testing.assert_allclose({"w": x}, {"w": [1.0, 2.0]})    # nests of one structure
        >>> ds.testing.assert_allclose(x, 1.0)
        Traceback (most recent call last):
        devshim.errors.NotCloseError: Not equal to tolerance rtol=1e-05, atol=1e-06 (float32's defaults)
        Mismatched elements: 1 / 2 (50%) ...
    """
    for name, value in (("rtol", rtol), ("atol", atol)):
        if value is not None and (not _values.is_finite_number(value) or value < 0):
            raise ToleranceError(f"assert_allclose({name}={value!r}): a tolerance is a finite number, 0 or more. "
                                 f"Pass {name}=None for the default of the values' dtype, or a number such as "
                                 f"{name}=1e-5.")
    failures = []

    def pair(steps: tuple, got, want) -> None:  # each pair of leaves, read to the host and compared there
        problem = _compare(_host(got), _host(want), rtol, atol, equal_nan)
        if problem is not None:
            path = _tree.path_text(steps)
            failures.append(f"At {path}: {problem}" if path else problem)

    try:
        _tree.zip_leaves(actual, desired, pair, _values.number_array)
    except _tree.NestsDiffer as differ:
        raise NotCloseError(
            f"The nests differ in structure: actual has {differ.first}, desired has {differ.second}. They first "
            f"differ at {differ.where or 'the top level'}: {differ.why}. assert_allclose compares leaf by leaf "
            f"(mappings by key, in any order); pass nests of one structure.") from None
    if failures:
        raise NotCloseError("\n\n".join(failures) + (f"\n{err_msg}" if err_msg else ""))


def _host(leaf) -> Value:
    """One leaf read to the host (a list of numbers facing a value is one already)."""
    return leaf if isinstance(leaf, Value) else _values.read(leaf)


def _tolerances(got: Value, want: Value, rtol, atol) -> tuple:
    """(rtol, atol, where they came from)."""
    dtypes = [v.dtype for v in (got, want) if v.dtype is not None]
    default_rtol, default_atol, dtype = _default_tolerances(dtypes)
    source = {(True, True): f" ({dtype}'s defaults)", (True, False): f" (rtol: {dtype}'s default)",
              (False, True): f" (atol: {dtype}'s default)"}.get((rtol is None, atol is None), "")
    return default_rtol if rtol is None else rtol, default_atol if atol is None else atol, source


def _compare(got: Value, want: Value, rtol, atol, equal_nan: bool):
    """The failure message for one pair of leaves, or None when they are close."""
    if got.shape != want.shape and not (got.scalar or want.scalar):
        return f"Shapes differ: actual {got.shape}, desired {want.shape}.\n{_sides(got, want)}"
    rtol, atol, source = _tolerances(got, want, rtol, atol)
    found = mismatch(got.host, want.host, rtol, atol, equal_nan)
    if found is None:
        return None
    return "\n".join([
        f"Not equal to tolerance rtol={rtol:g}, atol={atol:g}{source}",
        f"Mismatched elements: {found.count} / {found.total} ({100 * found.count / found.total:.3g}%)",
        *found.greatest("Greatest"),
        _sides(got, want),
    ])


def _sides(got: Value, want: Value) -> str:
    return f" actual: {got.describe()}\n desired: {want.describe()}"


def _default_tolerances(dtypes: list) -> tuple:
    """(rtol, atol, dtype name) for comparing values of these dtypes: the least precise
    floating dtype's row of `TOLERANCES`, float64's where there is none but a Python float,
    (0, 0) for integers and booleans only."""
    floating = [name for name in dtypes if name in TOLERANCES]
    if not floating:
        if dtypes and all(np.dtype(name).kind in "biu" for name in dtypes):
            return 0.0, 0.0, dtypes[0]
        return (*TOLERANCES["float64"], "float64")
    least = min(floating, key=_values.PRECISION.index)
    return (*TOLERANCES[least], least)


class Mismatch:
    """Where two arrays differ beyond the tolerance: how many elements, and the greatest
    absolute and relative differences with their index and the two values there.

    Example:
        >>> found = mismatch(np.array([1.0, 2.0]), np.array([1.0, 3.0]), 0.0, 0.0, True)
        >>> found.count, found.abs_index
        (1, (1,))
    """

    __slots__ = ("count", "total", "abs_diff", "abs_index", "rel_diff", "rel_index", "actual", "desired")

    def __init__(self, actual, desired, bad) -> None:
        a, d = _wide(actual, desired)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            abs_diff = np.abs(a - d)
            rel_diff = abs_diff / np.abs(d)
        # NaN differences (one side NaN) rank first: they are the worst kind of mismatch.
        self.abs_index, self.rel_index = (
            tuple(int(i) for i in np.unravel_index(int(np.argmax(np.where(bad, np.nan_to_num(diff, nan=np.inf), -1.0))),
                                                   bad.shape)) for diff in (abs_diff, rel_diff))
        self.count, self.total = int(np.count_nonzero(bad)), int(bad.size)
        self.abs_diff, self.rel_diff = float(abs_diff[self.abs_index]), float(rel_diff[self.rel_index])
        self.actual, self.desired = actual, desired

    def value_at(self, index: tuple, names: tuple = ("actual", "desired")) -> str:
        """`actual x, desired y` at `index` (`names` for the two sides)."""
        # str(): a NumPy scalar's shortest repr in its own dtype (format() would widen it to float)
        return f"{names[0]} {str(self.actual[index])}, {names[1]} {str(self.desired[index])}"

    def greatest(self, lead: str, names: tuple = ("actual", "desired")) -> list:
        """The lines naming the greatest absolute and relative differences, each starting with `lead`."""
        return [f"{lead} {kind} difference: {diff:g} at index {index} ({self.value_at(index, names)})"
                for kind, diff, index in (("absolute", self.abs_diff, self.abs_index),
                                          ("relative", self.rel_diff, self.rel_index))]


def _wide(actual, desired) -> tuple:
    """Both arrays in complex128 when either is complex, else in float64."""
    wide = np.complex128 if actual.dtype.kind == "c" or desired.dtype.kind == "c" else np.float64
    return actual.astype(wide), desired.astype(wide)


def mismatch(actual, desired, rtol: float, atol: float, equal_nan: bool):
    """A `Mismatch` where `|actual - desired| > atol + rtol * |desired|` anywhere (NumPy's
    rule, in float64 or complex128; equal infinities match, NaN matches NaN with
    `equal_nan`; integers and booleans without a tolerance compared exactly), else None. The
    shapes are equal, or one side is 0-d.

    Example:
        >>> mismatch(np.ones(2), np.ones(2), 1e-7, 0.0, True) is None
        True
    """
    actual, desired = np.broadcast_arrays(np.asarray(actual), np.asarray(desired))
    if actual.dtype.kind in "biu" and desired.dtype.kind in "biu" and rtol == 0 and atol == 0:
        bad = actual != desired  # exactly, without a detour through float64 (int64 has more digits)
    else:
        a, d = _wide(actual, desired)
        with np.errstate(invalid="ignore", over="ignore"):
            # An infinity matches only itself: inf - (-inf) is within an infinite tolerance.
            close = (a == d) | (np.isfinite(a) & np.isfinite(d) & (np.abs(a - d) <= atol + rtol * np.abs(d)))
        if equal_nan:
            close |= np.isnan(a) & np.isnan(d)
        bad = ~close
    return Mismatch(actual, desired, bad) if bad.any() else None
