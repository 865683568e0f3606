"""`Measurement`: what `benchmark` measured, summarised."""

from __future__ import annotations

import statistics
from typing import Optional, Sequence

from devshim.errors import TimingError
from devshim.timing.settle import (
    busy, disagreement, disagrees, quartiles, spread_share, stalled_runs, stalling, stalls_matter, unsettled,
)

__all__ = ["Measurement", "format_seconds"]


def format_seconds(seconds: float) -> str:
    """A duration with three significant digits and a fitting unit.

    Example:
        >>> format_seconds(0.00042)
        '420 us'
    """
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


#: The fields of `Measurement.to_dict`, in order: attributes and properties of the Measurement,
#: and its quartiles (`q1`, `q3`).
_DICT_FIELDS = ("label", "device", "median", "mean", "iqr", "q1", "q3", "min", "max", "runs", "number_per_run",
                "warmup", "warmup_seconds", "settled", "noisy", "load", "cpus", "busy", "stalls", "stalled",
                "overhead", "times", "waits")


class Measurement:
    """What `benchmark` measured: seconds per call, one value per run.

    `times` holds one entry per run (a block of `number_per_run` calls,
    divided by that number); `median`, `mean`, `iqr`, `min`, `max`
    summarise them. `overhead` is what one clock reading plus the wait
    after a block cost, in seconds. `warmup` calls (`warmup_seconds`)
    were made first and not measured; `settled` says whether the warm-up
    reached steady times, `noisy` whether the runs disagree, `stalled`
    whether a quarter of the runs or more jumped to a slower state (this
    process's threads waited for a CPU, `waits`, or a run took over 1.5x
    the fastest), `busy` whether the load average (`load`) was above the
    CPU count (`cpus`) when measured, and `warnings` says each in words
    (printing the Measurement shows them).

    Example:
        >>> m = ds.benchmark(torch.matmul, a, b)
        >>> m.median, m.iqr, m.runs
        (0.0041, 0.0002, 48)
        >>> print(m)
    """

    def __init__(
        self,
        times: Sequence[float],
        number_per_run: int,
        *,
        label: str = "",
        device: str = "",
        warmup: int = 0,
        overhead: float = 0.0,
        settled: bool = True,
        warmup_seconds: float = 0.0,
        load: Optional[float] = None,
        cpus: Optional[int] = None,
        waits: Optional[Sequence[float]] = None,
        fastest: Optional[float] = None,
    ) -> None:
        if not times:
            raise TimingError("A Measurement needs at least one time; benchmark() made none.")
        self.times = list(times)
        self.number_per_run = number_per_run
        self.label = label
        self.device = device
        self.warmup = warmup
        self.overhead = overhead
        self.settled = settled
        self.warmup_seconds = warmup_seconds
        self.load, self.cpus = load, cpus
        #: Seconds this process's threads waited for a CPU during each run (None: not known here).
        self.waits = list(waits) if waits is not None else None
        #: The quickest per-call time the warm-up's full-size blocks took (None: not known).
        self.fastest = fastest
        #: How many benchmark() runs this figure took: 1; `devshim bench` re-measures noisy ones.
        self.tries = 1

    @property
    def runs(self) -> int:
        """How many runs were measured (one entry of `times` each).

        Example:
            >>> ds.benchmark(torch.matmul, a, b).runs
            131
        """
        return len(self.times)

    @property
    def median(self) -> float:
        """Seconds per call, the median over the runs: the number to quote.

        Example:
            >>> print(f"{m.median * 1e3:.2f} ms")
            1.50 ms
        """
        return statistics.median(self.times)

    @property
    def mean(self) -> float:
        """Seconds per call, the mean over the runs (pulled up by slow outliers).

        Example:
            >>> m.mean >= m.min
            True
        """
        return statistics.fmean(self.times)

    @property
    def min(self) -> float:
        """Seconds per call of the fastest run: the best case.

        Example:
            >>> m.min <= m.median
            True
        """
        return min(self.times)

    @property
    def max(self) -> float:
        """Seconds per call of the slowest run: the worst interruption.

        Example:
            >>> m.max >= m.median
            True
        """
        return max(self.times)

    def quartiles(self) -> tuple:
        """(first quartile, third quartile) of `times`, inclusive method (as numpy.percentile).

        Example:
            >>> q1, q3 = m.quartiles()
        """
        return quartiles(self.times)

    @property
    def iqr(self) -> float:
        """The interquartile range of `times`: the spread. Above ~10% of the median, the
        machine was busy.

        Example:
            >>> m.iqr / m.median < 0.1
            True
        """
        q1, q3 = self.quartiles()
        return q3 - q1

    @property
    def spread(self) -> float:
        """The IQR as a share of the median: 0.05 is 5%.

        Example:
            >>> f"{m.spread:.1%}"
            '3.2%'
        """
        return spread_share(self.times)

    @property
    def noisy(self) -> bool:
        """Whether the runs disagree: their IQR is above 10% of the median (`NOISE_SHARE`).

        Example:
            >>> m.noisy
            False
        """
        return disagrees(self.spread)

    @property
    def stalls(self) -> int:
        """How many runs stalled: this process's threads waited for a CPU for a quarter of the
        run or more, or the run took over 1.5x the fastest (warm-up included).

        Example:
            >>> m.stalls, m.runs
            (0, 40)
        """
        return stalled_runs(self.times, self.waits, self.number_per_run, self.fastest)

    @property
    def stalled(self) -> bool:
        """Whether the runs jumped between states often enough to hold the figure up: a quarter
        of them or more stalled (`stalls`). Runs held up the same way each time agree with each
        other, so this can be True where `noisy` is False.

        Example:
            >>> m.stalled
            False
        """
        return stalls_matter(self.stalls, self.runs)

    @property
    def busy(self) -> bool:
        """Whether more threads wanted to run than there were CPUs while measuring (the
        one-minute load average above the CPU count; False where the system does not tell).

        Example:
            >>> m.load, m.cpus, m.busy
            (6.2, 2, True)
        """
        return busy(self.load, self.cpus) is not None

    @property
    def warnings(self) -> list:
        """Why this figure may not be trusted, in words: runs that disagree, runs that stalled, a
        warm-up that did not settle, a busy machine. Empty when none.

        Example:
            >>> m.warnings
            []
        """
        found = [] if self.settled else [unsettled(self.warmup, self.warmup_seconds)]
        said = (disagreement(self.spread), stalling(self.stalls, self.runs), busy(self.load, self.cpus))
        return found + [text for text in said if text]

    def to_dict(self) -> dict:
        """Plain, JSON-ready data.

        Example:
            >>> json.dumps(ds.benchmark(f).to_dict())
        """
        q1, q3 = self.quartiles()
        computed = {"q1": q1, "q3": q3, "times": list(self.times)}
        return {name: computed[name] if name in computed else getattr(self, name) for name in _DICT_FIELDS}

    def __str__(self) -> str:
        q1, q3 = self.quartiles()
        where = f" on {self.device}" if self.device else ""
        return "\n".join([
            f"<devshim.Measurement> {self.label}{where}",
            f"  Median: {format_seconds(self.median)}",
            f"  IQR:    {format_seconds(self.iqr)} ({format_seconds(q1)} to {format_seconds(q3)})",
            f"  Mean:   {format_seconds(self.mean)} (min {format_seconds(self.min)}, "
            f"max {format_seconds(self.max)})",
            f"  {self.runs} runs, {self.number_per_run} call{'s' if self.number_per_run != 1 else ''}"
            f" per run, {self.warmup} warm-up call{'s' if self.warmup != 1 else ''} not counted",
        ] + [f"  Warning: {text}." for text in self.warnings])

    def __repr__(self) -> str:
        return (f"Measurement(label={self.label!r}, median={self.median!r}, runs={self.runs}, "
                f"number_per_run={self.number_per_run})")
