"""NumPy's memory figures: the host's (NumPy has no other device), and its out-of-memory error.

The CPU's record is the process's resident memory and peak and the machine's total and
available memory (`memory_base.host_figures`). NumPy runs out of memory with a
`MemoryError` (`numpy.core._exceptions._ArrayMemoryError`, a subclass).
"""

from __future__ import annotations

from devshim.backends.memory_base import DeviceMemory, MemoryInfo

__all__ = ["NumpyMemory"]


class NumpyMemory(DeviceMemory):
    """The host's figures, for NumPy arrays.

    Example:
        >>> ds.backends.memory("numpy").figures(ds.get_backend("numpy"), "cpu").source
        'this process (resident memory) and the machine'
    """

    def accelerator_figures(self, adapter, native, device) -> MemoryInfo:
        return MemoryInfo(device, source="NumPy has no accelerator")

    def is_out_of_memory(self, error: BaseException) -> bool:
        return isinstance(error, MemoryError)
