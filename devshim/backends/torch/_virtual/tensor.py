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
from devshim.guard.hooks import original_of

__all__ = ["VirtualTensor"]

_DisableTorchFunctionSubclass = torch._C.DisableTorchFunctionSubclass
# Calls func(*args, **kwargs) with __torch_function__ off for subclasses, as
# ``with DisableTorchFunctionSubclass(): func(...)`` does, in one C call.
_call_below = torch._C._disabled_torch_function_impl
_multithreading_enabled = torch._C._is_multithreading_enabled
_set_multithreading_enabled = torch._C._set_multithreading_enabled
_new = dispatch.new

# The framework's own method behind a transfer-guard wrapper: the guard replaces some of
# torch.Tensor's reading methods while it checks, and torch then hands ``__torch_function__``
# the guard's wrapper (``devshim.guard.hooks.mark_wrapper``).
_unguarded = original_of


class _DeviceOnce:
    """``VirtualTensor._device`` for an object made some way that did not set it (``dispatch.new``
    sets it): torch's device, read once and kept in the instance, which then answers first.
    Not ``__getattr__``: torch probes wrapper tensors for attributes they lack, and each miss
    would call it."""

    def __get__(self, tensor, owner=None):
        if tensor is None:
            return self
        with _DisableTorchFunctionSubclass():
            device = tensor.device
        tensor.__dict__["_device"] = device
        return device


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
        return _new(cls, host, torch.device(device))

    def __init__(self, host, device) -> None:
        pass  # __new__ (dispatch.new) set _host and _device

    _device = _DeviceOnce()

    # What lets torch.compile and Module._apply (swap_tensors) treat it as a wrapper.
    def __tensor_flatten__(self):
        return ["_host"], self.device

    @staticmethod
    def __tensor_unflatten__(inner, device, outer_size, outer_stride):
        return VirtualTensor(inner["_host"], device)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if _multithreading_enabled():  # dispatch.single_threaded_autograd(), inlined
            _set_multithreading_enabled(False)
        special = _SPECIAL.get(_unguarded(func))
        if special is not None:
            return special(*args, **(kwargs or {}))
        if kwargs:
            return _call_below(func, types, args, kwargs)
        return _call_below(func, types, args)

    # Every ATen operation: dispatch.torch_dispatch itself (no forwarding call in between).
    __torch_dispatch__ = classmethod(dispatch.torch_dispatch)

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
