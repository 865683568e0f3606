"""Dispatch on a tensor's type: which backend owns it, and that backend's fast paths.

Functions that take a tensor dispatch on its type. Only backends whose
framework is already in ``sys.modules`` are asked, so dispatch never imports a
framework, and the answer is remembered per type. ``learn_type`` also fills
the tables the public hot paths read (``devshim/api.py``): one dict lookup on
``type(x)`` finds the owning backend's ready-made function.

Example:
    >>> from devshim.backends import dispatch
    >>> dispatch.backend_for_tensor(torch.ones(1)).name
    'torch'
"""

from __future__ import annotations

from devshim.backends import registry

__all__ = [
    "backend_for_tensor", "learn_type", "forget_types",
    "DEVICE_TABLE", "DEVICE_BY_ATTRIBUTE", "EXACT_DEVICE_TABLE", "DEVICE_OF", "COPY", "COPY_IF_NEEDED",
    "NATIVE_BY_ATTRIBUTE", "NATIVE_OF",
]

# Concrete type -> owning adapter, or None for "not a tensor". A framework's tensor
# types only exist once it is imported, so even a negative answer never goes stale.
_type_owner: dict = {}

#: Per tensor type, the owning adapter's fast paths, filled by ``learn_type``:
#: ``DEVICE_TABLE[t]`` (a DeviceTable, for backends that have one), ``DEVICE_OF[t](x)``,
#: ``COPY[t](x, spec, non_blocking)``, ``COPY_IF_NEEDED[t](x, spec)``.
DEVICE_TABLE: dict = {}
#: The DeviceTables keyed by ``x.device`` itself (torch, TensorFlow, JAX, CuPy, NumPy 2): ``device_of``
#: reads them with two subscripts and no call.
DEVICE_BY_ATTRIBUTE: dict = {}
#: The DeviceTables that are ``exact`` (torch, NumPy): ``copy_if_needed`` finds "already there" in them.
EXACT_DEVICE_TABLE: dict = {}
DEVICE_OF: dict = {}
#: ``NATIVE_BY_ATTRIBUTE[t][x.device]``: the native device object ``ds.device_of`` returns (the
#: DeviceTable's ``natives``, for tables keyed by ``x.device``); ``NATIVE_OF[t](x)`` otherwise.
NATIVE_BY_ATTRIBUTE: dict = {}
NATIVE_OF: dict = {}
COPY: dict = {}
COPY_IF_NEEDED: dict = {}


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
    for adapter in registry.loaded_adapters():
        if adapter.is_tensor(x):
            owner = adapter
            break
    if not _type_owner:
        registry.on_table_change(forget_types)
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
            if table.attr == "device":
                DEVICE_BY_ATTRIBUTE[kind] = table
                NATIVE_BY_ATTRIBUTE[kind] = table.natives
                if table.exact:
                    EXACT_DEVICE_TABLE[kind] = table
        DEVICE_OF[kind] = adapter.device_of_fn()
        NATIVE_OF[kind] = adapter.native_device_of_fn()
        COPY[kind] = adapter.copy_fn()
        COPY_IF_NEEDED[kind] = adapter.copy_if_needed_fn()
    return adapter


def forget_types() -> None:
    """Forget every type's owner and fast paths (after backends are registered or removed).

    Example:
        >>> dispatch.forget_types()
    """
    _type_owner.clear()
    DEVICE_TABLE.clear()
    DEVICE_BY_ATTRIBUTE.clear()
    EXACT_DEVICE_TABLE.clear()
    DEVICE_OF.clear()
    NATIVE_BY_ATTRIBUTE.clear()
    NATIVE_OF.clear()
    COPY.clear()
    COPY_IF_NEEDED.clear()
