"""DLPack of tensors on virtual GPUs: within torch a capsule shares the memory, as a CUDA
tensor's does; any other importer is refused by name.

A virtual tensor's own C++ storage holds no memory (its values live in its host tensor), so
torch's DLPack export would hand out a null pointer. `exportable` makes a wrapper over the
same host tensor whose C++ storage is the host memory, as a storage of the virtual GPU, and
torch exports that one: the capsule says "an external device, index i" (`kDLExtDev`) with
the host memory's address. torch imports such a capsule as a plain tensor of the virtual GPU
over that memory, which devshim knows (`saving.remember`) and computes with as a virtual
tensor (`dispatch._adopt`). So `torch.from_dlpack(t)` and
`torch.from_dlpack(torch.utils.dlpack.to_dlpack(t))` give a tensor on `t`'s virtual GPU
sharing its memory. Another framework would take host memory for a GPU's: `t.__dlpack__()`
asked by anything but torch's `from_dlpack` raises `ds.VirtualDLPackError`, naming
`ds.convert`.

`torch.utils.dlpack.to_dlpack` is a C function that reads a tensor's C++ storage; `install`
puts a Python function in its place that hands it `exportable(t)` for a virtual tensor.

Example:
    >>> t = torch.arange(3.0, device="vgpu:1")
    >>> u = torch.from_dlpack(t)
    >>> u.device, u.data_ptr() == t.data_ptr()
    (device(type='vgpu', index=1), True)
"""

from __future__ import annotations

import sys

import torch

from devshim.backends.torch import _internals
from devshim.backends.torch._names import VIRTUAL_TYPE
from devshim.backends.torch._virtual import saving
from devshim.backends.torch._virtual.dispatch import new_view
from devshim.backends.torch._virtual.reads import refuse_dlpack as _refuse

__all__ = ["exportable", "dlpack", "dlpack_device", "to_dlpack", "install"]

_storage_at = _internals.STORAGE_FROM_POINTER.get()  # a storage on a device over given memory
_SET_STORAGE = torch.ops.aten.set_.source_Storage_storage_offset
_CPU_KERNEL = _internals.CPU_KEYS.get()               # set_'s kernel that takes any storage
_torch_to_dlpack = torch.utils.dlpack.to_dlpack      # torch's own

_EXTERNAL_DEVICE = torch.utils.dlpack.DLDeviceType.kDLExtDev


def exportable(tensor):
    """A wrapper over `tensor`'s host tensor whose C++ storage is the host memory (a storage
    of `tensor`'s virtual GPU): what torch's DLPack export reads."""
    host = tensor._host
    memory = host.untyped_storage()
    export = new_view(type(tensor), host, tensor._device)
    storage = _storage_at(memory.data_ptr(), tensor._device, memory.nbytes())
    # The CPU kernel of set_ points the wrapper at that storage, keeping its sizes and strides.
    _SET_STORAGE.redispatch(_CPU_KERNEL, export, storage, host.storage_offset(), host.size(), host.stride())
    if tensor.requires_grad:
        export.requires_grad_()  # torch's export refuses it, with its own message
    saving.remember(memory, host.data_ptr())
    return export


def _refuse_unless_torch(tensor) -> None:
    """`ds.VirtualDLPackError` unless the DLPack call comes from torch's own `torch.from_dlpack`."""
    frame = sys._getframe(2)
    for _ in range(6):
        if frame is None:
            break
        if frame.f_globals.get("__name__") == "torch.utils.dlpack":
            return
        frame = frame.f_back
    _refuse(tensor)


def dlpack(tensor, *args, **kwargs):
    """`tensor.__dlpack__(...)`: torch's capsule of `exportable(tensor)` when torch's
    `from_dlpack` asks, else `ds.VirtualDLPackError`."""
    _refuse_unless_torch(tensor)
    return torch.Tensor.__dlpack__(exportable(tensor), *args, **kwargs)


def dlpack_device(tensor):
    """`tensor.__dlpack_device__()`: an external device (`kDLExtDev`) of the virtual GPU's
    index, for torch's `from_dlpack`; else `ds.VirtualDLPackError`."""
    _refuse_unless_torch(tensor)
    return (_EXTERNAL_DEVICE, tensor._device.index)


def to_dlpack(tensor, *args, **kwargs):
    """`torch.utils.dlpack.to_dlpack`, which takes virtual tensors too."""
    if isinstance(tensor, torch.Tensor) and tensor.device.type == VIRTUAL_TYPE and hasattr(tensor, "_host"):
        tensor = exportable(tensor)
    return _torch_to_dlpack(tensor, *args, **kwargs)


to_dlpack.__doc__ = _torch_to_dlpack.__doc__


def install() -> None:
    """Put `to_dlpack` in the place of `torch.utils.dlpack.to_dlpack` (once)."""
    if torch.utils.dlpack.to_dlpack is _torch_to_dlpack:
        torch.utils.dlpack.to_dlpack = to_dlpack
