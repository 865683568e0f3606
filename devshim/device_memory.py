"""`ds.memory` and `ds.memory_peak`: what each device's memory holds, on every framework.

The figures come from each backend's `memory.py` (`devshim.backends.memory_base`): the
framework's own allocator counts where it keeps them, devshim's count on torch's virtual GPUs,
the live tensors elsewhere, and the process's and the machine's figures for the host.
docs/memory.md has the table of which figure each framework knows.

A peak is taken one of three ways, and `MemoryPeak.method` says which:

- `"reset"`: the framework keeps a peak counter devshim can start over (torch's CUDA and XPU
  allocators, torch's virtual GPUs, TensorFlow's GPUs, the host on Linux): it is reset when
  the block starts and read when it ends. An open block on the same device keeps what it had
  seen before an inner block resets the counter.
- `"counter"`: the framework keeps a peak it cannot reset (JAX's GPUs and TPUs): when it
  rose inside the block, that is the block's peak.
- `"sampled"`: otherwise a thread reads the bytes in use every `interval` seconds (less
  often when one reading takes long, so that it takes at most a tenth of a core): a peak
  shorter than that can be missed, so the figure is at least the truth, never more.

Example:
    >>> ds.memory()                                   # every device of the selected backend
    [MemoryInfo(device=Device('cpu:0', backend='torch'), in_use=..., ...), ...]
    >>> with ds.memory_peak("gpu:0") as peak:
    ...     loss = train_step(batch)
    >>> peak.peak, peak.added, peak.method
    (52428800, 41943040, 'reset')
"""

from __future__ import annotations

import threading
import time
from typing import Any, Optional

from devshim._device import Device
from devshim.backends import get_backend, memory as _contract_of
from devshim.backends.memory_base import MemoryInfo, host_figures
from devshim.backends.registry import backend_of_device

__all__ = ["memory", "memory_peak", "MemoryInfo", "MemoryPeak", "DEFAULT_INTERVAL"]

#: Seconds between two readings of a sampled peak (at least; see the module docstring).
DEFAULT_INTERVAL = 0.001


def _adapter_for(device, backend):
    """The backend a device spec belongs to: `backend=`, the one a `ds.Device` or another
    framework's device object names, else the selected backend."""
    if backend is None and device is not None and not isinstance(device, str):
        owner = backend_of_device(device)
        if owner is not None:
            return owner
    return get_backend(backend)


def _figures(adapter, native) -> MemoryInfo:
    contract = _contract_of(adapter.name)
    if contract is not None:
        return contract.figures(adapter, native)
    device = adapter.describe(native)
    if device.kind == "cpu":
        return host_figures(device)
    return MemoryInfo(device, source=f"the {adapter.name} backend has no memory.py: no figures")


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
    adapter = _adapter_for(device, backend)
    if device is None:
        return [_figures(adapter, native) for native in adapter.devices()]
    return _figures(adapter, adapter.device(device))


# ------------------------------------------------------------------ peaks

_open: dict = {}  # _key() -> the MemoryPeak blocks open on it
_open_lock = threading.Lock()


class MemoryPeak:
    """The most memory in use on one device inside a `with ds.memory_peak(device)` block.

    `peak`    the most bytes in use inside the block (None while it runs, or where the
                framework says nothing of the device's use);
    `start`   the bytes in use when the block began, `end` when it ended;
    `added`   `peak - start`: the most the block itself added;
    `method`  how the peak was taken: `"reset"`, `"counter"` or `"sampled"` (the
                module docstring of `devshim.device_memory` says what each means);
    `device`  the `ds.Device`.

    Example:
        >>> with ds.memory_peak("gpu:0") as peak:
        ...     y = (x @ x).sum()
        >>> peak.added >= x.nbytes
        True
    """

    def __init__(self, adapter, native, contract, interval: float) -> None:
        self._adapter, self._native, self._contract = adapter, native, contract
        self.device: Device = adapter.describe(native)
        # The host's peak is the process's, whichever framework asks; a device's is its framework's.
        self._key = ("host", 0) if self.device.kind == "cpu" else (adapter.name, self.device)
        self.interval = interval
        self.start: Optional[int] = None
        self.end: Optional[int] = None
        self.peak: Optional[int] = None
        self.method = ""
        self._seen: Optional[int] = None  # what the counter held before an inner block reset it
        self._counter_start: Optional[int] = None
        self._stop = threading.Event()
        self._sampler: Optional[threading.Thread] = None

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

    def _in_use(self) -> Optional[int]:
        if self._contract is None:
            return _figures(self._adapter, self._native).in_use
        return self._contract.in_use(self._adapter, self._native)

    def _counter(self) -> Optional[int]:
        if self._contract is None:
            return _figures(self._adapter, self._native).peak
        return self._contract.figures(self._adapter, self._native).peak

    def __enter__(self) -> "MemoryPeak":
        self.start = self._in_use()
        with _open_lock:
            blocks = _open.setdefault(self._key, [])
            if blocks:
                _fold(blocks, self._counter())
            reset = self._contract is not None and self._contract.reset_peak(self._adapter, self._native)
            blocks.append(self)
        if reset:
            self.method = "reset"
            return self
        self._counter_start = self._counter()
        self.method = "sampled"
        self._seen = _most(self.start, self._seen)
        self._sampler = threading.Thread(target=self._sample, name="devshim memory_peak", daemon=True)
        self._sampler.start()
        return self

    def _sample(self) -> None:
        interval = self.interval
        while not self._stop.wait(interval):
            began = time.perf_counter()
            try:
                found = self._in_use()
            except Exception:  # noqa: BLE001 - a reading that fails is a reading missed
                continue
            self._seen = _most(self._seen, found)
            interval = max(self.interval, 10 * (time.perf_counter() - began))

    def __exit__(self, *exc) -> None:
        if self._sampler is not None:
            self._stop.set()
            self._sampler.join()
        self.end = self._in_use()
        counter = self._counter()
        with _open_lock:
            blocks = _open.get(self._key, [])
            if self in blocks:
                blocks.remove(self)
            if not blocks:
                _open.pop(self._key, None)
            else:
                _fold(blocks, counter if self.method == "reset" else self._seen)
        if self.method == "reset":
            self.peak = _most(counter, self._seen, self.start, self.end)
        elif counter is not None and self._counter_start is not None and counter > self._counter_start:
            self.method, self.peak = "counter", counter
        else:
            self.peak = _most(self._seen, self.start, self.end)

    def __repr__(self) -> str:
        return (f"MemoryPeak(device={self.device!r}, peak={self.peak!r}, start={self.start!r}, "
                f"end={self.end!r}, method={self.method!r})")


def _most(*values) -> Optional[int]:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _fold(blocks: list, value) -> None:
    """Keep `value` (a peak reading) in every open block: a reset is about to lose it."""
    for block in blocks:
        block._seen = _most(block._seen, value)


def memory_peak(device: Any = None, *, backend: Optional[str] = None,
                interval: float = DEFAULT_INTERVAL) -> MemoryPeak:
    """A `with` block that measures the most memory in use on `device` (default: the
    backend's `try_gpu()`) while it runs; `as peak` gives a `ds.MemoryPeak` whose
    `peak`, `start`, `end` and `added` are filled when the block ends.

    Where the framework keeps a peak counter devshim resets it (`peak.method == "reset"`);
    otherwise a thread samples the bytes in use every `interval` seconds (`"sampled"`,
    which can miss a peak shorter than that) or a counter that cannot be reset is read when it
    rose (`"counter"`). Blocks may nest, on one device or several.

    Example:
        >>> with ds.memory_peak("gpu:0") as peak:
        ...     loss = model(batch).sum()
        ...     loss.backward()
        >>> print(f"the step took {peak.added / 2**20:.1f} MiB at most")
    """
    adapter = _adapter_for(device, backend)
    native = adapter.try_gpu() if device is None else adapter.device(device)
    return MemoryPeak(adapter, native, _contract_of(adapter.name), interval)
