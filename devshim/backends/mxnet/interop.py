"""`ds.convert` for MXNet 1.9 (the contract: `devshim.backends.interop_base.Interop`).

Arrays export through `to_dlpack_for_write` (MXNet waits for pending writes first)
and import through `mx.nd.from_dlpack`; `ds.convert(x, "mxnet")` gives `mx.np`
arrays (an `mx.nd` array is one `.as_nd_ndarray()` away, sharing memory). MXNet has
no bfloat16 and no complex dtypes: those are refused with `UnsupportedDtypeError`.

Example:
    >>> host_device(ds.get_backend("mxnet"))
    cpu(0)
"""

from __future__ import annotations

import mxnet as mx

from devshim.backends.interop_base import CapsuleProducer, Interop
from devshim.errors import CopyRequiredError, UnsupportedDtypeError

__all__ = ["MXNetInterop"]

_KDLCPU, _KDLCUDA = 1, 2



_DTYPES = {"float16", "float32", "float64", "uint8", "int8", "int32", "int64", "bool"}


class MXNetInterop(Interop):
    """MXNet's side of `ds.convert` (the contract: `devshim.backends.interop_base.Interop`).

    Example:
        >>> ds.backends.interop("mxnet").immutable
        False
    """

    def export(self, adapter, x):
        """A DLPack producer for `x`'s buffer.

        Example:
            >>> export(adapter, mx.np.ones(2)).__dlpack_device__()
            (1, 0)
        """
        if getattr(x, "stype", "default") != "default":
            raise CopyRequiredError(f"a {x.stype} array has no DLPack form")
        ctx = x.ctx
        device = (_KDLCUDA, ctx.device_id) if ctx.device_type == "gpu" else (_KDLCPU, 0)
        try:
            return CapsuleProducer(x.to_dlpack_for_write(), device)
        except mx.base.MXNetError as error:
            raise CopyRequiredError(f"MXNet cannot export it ({str(error).splitlines()[0]})") from None

    def adopt(self, adapter, obj, native, immutable: bool):
        """`mx.nd.from_dlpack` of `obj`'s capsule, as an `mx.np` array.

        Example:
            >>> adopt(adapter, np.ones(2), mx.cpu(), False)
            array([1., 1.], dtype=float64)
        """
        try:
            return mx.nd.from_dlpack(obj.__dlpack__()).as_np_ndarray()
        except (BufferError, RuntimeError, TypeError, ValueError, mx.base.MXNetError) as error:
            raise CopyRequiredError(f"MXNet's from_dlpack refused it ({str(error).splitlines()[0]})") from None

    def from_host(self, adapter, array, native):
        """`mx.np.array(array, ctx=native)`: new storage on `native`.

        Example:
            >>> from_host(adapter, np.ones(2), mx.cpu())
            array([1., 1.], dtype=float64)
        """
        if array.dtype.kind == "c" or array.dtype.name not in _DTYPES:
            raise UnsupportedDtypeError(
                f"MXNet has no {array.dtype} type, so this array cannot become an MXNet array. Convert "
                f"it to one of {', '.join(sorted(_DTYPES))} first."
            )
        return mx.np.array(array, dtype=array.dtype, ctx=native)

    def pointer(self, adapter, x):
        """The address of `x`'s first element (MXNet's `MXNDArrayGetData`).

        Example:
            >>> pointer(adapter, mx.np.ones(2)) > 0
            True
        """
        x.wait_to_read()  # (see data_address)
        return adapter.data_address(x)
