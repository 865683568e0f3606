"""When timings can be trusted: warm-up that settles, and runs that agree.

A first call pays for what later calls reuse (a cuBLAS handle, an XLA compilation, a thread
pool, allocator growth), so `benchmark` keeps warming up until the per-call times of
`SETTLE_BLOCKS` consecutive blocks agree within `SETTLE_RATIO`. Once measured, runs whose
interquartile range is above `NOISE_SHARE` of their median disagree: something else was
running, or the work itself varies. Runs can also jump between states and still agree with
each other: a run *stalled* when this process's threads waited for a CPU for `STALL_SHARE`
of its time or more (Linux counts that wait per thread: `cpu_wait`), or when it took over
`SETTLE_RATIO` times the fastest run; when `STALLED_RUNS` of the runs or more stalled, the
figure comes from a machine that was holding the work up, not from the work. These verdicts
are written out in plain words wherever a figure is printed (`Measurement`, `Timer`, the
tables of `devshim bench` and `devshim selftest`).
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Optional, Sequence, Tuple

__all__ = [
    "SETTLE_RATIO", "SETTLE_BLOCKS", "NOISE_SHARE", "agree", "quartiles", "spread_share", "cold_prefix",
    "disagrees", "disagreement", "unsettled", "machine_load", "busy",
    "STALL_SHARE", "STALLED_RUNS", "cpu_wait", "stalled_runs", "stalls_matter", "stalling",
]

#: Consecutive warm-up blocks whose per-call times must agree before measuring starts.
SETTLE_BLOCKS = 3
#: "Agree": the slowest of those blocks is at most this many times the fastest.
SETTLE_RATIO = 1.5
#: Runs disagree when their interquartile range is above this share of their median.
NOISE_SHARE = 0.10
#: A run stalled when this process's threads waited for a CPU for at least this share of its time.
STALL_SHARE = 0.25
#: A figure is held up by stalls when at least this share of its runs stalled (the quartile:
#: from there on the spread, and soon the median, come from stalled runs).
STALLED_RUNS = 0.25
_TASKS = "/proc/self/task"


def agree(per_call: Sequence[float]) -> bool:
    """Whether the last `SETTLE_BLOCKS` per-call times agree within `SETTLE_RATIO`.

    Example:
        >>> agree([0.044, 15e-6, 16e-6, 15e-6])   # a cold first call, then steady
        True
        >>> agree([0.044, 15e-6, 16e-6])           # the cold call is still among the last three
        False
    """
    last = list(per_call[-SETTLE_BLOCKS:])
    if len(last) < SETTLE_BLOCKS:
        return False
    fastest = min(last)
    return max(last) <= SETTLE_RATIO * fastest if fastest > 0 else max(last) == 0


def quartiles(values: Sequence[float]) -> tuple:
    """(first quartile, third quartile) of `values`, inclusive method (as numpy.percentile); a
    single value is both.

    Example:
        >>> quartiles([1.0, 1.0, 1.2, 1.4])
        (1.0, 1.25)
    """
    if len(values) < 2:
        return values[0], values[0]
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q3


def spread_share(times: Sequence[float]) -> float:
    """Interquartile range over median of `times` (0.0 for fewer than two, or a zero median).

    Example:
        >>> round(spread_share([1.0, 1.0, 1.2, 1.4]), 2)
        0.25
    """
    if len(times) < 2 or statistics.median(times) <= 0:
        return 0.0
    q1, q3 = quartiles(times)
    return (q3 - q1) / statistics.median(times)


def cold_prefix(times: Sequence[float]) -> int:
    """How many leading `times` are cold: each more than `SETTLE_RATIO` times the median of
    the times after it. Needs three times after a cold one to tell.

    Example:
        >>> cold_prefix([0.044, 0.003, 15e-6, 16e-6, 15e-6])
        2
        >>> cold_prefix([15e-6, 16e-6, 15e-6, 15e-6])
        0
    """
    cold = 0
    while len(times) - cold > SETTLE_BLOCKS:
        rest = statistics.median(times[cold + 1:])
        if not times[cold] > SETTLE_RATIO * rest:
            break
        cold += 1
    return cold


def disagrees(share: float) -> bool:
    """Whether runs whose IQR is `share` of their median disagree (above `NOISE_SHARE`; the
    comparison ignores float rounding far below what a table shows).

    Example:
        >>> disagrees(0.23), disagrees(0.1)
        (True, False)
    """
    return round(share, 9) > NOISE_SHARE


def disagreement(share: float) -> Optional[str]:
    """The plain-words warning for runs whose spread is `share` of their median, or None when
    they agree (`share` at most `NOISE_SHARE`).

    Example:
        >>> disagreement(0.23)
        'runs disagree: the middle half of them spans 23% of the median (over 10%); ...'
    """
    if not disagrees(share):
        return None
    return (f"runs disagree: the middle half of them spans {share:.0%} of the median (over "
            f"{NOISE_SHARE:.0%}); the machine was busy or the work varies: measure again before "
            f"trusting this figure")


def unsettled(calls: int, seconds: float) -> str:
    """The plain-words warning for a warm-up that ran out of time before settling.

    Example:
        >>> unsettled(40, 0.5)
        'warm-up did not settle: per-call times still changed after 40 warm-up calls (0.5 s); ...'
    """
    return (f"warm-up did not settle: per-call times still changed after {calls} warm-up calls "
            f"({seconds:.2g} s); the figure may still hold warm-up (a first compilation, a cold "
            f"cache) or a busy machine: measure again before trusting it")


def machine_load() -> Optional[Tuple[float, int]]:
    """(the one-minute load average, the CPUs this process may use), or None where the system
    does not tell (Windows).

    Example:
        >>> machine_load()
        (0.42, 8)
    """
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return load, cpus


def busy(load: Optional[float], cpus: Optional[int]) -> Optional[str]:
    """The plain-words warning for a measurement made while more threads wanted to run than
    there were CPUs (the load average above the CPU count), or None.

    Example:
        >>> busy(6.2, 2)
        'the machine was busy: load 6.2 on 2 CPUs while measuring; ...'
    """
    if load is None or not cpus or load <= cpus:
        return None
    return (f"the machine was busy: load {load:.1f} on {cpus} CPU{'s' if cpus != 1 else ''} while measuring; "
            f"threads waited for a CPU (a framework's worker threads too), so this figure may be far "
            f"slower than on an idle machine, even when its runs agree")


class _Waits:
    """Reads the run-queue wait of this process's threads through files kept open (a read of an
    open /proc file costs a few microseconds; opening one, tens). The threads are listed again
    at most every `RELIST` seconds, and when one has gone: a framework's thread pool starts
    during the warm-up, before the measured runs read the waits."""

    RELIST = 0.25

    def __init__(self) -> None:
        self.files: dict = {}  # thread id -> open file descriptor of its schedstat
        self.listed = None     # time.monotonic() of the last listing
        self.pid = None        # the process that opened the files (a forked child lists its own)

    def _relist(self) -> None:
        if self.pid == os.getpid():
            for fd in self.files.values():
                os.close(fd)
        self.files, self.pid = {}, os.getpid()
        for task in os.listdir(_TASKS):
            try:
                self.files[task] = os.open(f"{_TASKS}/{task}/schedstat", os.O_RDONLY)
            except OSError:  # a thread that ended since the listing
                continue
        self.listed = time.monotonic()

    def read(self, again: bool = True) -> int:
        if self.pid != os.getpid() or self.listed is None or time.monotonic() - self.listed > self.RELIST:
            self._relist()
        total = 0
        for fd in self.files.values():
            try:
                total += int(os.pread(fd, 64, 0).split()[1])
            except (OSError, IndexError, ValueError):  # a thread that ended: list them again, once
                if not again:
                    raise
                self.listed = None
                return self.read(again=False)
        return total


_waits = _Waits()


def cpu_wait() -> Optional[float]:
    """Seconds the threads of this process have spent ready to run but waiting for a CPU, summed
    over the threads alive now (Linux's per-thread scheduler statistics), or None where the
    system does not tell. The difference across a run is how long another process (or a sibling
    thread) held the CPUs that run needed; `benchmark` reads it between runs, outside the
    timed part (a few microseconds per thread).

    Example:
        >>> before = cpu_wait(); work(); waited = cpu_wait() - before
    """
    try:
        return _waits.read() / 1e9
    except (OSError, IndexError, ValueError):
        return None


def stalled_runs(times: Sequence[float], waits: Optional[Sequence[float]], number: int = 1,
                 fastest: Optional[float] = None) -> int:
    """How many runs stalled: their threads waited for a CPU for `STALL_SHARE` of the run or
    more (`waits`: seconds per run, None where unknown), or their time per call is over
    `SETTLE_RATIO` times the fastest (`fastest`: the quickest per-call time seen, warm-up
    included; default the quickest of `times`). `number` calls make each run.

    Example:
        >>> stalled_runs([1e-3, 1e-3, 4e-3, 1e-3], None)   # one run four times the others
        1
        >>> stalled_runs([1e-3] * 4, [0.0, 0.0, 6e-4, 0.0])  # one waited 60% of its time
        1
    """
    return sum(_stall_flags(times, waits, number, fastest))


def _stall_flags(times: Sequence[float], waits: Optional[Sequence[float]], number: int,
                 fastest: Optional[float]) -> list:
    """Whether each run stalled, one bool per entry of `times`: the runs `stalled_runs` counts.

    Example:
        >>> _stall_flags([1e-3, 1e-3, 4e-3, 1e-3], None, 1, None)
        [False, False, True, False]
    """
    if not times:
        return []
    quickest = min(times) if fastest is None else min(min(times), fastest)
    flags = []
    for i, seconds in enumerate(times):
        waited = waits[i] if waits is not None and i < len(waits) else 0.0
        flags.append(seconds > SETTLE_RATIO * quickest or waited >= STALL_SHARE * seconds * number)
    return flags


def stalls_matter(stalled: int, runs: int) -> bool:
    """Whether `stalled` of `runs` is enough to hold the figure up (`STALLED_RUNS` or more).

    Example:
        >>> stalls_matter(1, 40), stalls_matter(12, 40)
        (False, True)
    """
    return runs > 0 and stalled > 0 and stalled >= STALLED_RUNS * runs - 1e-9


def stalling(stalled: int, runs: int) -> Optional[str]:
    """The plain-words warning for a figure whose runs stalled (`stalls_matter`), or None.

    Example:
        >>> stalling(12, 40)
        'runs stalled: 12 of 40 runs waited for a CPU for 25% of the run or longer ...'
    """
    if not stalls_matter(stalled, runs):
        return None
    return (f"runs stalled: {stalled} of {runs} runs waited for a CPU for {STALL_SHARE:.0%} of the run "
            f"or longer (another process held it, or a framework's threads waited for each other), or "
            f"took over {SETTLE_RATIO:g}x the fastest, so this figure may be several times too slow: "
            f"measure again with one thread, or when the machine is quieter (see uptime)")
