"""PyTorch's memory figures (`ds.memory`, `ds.memory_peak`) and its out-of-memory error.

- CUDA (and ROCm) and XPU: the caching allocator's own counts, `torch.<platform>`'s
  `memory_allocated` (in use), `memory_reserved` (reserved), `max_memory_allocated`
  (peak, reset by `reset_peak_memory_stats`) and `mem_get_info` (free and total).
- MPS: `torch.mps.current_allocated_memory` (in use), `driver_allocated_memory`
  (reserved) and `recommended_max_memory` (total: Metal's recommended working set); no peak.
- virtual GPUs: devshim's own count of the storages on each (`_virtual/memory.py`), their
  size from `DEVSHIM_VIRTUAL_MEMORY`; an allocation past it raises `torch.OutOfMemoryError`.
- the CPU: the process's and the machine's figures (`memory_base.host_figures`).
"""

from __future__ import annotations

import torch

from devshim.backends.memory_base import DeviceMemory, MemoryInfo, with_capacity
from devshim.backends.torch._names import VIRTUAL_TYPE

__all__ = ["TorchMemory"]

_OUT_OF_MEMORY = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
_VIRTUAL_SOURCE = "devshim's count of the virtual GPU's storages"


def _virtual():
    from devshim.backends.torch._virtual import memory

    return memory


def _call(module, name: str, *args):
    """`module.name(*args)`, or None where this torch or this device has no such call."""
    function = getattr(module, name, None)
    if function is None:
        return None
    try:
        return function(*args)
    except (RuntimeError, AssertionError, AttributeError, TypeError, ValueError):
        return None


class TorchMemory(DeviceMemory):
    """torch's allocators' figures, devshim's count on virtual GPUs.

    Example:
        >>> ds.backends.memory("torch").figures(ds.get_backend("torch"), torch.device("vgpu", 0)).source
        "devshim's count of the virtual GPU's storages"
    """

    free_hint = ("and on CUDA torch.cuda.empty_cache() hands the caching allocator's unused blocks back "
                 "(set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation)")

    def accelerator_figures(self, adapter, native, device) -> MemoryInfo:
        platform = native.type
        module = getattr(torch, platform, None)
        index = native.index if native.index is not None else 0
        if platform == "mps":
            return MemoryInfo(device, in_use=_call(module, "current_allocated_memory"),
                              reserved=_call(module, "driver_allocated_memory"),
                              total=_call(module, "recommended_max_memory"), source="torch.mps")
        free, total = _call(module, "mem_get_info", index) or (None, None)
        return MemoryInfo(device, in_use=_call(module, "memory_allocated", index),
                          reserved=_call(module, "memory_reserved", index),
                          peak=_call(module, "max_memory_allocated", index), total=total, free=free,
                          source=f"torch.{platform}")

    def virtual_figures(self, adapter, native, device) -> MemoryInfo:
        memory, index = _virtual(), native.index or 0
        used = memory.in_use(index)
        memory.capacity()  # a bad DEVSHIM_VIRTUAL_MEMORY is refused here, as by the virtual GPU itself
        return with_capacity(MemoryInfo(device, in_use=used, reserved=used, peak=memory.peak(index),
                                        source=_VIRTUAL_SOURCE))

    def in_use(self, adapter, native):
        if native.type == VIRTUAL_TYPE:
            return _virtual().in_use(native.index or 0)
        return super().in_use(adapter, native)

    def reset_peak(self, adapter, native) -> bool:
        if native.type == VIRTUAL_TYPE:
            _virtual().reset_peak(native.index or 0)
            return True
        if native.type == "cpu" or native.type == "mps":
            return super().reset_peak(adapter, native)
        module = getattr(torch, native.type, None)
        reset = getattr(module, "reset_peak_memory_stats", None)
        if reset is None:
            return False
        try:
            reset(native.index if native.index is not None else 0)
        except (RuntimeError, AssertionError):
            return False
        return True

    def is_out_of_memory(self, error: BaseException) -> bool:
        if isinstance(error, _OUT_OF_MEMORY):
            return True
        # MPS says it in a RuntimeError of its own ("MPS backend out of memory"), the CPU's
        # allocator in another ("DefaultCPUAllocator: can't allocate memory").
        said = str(error).lower()
        return type(error) is RuntimeError and ("out of memory" in said or "can't allocate memory" in said)

    def nbytes(self, x):
        return x.nbytes if isinstance(x, torch.Tensor) else None

    def model_bytes(self, model):
        if not isinstance(model, torch.nn.Module):
            return None
        seen: dict = {}
        for tensor in (*model.parameters(), *model.buffers()):
            seen[id(tensor)] = tensor.nbytes
        return sum(seen.values())
