"""Registering the `vgpu` device with torch, once per process.

torch's open registration slot for an out-of-tree device ("privateuse1") is renamed
`vgpu` and given a device module (`torch.vgpu`), a Python device guard and hooks
(`torch._C._acc`); PrivateUse1 kernels run factories that name a virtual GPU on the
CPU and wrap the result. `install(count)` does it (once) and sets how many exist.

Example:
    >>> install(2)
    >>> torch.vgpu.device_count()
    2
"""

from __future__ import annotations

import threading
import types

import torch

from devshim import settings
from devshim.backends.torch import _internals
from devshim.backends.torch._names import VIRTUAL_TYPE
from devshim.backends.torch._virtual import support
from devshim.backends.torch._virtual.support import TESTED, refuse as _refuse
from devshim.backends.torch._virtual import count as _counter
from devshim.backends.torch._virtual import dlpack, generators, lazy, parallel, saving
from devshim.backends.torch._virtual.dispatch import backend_kernel, quantized_kernel
from devshim.backends.torch._virtual.tensor import VirtualTensor
from devshim.errors import BackendError

__all__ = ["install", "installed", "TESTED"]

_all_operator_names, _has_kernel_for = _internals.OPERATOR_LISTING.get()  # operators; has a kernel for a key

_aten = torch.ops.aten
_lock = threading.Lock()
_installed = False
_keep: list = []    # registrations that must live as long as the process
device_count = _counter.device_count


def _backend_kernel(op, *args, **kwargs):
    """The PrivateUse1 kernel: factories on the CPU, operations on virtual tensors as dispatched."""
    return backend_kernel(VirtualTensor, op, *args, **kwargs)


def installed() -> bool:
    """Whether this process has the `vgpu` device (it stays once installed).

    Example:
        >>> installed()
        True
    """
    return _installed


def install(count: int) -> None:
    """Present `count` virtual GPUs to torch as `vgpu:0` ... `vgpu:{count-1}`.

    The first call registers the `vgpu` device with torch (once per process:
    torch cannot unregister it); later calls only change the count.

    Example:
        >>> install(2)
        >>> torch.vgpu.device_count()
        2
    """
    global _installed
    with _lock:
        if not _installed:
            _register()
            _installed = True
        _counter.set_count(count)
    from devshim._device import register_platform

    register_platform(VIRTUAL_TYPE)  # so "vgpu:1" reads as a spec


def _register() -> None:
    # The package refused an older torch, or one without the private names below, when it was
    # imported (support.check).
    support.warn_if_newer()
    hooks_base, guard_base, register_hooks, register_guard, private_use_1 = _internals.ACCELERATION_HOOKS.get()
    if not hasattr(torch.library.Library, "fallback"):
        raise _refuse("torch.library.Library has no fallback()")
    taken = _internals.PRIVATEUSE1_NAME.get()()
    if taken != "privateuseone":
        raise BackendError(
            f"torch's slot for an out-of-tree device (privateuse1) is already taken by {taken!r}, "
            f"so devshim cannot add its virtual GPUs to this process. Unset "
            f"{settings.VIRTUAL_DEVICES_VAR} here, or run the tests without the {taken!r} plug-in."
        )

    class Hooks(hooks_base):
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

    multithreading_enabled, set_multithreading_enabled = _internals.AUTOGRAD_THREADS.get()

    class Guard(guard_base):
        def type_(self):
            # torch's autograd engine asks this in the thread that starts a backward pass,
            # before it picks a worker queue: torch.autograd.backward/grad may be the first
            # thing a thread does with a virtual tensor (see dispatch.single_threaded_autograd).
            if multithreading_enabled():  # single_threaded_autograd(), inlined: a hot path
                set_multithreading_enabled(False)
            return private_use_1

    hooks, guard = Hooks(), Guard()
    torch.utils.rename_privateuse1_backend(VIRTUAL_TYPE)
    _internals.REGISTER_DEVICE_MODULE.get()(VIRTUAL_TYPE, _device_module())
    torch.utils.generate_methods_for_privateuse1_backend()   # Tensor.vgpu(), Module.vgpu(), is_vgpu
    if not register_hooks(hooks):
        raise _refuse("another privateuse1 hook is registered already")
    if not register_guard(guard):
        raise _refuse("another privateuse1 device guard is registered already")

    fallback, kernels = _register_kernels()
    generators.install()  # torch.Generator(device="vgpu:i")
    saving.install()  # torch.save/torch.load tag and restore virtual GPUs' storages
    dlpack.install()  # torch.utils.dlpack.to_dlpack of a virtual tensor shares its memory
    lazy.install()  # torch.nn.Lazy* modules' uninitialised tensors move to virtual GPUs
    parallel.install()  # nn.DataParallel, scatter, gather, replicate, parallel_apply
    # Optimisers and clip_grad_norm_ take their foreach kernels by default, as on CUDA (the path
    # sets a step's peak: its temporaries span all the parameters at once).
    _internals.take_foreach_path(VirtualTensor)
    _keep.extend([hooks, guard, fallback, kernels])


def _register_kernels() -> tuple:
    """The PrivateUse1 kernels: a fallback for every operator, and per-operator kernels."""
    # Factories naming a virtual GPU reach the PrivateUse1 key with no tensor to dispatch
    # on; the fallback runs them on the CPU. Operations that reach the key *with* virtual
    # tensors (while torch switches Python dispatch off, as torch.tensor(..., device=)
    # does for its copy) need per-operator kernels: Python fallbacks are not consulted then.
    fallback = torch.library.Library("_", "IMPL")
    fallback.fallback(_backend_kernel, "PrivateUse1")
    # A quantized tensor on a virtual GPU is refused by name (torch's quantized internals
    # would take a wrapper for one of their own tensors).
    fallback.fallback(quantized_kernel, "QuantizedPrivateUse1")
    kernels = torch.library.Library("aten", "IMPL")
    # Operators with a kernel for every device (structured ones: neg, mul, ...) would run it
    # on a plain tensor of a virtual GPU (one torch imported from a virtual tensor's DLPack
    # capsule) instead of the fallback: the virtual GPU takes them too.
    structured = [name[len("aten::"):] for name in _all_operator_names()
                  if name.startswith("aten::") and _has_kernel_for(name, "CompositeExplicitAutogradNonFunctional")]
    for name in ("copy_", "_copy_from", "_copy_from_and_resize", "_to_copy", "lift_fresh",
                 "detach", "alias", "view", "_local_scalar_dense", "fill_.Scalar", "zero_",
                 "empty.memory_format", "empty_strided", *structured):
        kernels.impl(name, _kernel_for(name), "PrivateUse1")
    return fallback, kernels


def _kernel_for(name: str):
    """The PrivateUse1 kernel of ATen operator `name` ("fill_.Scalar"; no overload: "default")."""
    packet, _, overload = name.partition(".")
    op = getattr(getattr(_aten, packet), overload or "default")

    def kernel(*args, **kwargs):
        return _backend_kernel(op, *args, **kwargs)

    return kernel


def _device_module() -> types.ModuleType:
    """`torch.vgpu`: what torch and user code ask a device module."""
    module = types.ModuleType(
        f"torch.{VIRTUAL_TYPE}",
        "devshim's virtual GPUs (DEVSHIM_VIRTUAL_DEVICES). Values live in host memory; "
        "each has its own random number generator, as CUDA devices do (torch.manual_seed seeds them).",
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

    def get_amp_supported_dtype() -> list:
        """None: mixed precision is not simulated, so torch.autocast("vgpu") warns that it is
        disabling itself and code runs in full precision (torch asks this even of disabled
        autocast contexts, as checkpointing opens)."""
        return []

    vars(module).update(is_available=is_available, is_initialized=is_initialized, device_count=device_count,
                        current_device=current_device, synchronize=synchronize,
                        get_amp_supported_dtype=get_amp_supported_dtype, **generators.DEVICE_MODULE_FUNCTIONS)
    module.__getattr__ = generators.module_getattr  # default_generators, one per virtual GPU
    setattr(module, _internals.BAD_FORK.get(), lambda: False)
    return module

