"""PyTorch's memory figures (`ds.memory`, `ds.memory_peak`) and its out-of-memory error.

- CUDA (and ROCm) and XPU: the caching allocator's own counts, `torch.<platform>`'s
  `memory_allocated` (in use), `memory_reserved` (reserved), `max_memory_allocated`
  (peak, reset by `reset_peak_memory_stats`) and `mem_get_info` (free and total).
- MPS: `torch.mps.current_allocated_memory` (in use), `driver_allocated_memory`
  (reserved) and `recommended_max_memory` (total: Metal's recommended working set); no peak.
- virtual GPUs: devshim's own count of the storages on each (`_virtual/memory.py`), their
  size from `DEVSHIM_VIRTUAL_MEMORY`; an allocation past it raises `torch.OutOfMemoryError`.
- the CPU: the process's and the machine's figures (`memory_base.host_figures`).

Estimates (`ds.estimate_memory`): the step runs under torch's `FakeTensorMode`, whose tensors
have shapes, dtypes and devices and no memory, while a dispatch mode of devshim's counts the
bytes of every storage an operation makes, on its device, and takes them off when torch frees
the storage (weak references), as devshim counts a virtual GPU's storages: the peak is the most
counted at once. Tensors passed in are counted from the start, as arguments are. Code compiled
with `torch.compile` runs eagerly there (`_internals.compiled_code_runs_eagerly`): Inductor's
kernels would make real tensors, below the dispatcher, which nothing counts.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import os
import site
import sysconfig
import traceback
import weakref

import torch

from devshim.backends.memory_base import DeviceMemory, MemoryInfo, with_capacity
from devshim.backends.torch import _internals
from devshim.backends.torch._names import VIRTUAL_TYPE
from devshim.errors import MemoryEstimateError, MemoryEstimateUnsupportedError

__all__ = ["TorchMemory"]

_OUT_OF_MEMORY = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
_VIRTUAL_SOURCE = "devshim's count of the virtual GPU's storages"


def _virtual():
    from devshim.backends.torch._virtual import memory

    return memory


def _call(module, name: str, *args):
    """`module.name(*args)`, or None where this torch or this device has no such call."""
    function = getattr(module, name, None)
    if function is None:
        return None
    try:
        return function(*args)
    except (RuntimeError, AssertionError, AttributeError, TypeError, ValueError):
        return None


class TorchMemory(DeviceMemory):
    """torch's allocators' figures, devshim's count on virtual GPUs.

    Example:
        >>> ds.backends.memory("torch").figures(ds.get_backend("torch"), torch.device("vgpu", 0)).source
        "devshim's count of the virtual GPU's storages"
    """

    free_hint = ("and on CUDA torch.cuda.empty_cache() hands the caching allocator's unused blocks back "
                 "(set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation)")

    def accelerator_figures(self, adapter, native, device) -> MemoryInfo:
        platform = native.type
        module = getattr(torch, platform, None)
        index = native.index if native.index is not None else 0
        if platform == "mps":
            return MemoryInfo(device, in_use=_call(module, "current_allocated_memory"),
                              reserved=_call(module, "driver_allocated_memory"),
                              total=_call(module, "recommended_max_memory"), source="torch.mps")
        free, total = _call(module, "mem_get_info", index) or (None, None)
        return MemoryInfo(device, in_use=_call(module, "memory_allocated", index),
                          reserved=_call(module, "memory_reserved", index),
                          peak=_call(module, "max_memory_allocated", index), total=total, free=free,
                          source=f"torch.{platform}")

    def virtual_figures(self, adapter, native, device) -> MemoryInfo:
        memory, index = _virtual(), native.index or 0
        used = memory.in_use(index)
        memory.capacity()  # a bad DEVSHIM_VIRTUAL_MEMORY is refused here, as by the virtual GPU itself
        return with_capacity(MemoryInfo(device, in_use=used, reserved=used, peak=memory.peak(index),
                                        source=_VIRTUAL_SOURCE))

    def in_use(self, adapter, native):
        if native.type == VIRTUAL_TYPE:
            return _virtual().in_use(native.index or 0)
        return super().in_use(adapter, native)

    def reset_peak(self, adapter, native) -> bool:
        if native.type == VIRTUAL_TYPE:
            _virtual().reset_peak(native.index or 0)
            return True
        if native.type == "cpu" or native.type == "mps":
            return super().reset_peak(adapter, native)
        module = getattr(torch, native.type, None)
        reset = getattr(module, "reset_peak_memory_stats", None)
        if reset is None:
            return False
        try:
            reset(native.index if native.index is not None else 0)
        except (RuntimeError, AssertionError):
            return False
        return True

    error_class = _OUT_OF_MEMORY

    def names_device(self, error: BaseException, native) -> bool:
        if super().names_device(error, native):
            return True
        # CUDA's own wording names the GPU by its index: "... GPU 1 has a total capacity of ...".
        return native.type == "cuda" and f"GPU {native.index or 0} " in str(error)

    def is_out_of_memory(self, error: BaseException) -> bool:
        if isinstance(error, _OUT_OF_MEMORY):
            return True
        # MPS says it in a RuntimeError of its own ("MPS backend out of memory"), the CPU's
        # allocator in another ("DefaultCPUAllocator: can't allocate memory").
        said = str(error).lower()
        return type(error) is RuntimeError and ("out of memory" in said or "can't allocate memory" in said)

    def nbytes(self, x):
        return x.nbytes if isinstance(x, torch.Tensor) else None

    def model_bytes(self, model):
        if not isinstance(model, torch.nn.Module):
            return None
        seen = {id(tensor): tensor.nbytes for tensor in (*model.parameters(), *model.buffers())}  # each once
        return sum(seen.values())

    def estimate(self, adapter, step, args: tuple, kwargs: dict) -> dict:
        fake = _internals.FAKE_TENSORS.get()
        if fake is None:
            raise MemoryEstimateUnsupportedError(
                f"devshim cannot estimate a step on torch {torch.__version__}: it lacks FakeTensorMode (see the "
                f"FrameworkInternalWarning). Measure it instead: ds.memory_peak on a GPU, or on a virtual GPU of "
                f"the size (DEVSHIM_VIRTUAL_DEVICES=1 DEVSHIM_VIRTUAL_MEMORY=80GB)."
            )
        mode = fake.mode(allow_non_fake_inputs=False)
        if _internals.FAKE_MEMO.get() is not None:
            mode.fake_tensor_converter.set_tensor_memo = _no_memo  # model.to(device) in the step (_internals)
        count = _counter(fake.dispatch_mode)()
        with fake.copy_mode(mode):
            args, kwargs = _as_fake(mode, count, (args, kwargs))
        arguments = dict(count.used)
        try:
            with mode, count, _default_paths_for(fake.tensor), _internals.compiled_code_runs_eagerly():
                result = step(*args, **kwargs)
                kept = dict(count.used)
                del result, args, kwargs
        except fake.value_read as error:
            raise MemoryEstimateError(_value_read(error)) from error
        except AssertionError as error:
            if "FakeTensor" not in str(error):
                raise
            raise MemoryEstimateError(_REAL_TENSOR.format(where=_steps_line(error))) from error
        except MemoryEstimateError:
            raise
        except RuntimeError as error:
            if torch.cuda.device_count() or not _asked_for_cuda(count, error):
                raise
            raise MemoryEstimateError(_NO_CUDA.format(error=error)) from error
        return _figures_of(count, kept, arguments)


@contextlib.contextmanager
def _default_paths_for(fake_type):
    """The step's fake tensors take the kernels torch picks for real tensors of their device:
    torch chooses its `foreach` kernels (CUDA's default for optimisers) by a tensor's type, and
    lists FakeTensor's only for the estimate's time (`_internals.take_foreach_path`)."""
    added = _internals.take_foreach_path(fake_type)
    try:
        yield
    finally:
        for found in added:
            found.remove(fake_type)


def _asked_for_cuda(count, error) -> bool:
    """Whether a step that failed had made CUDA tensors, or failed asking for one. torch's Python
    bindings start CUDA for `t.to("cuda")` and CUDA factories before any operation is dispatched
    (torch 2.4; a torch built without CUDA refuses there), so then only torch's message names it."""
    return any(device.type == "cuda" for device in count.peak) or "cuda" in str(error).lower()


def _no_memo(tensor, fake) -> None:
    """FakeTensorConverter.set_tensor_memo, for a mode whose results are never looked up again."""


def _value_read(error) -> str:
    """What a step that read a tensor's value is told: the operation, the step's line that read it
    and, where one of torch's own readers (`_READERS`) read it, what to do instead."""
    op = str(error.args[0]) if error.args else type(error).__name__
    return _VALUE_READ.format(op=op, where=_steps_line(error)) + _readers_advice(error)


def _readers_advice(error) -> str:
    """The advice for the first of torch's readers (`_READERS`) in `error`'s traceback, or ''."""
    for frame, _ in traceback.walk_tb(error.__traceback__):
        module = frame.f_globals.get("__name__")
        for prefix, suffix, advice in _READERS:
            if isinstance(module, str) and module.startswith(prefix) and module.endswith(suffix):
                return advice
    return ""


def _steps_line(error) -> str:
    """The step's own line in `error`'s traceback, as ' in step() at train.py:12' ('' where there
    is none): its innermost frame outside torch, devshim, Python's standard library and installed
    packages (a step that hands a tensor to `statistics.fmean`, or to a library's model, is named
    where it calls them)."""
    libraries = _LIBRARIES + _installed_code()
    own = [(frame.f_code, line) for frame, line in traceback.walk_tb(error.__traceback__)
           if not frame.f_code.co_filename.startswith(libraries)]
    return f" in {own[-1][0].co_name}() at {own[-1][0].co_filename}:{own[-1][1]}" if own else ""


#: Where torch's and devshim's own code lives: the frames there are not the step's.
_LIBRARIES = (os.path.dirname(torch.__file__) + os.sep,
              os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep)


def _installed_code() -> tuple:
    """Where Python's standard library and installed packages live (this interpreter's, its
    environment's and the user's site-packages). Read on each refusal, not at import: a refusal
    is rare, and a figure kept from import would hide this code from the mutation run (mutmut
    switches a mutant on after devshim is imported)."""
    folders = {path for key, path in sysconfig.get_paths().items() if key in ("stdlib", "platstdlib", "purelib",
                                                                               "platlib")}
    folders.update(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        folders.add(site.getusersitepackages())
    return tuple(sorted(os.path.join(os.path.abspath(folder), "") for folder in folders if folder))


_VALUE_READ = (
    "the step read a tensor's value{where} ({op}: .item(), float(t), a branch or a shape that depends on the values), "
    "which an estimate without memory does not have. Leave value reads out of the step you estimate (the loss's "
    ".item() for logging, say), or give data-dependent shapes their largest size."
)
#: torch's modules that read tensors' values in a training step (module name prefix and suffix),
#: and what to do instead in the step estimated.
_READERS = (
    ("torch.", ".grad_scaler", (
        " A torch.amp.GradScaler reads whether the gradients are finite at each step: estimate the step without "
        "it (loss.backward() for scaler.scale(loss).backward(), optimizer.step() for scaler.step(optimizer), no "
        "scaler.update()); the scaler's own tensors are a few scalars.")),
    ("torch.utils.data.", "", (
        " A DataLoader draws its order and its workers' seeds as tensors' values: give the step its batch "
        "instead, made inside it at the batch's shape (torch.rand, torch.randint) or passed as an argument "
        "(ds.estimate_memory(step, x, y): fake copies of real tensors).")),
)
_NO_CUDA = (
    "the step runs on CUDA tensors and torch has no CUDA device here: even without their memory, torch "
    "cannot run it (its autograd runs a CUDA backward pass on a CUDA device; a torch built without CUDA "
    "makes no CUDA tensor). To plan a GPU step on this machine, build it on \"cpu\": its tensors "
    "are counted the same (give its optimiser foreach=True to plan CUDA's default path). torch said: {error}"
)
_VIRTUAL = (
    "the step uses devshim's virtual GPU {device}, whose tensors are host memory torch's FakeTensorMode "
    "cannot stand in for. To plan the GPU, build the step on \"cpu\" (give its optimiser foreach=True: "
    "virtual GPUs, like CUDA, take that path) and estimate that; or measure the step where it runs: "
    "with ds.memory_peak(\"gpu:0\") on the virtual GPU."
)
_REAL_TENSOR = (
    "the step used a tensor made outside the estimate{where} (a model, an optimiser or a batch built before "
    "ds.estimate_memory was called that a closure holds): it has memory of its own and cannot take part. Pass "
    "the model and the tensors as arguments (ds.estimate_memory(step, model, x, y): fake copies of them, counted "
    "from the start), or build them inside the step; an optimiser is made inside the step, from the model it gets."
)


@functools.cache
def _counter(base) -> type:
    """The dispatch mode (a subclass of torch's `TorchDispatchMode`, `base`) that counts storages."""
    return type("StorageCount", (_StorageCount, base), {})


class _StorageCount:
    """Bytes of the live storages each operation made, per device, and the most at once."""

    def __init__(self) -> None:
        super().__init__()
        self.used: dict = {}
        self.peak: dict = {}
        self._held: dict = {}  # id(storage) -> (weak reference, device, bytes)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        device = kwargs.get("device")  # a factory's or a copy's
        if device is not None:
            _refuse_virtual(device)
        result = func(*args, **kwargs)
        self.count(result)
        return result

    def count(self, value) -> None:
        if isinstance(value, torch.Tensor):
            self._add(value)
        elif isinstance(value, (tuple, list)):
            for item in value:
                self.count(item)

    def _add(self, tensor) -> None:
        storage = tensor.untyped_storage()
        key, size = id(storage), storage.nbytes()
        held = self._held.get(key)
        if held is not None and held[0]() is storage:
            grown = size - held[2]  # resized in place (resize_, an out= that grew)
            if grown:
                self._held[key] = (held[0], held[1], size)
                self._change(held[1], grown)
            return
        device = tensor.device
        ref = weakref.ref(storage, lambda _, key=key: self._release(key))
        self._held[key] = (ref, device, size)
        self._change(device, size)

    def _release(self, key) -> None:
        held = self._held.pop(key, None)
        if held is not None:
            self._change(held[1], -held[2])

    def _change(self, device, size: int) -> None:
        used = self.used[device] = self.used.get(device, 0) + size
        if used > self.peak.get(device, 0):
            self.peak[device] = used


def _as_fake(mode, count, nest):
    """The tensors and models in `nest` (the arguments) as fake ones (FakeCopyMode is on: a
    model's deep copy is made of fake tensors), counted from the start."""
    if isinstance(nest, torch.Tensor):
        _refuse_virtual(nest.device)
        fake = mode.from_tensor(nest)
        count.count(fake)
        return fake
    if isinstance(nest, torch.nn.Module):
        for tensor in (*nest.parameters(), *nest.buffers()):
            _refuse_virtual(tensor.device)
        fake = copy.deepcopy(nest)
        count.count([*fake.parameters(), *fake.buffers()])
        return fake
    if isinstance(nest, (tuple, list)):
        return type(nest)(_as_fake(mode, count, item) for item in nest)
    if isinstance(nest, dict):
        return {key: _as_fake(mode, count, value) for key, value in nest.items()}
    return nest


def _refuse_virtual(device) -> None:
    if device.type == VIRTUAL_TYPE:
        raise MemoryEstimateError(_VIRTUAL.format(device=device))


def _figures_of(count, kept: dict, arguments: dict) -> dict:
    """The estimate of the device that held the most: an accelerator's before the CPU's."""
    device = max(count.peak, key=lambda d: (d.type != "cpu", count.peak[d]), default=torch.device("cpu"))
    peak = count.peak.get(device, 0)
    return {
        "peak": peak, "kept": kept.get(device, 0), "device": str(device),
        "method": "torch FakeTensorMode: the bytes of every storage the step makes, on its device, while it lives",
        "details": {"arguments": arguments.get(device, 0), "peak by device": {str(d): p for d, p in count.peak.items()}},
    }
