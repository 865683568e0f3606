"""`ds.convert` for CuPy (the contract: `devshim.backends.interop_base.Interop`).

CuPy arrays live on GPUs only: converting a host tensor to CuPy needs `device=` (an
explicit copy to that GPU); without it the conversion is refused. Arrays export through
`cupy.ndarray.__dlpack__` and import through `cupy.from_dlpack`. Untested on this
project's machines (no GPU): written to CuPy's documented DLPack API.

Example:
    >>> pointer(ds.get_backend("cupy"), cupy.ones(2)) > 0
    True
"""

from __future__ import annotations

import cupy

from devshim.backends.interop_base import Interop
from devshim.errors import CopyRequiredError, UnsupportedValueError

__all__ = ["CupyInterop"]


class CupyInterop(Interop):
    """CuPy's side of `ds.convert` (the contract: `devshim.backends.interop_base.Interop`).

    Example:
        >>> ds.backends.interop("cupy").immutable
        False
    """

    def export(self, adapter, x):
        """The array itself.

        Example:
            >>> export(adapter, cupy.ones(2)).shape
            (2,)
        """
        return x

    def adopt(self, adapter, obj, native, immutable: bool):
        """`cupy.from_dlpack(obj)`, on `native`.

        Example:
            >>> adopt(adapter, torch.ones(2, device="cuda"), cupy.cuda.Device(0), False)
            array([1., 1.], dtype=float32)
        """
        if type(native) is str:  # the host: no CuPy array lives there
            self.host_device(adapter)
        try:
            with native:
                return cupy.from_dlpack(obj)
        except (BufferError, RuntimeError, TypeError, ValueError) as error:
            raise CopyRequiredError(f"cupy.from_dlpack refused it ({error})") from None

    def from_host(self, adapter, array, native):
        """`cupy.asarray(array)` on `native`.

        Example:
            >>> from_host(adapter, np.ones(2), cupy.cuda.Device(0))
            array([1., 1.])
        """
        if type(native) is str:
            self.host_device(adapter)
        with native:
            return cupy.asarray(array)

    def pointer(self, adapter, x):
        """`x.data.ptr`.

        Example:
            >>> pointer(adapter, cupy.ones(2)) > 0
            True
        """
        return x.data.ptr

    def host_device(self, adapter):
        """CuPy has no host arrays: refused.

        Example:
            >>> host_device(adapter)
            Traceback (most recent call last):
            devshim.errors.UnsupportedValueError: CuPy arrays live on GPUs ...
        """
        raise UnsupportedValueError(
            "CuPy arrays live on GPUs, so a tensor on the host has no CuPy form there. Name the GPU: "
            "ds.convert(x, 'cupy', device='gpu:0')."
        )
