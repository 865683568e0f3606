"""Loading on first use, safely from any number of threads at once.

Two things live here, below every other devshim module:

- `lazy_names`: the one `__getattr__` (PEP 562) of devshim's packages (`devshim`,
  `devshim.guard`, `devshim.backends`): each exported name is imported the first
  time it is read. A package `__init__` never imports its own modules, so importing one
  module of a package never makes the package import its siblings: with no import circle,
  Python's per-module import locks hand every thread whole modules (two threads importing
  along a circle get a partially initialised module from one another).
- `LOCK`: the one lock under which devshim learns things on first use (the backend table,
  adapters, each tensor type's fast paths, the guard hooks, the selected backend). One lock
  rather than one per module: a thread holding one and waiting for another cannot meet a
  thread doing the opposite. A thread holding it may import modules; no module's body takes
  it, so a thread busy importing a module never waits for it, and the import finishes.

Example:
    >>> __getattr__, __dir__ = lazy_names(globals(), {"transfer_guard": "devshim.guard_block"})
"""

from __future__ import annotations

from _thread import RLock  # threading's own lock, without its import cost

__all__ = ["LOCK", "lazy_names", "load"]

#: Held while devshim learns anything on first use; re-entrant (making an adapter learns its types).
LOCK = RLock()


def load(namespace: dict, exports: dict, submodules, name: str):
    """The value of `name` in the package whose globals are `namespace`: an exported name
    (`exports` maps it to the module defining it) or a submodule, imported now and kept in
    `namespace` so that the next read finds it there.

    Example:
        >>> load(globals(), {"Device": "devshim._device"}, (), "Device")
        <class 'devshim._device.Device'>
    """
    import importlib

    package = namespace["__name__"]
    module = exports.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
    elif name in submodules:
        value = importlib.import_module(f"{package}.{name}")
    else:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    namespace[name] = value
    return value


def lazy_names(namespace: dict, exports: dict, submodules=()) -> tuple:
    """`(__getattr__, __dir__)` for a package whose globals are `namespace`: `exports`
    maps each public name to the module defining it, `submodules` names the modules read as
    attributes; each is imported on first use.

    Example:
        >>> __getattr__, __dir__ = lazy_names(globals(), {"GuardHooks": "devshim.guard.hooks"}, ("hooks",))
    """

    def __getattr__(name: str):
        return load(namespace, exports, submodules, name)

    def __dir__() -> list:
        return sorted(set(namespace) | set(exports) | set(submodules))

    return __getattr__, __dir__
