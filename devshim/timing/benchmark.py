"""`benchmark`: warm up until settled, size blocks of calls, repeat, summarise."""

from __future__ import annotations

import contextlib
import gc
import math
import statistics
import time
from typing import Any, Callable, NamedTuple, Optional

from devshim import _tree
from devshim.backends import backend_for_tensor, describe_native_device, get_backend
from devshim._device import Device
from devshim.errors import DevshimError, TimingError
from devshim.timing.measurement import Measurement
from devshim.timing import settle
from devshim.timing.settle import SETTLE_BLOCKS, agree
from devshim.timing.sync import Waiter

__all__ = ["benchmark", "Side", "WaitMeter"]

# How much of a measured block the timer reads and the wait after it may take.
_MAX_OVERHEAD_SHARE = 0.01
# Warm-up time allowed before giving up on settling (at least this, or twice min_run_time).
_WARMUP_FLOOR = 0.25
# The largest block.
_MAX_NUMBER = 10**7
# Warm-up blocks at most, whatever else happens.
_MAX_WARMUP_BLOCKS = 1000
# Measured blocks at least (unless max_runs is smaller): a figure from one run has no spread to show.
_MIN_RUNS = 3


def _check_arguments(fn, warmup, min_run_time, max_runs, max_warmup_time) -> None:
    if not callable(fn):
        raise TimingError(f"benchmark() times a callable, but got {type(fn).__name__}: pass a function, "
                          f"e.g. ds.benchmark(torch.matmul, a, b).")
    if not isinstance(warmup, int) or isinstance(warmup, bool) or warmup < 0:
        raise TimingError(f"warmup must be a whole number of calls >= 0, not {warmup!r}.")
    if not isinstance(min_run_time, (int, float)) or isinstance(min_run_time, bool) or not min_run_time > 0:
        raise TimingError(f"min_run_time must be a positive number of seconds, not {min_run_time!r}.")
    if not isinstance(max_runs, int) or isinstance(max_runs, bool) or max_runs < 1:
        raise TimingError(f"max_runs must be a whole number >= 1, not {max_runs!r}.")
    if max_warmup_time is not None and (not isinstance(max_warmup_time, (int, float))
                                        or isinstance(max_warmup_time, bool) or max_warmup_time < 0):
        raise TimingError(f"max_warmup_time must be a number of seconds >= 0 (or None), not {max_warmup_time!r}.")


def _describe_target(device, outputs, backend) -> str:
    """A short name for where the timed work ran, for reports."""
    try:
        if device is None:
            for _, leaf in _tree.iter_leaves(outputs):
                adapter = backend_for_tensor(leaf)
                if adapter is not None:
                    return str(adapter.tensor_device(leaf))
            return ""
        if isinstance(device, Device):
            return str(device)
        if type(device) is str:
            adapter = get_backend(backend)
            return str(adapter.describe(adapter.device(device)))
        adapter = backend_for_tensor(device)
        if adapter is not None:
            return str(adapter.tensor_device(device))
        described = describe_native_device(device)
        return str(described) if described is not None else ""
    except DevshimError:
        return ""


def benchmark(
    fn: Callable[..., Any],
    *args: Any,
    warmup: int = 2,
    min_run_time: float = 0.2,
    max_runs: int = 1000,
    device: Any = None,
    backend: Optional[str] = None,
    label: Optional[str] = None,
    clock: Optional[Callable[[], float]] = None,
    max_warmup_time: Optional[float] = None,
) -> Measurement:
    """Time `fn(*args)`: warm up until the figures settle, size blocks of calls, repeat, summarise.

    1. Warm-up: a first call (it pays for cuBLAS handles, XLA compilation,
       thread pools, allocator growth) shows what to wait on; then blocks of
       calls, grown until the two clock readings and the wait that close a
       block cost under 1% of it, run until the per-call times of three
       consecutive blocks agree within 1.5x, and `warmup` calls at least
       were made. None of it is measured: a cold call never stands for the
       figure. A warm-up that has not settled after `max_warmup_time`
       seconds (default: 0.25 s or twice `min_run_time`, whichever is
       longer) stops, unless its calls are still getting faster, and the
       Measurement says so (`settled` is False).
    2. Blocks of `number_per_run` calls run until `min_run_time`
       seconds are measured (and three blocks at least, so that the figure has a
       spread) or `max_runs` blocks are done. Each block ends
       by waiting for the devices fn's first outputs lived on (and
       `device` when given; with neither, every device of the selected
       backend) and, on backends that wait per value, for the output values
       themselves. A device runs its queue in order, so waiting after the
       last call covers the block. Garbage collection is paused, as timeit does.
    3. The Measurement summarises the runs; `noisy` says whether they
       disagree (IQR above 10% of the median), `stalled` whether a quarter
       of them or more jumped to a slower state (this process's threads
       waited for a CPU, read between runs where the system tells, or the run
       took over 1.5x the fastest block seen), `busy` whether the machine
       had more threads wanting to run than CPUs (its load average), and
       printing it says so in words.

    `clock` (default `time.perf_counter`) is there for tests; a test clock with a
    `cpu_wait()` method also stands in for the system's count of the time this process's
    threads waited for a CPU (`Measurement.waits`; read with the default clock only).

    Example:
        >>> a = torch.randn(512, 512, device=ds.try_gpu()); b = a.clone()
        >>> m = ds.benchmark(torch.matmul, a, b)
        >>> print(m)          # median, IQR, mean, runs; a warning if they disagree
        >>> m.to_dict()["median"], m.noisy, m.settled
    """
    _check_arguments(fn, warmup, min_run_time, max_runs, max_warmup_time)
    name = label if label is not None else getattr(fn, "__name__", None) or repr(fn)
    with _started((fn,), args, warmup, min_run_time, max_warmup_time, device, backend, clock) as (side,):
        measured = 0.0
        at_least = min(_MIN_RUNS, max_runs)
        while len(side.times) < max_runs and (measured < min_run_time or len(side.times) < at_least):
            measured += side.run()
    return side.measurement(name)


@contextlib.contextmanager
def _started(fns, args, warmup, min_run_time, max_warmup_time, device, backend, clock):
    """One `Side` per function of `fns` (each called with `args`), sharing one WaitMeter, warmed up
    in turn with garbage collection paused (as timeit does) until the block ends, and enabled
    again after it if it was before; the meter is reset for the first measured run.

    Example:
        >>> with _started((fn,), (), 2, 0.2, None, None, None, None) as (side,):
        ...     side.run()
    """
    budget = max(_WARMUP_FLOOR, 2 * min_run_time) if max_warmup_time is None else max_warmup_time
    meter = WaitMeter(clock)
    sides = [Side(fn, args, Waiter(device, backend), clock or time.perf_counter, meter) for fn in fns]
    plan = _Plan(0.0, min_run_time, warmup, budget)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for side in sides:
            side.start(plan, device, backend)
        meter.reset()
        yield sides
    finally:
        if was_enabled:
            gc.enable()


class WaitMeter:
    """How long this process's threads waited for a CPU since the last reading (`settle.cpu_wait`,
    or a test clock's `cpu_wait`); `since()` returns None where that is not known. One meter
    serves every side of a comparison, so each reading closes one run and opens the next.

    Example:
        >>> meter = WaitMeter(None); meter.reset(); work(); meter.since()
        0.0
    """

    def __init__(self, clock) -> None:
        default = clock is None or clock is time.perf_counter  # waits are wall time: not for a CPU clock
        self.read = settle.cpu_wait if default else getattr(clock, "cpu_wait", None)
        self.last = None

    def reset(self) -> None:
        self.last = self.read() if self.read is not None else None
        if self.last is None:
            self.read = None

    def since(self):
        if self.read is None or self.last is None:
            return None
        now = self.read()
        if now is None:
            return None
        waited, self.last = max(now - self.last, 0.0), now
        return waited


class Side:
    """One function being measured: its first call, warm-up and block size, then its runs.

    `benchmark` measures one side; `devshim.timing.compare` two, their runs taking turns.

    Example:
        >>> side = Side(fn, (), Waiter(None, None), time.perf_counter, WaitMeter(None))
        >>> side.start(plan, None, None); side.run(); side.measurement("fn").median
    """

    def __init__(self, fn, args, wait, clock, meter: WaitMeter) -> None:
        self.fn, self.args, self.wait, self.clock, self.meter = fn, args, wait, clock, meter
        self.times: list = []
        self.waits: list = []
        self.where, self.overhead = "", 0.0
        self.warm = _WarmUp(1, 0, 0.0, False, None)  # until start() has warmed up

    def start(self, plan: "_Plan", device, backend) -> None:
        """The first call (thrown away: it shows what to wait on), the overhead, the warm-up."""
        clock, wait = self.clock, self.wait
        started = clock()
        outputs = self.fn(*self.args)
        wait(outputs)
        first = clock() - started
        self.overhead = _measure_overhead(wait, outputs, clock)
        self.where = _describe_target(device, outputs, backend)
        outputs = None
        self.warm = _warm_up(self.fn, self.args, wait, clock, plan._replace(overhead=self.overhead), first)

    def run(self) -> float:
        """One measured block of the warm-up's size; returns the seconds it took."""
        number = self.warm.number
        elapsed = _run_block(self.fn, self.args, self.wait, self.clock, number)
        self.times.append(elapsed / number)
        waited = self.meter.since()
        if waited is not None:
            self.waits.append(waited)
        return elapsed

    def measurement(self, label: str) -> Measurement:
        load, cpus = settle.machine_load() or (None, None)
        warm = self.warm
        waits = self.waits if len(self.waits) == len(self.times) else None
        return Measurement(self.times, warm.number, label=label, device=self.where, warmup=warm.calls,
                           overhead=self.overhead, settled=warm.settled, warmup_seconds=warm.seconds,
                           load=load, cpus=cpus, waits=waits, fastest=warm.fastest)


def _run_block(fn, args, wait, clock, number: int) -> float:
    # Results are dropped as soon as they are made, as a plain loop would, so the
    # allocator can reuse their memory; only the last is kept, to wait on it.
    start = clock()
    for _ in range(number - 1):
        fn(*args)
    outputs = fn(*args)
    wait(outputs)
    return clock() - start


def _measure_overhead(wait, outputs, clock, repeats: int = 7) -> float:
    """Median cost of a wait on finished work plus a clock reading: what each block pays besides its calls."""
    costs = []
    for _ in range(repeats):
        start = clock()
        wait(outputs)
        costs.append(clock() - start)
    return max(statistics.median(costs), 0.0)


class _Plan(NamedTuple):
    overhead: float       # what closing a block costs (clock reading and wait)
    min_run_time: float   # a block this long is big enough whatever the overhead
    at_least: int         # warm-up calls to make at least
    budget: float         # seconds of warm-up after which an unsettled warm-up stops


class _WarmUp(NamedTuple):
    number: int      # calls per block for the measured runs
    calls: int       # warm-up calls made, the first one included
    seconds: float   # what they took
    settled: bool    # whether the last blocks agreed
    fastest: Optional[float]  # the quickest per-call time of its blocks of that size (None: none)


def _warm_up(fn, args, wait, clock, plan: _Plan, first: float) -> _WarmUp:
    """Blocks of calls, thrown away, grown until the fixed cost of a block is under 1% of it, then
    repeated until `SETTLE_BLOCKS` blocks of that size agree on the time per call.

    Past `plan.budget` seconds an unsettled warm-up stops, unless its fastest block is among
    the last `SETTLE_BLOCKS` (the calls are still getting faster: a long cold phase)."""
    needed = plan.overhead / _MAX_OVERHEAD_SHARE
    number, calls, spent = 1, 1, first
    per_call: list = []  # per-call times of the blocks of the current size
    for _ in range(_MAX_WARMUP_BLOCKS):
        elapsed = _run_block(fn, args, wait, clock, number)
        calls, spent = calls + number, spent + elapsed
        sized = elapsed >= needed or elapsed >= plan.min_run_time or number >= _MAX_NUMBER
        if not sized:
            number, per_call = _grow(number, needed, elapsed), []
            continue
        per_call.append(elapsed / number)
        if calls >= plan.at_least and agree(per_call):
            return _WarmUp(number, calls, spent, True, min(per_call))
        improving = per_call.index(min(per_call)) >= len(per_call) - SETTLE_BLOCKS
        if spent >= plan.budget and not improving:
            break
    return _WarmUp(number, calls, spent, False, min(per_call) if per_call else None)


def _grow(number: int, needed: float, elapsed: float) -> int:
    """The next block size: enough to cover `needed` seconds with a margin, at least double."""
    grow = math.ceil(number * needed * 1.2 / elapsed) if elapsed > 0 else number * 10
    return min(max(grow, number * 2), _MAX_NUMBER)
