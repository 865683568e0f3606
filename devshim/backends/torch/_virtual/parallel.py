"""`torch.nn.parallel` and `nn.DataParallel` over virtual GPUs, as on CUDA.

torch's single-process data parallelism is Python (`DataParallel`, `scatter`,
`gather`, `replicate`, `parallel_apply`, the autograd functions `Scatter`,
`Gather`, `Broadcast` and `ReduceAddCoalesced`) over six collective primitives in
`torch.nn.parallel.comm` that call CUDA-only C++ (`torch._C._scatter`, ...), plus two
probes that pick the device type (`_get_available_device_type`, which asks
`torch.vgpu.is_available()`: False here, see `registration.py`). `install()` gives
torch's Python what it lacks, and nothing more:

- `comm.scatter/gather/broadcast/broadcast_coalesced/reduce_add/reduce_add_coalesced`
  work on virtual GPUs: the same splits, copies and sums CUDA's kernels make (the first
  device of a broadcast gets the source tensors themselves, as on CUDA, so a replica on
  `device_ids[0]` shares its module's parameters and buffers). Calls on other devices
  go to torch's own functions.
- `parallel_apply` runs each replica in its own thread, as torch does, without CUDA
  streams (virtual GPUs compute synchronously).
- `DataParallel` and `data_parallel` find the virtual GPUs as their device type while
  devshim presents them (integer device ids then mean `vgpu:i`).

So autograd runs torch's own backward functions: gradients of the replicas are summed back
into the module's parameters on `device_ids[0]`, and the output lands on
`output_device`. Should torch change so that `DataParallel` ends up with no devices
while virtual GPUs are given, construction raises `VirtualDataParallelError` rather than
running on one device without a word.

Example:
    >>> install()
    >>> torch.nn.parallel.scatter(torch.arange(4), [torch.device("vgpu", 0), torch.device("vgpu", 1)])
    (tensor([0, 1], device='vgpu:0'), tensor([2, 3], device='vgpu:1'))
"""

from __future__ import annotations

import functools
import sys
import threading

import torch
import torch.nn.parallel  # noqa: F401  (its submodules, below)

from devshim.backends.torch import _internals
from devshim.backends.torch._names import VIRTUAL_TYPE
from devshim.backends.torch._virtual import count as _counter
from devshim.backends.torch._virtual.tensor import VirtualTensor
from devshim.errors import VirtualDataParallelError

__all__ = ["install"]

_comm = sys.modules["torch.nn.parallel.comm"]
ExceptionWrapper = _internals.EXCEPTION_WRAPPER.get()
_AVAILABLE_DEVICE_TYPE, _ALL_DEVICE_INDICES = _internals.DEVICE_TYPE_LOOKUPS.get()
_data_parallel = sys.modules["torch.nn.parallel.data_parallel"]
_parallel_apply = sys.modules["torch.nn.parallel.parallel_apply"]
_CPU = torch.device("cpu")
_installed = False
_original: dict = {}


# ------------------------------------------------------------ when a call is ours


def _presented() -> bool:
    return _counter.device_count() > 0


def _ours(tensors, devices) -> bool:
    """Whether a comm call concerns virtual GPUs: a virtual tensor or device among its
    arguments, or only CPU tensors and integer devices while virtual GPUs are presented
    (torch turns `vgpu:i` into `i` before it calls comm)."""
    if any(isinstance(t, VirtualTensor) for t in tensors):
        return True
    named = False
    for d in devices:
        if isinstance(d, (torch.device, str)):
            d = torch.device(d)
            if d.type == VIRTUAL_TYPE:
                return True
            if d.type != "cpu":
                named = True
    return not named and _presented() and all(t.device.type == "cpu" for t in tensors)


def _device(d):
    """A comm device argument as a torch.device: an int is a virtual GPU (-1: the CPU)."""
    if isinstance(d, int):
        return _CPU if d < 0 else torch.device(VIRTUAL_TYPE, d)
    d = torch.device(d if d is not None else VIRTUAL_TYPE)
    # No index (or None): the "current device"; a Python guard has only vgpu:0.
    return torch.device(VIRTUAL_TYPE, 0) if d.type == VIRTUAL_TYPE and d.index is None else d


# ------------------------------------------------------------ comm, on virtual GPUs


def broadcast(tensor, devices=None, *, out=None):
    if not _ours([tensor], devices or [o.device for o in out or ()]):
        return _original["broadcast"](tensor, devices, out=out)
    if out is not None:
        for o in out:
            o.copy_(tensor)
        return tuple(out)
    return tuple(tensor.to(_device(d)) for d in devices)  # (to gives the tensor itself already there)


def broadcast_coalesced(tensors, devices, buffer_size=10485760):
    if not _ours(tensors, devices):
        return _original["broadcast_coalesced"](tensors, devices, buffer_size)
    targets = [_device(d) for d in devices]
    # As CUDA's: the first device must hold the tensors, and gets them themselves.
    return [list(tensors) if i == 0 else [t.to(device) for t in tensors]
            for i, device in enumerate(targets)]


def reduce_add(inputs, destination=None):
    if not _ours(inputs, [destination] if destination is not None else []):
        return _original["reduce_add"](inputs, destination)
    target = _device(destination)
    total = inputs[0].to(target, copy=True)
    for t in inputs[1:]:
        total.add_(t.to(target))
    return total


def reduce_add_coalesced(inputs, destination=None, buffer_size=10485760):
    if not _ours([t for group in inputs for t in group], [destination] if destination is not None else []):
        return _original["reduce_add_coalesced"](inputs, destination, buffer_size)
    return tuple(reduce_add(list(column), destination) for column in zip(*inputs))  # a tuple, as torch's


def scatter(tensor, devices=None, chunk_sizes=None, dim=0, streams=None, *, out=None):
    if not _ours([tensor], devices or [o.device for o in out or ()]):
        return _original["scatter"](tensor, devices, chunk_sizes, dim, streams, out=out)
    if out is not None:
        chunks = tensor.split([o.size(dim) for o in out], dim)
        for o, chunk in zip(out, chunks):
            o.copy_(chunk)
        return tuple(out)
    chunks = (tensor.split(list(chunk_sizes), dim) if chunk_sizes is not None
              else tensor.chunk(len(devices), dim))
    return tuple(chunk.to(_device(d)) for chunk, d in zip(chunks, devices))


def gather(tensors, dim=0, destination=None, *, out=None):
    if not _ours(tensors, [destination] if destination not in (None, -1, "cpu") else []):
        return _original["gather"](tensors, dim, destination, out=out)
    if out is not None:
        out.copy_(torch.cat([t.to(out.device) for t in tensors], dim))
        return out
    target = _CPU if destination == "cpu" else _device(destination)
    return torch.cat([t.to(target) for t in tensors], dim)


# ------------------------------------------------------------ parallel_apply and DataParallel


def parallel_apply(modules, inputs, kwargs_tup=None, devices=None):
    """torch's `parallel_apply`; over virtual GPUs, its threads without CUDA streams."""
    found = [t for t in (_a_tensor(i) for i in inputs) if t is not None]
    if not _ours(found, [d for d in devices or () if d is not None]):
        return _original["parallel_apply"](modules, inputs, kwargs_tup, devices)
    if len(modules) != len(inputs):
        raise AssertionError(f"The number of modules {len(modules)} is not equal to "
                             f"the number of inputs {len(inputs)}")
    kwargs_tup = kwargs_tup if kwargs_tup is not None else ({},) * len(modules)
    results: dict = {}
    lock = threading.Lock()
    grad_enabled = torch.is_grad_enabled()

    def work(i, module, args, kwargs):
        torch.set_grad_enabled(grad_enabled)
        try:
            output = module(*(args if isinstance(args, (list, tuple)) else (args,)), **kwargs)
        except Exception:
            output = ExceptionWrapper(where=f"in replica {i} on device {_where(devices, i, args)}")
        with lock:
            results[i] = output

    jobs = list(zip(modules, inputs, kwargs_tup))
    if len(jobs) > 1:
        threads = [threading.Thread(target=work, args=(i, *job)) for i, job in enumerate(jobs)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    else:
        work(0, *jobs[0])
    for i in range(len(jobs)):
        if isinstance(results[i], ExceptionWrapper):
            results[i].reraise()
    return [results[i] for i in range(len(jobs))]


def _a_tensor(value):
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (list, tuple)):
        for item in value:
            found = _a_tensor(item)
            if found is not None:
                return found
    if isinstance(value, dict):
        return _a_tensor(list(value.values()))
    return None


def _where(devices, i, args):
    if devices is not None and devices[i] is not None:
        return _device(devices[i]) if isinstance(devices[i], int) else devices[i]
    t = _a_tensor(args)
    return t.device if t is not None else "?"


def _while_presented(name, answer):
    """torch's lookup `name` of `data_parallel`, answered by `answer()` while virtual GPUs are presented."""
    def lookup():
        return answer() if _presented() else _original[name]()

    return lookup


def _checked_init(init):
    def __init__(self, module, device_ids=None, output_device=None, dim=0):
        init(self, module, device_ids, output_device, dim)
        if self.device_ids or not _presented() or (device_ids is not None and not len(device_ids)):
            return
        raise VirtualDataParallelError(
            f"nn.DataParallel found no devices to run on although devshim presents "
            f"{_counter.device_count()} virtual GPUs (torch {torch.__version__} asks for them in a way "
            f"devshim does not answer), so it would run the whole batch on one device. Write the "
            f"data-parallel step with ds.split_batch, ds.replicate and ds.allreduce, or use "
            f"DistributedDataParallel (one process per device: ds.init_distributed())."
        )

    return functools.update_wrapper(__init__, init)


def install() -> None:
    """Make torch's single-process data parallelism work on virtual GPUs (once).

    Example:
        >>> install()
    """
    global _installed
    if _installed:
        return
    for replacement in (broadcast, broadcast_coalesced, reduce_add, reduce_add_coalesced, scatter, gather):
        name = replacement.__name__  # each stands for torch's function of its name
        _original[name] = getattr(_comm, name)
        setattr(_comm, name, replacement)
    _original["parallel_apply"] = _parallel_apply.parallel_apply
    for module in (_parallel_apply, _data_parallel, torch.nn.parallel):
        if getattr(module, "parallel_apply", None) is _original["parallel_apply"]:
            module.parallel_apply = parallel_apply
    for name, answer in ((_AVAILABLE_DEVICE_TYPE, lambda: VIRTUAL_TYPE),
                         (_ALL_DEVICE_INDICES, lambda: list(range(_counter.device_count())))):
        if hasattr(_data_parallel, name):
            _original[name] = getattr(_data_parallel, name)
            setattr(_data_parallel, name, _while_presented(name, answer))
    DataParallel = torch.nn.DataParallel
    DataParallel.__init__ = _checked_init(DataParallel.__init__)
    _installed = True
