"""Lazy parameters and buffers (`torch.nn.Lazy*` modules) on virtual GPUs.

A lazy module holds `UninitializedParameter`/`UninitializedBuffer` objects: no shape,
only a device and a dtype, and the first forward pass materialises them on that device.
On CUDA, `net.to("cuda")` keeps them uninitialised (on CUDA) and the first forward
materialises them there. torch cannot give a plain uninitialised tensor a virtual-GPU
value (its `_convert` step tries to turn the wrapper into the uninitialised class, which a
wrapper tensor cannot become), so a virtual GPU has its own two classes,
`VirtualUninitializedParameter` and `VirtualUninitializedBuffer`: subclasses of torch's
uninitialised classes *and* of `VirtualTensor`, so `isinstance(p, UninitializedParameter)`
and `is_lazy(p)` hold and `p.device` is `vgpu:i`. `materialize` (torch's own) then
sets their data on the virtual GPU and turns them into ordinary virtual tensors (a
parameter keeps its `Parameter`-ness).

Moving one is answered here: `to`, `cpu`, `cuda` and the dtype conversions give a new
uninitialised object of the right kind on the target (an ordinary one off the virtual GPUs).
`install()` routes `.to(vgpu)` of torch's own uninitialised objects here and lets
`UninitializedParameter(device="vgpu:1")` (what `nn.LazyLinear(1, device=...)` builds)
make a virtual one.
"""

from __future__ import annotations

import torch
from torch.nn.parameter import UninitializedBuffer, UninitializedParameter, UninitializedTensorMixin

from devshim.backends.torch import _internals
from devshim.backends.torch._names import VIRTUAL_TYPE
from devshim.backends.torch._virtual import dispatch
from devshim.backends.torch._virtual.count import target
from devshim.backends.torch._virtual.tensor import VirtualTensor, route_torch_function

__all__ = ["VirtualUninitializedParameter", "VirtualUninitializedBuffer", "install"]

_T = torch.Tensor
_DisableTorchFunctionSubclass = _internals.DISABLE_TORCH_FUNCTION_SUBCLASS.get()
_make_wrapper_subclass = _internals.WRAPPER_SUBCLASS.get()
_parse_to = _internals.PARSE_TO.get()
_ALLOWED = _internals.LAZY_ALLOWED.get()
_PARAMETER_MARK = _internals.PARAMETER_MARK.get()
_DTYPE_METHODS = {_T.half: torch.float16, _T.float: torch.float32, _T.double: torch.float64,
                  _T.char: torch.int8, _T.short: torch.int16, _T.int: torch.int32,
                  _T.long: torch.int64, _T.bfloat16: torch.bfloat16}
_CONVERSIONS = frozenset({_T.to, _T.cpu, _T.cuda, *_DTYPE_METHODS})
_CPU = torch.device("cpu")


def _make(cls, requires_grad, device, dtype):
    host = torch.empty(0, dtype=dtype)
    device = target(device if device is not None else VIRTUAL_TYPE)
    # layout (strided) is the default, as in dispatch.new.
    self = _make_wrapper_subclass(cls, host.size(), strides=host.stride(), storage_offset=0, dtype=host.dtype,
                                  device=device, requires_grad=requires_grad)
    self._host = host
    self._device = device
    return self


def _place_of(tensor):
    with _DisableTorchFunctionSubclass():
        return tensor.device, tensor.dtype, tensor.requires_grad


def _converted(func, args, kwargs):
    """(device, dtype) that conversion `func(*args, **kwargs)` of an uninitialised tensor
    asks for (either None when unchanged)."""
    if func is _T.to:
        device, dtype, _, _ = _parse_to(*args[1:], **kwargs)
        return device, dtype
    if func is _T.cpu:
        return _CPU, None
    if func is _T.cuda:
        index = args[1] if len(args) > 1 else kwargs.get("device")
        return torch.device("cuda", index) if isinstance(index, int) else torch.device(index or "cuda"), None
    return None, _DTYPE_METHODS[func]


def _same_kind(func, args, kwargs):
    """`detach` (what nn.Parameter(p) asks of a tensor subclass) or `requires_grad_` of an
    uninitialised tensor: a new uninitialised object of its kind, or torch's own."""
    if func is _T.detach:
        here, dtype, _ = _place_of(args[0])
        return type(args[0])(False, here, dtype)
    with _DisableTorchFunctionSubclass():
        return func(*args, **kwargs)


def _move(lazy, func, args, kwargs):
    """`func` (a conversion) of uninitialised `lazy`: the uninitialised object it gives."""
    device, dtype = _converted(func, args, kwargs)
    here, here_dtype, requires_grad = _place_of(lazy)
    device = here if device is None else torch.device(device)
    dtype = here_dtype if dtype is None else dtype
    if device.type == VIRTUAL_TYPE and device.index is None:
        device = torch.device(VIRTUAL_TYPE, 0)
    if device == here and dtype == here_dtype:
        return lazy
    buffer = isinstance(lazy, UninitializedBuffer)
    kind = UninitializedBuffer if buffer else UninitializedParameter
    if device.type == VIRTUAL_TYPE:
        kind = _VIRTUAL[kind]
    moved = kind(requires_grad, device, dtype)
    if buffer:
        moved.persistent = getattr(lazy, "persistent", True)
    return moved


class _VirtualLazy:
    """What both virtual uninitialised classes add to torch's (mixed in before them)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _CONVERSIONS:
            return _move(args[0], func, args, kwargs)
        if func is _T.detach or func is _T.requires_grad_:
            return _same_kind(func, args, kwargs)
        if func in _ALLOWED or func.__class__.__name__ == "method-wrapper":
            return route_torch_function(cls, func, types, args, kwargs)
        return UninitializedTensorMixin.__torch_function__.__func__(cls, func, types, args, kwargs)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        # Results are ordinary virtual tensors (`.data` while materialising, say).
        return dispatch.run(VirtualTensor, func, args, kwargs or {})

    def __init__(self, *args, **kwargs) -> None:
        pass  # _make set everything

    def __repr__(self) -> str:
        return f"<{type(self).__mro__[2].__name__}>"  # as torch prints the one it stands for

    def __deepcopy__(self, memo):
        if id(self) not in memo:
            here, dtype, requires_grad = _place_of(self)
            memo[id(self)] = type(self)(requires_grad, here, dtype)
        return memo[id(self)]


class VirtualUninitializedParameter(_VirtualLazy, UninitializedParameter, VirtualTensor):
    """An `UninitializedParameter` on a virtual GPU (a lazy module's weight moved there).

    Example:
        >>> net = torch.nn.LazyLinear(2).to("vgpu:1")
        >>> isinstance(net.weight, torch.nn.UninitializedParameter), net.weight.device
        (True, device(type='vgpu', index=1))
    """

    cls_to_become = VirtualTensor

    def __new__(cls, requires_grad=True, device=None, dtype=None):
        self = _make(cls, requires_grad, device, dtype)
        setattr(self, _PARAMETER_MARK, True)
        return self

    def __reduce_ex__(self, proto):
        return (UninitializedParameter, (self.requires_grad,))  # as CUDA's: rebuilt on the CPU


class VirtualUninitializedBuffer(_VirtualLazy, UninitializedBuffer, VirtualTensor):
    """An `UninitializedBuffer` on a virtual GPU (a lazy batch norm's statistics moved there).

    Example:
        >>> bn = torch.nn.LazyBatchNorm1d().to("vgpu:0")
        >>> isinstance(bn.running_mean, torch.nn.UninitializedBuffer)
        True
    """

    cls_to_become = VirtualTensor

    def __new__(cls, requires_grad=False, device=None, dtype=None, persistent=True):
        self = _make(cls, requires_grad, device, dtype)
        self.persistent = persistent
        self._is_buffer = True
        return self

    def __reduce_ex__(self, proto):
        return (UninitializedBuffer, (self.requires_grad,))


_torch_function = UninitializedTensorMixin.__dict__["__torch_function__"].__func__
_VIRTUAL = {UninitializedParameter: VirtualUninitializedParameter, UninitializedBuffer: VirtualUninitializedBuffer}
_new = {kind: kind.__new__ for kind in _VIRTUAL}
_installed = False


def _lazy_torch_function(cls, func, types, args=(), kwargs=None):
    # torch's uninitialised objects asked to move to a virtual GPU become virtual ones.
    if func in _CONVERSIONS and not issubclass(cls, _VirtualLazy):
        device, _ = _converted(func, args, kwargs or {})
        if device is not None and torch.device(device).type == VIRTUAL_TYPE:
            return _move(args[0], func, args, kwargs or {})
    elif (func is _T.detach or func is _T.requires_grad_) and type(args[0]) in _new:
        # Moving one back from a virtual GPU: Module._apply wraps the CPU object that _move
        # gives in nn.Parameter(...), which detaches it (the set_data route CUDA takes needs
        # two tensors of one kind). Its detached self is a new uninitialised object.
        return _same_kind(func, args, kwargs or {})
    return _torch_function(cls, func, types, args, kwargs)


def _lazy_new(torch_class, virtual_class):
    original = _new[torch_class]

    def __new__(cls, *args, **kwargs):
        device = args[1] if len(args) > 1 else kwargs.get("device")
        if cls is torch_class and device is not None and torch.device(device).type == VIRTUAL_TYPE:
            return virtual_class(*args, **kwargs)
        return original(cls, *args, **kwargs)

    return __new__


def install() -> None:
    """Make torch's uninitialised parameters and buffers move to virtual GPUs (once).

    Example:
        >>> install()
    """
    global _installed
    if _installed:
        return
    UninitializedTensorMixin.__torch_function__ = classmethod(_lazy_torch_function)
    for torch_class, virtual_class in _VIRTUAL.items():
        torch_class.__new__ = staticmethod(_lazy_new(torch_class, virtual_class))
    _installed = True
