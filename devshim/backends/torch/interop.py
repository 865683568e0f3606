"""`ds.convert` for PyTorch (the contract: `devshim.backends.interop_base.Interop`).

Tensors export through `torch.Tensor.__dlpack__`, detached (autograd history does not
cross frameworks); a tensor with the conjugate or negative bit set, a sparse or quantized
one, or one on a virtual GPU is copied instead. Imports use `torch.from_dlpack`, except
for a source with a negative stride (a reversed NumPy or CuPy view, `a[::-1]`): torch
cannot take one (torch 2.13 aborts the interpreter in C++ on it; 2.15 raises), so it is copied. torch
tensors are writable: a tensor sharing a JAX or TensorFlow array's memory writes into
that array, which those frameworks assume never changes (don't).

Example:
    >>> pointer(ds.get_backend("torch"), torch.ones(2)) > 0
    True
"""

from __future__ import annotations

import numpy as np
import torch

from devshim.backends.interop_base import Interop
from devshim.errors import CopyRequiredError, UnsupportedDtypeError

__all__ = ["TorchInterop"]

# NumPy stand-ins (ml_dtypes) torch reads through a same-width integer view.
_VIEWS = {"bfloat16": (np.int16, torch.bfloat16), "float8_e4m3fn": (np.uint8, torch.float8_e4m3fn),
          "float8_e5m2": (np.uint8, torch.float8_e5m2)}


class TorchInterop(Interop):
    """PyTorch's side of `ds.convert` (the contract: `devshim.backends.interop_base.Interop`).

    Example:
        >>> ds.backends.interop("torch").immutable
        False
    """

    def export(self, adapter, x):
        """`x` detached, as a DLPack producer.

        Example:
            >>> export(adapter, torch.ones(2)).requires_grad
            False
        """
        if x.layout != torch.strided or x.is_quantized:
            raise CopyRequiredError(f"a {x.layout} tensor{' (quantized)' if x.is_quantized else ''} has no DLPack form")
        if x.is_conj() or x.is_neg():
            raise CopyRequiredError("x has torch's lazy conjugate/negative bit set, which DLPack cannot carry")
        return x.detach()

    def adopt(self, adapter, obj, native, immutable: bool):
        """`torch.from_dlpack(obj)`, on `native`.

        Example:
            >>> adopt(adapter, np.ones(2), torch.device("cpu"), False)
            tensor([1., 1.], dtype=torch.float64)
        """
        strides = getattr(obj, "strides", None)  # NumPy's and CuPy's, in bytes
        if isinstance(strides, tuple) and any(stride < 0 for stride in strides):
            # torch's DLPack import computes a negative storage size for these and throws in C++
            # where nothing catches it: the interpreter aborts (torch 2.13; 2.15 raises RuntimeError).
            raise CopyRequiredError(f"torch cannot import an array with a negative stride (strides {strides})")
        try:
            return torch.from_dlpack(obj)
        except (BufferError, RuntimeError, TypeError, ValueError) as error:
            raise CopyRequiredError(f"torch.from_dlpack refused it ({error})") from None

    def from_host(self, adapter, array, native):
        """A torch tensor on `native` holding `array`'s values.

        Example:
            >>> from_host(adapter, np.ones(2), torch.device("cpu"))
            tensor([1., 1.], dtype=torch.float64)
        """
        view = _VIEWS.get(array.dtype.name)
        if view is not None:
            t = torch.from_numpy(np.ascontiguousarray(array).view(view[0])).view(view[1])
        else:
            try:
                t = torch.from_numpy(array)
            except TypeError:
                raise UnsupportedDtypeError(
                    f"PyTorch has no {array.dtype} type, so this array cannot become a torch tensor. "
                    f"Convert it to a dtype torch has first."
                ) from None
        return t if native.type == "cpu" else t.to(native)

    def pointer(self, adapter, x):
        """The address of `x`'s first element (a virtual GPU's host memory included).

        Example:
            >>> pointer(adapter, torch.ones(2)) > 0
            True
        """
        try:
            return x.data_ptr()
        except (RuntimeError, NotImplementedError):
            return None
