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

import sys

from devshim.backends import registry
from devshim.backends.base import trace_constant
from devshim.errors import FirstCallInTraceError

__all__ = [
    "backend_for_tensor", "learn_type", "learn_class", "learn_types", "forget_types", "FAST_PATHS",
    "DEVICE_TABLE", "DEVICE_BY_ATTRIBUTE", "EXACT_DEVICE_TABLE", "DEVICE_OF", "COPY", "COPY_IF_NEEDED",
    "NATIVE_BY_ATTRIBUTE", "DEVICE_ATTRIBUTE_IS_NATIVE", "NATIVE_OF",
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
#: The types whose ``x.device`` is already the framework's own device object (torch, NumPy 2):
#: ``ds.device_of`` returns it as it is. (A dict, used as a set, so that torch.compile traces it.)
DEVICE_ATTRIBUTE_IS_NATIVE: dict = {}
NATIVE_OF: dict = {}
COPY: dict = {}
COPY_IF_NEEDED: dict = {}
#: ``FAST_PATHS[t]``: ``(DEVICE_OF[t], NATIVE_OF[t], COPY[t], COPY_IF_NEEDED[t])``, what ``learn_class``
#: hands back.
FAST_PATHS: dict = {}


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
        _learn(type(x), adapter)
    return adapter


@trace_constant
def learn_class(kind: type):
    """Fill the fast-path tables for tensors of class ``kind`` (``FAST_PATHS[kind]`` and the
    rest), learned from the class alone: True for a tensor class, False for a class that is no
    tensor, None when the loaded backends cannot tell from the class (ask ``learn_type`` then).

    torch.compile runs this outside its trace (``trace_constant``): the registry is built,
    adapters made and tables filled (locks and imports) in plain Python. When that happens
    inside a trace, the trace has already read the tables empty, so the torch adapter starts
    it over (``restart_trace``) and the second pass traces lookups only: a function whose
    devshim call is the process's first still compiles with ``fullgraph=True``.

    Example:
        >>> dispatch.learn_class(torch.Tensor), dispatch.FAST_PATHS[torch.Tensor][1](torch.ones(1))
        (True, device(type='cpu'))
    """
    if kind in FAST_PATHS:
        return True
    if kind in _type_owner and _type_owner[kind] is None:
        return False
    unsure = False
    for adapter in list(registry.loaded_adapters()):  # made here, not in a trace
        owns = adapter.is_tensor_type(kind)
        if owns:
            if kind not in FAST_PATHS:  # (the torch adapter fills its own when it is made)
                if not _type_owner:
                    registry.on_table_change(forget_types)
                _type_owner[kind] = adapter
                _learn(kind, adapter)
            if _tracing():
                for tracer in registry.loaded_adapters():
                    tracer.restart_trace()  # torch's Dynamo starts over and reads the tables filled
                raise FirstCallInTraceError(
                    f"devshim met {kind.__module__}.{kind.__qualname__} for the first time inside "
                    f"torch.compile, whose trace cannot follow the tables devshim fills then. Call any "
                    f"devshim function once before compiling (ds.try_gpu(), or ds.device_of(x) on such "
                    f"a tensor); its tables are filled now, so calling the compiled function again works."
                )
            return True
        unsure = unsure or owns is None
    if unsure:
        return None
    if not _type_owner:
        registry.on_table_change(forget_types)
    _type_owner[kind] = None
    return False


def _tracing() -> bool:
    """Whether torch.compile is tracing now (``learn_class`` runs outside its trace, during it)."""
    torch = sys.modules.get("torch")
    compiler = getattr(torch, "compiler", None)
    return compiler is not None and compiler.is_compiling()


def learn_types(adapter, kinds) -> None:
    """Fill the fast-path tables for the tensor classes ``kinds``, owned by ``adapter``, before any
    tensor is met (the torch adapter does, for ``torch.Tensor`` and ``torch.nn.Parameter``, when it
    is made): torch.compile then traces devshim's hot paths as lookups only, also on the first call.

    Example:
        >>> dispatch.learn_types(ds.get_backend("torch"), (torch.Tensor, torch.nn.Parameter))
    """
    for kind in kinds:
        if not _type_owner:
            registry.on_table_change(forget_types)
        _type_owner[kind] = adapter
        _learn(kind, adapter)


def _learn(kind: type, adapter) -> None:
    table = adapter.device_table()
    if table is not None:
        DEVICE_TABLE[kind] = table
        if table.attr == "device":
            DEVICE_BY_ATTRIBUTE[kind] = table
            NATIVE_BY_ATTRIBUTE[kind] = table.natives
            if table.attribute_is_native:
                DEVICE_ATTRIBUTE_IS_NATIVE[kind] = True
            if table.exact:
                EXACT_DEVICE_TABLE[kind] = table
    paths = (adapter.device_of_fn(), adapter.native_device_of_fn(), adapter.copy_fn(), adapter.copy_if_needed_fn())
    DEVICE_OF[kind], NATIVE_OF[kind], COPY[kind], COPY_IF_NEEDED[kind] = paths
    FAST_PATHS[kind] = paths


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
    DEVICE_ATTRIBUTE_IS_NATIVE.clear()
    NATIVE_OF.clear()
    COPY.clear()
    COPY_IF_NEEDED.clear()
    FAST_PATHS.clear()
