"""The backend registry: one table, built from each backend package's declaration.

Every folder ``devshim/backends/<name>/`` declares ``SPEC`` (a ``BackendSpec``)
in its ``__init__.py``; the registry reads those rows the first time it is
needed, and nothing else lists backends. Adapters (``core.py``) are created
lazily, once per process, under a lock.

Which backend functions without a tensor use is, in order of precedence: the
innermost ``use_backend`` block of the current thread or asyncio task (a
ContextVar in ``devshim.settings``), then ``set_backend``, then
``DEVSHIM_BACKEND``, then the installed backend with the lowest ``auto_rank``.

Functions that take a tensor dispatch on its type. Only backends whose
framework is already in ``sys.modules`` are asked, so dispatch never imports a
framework, and the answer is remembered per type.
"""

from __future__ import annotations

import importlib
import os
from _thread import RLock  # threading's own lock, without its import cost

from devshim import settings
from devshim.backends.base import Backend
from devshim.backends.spec import BackendSpec
from devshim._device import Device
from devshim.errors import BackendError

__all__ = [
    "Backend", "BackendSpec",
    "specs", "backend_names", "canonical_name", "register_backend",
    "available_backends", "get_backend", "load_backend", "set_backend", "use_backend",
    "reset_backend", "selection_reason",
    "backend_for_tensor", "describe_native_device", "native_for", "virtual_capable_backends",
    "accelerator_partner",
    "DEVICE_TABLE", "DEVICE_OF", "COPY", "MOVE", "learn_type",
]

_lock = RLock()
_specs = None  # name -> BackendSpec, in auto-selection order; built on first use
_aliases: dict = {}
_extra_specs: dict = {}  # registered with register_backend(): name -> (spec, class or None)
_instances: dict = {}
_global = None
_global_reason = ""
_global_from_env = False
# Concrete type -> owning adapter, or None for "not a tensor". A framework's tensor
# types only exist once it is imported, so even a negative answer never goes stale.
_type_owner: dict = {}

#: Per tensor type, the owning adapter's fast paths, filled by ``learn_type``:
#: ``DEVICE_TABLE[t]`` (a DeviceTable, for backends that have one), ``DEVICE_OF[t](x)``,
#: ``COPY[t](x, spec, non_blocking)``, ``MOVE[t](x, spec)``.
DEVICE_TABLE: dict = {}
DEVICE_OF: dict = {}
COPY: dict = {}
MOVE: dict = {}


# ------------------------------------------------------------------ the table


def _rank(spec: BackendSpec) -> tuple:
    return (spec.auto_rank is None, spec.auto_rank or 0, spec.name)


def specs() -> dict:
    """name -> BackendSpec for every backend devshim has, in auto-selection order.

    Example:
        >>> list(ds.backends.specs())
        ['torch', 'tensorflow', 'mxnet', 'numpy']
    """
    global _specs
    if _specs is None:
        with _lock:
            if _specs is None:
                found = {}
                for folder in _backend_folders():
                    package = importlib.import_module(f"{__name__}.{folder}")
                    spec = getattr(package, "SPEC", None)
                    if not isinstance(spec, BackendSpec):
                        raise BackendError(
                            f"devshim/backends/{folder}/__init__.py declares no SPEC; every "
                            f"backend package must (see docs/adapters.md)."
                        )
                    found[spec.name] = spec
                for name, (spec, _) in _extra_specs.items():
                    found[name] = spec
                ordered = dict(sorted(found.items(), key=lambda item: _rank(item[1])))
                _aliases.clear()
                for spec in ordered.values():
                    for alias in (spec.name,) + spec.aliases:
                        _aliases[alias.lower()] = spec.name
                _specs = ordered
    return _specs


def _backend_folders() -> list:
    """The sub-packages of this package: folders holding an ``__init__.py``.

    (os.scandir rather than pkgutil, which imports inspect and typing: this runs on
    devshim's first call.)
    """
    folders = set()
    for root in __path__:
        try:
            entries = list(os.scandir(root))
        except OSError:
            continue
        for entry in entries:
            if (entry.is_dir() and entry.name.isidentifier() and not entry.name.startswith("_")
                    and os.path.isfile(os.path.join(entry.path, "__init__.py"))):
                folders.add(entry.name)
    return sorted(folders)


def backend_names() -> tuple:
    """Every backend name, in auto-selection order.

    Example:
        >>> ds.backends.backend_names()
        ('torch', 'tensorflow', 'mxnet', 'numpy')
    """
    return tuple(specs())


def register_backend(spec: BackendSpec, backend_class=None) -> None:
    """Add a backend from outside ``devshim/backends/`` (a plug-in, or a test double).

    ``backend_class`` is its ``Backend`` subclass; without one, ``core.py`` of
    ``spec.package`` is imported when the backend is first used.

    Example:
        >>> register_backend(BackendSpec("mine", import_name="mine", title="Mine"), MineBackend)
    """
    global _specs
    with _lock:
        _extra_specs[spec.name] = (spec, backend_class)
        _instances.pop(spec.name, None)
        _specs = None
        _forget_types()


def unregister_backend(name: str) -> None:
    """Remove a backend added with ``register_backend``.

    Example:
        >>> unregister_backend("mine")
    """
    global _specs
    with _lock:
        _extra_specs.pop(name, None)
        _instances.pop(name, None)
        _specs = None
        _forget_types()


def _forget_types() -> None:
    _type_owner.clear()
    DEVICE_TABLE.clear()
    DEVICE_OF.clear()
    COPY.clear()
    MOVE.clear()


def canonical_name(name: str) -> str:
    """``"pytorch"`` -> ``"torch"``; unknown names raise BackendError listing valid ones.

    Example:
        >>> ds.backends.canonical_name("PyTorch")
        'torch'
    """
    if not isinstance(name, str):
        raise BackendError(f"A backend name must be a string, not {type(name).__name__}.")
    table = specs()
    key = _aliases.get(name.strip().lower())
    if key is None:
        aliases = ", ".join(f"{a} ({s.name})" for s in table.values() for a in s.aliases)
        raise BackendError(
            f"Unknown backend {name!r}. Valid names: {', '.join(table)}; aliases: {aliases}."
        )
    return key


def _adapter_class(name: str) -> type:
    spec = specs()[name]
    registered = _extra_specs.get(name)
    if registered is not None and registered[1] is not None:
        return registered[1]
    core = spec.module("core")
    for value in vars(core).values():
        if isinstance(value, type) and issubclass(value, Backend) and value.spec is spec:
            return value
    raise BackendError(f"{spec.package}.core defines no Backend subclass whose spec is {spec!r}.")


def _instance(name: str) -> Backend:
    adapter = _instances.get(name)
    if adapter is None:
        with _lock:
            adapter = _instances.get(name)
            if adapter is None:
                adapter = _adapter_class(name)()
                _instances[name] = adapter
                from devshim import guard  # late: the guard module uses this registry

                guard.backend_loaded(name)
    return adapter


def load_backend(name: str) -> Backend:
    """The adapter for ``name``, checking that its framework is installed.

    Example:
        >>> ds.backends.load_backend("numpy").name
        'numpy'
    """
    key = canonical_name(name)
    spec = specs()[key]
    if not spec.is_installed():
        raise BackendError(
            f"The {key} backend was asked for, but {spec.import_name} is not installed. "
            f"Install it with: {spec.install_hint()}"
        )
    return _instance(key)


def available_backends() -> list:
    """Names of the backends whose framework is installed, in auto-selection order.

    Example:
        >>> ds.available_backends()
        ['torch', 'numpy']
    """
    return [name for name, spec in specs().items() if spec.is_installed()]


def virtual_capable_backends() -> list:
    """Installed backends that can present virtual devices.

    Example:
        >>> ds.backends.virtual_capable_backends()
        ['torch', 'tensorflow', 'mxnet']
    """
    return [name for name, spec in specs().items() if spec.virtual_devices and spec.is_installed()]


def accelerator_partner(host: str):
    """The installed backend whose host partner is ``host`` (CuPy for NumPy), or None.

    A NumPy array sent to a GPU becomes an array of this backend: NumPy has no GPU.

    Example:
        >>> ds.backends.accelerator_partner("numpy").name   # where CuPy is installed
        'cupy'
    """
    for name, spec in specs().items():
        if spec.host_partner == host and spec.is_installed():
            return _instance(name)
    return None


# ------------------------------------------------------------------ selection


def _select_default() -> tuple:
    requested = settings.requested_backend()
    if requested is not None:
        return load_backend(requested), f"{settings.BACKEND_VAR}={requested}"
    ranked = [spec for spec in specs().values() if spec.auto_rank is not None]
    names = ", ".join(spec.name for spec in ranked)
    for spec in ranked:
        if spec.is_installed():
            return _instance(spec.name), f"auto: {spec.name} is the first installed of {names}"
    raise BackendError(
        f"No backend is installed (devshim looks for {names}). Install one, e.g. "
        f'pip install "devshim[torch]".'
    )


def get_backend(name=None) -> Backend:
    """The adapter functions without a tensor use (or the one named).

    Example:
        >>> ds.get_backend().name
        'torch'
    """
    if name is not None:
        return load_backend(name)
    scoped = settings.scoped_backend.get()
    if scoped is not None:
        return scoped
    global _global, _global_reason, _global_from_env
    if _global is None:
        with _lock:
            if _global is None:
                adapter, reason = _select_default()
                _global_reason, _global_from_env = reason, True
                _global = adapter
    return _global


def set_backend(name: str) -> Backend:
    """Select the backend for the whole process (``use_backend`` blocks still win).

    Example:
        >>> ds.set_backend("numpy").name
        'numpy'
    """
    adapter = load_backend(name)
    global _global, _global_reason, _global_from_env
    with _lock:
        _global, _global_reason, _global_from_env = adapter, f"set_backend({name!r})", False
    return adapter


def reset_backend() -> None:
    """Forget the process-wide selection, ``set_backend``'s included; the next use chooses again.

    Example:
        >>> ds.backends.reset_backend()
    """
    global _global, _global_reason, _global_from_env
    with _lock:
        _global, _global_reason, _global_from_env = None, "", False


class use_backend:
    """Select a backend inside a ``with`` block, for this thread or asyncio task only.

    The backend is loaded (and checked) when the object is made; entering the
    block selects it and yields the adapter, leaving restores the previous
    choice, also on exceptions. Blocks nest.

    Example:
        >>> with ds.use_backend("numpy") as bk:
        ...     ds.cpu()
        'cpu'
    """

    __slots__ = ("adapter", "_tokens")

    def __init__(self, name: str) -> None:
        self.adapter = load_backend(name)
        self._tokens: list = []

    def __enter__(self) -> Backend:
        self._tokens.append(settings.scoped_backend.set(self.adapter))
        return self.adapter

    def __exit__(self, *exc) -> None:
        settings.scoped_backend.reset(self._tokens.pop())


def selection_reason() -> str:
    """Why the current backend was chosen, for ``devshim info``.

    Example:
        >>> ds.backends.selection_reason()
        'DEVSHIM_BACKEND=torch'
    """
    scoped = settings.scoped_backend.get()
    if scoped is not None:
        return f"use_backend({scoped.name!r})"
    get_backend()
    return _global_reason


def _settings_changed() -> None:
    global _global, _global_reason, _global_from_env
    with _lock:
        if _global_from_env:
            _global, _global_reason, _global_from_env = None, "", False
        for adapter in list(_instances.values()):
            adapter.reset()


settings.on_change(_settings_changed)


# ------------------------------------------------------------------ dispatch


def _loaded_adapters():
    """Adapters whose framework is already imported, in registry order."""
    for name, spec in specs().items():
        if spec.is_loaded():
            yield _instance(name)


def backend_for_tensor(x):
    """The adapter owning tensor ``x``, or None. Never imports a framework.

    Example:
        >>> ds.backends.backend_for_tensor(torch.ones(1)).name
        'torch'
    """
    kind = type(x)
    try:
        return _type_owner[kind]
    except KeyError:
        pass
    owner = None
    for adapter in _loaded_adapters():
        if adapter.is_tensor(x):
            owner = adapter
            break
    _type_owner[kind] = owner
    return owner


def learn_type(x):
    """Fill the fast-path tables for ``type(x)``; returns its adapter, or None for non-tensors.

    Example:
        >>> ds.backends.learn_type(torch.ones(1)).name
        'torch'
    """
    adapter = backend_for_tensor(x)
    if adapter is not None:
        kind = type(x)
        table = adapter.device_table()
        if table is not None:
            DEVICE_TABLE[kind] = table
        DEVICE_OF[kind] = adapter.device_of_fn()
        COPY[kind] = adapter.copy_fn()
        MOVE[kind] = adapter.move_fn()
    return adapter


def describe_native_device(obj):
    """The neutral Device for any loaded framework's device object, or None. Never raises
    for objects no framework knows.

    Example:
        >>> ds.backends.describe_native_device(torch.device("cpu"))
        Device('cpu:0', backend='torch')
    """
    if isinstance(obj, Device):
        return obj
    for adapter in _loaded_adapters():
        if adapter.is_native_device(obj):
            return adapter.describe(obj)
    return None


def native_for(device: Device):
    """The native device object a ``ds.Device`` stands for, from its own backend.

    Example:
        >>> native_for(pickle.loads(pickle.dumps(ds.device_of(x))))
        device(type='cpu')
    """
    return load_backend(device.backend).native_for(device)
