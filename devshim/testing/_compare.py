"""Comparing the autodiff's gradients with the numerical ones, and saying how they differ.

For each input, element by element: `|autodiff - numerical| <= atol + rtol * |numerical| +
noise`, where `noise` bounds the rounding of `f`'s outputs that went into that central
difference (from the outputs that moved, per element: see `loss_difference`), `rtol` comes
from the least precise dtype of the check, and `atol` (unless given) is `rtol` times the input's greatest numerical gradient:
a backward is judged against the size of its own gradient, however small. Elements that fail
are looked at more closely (four more calls of `f` each): where the slopes on either side
differ as only a kink makes them, the element is a non-differentiable point, not a wrong
backward.

Example:
    >>> compare(items, analytic, numeric, differences, settings)   # raises on a mismatch
"""

from __future__ import annotations

from devshim.backends.numpy import _testing as host
from devshim.errors import GradientMismatchError, NondifferentiableError
from devshim.testing import _values

__all__ = ["Settings", "compare"]

#: How many of an input's mismatched elements are looked at for a kink (the greatest first).
PROBES = 16
#: A kink makes the one-sided slopes differ by at least 0.4 of the mismatch it causes wherever
#: it lies within one step of the element; a smooth function, by its curvature times eps.
KINK_SHARE = 0.3


class Settings:
    """What a comparison uses: the function's name, `eps`, `rtol` and `atol` (None:
    the defaults), the dtypes the check ran in, and how messages name the gradient.

    Example:
        >>> Settings("check_backward", 1e-3, None, None, ["float32"], "The gradient of")
    """

    __slots__ = ("function", "eps", "rtol", "atol", "dtypes", "subject")

    def __init__(self, function: str, eps: float, rtol, atol, dtypes: list, subject: str) -> None:
        self.function, self.eps, self.rtol, self.atol, self.dtypes, self.subject = (
            function, eps, rtol, atol, dtypes, subject)

    def tolerance(self) -> tuple:
        """`(rtol, where it came from)`."""
        if self.rtol is not None:
            return self.rtol, "given"
        rtol, dtype = host.gradient_rtol(self.dtypes)
        return rtol, f"{dtype}'s default"


class _Finding:
    """One input's mismatch: the elements that differ, and those found to be kinks."""

    __slots__ = ("item", "found", "kinks", "wrong", "rtol", "atol", "atol_source", "noise", "a", "want")

    def __init__(self, **fields) -> None:
        for name, value in fields.items():
            setattr(self, name, value)


def compare(items: list, analytic: list, numeric: list, differences, settings: Settings) -> None:
    """Raise `GradientMismatchError` when a gradient differs beyond the tolerance somewhere
    `f` is differentiable, else `NondifferentiableError` when it differs only at kinks."""
    rtol, rtol_source = settings.tolerance()
    findings, problems = [], []
    for position, (item, got, (want, noise)) in enumerate(zip(items, analytic, numeric)):
        a = host.zeros(want.shape) if got is None else host.float64_copy(_values.read(got, settings.function).host)
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
    atol = settings.atol if settings.atol is not None else rtol * host.largest_magnitude(want)
    allowed = host.allowed_difference(want, noise, rtol, atol)
    found, worst = host.gradient_mismatch(a, want, allowed, PROBES)
    if found is None:
        return None
    kinks, wrong = [], False
    for index in worst:
        slopes = differences.slopes(position, index)
        difference = abs(host.python_value(a, index) - host.python_value(want, index))
        irregularity = None if slopes is None else slopes.irregularity
        if irregularity is None or not irregularity == irregularity or irregularity < KINK_SHARE * difference \
                or irregularity <= host.python_value(allowed, index):
            wrong = True
            break
        kinks.append((index, slopes))
    source = "given" if settings.atol is not None else (
        f"rtol times the greatest numerical gradient, {host.largest_magnitude(want):.3g}")
    return _Finding(item=item, found=found, kinks=kinks, wrong=wrong, rtol=rtol, atol=atol, atol_source=source,
                    noise=host.largest_magnitude(noise), a=a, want=want)


def _mismatch_text(finding: _Finding, rtol_source: str, settings: Settings) -> str:
    found, names = finding.found, ("autodiff", "numerical")
    lines = [
        f"{settings.subject} {finding.item.title} differs from the numerical gradient (central differences, "
        f"eps={settings.eps:g}) beyond |autodiff - numerical| <= atol + rtol * |numerical| + noise, with "
        f"rtol={finding.rtol:g} ({rtol_source}), atol={finding.atol:.3g} ({finding.atol_source}) and noise up to "
        f"{finding.noise:.2g} (the rounding f's outputs can carry, over the step):",
        f"  mismatched elements: {found.count} / {found.total}",
        f"  greatest absolute difference: {found.abs_diff:g} at index {found.abs_index} "
        f"({found.value_at(found.abs_index, names)})",
        f"  greatest relative difference: {found.rel_diff:g} at index {found.rel_index} "
        f"({found.value_at(found.rel_index, names)})",
    ]
    if finding.kinks:
        lines.append(f"  ({len(finding.kinks)} of the elements that differ lie where f is not differentiable.)")
    return "\n".join(lines)


def _kink_text(finding: _Finding, settings: Settings) -> str:
    index, slopes = finding.kinks[0]
    value = host.python_value(finding.item.host, index)
    probed = len(finding.kinks)
    more = (f" So are the other {probed - 1} elements looked at" if probed > 1 else "") + (
        f" ({finding.found.count} differ in all)." if finding.found.count > 1 else "")
    return (
        f"f is not differentiable where {settings.function}() compares {finding.item.title}: at index {index} "
        f"(value {value:g}) its slope is {slopes.below:.6g} just below and {slopes.above:.6g} just above "
        f"(one-sided differences over eps={settings.eps:g}), so the central difference there "
        f"({host.python_value(finding.want, index):.6g}) is no derivative to compare with the autodiff's "
        f"{host.python_value(finding.a, index):.6g}; neither is wrong.{more} Move the inputs further than "
        f"2 * eps from where f has a kink (relu and abs at 0, max where its arguments tie), or pass a smaller eps.")
