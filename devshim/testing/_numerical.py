"""The numerical pass of the gradient checks: `f` called on inputs that differ in one element,
its outputs read to the host, differences taken there in float64.

`Evaluator` makes the calls: on private copies of the inputs (`f` taking them as arguments;
in another dtype when one is asked for), or on the caller's tensors changed in place and put
back (Chainer's form, `f` taking none, and `params`), and checks after each call that `f`
left its inputs as they were. `Differences` takes the differences with the rounding noise
each carries: two points per element (`x - eps`, `x + eps`), or five (also `x` and
`x -+ eps/2`) where non-differentiable points are looked for, as Chainer does: an output that
is finite at some of the five points only, or that no parabola fits within a hundredth of its
spread (plus its rounding), marks a point where `f` has no derivative.

Example:
    >>> gradients = Differences(Evaluator(f, items, False, [None], "numerical_grad"), 1e-3).gradients()
"""

from __future__ import annotations

import functools
import math
from typing import Any, Optional

import numpy as np

from devshim.errors import GradientCheckUsageError, NondifferentiableError
from devshim.testing import _values
from devshim.testing._outputs import Selection

__all__ = ["Evaluator", "Differences", "Samples", "NOISE_FACTOR", "FIT_RTOL"]

#: How many roundings at the inputs' precision the noise of a difference allows for before
#: each output's own last rounding: reductions and a few operations round several times.
NOISE_FACTOR = 15.0
#: A parabola fits `f` through five points within this share of the output's spread wherever
#: `f` is differentiable (Chainer's `diff_rtol`): a kink, a step or a pole breaks the fit.
FIT_RTOL = 1e-2
#: The spacing of each dtype's values at 1 (its machine epsilon), for suggesting an eps.
_EPSILON = {"float64": 2.0 ** -52, "float32": 2.0 ** -23, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}


class Evaluator:
    """Calls `f` with item `position`'s element `index` set to `value` (or with the items as
    they are), and reads the selected outputs of its result to the host at once.

    `dtypes`: per item, the NumPy dtype `f` sees it in (None: its own). `selection` is set
    by the caller, or made from `grad_outputs` on the first call.

    Example:
        >>> evaluator.outputs(0, (1, 0), 0.501)
        [array([...], dtype=float32)]
    """

    def __init__(self, f, items: list, closure: bool, dtypes: list, function: str, grad_outputs=None,
                 seed=0) -> None:
        self.f, self.items, self.closure, self.function = f, items, closure, function
        self.grad_outputs, self.seed = grad_outputs, seed
        self.selection: Any = None
        self.bases = [item.host if dtype is None else item.host.astype(dtype) for item, dtype in zip(items, dtypes)]
        self.copies = [None if item.in_place else item.copy(base) for item, base in zip(items, self.bases)]
        for item, copy, dtype in zip(items, self.copies, dtypes):
            if copy is None or dtype is None:
                continue
            held = _values.read(copy, function).host.dtype
            if held != dtype:
                raise GradientCheckUsageError(
                    f"{function}(dtype={dtype.name!r}): {item.adapter.name} made a {held} array of {item.name}'s "
                    f"values cast to {dtype}, not a {dtype} one (JAX holds float64 only with jax_enable_x64). Pass "
                    f"a dtype the framework has here.")

    def result(self, arguments=None):
        """`f`'s result on (copies of) the items as they are, or on `arguments` (one per item,
        None for those `f` reads itself), as it returned it."""
        arguments = self.copies if arguments is None else arguments
        result = self.f() if self.closure else self.f(*[a for a in arguments if a is not None])
        if self.selection is None:
            self.selection = Selection.build(result, self.grad_outputs, self.seed, self.function)
        return result

    def outputs(self, position: Optional[int] = None, index: Any = None, value: Any = None) -> list:
        """The selected outputs of `f`'s result, read to the host (copies) before anything is
        put back."""
        moved = None
        arguments, expected = list(self.copies), list(self.bases)
        if position is not None:
            moved = self.items[position]
            expected[position] = self.bases[position].copy()
            expected[position][index] = value
            if moved.in_place:
                moved.set_element(index, value)
            else:
                arguments[position] = moved.copy(expected[position])
        try:
            result = self.result(arguments)  # the first call makes the selection
            found = self.selection.read(result)
            when = (lambda: "on the inputs as given") if moved is None else (
                lambda: f"with {moved.name}'s element {index} moved to {value:g} (in the numerical pass)")
            for item, argument, values, base in zip(self.items, arguments, expected, self.bases):
                tensor = item.value if item.in_place else argument
                item.check_unchanged(tensor, values, when, restore=base if item.in_place else None)
        finally:
            if position is not None and moved is not None and moved.in_place:
                moved.set_element(index, float(self.bases[position][index]))
        return found


class Samples:
    """`f`'s selected outputs at points around one element: `offsets` (how far each point is
    from the element's value, after rounding to its dtype) and `outputs` (per point, one host
    array per output), with what the differences need to weigh their rounding.

    Example:
        >>> samples.derivative(grad_outputs)
        (0.73, 1.2e-07)
    """

    def __init__(self, value: float, offsets: list, outputs: list, eps: float, roundoff: float) -> None:
        self.value, self.offsets, self.outputs, self.eps, self.roundoff = value, offsets, outputs, eps, roundoff
        self.scaled = np.asarray(offsets) / eps

    def derivative(self, grad_outputs: list) -> tuple:
        """`(d/dx sum(f * gy), its noise)`: the slope at the element of the polynomial through
        the points (the central difference for two), and the rounding it may carry."""
        degree = len(self.offsets)
        if degree == 2:  # the central difference itself: exact where f's values are
            step = self.offsets[1] - self.offsets[0]
            weights = np.array([-1.0 / step, 1.0 / step])
        else:
            weights = np.linalg.solve(np.vander(self.scaled, degree, increasing=True).T, np.eye(degree)[1]) / self.eps
        total, noise = 0.0, 0.0
        for o, gy in enumerate(grad_outputs):
            ys = [np.asarray(point[o], dtype=np.float64) for point in self.outputs]
            reference = ys[degree // 2] if degree % 2 else ys[0]  # the element's own point, where taken
            moved = np.any([y != reference for y in ys], axis=0)
            with np.errstate(invalid="ignore", over="ignore"):
                total += float(sum(w * np.sum((y - reference) * gy) for w, y in zip(weights, ys)))
                for w, point in zip(weights, self.outputs):
                    counted = moved | _subnormal(point[o])
                    noise += abs(w) * float(np.nansum(np.where(counted, np.abs(gy) * self._rounding(point[o]), 0)))
        return total, noise

    def _rounding(self, y):
        """A bound on the rounding each element of output `y` carries: its dtype's last
        rounding after up to `NOISE_FACTOR` at the inputs' precision, or the dtype's smallest
        step where the value is below its normal range (where rounding is absolute)."""
        u = _values.unit_roundoff(y.dtype)
        weight = u + NOISE_FACTOR * (min(u, self.roundoff) if self.roundoff else u)
        return weight * np.abs(y.astype(np.float64)) + np.where(_subnormal(y), _values.smallest_subnormal(y.dtype), 0)

    def nondifferentiable(self, selection):
        """`(output position, flat index, why)` of an output element that shows `f` has no
        derivative at the element (five points), or None."""
        for o in range(len(selection.outputs)):
            ys = np.stack([np.asarray(point[o], dtype=np.float64).ravel() for point in self.outputs])
            finite = np.isfinite(ys)
            flips = (finite != finite[2]).any(axis=0)
            if flips.any():
                return o, int(np.argmax(flips)), "finite"
            smooth = finite.all(axis=0) & (ys.max(axis=0) > ys.min(axis=0))
            if not smooth.any():
                continue
            moved = ys[:, smooth] - ys[2, smooth]
            basis = np.vander(self.scaled, 3)
            fitted = basis @ np.linalg.lstsq(basis, moved, rcond=None)[0]
            misfit = np.sqrt(np.mean((fitted - moved) ** 2, axis=0))
            noise = np.max([self._rounding(point[o]).ravel()[smooth] for point in self.outputs], axis=0)
            excess = misfit - FIT_RTOL * (moved.max(axis=0) - moved.min(axis=0)) - noise
            if (excess > 0).any():
                return o, int(np.flatnonzero(smooth)[np.argmax(excess)]), "fit"
        return None

    def explain(self, selection, found) -> str:
        """What the points show at output element `found` (from `nondifferentiable`), in
        words a reader checks by hand: the slopes of `f` on either side, or where it is not
        finite, and `f`'s values at the five points."""
        o, flat, why = found
        output = selection.outputs[o]
        index = tuple(int(i) for i in np.unravel_index(flat, output.shape)) if output.shape else ()
        ys = [float(np.asarray(point[o], dtype=np.float64).ravel()[flat]) for point in self.outputs]
        xs = [self.value + t for t in self.offsets]
        where = "" if output.title == "the output" else f" of {output.title}"
        listing = ", ".join(f"{y:.6g} at {x:.6g}" for x, y in zip(xs, ys))
        if why == "finite":
            return (f"f's value{where} at index {index} is finite at some of the points around it and not at others "
                    f"(f there: {listing}): it has no derivative there")
        below = (ys[1] - ys[0]) / (self.offsets[1] - self.offsets[0])
        above = (ys[4] - ys[3]) / (self.offsets[4] - self.offsets[3])
        return (f"its slope is {below:.6g} just below and {above:.6g} just above, in f's value{where} at index "
                f"{index} (f there: {listing}): a kink, a step or an infinite slope")


def _subnormal(y):
    """Where `y`'s nonzero values are below its dtype's normal range (absolute rounding)."""
    tiny = _values.smallest_subnormal(y.dtype)
    if not tiny:
        return np.zeros(np.shape(y), dtype=bool)
    magnitude = np.abs(np.asarray(y, dtype=np.float64))
    return (magnitude > 0) & (magnitude < tiny / (2 * _values.unit_roundoff(y.dtype)))


class Differences:
    """The numerical gradient of every checked item, element by element, with its noise.

    `detect`: take five points per element and raise `NondifferentiableError` where `f` has
    no derivative (Chainer's `detect_nondifferentiable`). `half_check` (a function's name,
    or None): refuse, naming what to pass, when an output of the numerical pass is less
    precise than float32 and `eps` was not given.

    Example:
        >>> [(gradient.shape, noise.max()) for gradient, noise in differences.gradients()]
        [((3, 2), 1.2e-07)]
    """

    def __init__(self, evaluator: Evaluator, eps: float, detect: bool = False, half_check=None) -> None:
        self.evaluator, self.eps, self.detect, self.half_check = evaluator, eps, detect, half_check
        self.output_dtypes: list = []
        floating = [base.dtype for base in evaluator.bases if _values.is_floating(base)]
        #: the least precise input's unit roundoff: the precision `f`'s arithmetic runs at
        self.roundoff = max([_values.unit_roundoff(dtype) for dtype in floating] or [0.0])

    def gradients(self) -> list:
        """`(gradient, noise)` per checked item (float64 host arrays of its shape), None for
        the others."""
        return [self._gradient(position, base.shape) if item.checked else None
                for position, (item, base) in enumerate(zip(self.evaluator.items, self.evaluator.bases))]

    def _gradient(self, position: int, shape: tuple) -> tuple:
        gradient, noise = np.zeros(shape), np.zeros(shape)
        for index in np.ndindex(*shape):
            gradient[index], noise[index] = self.derivative(position, index)
        return gradient, noise

    def derivative(self, position: int, index: tuple) -> tuple:
        """`(numerical derivative, its noise)` for one element (NaN where it is not finite)."""
        value = float(self.evaluator.bases[position][index])
        if not math.isfinite(value):
            return math.nan, 0.0
        samples = self.samples(position, index, 5 if self.detect else 2)
        selection = self.evaluator.selection  # made by the first call
        found = samples.nondifferentiable(selection) if self.detect else None
        if found is not None:
            raise NondifferentiableError(
                f"f is not differentiable at element {index} (value {samples.value:g}) of "
                f"{self.evaluator.items[position].title}, where {self.evaluator.function}(detect_nondifferentiable="
                f"True) looked at it over eps={self.eps:g}: {samples.explain(selection, found)}. No central "
                f"difference there is a derivative. Move the input further than eps from such a point, or pass a "
                f"smaller eps.")
        return samples.derivative(selection.grad_outputs)

    def samples(self, position: int, index: tuple, count: int) -> Samples:
        """`f`'s outputs at `count` points around one element (2: `-+eps`; 5: also
        `-+eps/2` and the element itself)."""
        base = self.evaluator.bases[position]
        value = float(base[index])
        fractions = (-1.0, 1.0) if count == 2 else (-1.0, -0.5, 0.0, 0.5, 1.0)
        points = [float(np.asarray(value + share * self.eps, dtype=np.float64).astype(base.dtype)) for share in
                  fractions]
        if len(set(points)) < count:
            item = self.evaluator.items[position]
            raise GradientCheckUsageError(
                f"eps={self.eps:g} does not change {item.name} ({item.described}) at index {index}: {value:g} moved "
                f"by eps{' and eps/2' if count == 5 else ''} rounds to {value:g} or to another point in "
                f"{base.dtype.name}. Pass a larger eps, e.g. "
                f"eps={4 * _EPSILON.get(base.dtype.name, 2.0 ** -3) * max(1.0, abs(value)):g}.")
        outputs = [self.center if point == value and share == 0 else self._outputs(position, index, point)
                   for share, point in zip(fractions, points)]
        return Samples(value, [point - value for point in points], outputs, self.eps, self.roundoff)

    @functools.cached_property
    def center(self) -> list:
        """`f`'s selected outputs at the items as they are (one call, kept)."""
        return self._outputs(None, None, None)

    def _outputs(self, position, index, value) -> list:
        found = self.evaluator.outputs(position, index, value)
        if not self.output_dtypes:
            self.output_dtypes = [output.dtype.name for output in found]
            for output, got in zip(self.evaluator.selection.outputs, found):  # made by the call that found them
                if self.half_check is not None and _values.is_half(got.dtype):
                    raise GradientCheckUsageError(
                        f"{self.half_check}() would take central differences of {output.title} of f in "
                        f"{got.dtype.name} (f computes it so, whatever the dtype of its inputs), whose rounding over "
                        f"a step of 2 * eps = {2 * self.eps:g} swamps the gradient. Pass eps (2**-4, say) to take "
                        f"the differences at that precision, with its looser tolerances, or return the output in "
                        f"float32.")
        return found
