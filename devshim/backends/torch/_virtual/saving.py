"""`torch.save`/`torch.load` (and pickling) of tensors on virtual GPUs, as of CUDA tensors:
storages shared, each with its device.

torch saves a tensor as its storage (once per storage, however many tensors view it: views
and tied weights stay views after loading) and the storage's location tag (`"cuda:1"`);
`torch.load` restores each storage by its tag, or where `map_location` sends it, and
rebuilds every tensor on its storage. A virtual tensor's storage is its host tensor's, a CPU
storage, so devshim tags it itself: `reduce` (what a virtual tensor pickles as) marks the
host storage with the device (`_devshim_device`), which the tagger registered here reads
(`"vgpu:1"`). The deserializer registered for `vgpu` tags gives torch's rebuild a storage
on the virtual GPU over the loaded bytes (`_devshim_host` names them); the dispatch of
`set_` puts the host storage in its place (`host_storage`). A checkpoint saved from a
virtual GPU is an ordinary torch checkpoint: `torch.load(f, map_location="cpu")` reads it
anywhere, `weights_only` included; without `map_location` it needs virtual GPUs, as a
CUDA checkpoint needs GPUs.

Example:
    >>> buffer = io.BytesIO()
    >>> t = torch.arange(4.0, device="vgpu:1")
    >>> torch.save({"t": t, "v": t[1:]}, buffer); buffer.seek(0)
    >>> back = torch.load(buffer)
    >>> back["v"].untyped_storage().data_ptr() == back["t"].untyped_storage().data_ptr()
    True
"""

from __future__ import annotations

import weakref
from collections import OrderedDict

import torch

from devshim.backends.torch import _internals
from devshim.backends.torch._names import VIRTUAL_TYPE
from devshim.backends.torch._virtual.count import target

__all__ = ["reduce", "install", "host_storage", "remember", "rebuild_flagged_tensor"]

# torch's internals, from the probes in torch/_internals.py
_storage_at = _internals.STORAGE_FROM_POINTER.get()         # a storage on a device over given memory
_TypedStorage = torch.storage.TypedStorage                   # what torch.save pickles a storage as
_NEW_DTYPES = _internals.UNTYPED_DTYPES.get()()             # dtypes torch saves untyped (v3)
_rebuild_v2, _rebuild_v3, _rebuild_parameter = _internals.REBUILD_FUNCTIONS.get()  # torch's own (weights_only)
_get_flags, _set_flags = _internals.TENSOR_METADATA.get()    # the conj and neg bits
_PARAMETER_MARK = _internals.PARAMETER_MARK.get()

_DEVICE_MARK = "_devshim_device"   # on a host storage: the virtual GPU its tensors are on
_HOST = "_devshim_host"            # on a loaded virtual storage: the CPU storage behind it
_PRIORITY = 5                      # before the CPU's tagger (10), which would say "cpu"
# Host storages behind memory torch was handed as a virtual GPU's, by the address it was handed:
# a legacy-format load fills a storage through a storage object torch makes in C++ over the
# same memory (without _devshim_host), and torch imports a DLPack capsule as a plain tensor.
_loaded: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()


def reduce(tensor):
    """What virtual tensor `tensor` pickles as: torch's own rebuild of a tensor on a storage,
    the storage being its host's, tagged with its virtual GPU. A parameter, as torch pickles
    one: its data, and whether it requires grad."""
    if getattr(tensor, _PARAMETER_MARK, False):
        return (_rebuild_parameter, (tensor.detach(), tensor.requires_grad, OrderedDict()))
    host = tensor._host
    untyped = host.untyped_storage()
    setattr(untyped, _DEVICE_MARK, str(tensor._device))
    place = (host.storage_offset(), tuple(host.size()), host.stride(), tensor.requires_grad, OrderedDict())
    if tensor.dtype in _NEW_DTYPES:
        rebuild, args = _rebuild_v3, (untyped, *place, tensor.dtype)
    else:
        rebuild, args = _rebuild_v2, (_TypedStorage(wrap_storage=untyped, dtype=tensor.dtype, _internal=True), *place)
    flags = _get_flags(host)  # (torch's rebuild takes them as its last argument, metadata)
    return (rebuild_flagged_tensor, (rebuild, *args, flags)) if flags else (rebuild, args)


def rebuild_flagged_tensor(rebuild, *args):
    """torch's `rebuild(*args)` for a tensor with the conjugate or negative bit, which torch
    sets on the tensor object alone: on a virtual GPU its host gets them too."""
    tensor = rebuild(*args)
    host = getattr(tensor, "_host", None)
    if host is not None:
        _set_flags(host, _get_flags(tensor))
    return tensor


def _tag(storage):
    """The location torch.save records for a storage: a virtual GPU's host storage says which."""
    return getattr(storage, _DEVICE_MARK, None)


def _restore(storage, location: str):
    """A storage loaded from a `vgpu:i` location (or mapped to one): a storage on that virtual
    GPU over the loaded bytes, which `set_` on a virtual tensor turns back into the bytes."""
    if not location.startswith(VIRTUAL_TYPE):
        return None
    device = target(location)  # DeviceUnavailableError when this process has no such virtual GPU
    virtual = _storage_at(storage.data_ptr(), device, storage.nbytes())
    setattr(virtual, _HOST, storage)
    remember(storage, storage.data_ptr())
    return virtual


def remember(memory, address: int) -> None:
    """Note that torch was handed `address` (in host storage `memory`) as a virtual GPU's."""
    if address:
        _loaded[address] = memory


def host_storage(storage):
    """The CPU storage behind `storage` when it is a virtual GPU's (made by `_restore`, or
    over memory `remember` noted)."""
    host = getattr(storage, _HOST, None)
    if host is not None:
        return host
    if storage.device.type == VIRTUAL_TYPE:
        try:
            return _loaded.get(storage.data_ptr(), storage)
        except RuntimeError:  # torch's storage of a tensor with no memory ("invalid python storage")
            return storage
    return storage


def install() -> None:
    """Register the tagger and the deserializer with torch.serialization (once per process)."""
    torch.serialization.register_package(_PRIORITY, _tag, _restore)
    torch.serialization.add_safe_globals([rebuild_flagged_tensor])
