"""Backend registry: names, selection, and dispatch on a tensor's type.

Adapters are created lazily, once per process, under a lock. Which backend
functions without a tensor use is, in order of precedence: the innermost
``use_backend`` block of the current thread/task (a ContextVar), then
``set_backend``, then ``DEVSHIM_BACKEND``, then the first installed framework.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import sys
import threading
from typing import Any, Dict, Iterator, List, Optional, Tuple, Type

from devshim import config
from devshim.backends.base import Backend
from devshim.device import Device
from devshim.errors import BackendError

__all__ = [
    "Backend",
    "BACKEND_NAMES",
    "available_backends",
    "get_backend",
    "set_backend",
    "use_backend",
    "backend_for_tensor",
    "describe_native_device",
    "selection_reason",
    "virtual_capable_backends",
]

# name -> (framework's import name, adapter module, adapter class). Dispatch tries
# loaded frameworks in _DISPATCH_ORDER and checks sys.modules for the framework
# before importing its adapter, so dispatch costs nothing for frameworks not in use.
_ADAPTERS: Dict[str, Tuple[str, str, str]] = {
    "torch": ("torch", "devshim.backends.torch_backend", "TorchBackend"),
    "tensorflow": ("tensorflow", "devshim.backends.tensorflow_backend", "TensorflowBackend"),
    "mxnet": ("mxnet", "devshim.backends.mxnet_backend", "MxnetBackend"),
    "numpy": ("numpy", "devshim.backends.numpy_backend", "NumpyBackend"),
}
_ALIASES = {"pytorch": "torch", "tf": "tensorflow", "mx": "mxnet"}
# Auto-selection order when DEVSHIM_BACKEND is unset; numpy is the fallback.
_PREFERENCE = ("torch", "tensorflow", "jax", "mxnet")
_DISPATCH_ORDER = ("torch", "tensorflow", "mxnet", "jax", "numpy")

BACKEND_NAMES: Tuple[str, ...] = ("torch", "tensorflow", "mxnet", "jax", "numpy")

_lock = threading.RLock()
_instances: Dict[str, Backend] = {}
_global: Optional[Backend] = None
_global_reason = ""
_scoped: contextvars.ContextVar[Optional[Backend]] = contextvars.ContextVar(
    "devshim_backend", default=None
)
# Concrete type -> owning adapter, or None for "not a tensor". A framework's tensor
# types only exist once it is imported, so even a negative answer never goes stale.
_type_owner: Dict[type, Optional[Backend]] = {}


def canonical_name(name: str) -> str:
    """``"pytorch"`` -> ``"torch"``; unknown names raise BackendError listing valid ones."""
    if not isinstance(name, str):
        raise BackendError(f"A backend name must be a string, not {type(name).__name__}.")
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in BACKEND_NAMES:
        aliases = ", ".join(f"{a} ({c})" for a, c in _ALIASES.items())
        raise BackendError(
            f"Unknown backend {name!r}. Valid names: {', '.join(BACKEND_NAMES)}; "
            f"aliases: {aliases}."
        )
    return key


def _adapter_class(name: str) -> Type[Backend]:
    if name not in _ADAPTERS:
        raise BackendError(
            f"devshim has no {name} adapter in this version. Available adapters: "
            f"{', '.join(n for n in BACKEND_NAMES if n in _ADAPTERS)}."
        )
    _, module, cls = _ADAPTERS[name]
    return getattr(importlib.import_module(module), cls)


def _loaded_adapters() -> Iterator[Backend]:
    """Adapters whose framework is already imported, in dispatch order."""
    for name in _DISPATCH_ORDER:
        entry = _ADAPTERS.get(name)
        if entry is not None and entry[0] in sys.modules:
            yield _instance(name)


def _instance(name: str) -> Backend:
    adapter = _instances.get(name)
    if adapter is None:
        with _lock:
            adapter = _instances.get(name)
            if adapter is None:
                adapter = _adapter_class(name)()
                _instances[name] = adapter
    return adapter


def load_backend(name: str) -> Backend:
    """The adapter for ``name``, checking that its framework is installed."""
    key = canonical_name(name)
    cls = _adapter_class(key)
    if not cls.is_installed():
        raise BackendError(
            f"The {key} backend was asked for, but {cls.module} is not installed. "
            f'Install it with: pip install "devshim[{cls.pip_extra}]"'
        )
    return _instance(key)


def available_backends() -> List[str]:
    """Names of the backends whose framework is installed, in auto-selection order.

    Example:
        >>> ds.available_backends()
        ['torch', 'numpy']
    """
    names = [n for n in _PREFERENCE + ("numpy",) if n in _ADAPTERS]
    return [n for n in names if _adapter_class(n).is_installed()]


def _select_default() -> Tuple[Backend, str]:
    requested = config.requested_backend()
    if requested is not None:
        return load_backend(requested), f"{config.BACKEND_VAR}={requested}"
    for name in _PREFERENCE:
        if name in _ADAPTERS and _adapter_class(name).is_installed():
            return _instance(name), f"auto: {name} is the first installed of {', '.join(_PREFERENCE)}"
    return _instance("numpy"), f"auto: none of {', '.join(_PREFERENCE)} is installed, numpy is the fallback"


def get_backend(name: Optional[str] = None) -> Backend:
    """The adapter functions without a tensor use (or the one named).

    Example:
        >>> ds.get_backend().name
        'torch'
    """
    if name is not None:
        return load_backend(name)
    scoped = _scoped.get()
    if scoped is not None:
        return scoped
    global _global, _global_reason
    if _global is None:
        with _lock:
            if _global is None:
                adapter, reason = _select_default()
                _global_reason = reason
                _global = adapter
    return _global


def set_backend(name: str) -> Backend:
    """Select the backend for the whole process (``use_backend`` blocks still win).

    Example:
        >>> ds.set_backend("numpy").name
        'numpy'
    """
    adapter = load_backend(name)
    global _global, _global_reason
    with _lock:
        _global, _global_reason = adapter, f"set_backend({name!r})"
    return adapter


def reset_backend() -> None:
    """Forget the process-wide selection so the next use reads DEVSHIM_BACKEND again."""
    global _global, _global_reason
    with _lock:
        _global, _global_reason = None, ""


@contextlib.contextmanager
def use_backend(name: str) -> Iterator[Backend]:
    """Select a backend inside a ``with`` block, for this thread or asyncio task only.

    Example:
        >>> with ds.use_backend("numpy") as bk:
        ...     ds.cpu()
        'cpu'
    """
    token = _scoped.set(load_backend(name))
    try:
        yield _scoped.get()
    finally:
        _scoped.reset(token)


def selection_reason() -> str:
    """Why the current backend was chosen, for ``devshim info``."""
    scoped = _scoped.get()
    if scoped is not None:
        return f"use_backend({scoped.name!r})"
    get_backend()
    return _global_reason


def backend_for_tensor(x: Any) -> Optional[Backend]:
    """The adapter owning tensor ``x``, or None. Never imports a framework."""
    kind = type(x)
    try:
        return _type_owner[kind]
    except KeyError:
        pass
    owner = next((a for a in _loaded_adapters() if a.is_tensor(x)), None)
    _type_owner[kind] = owner
    return owner


def describe_native_device(obj: Any) -> Optional[Device]:
    """The neutral Device for any loaded framework's device object, or None."""
    if isinstance(obj, Device):
        return obj
    for adapter in _loaded_adapters():
        if adapter.is_native_device(obj):
            return adapter.describe(obj)
    return None


def virtual_capable_backends() -> List[str]:
    """Installed backends that can present virtual devices."""
    return [
        n for n in BACKEND_NAMES
        if n in _ADAPTERS and _adapter_class(n).supports_virtual_devices
        and _adapter_class(n).is_installed()
    ]
