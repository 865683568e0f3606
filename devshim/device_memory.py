"""`ds.memory` and `ds.memory_peak`: what each device's memory holds, on every framework; and
`ds.estimate_memory` and `ds.largest_batch`: what a step would hold, found without the memory.

The figures come from each backend's `memory.py` (`devshim.backends.memory_base`): the
framework's own allocator counts where it keeps them, devshim's count on torch's virtual GPUs,
the live tensors elsewhere, and the process's and the machine's figures for the host.
docs/memory.md has the table of which figure each framework knows.

A peak is never more than the truth (the most bytes in use while the block ran), nested or
not; where devshim cannot be sure it saw the most, it says so. `MemoryPeak.method` says how
the peak was taken:

- `"reset"`: the framework keeps a peak counter devshim can start over (torch's CUDA and XPU
  allocators, torch's virtual GPUs, TensorFlow's GPUs, the host on Linux): it is reset when
  the block starts and read when it ends. Exact. An open block on the same device keeps what
  the counter had seen before an inner block resets it.
- `"counter"`: the framework keeps a peak it cannot reset (JAX's GPUs and TPUs): when it
  rose inside the block, that is the block's peak. Exact. A counter that did not rise says
  nothing of the block (it may be the process's old high), so it is never taken.
- `"sampled"`: otherwise a thread reads the bytes in use every `interval` seconds (less
  often when one reading takes long, so that it takes at most a tenth of a core, unless
  that would leave more than `RESOLUTION` between readings): a peak shorter than the time
  between readings can be missed, so the figure is at most the truth. `resolution` is the
  longest a tensor could have lived unseen; when it is more than `RESOLUTION` (0.1 s: a
  slow reading, readings that failed), the figure is None and `reason` says why, rather than
  a figure that may have missed a tensor held for a tenth of a second. A block keeps what
  the blocks nested in it read: its own readings may have fallen between theirs.

Estimates run the step without its memory: torch's steps under `FakeTensorMode`, each
storage counted as it is made and freed; JAX's compiled, XLA saying what the compiled step
takes. TensorFlow, MXNet, NumPy and CuPy are refused by name (`MemoryEstimateUnsupportedError`).

Example:
    >>> ds.memory()                                   # every device of the selected backend
    [MemoryInfo(device=Device('cpu:0', backend='torch'), in_use=..., ...), ...]
    >>> with ds.memory_peak("gpu:0") as peak:
    ...     loss = train_step(batch)
    >>> peak.peak, peak.added, peak.method
    (52428800, 41943040, 'reset')
    >>> ds.estimate_memory(train, 512, capacity="80GB").fits
    True
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, Callable, NamedTuple, Optional

from devshim import settings
from devshim._device import Device
from devshim.backends import get_backend
from devshim.backends.memory_base import MemoryInfo, format_bytes
from devshim.backends.registry import memory_for

__all__ = ["memory", "memory_peak", "MemoryInfo", "MemoryPeak", "DEFAULT_INTERVAL", "RESOLUTION",
           "estimate_memory", "largest_batch", "MemoryEstimate", "BatchSearch"]

#: Seconds between two readings of a sampled peak (at least; see the module docstring).
DEFAULT_INTERVAL = 0.001
#: A sampled peak is given only when no tensor held this long (seconds) can have been missed.
RESOLUTION = 0.1


def memory(device: Any = None, *, backend: Optional[str] = None) -> Any:
    """The memory of `device` (any device spec) as a `ds.MemoryInfo`; without `device`, a
    list with one for every device of the backend (the CPU, then each GPU).

    Each figure is in bytes, or None where the framework cannot say: `in_use` (held by the
    framework's tensors; on the host, the process's resident memory), `reserved` (held by its
    allocator), `peak` (the most in use since the last reset), `total` and `free`. On
    virtual GPUs `in_use` is the bytes of the live tensors on each, and `total` the size
    `DEVSHIM_VIRTUAL_MEMORY` gives them.

    Example:
        >>> x = torch.ones(1000, device="gpu:0")      # a virtual GPU
        >>> ds.memory("gpu:0").in_use
        4000
        >>> [str(info.device) for info in ds.memory()]
        ['cpu:0', 'gpu:0']
    """
    adapter, contract = memory_for(device, backend, get_backend)
    if device is None:
        return [contract.figures(adapter, native) for native in adapter.devices()]
    return contract.figures(adapter, adapter.device(device))


# ------------------------------------------------------------------ peaks

_open: dict = {}  # MemoryPeak._key -> the blocks open on it whose counter was reset
_open_lock = threading.Lock()


class MemoryPeak:
    """The most memory in use on one device inside a `with ds.memory_peak(device)` block.

    `peak`        the most bytes in use inside the block, never more than the truth (None while
                    it runs, where the framework says nothing of the device's use, or where a
                    sampled peak could have missed a tensor held for `RESOLUTION` seconds);
    `start`       the bytes in use when the block began, `end` when it ended;
    `added`       `peak - start`: the most the block itself added;
    `method`      how the peak was taken: `"reset"`, `"counter"` or `"sampled"` (the module
                    docstring of `devshim.device_memory` says what each means);
    `resolution`  seconds: the longest a tensor could have lived in the block unseen (0.0 for an
                    exact peak);
    `readings`    the sampler's readings, `missed` those that failed;
    `reason`      why `peak` is None, in words ("" otherwise);
    `device`      the `ds.Device`.

    One object may be entered again: each block's figures are its own run's.

    Example:
        >>> with ds.memory_peak("gpu:0") as peak:
        ...     y = (x @ x).sum()
        >>> peak.added >= x.nbytes
        True
    """

    def __init__(self, device: Any = None, *, backend: Optional[str] = None,
                 interval: float = DEFAULT_INTERVAL) -> None:
        adapter, contract = memory_for(device, backend, get_backend)
        native = adapter.try_gpu() if device is None else adapter.device(device)
        self._adapter, self._native, self._contract = adapter, native, contract
        self.device: Device = adapter.describe(native)
        # The host's peak is the process's, whichever framework asks; a device's is its framework's.
        self._key = ("host", 0) if self.device.kind == "cpu" else (adapter.name, self.device)
        self.interval = interval
        self._afresh()

    def _afresh(self) -> None:
        """No figure yet: how a block starts, each time the object is entered."""
        self.start: Optional[int] = None
        self.end: Optional[int] = None
        self.peak: Optional[int] = None
        self.method = ""
        self.resolution = 0.0
        self.readings = self.missed = 0
        self.reason = ""
        self._took = 0.0
        self._seen: Optional[int] = None  # the most the sampler read
        self._inner: Optional[int] = None  # the most the blocks nested in this one saw (their counter or readings)
        self._counter_start: Optional[int] = None
        self._last_began: Optional[float] = None  # when the latest reading that succeeded began
        self._sampler: Optional[threading.Thread] = None  # with its `_stop` event, where the block samples

    @property
    def added(self) -> Optional[int]:
        """`peak - start`, or None when either is unknown.

        Example:
            >>> peak.added
            41943040
        """
        if self.peak is None or self.start is None:
            return None
        return self.peak - self.start

    def _read(self) -> Optional[int]:
        """The bytes in use now (None where the framework cannot say). `resolution` becomes the
        longest time from the start of one reading to the end of the next: a tensor that lived
        less than that may have been made after one reading passed and freed before the next."""
        began = time.perf_counter()
        found = self._contract.in_use(self._adapter, self._native)
        ended = time.perf_counter()
        if self._last_began is not None:
            self.resolution = max(self.resolution, ended - self._last_began)
        self._last_began = began
        self._took = ended - began
        return found

    def _counter(self) -> Optional[int]:
        return self._contract.figures(self._adapter, self._native).peak

    def __enter__(self) -> "MemoryPeak":
        self._afresh()  # a block used again measures its own run only
        self.start = self._read()
        with _open_lock:
            blocks = _open.setdefault(self._key, [])
            _fold(blocks, "reset", self._counter)  # a reset counter's reading belongs to the blocks that reset it
            self.method = "reset" if self._contract.reset_peak(self._adapter, self._native) else "sampled"
            blocks.append(self)
        if self.method == "reset":
            return self
        self._counter_start = self._counter()
        self._seen = self.start
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, name="devshim memory_peak", daemon=True)
        self._sampler.start()
        return self

    def _sample(self) -> None:
        interval = self.interval
        while not self._stop.wait(interval):
            self.readings += 1
            try:
                found = self._read()
            except Exception:  # noqa: BLE001 - a reading that fails is a reading missed (said in `missed`)
                self.missed += 1
                continue
            self._seen = _most(self._seen, found)
            # At most a tenth of a core (ten times a reading's time between two), unless that leaves
            # readings too far apart to see a tensor held for RESOLUTION seconds and a shorter wait can.
            took = self._took
            wait = RESOLUTION / 2 - took
            interval = max(self.interval, 10 * took if wait < took else min(10 * took, wait))

    def __exit__(self, *exc) -> None:
        if self._sampler is not None:
            self._stop.set()
            self._sampler.join()
        self.end = self._read()
        counter = self._counter() if self.method == "reset" or self._counter_start is not None else None
        with _open_lock:
            blocks = _open.get(self._key, [])
            if self in blocks:
                enclosing = blocks[:blocks.index(self)]
                blocks.remove(self)
                if self.method == "reset":  # what this block's counter saw, the enclosing blocks saw too
                    _fold(blocks, "reset", lambda: counter)
                else:  # and what this block's sampler read: an outer sampler may have read between
                    _fold(enclosing, "sampled", lambda: _most(self._seen, self._inner, self.start, self.end))
            if not blocks:
                _open.pop(self._key, None)
        if self.method == "reset":
            self.peak, self.resolution = _most(counter, self._inner, self.start, self.end), 0.0
        elif counter is not None and self._counter_start is not None and counter > self._counter_start:
            self.method, self.peak, self.resolution = "counter", counter, 0.0
        else:
            self._sampled()

    def _sampled(self) -> None:
        """The sampled figure, or None with the reason when it could have missed a tensor held
        for RESOLUTION seconds."""
        most = _most(self._seen, self._inner, self.start, self.end)
        if most is None or self.resolution <= RESOLUTION:
            self.peak = most
            return
        failed = f"; {self.missed} of its {self.readings} readings failed" if self.missed else ""
        self.reason = (
            f"the readings of what is in use on {self.device} were up to {self.resolution:.2f} s apart{failed}, so a "
            f"tensor held for less than that could have been missed (the most seen was {format_bytes(most)}). "
            f"Hold the block longer than that, or measure on a device whose framework keeps a peak counter."
        )

    def __repr__(self) -> str:
        return (f"MemoryPeak(device={self.device!r}, peak={self.peak!r}, start={self.start!r}, "
                f"end={self.end!r}, method={self.method!r})")


def _most(*values) -> Optional[int]:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _fold(blocks: list, method: str, reading: Callable[[], Optional[int]]) -> None:
    """Keep what a nested block saw in the open `blocks` of `method` that contain it: a reset
    is about to lose a counter's reading, and an outer sampler may have missed a short peak
    an inner one read. `reading` is only called when such a block is open."""
    keeping = [block for block in blocks if block.method == method]
    if keeping:
        value = reading()
        for block in keeping:
            block._inner = _most(block._inner, value)


def memory_peak(device: Any = None, *, backend: Optional[str] = None,
                interval: float = DEFAULT_INTERVAL) -> MemoryPeak:
    """A `with` block that measures the most memory in use on `device` (default: the
    backend's `try_gpu()`) while it runs; `as peak` gives a `ds.MemoryPeak` whose
    `peak`, `start`, `end` and `added` are filled when the block ends.

    Where the framework keeps a peak counter devshim resets it (`peak.method == "reset"`);
    otherwise a thread samples the bytes in use every `interval` seconds (`"sampled"`,
    which can miss a peak shorter than that, and gives None with `peak.reason` where it could
    have missed a tensor held for a tenth of a second) or a counter that cannot be reset is read
    when it rose (`"counter"`). Blocks may nest, on one device or several; no figure is ever
    more than the truth.

    Example:
        >>> with ds.memory_peak("gpu:0") as peak:
        ...     loss = model(batch).sum()
        ...     loss.backward()
        >>> print(f"the step took {peak.added / 2**20:.1f} MiB at most")
    """
    return MemoryPeak(device, backend=backend, interval=interval)


# ------------------------------------------------------------------ planning without the memory


class MemoryEstimate(NamedTuple):
    """What a step would take on its device, found without the memory (`ds.estimate_memory`).

    `peak`      the most bytes the step holds at once on `device`, its arguments included;
    `kept`      the bytes still held when it returned (its arguments and what it returned);
    `device`    the device the step's tensors were on, by the framework's name ("cpu", "cuda:0"); for
                a JAX step sharded over several, the first, the figures being each one's and
                `details["devices"]` naming them all;
    `method`    how the figures were found, in words;
    `capacity`  the size compared with (bytes), or None;
    `details`   the framework's own figures (JAX: arguments, outputs, temporaries, ...), and
                `details["not_counted"]` where part of what the step takes is outside them, in words
                (JAX on the CPU: operations run in kernel libraries, whose scratch XLA does not count).
    `fits` says whether `peak` is at most `capacity` (None without one).

    Example:
        >>> found = ds.estimate_memory(train, 256, capacity="16GB")
        >>> found.peak, found.fits
        (5063344, True)
    """

    peak: int
    kept: int
    device: str
    method: str
    capacity: Optional[int] = None
    details: Optional[dict] = None

    @property
    def fits(self) -> Optional[bool]:
        """Whether the peak is at most the capacity (None without a capacity).

        Example:
            >>> ds.estimate_memory(train, 256, capacity="1MiB").fits
            False
        """
        return None if self.capacity is None else self.peak <= self.capacity

    def __str__(self) -> str:
        size = "" if self.capacity is None else (
            f" of {format_bytes(self.capacity)}: {'fits' if self.fits else 'does not fit'}")
        devices = (self.details or {}).get("devices")
        where = f"each of {', '.join(devices)}" if devices else self.device
        uncounted = (self.details or {}).get("not_counted")
        beside = f"; not counted: {uncounted}" if uncounted else ""
        return f"peak {format_bytes(self.peak)} on {where}{size} (kept after: {format_bytes(self.kept)}{beside})"


def estimate_memory(step: Callable[..., Any], *args: Any, capacity: Any = None, backend: Optional[str] = None,
                    **kwargs: Any) -> MemoryEstimate:
    """Estimate the most memory `step(*args, **kwargs)` takes on its device, without that memory:
    a training step for an 80 GB GPU, planned on a laptop. `capacity` (bytes, or `"80GB"`) is
    the device's size, for `fits`. `backend` names the framework (default: the selected backend).

    - PyTorch: `step` runs under torch's `FakeTensorMode`: build the model, its optimiser and the
      batch inside it (on the device you plan for: `"cpu"` works anywhere, `"cuda"` where torch
      has a CUDA device; a virtual GPU's step raises `ds.MemoryEstimateError`), and run a step or
      two; every storage it makes is counted while it lives, and its optimiser takes its device's
      default path (`foreach` on CUDA and virtual GPUs: to plan that on `"cpu"`, give the
      optimiser `foreach=True`). Tensors passed as `args` are counted from
      the start. Reading a value (`loss.item()`) raises `ds.MemoryEstimateError`.
    - JAX: `step` is compiled, not run; `args` may be arrays or `jax.ShapeDtypeStruct`s (no
      memory at all), and arguments that hold no array are static (a step jitted already keeps
      its own static and donated arguments). XLA's memory analysis gives
      the arguments, the outputs and the temporaries.
    - TensorFlow, MXNet, NumPy, CuPy: `ds.MemoryEstimateUnsupportedError`.

    Example:
        >>> def train(batch):                  # PyTorch: D2L's MLP, two steps of Adam
        ...     net = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
        ...     opt = torch.optim.Adam(net.parameters())
        ...     for _ in range(2):
        ...         opt.zero_grad()
        ...         loss_fn(net(torch.rand(batch, 1, 28, 28)), torch.randint(0, 10, (batch,))).backward()
        ...         opt.step()
        >>> print(ds.estimate_memory(train, 256, capacity="80GB"))
        peak 4.9 MiB on cpu of 74.5 GiB: fits (kept after: 0 B)
    """
    adapter = get_backend(backend)
    size = None if capacity is None else settings.parse_size(capacity, source="capacity")
    found = memory_for(None, adapter.name, get_backend)[1].estimate(adapter, step, args, kwargs)
    return MemoryEstimate(found["peak"], found["kept"], found["device"], found["method"], size, found["details"])


class BatchSearch(NamedTuple):
    """The largest batch that fits a device of a given size (`ds.largest_batch`).

    `batch`     the largest batch size that fits (0 when not even the smallest tried does);
    `estimate`  its `ds.MemoryEstimate` (None when none fits);
    `capacity`  the size, in bytes;
    `tried`     `(batch size, peak bytes)` of every estimate, in the order they were made.

    Example:
        >>> ds.largest_batch(train, "80GB").batch
        58982
    """

    batch: int
    estimate: Optional[MemoryEstimate]
    capacity: int
    tried: tuple


def largest_batch(step: Callable[..., Any], capacity: Any, *, inputs: Optional[Callable[[int], tuple]] = None,
                  start: int = 1, limit: int = 2**30, backend: Optional[str] = None,
                  progress: bool = True) -> BatchSearch:
    """The largest batch size whose step fits a device of `capacity` (bytes, or `"80GB"`),
    found by estimates (`ds.estimate_memory`), without the device or its memory: batch sizes
    double from `start` until one does not fit (or `limit` is reached), then bisection finds
    the largest that does. `step(*inputs(batch))` is estimated for each batch size tried
    (`inputs` defaults to `lambda batch: (batch,)`); each estimate is reported on stderr
    unless `progress=False`.

    Example:
        >>> found = ds.largest_batch(train, "80GB")         # train(batch) as for ds.estimate_memory
        ds.largest_batch: batch 1: peak 4.8 MiB of 74.5 GiB: fits (0.4 s)
        ...
        >>> found.batch, found.estimate.peak
        (58982, 79999975424)
    """
    size = settings.parse_size(capacity, source="capacity")
    make = inputs if inputs is not None else (lambda batch: (batch,))
    tried: list = []
    fitting: dict = {}

    def fits(batch: int) -> bool:
        began = time.perf_counter()
        found = estimate_memory(step, *make(batch), capacity=size, backend=backend)
        tried.append((batch, found.peak))
        if progress:
            print(f"ds.largest_batch: batch {batch}: {found} ({time.perf_counter() - began:.1f} s)",
                  file=sys.stderr, flush=True)
        if found.fits:
            fitting[batch] = found
        return bool(found.fits)

    low, high = _bracket(fits, max(1, start), limit)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return BatchSearch(low, fitting.get(low), size, tuple(tried))


def _bracket(fits: Callable[[int], bool], start: int, limit: int) -> tuple:
    """(a batch that fits or 0, one that does not or `limit + 1`): doubling from `start`."""
    if not fits(start):
        return 0, start
    low = start
    while low < limit:
        high = min(low * 2, limit)
        if not fits(high):
            return low, high
        low = high
    return low, low + 1
