"""The tensor on a virtual GPU: `VirtualTensor`, a `torch.Tensor` wrapper subclass
whose device is `vgpu:i` and whose values live in an ordinary CPU tensor (`_host`).

Its `__torch_dispatch__` hands every ATen operation to `dispatch.py`. It has no
`__torch_function__` of its own (torch's "disabled" marker), so torch calls no Python at
its function layer; the few methods that need devshim's behaviour (host reads, `.data =`,
`new_tensor`) are defined on the class and answered through `reads.py`.
"""

from __future__ import annotations

import threading

import torch

from devshim.backends.torch import _internals
from devshim.backends.torch._virtual import dispatch
from devshim.backends.torch._virtual import dlpack as _dlpack
from devshim.backends.torch._virtual.reads import SPECIAL as _SPECIAL
from devshim.guard.hooks import original_of

__all__ = ["VirtualTensor"]

_DisableTorchFunctionSubclass = _internals.DISABLE_TORCH_FUNCTION_SUBCLASS.get()
# One C function, two roles: as a class's `__torch_function__` it is torch's marker for
# "none"; called, it runs func(*args, **kwargs) with __torch_function__ off for subclasses,
# as `with DisableTorchFunctionSubclass(): func(...)` does, in one C call.
_disabled_torch_function = _call_below = _internals.DISABLED_TORCH_FUNCTION_IMPL.get()
_multithreading_enabled, _set_multithreading_enabled = _internals.AUTOGRAD_THREADS.get()


class _DeviceOnce:
    """`VirtualTensor._device` for an object made some way that did not set it (`dispatch.new`
    sets it): torch's device, read once and kept in the instance, which then answers first.
    Not `__getattr__`: torch probes wrapper tensors for attributes they lack, and each miss
    would call it."""

    def __get__(self, tensor, owner=None):
        if tensor is None:
            return self
        with _DisableTorchFunctionSubclass():
            device = tensor.device
        tensor.__dict__["_device"] = device
        return device


def _special(method, answer=None):
    """A method of the virtual tensor for torch's `method`, answered by devshim's (`answer`,
    default reads.SPECIAL's). Under an active TorchFunctionMode (devshim's transfer guard,
    `with torch.device(...)`) it shows itself to the mode under torch's own name, as on CUDA."""
    answer = answer or _SPECIAL[method]

    def special(self, *args, **kwargs):
        if _has_torch_function(self):
            return _present(method, self, *args, **kwargs)
        return answer(self, *args, **kwargs)

    special.__name__, special.__qualname__ = method.__name__, f"VirtualTensor.{method.__name__}"
    return special


class VirtualTensor(torch.Tensor):
    """A tensor on a devshim virtual GPU: `device` is `vgpu:i`, the values are the
    CPU tensor `_host`. Made by torch calls that name a virtual GPU, never directly.

    Example:
        >>> x = torch.ones(2, device="vgpu:1")
        >>> x.device, x._host.device
        (device(type='vgpu', index=1), device(type='cpu'))
    """

    @staticmethod
    def __new__(cls, host, device):
        return dispatch.new(cls, host, torch.device(device))

    def __init__(self, host, device) -> None:
        pass  # __new__ (dispatch.new) set _host and _device

    _device = _DeviceOnce()

    # What lets torch.compile and Module._apply (swap_tensors) treat it as a wrapper.
    def __tensor_flatten__(self):
        return ["_host"], self.device

    @staticmethod
    def __tensor_unflatten__(inner, device, outer_size, outer_stride):
        return VirtualTensor(inner["_host"], device)

    # torch's marker for "no __torch_function__": torch then calls no Python at its function
    # layer, where each call cost about 1.9 µs (a LeNet training step made 73: `.grad`,
    # `.shape`, every method). `_present` switches `route_torch_function` on while a
    # TorchFunctionMode handles one of the methods below.
    __torch_function__ = _disabled_torch_function

    # Every ATen operation: dispatch.torch_dispatch itself (no forwarding call in between).
    __torch_dispatch__ = classmethod(dispatch.torch_dispatch)

    # What a virtual tensor answers differently from torch's own methods (reads.SPECIAL).
    # Under an active TorchFunctionMode (devshim's transfer guard, `with torch.device(...)`)
    # each shows itself to the mode under torch's own name, as on CUDA.
    tolist = _special(torch.Tensor.tolist)
    __format__ = _special(torch.Tensor.__format__)
    untyped_storage = _special(torch.Tensor.untyped_storage)
    data_ptr = _special(torch.Tensor.data_ptr)
    new_tensor = _special(torch.Tensor.new_tensor)
    __dlpack__ = _special(torch.Tensor.__dlpack__, _dlpack.dlpack)
    __dlpack_device__ = _special(torch.Tensor.__dlpack_device__, _dlpack.dlpack_device)

    def numpy(self, *, force: bool = False):
        if _has_torch_function(self):
            return _present(torch.Tensor.numpy, self, force=force)
        return _SPECIAL[torch.Tensor.numpy](self, force=force)

    def __array__(self, dtype=None, copy=None):
        if _has_torch_function(self):
            return _present(torch.Tensor.__array__, self, dtype)
        return _SPECIAL[torch.Tensor.__array__](self, dtype)

    def __repr__(self, *, tensor_contents=None):
        if _has_torch_function(self):
            return _present(torch.Tensor.__repr__, self)
        return _SPECIAL[torch.Tensor.__repr__](self)

    # `t.data` as torch reads it; `t.data = v` through reads.py (its own host view). (torch's setter
    # is a new method-wrapper at each access, equal to the one reads.SPECIAL holds.)
    data = property(_internals.TENSOR_DATA.get().__get__, _special(torch.Tensor.data.__set__),
                    doc=torch.Tensor.data.__doc__)

    __reduce_ex__ = _SPECIAL[torch.Tensor.__reduce_ex__]


def route_torch_function(cls, func, types, args=(), kwargs=None):
    """`VirtualTensor.__torch_function__` while a TorchFunctionMode handles one of its special
    methods (`_present`): torch's method, called by the mode, comes back here and is
    answered by devshim's (reads.SPECIAL); anything else runs as torch's."""
    if _multithreading_enabled():  # dispatch.single_threaded_autograd(), inlined
        _set_multithreading_enabled(False)
    # original_of: the framework's own method behind a transfer-guard wrapper: the guard replaces
    # some of torch.Tensor's reading methods while it checks, and torch then hands
    # `__torch_function__` the guard's wrapper (`devshim.guard.hooks.mark_wrapper`).
    special = _SPECIAL.get(original_of(func))
    if special is not None:
        return special(*args, **(kwargs or {}))
    if kwargs:
        return _call_below(func, types, args, kwargs)
    return _call_below(func, types, args)


_routed = classmethod(route_torch_function)
_presenting = 0
_presenting_lock = threading.Lock()


def _present(method, self, *args, **kwargs):
    """Hand a call of a special method to the active TorchFunctionModes as a call of torch's
    `method` (what they see on a CUDA tensor). The mode then calls torch's method, which
    reaches devshim's answer only through the class's `__torch_function__`: so that is
    `route_torch_function` for as long as some thread is presenting. Any other thread's
    calls meanwhile take that route too, which answers them the same, only slower."""
    global _presenting
    with _presenting_lock:
        _presenting += 1
        VirtualTensor.__torch_function__ = _routed
    try:
        return _handle(method, (self,), self, *args, **kwargs)
    finally:
        with _presenting_lock:
            _presenting -= 1
            if not _presenting:
                VirtualTensor.__torch_function__ = _disabled_torch_function


_has_torch_function = torch.overrides.has_torch_function_unary
_handle = torch.overrides.handle_torch_function
_SPECIAL[torch.Tensor.__dlpack__] = _dlpack.dlpack  # answered under a TorchFunctionMode too
_SPECIAL[torch.Tensor.__dlpack_device__] = _dlpack.dlpack_device
