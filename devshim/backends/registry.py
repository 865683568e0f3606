"""The backend table: one row per backend package, and one adapter per backend.

Every folder `devshim/backends/<name>/` declares `SPEC` (a `BackendSpec`)
in its `__init__.py`, and so does the package an installed distribution names
under the `devshim.backends` entry point (a backend that lives outside devshim);
the table is read from those rows the first time it is needed, and nothing else
lists backends. Adapters (`core.py`) are made lazily, once per process, under
devshim's loading lock (`devshim._lazy.LOCK`).

When the table is first built the registry wires itself into the two layers
below it, which never import it: `devshim._device` gets a resolver (so a
`Device` can compare with native device objects and find its native object),
and the guard's lifecycle learns every backend and how to load its hooks.

Example:
    >>> from devshim.backends import registry
    >>> list(registry.specs())
    ['torch', 'tensorflow', 'jax', 'mxnet', 'cupy', 'numpy']
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings
from functools import partial

from devshim import _device, _lazy, settings
from devshim.backends.base import Backend
from devshim.backends.interop_base import Interop
from devshim.backends.model_base import ModelPlacement
from devshim.backends.spec import BackendSpec
from devshim.errors import BackendError, BackendPluginWarning, InvalidGuardLevelError
from devshim.guard import lifecycle
from devshim.guard.hooks import GuardHooks

__all__ = [
    "specs", "backend_names", "canonical_name", "register_backend", "unregister_backend",
    "load_backend", "instance", "loaded_adapters", "available_backends", "virtual_capable_backends",
    "accelerator_partner", "guard_hooks", "on_table_change", "rebuild_device",
    "describe_native_device", "backend_of_device", "native_for", "backend_folders", "model_placement", "interop",
    "ENTRY_POINT_GROUP", "installed_plugins", "autodiff", "memory", "memory_for",
]

_lock = _lazy.LOCK  # devshim's one loading lock (see devshim._lazy)
_specs = None  # name -> BackendSpec, in auto-selection order; built on first use
_aliases: dict = {}
_extra_specs: dict = {}  # registered with register_backend(): name -> (spec, class or None)
_instances: dict = {}
_contracts: dict = {}  # (name, module) -> the instance of its contract class, or None without the module
_table_listeners: list = []
_PACKAGE = __name__.rsplit(".", 1)[0]
_FOLDER = os.path.dirname(os.path.abspath(__file__))
_plugins = None  # BackendSpec of each installed plug-in (the entry points), read once per process

#: The entry-point group through which an installed distribution declares a backend: each entry
#: names the backend and the package whose `SPEC` declares it (`mine = "devshim_mine"`).
ENTRY_POINT_GROUP = "devshim.backends"


def _rank(spec: BackendSpec) -> tuple:
    return (spec.auto_rank is None, spec.auto_rank or 0, spec.name)


def specs() -> dict:
    """name -> BackendSpec for every backend devshim has, in auto-selection order.

    Example:
        >>> list(ds.backends.specs())
        ['torch', 'tensorflow', 'jax', 'mxnet', 'cupy', 'numpy']
    """
    table = _specs  # (read once: another thread may empty it)
    return table if table is not None else _build()


def _build() -> dict:
    global _specs, _aliases
    with _lock:
        if _specs is not None:
            return _specs
        found = {}
        for folder in backend_folders():
            package = importlib.import_module(f"{_PACKAGE}.{folder}")
            spec = getattr(package, "SPEC", None)
            if not isinstance(spec, BackendSpec):
                raise BackendError(
                    f"devshim/backends/{folder}/__init__.py declares no SPEC; every "
                    f"backend package must (see docs/adapters.md)."
                )
            found[spec.name] = spec
        found.update((spec.name, spec) for spec in _plugin_specs(found))
        found.update((name, spec) for name, (spec, _) in _extra_specs.items())
        ordered = dict(sorted(found.items(), key=lambda item: _rank(item[1])))
        _aliases = {alias.lower(): spec.name for spec in ordered.values() for alias in (spec.name,) + spec.aliases}
        lifecycle.declare({name: (spec.import_name, partial(guard_hooks, name)) for name, spec in ordered.items()})
        _device.install_resolver(_Resolver())
        _specs = ordered
        return ordered


def backend_folders() -> list:
    """The backend packages: folders of `devshim/backends/` holding an `__init__.py`.

    (os.scandir rather than pkgutil, which imports inspect and typing: this runs on
    devshim's first call.)

    Example:
        >>> registry.backend_folders()
        ['cupy', 'jax', 'mxnet', 'numpy', 'tensorflow', 'torch']
    """
    try:
        entries = list(os.scandir(_FOLDER))
    except OSError:
        entries = []
    return sorted(entry.name for entry in entries
                  if entry.is_dir() and entry.name.isidentifier() and not entry.name.startswith("_")
                  and os.path.isfile(os.path.join(entry.path, "__init__.py")))


def installed_plugins() -> list:
    """(name, value, distribution) of every `devshim.backends` entry point of the distributions on
    `sys.path`, the first distribution of a name first, as `importlib.metadata` finds them (read
    from their `entry_points.txt` here: importing `importlib.metadata` would load some 60 modules
    on devshim's first call).

    Example:
        >>> registry.installed_plugins()
        [('mine', 'devshim_mine', 'devshim_mine')]
    """
    found, seen = [], set()
    for folder in sys.path:
        try:
            entries = sorted(os.scandir(folder or "."), key=lambda entry: entry.name)
        except OSError:
            continue
        for entry in entries:
            stem, _, kind = entry.name.rpartition(".")
            if kind not in ("dist-info", "egg-info") or not entry.is_dir():
                continue
            distribution = stem.split("-")[0].lower().replace(".", "_").replace("-", "_")
            if distribution in seen:
                continue
            seen.add(distribution)
            found += [(name, value, distribution) for name, value in _entry_points(entry.path)]
    return found


def _entry_points(folder: str) -> list:
    """(name, value) of the `devshim.backends` section of a distribution's `entry_points.txt`."""
    try:
        with open(os.path.join(folder, "entry_points.txt"), encoding="utf-8") as file:
            lines = file.read().splitlines()
    except OSError:
        return []
    found, inside = [], False
    for line in lines:
        line = line.strip()
        if line.startswith("["):
            inside = line == f"[{ENTRY_POINT_GROUP}]"
        elif inside and "=" in line and not line.startswith(("#", ";")):
            name, _, value = line.partition("=")
            found.append((name.strip(), value.strip()))
    return found


def _plugin_specs(built_in: dict) -> list:
    """The rows of the installed plug-ins, read once; one that cannot be used is left out with a
    `BackendPluginWarning` saying why (a plug-in never breaks devshim's other backends)."""
    global _plugins
    if _plugins is None:
        taken, _plugins = set(built_in), []
        for name, package, distribution in installed_plugins():
            spec, why = _plugin_row(name, package, taken)
            if spec is not None:
                taken.add(name)
                _plugins.append(spec)
            else:
                warnings.warn(f"the {distribution} distribution's {ENTRY_POINT_GROUP} entry point {name} = {package} "
                              f"{why}. That backend is left out; fix the {distribution} package (docs/adapters.md, "
                              f"\"A backend outside devshim\"), or uninstall it.", BackendPluginWarning, stacklevel=4)
    return _plugins


def _plugin_row(name: str, package: str, taken: set) -> tuple:
    """(the `BackendSpec` of plug-in `name`, its package's `SPEC`, None), or (None, what is wrong)."""
    try:
        spec = getattr(importlib.import_module(package), "SPEC", None)
    except Exception as err:  # a plug-in's own failure: every other backend still works
        return None, f"could not be imported ({type(err).__name__}: {err})"
    if not isinstance(spec, BackendSpec):
        return None, "names no BackendSpec (its package must define SPEC = BackendSpec(...))"
    if spec.name != name:
        return None, f"declares a backend named {spec.name!r}: name the entry point after it"
    if name in taken:
        return None, f"declares {name!r}, a backend devshim has already"
    spec.package = package
    return spec, None


def backend_names() -> tuple:
    """Every backend name, in auto-selection order.

    Example:
        >>> ds.backends.backend_names()
        ('torch', 'tensorflow', 'jax', 'mxnet', 'cupy', 'numpy')
    """
    return tuple(specs())


def on_table_change(listener) -> None:
    """Call `listener()` when backends are registered or removed (dispatch forgets its caches).

    Example:
        >>> registry.on_table_change(my_cache.clear)
    """
    if listener not in _table_listeners:
        _table_listeners.append(listener)


def register_backend(spec: BackendSpec, backend_class=None) -> None:
    """Add a backend from outside `devshim/backends/` (a plug-in, or a test double).

    `backend_class` is its `Backend` subclass; without one, `core.py` of
    `spec.package` is imported when the backend is first used.

    Example:
        >>> register_backend(BackendSpec("mine", import_name="mine", title="Mine"), MineBackend)
    """
    _change_table(spec.name, (spec, backend_class))


def unregister_backend(name: str) -> None:
    """Remove a backend added with `register_backend`.

    Example:
        >>> unregister_backend("mine")
    """
    _change_table(name, None)


def _change_table(name: str, entry) -> None:
    """Register (`entry`: (spec, class or None)) or remove (None) backend `name`, then tell the listeners."""
    global _specs
    with _lock:
        if entry is None:
            _extra_specs.pop(name, None)
        else:
            _extra_specs[name] = entry
        _instances.pop(name, None)
        _specs = None
    for listener in list(_table_listeners):
        listener()


def canonical_name(name: str) -> str:
    """`"pytorch"` -> `"torch"`; unknown names raise BackendError listing valid ones.

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


def _one_subclass(module, base: type, spec: BackendSpec, what: str) -> type:
    found = [value for value in vars(module).values()
             if isinstance(value, type) and issubclass(value, base) and value is not base
             and value.__module__ == module.__name__]
    if len(found) != 1:
        raise BackendError(
            f"{module.__name__} must define exactly one {base.__name__} subclass ({what}); it "
            f"defines {len(found)}. See docs/adapters.md."
        )
    return found[0]


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


def instance(name: str) -> Backend:
    """The adapter of backend `name` (canonical), made on first use; no install check.

    Example:
        >>> registry.instance("numpy").name
        'numpy'
    """
    adapter = _instances.get(name)
    if adapter is None:
        with _lock:
            adapter = _instances.get(name)
            if adapter is None:
                adapter = _adapter_class(name)()
                adapter.peers = sys.modules[__name__]
                if not _instances:
                    settings.on_change(_settings_changed)
                _instances[name] = adapter
                try:
                    lifecycle.backend_loaded(name)
                except InvalidGuardLevelError:
                    _instances.pop(name, None)  # a bad DEVSHIM_TRANSFER_GUARD fails every use
                    raise
    return adapter


def load_backend(name: str) -> Backend:
    """The adapter for `name`, checking that its framework is installed.

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
    return instance(key)


def _settings_changed() -> None:
    for adapter in list(_instances.values()):
        adapter.reset()


def loaded_adapters():
    """Adapters whose framework is already imported, in registry order.

    Example:
        >>> [a.name for a in registry.loaded_adapters()]
        ['torch', 'numpy']
    """
    for name, spec in specs().items():
        if spec.is_loaded():
            yield instance(name)


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
        ['torch', 'tensorflow', 'jax', 'mxnet']
    """
    return [name for name, spec in specs().items() if spec.virtual_devices and spec.is_installed()]


def accelerator_partner(host: str):
    """The installed backend whose host partner is `host` (CuPy for NumPy), or None.

    A NumPy array sent to a GPU becomes an array of this backend: NumPy has no GPU.

    Example:
        >>> ds.backends.accelerator_partner("numpy").name   # where CuPy is installed
        'cupy'
    """
    for name, spec in specs().items():
        if spec.host_partner == host and spec.is_installed():
            return instance(name)
    return None


def guard_hooks(name: str):
    """The `GuardHooks` of backend `name` (from its `guard.py`), or None without one.

    Example:
        >>> type(ds.backends.guard_hooks("torch")).__name__
        'TorchGuardHooks'
    """
    spec = specs()[canonical_name(name)]
    if not spec.has_module("guard"):
        return None
    return _one_subclass(spec.module("guard"), GuardHooks, spec, "its transfer-guard hooks")()


def model_placement(name: str):
    """The `ModelPlacement` of backend `name` (from its `model.py`, made once), or None
    without one.

    Example:
        >>> ds.backends.model_placement("torch").is_model(torch.nn.Linear(2, 1))
        True
    """
    return _contract_instance(name, "model", ModelPlacement, "its model placement")


def interop(name: str):
    """The `Interop` of backend `name` (from its `interop.py`, made once), or None
    without one.

    Example:
        >>> ds.backends.interop("jax").immutable
        True
    """
    return _contract_instance(name, "interop", Interop, "its side of ds.convert")


def _contract_instance(name: str, module: str, base: type, what: str):
    key = (canonical_name(name), module)
    if key in _contracts:  # (devshim never removes an entry)
        return _contracts[key]
    spec = specs()[key[0]]
    found = None
    if spec.has_module(module):
        found = _one_subclass(spec.module(module), base, spec, what)()
    return _contracts.setdefault(key, found)  # two threads asking at once: both get the first


def rebuild_device(kind, index, backend, virtual, platform):
    """A `Device` restored by pickle, in a process whose registry may not be built yet.

    Example:
        >>> pickle.loads(pickle.dumps(ds.device_of(x)))
        Device('cpu:0', backend='torch')
    """
    specs()  # installs the resolver the Device needs for its native object
    return _device.Device(kind, index, backend=backend, virtual=virtual, platform=platform)


def native_for(device):
    """The native device object a `ds.Device` stands for, from its own backend.

    Example:
        >>> native_for(pickle.loads(pickle.dumps(ds.device_of(x))))
        device(type='cpu')
    """
    return load_backend(device.backend).native_for(device)


class _Resolver:
    """What `devshim._device` asks the registry (installed there by `specs()`)."""

    __slots__ = ()

    def describe(self, obj):
        if isinstance(obj, _device.Device):
            return obj
        for adapter in loaded_adapters():
            if adapter.is_native_device(obj):
                return adapter.describe(obj)
        return None

    native = staticmethod(native_for)
    rebuild = staticmethod(rebuild_device)


def describe_native_device(obj):
    """The neutral Device for any loaded framework's device object, or None. Never raises
    for objects no framework knows.

    Example:
        >>> ds.backends.describe_native_device(torch.device("cpu"))
        Device('cpu:0', backend='torch')
    """
    specs()  # the resolver is installed with the table
    return _device.describe_native(obj)


def backend_of_device(obj):
    """The adapter of the framework a device object belongs to (a `torch.device`, a JAX
    `Device`, a `ds.Device` that names its backend), or None for a spec string or an object no
    loaded framework knows. Where no tensor says which framework a target is for, its device does.

    Example:
        >>> ds.backends.registry.backend_of_device(torch.device("meta")).name
        'torch'
    """
    if isinstance(obj, _device.Device):
        return load_backend(obj.backend) if obj.backend else None
    specs()  # the table, which the loaded adapters come from
    for adapter in loaded_adapters():
        if adapter.is_native_device(obj):
            return load_backend(adapter.describe(obj).backend)
    return None


def autodiff(name: str):
    """The `Autodiff` of backend `name` (from its `autodiff.py`, made once), or None
    without one (NumPy, CuPy: no automatic differentiation).

    Example:
        >>> ds.backends.autodiff("jax").can_change_in_place(jnp.ones(2))
        False
    """
    from devshim.backends.autodiff_base import Autodiff

    return _contract_instance(name, "autodiff", Autodiff, "its autodiff, for ds.testing.check_backward")


def memory(name: str):
    """The `DeviceMemory` of backend `name` (from its `memory.py`, made once); for a backend
    without one, a contract that knows the host alone (`ds.memory` has the host's figures, none
    of its accelerators', and no error of its framework is taken for out of memory).

    Example:
        >>> ds.backends.memory("torch").is_out_of_memory(torch.OutOfMemoryError("out of memory"))
        True
    """
    from devshim.backends.memory_base import DeviceMemory, HostOnlyMemory

    found = _contract_instance(name, "memory", DeviceMemory, "its memory figures, for ds.memory")
    if found is None:
        key = (canonical_name(name), "memory")
        found = _contracts[key] = _contracts.get(key) or HostOnlyMemory()
    return found


def memory_for(device, name, selected):
    """`(adapter, DeviceMemory)` answering `ds.memory` and `ds.memory_peak` for `device` (any
    device spec, or None): backend `name`'s when given, else that of the framework whose device
    object (or `ds.Device`) `device` is, else `selected()`'s (the selected backend). A backend
    without `memory.py` answers with the host's figures only (`memory_base.HostOnlyMemory`).

    Example:
        >>> adapter, contract = memory_for(torch.device("cpu"), None, ds.get_backend)
        >>> adapter.name, type(contract).__name__
        ('torch', 'TorchMemory')
    """
    adapter = None
    if name is not None:
        adapter = load_backend(name)
    elif device is not None and not isinstance(device, str):
        adapter = backend_of_device(device)
    if adapter is None:
        adapter = selected()
    return adapter, memory(adapter.name)
