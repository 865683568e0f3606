"""The transfer guard: copies nobody asked for fail, or are logged, on every backend.

A transfer is *explicit* when devshim makes it for you (``to_device``,
``copy_if_needed``, ``to_numpy``, and everything built on them); those go
through ``devshim.transfer``, which marks them. Every other copy is
*implicit*: a framework reading a GPU tensor on the host for ``float(t)``, or
copying an op's input from one device to another. The guard decides, per
direction, what happens to implicit ones:

``"allow"``     nothing is checked (the default);
``"log"``       an ``ImplicitTransferWarning`` once per call site, and the report counts each one;
``"disallow"``  ``ImplicitTransferError`` (host reads) or ``DeviceMismatchError``
                (op inputs on another device) is raised before the copy happens.

The package, lowest module first:

``levels``     the levels, directions and kinds of event;
``state``      the levels in force per thread or asyncio task (a ContextVar) and the process default;
``marker``     the explicit-transfer marker the transfer door sets;
``hooks``      ``GuardHooks``, the contract each backend's ``guard.py`` implements;
``lifecycle``  when those hooks go in and out (the registry declares backends to it);
``report``     ``implicit()``, what hooks call, and the ``TransferReport`` a block yields;
``block``      ``transfer_guard``, above the backend registry.

Importing this package imports none of them: each name below is loaded on first use.

Example:
    >>> from devshim.guard import transfer_guard
    >>> with transfer_guard("log") as report:
    ...     pass
    >>> report.total
    0
"""

_EXPORTS = {
    "transfer_guard": "block",
    **dict.fromkeys(("TransferReport", "TransferEvent", "implicit", "crossing", "read_name", "direction_of"), "report"),
    **dict.fromkeys(("GuardState", "current"), "state"),
    **dict.fromkeys(("GuardHooks", "mark_wrapper", "original_of", "is_wrapper"), "hooks"),
    **dict.fromkeys(("ALLOW", "LOG", "DISALLOW", "LEVELS", "DIRECTIONS", "KINDS", "READ", "OP_INPUT",
                     "TO_DEVICE"), "levels"),
}
_SUBMODULES = ("levels", "state", "marker", "hooks", "lifecycle", "report", "block")

__all__ = list(_EXPORTS)


def __getattr__(name):
    import importlib

    module = _EXPORTS.get(name)
    if module is not None:
        value = getattr(importlib.import_module(f"devshim.guard.{module}"), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"devshim.guard.{name}")
    else:
        raise AttributeError(f"module 'devshim.guard' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__) | set(_SUBMODULES))
