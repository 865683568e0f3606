"""The contract a backend's `memory.py` implements: `DeviceMemory`; and the host's figures.

`ds.memory` and `ds.memory_peak` (`devshim/device_memory.py`) ask each framework about
its devices' memory through one subclass of `DeviceMemory` in the backend's optional
`memory.py` (the registry finds it: `registry.memory`). `memory.py` is loaded only once
its framework is in use, so it may import the framework at module level.

Every answer is a `MemoryInfo`: one record per device, each figure in bytes, or None where
the framework cannot say. The host (the CPU device of every backend) answers with the
process's and the machine's figures, read here once for all backends: the process's resident
memory, its peak, and the machine's total and available memory (the container's limit where
one is set).

Example:
    >>> memory = ds.backends.memory("torch")
    >>> memory.figures(ds.get_backend("torch"), torch.device("cpu")).total
    25769803776
"""

from __future__ import annotations

import gc
import os
import re
import sys
from abc import ABC, abstractmethod
from typing import NamedTuple, Optional

from devshim import settings
from devshim._device import Device
from devshim.errors import MemoryEstimateUnsupportedError

__all__ = ["MemoryInfo", "DeviceMemory", "HostOnlyMemory", "host_figures", "reset_process_peak", "format_bytes",
           "live_objects", "covered_bytes", "buffer_bytes", "with_capacity"]


class MemoryInfo(NamedTuple):
    """One device's memory, in bytes; each figure None where the framework cannot say
    (docs/memory.md has the table of which figure each framework knows).

    `device`    the `ds.Device` the figures are for.
    `in_use`    bytes held by the framework's tensors on it; on the host, the process's
                  resident memory (all of it, not only tensors).
    `reserved`  bytes the framework's allocator holds (in use plus its cache).
    `peak`      the most bytes in use since the framework's counter was last reset
                  (`ds.memory_peak` resets it where it can).
    `total`     the device's size: a GPU's memory, the machine's (or the container's) for the
                  host, `DEVSHIM_VIRTUAL_MEMORY` for a virtual GPU.
    `free`      bytes still free on the device.
    `source`    where the figures come from, in words.

    Example:
        >>> ds.memory("gpu:0")            # DEVSHIM_VIRTUAL_DEVICES=1 DEVSHIM_VIRTUAL_MEMORY=64MiB, torch
        MemoryInfo(device=Device('gpu:0', backend='torch', virtual=True), in_use=4000, reserved=4000, peak=4000, total=67108864, free=67104864, source="devshim's count of the virtual GPU's storages")
    """

    device: Device
    in_use: Optional[int] = None
    reserved: Optional[int] = None
    peak: Optional[int] = None
    total: Optional[int] = None
    free: Optional[int] = None
    source: str = ""

    def as_dict(self) -> dict:
        """The record as plain data (the device as its spec string), for JSON.

        Example:
            >>> ds.memory("cpu").as_dict()["device"]
            'cpu:0'
        """
        found = self._asdict()
        found["device"] = str(self.device)
        return found

    def __str__(self) -> str:
        figures = ", ".join(f"{name} {format_bytes(value)}" for name, value in
                            (("in use", self.in_use), ("reserved", self.reserved), ("peak", self.peak),
                             ("total", self.total), ("free", self.free)) if value is not None)
        return f"{self.device}: {figures or 'no figures'} ({self.source})"


def format_bytes(count) -> str:
    """A byte count for people: `"64.0 MiB"`; `"unknown"` for None.

    Example:
        >>> format_bytes(3 * 2**20)
        '3.0 MiB'
    """
    if count is None:
        return "unknown"
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"  # pragma: no cover - the loop returns


class DeviceMemory(ABC):
    """One framework's memory figures (the class a backend's `memory.py` defines).

    `adapter` arguments are the backend's `Backend`; devices are its native devices.
    `figures` answers for any device: the host's from the process and the machine, a
    virtual GPU's from `virtual_figures`, an accelerator's from `accelerator_figures`.

    Example:
        >>> ds.backends.memory("numpy").figures(ds.get_backend("numpy"), "cpu").source
        'this process (resident memory) and the machine'
    """

    #: What frees memory on this framework's devices, for the out-of-memory error's advice.
    free_hint = ""

    def figures(self, adapter, native) -> MemoryInfo:
        """The `MemoryInfo` of `native`.

        Example:
            >>> memory.figures(adapter, adapter.try_gpu()).in_use
            4000
        """
        device = adapter.describe(native)
        if device.kind == "cpu":
            return host_figures(device)
        if device.virtual:
            return self.virtual_figures(adapter, native, device)
        return self.accelerator_figures(adapter, native, device)

    @abstractmethod
    def accelerator_figures(self, adapter, native, device: Device) -> MemoryInfo:
        """The figures of a real accelerator, from the framework's own calls."""

    def virtual_figures(self, adapter, native, device: Device) -> MemoryInfo:
        """A virtual GPU's figures: the bytes of the live tensors on it (`live_bytes`), and
        `DEVSHIM_VIRTUAL_MEMORY` as its size (its free bytes never below 0). The framework
        does not refuse an allocation past the size: it is reported only (torch's virtual GPUs,
        where devshim sees every allocation, override this and refuse)."""
        in_use = self.live_bytes(adapter, device)
        return with_capacity(MemoryInfo(device, in_use=in_use, source=self.live_source))

    #: Where `live_bytes` counts from, in words (`MemoryInfo.source`).
    live_source = "the live tensors devshim finds"

    def live_bytes(self, adapter, device: Device) -> Optional[int]:
        """The bytes of the framework's live tensors on `device`, or None when it cannot tell."""
        return None

    def in_use(self, adapter, native) -> Optional[int]:
        """`figures(...).in_use`, as `ds.memory_peak` samples it (backends override it with a
        cheaper read where they have one).

        Example:
            >>> memory.in_use(adapter, adapter.cpu())
            412876800
        """
        return self.figures(adapter, native).in_use

    def reset_peak(self, adapter, native) -> bool:
        """Start `native`'s peak counter over at the bytes in use now; whether it could (the
        host: on Linux; `ds.memory_peak` samples where it could not).

        Example:
            >>> memory.reset_peak(adapter, adapter.cpu())
            True
        """
        if adapter.describe(native).kind == "cpu":
            return reset_process_peak()
        return False

    @abstractmethod
    def is_out_of_memory(self, error: BaseException) -> bool:
        """Whether `error` is the framework's way of saying a device ran out of memory.

        Example:
            >>> memory.is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory"))
            True
        """

    #: The framework's own out-of-memory error class that `DeviceOutOfMemoryError` may also be
    #: (`DeviceOutOfMemoryError.for_framework`), or None.
    error_class: Optional[type] = None

    def names_device(self, error: BaseException, native) -> bool:
        """Whether out-of-memory error `error` says it was device `native` that ran out (its
        message names it as `str(native)` does); how `ds.place_model` with a device map tells
        which of its devices ran out.

        Example:
            >>> memory.names_device(torch.OutOfMemoryError("vgpu:1 out of memory."), torch.device("vgpu", 1))
            True
        """
        return re.search(rf"(?<![\w:]){re.escape(str(native))}(?![\w:])", str(error)) is not None

    def nbytes(self, x) -> Optional[int]:
        """The bytes of tensor `x`'s elements, or None when the framework does not say.

        Example:
            >>> memory.nbytes(torch.ones(4))
            16
        """
        found = getattr(x, "nbytes", None)
        return found if isinstance(found, int) and not isinstance(found, bool) else None

    def model_bytes(self, model) -> Optional[int]:
        """The bytes of `model`'s parameters and buffers, or None when unknown (the
        out-of-memory error of `ds.place_model` and `ds.replicate` says it)."""
        return None

    def estimate(self, adapter, step, args: tuple, kwargs: dict) -> dict:
        """What `step(*args, **kwargs)` would take on its device, found without the memory
        (`ds.estimate_memory`): a dict of `peak` and `kept` (bytes), `device` (its name),
        `method` (how, in words) and `details` (the framework's own figures).
        `MemoryEstimateUnsupportedError` on a framework that cannot (the default).

        Example:
            >>> ds.backends.memory("jax").estimate(adapter, step, (shapes,), {})["peak"]
            1806336
        """
        raise MemoryEstimateUnsupportedError(
            f"devshim cannot estimate a {adapter.spec.title} step without running it on its memory: "
            f"{adapter.spec.title} has no way to run or compile a step without allocating what it holds. "
            f"ds.estimate_memory and ds.largest_batch answer for PyTorch (FakeTensorMode) and JAX (XLA's memory "
            f"analysis). Measure instead: ds.memory_peak around the step on a GPU of the size you plan for."
        )


class HostOnlyMemory(DeviceMemory):
    """The figures of a backend without `memory.py`: the host's, and none of its accelerators.

    Example:
        >>> HostOnlyMemory().figures(adapter, adapter.try_gpu()).source
        'the toy backend has no memory.py: no figures'
    """

    def accelerator_figures(self, adapter, native, device: Device) -> MemoryInfo:
        return MemoryInfo(device, source=f"the {adapter.name} backend has no memory.py: no figures")

    def virtual_figures(self, adapter, native, device: Device) -> MemoryInfo:
        return self.accelerator_figures(adapter, native, device)

    def is_out_of_memory(self, error: BaseException) -> bool:
        return False


def with_capacity(info: MemoryInfo) -> MemoryInfo:
    """`info` with `DEVSHIM_VIRTUAL_MEMORY` as the total, and the free bytes left of it.

    Example:
        >>> with_capacity(MemoryInfo(device, in_use=100)).free     # DEVSHIM_VIRTUAL_MEMORY=1KiB
        924
    """
    size = settings.virtual_memory()
    if size is None:
        return info
    free = None if info.in_use is None else max(0, size - info.in_use)
    return info._replace(total=size, free=free)

# ------------------------------------------------------------------ the host

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_HOST_SOURCE = "this process (resident memory) and the machine"


def host_figures(device: Device) -> MemoryInfo:
    """The host's record: the process's resident memory as `in_use`, its peak (since the
    last `reset_process_peak`), and the machine's total and available memory (the
    container's limit and what is left of it, where a cgroup sets one).

    Example:
        >>> host_figures(ds.neutral_device(np.ones(2))).total
        25769803776
    """
    total, free = _machine_memory()
    return MemoryInfo(device, in_use=_process_resident(), peak=_process_peak(), total=total, free=free,
                      source=_HOST_SOURCE)


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read()
    except (OSError, ValueError):
        return None


def _psutil():
    try:
        import psutil  # optional: used where /proc is not there (macOS, Windows)
    except ImportError:
        return None
    return psutil


def _process_resident() -> Optional[int]:
    statm = _read("/proc/self/statm")
    if statm:
        return int(statm.split()[1]) * _PAGE
    psutil = _psutil()
    return psutil.Process().memory_info().rss if psutil is not None else None


def _process_peak() -> Optional[int]:
    for line in (_read("/proc/self/status") or "").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    try:
        import resource
    except ImportError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # macOS says bytes, Linux KiB


def reset_process_peak() -> bool:
    """Start the process's peak resident memory over at its current size (Linux: writing 5 to
    `/proc/self/clear_refs`); whether it could.

    Example:
        >>> reset_process_peak()     # on Linux
        True
    """
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
            handle.write("5")
    except OSError:
        return False
    return True


def _cgroup_limit() -> tuple:
    """(limit, usage) of this process's cgroup (v2, then v1), or (None, None) without a limit."""
    for limit_path, usage_path in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        raw = (_read(limit_path) or "").strip()
        if raw.isdigit():
            usage = (_read(usage_path) or "").strip()
            return int(raw), int(usage) if usage.isdigit() else None
    return None, None


def _machine_memory() -> tuple:
    """(total, available) bytes of the machine, the container's limit where it is lower."""
    total = free = None
    meminfo = _read("/proc/meminfo")
    if meminfo:
        fields = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in meminfo.splitlines()
                  if line.count(":") == 1 and len(line.split()) >= 2 and line.split()[1].isdigit()}
        total, free = fields.get("MemTotal"), fields.get("MemAvailable", fields.get("MemFree"))
    else:
        psutil = _psutil()
        if psutil is not None:
            found = psutil.virtual_memory()
            total, free = found.total, found.available
        elif hasattr(os, "sysconf"):
            try:
                total = os.sysconf("SC_PHYS_PAGES") * _PAGE
                free = os.sysconf("SC_AVPHYS_PAGES") * _PAGE
            except (ValueError, OSError):
                pass
    limit, usage = _cgroup_limit()
    if limit is not None and (total is None or limit < total):
        total = limit
        if usage is not None:
            free = max(0, limit - usage) if free is None else min(free, max(0, limit - usage))
    return total, free


# ------------------------------------------------------------------ counting live tensors


def live_objects(kinds: tuple) -> list:
    """Every object the garbage collector tracks that is an instance of `kinds`: how devshim
    finds the live tensors of frameworks that keep no count of their own (TensorFlow's and
    MXNet's on devices without an allocator of their own). A scan of the whole heap: tens of
    milliseconds in a large process.

    Example:
        >>> len(live_objects((mx.nd.NDArray,)))
        3
    """
    found, verdicts = [], {}  # type -> whether its instances are wanted: one issubclass per type
    for obj in gc.get_objects():
        kind = type(obj)
        wanted = verdicts.get(kind)
        if wanted is None:
            wanted = verdicts[kind] = issubclass(kind, kinds)
        if wanted:
            found.append(obj)
    return found


def covered_bytes(ranges) -> int:
    """The bytes covered by `(start, stop)` address ranges, each byte once (views and
    slices of one buffer overlap it).

    Example:
        >>> covered_bytes([(0, 100), (50, 150), (200, 210)])
        160
    """
    total, reach = 0, float("-inf")  # reach: the end of the bytes counted so far
    for start, stop in sorted(ranges):
        start = max(start, reach)
        if stop > start:
            total += stop - start
            reach = stop
    return total


def buffer_bytes(buffers) -> int:
    """The bytes of `(start, size)` buffers, each byte once where buffers overlap (`covered_bytes`);
    a buffer whose address is unknown (`start` None) counts on its own.

    Example:
        >>> buffer_bytes([(0, 100), (50, 100), (None, 10)])
        160
    """
    found = list(buffers)
    lone = sum(size for start, size in found if start is None)
    return lone + covered_bytes((start, start + size) for start, size in found if start is not None)
