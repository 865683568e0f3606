"""JAX's memory figures (`ds.memory`, `ds.memory_peak`) and its out-of-memory error.

- GPUs and TPUs: `device.memory_stats()`, the allocator's own counts: `bytes_in_use`
  (in use), `pool_bytes` (reserved, where the allocator keeps a pool), `peak_bytes_in_use`
  (peak; JAX cannot reset it) and `bytes_limit` (total: the most JAX's allocator may take,
  which is 75% of the GPU by default, and free is what is left of it).
- virtual GPUs (host devices), and devices whose `memory_stats()` is None: the bytes of the
  live arrays on the device (`jax.live_arrays()`; buffers shared by several arrays count
  once), their size from `DEVSHIM_VIRTUAL_MEMORY` (reported, not enforced: XLA's CPU client
  takes no limit).
- the CPU: the process's and the machine's figures.

Out of memory is the `JaxRuntimeError` (`XlaRuntimeError` before JAX 0.4.36) whose
message starts `RESOURCE_EXHAUSTED`.
"""

from __future__ import annotations

import jax

from devshim.backends.memory_base import DeviceMemory, MemoryInfo, covered_bytes, with_capacity

__all__ = ["JaxMemory"]


def _stats(native):
    try:
        return native.memory_stats() or None
    except (RuntimeError, NotImplementedError, AttributeError):
        return None


def _buffers(array):
    """(native device, start, stop) of each of `array`'s buffers on this process's devices."""
    devices = array.sharding.device_set
    if len(devices) == 1:
        (native,) = devices
        yield native, _start(array), array.nbytes
        return
    for shard in array.addressable_shards:
        yield shard.device, _start(shard.data), shard.data.nbytes


def _start(array):
    try:
        return array.unsafe_buffer_pointer()
    except (RuntimeError, ValueError, AttributeError, NotImplementedError):
        return None  # counted on its own


class JaxMemory(DeviceMemory):
    """JAX's allocator statistics where it keeps them, the live arrays elsewhere.

    Example:
        >>> ds.backends.memory("jax").figures(ds.get_backend("jax"), jax.devices()[0]).source
        'this process (resident memory) and the machine'
    """

    free_hint = ("and JAX takes 75% of a GPU when it starts: XLA_PYTHON_CLIENT_PREALLOCATE=false (or "
                 "XLA_PYTHON_CLIENT_MEM_FRACTION) leaves the rest to others")
    live_source = "the live arrays on it (jax.live_arrays)"

    def accelerator_figures(self, adapter, native, device) -> MemoryInfo:
        stats = _stats(native)
        if stats is None:
            return MemoryInfo(device, in_use=self.live_bytes(adapter, device), source=self.live_source)
        in_use, limit = stats.get("bytes_in_use"), stats.get("bytes_limit")
        free = max(0, limit - in_use) if limit is not None and in_use is not None else None
        return MemoryInfo(device, in_use=in_use, reserved=stats.get("pool_bytes"),
                          peak=stats.get("peak_bytes_in_use"), total=limit, free=free,
                          source="jax Device.memory_stats()")

    def live_bytes(self, adapter, device):
        ranges, lone = [], 0
        for array in jax.live_arrays():
            try:
                buffers = list(_buffers(array))
            except (RuntimeError, ValueError, AttributeError):  # deleted meanwhile
                continue
            for native, start, size in buffers:
                if adapter.describe(native) != device:
                    continue
                if start is None:
                    lone += size
                else:
                    ranges.append((start, start + size))
        return covered_bytes(ranges) + lone

    def virtual_figures(self, adapter, native, device) -> MemoryInfo:
        return with_capacity(MemoryInfo(device, in_use=self.live_bytes(adapter, device), source=self.live_source))

    def in_use(self, adapter, native):
        stats = _stats(native) if native.platform != "cpu" else None
        if stats is not None:
            return stats.get("bytes_in_use")
        return super().in_use(adapter, native)

    def is_out_of_memory(self, error: BaseException) -> bool:
        module = type(error).__module__ or ""
        return (isinstance(error, RuntimeError) and module.split(".")[0] in ("jax", "jaxlib")
                and "RESOURCE_EXHAUSTED" in str(error))

    def model_bytes(self, model):
        return sum(leaf.nbytes for leaf in jax.tree_util.tree_leaves(model) if isinstance(leaf, jax.Array))
