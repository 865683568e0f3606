"""NumPy's memory figures: the host's (NumPy has no other device), and its out-of-memory error.

The CPU's record is the process's resident memory and peak and the machine's total and
available memory (`memory_base.host_figures`). NumPy runs out of memory with a
`MemoryError` (`numpy.core._exceptions._ArrayMemoryError`, a subclass): those two are NumPy's;
another framework's subclass of `MemoryError` (CuPy's `OutOfMemoryError`) is left to it.
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
        # Python's own MemoryError and NumPy's (numpy's _ArrayMemoryError), not every subclass:
        # another framework's out-of-memory error may be a MemoryError too (CuPy's is), and is
        # that framework's to claim, whichever backend is asked first.
        kind = type(error)
        return kind is MemoryError or (issubclass(kind, MemoryError) and kind.__module__.split(".")[0] == "numpy")
