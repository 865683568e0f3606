"""`compare`: two functions measured side by side, their runs taking turns, as a ratio.

Measured one after the other, two functions see two different machines: a stall from
elsewhere (another process taking the CPUs, a framework's thread pool waiting for a
descheduled thread) lands on one side only, and the ratio of the two medians says as much
about the machine as about the code. Here both warm up as `benchmark` does, then their
blocks of calls alternate (first-second, second-first, ...), so each pair of runs sees the
same moment of the machine; the ratio is the median of the per-pair ratios, and its spread
is the interquartile range of those. A stall that hits one side's runs shows as pairs whose
ratio jumps: in a quarter of the pairs or more it widens that spread or marks the side's runs
as stalled (`Measurement.stalled`), so such a ratio is never reported as a confident one. Nor
is one resting on fewer than `MIN_PAIRS` pairs: `compare` refuses a smaller `min_pairs`, and a
`Comparison` made of fewer runs is never confident (the quartiles of two or three ratios, or
of one, whose spread reads 0, say nothing about how far the ratio can be trusted).

Example:
    >>> from devshim.timing.compare import compare
    >>> c = compare(lambda: t.to(dev, copy=True), lambda: ds.to_device(t, dev), min_run_time=0.05)
    >>> c.ratio, c.quartiles(), c.confident
"""

from __future__ import annotations

import statistics
from typing import Any, Callable, Optional

from devshim.errors import TimingError
from devshim.timing.benchmark import _check_arguments, _started
from devshim.timing.measurement import Measurement
from devshim.timing.settle import _stall_flags, disagrees, quartiles, spread_share, stalls_matter

__all__ = ["compare", "Comparison", "MIN_PAIRS", "MAX_PAIRS"]

#: Pairs of runs at least, whatever `min_run_time` says: enough for quartiles to mean something.
MIN_PAIRS = 10
#: Pairs of runs at most.
MAX_PAIRS = 1000


class Comparison:
    """Two measurements whose runs took turns, and the ratio `second / first` per pair.

    `first` and `second` are the two sides' Measurements (from the interleaved runs only);
    `ratios` one `second / first` per pair of runs; `ratio` their median, `quartiles()`
    their spread. `noisy`: the ratios disagree (IQR above 10% of their median); `stalled`:
    a quarter of the pairs or more had a stalled run (either side), so the ratio may compare
    a stalled side with a free one; `settled`: both warm-ups settled; `enough_pairs`: at least
    `MIN_PAIRS` pairs. `confident` is all four good. `tries` is how many comparisons were made for it (`devshim bench` measures
    again when one is not confident).

    Example:
        >>> c = compare(native, ours, min_run_time=0.05)
        >>> f"{c.ratio:.2f}x ({c.quartiles()[0]:.2f} to {c.quartiles()[1]:.2f})", c.confident
    """

    def __init__(self, first: Measurement, second: Measurement) -> None:
        if first.runs != second.runs:
            raise TimingError(f"a comparison needs as many runs on each side, not {first.runs} "
                              f"and {second.runs}.")
        self.first, self.second = first, second
        self.ratios = [b / a if a > 0 else float("inf") for a, b in zip(first.times, second.times)]
        self.tries = 1

    @property
    def ratio(self) -> float:
        """The median of the per-pair ratios `second / first`.

        Example:
            >>> compare(native, ours, min_run_time=0.05).ratio
            1.04
        """
        return statistics.median(self.ratios)

    def quartiles(self) -> tuple:
        """(first quartile, third quartile) of the per-pair ratios.

        Example:
            >>> c.quartiles()
            (1.02, 1.07)
        """
        return quartiles(self.ratios)

    @property
    def spread(self) -> float:
        """The IQR of the per-pair ratios as a share of their median.

        Example:
            >>> f"{c.spread:.1%}"
            '4.8%'
        """
        return spread_share(self.ratios)

    @property
    def noisy(self) -> bool:
        """Whether the per-pair ratios disagree: their IQR is above 10% of their median.

        Example:
            >>> c.noisy
            False
        """
        return disagrees(self.spread)

    @property
    def stalls(self) -> int:
        """Pairs in which either run stalled (`Measurement.stalls` says when a run did).

        Example:
            >>> c.stalls, len(c.ratios)
            (2, 40)
        """
        flags = [_stall_flags(m.times, m.waits, m.number_per_run, m.fastest) for m in (self.first, self.second)]
        return sum(1 for first, second in zip(*flags) if first or second)

    @property
    def stalled(self) -> bool:
        """Whether a quarter of the pairs or more had a stalled run: the ratio may compare a
        stalled side with a free one.

        Example:
            >>> c.stalled
            False
        """
        return stalls_matter(self.stalls, len(self.ratios))

    @property
    def settled(self) -> bool:
        """Whether both sides' warm-ups settled.

        Example:
            >>> c.settled
            True
        """
        return self.first.settled and self.second.settled

    @property
    def enough_pairs(self) -> bool:
        """Whether the ratio rests on `MIN_PAIRS` pairs or more (`compare` always makes that
        many; a Comparison built from shorter Measurements may have fewer).

        Example:
            >>> c.enough_pairs, len(c.ratios) >= MIN_PAIRS
            (True, True)
        """
        return len(self.ratios) >= MIN_PAIRS

    @property
    def confident(self) -> bool:
        """Whether the ratio can be quoted: `MIN_PAIRS` pairs or more, settled, ratios that
        agree, no stalls that matter.

        Example:
            >>> c.confident
            True
        """
        return self.enough_pairs and self.settled and not self.noisy and not self.stalled

    def __repr__(self) -> str:
        q1, q3 = self.quartiles()
        return (f"Comparison(ratio={self.ratio:.4g}, quartiles=({q1:.4g}, {q3:.4g}), pairs={len(self.ratios)}, "
                f"confident={self.confident})")


def _check_pairs(min_pairs, max_pairs) -> None:
    if not isinstance(min_pairs, int) or isinstance(min_pairs, bool) or min_pairs < MIN_PAIRS:
        raise TimingError(
            f"min_pairs must be a whole number >= {MIN_PAIRS} (MIN_PAIRS), not {min_pairs!r}: the quartiles "
            f"of fewer per-pair ratios say too little for any comparison to be confident. Leave it out "
            f"(it defaults to {MIN_PAIRS}), or ask for more pairs, not fewer, to compare quick calls.")
    if max_pairs < min_pairs:
        raise TimingError(f"max_pairs ({max_pairs}) is below min_pairs ({min_pairs}): give a max_pairs of "
                          f"{min_pairs} or more.")


def compare(
    first: Callable[[], Any],
    second: Callable[[], Any],
    *,
    warmup: int = 1,
    min_run_time: float = 0.2,
    min_pairs: int = MIN_PAIRS,
    max_pairs: int = MAX_PAIRS,
    device: Any = None,
    backend: Optional[str] = None,
    labels: tuple = ("first", "second"),
    clock: Optional[Callable[[], float]] = None,
    max_warmup_time: Optional[float] = None,
) -> Comparison:
    """Measure `first()` and `second()` side by side: each warms up and sizes its blocks as
    `ds.benchmark` does, then their blocks alternate (first-second, then second-first) until
    each side has measured `min_run_time` seconds and `min_pairs` pairs are done (or
    `max_pairs`). Garbage collection is paused throughout. `clock` is for tests, as in
    `benchmark` (a clock with `cpu_wait()` stands in for the system's wait count).
    `min_pairs` below `MIN_PAIRS`, or a `max_pairs` below `min_pairs`, is refused with
    `ds.TimingError`: a ratio from fewer pairs could never be confident.

    Example:
        >>> c = compare(lambda: a.copy(), lambda: ds.to_device(a, "cpu"), min_run_time=0.05)
        >>> c.ratio, c.first.median, c.second.median
    """
    for fn in (first, second):
        _check_arguments(fn, warmup, min_run_time, max_pairs, max_warmup_time)
    _check_pairs(min_pairs, max_pairs)
    with _started((first, second), (), warmup, min_run_time, max_warmup_time, device, backend, clock) as sides:
        measured = [0.0, 0.0]
        pairs = 0
        while pairs < max_pairs and (pairs < min_pairs or min(measured) < min_run_time):
            for i in ((0, 1) if pairs % 2 == 0 else (1, 0)):
                measured[i] += sides[i].run()
            pairs += 1
    return Comparison(sides[0].measurement(labels[0]), sides[1].measurement(labels[1]))
