"""The transfer guard's hooks for PyTorch.

Host reads: torch.Tensor's reading methods (`float(t)`, `int(t)`,
`bool(t)`, `t.item()`, `t.tolist()`, `print(t)`, f-strings, ...) are
replaced on the class while some guard is active (and on devshim's virtual-GPU
tensor class, which has its own), so every thread and every tensor subclass
goes through them; each checks the guard state of the calling thread or task
and, for a tensor that is not on the CPU, reports the read before making it.
`t.numpy()` and `np.asarray(t)` are no transfers: PyTorch refuses them for
a tensor off the CPU (CUDA, and devshim's virtual GPUs, alike).

Op inputs: PyTorch itself refuses most ops whose inputs are on different
devices (a 0-d CPU tensor counts as a number). Inside a `transfer_guard`
block a `TorchFunctionMode` of devshim's scans each op's direct arguments
(and lists of tensors among them): under "disallow" such an op raises
`DeviceMismatchError` naming both devices and the fix instead of PyTorch's
error, under "log" it is counted once PyTorch has run it (an op PyTorch refuses moved nothing: no
warning, no count),
and the few ops PyTorch lets through with mixed inputs (a CPU index into a
GPU tensor) are caught too. Torch function modes are per thread, so this
part applies in the threads that enter a block; `DEVSHIM_TRANSFER_GUARD`
alone (no block) guards host reads only.

Keras 3 on torch copies every input of a layer to its current device itself
(`convert_to_tensor`: `x.to(device)`): a copy the user did not write, which the
mode sees as one (an implicit transfer, as an op on mixed devices would be on a GPU)
rather than as the explicit `Tensor.to` it is spelt with.
"""

from __future__ import annotations

import re
import sys
import threading

import torch

from devshim.backends import keras_base
from devshim.backends.registry import load_backend
from devshim.backends.torch import _internals
from devshim.guard import marker
from devshim.guard.hooks import GuardHooks, mark_wrapper, mixed_devices_refused, original_of, tensors_in
from devshim.guard.levels import ALLOW
from devshim.guard.report import check_move, read_checked, read_name, run_logged
from devshim.guard.state import current

#: torch.Tensor method -> how the read looks in the code that makes it.
READS = {
    "__float__": "float(t)",
    "__int__": "int(t)",
    "__bool__": "bool(t)",
    "__index__": "using t as an index",
    "__complex__": "complex(t)",
    "item": "t.item()",
    "tolist": "t.tolist()",
    "__repr__": "print(t) / repr(t)",
    "__format__": "formatting t (f-string, str.format)",
}


def _reader(name: str, original, what: str):
    def read(self, *args, **kwargs):
        state = current()
        if state.checking and not marker.is_explicit() and not self.is_cpu:
            # The outermost reading method on the stack names the read (print(t) reaches
            # __bool__ through torch's formatting code). Logged only once PyTorch made the
            # read (it refuses float() of many elements).
            return read_checked(read_name(READS, what), load_backend("torch").tensor_device(self), state,
                                original, self, *args, **kwargs)
        return original(self, *args, **kwargs)

    read.__name__ = name
    read.__qualname__ = f"Tensor.{name}"
    read.__doc__ = getattr(original, "__doc__", None)
    mark_wrapper(read, original)
    return read


def _classes() -> list:
    """torch.Tensor, and devshim's virtual-GPU tensor class when virtual GPUs are in use."""
    found = [torch.Tensor]
    virtual = sys.modules.get("devshim.backends.torch._virtual")
    if virtual is not None:
        found.append(virtual.VirtualTensor)
    return found


# ------------------------------------------------------------------ op inputs

# Explicit copies the user writes; reading methods have their own hooks above.
_Tensor = torch.Tensor
_EXEMPT = {
    torch.Tensor.to, torch.Tensor.cpu, torch.Tensor.cuda, torch.Tensor.copy_,
    torch.Tensor.__deepcopy__, torch.Tensor.__reduce_ex__, torch.Tensor.__setstate__,
}
_EXEMPT.update(getattr(torch.Tensor, name) for name in READS if hasattr(torch.Tensor, name))
_READERS: dict = {}  # our reading methods -> torch's: the mode calls torch's, the read is already checked


def _name(func) -> str:
    return getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)


class _Mode(torch.overrides.TorchFunctionMode):
    """Checks each op's tensor inputs against the guard of the running thread or task."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _EXEMPT:
            if func is _TO and _keras_frames and sys._getframe(1).f_code in _keras_frames:
                return _keras_copy(func, args, kwargs)
            return func(*args, **kwargs)
        original = _READERS.get(func)
        if original is not None:
            return original(*args, **kwargs)
        if len(args) + len(kwargs) > 1 and _mixed(args, kwargs):
            state = current()
            if (state.device_to_device != ALLOW or state.host_to_device != ALLOW) \
                    and not marker.is_explicit():
                # logged once PyTorch ran it: the copies happened (a refusal raised in _check)
                return run_logged(_check(func, _places(args, kwargs), state), func, *args, **kwargs)
        return func(*args, **kwargs)


# ------------------------------------------------------------------ Keras's own copies

_TO = torch.Tensor.to
_keras_frames: frozenset = frozenset()  # the code of Keras's functions whose x.to(device) is Keras's copy
_KERAS_COPY = "Keras moving a layer's input to its device (convert_to_tensor's x.to(device))"


def _follow_keras() -> None:
    """Find Keras's copying functions once Keras runs on torch (at each block's start: Keras may be
    imported after the guard's hooks were installed)."""
    global _keras_frames
    if not _keras_frames and "keras" in sys.modules and keras_base.backend() == "torch":
        _keras_frames = _internals.KERAS_COPY_FRAMES.get() or frozenset()


def _keras_copy(func, args, kwargs):
    """`x.to(device)` made by Keras: checked as the implicit transfer it is, then made."""
    target = args[1] if len(args) > 1 else kwargs.get("device")
    if isinstance(args[0], _Tensor) and isinstance(target, (str, torch.device)) and not marker.is_explicit():
        try:
            source, target = _describe(args[0].device), _describe(torch.device(target))
        except Exception:  # noqa: BLE001 - a device devshim does not know: torch's own .to decides
            source = target = None
        if source != target and "meta" not in (source.kind, target.kind):
            return run_logged(check_move(source, target, _KERAS_COPY, current()), func, *args, **kwargs)
    return func(*args, **kwargs)


def _mixed(args, kwargs) -> bool:
    """Whether the op's tensor inputs are on more than one device: the cheap test every
    op pays, written out flat (no generator, no call per tensor)."""
    first = None
    for value in args:
        if isinstance(value, _Tensor):
            if first is None:
                first = value.device
            elif value.device != first:
                return True
        elif isinstance(value, (list, tuple)) and value and isinstance(value[0], _Tensor):
            for item in value:
                if isinstance(item, _Tensor):
                    if first is None:
                        first = item.device
                    elif item.device != first:
                        return True
    if kwargs:
        for value in kwargs.values():
            if isinstance(value, _Tensor):
                if first is None:
                    first = value.device
                elif value.device != first:
                    return True
    return False


def _places(args, kwargs) -> list:
    places = []
    for t in tensors_in((*args, *kwargs.values()), _Tensor):
        if t.is_cpu and t.dim() == 0:
            continue  # a 0-d host tensor is a number to PyTorch, as a Python scalar is
        device = t.device
        if device not in places:
            places.append(device)
    return places


def _check(func, places: list, state) -> list:
    """Refuse the op under "disallow"; under "log", the copies to record once PyTorch ran it."""
    if len(places) < 2:
        return []
    # PyTorch runs an op on its first non-CPU input's device: the others would move there.
    target = next((d for d in places if d.type != "cpu"), places[0])
    return [check_move(_describe(source), _describe(target), _name(func), state)
            for source in places if source != target]


def _describe(native):
    return load_backend("torch").describe(native)


_local = threading.local()
_mode = None


# PyTorch's refusals of tensors on different devices ("Expected all tensors to be on the same
# device", "Tensor on device meta is not on the expected device cpu!", an RNN's "Input and
# parameter tensors are not at the same device").
_MIXED = re.compile(r"same device|not on the expected device")


class TorchGuardHooks(GuardHooks):
    """PyTorch's transfer-guard hooks (the contract: `devshim.guard.hooks.GuardHooks`).

    Example:
        >>> ds.backends.guard_hooks("torch").install()
    """

    def install(self) -> None:
        """Put the guarded reading methods on torch.Tensor (and the virtual-GPU class's own ones)."""
        for cls in _classes():
            for name, what in READS.items():
                if self.patched(cls, name) or (cls is not torch.Tensor and name not in cls.__dict__):
                    continue
                reader = _reader(name, getattr(cls, name), what)
                if cls is torch.Tensor:
                    _READERS[reader] = original_of(reader)
                self.patch(cls, name, reader)

    def uninstall(self) -> None:
        """Give the classes their own methods back."""
        _READERS.clear()
        self.restore()

    def enter_thread(self) -> None:
        """Make sure devshim's mode is on this thread's torch function mode stack."""
        global _mode
        depth = getattr(_local, "depth", 0)
        if depth == 0:
            _follow_keras()
            if _mode is None:
                _mode = _Mode()
            _mode.__enter__()
        _local.depth = depth + 1

    def exit_thread(self) -> None:
        """Take devshim's mode off this thread's stack when its last block closes."""
        depth = getattr(_local, "depth", 0) - 1
        _local.depth = max(depth, 0)
        if depth == 0 and _mode is not None:
            mode_stack = _internals.FUNCTION_MODE_STACK.get()
            stack = mode_stack() if mode_stack is not None else None
            if stack and stack[-1] is _mode:
                _mode.__exit__(None, None, None)
            else:
                # Someone pushed a mode over ours and has not popped it (or this torch moved the
                # stack's getter: its probe has warned): leaving ours in place is harmless (it lets
                # everything through outside guard blocks).
                _local.depth = 0

    def enter_block(self, state) -> None:
        """Nothing to set; following every block is what lets `translate` see the errors
        leaving it."""

    def translate(self, error):
        return mixed_devices_refused("PyTorch", error, RuntimeError, _MIXED)
