"""``benchmark``: warm up until settled, size blocks of calls, repeat, summarise."""

from __future__ import annotations

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

__all__ = ["benchmark"]

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
    """Time ``fn(*args)``: warm up until the figures settle, size blocks of calls, repeat, summarise.

    1. Warm-up: a first call (it pays for cuBLAS handles, XLA compilation,
       thread pools, allocator growth) shows what to wait on; then blocks of
       calls, grown until the two clock readings and the wait that close a
       block cost under 1% of it, run until the per-call times of three
       consecutive blocks agree within 1.5x, and ``warmup`` calls at least
       were made. None of it is measured: a cold call never stands for the
       figure. A warm-up that has not settled after ``max_warmup_time``
       seconds (default: 0.25 s or twice ``min_run_time``, whichever is
       longer) stops, unless its calls are still getting faster, and the
       Measurement says so (``settled`` is False).
    2. Blocks of ``number_per_run`` calls run until ``min_run_time``
       seconds are measured (and three blocks at least, so that the figure has a
       spread) or ``max_runs`` blocks are done. Each block ends
       by waiting for the devices fn's first outputs lived on (and
       ``device`` when given; with neither, every device of the selected
       backend) and, on backends that wait per value, for the output values
       themselves. A device runs its queue in order, so waiting after the
       last call covers the block. Garbage collection is paused, as timeit does.
    3. The Measurement summarises the runs; ``noisy`` says whether they
       disagree (IQR above 10% of the median), ``busy`` whether the machine
       had more threads wanting to run than CPUs (its load average), and
       printing it says so in words.

    ``clock`` (default ``time.perf_counter``) is there for tests.

    Example:
        >>> a = torch.randn(512, 512, device=ds.try_gpu()); b = a.clone()
        >>> m = ds.benchmark(torch.matmul, a, b)
        >>> print(m)          # median, IQR, mean, runs; a warning if they disagree
        >>> m.to_dict()["median"], m.noisy, m.settled
    """
    _check_arguments(fn, warmup, min_run_time, max_runs, max_warmup_time)
    clock = clock or time.perf_counter
    wait = Waiter(device, backend)
    name = label if label is not None else getattr(fn, "__name__", None) or repr(fn)
    budget = max(_WARMUP_FLOOR, 2 * min_run_time) if max_warmup_time is None else max_warmup_time

    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        started = clock()
        outputs = fn(*args)  # the first call, thrown away: it shows what to wait on
        wait(outputs)
        first = clock() - started
        overhead = _measure_overhead(wait, outputs, clock)
        where = _describe_target(device, outputs, backend)
        outputs = None
        warm = _warm_up(fn, args, wait, clock, _Plan(overhead, min_run_time, warmup, budget), first)
        times: list = []
        measured = 0.0
        at_least = min(_MIN_RUNS, max_runs)
        while len(times) < max_runs and (measured < min_run_time or len(times) < at_least):
            elapsed = _run_block(fn, args, wait, clock, warm.number)
            times.append(elapsed / warm.number)
            measured += elapsed
    finally:
        if gc_was_enabled:
            gc.enable()
    load, cpus = settle.machine_load() or (None, None)
    return Measurement(times, warm.number, label=name, device=where, warmup=warm.calls, overhead=overhead,
                       settled=warm.settled, warmup_seconds=warm.seconds, load=load, cpus=cpus)


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


def _warm_up(fn, args, wait, clock, plan: _Plan, first: float) -> _WarmUp:
    """Blocks of calls, thrown away, grown until the fixed cost of a block is under 1% of it, then
    repeated until ``SETTLE_BLOCKS`` blocks of that size agree on the time per call.

    Past ``plan.budget`` seconds an unsettled warm-up stops, unless its fastest block is among
    the last ``SETTLE_BLOCKS`` (the calls are still getting faster: a long cold phase)."""
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
            return _WarmUp(number, calls, spent, True)
        improving = per_call.index(min(per_call)) >= len(per_call) - SETTLE_BLOCKS
        if spent >= plan.budget and not improving:
            break
    return _WarmUp(number, calls, spent, False)


def _grow(number: int, needed: float, elapsed: float) -> int:
    """The next block size: enough to cover ``needed`` seconds with a margin, at least double."""
    grow = math.ceil(number * needed * 1.2 / elapsed) if elapsed > 0 else number * 10
    return min(max(grow, number * 2), _MAX_NUMBER)
