"""The numerical pass of the gradient checks: `f` called on inputs that differ in one element,
its outputs read to the host, central differences taken there in float64.

`Evaluator` makes the calls: on private copies of the inputs (`f` taking them as
arguments; in `dtype` when one is asked for), or on the caller's arrays changed in place and
restored (Chainer's form, `f` taking none), and checks after each call that `f` left its
inputs as they were. `Differences` takes the differences, with the rounding noise each
carries, and the one-sided slopes around an element that tell a kink from a wrong backward.

Example:
    >>> gradients = Differences(Evaluator(f, items, False, None), 1e-3).gradients()
"""

from __future__ import annotations

from devshim.backends.numpy import _testing as host
from devshim.errors import GradientCheckUsageError
from devshim.testing import _values
from devshim.testing._outputs import Selection

__all__ = ["Evaluator", "Differences", "Slopes"]


class Evaluator:
    """Calls `f` with input `position`'s element `index` set to `value` (or with the
    inputs as they are), and reads the selected outputs of its result.

    `selection` is set by the caller, or made from `grad_outputs` on the first call.

    Example:
        >>> evaluator.outputs(0, (1, 0), 0.501)
        [array([...], dtype=float32)]
    """

    def __init__(self, f, items: list, closure: bool, dtype, function: str, grad_outputs=None) -> None:
        self.f, self.items, self.closure, self.function = f, items, closure, function
        self.grad_outputs, self.selection = grad_outputs, None
        self.bases = [item.host if dtype is None else host.cast(item.host, dtype) for item in items]
        self.copies = None if closure else [item.copy(base) for item, base in zip(items, self.bases)]
        if dtype is not None and self.copies is not None:
            self._check_dtype(dtype)

    def _check_dtype(self, dtype) -> None:
        for item, copy in zip(self.items, self.copies or []):
            held = _values.read(copy, self.function).host.dtype
            if held != dtype:
                raise GradientCheckUsageError(
                    f"{self.function}(dtype={dtype.name!r}): {item.adapter.name} "
                    f"made a {held} array of {item.name}'s values cast to {dtype}, not a {dtype} one (JAX holds "
                    f"float64 only with jax_enable_x64). Pass a dtype the framework has here.")

    def result(self, position=None, index=None, value=None):
        """`f`'s result with the one element changed (None: the inputs as they are)."""
        first = self.items[0]
        with first.adapter.on_device(first.native):
            if self.closure:
                return self._closure_call(position, index, value)
            return self._argument_call(position, index, value)

    def outputs(self, position=None, index=None, value=None) -> list:
        """The selected outputs of `f`'s result, read to the host."""
        result = self.result(position, index, value)
        if self.selection is None:
            self.selection = Selection.build(result, self.grad_outputs, 0, self.function)
        return self.selection.read(result)

    def _when(self, position, index, value) -> str:
        if position is None:
            return "on the inputs as given"
        return f"with {self.items[position].name}'s element {index} moved to {value:g} (in the numerical pass)"

    def _argument_call(self, position, index, value):
        arguments, expected = list(self.copies or []), list(self.bases)
        if position is not None:
            expected[position] = host.with_element(self.bases[position], index, value)
            arguments[position] = self.items[position].copy(expected[position])
        result = self.f(*arguments)

        def when() -> str:
            return self._when(position, index, value)

        for item, argument, values in zip(self.items, arguments, expected):
            item.check_unchanged(argument, values, when)
        return result

    def _closure_call(self, position, index, value):
        item = None if position is None else self.items[position]
        original = None if item is None else host.python_value(item.host, index)
        try:
            if item is not None:
                item.set_element(index, value)
            result = self.f()

            def when() -> str:
                return self._when(position, index, value)

            for other, base in zip(self.items, self.bases):
                expected = host.with_element(base, index, value) if other is item else base
                other.check_unchanged(other.value, expected, when, restore=True)
        finally:
            if item is not None:
                item.set_element(index, original)
        return result


class Slopes:
    """The slopes of `sum(f(x) * gy)` around one element: `below` and `above` (one-sided,
    over one step each side), and `irregularity`: how far the slopes over one and two steps on
    each side are from those of a smooth function (large at a kink, near zero elsewhere).

    Example:
        >>> slopes.below, slopes.above
        (0.0, 0.73)
    """

    __slots__ = ("below", "above", "irregularity")

    def __init__(self, below: float, above: float, irregularity: float) -> None:
        self.below, self.above, self.irregularity = below, above, irregularity


class Differences:
    """Central differences for every element of every input, each with its rounding noise.

    `half_check` (a function's name, or None): refuse, naming what to pass, when an input
    or an output of the numerical pass is less precise than float32 and `eps` was not given.

    Example:
        >>> [(gradient.shape, noise.max()) for gradient, noise in differences.gradients()]
        [((3, 2), 1.2e-07)]
    """

    def __init__(self, evaluator: Evaluator, eps: float, half_check=None) -> None:
        self.evaluator, self.eps, self.half_check = evaluator, eps, half_check
        self.output_dtypes: list = []
        self._center = None
        #: the least precise input's unit roundoff: the precision `f`'s arithmetic runs at
        self.roundoff = max(host.unit_roundoff(base.dtype) for base in evaluator.bases)
        if half_check is not None:
            self._refuse_half_inputs()

    def gradients(self) -> list:
        """`(gradient, noise)` per input: float64 host arrays of the input's shape."""
        found = []
        for position, base in enumerate(self.evaluator.bases):
            gradient, noise = host.zeros(tuple(base.shape)), host.zeros(tuple(base.shape))
            for index in host.element_indices(tuple(base.shape)):
                gradient[index], noise[index] = self.derivative(position, index)
            found.append((gradient, noise))
        return found

    def derivative(self, position: int, index: tuple) -> tuple:
        """`(central difference, its noise)` for one element."""
        base = self.evaluator.bases[position]
        value = host.python_value(base, index)
        plus, minus, step = host.rounded_steps(value, self.eps, base.dtype)
        if step == 0:
            item = self.evaluator.items[position]
            raise GradientCheckUsageError(
                f"eps={self.eps:g} does not change {item.name} ({item.described}) at index {index}: {value:g} + eps "
                f"and {value:g} - eps round to the same {host.dtype_name(base)} value. Pass a larger eps, e.g. "
                f"eps={host.suggested_eps(value, base.dtype):g}.")
        outputs_plus = self._outputs(position, index, plus)
        outputs_minus = self._outputs(position, index, minus)
        total, noise, _ = host.loss_difference(outputs_plus, outputs_minus, self._grad_outputs(), self.roundoff)
        return total / step, noise / step

    def slopes(self, position: int, index: tuple):
        """The `Slopes` around one element (four more calls of `f`), or None where the steps
        round to nothing."""
        base = self.evaluator.bases[position]
        value = host.python_value(base, index)
        points = [(0.0, self.center())]
        for multiple in (1, 2):
            plus, minus, _ = host.rounded_steps(value, multiple * self.eps, base.dtype)
            for moved in (plus, minus):
                points.append((moved - value, host.loss(self._outputs(position, index, moved), self._grad_outputs())))
        (t0, l0), (t1, l1), (tm1, lm1), (t2, l2), (tm2, lm2) = points
        if len({t0, t1, tm1, t2, tm2}) < 5:
            return None
        s1, s2, s3, s4 = ((lm1 - lm2) / (tm1 - tm2), (l0 - lm1) / (t0 - tm1), (l1 - l0) / (t1 - t0),
                          (l2 - l1) / (t2 - t1))
        left, right = (3 * s2 - s1) / 2, (3 * s3 - s4) / 2  # one-sided, exact for parabolas
        narrow, wide = (l1 - lm1) / (t1 - tm1), (l2 - lm2) / (t2 - tm2)
        return Slopes(s2, s3, max(abs(right - left), 4 * abs(wide - narrow)))

    def center(self) -> float:
        """`sum(f(x) * gy)` at the inputs as they are (one call, kept)."""
        if self._center is None:
            self._center = host.loss(self._outputs(None, None, None), self._grad_outputs())
        return self._center

    def _grad_outputs(self) -> list:
        selection = self.evaluator.selection
        return [] if selection is None else selection.grad_outputs

    def _outputs(self, position, index, value) -> list:
        found = self.evaluator.outputs(position, index, value)
        if not self.output_dtypes:
            self.output_dtypes = [host.dtype_name(output) for output in found]
            if self.half_check is not None:
                self._refuse_half_outputs(found)
        return found

    def _refuse_half_inputs(self) -> None:
        for item, base in zip(self.evaluator.items, self.evaluator.bases):
            if host.is_half(base.dtype):
                raise GradientCheckUsageError(
                    f"{self.half_check}() would take central differences of {item.name} ({item.described}) in "
                    f"{host.dtype_name(base)}, whose rounding (a part in {1 / host.unit_roundoff(base.dtype):.0f} of "
                    f"each value, over a step of 2 * eps = {2 * self.eps:g}) swamps the gradient. Pass "
                    f"dtype='float32' (or 'float64'): the numerical gradient then comes from f run on copies of "
                    f"the inputs in that dtype, while the autodiff still runs in {host.dtype_name(base)}. Or pass "
                    f"eps (2**-4, say) to take the differences in {host.dtype_name(base)} itself.")

    def _refuse_half_outputs(self, found: list) -> None:
        selection = self.evaluator.selection
        for output, value in zip(selection.outputs if selection is not None else [], found):
            if host.is_half(value.dtype):
                raise GradientCheckUsageError(
                    f"{self.half_check}() would take central differences of {output.title} of f in "
                    f"{host.dtype_name(value)} (f computes it so from its inputs, whose dtype the numerical pass "
                    f"takes), whose rounding over a step of 2 * eps = {2 * self.eps:g} swamps the gradient. Pass "
                    f"eps (2**-4, say) to take the differences at that precision, with its looser tolerances.")
