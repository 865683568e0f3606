"""``Timer``: d2l's timer, waiting for the device at start and stop."""

from __future__ import annotations

import time

from devshim.errors import TimingError
from devshim.timing.sync import synchronize

__all__ = ["Timer"]


class Timer:
    """Record wall-clock times, waiting for the device at start and stop.

    The API is d2l's ``Timer`` (``start``, ``stop``, ``avg``, ``sum``,
    ``cumsum``, ``times``; timing starts on construction) plus ``with``
    blocks. It reads ``time.perf_counter`` (monotonic, high resolution), and
    calls ``ds.synchronize(device)`` before each reading, so queued GPU work
    is inside the interval. ``device`` accepts whatever ``synchronize`` does;
    None means every device of the selected backend (or of ``backend=``).

    ``with`` blocks keep their own start times, so a ``with timer:`` nested in
    another records both intervals, the inner one first; ``start``/``stop``
    work as in d2l and do not disturb open blocks.

    Example:
        >>> timer = ds.Timer(ds.try_gpu())
        >>> for X in batches:
        ...     with timer:
        ...         Y = net(X)
        >>> print(f"{timer.avg():.4f} s/batch, {timer.sum():.2f} s in all")
    """

    def __init__(self, device=None, *, backend=None, clock=None) -> None:
        self.device = device
        self.backend = backend
        self.clock = clock or time.perf_counter
        self.times: list = []
        self.tik = 0.0
        self._open: list = []  # start times of the open `with` blocks, innermost last
        self.start()

    def _sync(self) -> None:
        synchronize(self.device, backend=self.backend)

    def start(self) -> None:
        """Wait for the device, then start the clock.

        Example:
            >>> timer.start()
        """
        self._sync()
        self.tik = self.clock()

    def stop(self) -> float:
        """Wait for the device, record the time since ``start`` and return it.

        Example:
            >>> seconds = timer.stop()
        """
        self._sync()
        elapsed = self.clock() - self.tik
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
        totals, running = [], 0.0
        for t in self.times:
            running += t
            totals.append(running)
        return totals

    def __enter__(self) -> "Timer":
        self._sync()
        self._open.append(self.clock())
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        began = self._open.pop()
        # A block that raised did not finish its work: record nothing for it.
        if exc_type is None:
            self._sync()
            self.times.append(self.clock() - began)
        return False

    def __repr__(self) -> str:
        return f"Timer({len(self.times)} times, sum={self.sum():.6g} s)"
