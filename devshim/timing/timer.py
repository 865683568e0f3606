"""`Timer`: d2l's timer, waiting for the device at start and stop."""

from __future__ import annotations

import itertools
import statistics
import time
from typing import Any, Callable, Optional

from devshim.errors import TimingError
from devshim.timing.measurement import format_seconds
from devshim.timing.settle import SETTLE_RATIO, cold_prefix, disagreement, spread_share
from devshim.timing.sync import synchronize

__all__ = ["Timer"]


class Timer:
    """Record wall-clock times, waiting for the device at start and stop.

    The API is d2l's `Timer` (`start`, `stop`, `avg`, `sum`,
    `cumsum`, `times`; timing starts on construction) plus `with`
    blocks. It reads `time.perf_counter` (monotonic, high resolution), and
    calls `ds.synchronize(device)` before each reading, so queued GPU work
    is inside the interval. `device` accepts whatever `synchronize` does;
    None means every device of the selected backend (or of `backend=`).

    `with` blocks keep their own start times, so a `with timer:` nested in
    another records both intervals, the inner one first; `start`/`stop`
    work as in d2l and do not disturb open blocks.

    The first intervals of a loop are often cold (a compilation, a cuBLAS
    handle, a thread pool starting): `avg()` and `sum()` count them, as
    d2l's do, while `warm_times()` and `median()` leave them out, and
    `print(timer)` says which were cold and whether the rest agree.

    Example:
        >>> timer = ds.Timer(ds.try_gpu())
        >>> for X in batches:
        ...     with timer:
        ...         Y = net(X)
        >>> print(f"{timer.avg():.4f} s/batch, {timer.sum():.2f} s in all")
        >>> print(timer)   # the median of the warm intervals, and which were cold
    """

    def __init__(self, device: Any = None, *, backend: Optional[str] = None,
                 clock: Optional[Callable[[], float]] = None) -> None:
        self.device = device
        self.backend = backend
        self.clock = clock or time.perf_counter
        self.times: list = []
        self.tik = 0.0
        self._open: list = []  # start times of the open `with` blocks, innermost last
        self.start()

    def _now(self) -> float:
        """The clock, read once the device has finished its queued work."""
        synchronize(self.device, backend=self.backend)
        return self.clock()

    def start(self) -> None:
        """Wait for the device, then start the clock.

        Example:
            >>> timer.start()
        """
        self.tik = self._now()

    def stop(self) -> float:
        """Wait for the device, record the time since `start` and return it.

        Example:
            >>> seconds = timer.stop()
        """
        elapsed = self._now() - self.tik
        self.times.append(elapsed)
        return elapsed

    def avg(self) -> float:
        """Mean of the recorded times; TimingError when there is none yet.

        Example:
            >>> timer.avg()
            0.0123
        """
        if not self.times:
            raise TimingError(
                "Timer.avg() has no recorded time to average yet. Call timer.start() and "
                "timer.stop() (or time a block with `with timer:`) at least once first."
            )
        return sum(self.times) / len(self.times)

    def sum(self) -> float:
        """Total of the recorded times (0.0 when none).

        Example:
            >>> timer.sum()
            1.23
        """
        return sum(self.times)

    def cumsum(self) -> list:
        """Running totals of the recorded times.

        Example:
            >>> timer.times, timer.cumsum()
            ([1.0, 2.0], [1.0, 3.0])
        """
        return list(itertools.accumulate(self.times))

    def cold(self) -> int:
        """How many of the first recorded times were cold: each more than 1.5 times the median
        of the times after it (three later times are needed to tell).

        Example:
            >>> timer.times
            [0.044, 1.5e-05, 1.6e-05, 1.5e-05]
            >>> timer.cold()
            1
        """
        return cold_prefix(self.times)

    def warm_times(self) -> list:
        """The recorded times without the cold ones at the start.

        Example:
            >>> timer.warm_times()
            [1.5e-05, 1.6e-05, 1.5e-05]
        """
        return self.times[self.cold():]

    def median(self) -> float:
        """Median of the warm times: the figure to quote for one interval; TimingError when
        nothing was recorded.

        Example:
            >>> timer.median()
            1.5e-05
        """
        if not self.times:
            raise TimingError("Timer.median() has no recorded time yet. Time a block with `with timer:` "
                              "(or timer.start() and timer.stop()) first.")
        return statistics.median(self.warm_times())

    def summary(self) -> str:
        """The recorded times in words: how many, the median of the warm ones, the cold ones left
        out, and a warning when the warm ones disagree.

        Example:
            >>> print(timer.summary())
            4 times: median 15 us (the first, 44 ms, was cold: left out); mean of all 11 ms
        """
        if not self.times:
            return "no time recorded yet"
        count, cold = len(self.times), self.cold()
        text = f"{count} time{'s' if count != 1 else ''}: median {format_seconds(self.median())}"
        if cold:
            shown = ", ".join(format_seconds(t) for t in self.times[:cold])
            which = "the first" if cold == 1 else f"the first {cold}"
            text += (f" ({which}, {shown}, {'was' if cold == 1 else 'were'} cold, over {SETTLE_RATIO:g}x "
                     f"the rest: left out)")
        text += f"; mean of all {format_seconds(self.avg())}"
        warning = disagreement(spread_share(self.warm_times()))
        return text + (f"\nWarning: {warning}." if warning else "")

    def __str__(self) -> str:
        return f"Timer: {self.summary()}"

    def __enter__(self) -> "Timer":
        self._open.append(self._now())
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        began = self._open.pop()
        # A block that raised did not finish its work: record nothing for it.
        if exc_type is None:
            self.times.append(self._now() - began)
        return False

    def __repr__(self) -> str:
        return f"Timer({len(self.times)} times, sum={self.sum():.6g} s)"
