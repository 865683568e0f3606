"""Timing that tells the truth on asynchronous devices.

GPU frameworks return from a call as soon as the work is queued, so a timer
that does not wait measures the launch, not the work. ``synchronize`` waits
for queued work; ``Timer`` (d2l's API) and ``benchmark`` wait at the right
moments so their numbers mean what they say.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from devshim import _tree
from devshim.backends import backend_for_tensor, describe_native_device, get_backend, load_backend
from devshim.device import ACCEPTED_SPECS, Device
from devshim.errors import DevshimError, InvalidDeviceError

__all__ = ["synchronize", "Timer", "benchmark", "Measurement", "TimingError"]

Clock = Callable[[], float]

# How much of a measured block the timer reads and the wait after it may take.
_MAX_OVERHEAD_SHARE = 0.01


class TimingError(DevshimError, ValueError):
    """A timing request that cannot be answered (an empty Timer, a bad argument)."""


# ------------------------------------------------------------- synchronize


def synchronize(device: Any = None, *, backend: Optional[str] = None) -> None:
    """Wait until the work queued on ``device`` has finished.

    ``device`` may be None (every device of the selected backend, or of
    ``backend=``), a spec such as ``"gpu:1"``, a native device, a
    ``ds.Device``, a tensor, or a nest of tensors; for tensors it waits for
    the devices they live on (JAX arrays: ``block_until_ready``). Host-only
    backends return at once, and so does a framework that is not imported
    yet, since it cannot have queued anything.

    Example:
        >>> y = x @ x                 # queued on the GPU, not done
        >>> ds.synchronize(y)         # now it is
        >>> ds.synchronize("gpu:0")   # or wait for a whole device
    """
    if device is None:
        adapter = get_backend(backend)
        if adapter.is_loaded():
            adapter.synchronize(None)
        return
    for wait in _waits(device, backend):
        wait()


def _waits(target: Any, backend: Optional[str], outputs_only: bool = False) -> List[Callable[[], None]]:
    """One callable per distinct device (or JAX array) that ``target`` refers to.

    A lone non-tensor must be a device. In a nest, tensors and devices count
    and other leaves (numbers, None) are skipped; with ``outputs_only`` (what
    ``benchmark`` waits on) only tensors count.
    """
    nested = _tree.is_container(target)
    leaves = [leaf for _, leaf in _tree.iter_leaves(target)] if nested else [target]
    waits: List[Callable[[], None]] = []
    seen = set()
    for leaf in leaves:
        found = _wait_for_leaf(leaf, backend, devices=not outputs_only, strict=not nested)
        if found is None:
            continue
        key, wait = found
        if key is None or key not in seen:
            seen.add(key)
            waits.append(wait)
    return waits


# Leaves that are never tensors; skipping the tensor lookup for them is cheaper.
_PLAIN = (str, Device, int, float, complex, bool, type(None), bytes)


def _wait_for_leaf(
    leaf: Any, backend: Optional[str], devices: bool, strict: bool
) -> Optional[Tuple[Any, Callable[[], None]]]:
    adapter = None if isinstance(leaf, _PLAIN) else backend_for_tensor(leaf)
    if adapter is not None:
        where = adapter.tensor_device(leaf)
        return _device_wait(adapter, where, where.native)
    block = getattr(leaf, "block_until_ready", None)
    if callable(block):  # JAX arrays: no adapter needed, wait on the value itself
        return None, block
    if not devices:
        return None
    if isinstance(leaf, Device):
        adapter = load_backend(leaf.backend) if leaf.backend else get_backend(backend)
        native = leaf.native if leaf.backend == adapter.name and leaf.native is not None else adapter.device(leaf)
        return _device_wait(adapter, leaf, native)
    if type(leaf) is str:  # a spec; str subclasses are native devices, described below
        adapter = get_backend(backend)
        native = adapter.device(leaf)
        return _device_wait(adapter, adapter.describe(native), native)
    described = None if type(leaf) in _PLAIN else describe_native_device(leaf)
    if described is not None and described.backend:
        return _device_wait(load_backend(described.backend), described, leaf)
    if strict:
        raise InvalidDeviceError(
            f"synchronize() cannot wait on {type(leaf).__module__}.{type(leaf).__qualname__}: "
            f"pass None (every device), a tensor or a nest of tensors, or a device: "
            f"{ACCEPTED_SPECS}."
        )
    return None


def _device_wait(adapter: Any, where: Device, native: Any) -> Tuple[Any, Callable[[], None]]:
    """(a key naming the device, a call that waits for it): the key lets callers wait once per device."""
    return (adapter.name, str(where), where.virtual), lambda: adapter.synchronize(native)


class _Waiter:
    """What ``benchmark`` calls at the end of each block.

    Which devices to wait for is worked out once, from the first outputs
    (and ``device``); later blocks only call those waits, plus
    ``block_until_ready`` on JAX-style outputs. Code run inside the timed
    region is not free: right after a big kernel the interpreter's own code
    is out of cache, so the less of it, the better.
    """

    def __init__(self, device: Any, backend: Optional[str]) -> None:
        self.device, self.backend = device, backend
        self.device_waits = _waits(device, backend) if device is not None else []
        self.plan: Optional[List[Callable[[], None]]] = None
        self.per_value = False
        self.where = ""

    def _make_plan(self, outputs: Any) -> List[Callable[[], None]]:
        waits = []
        seen = set()
        for _, leaf in _tree.iter_leaves(outputs):
            if isinstance(leaf, _PLAIN):
                continue
            adapter = backend_for_tensor(leaf)
            if adapter is not None:
                where = adapter.tensor_device(leaf)
                key, wait = _device_wait(adapter, where, where.native)
                if key not in seen:
                    seen.add(key)
                    waits.append(wait)
            elif callable(getattr(leaf, "block_until_ready", None)):
                self.per_value = True
        waits.extend(self.device_waits)
        if not waits and not self.per_value:
            backend = self.backend
            waits.append(lambda: synchronize(None, backend=backend))
        self.where = _describe_target(self.device, outputs, self.backend)
        self.plan = waits
        return waits

    def __call__(self, outputs: Any) -> None:
        plan = self.plan if self.plan is not None else self._make_plan(outputs)
        for wait in plan:
            wait()
        if self.per_value:
            for _, leaf in _tree.iter_leaves(outputs):
                block = getattr(leaf, "block_until_ready", None)
                if callable(block):
                    block()


# ------------------------------------------------------------------- Timer


class Timer:
    """Record wall-clock times, waiting for the device at start and stop.

    The API is d2l's ``Timer`` (``start``, ``stop``, ``avg``, ``sum``,
    ``cumsum``, ``times``; timing starts on construction) plus ``with``
    blocks. It reads ``time.perf_counter`` (monotonic, high resolution), and
    calls ``ds.synchronize(device)`` before each reading, so queued GPU work
    is inside the interval. ``device`` accepts whatever ``synchronize`` does;
    None means every device of the selected backend (or of ``backend=``).

    Example:
        >>> timer = ds.Timer(ds.try_gpu())
        >>> for X in batches:
        ...     with timer:
        ...         Y = net(X)
        >>> print(f"{timer.avg():.4f} s/batch, {timer.sum():.2f} s in all")
    """

    def __init__(
        self,
        device: Any = None,
        *,
        backend: Optional[str] = None,
        clock: Optional[Clock] = None,
    ) -> None:
        self.device = device
        self.backend = backend
        self.clock: Clock = clock or time.perf_counter
        self.times: List[float] = []
        self.tik = 0.0
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

    def cumsum(self) -> List[float]:
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
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        # A block that raised did not finish its work: record nothing for it.
        if exc_type is None:
            self.stop()
        return False

    def __repr__(self) -> str:
        return f"Timer({len(self.times)} times, sum={self.sum():.6g} s)"


# --------------------------------------------------------------- benchmark


def _format_seconds(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


class Measurement:
    """What ``benchmark`` measured: seconds per call, one value per run.

    ``times`` holds one entry per run (a block of ``number_per_run`` calls,
    divided by that number); ``median``, ``mean``, ``iqr``, ``min``, ``max``
    summarise them. ``overhead`` is what one clock reading plus the wait
    after a block cost, in seconds.

    Example:
        >>> m = ds.benchmark(torch.matmul, a, b)
        >>> m.median, m.iqr, m.runs
        (0.0041, 0.0002, 48)
        >>> print(m)
    """

    def __init__(
        self,
        times: List[float],
        number_per_run: int,
        *,
        label: str = "",
        device: str = "",
        warmup: int = 0,
        overhead: float = 0.0,
    ) -> None:
        if not times:
            raise TimingError("A Measurement needs at least one time; benchmark() made none.")
        self.times = list(times)
        self.number_per_run = number_per_run
        self.label = label
        self.device = device
        self.warmup = warmup
        self.overhead = overhead

    @property
    def runs(self) -> int:
        return len(self.times)

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.times)

    @property
    def min(self) -> float:
        return min(self.times)

    @property
    def max(self) -> float:
        return max(self.times)

    def _quartiles(self) -> Tuple[float, float]:
        if len(self.times) < 2:
            return self.times[0], self.times[0]
        q1, _, q3 = statistics.quantiles(self.times, n=4, method="inclusive")
        return q1, q3

    @property
    def iqr(self) -> float:
        q1, q3 = self._quartiles()
        return q3 - q1

    def to_dict(self) -> Dict[str, Any]:
        """Plain, JSON-ready data.

        Example:
            >>> json.dumps(ds.benchmark(f).to_dict())
        """
        q1, q3 = self._quartiles()
        return {
            "label": self.label,
            "device": self.device,
            "median": self.median,
            "mean": self.mean,
            "iqr": self.iqr,
            "q1": q1,
            "q3": q3,
            "min": self.min,
            "max": self.max,
            "runs": self.runs,
            "number_per_run": self.number_per_run,
            "warmup": self.warmup,
            "overhead": self.overhead,
            "times": list(self.times),
        }

    def __str__(self) -> str:
        q1, q3 = self._quartiles()
        where = f" on {self.device}" if self.device else ""
        return "\n".join([
            f"<devshim.Measurement> {self.label}{where}",
            f"  Median: {_format_seconds(self.median)}",
            f"  IQR:    {_format_seconds(self.iqr)} ({_format_seconds(q1)} to {_format_seconds(q3)})",
            f"  Mean:   {_format_seconds(self.mean)} (min {_format_seconds(self.min)}, "
            f"max {_format_seconds(self.max)})",
            f"  {self.runs} runs, {self.number_per_run} call{'s' if self.number_per_run != 1 else ''}"
            f" per run, {self.warmup} warm-up call{'s' if self.warmup != 1 else ''} not counted",
        ])

    def __repr__(self) -> str:
        return (f"Measurement(label={self.label!r}, median={self.median!r}, runs={self.runs}, "
                f"number_per_run={self.number_per_run})")


def _check_arguments(fn: Any, warmup: Any, min_run_time: Any, max_runs: Any) -> None:
    if not callable(fn):
        raise TimingError(f"benchmark() times a callable, but got {type(fn).__name__}: pass a function, "
                          f"e.g. ds.benchmark(torch.matmul, a, b).")
    if not isinstance(warmup, int) or isinstance(warmup, bool) or warmup < 0:
        raise TimingError(f"warmup must be a whole number of calls >= 0, not {warmup!r}.")
    if not isinstance(min_run_time, (int, float)) or isinstance(min_run_time, bool) or not min_run_time > 0:
        raise TimingError(f"min_run_time must be a positive number of seconds, not {min_run_time!r}.")
    if not isinstance(max_runs, int) or isinstance(max_runs, bool) or max_runs < 1:
        raise TimingError(f"max_runs must be a whole number >= 1, not {max_runs!r}.")


def _describe_target(device: Any, outputs: Any, backend: Optional[str]) -> str:
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
    clock: Optional[Clock] = None,
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
       neither, every device of the selected backend) and, for JAX-style
       outputs, for the values themselves. A device runs its queue in order,
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
    wait = _Waiter(device, backend)
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
        outputs = None
        number = _calibrate(fn, args, wait, clock, overhead, min_run_time)
        times: List[float] = []
        measured = 0.0
        while len(times) < max_runs and measured < min_run_time:
            elapsed = _run_block(fn, args, wait, clock, number)
            times.append(elapsed / number)
            measured += elapsed
    finally:
        if gc_was_enabled:
            gc.enable()
    return Measurement(times, number, label=name, device=wait.where, warmup=warmup, overhead=overhead)


def _run_block(fn, args, wait, clock: Clock, number: int) -> float:
    # Results are dropped as soon as they are made, as a plain loop would, so the
    # allocator can reuse their memory; only the last is kept, to wait on it.
    start = clock()
    for _ in range(number - 1):
        fn(*args)
    outputs = fn(*args)
    wait(outputs)
    return clock() - start


def _measure_overhead(wait, outputs: Any, clock: Clock, repeats: int = 7) -> float:
    """Median cost of a wait on finished work plus a clock reading: what each block pays besides its calls."""
    costs = []
    for _ in range(repeats):
        start = clock()
        wait(outputs)
        costs.append(clock() - start)
    return max(statistics.median(costs), 0.0)


def _calibrate(fn, args, wait, clock: Clock, overhead: float, min_run_time: float) -> int:
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
