"""The tensor on a virtual GPU: ``VirtualTensor``, a ``torch.Tensor`` wrapper subclass
whose device is ``vgpu:i`` and whose values live in an ordinary CPU tensor (``_host``).

Its ``__torch_dispatch__`` hands every ATen operation to ``dispatch.py``; its
``__torch_function__`` and a few methods torch implements in C for plain tensors only
answer host reads through ``reads.py``.
"""

from __future__ import annotations

import torch

from devshim.backends.torch._virtual import dispatch
from devshim.backends.torch._virtual.reads import SPECIAL as _SPECIAL
from devshim.errors import UnsupportedValueError
from devshim.guard.hooks import original_of

__all__ = ["VirtualTensor"]

_DisableTorchFunctionSubclass = torch._C.DisableTorchFunctionSubclass
_single_threaded_autograd = dispatch.single_threaded_autograd
_run = dispatch.run


def _unguarded(func):
    """The framework's own method behind a transfer-guard wrapper: the guard replaces some of
    torch.Tensor's reading methods while it checks, and torch then hands ``__torch_function__``
    the guard's wrapper (``devshim.guard.hooks.mark_wrapper``)."""
    return original_of(func)


class VirtualTensor(torch.Tensor):
    """A tensor on a devshim virtual GPU: ``device`` is ``vgpu:i``, the values are the
    CPU tensor ``_host``. Made by torch calls that name a virtual GPU, never directly.

    Example:
        >>> x = torch.ones(2, device="vgpu:1")
        >>> x.device, x._host.device
        (device(type='vgpu', index=1), device(type='cpu'))
    """

    @staticmethod
    def __new__(cls, host, device):
        if host.layout != torch.strided:
            raise UnsupportedValueError(
                f"devshim's virtual GPUs hold dense (strided) tensors only, not {host.layout}. "
                f"Keep this tensor on the CPU, or convert it first, e.g. x.to_dense()."
            )
        return torch.Tensor._make_wrapper_subclass(
            cls, host.size(), strides=host.stride(), storage_offset=host.storage_offset(),
            dtype=host.dtype, layout=host.layout, device=device, requires_grad=False,
            dispatch_sizes_strides_policy="sizes",
        )

    def __init__(self, host, device) -> None:
        self._host = host

    # What lets torch.compile and Module._apply (swap_tensors) treat it as a wrapper.
    def __tensor_flatten__(self):
        return ["_host"], self.device

    @staticmethod
    def __tensor_unflatten__(inner, device, outer_size, outer_stride):
        return VirtualTensor(inner["_host"], device)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        _single_threaded_autograd()
        special = _SPECIAL.get(_unguarded(func))
        if special is not None:
            return special(*args, **(kwargs or {}))
        with _DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return _run(cls, func, args, kwargs or {})

    # Methods torch implements in C for plain tensors only. Defined here as well, so
    # they work inside torch code that runs with __torch_function__ switched off; each
    # still shows itself to an active TorchFunctionMode under torch's own name.
    def tolist(self):
        if _has_torch_function(self):
            return _handle(torch.Tensor.tolist, (self,), self)
        return _tolist(self)

    def numpy(self, *, force: bool = False):
        if _has_torch_function(self):
            return _handle(torch.Tensor.numpy, (self,), self, force=force)
        return _numpy(self, force=force)

    def __array__(self, dtype=None, copy=None):
        if _has_torch_function(self):
            return _handle(torch.Tensor.__array__, (self,), self, dtype)
        return _array(self, dtype)

    def __format__(self, spec):
        if _has_torch_function(self):
            return _handle(torch.Tensor.__format__, (self,), self, spec)
        return _format(self, spec)

    def __repr__(self, *, tensor_contents=None):
        if _has_torch_function(self):
            return _handle(torch.Tensor.__repr__, (self,), self)
        return _repr(self)

    def untyped_storage(self):
        if _has_torch_function(self):
            return _handle(torch.Tensor.untyped_storage, (self,), self)
        return _storage(self)

    def data_ptr(self):
        if _has_torch_function(self):
            return _handle(torch.Tensor.data_ptr, (self,), self)
        return _data_ptr(self)

    def __reduce_ex__(self, proto):
        return _reduce(self, proto)


_has_torch_function = torch.overrides.has_torch_function_unary
_handle = torch.overrides.handle_torch_function
_tolist = _SPECIAL[torch.Tensor.tolist]
_numpy = _SPECIAL[torch.Tensor.numpy]
_array = _SPECIAL[torch.Tensor.__array__]
_format = _SPECIAL[torch.Tensor.__format__]
_repr = _SPECIAL[torch.Tensor.__repr__]
_storage = _SPECIAL[torch.Tensor.untyped_storage]
_data_ptr = _SPECIAL[torch.Tensor.data_ptr]
_reduce = _SPECIAL[torch.Tensor.__reduce_ex__]
