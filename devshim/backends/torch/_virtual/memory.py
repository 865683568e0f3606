"""The memory each virtual GPU holds, and its size (`DEVSHIM_VIRTUAL_MEMORY`).

Every tensor on a virtual GPU is made by `dispatch.new`, which hands its host tensor here
(`account`): the first time a host storage is met it is counted against its virtual GPU,
with a weak reference that takes it off again when torch frees the storage (views and
tensors sharing one storage count it once). So `in_use` is the bytes of the live storages
on each virtual GPU, as `torch.cuda.memory_allocated` is on CUDA (without the caching
allocator's rounding), and `peak` the most since `reset_peak`.

With a size set, a new storage that would take a virtual GPU past it raises torch's own
`torch.OutOfMemoryError`, worded as CUDA's ("... out of memory. Tried to allocate ..."), so
the tools that look for CUDA's wording (accelerate's `find_executable_batch_size`,
Lightning's batch-size finder) take it for what it is. The check and the count are one step
under a lock (two threads cannot both take the last free bytes). The host kernel has run by
then (the bytes to allocate are known only from its result); the result is dropped with the
error. Inside a backward pass the error is raised when the pass ends (`_deferred`), as
`loss.backward()` does on a GPU that ran out; what the pass allocated meanwhile is counted.

A virtual tensor's `untyped_storage()` is a `VirtualStorage`: a storage on its virtual GPU
over the host storage's memory, whose `resize_` (the way FSDP frees and re-allocates its
parameters) is counted here and refused past the size before any memory is taken.

Example:
    >>> set_count(1)
    >>> x = torch.ones(1000, device="vgpu:0")
    >>> in_use(0)
    4000
"""

from __future__ import annotations

import threading
import weakref

import torch

from devshim import settings
from devshim.backends.memory_base import format_bytes
from devshim.backends.torch import _internals
from devshim.backends.torch._names import VIRTUAL_TYPE

__all__ = ["account", "recount", "in_use", "peak", "reset_peak", "capacity", "storage_of", "VirtualStorage",
           "INDICES"]

#: torch keeps a device index in 8 bits: at most 128 virtual GPUs (core.py's max_virtual_devices).
INDICES = 128
_UNREAD = object()

# Without a size no lock is taken: every update below is one read and one write of a list item
# with no call between them, which the GIL does not interrupt (the thread switch and the
# collector run at calls and loops); the weak references' callbacks, which may run in any
# thread at any allocation, make only such updates too. A lock there cost more than the rest
# of `account` (LeNet's step makes about 70 storages). With a size, the check against it and
# the count are one step under `_lock`.
_in_use = [0] * INDICES
_peak = [0] * INDICES
_held: dict = {}          # id(host storage) -> its _Held reference, while the storage lives
_capacity = _UNREAD       # settings.virtual_memory(), read again after a settings change
_lock = threading.Lock()
_storage_at = _internals.STORAGE_FROM_POINTER.get()  # a storage on a device over given memory
_resize_host = torch.UntypedStorage.resize_


class _Held(weakref.ref):
    """A weak reference to a counted host storage, knowing what to take off when it goes."""

    __slots__ = ("key", "index", "size")


def _release(ref) -> None:
    if _held.get(ref.key) is ref:
        _in_use[ref.index] -= ref.size
        del _held[ref.key]


def _forget_capacity() -> None:
    global _capacity
    _capacity = _UNREAD


settings.on_change(_forget_capacity)


def capacity():
    """The size of each virtual GPU in bytes, or None without one (raises for a bad value).

    Example:
        >>> capacity()        # DEVSHIM_VIRTUAL_MEMORY=64MiB
        67108864
    """
    global _capacity
    found = _capacity
    if found is _UNREAD:
        found = _capacity = settings.virtual_memory()
    return found


def account(host, device) -> None:
    """Count host tensor `host`'s storage against virtual GPU `device` (a torch.device) the
    first time it is met; `torch.OutOfMemoryError` when that takes the GPU past its size."""
    storage = host.untyped_storage()
    key = id(storage)
    if key in _held:
        return
    size = storage.nbytes()
    index = device.index or 0
    limit = _capacity
    if limit is _UNREAD:
        limit = capacity()
    ref = _Held(storage, _release)
    ref.key, ref.index, ref.size = key, index, size
    if limit is None:
        used = _in_use[index] + size  # (no call from here to the store: see the note on the lock)
        _in_use[index] = used
        if used > _peak[index]:
            _peak[index] = used
        _held[key] = ref
        return
    with _lock:
        if key in _held:
            return
        if _in_use[index] + size > limit and not _deferred(index, size, limit):
            # Raised, not kept in a variable: a frame that held its own exception would keep every
            # tensor of the frames below alive until the garbage collector ran.
            raise _out_of_memory(index, size, limit)
        _count(index, size)
        _held[key] = ref


def _count(index: int, size: int) -> None:
    used = _in_use[index] + size  # one read and one write, no call between (see the note on the lock)
    _in_use[index] = used
    if used > _peak[index]:
        _peak[index] = used


def recount(host, device) -> None:
    """Count `host`'s storage again after an operation changed its size in place
    (`resize_`, an `out=` that grew): the bytes it holds now. The growth is counted even
    past the size (the memory is held), and then refused with `torch.OutOfMemoryError`."""
    storage = host.untyped_storage()
    ref = _held.get(id(storage))
    if ref is None:
        account(host, device)
        return
    limit = capacity()
    with _lock:
        size = storage.nbytes()
        grown = size - ref.size
        ref.size = size
        _count(ref.index, grown)
        over = grown > 0 and limit is not None and _in_use[ref.index] > limit
    if over and not _deferred(ref.index, grown, limit, counted=True):
        raise _out_of_memory(ref.index, grown, limit, counted=True)


def _resize(host, device, nbytes: int) -> None:
    """Resize host storage `host` of virtual GPU `device` to `nbytes`, counted; past the size,
    `torch.OutOfMemoryError` before any memory is taken. `host` was counted when its tensor was
    made (`dispatch.new`), and the `VirtualStorage` over it keeps it alive."""
    index = device.index or 0
    limit = capacity()
    with _lock:
        ref = _held[id(host)]
        grown = nbytes - ref.size
        if grown > 0 and limit is not None and _in_use[index] + grown > limit:
            raise _out_of_memory(index, grown, limit)
        _resize_host(host, nbytes)
        ref.size = nbytes
        _count(index, grown)


class VirtualStorage(torch.UntypedStorage):
    """A virtual tensor's storage (`t.untyped_storage()`): on its virtual GPU (`device` says
    `vgpu:i`), over its host storage's memory. `resize_` resizes the host storage, counted
    against the virtual GPU and refused past its size; `nbytes`, `size`, `len` and `data_ptr`
    read the host storage, so they stay true after a resize. What would read, write or allocate
    the memory of a storage on the device in torch's C++ (which has no allocator for a virtual
    GPU) works on the host storage: `clone` (so `copy.deepcopy` of a virtual tensor), `cpu` and
    `to` give a host copy; items, `copy_` and `fill_` are the host's.

    Example:
        >>> s = torch.ones(4, device="vgpu:0").untyped_storage()
        >>> s.device, s.nbytes()
        (device(type='vgpu', index=0), 16)
        >>> s.resize_(0).nbytes()           # what FSDP does to free a parameter
        0
    """

    _devshim_host: torch.UntypedStorage  # the host storage (saving.host_storage reads it)

    def resize_(self, size):  # type: ignore[override]
        _resize(self._devshim_host, self.device, int(size))
        return self

    def nbytes(self) -> int:
        return self._devshim_host.nbytes()

    size = __len__ = nbytes

    def data_ptr(self) -> int:
        return self._devshim_host.data_ptr()

    def clone(self):
        # A host copy, as before: torch wraps a storage's copies in a TypedStorage, which takes no
        # subclass (copy.deepcopy of a virtual tensor does), and a tensor of the virtual GPU set on
        # a host storage takes it as its own (dispatch's set_).
        return self._devshim_host.clone()

    def new(self):
        return torch.UntypedStorage(0)

    cpu = clone

    def to(self, *, device, non_blocking: bool = False):
        device = torch.device(device)
        return self if device == self.device else self._devshim_host.clone().to(device=device)

    def copy_(self, source, non_blocking=None):
        self._devshim_host.copy_(getattr(source, "_devshim_host", source))
        return self

    def fill_(self, value):
        self._devshim_host.fill_(value)
        return self

    def __getitem__(self, index):
        return self._devshim_host[index]

    def __setitem__(self, index, value) -> None:
        self._devshim_host[index] = value


def storage_of(tensor) -> VirtualStorage:
    """The `VirtualStorage` of virtual tensor `tensor` (what its `untyped_storage()` gives).

    Example:
        >>> storage_of(torch.ones(4, device="vgpu:1")).device
        device(type='vgpu', index=1)
    """
    host = tensor._host.untyped_storage()
    storage = _storage_at(host.data_ptr(), tensor._device, host.nbytes())
    storage.__class__ = VirtualStorage
    storage._devshim_host = host
    return storage


def _deferred(*refused, counted: bool = False) -> bool:
    """Whether the error for allocation `refused` (index, size, limit) will be raised when the
    backward pass running in this thread ends, not now: torch's device guard for an out-of-tree
    device cannot unwind through one of torch's own backward nodes past a Python error (the
    process ends), so inside a backward pass the allocation is made and counted, and the pass
    ends in `torch.OutOfMemoryError`, as `loss.backward()` does on a GPU that ran out.
    False outside a backward pass."""
    engine = _ENGINE
    if engine is None:
        return False
    message = str(_out_of_memory(*refused, counted=counted))

    def refuse() -> None:
        raise torch.OutOfMemoryError(message)

    try:
        engine.queue_callback(refuse)
    except RuntimeError:  # "Final callbacks can only be installed during backward pass."
        return False
    return True


_ENGINE = _internals.QUEUE_CALLBACK.get()


def in_use(index: int) -> int:
    """Bytes of the live storages on virtual GPU `index`.

    Example:
        >>> in_use(0)
        4000
    """
    return _in_use[index]


def peak(index: int) -> int:
    """The most bytes in use on virtual GPU `index` since `reset_peak` (or since start).

    Example:
        >>> peak(0)
        8000
    """
    return _peak[index]


def reset_peak(index: int) -> None:
    """Start virtual GPU `index`'s peak over at the bytes in use now.

    Example:
        >>> reset_peak(0)
    """
    _peak[index] = _in_use[index]


def _out_of_memory(index: int, size: int, limit: int, counted: bool = False):
    """torch's error, worded as CUDA's: "<device> out of memory. Tried to allocate ..." (the
    words accelerate's and Lightning's batch-size finders look for: " out of memory." and "CUDA")."""
    used = _in_use[index] - (size if counted else 0)
    free = max(0, limit - used)
    return torch.OutOfMemoryError(
        f"{VIRTUAL_TYPE}:{index} out of memory. Tried to allocate {format_bytes(size)} on {VIRTUAL_TYPE}:{index}, a "
        f"devshim virtual GPU standing in for a CUDA GPU of {format_bytes(limit)} ({settings.VIRTUAL_MEMORY_VAR}): "
        f"{format_bytes(free)} is free and {format_bytes(used)} is held by live tensors. Free tensors you no longer "
        f"need (del), use a smaller batch, or give the virtual GPUs more memory ({settings.VIRTUAL_MEMORY_VAR})."
    )
