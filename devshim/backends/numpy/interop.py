"""`ds.convert`'s side of NumPy (the contract: `devshim.backends.interop_base.Interop`,
which lists what every backend's optional `interop.py` provides).

NumPy arrays export through NumPy's own `__dlpack__`; NumPy before 2.0 marks every array it
imports through DLPack read-only. A read-only array is never
shared: DLPack's capsule cannot say "read-only", so the importer would get writable
memory (`ds.convert` copies it, or refuses under `copy=False`).

Example:
    >>> ds.backends.interop("numpy").export(ds.get_backend("numpy"), np.ones(3)).__dlpack_device__()
    (1, 0)
"""

from __future__ import annotations

import numpy as np

from devshim.backends.interop_base import Interop
from devshim.errors import CopyRequiredError

__all__ = ["NumpyInterop"]


class NumpyInterop(Interop):
    """NumPy's side of `ds.convert` (the contract: `devshim.backends.interop_base.Interop`).

    Example:
        >>> ds.backends.interop("numpy").immutable
        False
    """

    def export(self, adapter, x):
        """`x` as a DLPack producer (a 0-d array for NumPy scalars).

        Example:
            >>> export(adapter, np.ones(2)) is not None
            True
        """
        if isinstance(x, np.generic):
            raise CopyRequiredError("x is a NumPy scalar, which owns no array memory to share")
        if not x.flags.writeable:
            raise CopyRequiredError("x is a read-only NumPy array, and DLPack cannot pass it on read-only")
        if x.dtype.kind in "OUSV" or x.dtype.names is not None:
            raise CopyRequiredError(f"DLPack has no {x.dtype} type")
        return x

    def adopt(self, adapter, obj, native, immutable: bool):
        """A NumPy array sharing `obj`'s host memory (read-only when the source is immutable).

        Example:
            >>> adopt(adapter, torch.ones(2), "cpu", False)
            array([1., 1.], dtype=float32)
        """
        try:
            y = np.from_dlpack(obj)
        except (BufferError, RuntimeError, SystemError, TypeError, ValueError) as error:  # 1.23: SystemError
            raise CopyRequiredError(f"NumPy's from_dlpack refused it ({error})") from None
        if immutable and y.flags.writeable:
            y.flags.writeable = False
        return y

    def from_host(self, adapter, array, native):
        """`array` itself: it is already a fresh NumPy copy.

        Example:
            >>> from_host(adapter, np.ones(2), "cpu")
            array([1., 1.])
        """
        return array

    def pointer(self, adapter, x):
        """The address of `x`'s first element.

        Example:
            >>> pointer(adapter, np.ones(2)) > 0
            True
        """
        if isinstance(x, np.ndarray):
            return x.__array_interface__["data"][0]
        return None
