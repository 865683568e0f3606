"""MXNet's memory figures (`ds.memory`, `ds.memory_peak`) and its out-of-memory error.

MXNet 1.9 counts no allocations. What devshim reports:

- GPUs: `mx.context.gpu_memory_info`, the device's free and total bytes; in use, the bytes of
  the live arrays on it, as for virtual GPUs.
- virtual GPUs (`cpu(1)`, `cpu(2)`, ...) and GPUs: the bytes of the live NDArrays on the
  device (`mx.nd` and `mx.np` arrays, Gluon parameters and their gradients), found by a scan
  of the objects Python holds; arrays over one buffer (slices, views) count it once where
  MXNet says their addresses. Sparse arrays are not counted. Virtual GPUs' size comes from
  `DEVSHIM_VIRTUAL_MEMORY` (reported, not enforced).
- the CPU: the process's and the machine's figures.

Out of memory is an `MXNetError` whose message says "out of memory".
"""

from __future__ import annotations

import mxnet as mx
import numpy as np

from devshim.backends.memory_base import DeviceMemory, MemoryInfo, buffer_bytes, live_objects

__all__ = ["MxnetMemory"]


def _size(x):
    if getattr(x, "stype", "default") != "default":
        return None
    try:
        return int(np.prod(x.shape, dtype=np.int64)) * np.dtype(x.dtype).itemsize
    except (TypeError, ValueError, AttributeError, mx.base.MXNetError):
        return None


def _address(adapter, x):
    """The address of `x`'s first element, or None where MXNet cannot say."""
    try:
        x.wait_to_read()  # the engine may not have allocated it yet (see data_address)
    except (AttributeError, mx.base.MXNetError):
        return None
    return adapter.data_address(x)


class MxnetMemory(DeviceMemory):
    """The live arrays MXNet holds, and `gpu_memory_info` on GPUs.

    Example:
        >>> ds.backends.memory("mxnet").figures(ds.get_backend("mxnet"), mx.cpu(1)).source
        'the live arrays on it (a scan of Python's objects)'
    """

    live_source = "the live arrays on it (a scan of Python's objects)"

    def accelerator_figures(self, adapter, native, device) -> MemoryInfo:
        try:
            free, total = mx.context.gpu_memory_info(native.device_id)
        except mx.base.MXNetError:
            free = total = None
        return MemoryInfo(device, in_use=self.live_bytes(adapter, device), total=total, free=free,
                          source="mx.context.gpu_memory_info, and " + self.live_source)

    def live_bytes(self, adapter, device):
        found = []
        for array in live_objects((mx.nd.NDArray,)):
            size = _size(array) if getattr(array, "handle", None) is not None else None
            if size and adapter.tensor_device(array) == device:
                found.append((_address(adapter, array), size))
        return buffer_bytes(found)

    def is_out_of_memory(self, error: BaseException) -> bool:
        return isinstance(error, mx.base.MXNetError) and "out of memory" in str(error).lower()

    def nbytes(self, x):
        return _size(x) if isinstance(x, mx.nd.NDArray) else None

    def model_bytes(self, model):
        try:
            arrays = [p.data() for p in model.collect_params().values()]
        except (AttributeError, RuntimeError, mx.base.MXNetError):
            return None
        sizes = [_size(a) for a in arrays]
        return None if any(s is None for s in sizes) else sum(sizes)
