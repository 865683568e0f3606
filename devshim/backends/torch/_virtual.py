"""Virtual GPUs for PyTorch: ``DEVSHIM_VIRTUAL_DEVICES=N`` on the torch backend.

Imported only when virtual devices are asked for; nothing here runs otherwise.

What torch sees
    torch's open registration slot for an out-of-tree device ("privateuse1") is
    renamed ``vgpu`` and given a device module (``torch.vgpu``), a Python device
    guard and hooks (``torch._C._acc``), so ``torch.device("vgpu", 1)`` is a
    device torch accepts everywhere a device goes: factories
    (``torch.ones(2, device=...)``), ``Tensor.to``, ``Module.to``. devshim's
    virtual ``gpu:i`` is ``vgpu:i``; no host device indices are involved (the
    CPU is torch's one CPU, as always). torch's availability probes
    (``torch.accelerator.is_available()``) answer False, as on the CPU machine
    this is, so torch code that switches on them takes its CPU path.

What a tensor on one is
    a ``VirtualTensor``: a ``torch.Tensor`` subclass whose device is ``vgpu:i``
    and whose values live in an ordinary CPU tensor (``_host``). Every ATen
    operation on it arrives in ``VirtualTensor.__torch_dispatch__``, below
    autograd, which checks devices the way CUDA does, runs the operation on the
    host tensors, and wraps the results on the same virtual GPU. So autograd,
    optimizers and ``nn.Module`` code run unchanged and compute the same numbers
    as on the CPU. Factory calls that name a virtual GPU reach torch's
    privateuse1 dispatch key, where a fallback kernel runs them on the CPU and
    wraps the result. Sizes and strides are read from the host tensor
    (``dispatch_sizes_strides_policy="sizes"``), so in-place resizes stay right.

What CUDA rules are simulated
    - tensors of two devices in one operation raise the RuntimeError CUDA raises
      ("Expected all tensors to be on the same device, but found at least two
      devices, vgpu:0 and vgpu:1!"); 0-dim CPU tensors mix, as on CUDA, and
      indexing accepts CPU index tensors, as on CUDA;
    - ``Tensor.numpy()`` and ``numpy.asarray(t)`` refuse, as on CUDA: copy first
      (``t.cpu()``, ``ds.to_numpy(t)``); ``item()``, ``float(t)``, ``tolist()``
      and printing read the values, as on CUDA (a sync there).

Host reads and mixed-device operations pass through torch's function layer
under their usual names (``torch.Tensor.tolist``, ``torch.Tensor.numpy``,
``torch.Tensor.__float__``, ``torch.add``, ...), so a ``TorchFunctionMode``
such as devshim's transfer guard sees them on virtual tensors exactly as on
CUDA ones: the class handles its special cases in ``__torch_function__``,
after any mode.

Autograd: torch's engine keeps one worker queue per device *index* and its
Python-registered device guard reports a single device, so backward passes run
on the calling thread, as they do for CPU tensors: every operation on a virtual
tensor switches autograd's multithreading off for the thread it runs in
(``torch.autograd.set_multithreading_enabled(False)``). Values are unchanged.

Example:
    >>> install(2)
    >>> x = torch.ones(2, 3, device="vgpu:1")
    >>> (x * 2).sum().item()
    12.0
"""

from __future__ import annotations

import threading
import types
from collections import OrderedDict

import torch

from devshim import settings
from devshim.guard.hooks import original_of
from devshim.backends.torch.core import VIRTUAL_TYPE
from devshim.errors import (
    BackendError, DeviceMismatchError, DeviceUnavailableError, NotOnHostError, UnsupportedValueError,
)

__all__ = ["install", "installed", "device_count", "set_count", "VirtualTensor", "VIRTUAL_TYPE"]

_aten = torch.ops.aten
_CPU = torch.device("cpu")
_lock = threading.Lock()
_count = 0          # virtual GPUs presented now (0 once turned off; tensors made before still work)
_installed = False
_keep: list = []    # registrations that must live as long as the process
_DisableTorchFunctionSubclass = torch._C.DisableTorchFunctionSubclass


# ------------------------------------------------------------------ installing


def installed() -> bool:
    """Whether this process has the ``vgpu`` device (it stays once installed).

    Example:
        >>> installed()
        True
    """
    return _installed


def device_count() -> int:
    """How many virtual GPUs exist now (``torch.vgpu.device_count()``).

    Example:
        >>> device_count()
        2
    """
    return _count


def install(count: int) -> None:
    """Present ``count`` virtual GPUs to torch as ``vgpu:0`` ... ``vgpu:{count-1}``.

    The first call registers the ``vgpu`` device with torch (once per process:
    torch cannot unregister it); later calls only change the count.

    Example:
        >>> install(2)
        >>> torch.vgpu.device_count()
        2
    """
    global _count, _installed
    with _lock:
        if not _installed:
            _register()
            _installed = True
        _count = count
    from devshim._device import register_platform

    register_platform(VIRTUAL_TYPE)  # so "vgpu:1" reads as a spec


def set_count(count: int) -> None:
    """Change how many virtual GPUs exist (0: none, though tensors made on them still work).

    Example:
        >>> set_count(3)
    """
    global _count
    with _lock:
        _count = count


def _refuse(reason: str) -> BackendError:
    return BackendError(
        f"devshim cannot present virtual GPUs on this torch ({torch.__version__}): {reason}. "
        f"Unset {settings.VIRTUAL_DEVICES_VAR}, or use a torch release that has it (2.13 does)."
    )


def _register() -> None:
    acc = getattr(torch._C, "_acc", None)
    if acc is None or not hasattr(acc, "register_python_privateuseone_device_guard"):
        raise _refuse("it has no Python-registrable device guard (torch._C._acc)")
    if not hasattr(torch.library.Library, "fallback"):
        raise _refuse("torch.library.Library has no fallback()")
    taken = torch._C._get_privateuse1_backend_name()
    if taken != "privateuseone":
        raise BackendError(
            f"torch's slot for an out-of-tree device (privateuse1) is already taken by {taken!r}, "
            f"so devshim cannot add its virtual GPUs to this process. Unset "
            f"{settings.VIRTUAL_DEVICES_VAR} here, or run the tests without the {taken!r} plug-in."
        )

    class Hooks(acc.PrivateUse1Hooks):
        def is_available(self) -> bool:
            # torch's availability probes (this, and torch.vgpu.is_available(), which
            # torch.accelerator.is_available() asks) answer False, as on the CPU machine this
            # is: torch code that switches on them (DataLoader pinning, synchronising in
            # torch.utils.benchmark, streams, distributed) then takes its CPU path instead of
            # asking a Python-defined device for what it cannot give (pinned memory, streams).
            return False

        def has_primary_context(self, index) -> bool:
            return True

        def is_built(self) -> bool:
            return True

    class Guard(acc.DeviceGuard):
        def type_(self):
            return torch._C._autograd.DeviceType.PrivateUse1

    hooks, guard = Hooks(), Guard()
    torch.utils.rename_privateuse1_backend(VIRTUAL_TYPE)
    torch._register_device_module(VIRTUAL_TYPE, _device_module())
    torch.utils.generate_methods_for_privateuse1_backend()   # Tensor.vgpu(), Module.vgpu(), is_vgpu
    if not acc.register_python_privateuseone_hook(hooks):
        raise _refuse("another privateuse1 hook is registered already")
    if not acc.register_python_privateuseone_device_guard(guard):
        raise _refuse("another privateuse1 device guard is registered already")

    # Factories naming a virtual GPU reach the PrivateUse1 key with no tensor to dispatch
    # on; the fallback runs them on the CPU. Operations that reach the key *with* virtual
    # tensors (while torch switches Python dispatch off, as torch.tensor(..., device=)
    # does for its copy) need per-operator kernels: Python fallbacks are not consulted then.
    fallback = torch.library.Library("_", "IMPL")
    fallback.fallback(_backend_kernel, "PrivateUse1")
    kernels = torch.library.Library("aten", "IMPL")
    for name in ("copy_", "_copy_from", "_copy_from_and_resize", "_to_copy", "lift_fresh",
                 "detach", "alias", "view", "_local_scalar_dense", "fill_.Scalar", "zero_",
                 "empty.memory_format", "empty_strided"):
        op = _overload(name)
        kernels.impl(name, _kernel_for(op), "PrivateUse1")
    _keep.extend([hooks, guard, fallback, kernels])


def _overload(name: str):
    packet, _, overload = name.partition(".")
    return getattr(getattr(_aten, packet), overload or "default")


def _kernel_for(op):
    def kernel(*args, **kwargs):
        return _backend_kernel(op, *args, **kwargs)

    return kernel


def _device_module() -> types.ModuleType:
    """``torch.vgpu``: what torch and user code ask a device module."""
    module = types.ModuleType(
        f"torch.{VIRTUAL_TYPE}",
        "devshim's virtual GPUs (DEVSHIM_VIRTUAL_DEVICES). Values live in host memory; "
        "random numbers come from the CPU generator (torch.manual_seed seeds it).",
    )

    def is_available() -> bool:
        """False, as the hooks say: torch.accelerator.is_available() asks this (see _register)."""
        return False

    def is_initialized() -> bool:
        return True

    def current_device() -> int:
        return 0

    def synchronize(device=None) -> None:
        """Nothing to wait for: virtual GPUs compute synchronously on the host."""

    def manual_seed(seed) -> None:
        """Random numbers on virtual GPUs come from the CPU generator: seed it with torch.manual_seed."""

    def get_amp_supported_dtype() -> list:
        """None: mixed precision is not simulated, so torch.autocast("vgpu") warns that it is
        disabling itself and code runs in full precision (torch asks this even of disabled
        autocast contexts, as checkpointing opens)."""
        return []

    module.is_available = is_available
    module.is_initialized = is_initialized
    module.device_count = device_count
    module.current_device = current_device
    module.synchronize = synchronize
    module.manual_seed = manual_seed
    module.manual_seed_all = manual_seed
    module.get_amp_supported_dtype = get_amp_supported_dtype
    module._is_in_bad_fork = lambda: False
    return module


# ------------------------------------------------------------------ the tensor


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
        # devshim's transfer guard replaces some of torch.Tensor's reading methods while it
        # checks; torch then hands us its wrapper, which names the method it wraps.
        special = _SPECIAL.get(original_of(func))  # the guard wrapper tag
        if special is not None:
            return special(*args, **(kwargs or {}))
        with _DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return _dispatch(func, args, kwargs or {})

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


# ------------------------------------------------------------------ host reads


def _not_on_host(self) -> NotOnHostError:
    return NotOnHostError(
        f"can't convert {self.device} device type tensor to numpy. Use Tensor.cpu() to copy the "
        f"tensor to host memory first. ({self.device} is a devshim virtual GPU and refuses "
        f"implicit host views as CUDA does; ds.to_numpy(t) copies for you.)"
    )


def _tolist(self, *args, **kwargs):
    return self._host.tolist()


def _numpy(self, *, force: bool = False):
    if not force:
        raise _not_on_host(self)
    return self._host.detach().clone().numpy(force=True)


def _array(self, dtype=None, *args, **kwargs):
    raise _not_on_host(self)


def _format(self, spec):
    if self.dim() == 0:
        return self.item().__format__(spec)
    return object.__format__(self, spec)


def _repr(self, *args, **kwargs):
    # torch prints a tensor subclass under its class name; print as a CUDA tensor prints.
    prefix = f"{type(self).__name__}("
    text = torch._tensor_str._str(self)
    param = getattr(self, "_is_param", False)
    if param and text.startswith("Parameter(") and text.endswith(")"):
        text = text[len("Parameter("):-1]
    if text.startswith(prefix):
        shift = len(prefix) - len("tensor(")
        lines = text.split("\n")
        lines[0] = "tensor(" + lines[0][len(prefix):]
        lines[1:] = [line[shift:] if line[:shift].isspace() else line for line in lines[1:]]
        text = "\n".join(lines)
    if param:
        text = "Parameter containing:\n" + text
    return text


def _storage(self):
    return self._host.untyped_storage()


def _data_ptr(self):
    return self._host.data_ptr()


def _set_data(self, value):
    if not (isinstance(self, VirtualTensor) and isinstance(value, VirtualTensor)):
        raise UnsupportedValueError(
            f"t.data = <a {value.device} tensor> cannot turn a {self.device} tensor into a "
            f"{value.device} one in place when one of them is on a devshim virtual GPU (on CUDA "
            f"it could). Assign a tensor on t's device, e.g. t.data = value.to(t.device), or move "
            f"the whole module with module.to(device)."
        )
    with _DisableTorchFunctionSubclass():
        torch.Tensor.data.__set__(self, value)
    self._host = value._host


def _new_tensor(self, data, *args, **kwargs):
    # torch resolves the device of new_tensor through the device guard's *current*
    # device, which a Python device guard cannot hold: name it.
    if kwargs.get("device") is None and len(args) < 2:
        kwargs["device"] = self.device
    with _DisableTorchFunctionSubclass():
        return torch.Tensor.new_tensor(self, data, *args, **kwargs)


def _reduce(self, proto):
    # torch's own format for tensors of a storage-less out-of-tree device: the values as
    # a CPU tensor and the device name. torch.load (weights_only too) rebuilds it on a
    # virtual GPU, in a process that has them.
    if getattr(self, "_is_param", False):
        plain = self.detach()
        return (torch._utils._rebuild_parameter, (plain, self.requires_grad, OrderedDict()))
    host = self._host.detach().clone()
    return (torch._utils._rebuild_device_tensor_from_cpu_tensor,
            (host, self.dtype, str(self.device), self.requires_grad))


_SPECIAL = {
    torch.Tensor.tolist: _tolist,
    torch.Tensor.numpy: _numpy,
    torch.Tensor.__array__: _array,
    torch.Tensor.__format__: _format,
    torch.Tensor.__repr__: _repr,
    torch.Tensor.untyped_storage: _storage,
    torch.Tensor.data_ptr: _data_ptr,
    torch.Tensor.data.__set__: _set_data,
    torch.Tensor.new_tensor: _new_tensor,
    torch.Tensor.__reduce_ex__: _reduce,
}


# ------------------------------------------------------------------ running operations


def _single_threaded_autograd() -> None:
    # See the module docstring: torch's engine has one queue for the single device the
    # Python guard reports, so a backward pass over vgpu:1 must run on the calling thread.
    # Checked on every call, not once per thread: while it runs a node, the engine puts
    # back the thread state captured when the backward pass began, and the node that
    # hands gradients to a virtual GPU is the one that must see the switch.
    if _multithreading_enabled():
        _set_multithreading_enabled(False)


_multithreading_enabled = torch._C._is_multithreading_enabled
_set_multithreading_enabled = torch._C._set_multithreading_enabled


# Metadata queries (dispatch_sizes_strides_policy="sizes"): answered from the host tensor.
_METADATA = {
    _aten.dim.default: lambda h: h.dim(),
    _aten.sym_size.default: lambda h: h.size(),
    _aten.sym_stride.default: lambda h: h.stride(),
    _aten.sym_storage_offset.default: lambda h: h.storage_offset(),
    _aten.sym_numel.default: lambda h: h.numel(),
    _aten.is_contiguous.default: lambda h: h.is_contiguous(),
    _aten.is_contiguous.memory_format: lambda h, mf: h.is_contiguous(memory_format=mf),
    _aten.is_strides_like_format.default: lambda h, mf: _aten.is_strides_like_format.default(h, mf),
    _aten.is_non_overlapping_and_dense.default: lambda h: _aten.is_non_overlapping_and_dense.default(h),
}

# Operations that take tensors of any devices: copies, and a comparison of shapes.
_ANY_DEVICE = frozenset(op for op in (
    _aten.copy_.default, _aten._copy_from.default, _aten._copy_from_and_resize.default,
    _aten._to_copy.default, _aten.is_same_size.default,
))

# Arguments CUDA kernels take from the CPU (of any shape): index tensors, CTC lengths, and
# the batch sizes of packed sequences. Anywhere else they must match the other tensors.
_HOST_ARGUMENT_NAMES = {
    **dict.fromkeys(("index", "index_put", "index_put_", "_index_put_impl_", "_unsafe_index",
                     "_unsafe_index_put"), frozenset({"indices"})),
    **dict.fromkeys(("ctc_loss", "_ctc_loss", "_ctc_loss_backward"),
                    frozenset({"input_lengths", "target_lengths"})),
    "_pack_padded_sequence": frozenset({"lengths"}),
    **dict.fromkeys(("_pack_padded_sequence_backward", "_pad_packed_sequence", "lstm", "gru",
                     "rnn_tanh", "rnn_relu"), frozenset({"batch_sizes"})),
}
_host_arguments: dict = {}


def _host_argument_positions(func):
    """Positions and names of ``func``'s arguments that may stay on the CPU, or None."""
    try:
        return _host_arguments[func]
    except KeyError:
        pass
    names = _HOST_ARGUMENT_NAMES.get(func.__name__.split(".")[0])
    found = None
    if names:
        positions = {i for i, arg in enumerate(func._schema.arguments) if arg.name in names}
        found = (frozenset(positions), names) if positions else None
    _host_arguments[func] = found
    return found


def _is_virtual_type(device) -> bool:
    return device.type == VIRTUAL_TYPE


def _target(device):
    """``device`` (a factory's ``device=``) as a torch.device; a bare "vgpu" is vgpu:0, the
    current device (a Python device guard cannot hold another current device)."""
    device = torch.device(device)
    if device.type != VIRTUAL_TYPE:
        return device
    index = 0 if device.index is None else device.index
    if index >= _count:
        raise DeviceUnavailableError(
            f"{VIRTUAL_TYPE}:{index} does not exist: devshim presents {_count} virtual GPU"
            f"{'s' if _count != 1 else ''} ({settings.VIRTUAL_DEVICES_VAR}={_count}). Use "
            f"ds.try_gpu({index}) to fall back to the CPU, or ask for more virtual GPUs."
        )
    return device if device.index is not None else torch.device(VIRTUAL_TYPE, index)


def _unwrap(value, seen: list, host_ok: bool = False):
    """``value`` with virtual tensors replaced by their host tensors; the device of every
    tensor that must agree with the others goes into ``seen``. CPU tensors agree with
    everything when they are 0-dim (as on CUDA) or ``host_ok`` (an argument CUDA reads
    from the CPU)."""
    if isinstance(value, VirtualTensor):
        seen.append(value.device)
        return value._host
    if isinstance(value, torch.Tensor):
        if value.device.type != "cpu" or not (host_ok or value.dim() == 0):
            seen.append(value.device)
        return value
    if type(value) is list or type(value) is tuple:
        return type(value)([_unwrap(item, seen, host_ok) for item in value])
    return value


def _has_virtual(values) -> bool:
    for value in values:
        if isinstance(value, VirtualTensor):
            return True
        if (type(value) is list or type(value) is tuple) and _has_virtual(value):
            return True
    return False


def _mismatch(func, first, other) -> DeviceMismatchError:
    if _is_virtual_type(other) and not _is_virtual_type(first):
        first, other = other, first
    return DeviceMismatchError(
        f"Expected all tensors to be on the same device, but found at least two devices, "
        f"{first} and {other}! ({func} got tensors on both; {first} is a devshim virtual GPU, "
        f"which refuses mixed devices as CUDA does. Copy one side first, e.g. "
        f"ds.to_device(t, {str(first)!r}) or t.to({str(first)!r}).)"
    )


def _dispatch(func, args, kwargs):
    """Run ATen operation ``func`` on the host tensors behind ``args``, with CUDA's device rules."""
    _single_threaded_autograd()
    metadata = _METADATA.get(func)
    if metadata is not None:
        return metadata(args[0]._host, *args[1:])

    if func.__name__.startswith("_foreach_"):
        return _dispatch_foreach(func, args, kwargs)
    seen: list = []
    host_arguments = _host_argument_positions(func)
    if host_arguments is None:
        host_args = [_unwrap(arg, seen) for arg in args]
        host_kwargs = {name: _unwrap(value, seen) for name, value in kwargs.items()}
    else:
        positions, names = host_arguments
        host_args = [_unwrap(arg, seen, i in positions) for i, arg in enumerate(args)]
        host_kwargs = {name: _unwrap(value, seen, name in names) for name, value in kwargs.items()}

    if func not in _ANY_DEVICE and seen:
        first = seen[0]
        for device in seen:
            if device != first:
                raise _mismatch(func, first, device)

    # Where the result goes: device= when given, else where the (virtual) inputs are.
    out = None
    asked = host_kwargs.get("device")
    if asked is not None:
        target = _target(asked)
        if _is_virtual_type(target):
            host_kwargs["device"] = _CPU
            out = target
    else:
        for device in seen:
            if _is_virtual_type(device):
                out = device
                break
        else:
            for value in (*args, *kwargs.values()):
                if isinstance(value, VirtualTensor):
                    out = value.device
                    break

    result = _HOST_KERNELS.get(func, func)(*host_args, **host_kwargs)
    if out is None:
        return result
    aliases = _write_aliases(func)
    if aliases is None:
        return _wrap(result, out)
    # In-place and out= operations return their (already updated) argument itself.
    returned = [_argument(args, kwargs, where) if where is not None else _wrap(value, out)
                for where, value in zip(aliases, result if len(aliases) > 1 else (result,))]
    return returned[0] if len(aliases) == 1 else tuple(returned)


def _dispatch_foreach(func, args, kwargs):
    """``torch._foreach_*``: CUDA's rule holds per position (the i-th tensors of every list,
    and any single tensor argument, share a device), and each result lands on its position's device."""
    values = (*args, *kwargs.values())
    lists = [v for v in values if (type(v) is list or type(v) is tuple) and _has_tensor(v)]
    singles = [v for v in values if isinstance(v, torch.Tensor)]
    places = []
    for position in range(len(lists[0]) if lists else 0):
        seen: list = []
        for value in (*(items[position] for items in lists), *singles):
            _unwrap(value, seen)
        for device in seen:
            if device != seen[0]:
                raise _mismatch(func, seen[0], device)
        places.append(next((device for device in seen if _is_virtual_type(device)), None))
    ignored: list = []
    result = func(*[_unwrap(arg, ignored) for arg in args],
                  **{name: _unwrap(value, ignored) for name, value in kwargs.items()})
    if type(result) is list or type(result) is tuple:  # in-place forms return nothing
        return type(result)([VirtualTensor(item, place) if place is not None else item
                             for item, place in zip(result, places)])
    return result


def _has_tensor(values) -> bool:
    return any(isinstance(value, torch.Tensor) for value in values)


def _argument(args, kwargs, where):
    position, name = where
    return args[position] if position < len(args) else kwargs[name]


def _wrap(value, device):
    if isinstance(value, torch.Tensor):
        return VirtualTensor(value, device)
    if type(value) is list or type(value) is tuple:
        return type(value)([_wrap(item, device) for item in value])
    return value


_ALIASES: dict = {}


def _write_aliases(func):
    """For each return of ``func``: ``(position, name)`` of the argument it is (``a!``), or
    None; None for the whole when no return is a mutated argument."""
    try:
        return _ALIASES[func]
    except KeyError:
        pass
    schema = func._schema
    found = []
    for ret in schema.returns:
        info = ret.alias_info
        where = None
        if info is not None and info.is_write:
            for position, arg in enumerate(schema.arguments):
                ainfo = arg.alias_info
                if ainfo is not None and ainfo.is_write and set(ainfo.before_set) & set(info.before_set):
                    where = (position, arg.name)
                    break
        found.append(where)
    result = tuple(found) if any(where is not None for where in found) else None
    _ALIASES[func] = result
    return result


# ------------------------------------------------------------------ GPU-only kernels

# torch's composite code picks fused kernels that exist for GPUs only (CUDA, and
# out-of-tree devices like this one) and not for the CPU. Each is run here as the same
# math on host tensors; a forward and its backward agree on the workspace they share.


def _fused_lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    gates = input_gates + input_bias if input_bias is not None else input_gates
    hidden = hidden_gates + hidden_bias if hidden_bias is not None else hidden_gates
    gates = gates + hidden  # summed as the CPU's LSTM cell sums them
    ingate, forgetgate, cellgate, outgate = gates.chunk(4, 1)
    ingate, forgetgate, outgate = ingate.sigmoid(), forgetgate.sigmoid(), outgate.sigmoid()
    cellgate = cellgate.tanh()
    cy = forgetgate * cx + ingate * cellgate
    hy = outgate * cy.tanh()
    workspace = torch.cat([ingate, forgetgate, cellgate, outgate], 1)
    return hy, cy, workspace


def _fused_lstm_cell_backward(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    ingate, forgetgate, cellgate, outgate = workspace.chunk(4, 1)
    grad_hy = torch.zeros_like(cy) if grad_hy is None else grad_hy
    grad_cy = torch.zeros_like(cy) if grad_cy is None else grad_cy
    tanh_cy = cy.tanh()
    grad_outgate = grad_hy * tanh_cy * outgate * (1 - outgate)
    grad_c = grad_hy * outgate * (1 - tanh_cy * tanh_cy) + grad_cy
    grad_ingate = grad_c * cellgate * ingate * (1 - ingate)
    grad_forgetgate = grad_c * cx * forgetgate * (1 - forgetgate)
    grad_cellgate = grad_c * ingate * (1 - cellgate * cellgate)
    grad_gates = torch.cat([grad_ingate, grad_forgetgate, grad_cellgate, grad_outgate], 1)
    grad_bias = grad_gates.sum(0) if has_bias else None
    return grad_gates, grad_c * forgetgate, grad_bias


def _fused_gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    gates = input_gates + input_bias if input_bias is not None else input_gates
    hidden = hidden_gates + hidden_bias if hidden_bias is not None else hidden_gates
    i_r, i_i, i_n = gates.chunk(3, 1)
    h_r, h_i, h_n = hidden.chunk(3, 1)
    resetgate = (i_r + h_r).sigmoid()
    inputgate = (i_i + h_i).sigmoid()
    newgate = (i_n + resetgate * h_n).tanh()
    hy = (hx - newgate) * inputgate + newgate
    workspace = torch.cat([resetgate, inputgate, newgate, hx, h_n], 1)
    return hy, workspace


def _fused_gru_cell_backward(grad_hy, workspace, has_bias):
    resetgate, inputgate, newgate, hx, h_n = workspace.chunk(5, 1)
    grad_inputgate = grad_hy * (hx - newgate) * inputgate * (1 - inputgate)
    grad_hx = grad_hy * inputgate
    grad_in = grad_hy * (1 - inputgate) * (1 - newgate * newgate)
    grad_hn = grad_in * resetgate
    grad_resetgate = grad_in * h_n * resetgate * (1 - resetgate)
    grad_input_gates = torch.cat([grad_resetgate, grad_inputgate, grad_in], 1)
    grad_hidden_gates = torch.cat([grad_resetgate, grad_inputgate, grad_hn], 1)
    if not has_bias:
        return grad_input_gates, grad_hidden_gates, grad_hx, None, None
    return (grad_input_gates, grad_hidden_gates, grad_hx,
            grad_input_gates.sum(0), grad_hidden_gates.sum(0))


_HOST_KERNELS = {
    _aten._thnn_fused_lstm_cell.default: _fused_lstm_cell,
    _aten._thnn_fused_lstm_cell_backward_impl.default: _fused_lstm_cell_backward,
    _aten._thnn_fused_gru_cell.default: _fused_gru_cell,
    _aten._thnn_fused_gru_cell_backward.default: _fused_gru_cell_backward,
}


def _backend_kernel(op, *args, **kwargs):
    """The PrivateUse1 kernel: factories asked for a virtual GPU run on the CPU; operations
    that arrive here with virtual tensors run as ``__torch_dispatch__`` would run them."""
    _single_threaded_autograd()
    if _has_virtual(args) or _has_virtual(kwargs.values()):
        return _dispatch(op, args, kwargs)
    target = _target(kwargs.get("device") or VIRTUAL_TYPE)
    kwargs = dict(kwargs)
    kwargs["device"] = _CPU
    return _wrap(op(*args, **kwargs), target)
