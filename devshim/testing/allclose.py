"""``ds.testing.assert_allclose``: values of any framework on any device, compared on the host.

Example:
    >>> ds.testing.assert_allclose(torch.ones(2, device=ds.try_gpu()), jnp.ones(2))
"""

from __future__ import annotations

from devshim.backends.numpy import _testing as host
from devshim.errors import NotCloseError
from devshim.testing import _values
from devshim.testing._values import Value

__all__ = ["assert_allclose"]


def assert_allclose(actual, desired, *, rtol=None, atol=None, equal_nan: bool = True, err_msg: str = "") -> None:
    """Fail, with an ``AssertionError``, unless ``actual`` and ``desired`` hold the same values
    up to the tolerance: ``|actual - desired| <= atol + rtol * |desired|`` element by element.

    Each side is a tensor of any framework on any device (mixed in one call: a torch tensor
    on a GPU against a JAX array on the CPU), a NumPy array, a Python or NumPy scalar (which
    stands for an array of any shape), a list of numbers (read as one array), or a nest of
    these (dicts, lists, tuples, namedtuples, dataclasses) of the same structure on both
    sides. Other shapes must be equal: they are not broadcast. Every tensor is read with an
    explicit copy to the host (``ds.to_numpy``'s), so this works inside
    ``ds.transfer_guard("disallow")`` and counts no implicit transfer.

    Default tolerances, taken from the less precise dtype of the two sides (a Python number
    sets none) when ``rtol`` or ``atol`` is not given:

    | dtype | rtol | atol |
    | --- | --- | --- |
    | float64, complex128 | 1e-7 | 1e-9 |
    | float32, complex64 | 1e-5 | 1e-6 |
    | float16 | 2e-3 | 1e-4 |
    | bfloat16 | 1.6e-2 | 1e-3 |
    | float8 (e4m3 / e5m2) | 0.25 / 0.5 | 1e-2 |
    | integers, bool | 0 (exact) | 0 |

    Values are compared in float64 (complex128 for complex values); equal infinities
    match, and NaN matches NaN unless ``equal_nan=False``. A failure raises
    ``ds.NotCloseError`` (an ``AssertionError``) saying how many elements differ, the
    greatest absolute and relative difference with their index and the values there, and
    each side's framework, dtype, shape and device; ``err_msg`` is added to it. Differing
    shapes or nest structures fail, saying so.

    Example:
        >>> x = torch.tensor([1.0, 2.0], device=ds.try_gpu())
        >>> ds.testing.assert_allclose(x, np.array([1.0, 2.0]))        # a GPU tensor and NumPy
        >>> ds.testing.assert_allclose({"w": x}, {"w": [1.0, 2.0]})    # nests of one structure
        >>> ds.testing.assert_allclose(x, 1.0)
        Traceback (most recent call last):
        devshim.errors.NotCloseError: Not equal to tolerance rtol=1e-05, atol=1e-06 (float32's defaults)
        Mismatched elements: 1 / 2 (50%) ...
    """
    failures = []
    for path, got, want in _pairs(actual, desired):
        problem = _compare(got, want, rtol, atol, equal_nan)
        if problem is not None:
            failures.append(f"At {path}: {problem}" if path else problem)
    if failures:
        raise NotCloseError("\n\n".join(failures) + (f"\n{err_msg}" if err_msg else ""))


def _pairs(actual, desired) -> list:
    """``(path, actual Value, desired Value)`` for each pair of leaves; a list (of lists) of
    Python numbers facing one tensor is read as one array. NotCloseError when the two nests
    have different structures."""
    got, want = _values.leaves(actual), _values.leaves(desired)
    pairs, i, j = [], 0, 0
    while i < len(got) and j < len(want):
        (path, a), (other, d) = got[i], want[j]
        if path == other:
            pairs.append((path, _values.read(a), _values.read(d)))
            i, j = i + 1, j + 1
            continue
        group = _values.number_group(want, j, path)
        if group is not None:
            pairs.append((path, _values.read(a), group[0]))
            i, j = i + 1, j + group[1]
            continue
        group = _values.number_group(got, i, other)
        if group is None:
            break
        pairs.append((other, group[0], _values.read(d)))
        i, j = i + group[1], j + 1
    if i < len(got) or j < len(want):
        raise NotCloseError(
            f"The nests differ in structure: actual has {_listing(got)}, desired has {_listing(want)}. "
            f"assert_allclose compares leaf by leaf; pass nests of one structure.")
    return pairs


def _listing(found: list) -> str:
    if len(found) == 1 and found[0][0] == "":
        return f"one value ({type(found[0][1]).__name__})"
    paths = [path for path, _ in found]
    shown = ", ".join(paths[:6]) + (", ..." if len(paths) > 6 else "")
    return f"{len(paths)} leaves ({shown})"


def _tolerances(got: Value, want: Value, rtol, atol) -> tuple:
    """(rtol, atol, where they came from)."""
    dtypes = [v.dtype for v in (got, want) if v.dtype is not None]
    default_rtol, default_atol, dtype = host.default_tolerances(dtypes)
    if rtol is None and atol is None:
        return default_rtol, default_atol, f" ({dtype}'s defaults)"
    if rtol is None:
        return default_rtol, atol, f" (rtol: {dtype}'s default)"
    if atol is None:
        return rtol, default_atol, f" (atol: {dtype}'s default)"
    return rtol, atol, ""


def _compare(got: Value, want: Value, rtol, atol, equal_nan: bool):
    """The failure message for one pair of leaves, or None when they are close."""
    if got.shape != want.shape and not (got.scalar or want.scalar):
        return f"Shapes differ: actual {got.shape}, desired {want.shape}.\n{_sides(got, want)}"
    rtol, atol, source = _tolerances(got, want, rtol, atol)
    found = host.mismatch(got.host, want.host, rtol, atol, equal_nan)
    if found is None:
        return None
    return "\n".join([
        f"Not equal to tolerance rtol={rtol:g}, atol={atol:g}{source}",
        f"Mismatched elements: {found.count} / {found.total} ({100 * found.count / found.total:.3g}%)",
        f"Greatest absolute difference: {found.abs_diff:g} at index {found.abs_index} "
        f"({found.value_at(found.abs_index)})",
        f"Greatest relative difference: {found.rel_diff:g} at index {found.rel_index} "
        f"({found.value_at(found.rel_index)})",
        _sides(got, want),
    ])


def _sides(got: Value, want: Value) -> str:
    return f" actual: {got.describe()}\n desired: {want.describe()}"
