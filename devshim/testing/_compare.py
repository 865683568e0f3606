"""Comparing the autodiff's gradients with the numerical ones, and saying how they differ.

For each checked input, element by element: `|autodiff - numerical| <= atol + rtol *
|numerical| + noise`, where `noise` bounds the rounding of `f`'s outputs that went into that
difference, `rtol` comes from the least precise dtype of the check, and `atol` (unless given)
is `rtol` times the input's greatest numerical gradient: a backward is judged against the size
of its own gradient, however small. Elements that fail are looked at more closely (five
points each, as `detect_nondifferentiable` does): where they show that `f` has no derivative
there (a kink, a step, an infinite slope, a value that stops being finite), the element is a
non-differentiable point, not a wrong backward. An input left out by `no_grads` must get no
gradient from the autodiff (None, or zeros).

Example:
    >>> compare(items, analytic, numeric, differences, settings)   # raises on a mismatch
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from devshim.errors import GradientCheckUsageError, GradientMismatchError, NondifferentiableError
from devshim.testing import _values
from devshim.testing.allclose import Mismatch

__all__ = ["Settings", "compare", "GRADIENT_RTOL"]

#: How many of an input's mismatched elements are looked at for a kink (the greatest first).
PROBES = 16
#: dtype name -> the rtol the gradient checks use when none is given, by the least precise
#: dtype of the check (inputs, outputs, the numerical pass). The autodiff and the numerical
#: gradient agree to about the dtype's rounding of the gradient's own arithmetic (a few units
#: in the last place, more through deep graphs) plus the differences' truncation error,
#: `eps**2` relative; the rounding of `f`'s outputs is not in it: the checks add that,
#: measured. Half-precision inputs are differentiated numerically in float32, so their rtol
#: bounds the autodiff's own rounding only: a backward 10% wrong fails.
GRADIENT_RTOL = {
    "float64": 1e-4, "float32": 1e-2, "float16": 1e-2, "bfloat16": 3e-2,
    "float8_e4m3fn": 0.25, "float8_e4m3fnuz": 0.25, "float8_e4m3b11fnuz": 0.25, "float8_e5m2": 0.5,
    "float8_e5m2fnuz": 0.5,
}
#: The rtol where the numerical pass itself sees half-precision outputs (`f` returns them from
#: wider inputs, and `eps` was given): differences taken at that precision.
HALF_DIFFERENCES_RTOL = {"float16": 5e-2, "bfloat16": 1e-1}


class Settings:
    """What a comparison uses: the function's name, `eps`, `rtol` and `atol` (None:
    the defaults), the dtypes the check ran in, and how messages name the gradient.

    Example:
        >>> Settings("check_backward", 1e-3, None, None, ["float32"], "The gradient of")
    """

    __slots__ = ("function", "eps", "rtol", "atol", "dtypes", "subject", "numeric_dtypes")

    def __init__(self, function: str, eps: float, rtol, atol, dtypes: list, subject: str,
                 numeric_dtypes=()) -> None:
        self.function, self.eps, self.rtol, self.atol, self.dtypes, self.subject = (
            function, eps, rtol, atol, dtypes, subject)
        self.numeric_dtypes = list(numeric_dtypes)

    def tolerance(self) -> tuple:
        """`(rtol, where it came from)`: by the least precise dtype of the autodiff's side
        (`dtypes`), or of the numerical pass's outputs where they are of half precision."""
        if self.rtol is not None:
            return self.rtol, "given"
        candidates = [(GRADIENT_RTOL[name], name) for name in self.dtypes if name in GRADIENT_RTOL]
        candidates += [(HALF_DIFFERENCES_RTOL.get(name, GRADIENT_RTOL[name]), name) for name in self.numeric_dtypes
                       if name in GRADIENT_RTOL]
        rtol, name = max(candidates or [(GRADIENT_RTOL["float64"], "float64")],
                         key=lambda candidate: (candidate[0], -_values.PRECISION.index(candidate[1])))
        return rtol, f"{name}'s default"


def compare(items: list, analytic: list, numeric: list, differences, settings: Settings) -> None:
    """Raise `GradientMismatchError` when a gradient differs beyond the tolerance somewhere
    `f` is differentiable (or an input left out by `no_grads` gets one), else
    `NondifferentiableError` when it differs only where `f` has no derivative."""
    rtol, rtol_source = settings.tolerance()
    findings, problems = [], []
    for position, (item, got, pair) in enumerate(zip(items, analytic, numeric)):
        a = None if got is None else _values.read(got, settings.function).host.astype(np.float64)
        if not item.checked:
            if item.floating and a is not None and np.any(a != 0):
                problems.append(_unwanted_text(item, a, settings))
            continue
        want, noise = pair
        a = np.zeros(want.shape) if a is None else a
        if tuple(a.shape) != tuple(want.shape):
            problems.append(f"{settings.subject} {item.title} has shape {tuple(a.shape)} from the framework's "
                            f"autodiff; the input's is {tuple(want.shape)}.")
            continue
        finding = _finding(item, position, a, want, noise, rtol, settings, differences)
        if finding is not None:
            findings.append(finding)
    wrong = [finding for finding in findings if finding.wrong]
    if problems or wrong:
        lines = problems + [_mismatch_text(finding, rtol_source, settings) for finding in wrong]
        lines += [_kink_text(finding, settings) for finding in findings if not finding.wrong]
        raise GradientMismatchError("\n".join(lines))
    if findings:
        raise NondifferentiableError("\n".join(_kink_text(finding, settings) for finding in findings))


def _finding(item, position: int, a, want, noise, rtol: float, settings: Settings, differences):
    """One input's mismatch (None: none): the elements that differ, and those found to be kinks."""
    largest = _largest_magnitude(want)
    atol = settings.atol if settings.atol is not None else rtol * largest
    with np.errstate(invalid="ignore", over="ignore"):
        difference = np.abs(a - want)
        bad = ~(difference <= atol + rtol * np.abs(want) + noise)
    if not bad.any():
        return None
    rank = np.where(bad, np.nan_to_num(difference, nan=np.inf), -1.0).ravel()
    worst = [tuple(int(i) for i in np.unravel_index(int(flat), bad.shape))
             for flat in np.argsort(-rank, kind="stable")[:min(PROBES, int(bad.sum()))]]
    kinks: list = []
    selection = differences.evaluator.selection
    for index in worst:  # up to the first that is no kink: a wrong gradient
        if not np.isfinite(item.host[index]):  # no function has a derivative there to differ from
            break
        try:
            samples = differences.samples(position, index, 5)
        except GradientCheckUsageError:  # eps / 2 rounds to nothing there: no closer look to take
            break
        found = samples.nondifferentiable(selection)
        if found is None:
            break
        kinks.append((index, samples.explain(selection, found)))
    source = "given" if settings.atol is not None else f"rtol times the greatest numerical gradient, {largest:.3g}"
    return SimpleNamespace(item=item, found=Mismatch(a, want, bad), kinks=kinks, wrong=len(kinks) < len(worst),
                           rtol=rtol, atol=atol, atol_source=source, noise=_largest_magnitude(noise), a=a, want=want)


def _largest_magnitude(array) -> float:
    return float(np.fmax.reduce(np.abs(array.astype(np.float64)).ravel(), initial=0.0))  # NaN left out


def _unwanted_text(item, a, settings: Settings) -> str:
    nonzero = np.flatnonzero(a != 0)
    return (f"{settings.subject} {item.title} should be none: no_grads leaves that input out, and Chainer's rule is "
            f"that f's backward then gives it no gradient (None, or zeros), but the autodiff gave "
            f"{nonzero.size} nonzero element{'s' if nonzero.size != 1 else ''} of {a.size} (greatest magnitude "
            f"{_largest_magnitude(a):g}). Stop the gradient in f where that input is used (x.detach(), "
            f"jax.lax.stop_gradient, tf.stop_gradient), or pass False for it in no_grads to check its gradient.")


def _mismatch_text(finding: SimpleNamespace, rtol_source: str, settings: Settings) -> str:
    found = finding.found
    lines = [
        f"{settings.subject} {finding.item.title} differs from the numerical gradient (central differences, "
        f"eps={settings.eps:g}) beyond |autodiff - numerical| <= atol + rtol * |numerical| + noise, with "
        f"rtol={finding.rtol:g} ({rtol_source}), atol={finding.atol:.3g} ({finding.atol_source}) and noise up to "
        f"{finding.noise:.2g} (the rounding f's outputs can carry, over the step):",
        f"  mismatched elements: {found.count} / {found.total}",
        *found.greatest("  greatest", ("autodiff", "numerical")),
    ]
    if finding.kinks:
        lines.append(f"  ({len(finding.kinks)} of the elements that differ lie where f is not differentiable.)")
    return "\n".join(lines)


def _kink_text(finding: SimpleNamespace, settings: Settings) -> str:
    index, explanation = finding.kinks[0]
    value = float(finding.item.host[index])
    probed = len(finding.kinks)
    more = (f" So are the other {probed - 1} elements looked at" if probed > 1 else "") + (
        f" ({finding.found.count} differ in all)." if finding.found.count > 1 else "")
    return (
        f"f is not differentiable where {settings.function}() compares {finding.item.title}: at index {index} "
        f"(value {value:g}) {explanation}. So the central difference there ({float(finding.want[index]):.6g}) "
        f"is no derivative to compare with the autodiff's {float(finding.a[index]):.6g}; neither is wrong.{more} "
        f"Move the inputs further than 2 * eps from such a point (relu and abs at 0, max where its arguments tie, "
        f"a step, a pole), or pass a smaller eps.")
