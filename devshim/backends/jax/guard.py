"""The transfer guard's hooks for JAX.

JAX has a transfer guard of its own (``jax.transfer_guard_*``), and devshim maps
onto it where it matches devshim's semantics, adding what it leaves out:

- **Host reads**: JAX's device-to-host guard never fires for arrays on CPU
  devices, which is where virtual GPUs live, and it does not count. Every read
  of a ``jax.Array`` on the host (``float(x)``, ``int(x)``, ``bool(x)``,
  ``x.item()``, ``x.tolist()``, ``np.asarray(x)``, ``print(x)``, f-strings)
  goes through one property of JAX's array class (``item`` aside), which devshim
  wraps while a guard is active. ``jax.device_get`` is JAX's explicit transfer and
  passes. ``np.asarray(x)`` of an array in host memory (the CPU, virtual GPUs)
  reads through the buffer protocol, in C, and is not seen; of a GPU array it is.
- **Device to device**: each ``transfer_guard`` block sets JAX's own
  device-to-device guard to the block's level (thread-local in JAX), so JAX
  refuses or logs the implicit copies it makes between devices. JAX already
  refuses ops whose inputs are committed to different devices, whatever the
  level. JAX logs through its own logger: those are not in devshim's report.
- **Host to device**: not mapped. JAX's host-to-device guard also refuses
  Python scalars and 0-d arrays (``x + 1``: jax issue 18436), which devshim
  lets through; use ``jax.transfer_guard_host_to_device`` directly for that.
"""

from __future__ import annotations

import sys
import threading

import jax
from jax._src import array as _array

from devshim._device import Device
from devshim.backends.registry import load_backend
from devshim.guard import marker
from devshim.guard.hooks import GuardHooks, mark_wrapper
from devshim.guard.levels import READ
from devshim.guard.report import implicit
from devshim.guard.state import current

_READERS = {
    "__float__": "float(x)",
    "__int__": "int(x)",
    "__bool__": "bool(x)",
    "__complex__": "complex(x)",
    "__index__": "using x as an index",
    "tolist": "x.tolist()",
    "tobytes": "x.tobytes()",
    "item": "x.item()",
    "__array__": "np.asarray(x)",
    "__format__": "formatting x (f-string, str.format)",
    "__repr__": "print(x) / repr(x)",
    "__str__": "print(x) / str(x)",
}
_EXPLICIT = {"device_get", "_device_get"}  # JAX's own explicit transfer to the host
_ArrayImpl = _array.ArrayImpl
_saved: dict = {}
_MISSING = object()
_local = threading.local()


def _what(depth: int = 8):
    """How the read looks in the user's code, or None when JAX's device_get is making it."""
    frame = sys._getframe(2)
    found = None
    for _ in range(depth):
        if frame is None:
            break
        name = frame.f_code.co_name
        if name in _EXPLICIT:
            return None
        found = _READERS.get(name, found)
        frame = frame.f_back
    return found or "reading x on the host"


def _places(x) -> list:
    backend = load_backend("jax")
    return [backend.describe(d) for d in x.sharding.device_set]


def _guarded_value(original):
    getter = original.fget

    def _value(self):
        state = current()
        if state.checking and not marker.is_explicit():
            places = [p for p in _places(self) if p.kind != "cpu"]
            if places:
                what = _what()
                if what is not None:
                    implicit("device_to_host", READ, what, places[0], Device("cpu"), state)
                    with marker.explicit():
                        return getter(self)
        return getter(self)

    mark_wrapper(_value, getter)
    return property(_value, doc=original.__doc__)


def _guarded_item(original):
    def item(self, *args):
        state = current()
        if state.checking and not marker.is_explicit():
            places = [p for p in _places(self) if p.kind != "cpu"]
            if places:
                implicit("device_to_host", READ, "x.item()", places[0], Device("cpu"), state)
                with marker.explicit():
                    return original(self, *args)
        return original(self, *args)

    mark_wrapper(item, original)
    return item


def _install() -> None:
    """Wrap JAX's host-read property, and item(), which reads through NumPy's buffer protocol."""
    if _saved:
        return
    _saved["_value"] = _ArrayImpl.__dict__["_value"]
    _ArrayImpl._value = _guarded_value(_saved["_value"])
    _saved["item"] = _ArrayImpl.__dict__.get("item", _MISSING)
    _ArrayImpl.item = _guarded_item(_ArrayImpl.item)


def _uninstall() -> None:
    if not _saved:
        return
    _ArrayImpl._value = _saved.pop("_value")
    item = _saved.pop("item")
    if item is _MISSING:
        del _ArrayImpl.item
    else:
        _ArrayImpl.item = item


def _enter_block(state) -> None:
    """Set JAX's own device-to-device guard to this block's level, in this thread."""
    scope = jax.transfer_guard_device_to_device(state.device_to_device)
    scope.__enter__()
    stack = getattr(_local, "scopes", None)
    if stack is None:
        stack = _local.scopes = []
    stack.append(scope)


def _exit_block() -> None:
    stack = getattr(_local, "scopes", None)
    if stack:
        stack.pop().__exit__(None, None, None)


class JaxGuardHooks(GuardHooks):
    """JAX's transfer-guard hooks (the contract: ``devshim.guard.hooks.GuardHooks``).

    Example:
        >>> ds.backends.guard_hooks("jax").install()
    """

    def install(self) -> None:
        _install()

    def uninstall(self) -> None:
        _uninstall()

    def enter_block(self, state) -> None:
        _enter_block(state)

    def exit_block(self) -> None:
        _exit_block()
