"""``benchmark``: warm up, size blocks of calls, repeat, summarise."""

from __future__ import annotations

import gc
import math
import statistics
import time

from devshim import _tree
from devshim.backends import backend_for_tensor, describe_native_device, get_backend
from devshim._device import Device
from devshim.errors import DevshimError, TimingError
from devshim.timing.measurement import Measurement
from devshim.timing.sync import Waiter

__all__ = ["benchmark"]

# How much of a measured block the timer reads and the wait after it may take.
_MAX_OVERHEAD_SHARE = 0.01


def _check_arguments(fn, warmup, min_run_time, max_runs) -> None:
    if not callable(fn):
        raise TimingError(f"benchmark() times a callable, but got {type(fn).__name__}: pass a function, "
                          f"e.g. ds.benchmark(torch.matmul, a, b).")
    if not isinstance(warmup, int) or isinstance(warmup, bool) or warmup < 0:
        raise TimingError(f"warmup must be a whole number of calls >= 0, not {warmup!r}.")
    if not isinstance(min_run_time, (int, float)) or isinstance(min_run_time, bool) or not min_run_time > 0:
        raise TimingError(f"min_run_time must be a positive number of seconds, not {min_run_time!r}.")
    if not isinstance(max_runs, int) or isinstance(max_runs, bool) or max_runs < 1:
        raise TimingError(f"max_runs must be a whole number >= 1, not {max_runs!r}.")


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
    fn,
    *args,
    warmup: int = 2,
    min_run_time: float = 0.2,
    max_runs: int = 1000,
    device=None,
    backend=None,
    label=None,
    clock=None,
) -> Measurement:
    """Time ``fn(*args)``: warm up, size blocks of calls, repeat, summarise.

    1. ``warmup`` calls are made and thrown away (the first calls pay for
       cuBLAS handles, XLA compilation, allocator growth).
    2. Calls are grouped into blocks of ``number_per_run`` calls, sized so
       the two clock readings and the wait that close a block cost under 1%
       of it. The calibration blocks are thrown away too.
    3. Blocks run until ``min_run_time`` seconds are measured or
       ``max_runs`` blocks are done. Each block ends by waiting for the
       devices fn's first outputs lived on (and ``device`` when given; with
       neither, every device of the selected backend) and, on backends that
       wait per value, for the output values themselves. A device runs its queue in order,
       so waiting after the last call covers the block. Garbage collection
       is paused inside blocks, as timeit does.

    ``clock`` (default ``time.perf_counter``) is there for tests.

    Example:
        >>> a = torch.randn(512, 512, device=ds.try_gpu()); b = a.clone()
        >>> m = ds.benchmark(torch.matmul, a, b)
        >>> print(m)          # median, IQR, mean, runs
        >>> m.to_dict()["median"]
    """
    _check_arguments(fn, warmup, min_run_time, max_runs)
    clock = clock or time.perf_counter
    wait = Waiter(device, backend)
    name = label if label is not None else getattr(fn, "__name__", None) or repr(fn)

    outputs = None
    for _ in range(warmup):
        outputs = None
        outputs = fn(*args)
        wait(outputs)

    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        if warmup == 0:  # a first call, thrown away too, shows what to wait on
            outputs = fn(*args)
            wait(outputs)
        overhead = _measure_overhead(wait, outputs, clock)
        where = _describe_target(device, outputs, backend)
        outputs = None
        number = _calibrate(fn, args, wait, clock, overhead, min_run_time)
        times: list = []
        measured = 0.0
        while len(times) < max_runs and measured < min_run_time:
            elapsed = _run_block(fn, args, wait, clock, number)
            times.append(elapsed / number)
            measured += elapsed
    finally:
        if gc_was_enabled:
            gc.enable()
    return Measurement(times, number, label=name, device=where, warmup=warmup, overhead=overhead)


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


def _calibrate(fn, args, wait, clock, overhead: float, min_run_time: float) -> int:
    """The smallest block size whose fixed cost stays under 1% of the block.
    Calibration blocks are thrown away."""
    needed = overhead / _MAX_OVERHEAD_SHARE
    number, cap = 1, 10**7
    while True:
        elapsed = _run_block(fn, args, wait, clock, number)
        if elapsed >= needed or elapsed >= min_run_time or number >= cap:
            return number
        grow = math.ceil(number * needed * 1.2 / elapsed) if elapsed > 0 else number * 10
        number = min(max(grow, number * 2), cap)
