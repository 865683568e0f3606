"""CuPy's memory figures (`ds.memory`, `ds.memory_peak`) and its out-of-memory error.

- GPUs: the default memory pool's `used_bytes` (in use: the arrays' blocks) and
  `total_bytes` (reserved: what the pool holds, cached blocks too), per device, and
  `cupy.cuda.runtime.memGetInfo` (free and total). CuPy keeps no peak: `ds.memory_peak`
  samples the pool.
- the CPU (NumPy's arrays, CuPy's host partner): the process's and the machine's figures.

Out of memory is `cupy.cuda.memory.OutOfMemoryError`.
"""

from __future__ import annotations

import cupy

from devshim.backends.memory_base import DeviceMemory, MemoryInfo

__all__ = ["CupyMemory"]


class CupyMemory(DeviceMemory):
    """CuPy's memory pool and the CUDA runtime's figures.

    Example:
        >>> ds.backends.memory("cupy").figures(ds.get_backend("cupy"), cupy.cuda.Device(0)).source
        'cupy.get_default_memory_pool() and cupy.cuda.runtime.memGetInfo()'
    """

    free_hint = "and cupy.get_default_memory_pool().free_all_blocks() hands the pool's cached blocks back"

    def accelerator_figures(self, adapter, native, device) -> MemoryInfo:
        pool = cupy.get_default_memory_pool()
        with native:  # the pool and the runtime answer for the current device
            used, held = pool.used_bytes(), pool.total_bytes()
            try:
                free, total = cupy.cuda.runtime.memGetInfo()
            except cupy.cuda.runtime.CUDARuntimeError:
                free = total = None
        return MemoryInfo(device, in_use=used, reserved=held, total=total, free=free,
                          source="cupy.get_default_memory_pool() and cupy.cuda.runtime.memGetInfo()")

    def in_use(self, adapter, native):
        if type(native) is str:  # the host
            return super().in_use(adapter, native)
        with native:
            return cupy.get_default_memory_pool().used_bytes()

    def is_out_of_memory(self, error: BaseException) -> bool:
        return isinstance(error, cupy.cuda.memory.OutOfMemoryError)
